/**
 * Corners of the packet path the README promises, as data (packet in → packet out, verdict,
 * counter): ICMP source quench translated like the other errors, IPv6 hop-by-hop and routing
 * headers stepped over, IPv6 fragments dropped, the path-MTU corners (the IPv6 1280 floor, the
 * 40-byte ip6ip6 overhead, a GSO super-packet checked per segment), a computed UDP checksum of 0
 * sent as 0xffff, and `answerPing: false`. Checksums of what comes out are checked with the
 * reference sum below, written from RFC 1071 independently of net/packet.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { field, field6, icmp6, icmpEcho, partial, tcp, tcp6, udp, udp6 } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const CLIENT = '192.168.1.100';
const CLIENT6 = '2001:db8:1::100';
const ROUTER = '192.168.7.1';
const RS = '10.0.0.1';
const RS6 = 'fd00:10::1';

/** RFC 1071: the ones'-complement sum of 16-bit big-endian words, folded; 0xffff when a checksum over it is valid. */
function refSum(parts: number[][]): number {
  let s = 0;
  for (const bytes of parts) for (let i = 0; i < bytes.length; i += 2) s += (bytes[i]! << 8) | (bytes[i + 1] ?? 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}
const arr = (b: Uint8Array, from: number, to: number) => [...b.subarray(from, to)];
/** The L4 checksum of an IPv4 TCP/UDP packet is valid (reference sum over the pseudo-header). */
function l4Valid4(b: Uint8Array): boolean {
  const ihl = (b[0]! & 15) * 4;
  const len = ((b[2]! << 8) | b[3]!) - ihl;
  return refSum([arr(b, 12, 20), [0, b[9]!, len >> 8, len & 255], arr(b, ihl, ihl + len)]) === 0xffff;
}
/** The L4 checksum of an IPv6 packet whose L4 header starts at l4 is valid. */
function l4Valid6(b: Uint8Array, l4: number, next: number): boolean {
  const len = 40 + ((b[4]! << 8) | b[5]!) - l4;
  return refSum([arr(b, 8, 40), [0, 0, len >> 8, len & 255, 0, 0, 0, next], arr(b, l4, l4 + len)]) === 0xffff;
}

function setup4(protocol: 'tcp' | 'udp', o: { offload?: boolean; dataplane?: Record<string, unknown> } = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], ...o.dataplane },
      services: [{ protocol, address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] }],
    },
    { offload: o.offload ?? false, outBytes: 1 << 17 },
  );
}
function setup6(protocol: 'tcp' | 'udp', forwarding = 'masq', dataplane: Record<string, unknown> = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['fd00:96::/64'], tunnelSource6: 'fd00:1::1', ...dataplane },
      services: [
        {
          protocol,
          address: VIP6,
          port: 80,
          scheduler: 'rr',
          forwarding,
          realServers: [forwarding === 'tunnel' ? { address: RS6 } : { address: RS6, port: 8080 }],
        },
      ],
    },
    { outBytes: 1 << 17 },
  );
}

/** An ICMP error from `src` to `dst` quoting `about` (its IP header + 8 bytes, RFC 792). */
function icmpError(src: string, dst: string, type: number, code: number, about: Uint8Array): Uint8Array {
  const quoted = about.subarray(0, ((about[0]! & 15) << 2) + 8);
  const b = new Uint8Array(28 + quoted.length);
  b[0] = 0x45;
  P.put16(b, P.IP_TOTLEN, b.length);
  b[P.IP_TTL] = 64;
  b[P.IP_PROTO] = P.IPPROTO_ICMP;
  P.put32(b, P.IP_SRC, parseIPv4(src)!);
  P.put32(b, P.IP_DST, parseIPv4(dst)!);
  P.put16(b, P.IP_CSUM, P.checksum(b, 0, 20, 0));
  b[20] = type;
  b[21] = code;
  b.set(quoted, 28);
  P.put16(b, 22, P.checksum(b, 20, b.length - 20, 0));
  return b;
}

