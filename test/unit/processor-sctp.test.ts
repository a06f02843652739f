/**
 * SCTP through the packet path, as data: crafted SCTP packets in (this machine's kernel, like
 * CI's, has no SCTP module, so no real SCTP endpoint can make them), packets out, verdicts, the
 * entry's state and timer, and the real server's ActiveConn/InActConn. Every CRC32c written by
 * the dataplane is checked with an independent bitwise CRC (test/helpers/packets.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import * as S from '../../conntrack/sctp-state';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, field, initValue, sctp, type SctpChunk } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];
const PORT = 3868;
const RPORT = 13868;

const service = (more: Record<string, unknown> = {}) => ({
  protocol: 'sctp',
  address: VIP,
  port: PORT,
  scheduler: 'rr',
  realServers: RS.map((a) => ({ address: a, port: RPORT })),
  ...more,
});

function setup(services: unknown[] = [service()], extra: { dataplane?: Record<string, unknown>; timeouts?: Record<string, unknown> } = {}) {
  const { model, table, proc, run, drops, rs, counters, now } = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], ...extra.dataplane },
    ...(extra.timeouts ? { timeouts: extra.timeouts } : {}),
    services,
  });
  /** [ActiveConn, InActConn] of the real server with this address. */
  const conns = (addr: string) => {
    const slot = model.list()[0]!.realServers.find((r) => r.address === addr)!.slot;
    return [rs[slot * L.RS_WORDS + L.RS_ACTIVE], rs[slot * L.RS_WORDS + L.RS_INACTIVE]];
  };
  /** State name and seconds left of the one live entry of this client port. */
  const entry = (cport: number) => {
    let found: { state: string; secs: number } | null = null;
    table.forEach((_e, o) => {
      if (table.i32[o + L.E_CPORTS]! >>> 16 === cport && !(table.i32[o + L.E_FLAGS]! & L.F_TEMPLATE)) {
        found = { state: S.SCTP_STATE_NAMES[table.i32[o + L.E_STATE]!]!, secs: ((table.i32[o + L.E_EXPIRES]! - now()) | 0) / 1000 };
      }
    });
    return found as { state: string; secs: number } | null;
  };
  return { run, drops, conns, entry, table, counters, proc };
}

// Packets of one association: client 192.168.1.100:cport ↔ VIP:3868 (the server side from rip:13868).
const fromClient = (cport: number, chunks: SctpChunk[], vtag = 0x5eed) =>
  sctp({ src: CLIENT, dst: VIP, sport: cport, dport: PORT, vtag, chunks });
const fromServer = (rip: string, cport: number, chunks: SctpChunk[], vtag = 0x1111) =>
  sctp({ src: rip, dst: CLIENT, sport: RPORT, dport: cport, vtag, chunks });
const INIT: SctpChunk = { type: S.SCTP_CID_INIT, value: initValue(0x1111) };
const INIT_ACK: SctpChunk = { type: S.SCTP_CID_INIT_ACK, value: initValue(0x2222, new Uint8Array([0, 7, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8])) };
const COOKIE_ECHO: SctpChunk = { type: S.SCTP_CID_COOKIE_ECHO, value: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]) };
const COOKIE_ACK: SctpChunk = { type: S.SCTP_CID_COOKIE_ACK };
const DATA: SctpChunk = { type: S.SCTP_CID_DATA, flags: 3, value: new Uint8Array(12 + 37).fill(0x61) };
const SACK: SctpChunk = { type: S.SCTP_CID_SACK, value: new Uint8Array(12) };
const SHUTDOWN: SctpChunk = { type: S.SCTP_CID_SHUTDOWN, value: new Uint8Array(4) };
const SHUTDOWN_ACK: SctpChunk = { type: S.SCTP_CID_SHUTDOWN_ACK };
const SHUTDOWN_COMPLETE: SctpChunk = { type: S.SCTP_CID_SHUTDOWN_COMPLETE };
const ABORT: SctpChunk = { type: S.SCTP_CID_ABORT };

