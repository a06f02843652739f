/**
 * sloppy_tcp / sloppy_sctp (docs/sloppy.md): a packet other than a SYN (not a RST) or an INIT (not
 * an ABORT) with no connection starts one on a service that allows it — `auto`: a consistent
 * scheduler (mh, sh, dh), no persistence, no full-NAT server. Its entry takes the state the
 * kernel's table gives from NONE (tcp_conn_schedule then set_tcp_state), and two nodes with the
 * same configuration send the same mid-flow packet to the same server.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { SCTP_STATE_NAMES } from '../../conntrack/sctp-state';
import { TCP_NONE, TCP_STATE_NAMES, TCPF_ACK, TCPF_FIN, TCPF_PSH, TCPF_RST, TCPF_SYN, tcpNextState } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import { field, sctp, tcp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function node(svc: Record<string, unknown> = {}, dataplane: Record<string, unknown> = {}, o: { ring?: boolean } = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] }, ...dataplane },
      services: [
        {
          protocol: 'tcp',
          address: VIP,
          port: 80,
          scheduler: 'mh',
          realServers: RS.map((a) => ({ address: a, port: 8080 })),
          ...svc,
        },
        { protocol: 'sctp', address: VIP, port: 3868, scheduler: 'sh', realServers: RS.map((a) => ({ address: a, port: 3868 })) },
      ],
      ...(o.ring ? { redis: { url: 'redis://127.0.0.1:1' } } : {}),
    },
    { ring: o.ring ?? false },
  );
}
type Node = ReturnType<typeof node>;

/** The state of the one entry with client port sport (a name), or null. */
function stateOf(n: Node, sport: number): string | null {
  let s: string | null = null;
  n.table.forEach((_e, o) => {
    const a = n.table.i32;
    if (a[o + L.E_CPORTS]! >>> 16 !== sport) return;
    const st = a[o + L.E_STATE]!;
    s = (a[o + L.E_PROTO]! & 0xff) === 132 ? SCTP_STATE_NAMES[st]! : TCP_STATE_NAMES[st]!;
  });
  return s;
}

const seg = (sport: number, flags: number, src = '192.0.2.7') => tcp({ src, dst: VIP, sport, dport: 80, flags, seq: 5000, ack: 9000 });

test('mh, sloppy auto: a mid-flow ACK with no connection starts one, ESTABLISHED, counted; a RST never does', () => {
  const n = node();
  const pkt = seg(41000, TCPF_ACK | TCPF_PSH);
  assert.equal(n.run(pkt).v, FORWARD);
  assert.ok(RS.includes(field(pkt).dst));
  assert.equal(stateOf(n, 41000), 'ESTABLISHED');
  assert.equal(n.counters[L.C_SLOPPY], 1);
  assert.equal(n.counters[L.C_CONNS_NEW], 1);
  assert.equal(n.run(seg(41001, TCPF_RST | TCPF_ACK)).v, DROP);
  assert.equal(n.drops('no_connection'), 1, 'a RST is dropped, never answered, never a connection');
  assert.equal(stateOf(n, 41001), null);
  // A SYN still starts one the usual way, and is no sloppy start.
  assert.equal(n.run(seg(41002, TCPF_SYN)).v, FORWARD);
  assert.equal(n.counters[L.C_SLOPPY], 1);
});

test("the entry's state is the kernel table's from NONE for the packet's flags (set_tcp_state, INPUT)", () => {
  const cases: [string, number][] = [
    ['ACK', TCPF_ACK],
    ['ACK|PSH', TCPF_ACK | TCPF_PSH],
    ['FIN|ACK', TCPF_FIN | TCPF_ACK],
    ['SYN|ACK', TCPF_SYN | TCPF_ACK],
    ['no flag', 0],
  ];
  for (const [name, flags] of cases) {
    const n = node();
    const want = TCP_STATE_NAMES[tcpNextState(0, flags, TCP_NONE)];
    assert.equal(n.run(seg(42000, flags)).v, FORWARD, name);
    assert.equal(stateOf(n, 42000), want, name);
  }
});