test('ICMP source quench about a flow is translated both ways, as destination unreachable is', () => {
  const { run } = setup4('udp');
  const first = run(udp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, payload: new Uint8Array(20) }));
  assert.equal(first.v, FORWARD);
  assert.equal(field(first.pkt).dst, RS);
  // The real server is quenched by the client's traffic: its quench about the client's (rewritten)
  // datagram goes to the client from the VIP, quoting the datagram as the client sent it.
  const fromServer = run(icmpError(RS, CLIENT, P.ICMP_SOURCE_QUENCH, 0, first.pkt));
  assert.equal(fromServer.v, FORWARD);
  const f = field(fromServer.pkt);
  assert.deepEqual([f.src, f.dst, f.icmpType], [VIP, CLIENT, P.ICMP_SOURCE_QUENCH]);
  const q = field(fromServer.pkt.subarray(28));
  assert.deepEqual([q.src, q.dst, q.sport, q.dport], [CLIENT, VIP, 40000, 80]);
  assert.equal(refSum([arr(fromServer.pkt, 0, 20)]), 0xffff, 'outer IP header checksum');
  assert.equal(refSum([arr(fromServer.pkt, 20, fromServer.pkt.length)]), 0xffff, 'ICMP checksum');
  // A router on the client's path quenches the reply (from the VIP): the quench goes to the server.
  const reply = run(udp({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, payload: new Uint8Array(20) }));
  assert.equal(reply.v, FORWARD);
  const toServer = run(icmpError(ROUTER, VIP, P.ICMP_SOURCE_QUENCH, 0, reply.pkt));
  assert.equal(toServer.v, FORWARD);
  const g = field(toServer.pkt);
  assert.deepEqual([g.dst, g.icmpType], [RS, P.ICMP_SOURCE_QUENCH]);
  const r = field(toServer.pkt.subarray(28));
  assert.deepEqual([r.src, r.sport, r.dst, r.dport], [RS, 8080, CLIENT, 40000], "the quoted datagram is the server's own");
  assert.equal(refSum([arr(toServer.pkt, 20, toServer.pkt.length)]), 0xffff);
});

/** Inserts an IPv6 extension header (type `kind`, `len8` 8-byte units after the first 8) after the fixed header. */
function withExt(pkt: Uint8Array, kind: number, len8: number, fill: (h: Uint8Array) => void = () => undefined): Uint8Array {
  const n = 8 * (len8 + 1);
  const b = new Uint8Array(pkt.length + n);
  b.set(pkt.subarray(0, 40), 0);
  b.set(pkt.subarray(40), 40 + n);
  const h = b.subarray(40, 40 + n);
  h[0] = pkt[P.IP6_NEXT]!;
  h[1] = len8;
  fill(h);
  b[P.IP6_NEXT] = kind;
  P.put16(b, P.IP6_PLEN, P.u16(pkt, P.IP6_PLEN) + n);
  return b;
}
/** Hop-by-hop: one PadN option filling the header (RFC 8200 §4.3). */
const hopByHop = (pkt: Uint8Array) =>
  withExt(pkt, P.IPPROTO_HOPOPTS, 0, (h) => {
    h[2] = 1; // PadN
    h[3] = 4; // its length
  });
/** A segment routing header (type 4) with segments left 0 and one segment, the VIP: a packet at its last hop. */
const routing = (pkt: Uint8Array) =>
  withExt(pkt, P.IPPROTO_ROUTING, 2, (h) => {
    h[2] = 4; // routing type: SRH
    h[3] = 0; // segments left
    const v = parseIPv6(VIP6)!;
    for (let i = 0; i < 4; i++) P.put32(h, 8 + 4 * i, v[i]!);
  });

test('IPv6 hop-by-hop and routing headers are stepped over: the flow is forwarded both ways with valid checksums', () => {
  for (const [name, wrap, extLen] of [
    ['hop-by-hop', hopByHop, 8],
    ['routing', routing, 24],
    ['hop-by-hop + routing', (p: Uint8Array) => hopByHop(routing(p)), 32],
  ] as const) {
    const { run, drops } = setup6('tcp');
    const syn = run(wrap(tcp6({ src: CLIENT6, dst: VIP6, sport: 41000, dport: 80, flags: TCPF_SYN, payload: new Uint8Array(30).fill(7) })));
    assert.equal(syn.v, FORWARD, name);
    const l4 = 40 + extLen;
    assert.equal(field6(syn.pkt).dst, RS6, `${name}: to the real server`);
    assert.equal(P.u16(syn.pkt, l4 + 2), 8080, `${name}: the destination port behind the headers is mapped`);
    assert.ok(l4Valid6(syn.pkt, l4, P.IPPROTO_TCP), `${name}: TCP checksum valid`);
    const reply = run(wrap(tcp6({ src: RS6, dst: CLIENT6, sport: 8080, dport: 41000, flags: TCPF_SYN | TCPF_ACK })));
    assert.equal(reply.v, FORWARD, `${name}: reply`);
    assert.equal(field6(reply.pkt).src, VIP6);
    assert.equal(P.u16(reply.pkt, l4), 80, `${name}: reply source port is the VIP's`);
    assert.ok(l4Valid6(reply.pkt, l4, P.IPPROTO_TCP), `${name}: reply checksum valid`);
    assert.deepEqual([drops('ipv6'), drops('truncated')], [0, 0], `${name}: nothing dropped`);
  }
});