test('an INIT to the VIP goes to a real server: destination RIP:port, CRC32c recomputed, entry INIT1 (4 s), InActConn', () => {
  const { run, entry, conns } = setup();
  const r = run(fromClient(5000, [INIT]));
  assert.equal(r.v, FORWARD);
  const f = field(r.pkt);
  assert.deepEqual([f.src, f.sport, f.dst, f.dport, f.proto], [CLIENT, 5000, RS[2], RPORT, P.IPPROTO_SCTP]);
  assert.ok(checksumsValid(r.pkt), 'IP checksum and CRC32c valid after the rewrite');
  assert.equal(P.u32(r.pkt, 24), 0x5eed, 'verification tag untouched');
  assert.deepEqual(entry(5000), { state: 'INIT1', secs: 4 });
  assert.deepEqual(conns(RS[2]!), [0, 1]);
});

test('a whole association: handshake to ESTABLISHED (ActiveConn), data both ways, shutdown to CLOSED (InActConn)', () => {
  const { run, entry, conns } = setup();
  const cport = 5001;
  const rip = field(run(fromClient(cport, [INIT])).pkt).dst;
  const steps: [string, Uint8Array, string, number, [number, number]][] = [
    ['INIT ACK', fromServer(rip, cport, [INIT_ACK], 0x1111), 'C-SENT', 61, [0, 1]],
    ['COOKIE ECHO', fromClient(cport, [COOKIE_ECHO], 0x2222), 'C-REPLIED', 61, [0, 1]],
    ['COOKIE ACK', fromServer(rip, cport, [COOKIE_ACK], 0x1111), 'ESTABLISHED', 900, [1, 0]],
    ['DATA', fromClient(cport, [DATA], 0x2222), 'ESTABLISHED', 900, [1, 0]],
    ['SACK + DATA', fromServer(rip, cport, [SACK, DATA], 0x1111), 'ESTABLISHED', 900, [1, 0]],
    ['SHUTDOWN', fromClient(cport, [SHUTDOWN], 0x2222), 'S-RECEIVED', 61, [0, 1]],
    ['SHUTDOWN ACK', fromServer(rip, cport, [SHUTDOWN_ACK], 0x1111), 'S-ACK-SENT', 61, [0, 1]],
    ['SHUTDOWN COMPLETE', fromClient(cport, [SHUTDOWN_COMPLETE], 0x2222), 'CLOSED', 61, [0, 1]],
  ];
  for (const [name, pkt, state, secs, counts] of steps) {
    const fromSrv = field(pkt).src === rip;
    const r = run(pkt);
    assert.equal(r.v, FORWARD, name);
    const f = field(r.pkt);
    if (fromSrv) assert.deepEqual([f.src, f.sport, f.dst, f.dport], [VIP, PORT, CLIENT, cport], `${name}: the reply comes from VIP:port`);
    else assert.deepEqual([f.dst, f.dport], [rip, RPORT], `${name}: to the same real server`);
    assert.ok(checksumsValid(r.pkt), `${name}: CRC32c valid`);
    assert.deepEqual(entry(cport), { state, secs }, name);
    assert.deepEqual(conns(rip), counts, `${name}: [ActiveConn, InActConn]`);
  }
});

test('an ABORT bundled after COOKIE ECHO closes the association', () => {
  const { run, entry } = setup();
  const rip = field(run(fromClient(5002, [INIT])).pkt).dst;
  run(fromServer(rip, 5002, [INIT_ACK]));
  assert.equal(run(fromClient(5002, [COOKIE_ECHO, ABORT])).v, FORWARD);
  assert.equal(entry(5002)!.state, 'CLOSED');
});

test('the server refusing an INIT with ABORT leaves a REJECTED entry for 4 s', () => {
  const { run, entry } = setup();
  const rip = field(run(fromClient(5003, [INIT])).pkt).dst;
  const r = run(fromServer(rip, 5003, [ABORT], 0x1111));
  assert.equal(r.v, FORWARD);
  assert.ok(checksumsValid(r.pkt));
  assert.deepEqual(entry(5003), { state: 'REJECTED', secs: 4 });
});

