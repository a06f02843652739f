/**
 * What happens to a flow whose real server was deleted or quiesced (gracefulTermination.
 * expireNodestConn, the kernel's expire_nodest_conn, on by default as kube-proxy sets it):
 * a UDP flow moves to another server on its next datagram; an SCTP association's next packet ends
 * its entry and, being no INIT, is dropped, so the endpoints start a new association; a SYN on a
 * quiesced server's entry is a new connection (ip_vs_in, conn_reuse_mode=1, ≥ 5.16). With the
 * option off, the packets are dropped and the entry is left to its timer. The packet path as data.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import * as S from '../../conntrack/sctp-state';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { DROP, FORWARD } from '../../lb/verdict';
import { field, initValue, sctp, tcp, udp, type SctpChunk } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = ['10.0.0.1', '10.0.0.2'];
const DP = { vipCidrs: ['10.96.0.0/24'], workers: 1, tableSize: 1024, maxRealServers: 16, maxServices: 8 };

function doc(protocol: string, servers: { address: string; weight?: number }[], expireNodestConn: boolean) {
  return {
    dataplane: DP,
    gracefulTermination: { expireNodestConn },
    services: [{ protocol, address: VIP, port: 80, scheduler: 'rr', realServers: servers.map((s) => ({ port: 8080, ...s })) }],
  };
}

/** A processor for the service, and `change` to apply another configuration to it (as a reload). */
function setup(protocol: string, expireNodestConn: boolean) {
  const p = makeProcessor(
    doc(
      protocol,
      RS.map((address) => ({ address })),
      expireNodestConn,
    ),
  );
  const change = (servers: { address: string; weight?: number }[]) =>
    p.proc.setSnapshot(p.model.apply(validateConfig(doc(protocol, servers, expireNodestConn))));
  const nodestExpired = () => p.counters[L.C_NODEST_EXPIRED];
  const live = () => {
    let n = 0;
    p.table.forEach(() => n++);
    return n;
  };
  return { ...p, change, nodestExpired, live };
}
const other = (rip: string) => RS.find((a) => a !== rip)!;

test('expire_nodest_conn: a UDP flow of a deleted server moves to another server on its next datagram', () => {
  const { run, change, nodestExpired, drops } = setup('udp', true);
  const first = run(udp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80 }));
  const rip = field(first.pkt).dst;
  assert.equal(run(udp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80 })).v, FORWARD);
  change([{ address: other(rip) }]); // UDP: deleted at once, as kube-proxy deletes it
  const next = run(udp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80 }));
  assert.equal(next.v, FORWARD);
  assert.equal(field(next.pkt).dst, other(rip), 'the next datagram goes to the remaining server');
  assert.equal(nodestExpired(), 1);
  assert.equal(drops('real_server_gone'), 0);
  assert.equal(field(run(udp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80 })).pkt).dst, other(rip), 'and stays there');
});

test("expire_nodest_conn off: the datagrams of a deleted server's flow are dropped (counted) and the entry waits for its timer", () => {
  const { run, change, nodestExpired, drops, live } = setup('udp', false);
  const rip = field(run(udp({ src: CLIENT, dst: VIP, sport: 40001, dport: 80 })).pkt).dst;
  change([{ address: other(rip) }]);
  assert.equal(run(udp({ src: CLIENT, dst: VIP, sport: 40001, dport: 80 })).v, DROP);
  assert.equal(run(udp({ src: CLIENT, dst: VIP, sport: 40001, dport: 80 })).v, DROP);
  assert.equal(drops('real_server_gone'), 2);
  assert.equal(nodestExpired(), 0);
  assert.equal(live(), 1, 'the entry is kept');
});

const INIT: SctpChunk = { type: S.SCTP_CID_INIT, value: initValue(0x1111) };
const INIT_ACK: SctpChunk = { type: S.SCTP_CID_INIT_ACK, value: initValue(0x2222, new Uint8Array([0, 7, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8])) };
const COOKIE_ECHO: SctpChunk = { type: S.SCTP_CID_COOKIE_ECHO, value: new Uint8Array(8) };
const COOKIE_ACK: SctpChunk = { type: S.SCTP_CID_COOKIE_ACK };
const DATA: SctpChunk = { type: S.SCTP_CID_DATA, flags: 3, value: new Uint8Array(16).fill(0x61) };
const fromClient = (chunks: SctpChunk[], vtag = 0x2222) => sctp({ src: CLIENT, dst: VIP, sport: 50000, dport: 80, vtag, chunks });
const fromServer = (rip: string, chunks: SctpChunk[]) => sctp({ src: rip, dst: CLIENT, sport: 8080, dport: 50000, vtag: 0x1111, chunks });