test('two nodes with the same configuration send the same mid-flow packets to the same servers (mh, sh, dh)', () => {
  for (const scheduler of ['mh', 'sh', 'dh']) {
    const a = node({ scheduler });
    const b = node({ scheduler });
    // b has seen other traffic first: mh/sh/dh keep no state that changes their choice.
    for (let i = 0; i < 50; i++) b.run(seg(30000 + i, TCPF_SYN, `198.51.100.${i + 1}`));
    for (let i = 0; i < 60; i++) {
      const src = `192.0.2.${(i % 250) + 1}`;
      const pa = seg(43000 + i, TCPF_ACK, src);
      const pb = seg(43000 + i, TCPF_ACK, src);
      assert.equal(a.run(pa).v, FORWARD);
      assert.equal(b.run(pb).v, FORWARD);
      assert.equal(field(pb).dst, field(pa).dst, `${scheduler} ${src}:${43000 + i}`);
    }
  }
});

test('auto is off for stateful schedulers, persistence and full-NAT: those answer a RST as before', () => {
  const refused = (n: Node) => {
    const v = n.run(seg(44000, TCPF_ACK)).v;
    assert.equal(v, REPLY, 'a RST back');
    assert.equal(n.drops('no_connection'), 1);
    assert.equal(n.counters[L.C_SLOPPY], 0);
  };
  refused(node({ scheduler: 'rr' }));
  refused(node({ scheduler: 'wlc' }));
  refused(node({ persistence: 300 }));
  refused(node({ forwarding: 'fullnat' }));
  refused(node({}, { sloppyTcp: false }));
  // Explicitly on: rr sends it where rr's turn is (the operator's choice, docs/sloppy.md).
  const rr = node({ scheduler: 'rr', sloppy: true });
  assert.equal(rr.run(seg(44001, TCPF_ACK)).v, FORWARD);
  assert.equal(rr.counters[L.C_SLOPPY], 1);
  // A service's own `sloppy: false` wins over the global setting.
  refused(node({ sloppy: false }, { sloppyTcp: true }));
});

test('sloppy on a full-NAT service is refused with the field and the reason; on UDP too', () => {
  const doc = (svc: Record<string, unknown>) => ({
    dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] } },
    services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'mh', realServers: [{ address: RS[0] }], ...svc }],
  });
  assert.throws(
    () => validateConfig(doc({ forwarding: 'fullnat', sloppy: true })),
    /services\[0\]\.sloppy: .*fullnat: a mid-flow packet cannot be given the pool/,
  );
  assert.throws(() => validateConfig(doc({ protocol: 'udp', sloppy: true })), /services\[0\]\.sloppy: applies to TCP and SCTP/);
  assert.throws(
    () => validateConfig({ ...doc({}), dataplane: { vipCidrs: ['10.96.0.0/24'], sloppyTcp: 'yes' } }),
    /dataplane\.sloppyTcp: must be true, false or auto/,
  );
});

test('with Redis a mid-flow packet is parked for a lookup first, not scheduled at once', () => {
  const n = node({}, {}, { ring: true });
  assert.equal(n.run(seg(45000, TCPF_ACK)).v, DROP);
  assert.equal(n.counters[L.C_PARKED], 1);
  assert.equal(n.counters[L.C_SLOPPY], 0);
  assert.equal(stateOf(n, 45000), null);
});

test('sloppy_sctp: a DATA chunk with no association starts one (sh, auto); an ABORT never does', () => {
  const n = node();
  const data = sctp({
    src: '192.0.2.9',
    dst: VIP,
    sport: 50000,
    dport: 3868,
    vtag: 0x1234,
    chunks: [{ type: 0, value: new Uint8Array(16) }],
  });
  assert.equal(n.run(data).v, FORWARD);
  assert.ok(RS.includes(field(data).dst));
  assert.ok(stateOf(n, 50000) !== null, 'an association entry');
  assert.equal(n.counters[L.C_SLOPPY], 1);
  const abort = sctp({ src: '192.0.2.9', dst: VIP, sport: 50001, dport: 3868, vtag: 0x1234, chunks: [{ type: 6 }] });
  assert.equal(n.run(abort).v, DROP);
  assert.equal(stateOf(n, 50001), null);
});