test('IPv6 fragments are dropped and counted, as IPv4 fragments are, and create no entry', () => {
  const { run, drops, table } = setup6('udp');
  // Fragment header (44): next header, reserved, offset 0 + M flag, identification.
  const first = withExt(
    udp6({ src: CLIENT6, dst: VIP6, sport: 42000, dport: 80, payload: new Uint8Array(64) }),
    P.IPPROTO_FRAGMENT,
    0,
    (h) => {
      h[1] = 0; // reserved (the length field of other headers)
      h[3] = 1; // offset 0, more fragments
      P.put32(h, 4, 0x1234);
    },
  );
  assert.equal(run(first).v, DROP);
  // Behind a hop-by-hop header too.
  assert.equal(run(hopByHop(first)).v, DROP);
  assert.equal(drops('fragment'), 2);
  assert.equal(table.count(), 0);
  const v4 = setup4('udp');
  assert.equal(v4.run(udp({ src: CLIENT, dst: VIP, sport: 42000, dport: 80, frag: 0x2000 })).v, DROP, 'IPv4 first fragment (MF)');
  assert.equal(v4.run(udp({ src: CLIENT, dst: VIP, sport: 42000, dport: 80, frag: 0x0010 })).v, DROP, 'IPv4 later fragment');
  assert.equal(v4.drops('fragment'), 2);
});

test('ip6ip6 tunnel: Packet Too Big reports the route MTU less 40 bytes, and never less than 1280', () => {
  const { run, setMtu, drops } = setup6('tcp', 'tunnel');
  setMtu(1400);
  assert.equal(run(tcp6({ src: CLIENT6, dst: VIP6, sport: 43000, dport: 80, flags: TCPF_SYN })).v, REPLY, 'SYN encapsulated');
  // 1360 bytes + the 40-byte outer header = 1400: fits exactly.
  const fits = run(tcp6({ src: CLIENT6, dst: VIP6, sport: 43000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(1360 - 60) }));
  assert.equal(fits.v, REPLY);
  assert.equal(fits.reply!.length, 1400, 'encapsulated, 1400 bytes');
  assert.equal(fits.reply![P.IP6_NEXT], 41, 'ip6ip6');
  // One byte more does not.
  const big = run(tcp6({ src: CLIENT6, dst: VIP6, sport: 43000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(1361 - 60) }));
  assert.equal(big.v, REPLY);
  assert.deepEqual([field6(big.reply!).src, field6(big.reply!).icmpType], [VIP6, P.ICMP6_PACKET_TOO_BIG]);
  assert.equal(P.u32(big.reply!, 44), 1360, 'MTU less the ip6ip6 header');
  assert.equal(drops('too_big'), 1);
  // A route of 1300: 1300 − 40 = 1260 is below the IPv6 minimum; the client is told 1280 (RFC 8200 §5).
  setMtu(1300);
  const floor = run(tcp6({ src: CLIENT6, dst: VIP6, sport: 43000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(1300 - 60) }));
  assert.equal(floor.v, REPLY);
  assert.equal(floor.reply![40], P.ICMP6_PACKET_TOO_BIG);
  assert.equal(P.u32(floor.reply!, 44), 1280);
  assert.ok(floor.reply!.length <= 1280, 'the error itself fits the minimum MTU');
  assert.ok(l4Valid6(floor.reply!, 40, P.IPPROTO_ICMPV6), 'ICMPv6 checksum valid');
});

test('a GSO super-packet is checked per segment: headers + gso_size against the route MTU, not its total length', () => {
  const { run, setMtu, drops } = setup4('tcp', { offload: true });
  setMtu(1500);
  assert.equal(run(partial(tcp({ src: CLIENT, dst: VIP, sport: 44000, flags: TCPF_SYN }))).v, FORWARD);
  // 20 000 bytes cut in 1460-byte segments: each is 20 + 20 + 1460 = 1500, which fits.
  const data = new Uint8Array(20000).fill(3);
  const ok = run(partial(tcp({ src: CLIENT, dst: VIP, sport: 44000, flags: TCPF_ACK, payload: data }), 1460));
  assert.equal(ok.v, FORWARD, 'segments of 1500 bytes fit a 1500 route');
  // 1461-byte segments are 1501 bytes: fragmentation needed, 1500.
  const big = run(partial(tcp({ src: CLIENT, dst: VIP, sport: 44000, flags: TCPF_ACK, payload: data }), 1461));
  assert.equal(big.v, REPLY);
  const f = field(big.reply!);
  assert.deepEqual([f.src, f.dst, f.icmpType, f.icmpCode], [VIP, CLIENT, P.ICMP_DEST_UNREACH, P.ICMP_FRAG_NEEDED]);
  assert.equal(P.u16(big.reply!, 26), 1500);
  assert.equal(drops('too_big'), 1);
});