test('chunks other than INIT without an entry create nothing and are dropped (counted), as sctp_conn_schedule', () => {
  const { run, table, drops } = setup();
  for (const c of [DATA, COOKIE_ECHO, SHUTDOWN, ABORT, INIT_ACK]) assert.equal(run(fromClient(5004, [c])).v, DROP);
  assert.equal(table.count(), 0);
  assert.equal(drops('no_connection'), 5);
  assert.equal(run(fromServer(RS[0]!, 5004, [DATA])).v, DROP, 'a server packet with no entry');
  assert.equal(drops('no_connection'), 6);
});

test('an INIT on an entry in CLOSED starts a new association on the next real server; on a live one it does not', () => {
  const { run, entry } = setup();
  const cport = 5005;
  const first = field(run(fromClient(cport, [INIT])).pkt).dst;
  run(fromServer(first, cport, [INIT_ACK]));
  assert.equal(field(run(fromClient(cport, [INIT])).pkt).dst, first, 'a retransmitted INIT stays');
  run(fromClient(cport, [COOKIE_ECHO]));
  run(fromServer(first, cport, [COOKIE_ACK]));
  run(fromClient(cport, [ABORT]));
  assert.equal(entry(cport)!.state, 'CLOSED');
  const again = run(fromClient(cport, [INIT]));
  assert.notEqual(field(again.pkt).dst, first, 'rescheduled (conn_reuse_mode=1)');
  assert.deepEqual(entry(cport), { state: 'INIT1', secs: 4 });
});

test('malformed SCTP is dropped as sctp_bad, a wrong CRC32c as bad_checksum, and neither creates an entry', () => {
  const { run, table, drops } = setup();
  const noChunk = fromClient(5006, [INIT]).slice(0, 32);
  P.put16(noChunk, P.IP_TOTLEN, 32);
  P.put16(noChunk, P.IP_CSUM, 0);
  P.put16(noChunk, P.IP_CSUM, P.checksum(noChunk, 0, 20, 0));
  assert.equal(run(noChunk).v, DROP);
  const overrun = fromClient(5006, [INIT]);
  P.put16(overrun, 34, 200);
  assert.equal(run(overrun).v, DROP);
  assert.equal(drops('sctp_bad'), 2);
  const damaged = fromClient(5006, [INIT]);
  damaged[40]! ^= 0x10;
  assert.equal(run(damaged).v, DROP);
  assert.equal(drops('bad_checksum'), 1, 'never rewritten into a packet that looks intact');
  assert.equal(table.count(), 0);
});

test('no eligible real server answers an INIT with ICMP port unreachable; a VIP port without a service too', () => {
  const { run, drops, table } = setup([service({ realServers: RS.map((a) => ({ address: a, port: RPORT, weight: 0 })) })]);
  const r = run(fromClient(5007, [INIT]));
  assert.equal(r.v, REPLY);
  const f = field(r.reply!);
  assert.deepEqual([f.src, f.dst, f.icmpType, f.icmpCode], [VIP, CLIENT, 3, 3]);
  assert.equal(drops('no_real_server'), 1);
  const other = run(sctp({ src: CLIENT, dst: VIP, sport: 5007, dport: 9999, chunks: [INIT] }));
  assert.equal(other.v, REPLY);
  assert.equal(field(other.reply!).icmpType, 3);
  assert.equal(table.count(), 0);
});

test('timeouts.sctp sets the per-state timers', () => {
  const { run, entry } = setup([service()], { timeouts: { sctp: { INIT1: 10, COOKIE_SENT: '2m' } } });
  const rip = field(run(fromClient(5008, [INIT])).pkt).dst;
  assert.deepEqual(entry(5008), { state: 'INIT1', secs: 10 });
  run(fromServer(rip, 5008, [INIT_ACK]));
  assert.deepEqual(entry(5008), { state: 'C-SENT', secs: 120 });
});

