/**
 * Full-NAT and a client that reuses its port (lb/core.ts inbound, FLOW_REUSE): the new SYN on an
 * entry in TIME_WAIT starts a new connection (conn_reuse_mode=1), which keeps the old one's real
 * server and pool address and port. That server closed first and holds a TIME_WAIT socket for
 * (pool address:port, server:port); the client's SYN on the same port is newer by its own
 * timestamps and sequence numbers and is taken, where another client's SYN met there by a new pool
 * port was refused about half the time (PAWS; perf/LOG.md). Masq reschedules as before
 * (processor.test.ts), and so does full-NAT when the old server is quiesced or overloaded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_FIN, TCPF_SYN } from '../../conntrack/state';
import { FORWARD } from '../../lb/verdict';
import { field, field6, tcp, tcp6 } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const CLIENT = '192.168.1.100';
const CLIENT6 = '2001:db8::100';
const POOL = '10.99.0.1';
const POOL6 = 'fd00:99::1';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];
const RS6 = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];

/** rs1: more fields for the IPv4 service's first real server (thresholds). */
const doc = (weights = [1, 1, 1], rs1: Record<string, unknown> = {}) => ({
  dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], fullnat: { addresses: [POOL, POOL6] } },
  services: [
    {
      protocol: 'tcp',
      address: VIP,
      port: 80,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: RS.map((a, i) => ({ address: a, port: 8080, weight: weights[i], ...(i === 0 ? rs1 : {}) })),
    },
    {
      protocol: 'tcp',
      address: VIP6,
      port: 80,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: RS6.map((a, i) => ({ address: a, port: 8080, weight: weights[i] })),
    },
  ],
});

type Proc = ReturnType<typeof makeProcessor>;

/** A whole connection from the client's port through the full-NAT service, closed by the server first: its server and pool endpoint. */
function connection(p: Proc, sport: number, v6 = false): { server: string; pool: string; lport: number } {
  const mk = v6 ? tcp6 : tcp;
  const fld = v6 ? field6 : field;
  const c = { src: v6 ? CLIENT6 : CLIENT, dst: v6 ? VIP6 : VIP, sport, dport: 80 };
  const syn = mk({ ...c, flags: TCPF_SYN });
  assert.equal(p.run(syn).v, FORWARD);
  const f = fld(syn);
  const s = { src: f.dst, dst: f.src, sport: 8080, dport: f.sport };
  assert.equal(p.run(mk({ ...s, flags: TCPF_SYN | TCPF_ACK })).v, FORWARD);
  assert.equal(p.run(mk({ ...c, flags: TCPF_ACK })).v, FORWARD);
  assert.equal(p.run(mk({ ...s, flags: TCPF_FIN | TCPF_ACK })).v, FORWARD); // the server closes first
  assert.equal(p.run(mk({ ...c, flags: TCPF_FIN | TCPF_ACK })).v, FORWARD);
  return { server: f.dst, pool: f.src, lport: f.sport };
}

for (const v6 of [false, true]) {
  test(`IPv${v6 ? 6 : 4}: a SYN on a full-NAT entry in TIME_WAIT keeps its real server and pool port; other clients go on with rr`, () => {
    const p = makeProcessor(doc());
    const first = connection(p, 43000, v6);
    const other = connection(p, 43001, v6);
    assert.notEqual(other.server, first.server, 'rr moved on for another client port');
    const again = connection(p, 43000, v6);
    assert.deepEqual(again, first, 'the same client port: the same server, pool address and port');
    assert.equal(p.table.count(), 2, 'the old entry was replaced, not kept beside the new one');
    const next = connection(p, 43002, v6);
    assert.notEqual(next.server, other.server, 'rr was not stalled by the kept connection');
  });
}

test('an overloaded server (its upper threshold reached) is not kept: the SYN is scheduled again, to another server', () => {
  // rs1: overloaded at 2 connections, cleared below 1 (__ip_vs_unbind_dest: lower threshold set),
  // so replacing the TIME_WAIT entry (one of the two) leaves it overloaded when the SYN is scheduled.
  const p = makeProcessor(doc([1, 1, 1], { upperThreshold: 2, lowerThreshold: 1 }));
  // One closed connection per server (rr): the one on rs1 is the port that comes back.
  const servers = [43000, 43001, 43002].map((sport) => connection(p, sport).server);
  assert.deepEqual([...servers].sort(), RS, 'rr gave each server one connection');
  const port = 43000 + servers.indexOf(RS[0]!);
  // A second connection to rs1, left open: rs1 holds 2 (one in TIME_WAIT), its threshold.
  let open = '';
  for (let sport = 43010; sport < 43013 && open !== RS[0]; sport++) {
    const syn = tcp({ src: CLIENT, dst: VIP, sport, dport: 80, flags: TCPF_SYN });
    assert.equal(p.run(syn).v, FORWARD);
    open = field(syn).dst;
  }
  assert.equal(open, RS[0], 'rr came round to rs1 again');
  const rs1 = () =>
    p.model
      .list()
      .find((s) => s.cfg.address === VIP)!
      .realServers.find((r) => r.address === RS[0])!;
  assert.equal(rs1().overloaded, true, 'rs1 overloaded at its upper threshold');
  const again = connection(p, port);
  assert.notEqual(again.server, RS[0], 'the overloaded server is not kept for the reused port');
  assert.equal(rs1().overloaded, true, 'rs1 still overloaded (one connection left, lower threshold 1)');
});

test('a quiesced server (weight 0) is not kept: the SYN is scheduled again, to another server and port', () => {
  const p = makeProcessor(doc());
  const first = connection(p, 43000);
  const i = RS.indexOf(first.server);
  p.apply(doc(RS.map((_, k) => (k === i ? 0 : 1))));
  const again = connection(p, 43000);
  assert.notEqual(again.server, first.server);
});