/** A UDP datagram whose checksum, once rewritten to RS:8080, sums to 0: the last payload word is chosen for it. */
function udpSummingToZero(v6: boolean): Uint8Array {
  const spec = { src: v6 ? CLIENT6 : CLIENT, dst: v6 ? VIP6 : VIP, sport: 45000, dport: 80, payload: new Uint8Array(16).fill(0x11) };
  const b = v6 ? udp6(spec) : udp(spec);
  // The rewritten datagram, checksum field 0 and the last payload word 0: its sum S. Setting that
  // word to ~S makes the sum 0xffff, so the computed checksum ~0xffff is 0.
  const x = b.slice();
  if (v6) {
    const r = parseIPv6(RS6)!;
    for (let i = 0; i < 4; i++) P.put32(x, P.IP6_DST + 4 * i, r[i]!);
  } else P.put32(x, P.IP_DST, parseIPv4(RS)!);
  const l4 = v6 ? 40 : 20;
  P.put16(x, l4 + 2, 8080);
  P.put16(x, l4 + 6, 0);
  P.put16(x, x.length - 2, 0);
  const len = x.length - l4;
  const s = v6
    ? refSum([arr(x, 8, 40), [0, 0, len >> 8, len & 255, 0, 0, 0, 17], arr(x, l4, x.length)])
    : refSum([arr(x, 12, 20), [0, 17, len >> 8, len & 255], arr(x, l4, x.length)]);
  P.put16(b, b.length - 2, ~s & 0xffff);
  // Re-checksum the original (with the chosen word) as a client would.
  P.put16(b, l4 + 6, 0);
  const ps = v6 ? P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, 17, len) : P.pseudoSum(P.u32(b, P.IP_SRC), P.u32(b, P.IP_DST), 17, len);
  const c = P.checksum(b, l4, len, ps);
  P.put16(b, l4 + 6, c === 0 ? 0xffff : c);
  return b;
}

test('a UDP checksum that computes to 0 after the rewrite is sent as 0xffff (RFC 768; 0 would mean none)', () => {
  for (const v6 of [false, true]) {
    const { run } = v6 ? setup6('udp') : setup4('udp');
    const r = run(udpSummingToZero(v6));
    assert.equal(r.v, FORWARD);
    const l4 = v6 ? 40 : 20;
    assert.equal(P.u16(r.pkt, l4 + 2), 8080, 'rewritten');
    assert.equal(P.u16(r.pkt, l4 + 6), 0xffff, v6 ? 'IPv6' : 'IPv4');
    assert.ok(v6 ? l4Valid6(r.pkt, 40, 17) : l4Valid4(r.pkt), 'and valid');
  }
});

test('answerPing: false drops echo requests to a VIP (counted) and answers nothing; the default answers', () => {
  const on = setup4('tcp');
  const echo = icmpEcho({ src: CLIENT, dst: VIP });
  const a = on.run(echo);
  assert.equal(a.v, FORWARD, 'answered in place');
  assert.deepEqual([field(a.pkt).src, field(a.pkt).icmpType], [VIP, P.ICMP_ECHOREPLY]);
  const off = setup4('tcp', { dataplane: { answerPing: false } });
  assert.equal(off.run(icmpEcho({ src: CLIENT, dst: VIP })).v, DROP);
  assert.equal(off.drops('icmp_ignored'), 1);
  const off6 = setup6('tcp', 'masq', { answerPing: false });
  assert.equal(off6.run(icmp6({ src: CLIENT6, dst: VIP6, type: P.ICMP6_ECHO_REQUEST })).v, DROP);
  assert.equal(off6.drops('icmp_ignored'), 1);
  const on6 = setup6('tcp');
  const r6 = on6.run(icmp6({ src: CLIENT6, dst: VIP6, type: P.ICMP6_ECHO_REQUEST }));
  assert.notEqual(r6.v, DROP);
  assert.equal((r6.reply ?? r6.pkt)[40], P.ICMP6_ECHO_REPLY);
});