test('full-NAT: the server sees a pool address and port, the CRC32c is valid both ways', () => {
  const { run, entry } = setup([service({ forwarding: 'fullnat' })], {
    dataplane: { fullnat: { addresses: ['10.99.0.1'], portMin: 20000, portMax: 20009 } },
  });
  const r = run(fromClient(5009, [INIT]));
  assert.equal(r.v, FORWARD);
  const f = field(r.pkt);
  assert.equal(f.src, '10.99.0.1');
  assert.ok(f.sport >= 20000 && f.sport <= 20009);
  assert.equal(f.dport, RPORT);
  assert.ok(checksumsValid(r.pkt));
  const reply = run(sctp({ src: f.dst, dst: '10.99.0.1', sport: RPORT, dport: f.sport, vtag: 0x1111, chunks: [INIT_ACK] }));
  assert.equal(reply.v, FORWARD);
  const g = field(reply.pkt);
  assert.deepEqual([g.src, g.sport, g.dst, g.dport], [VIP, PORT, CLIENT, 5009]);
  assert.ok(checksumsValid(reply.pkt));
  assert.equal(entry(5009)!.state, 'C-SENT');
});

test('tunnel: the INIT goes unchanged inside IPIP; one direction seen, COOKIE ECHO makes it ESTABLISHED', () => {
  const { run, entry } = setup([service({ forwarding: 'tunnel', realServers: RS.map((a) => ({ address: a })) })], {
    dataplane: { tunnelSource: '10.1.1.1' },
  });
  const init = fromClient(5010, [INIT]);
  const original = init.slice();
  const r = run(init);
  assert.equal(r.v, REPLY);
  assert.equal(field(r.reply!).proto, 4);
  assert.deepEqual([...r.reply!.subarray(20)], [...original], 'inner packet, CRC32c included, as the client sent it');
  assert.equal(r.reply!.length, original.length + 20);
  run(fromClient(5010, [COOKIE_ECHO]));
  assert.equal(entry(5010)!.state, 'ESTABLISHED');
});

test('an ICMP error from the client side about an SCTP flow reaches its real server, quoted ports translated', () => {
  const { run } = setup();
  const rip = field(run(fromClient(5011, [INIT])).pkt).dst;
  // Fragmentation needed on the client's path, quoting a reply VIP:3868 → client:5011.
  const quoted = fromServer(rip, 5011, [INIT_ACK]);
  P.put32(quoted, P.IP_SRC, P.u32(new Uint8Array([10, 96, 0, 10]), 0));
  P.put16(quoted, 20, PORT);
  const icmp = new Uint8Array(20 + 8 + 28);
  icmp[0] = 0x45;
  P.put16(icmp, P.IP_TOTLEN, icmp.length);
  icmp[P.IP_TTL] = 64;
  icmp[P.IP_PROTO] = P.IPPROTO_ICMP;
  P.put32(icmp, P.IP_SRC, P.u32(new Uint8Array([192, 168, 1, 1]), 0));
  P.put32(icmp, P.IP_DST, P.u32(new Uint8Array([10, 96, 0, 10]), 0));
  P.put16(icmp, P.IP_CSUM, P.checksum(icmp, 0, 20, 0));
  icmp[20] = P.ICMP_DEST_UNREACH;
  icmp[21] = P.ICMP_FRAG_NEEDED;
  P.put16(icmp, 26, 1400);
  icmp.set(quoted.subarray(0, 28), 28);
  P.put16(icmp, 22, P.checksum(icmp, 20, 36, 0));
  const r = run(icmp);
  assert.equal(r.v, FORWARD);
  assert.equal(field(r.pkt).dst, rip);
  assert.equal(P.u16(r.pkt, 48), RPORT, "quoted source port: the real server's");
  assert.ok(checksumsValid(r.pkt));
});