test('SCTP after its server is deleted: the next packet ends the entry and, being no INIT, is dropped; a new INIT goes to another server', () => {
  const { run, change, nodestExpired, drops, live, table } = setup('sctp', true);
  const init = run(fromClient([INIT], 0));
  assert.equal(init.v, FORWARD);
  const rip = field(init.pkt).dst;
  run(fromServer(rip, [INIT_ACK]));
  run(fromClient([COOKIE_ECHO]));
  run(fromServer(rip, [COOKIE_ACK]));
  assert.equal(run(fromClient([DATA])).v, FORWARD);
  let state = -1;
  table.forEach((_e, o) => (state = table.i32[o + L.E_STATE]!));
  assert.equal(S.SCTP_STATE_NAMES[state], 'ESTABLISHED');

  change([{ address: other(rip) }]); // SCTP: deleted at once
  assert.equal(run(fromClient([DATA])).v, DROP, 'DATA of the old association');
  assert.equal(nodestExpired(), 1);
  assert.equal(drops('no_connection'), 1, 'no INIT: sctp_conn_schedule schedules nothing');
  assert.equal(live(), 0, 'the entry is gone');
  // The endpoints start a new association, which goes to the remaining server.
  const again = run(fromClient([INIT], 0));
  assert.equal(again.v, FORWARD);
  assert.equal(field(again.pkt).dst, other(rip));
});

test('SCTP after its server is deleted, expire_nodest_conn off: dropped as real_server_gone, the entry left to its timer', () => {
  const { run, change, nodestExpired, drops, live } = setup('sctp', false);
  const rip = field(run(fromClient([INIT], 0)).pkt).dst;
  run(fromServer(rip, [INIT_ACK]));
  change([{ address: other(rip) }]);
  assert.equal(run(fromClient([COOKIE_ECHO])).v, DROP);
  assert.equal(drops('real_server_gone'), 1);
  assert.equal(nodestExpired(), 0);
  assert.equal(live(), 1);
});

test('a SYN on the entry of a quiesced (weight 0) server is a new connection to another server; other segments stay', () => {
  const { run, change, live } = setup('tcp', true);
  const syn = tcp({ src: CLIENT, dst: VIP, sport: 41000, flags: TCPF_SYN });
  const rip = field(run(syn).pkt).dst;
  run(tcp({ src: rip, dst: CLIENT, sport: 8080, dport: 41000, flags: TCPF_SYN | TCPF_ACK }));
  run(tcp({ src: CLIENT, dst: VIP, sport: 41000, flags: TCPF_ACK }));
  change(RS.map((address) => ({ address, weight: address === rip ? 0 : 1 })));
  // Mid-flow segments of the established connection keep going to the weight-0 server.
  const ack = run(tcp({ src: CLIENT, dst: VIP, sport: 41000, flags: TCPF_ACK, payload: new Uint8Array(5) }));
  assert.deepEqual([ack.v, field(ack.pkt).dst], [FORWARD, rip]);
  // A SYN reusing its ports (a client that reuses ports fast) is rescheduled.
  const again = run(tcp({ src: CLIENT, dst: VIP, sport: 41000, flags: TCPF_SYN, seq: 99999 }));
  assert.equal(again.v, FORWARD);
  assert.equal(field(again.pkt).dst, other(rip));
  assert.equal(live(), 1, 'the old entry was replaced');
});

test("expire_nodest_conn off: a SYN on a quiesced server's established entry stays on that server", () => {
  const { run, change } = setup('tcp', false);
  const rip = field(run(tcp({ src: CLIENT, dst: VIP, sport: 41001, flags: TCPF_SYN })).pkt).dst;
  run(tcp({ src: rip, dst: CLIENT, sport: 8080, dport: 41001, flags: TCPF_SYN | TCPF_ACK }));
  run(tcp({ src: CLIENT, dst: VIP, sport: 41001, flags: TCPF_ACK }));
  change(RS.map((address) => ({ address, weight: address === rip ? 0 : 1 })));
  const again = run(tcp({ src: CLIENT, dst: VIP, sport: 41001, flags: TCPF_SYN, seq: 99999 }));
  assert.deepEqual([again.v, field(again.pkt).dst], [FORWARD, rip]);
});
