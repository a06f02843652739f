/**
 * PROXY protocol towards full-NAT real servers (net/ and lb/proxy-protocol.ts): the header's bytes
 * as HAProxy's proxy-protocol.txt defines them, and crafted TCP flows through the processor — the
 * header segment, the sequence shift client→server, acknowledgements and SACK blocks shifted back,
 * retransmissions, FIN/RST, offloads — with every checksum checked by an RFC 1071 sum written here
 * from the bytes (not net/packet.ts's).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { newFlow } from '../../conntrack/flow';
import { TCPF_ACK, TCPF_FIN, TCPF_PSH, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import * as P from '../../net/packet';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import { PP_V1, PP_V2, writeProxyHeader } from '../../net/proxy-protocol';
import { checkRecord, parseRecord, ppField, type FlowRecord } from '../../conntrack/redis-record';
import { makeProcessor } from '../helpers/processor';
import { rngBelow } from '../helpers/rng';

const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const CLIENT = '192.0.2.7';
const CLIENT6 = '2001:db8::7';
const RS = '10.0.0.1';
const RS6 = 'fd00:1::1';
const POOL = '10.99.0.1';
const POOL6 = 'fd00:99::1';
const V = P.VNET_HLEN;

// ── an independent checksum and packet builder ───────────────────────────────────────────────
function sum(bytes: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < bytes.length; i += 2) s += (bytes[i]! << 8) + (i + 1 < bytes.length ? bytes[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + Math.floor(s / 65536);
  return s;
}
function be(n: number, v: number): number[] {
  return Array.from({ length: n }, (_, i) => Math.floor(v / 2 ** (8 * (n - 1 - i))) & 255);
}
function addrBytes(a: string): number[] {
  return a.includes(':') ? [...parseIPv6(a)!].flatMap((w) => be(4, w >>> 0)) : be(4, parseIPv4(a)! >>> 0);
}
/** The TCP checksum over the pseudo-header and segment of an IPv4 or IPv6 packet is right. */
function tcpValid(pkt: Uint8Array): boolean {
  const v6 = pkt[0]! >> 4 === 6;
  const ih = v6 ? 40 : (pkt[0]! & 15) * 4;
  const total = v6 ? 40 + ((pkt[4]! << 8) | pkt[5]!) : (pkt[2]! << 8) | pkt[3]!;
  const seg = [...pkt.subarray(ih, total)];
  const pseudo = v6 ? [...pkt.subarray(8, 40), ...be(4, seg.length), 0, 0, 0, 6] : [...pkt.subarray(12, 20), 0, 6, ...be(2, seg.length)];
  if (!v6 && sum([...pkt.subarray(0, ih)]) !== 0xffff) return false;
  return sum([...pseudo, ...seg]) === 0xffff;
}

interface Seg {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  seq: number;
  ack?: number;
  flags: number;
  data?: Uint8Array;
  /** SACK blocks [left, right) as the option carries them. */
  sack?: [number, number][];
}
function segment(s: Seg): Uint8Array {
  const v6 = s.src.includes(':');
  const data = [...(s.data ?? [])];
  const opts: number[] = [1, 1, 8, 10, ...be(4, 0x01020304), ...be(4, 0x05060708)]; // NOP NOP timestamps
  if (s.sack) opts.push(1, 1, 5, 2 + 8 * s.sack.length, ...s.sack.flatMap(([l, r]) => [...be(4, l), ...be(4, r)]));
  const tcp = [
    ...be(2, s.sport),
    ...be(2, s.dport),
    ...be(4, s.seq >>> 0),
    ...be(4, (s.ack ?? 0) >>> 0),
    ((20 + opts.length) / 4) << 4,
    s.flags,
    ...be(2, 64000),
    0,
    0,
    0,
    0,
    ...opts,
    ...data,
  ];
  const ip = v6
    ? [0x60, 0, 0, 0, ...be(2, tcp.length), 6, 64, ...addrBytes(s.src), ...addrBytes(s.dst)]
    : [0x45, 0, ...be(2, 20 + tcp.length), 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, ...addrBytes(s.src), ...addrBytes(s.dst)];
  if (!v6) ip.splice(10, 2, ...be(2, ~sum(ip) & 0xffff));
  const pseudo = v6
    ? [...addrBytes(s.src), ...addrBytes(s.dst), ...be(4, tcp.length), 0, 0, 0, 6]
    : [...addrBytes(s.src), ...addrBytes(s.dst), 0, 6, ...be(2, tcp.length)];
  tcp.splice(16, 2, ...be(2, ~sum([...pseudo, ...tcp]) & 0xffff));
  return Uint8Array.from([...ip, ...tcp]);
}
function parse(pkt: Uint8Array) {
  const v6 = pkt[0]! >> 4 === 6;
  const ih = v6 ? 40 : (pkt[0]! & 15) * 4;
  const total = v6 ? 40 + P.u16(pkt, 4) : P.u16(pkt, 2);
  const t = ih;
  const hl = (pkt[t + 12]! >> 4) * 4;
  const sack: [number, number][] = [];
  for (let o = t + 20; o < t + hl; ) {
    if (pkt[o] === 1) {
      o++;
      continue;
    }
    if (pkt[o] === 5) for (let e = o + 2; e < o + pkt[o + 1]!; e += 8) sack.push([P.u32(pkt, e) >>> 0, P.u32(pkt, e + 4) >>> 0]);
    o += pkt[o + 1]!;
  }
  const fmt = (at: number) =>
    v6 ? [...Array(8)].map((_, i) => P.u16(pkt, at + 2 * i).toString(16)).join(':') : [...pkt.subarray(at, at + 4)].join('.');
  return {
    src: fmt(v6 ? 8 : 12),
    dst: fmt(v6 ? 24 : 16),
    sport: P.u16(pkt, t),
    dport: P.u16(pkt, t + 2),
    seq: P.u32(pkt, t + 4) >>> 0,
    ack: P.u32(pkt, t + 8) >>> 0,
    flags: pkt[t + 13]!,
    data: pkt.slice(t + hl, total),
    ts: P.u32(pkt, t + 24) >>> 0,
    sack,
  };
}
const bytes = (n: number, seed = 1) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 255);
const ascii = (b: Uint8Array) => Buffer.from(b).toString('latin1');

// ── the flow under test ──────────────────────────────────────────────────────────────────────
function setup(o: { v6?: boolean; pp?: string; offload?: boolean } = {}) {
  const v6 = o.v6 ?? false;
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], fullnat: { addresses: [POOL, POOL6], portMin: 20000, portMax: 20099 } },
      services: [
        {
          address: v6 ? VIP6 : VIP,
          port: 80,
          forwarding: 'fullnat',
          proxyProtocol: o.pp ?? 'v2',
          realServers: [{ address: v6 ? RS6 : RS, port: 8080 }],
        },
      ],
    },
    { offload: o.offload ?? false, outBytes: 1 << 18 },
  );
  const client = v6 ? CLIENT6 : CLIENT;
  const vip = v6 ? VIP6 : VIP;
  let lport = 0;
  /** A client segment into the processor; what reaches the server (one or more packets) and the verdict. */
  const fromClient = (s: Omit<Seg, 'src' | 'dst' | 'sport' | 'dport'> & { sport?: number }) => {
    let pkt = segment({ src: client, dst: vip, dport: 80, ...s, sport: s.sport ?? 40000 });
    if (o.offload) pkt = frame(pkt);
    const r = p.run(pkt);
    const outs: Uint8Array[] = [];
    if (r.v === FORWARD) outs.push(o.offload ? pkt.slice(V) : pkt);
    else if (r.v === REPLY && r.reply !== null) outs.push(r.reply);
    else if (r.v === REPLY) outs.push(...r.outs);
    if ((r.v === FORWARD || r.reply !== null) && lport === 0) lport = parse(outs[0]!).sport;
    return { v: r.v, outs, framed: r.v === REPLY ? outs : [pkt] };
  };
  /** A server segment (to the pool address and port the flow got); what the client receives. */
  const fromServer = (s: Omit<Seg, 'src' | 'dst' | 'sport' | 'dport'>) => {
    const pkt = segment({ src: v6 ? RS6 : RS, dst: v6 ? POOL6 : POOL, sport: 8080, dport: lport, ...s });
    const r = p.run(o.offload ? frame(pkt) : pkt);
    assert.equal(r.v, FORWARD);
    return parse(o.offload ? r.pkt.slice(V) : r.pkt);
  };
  const headers = () => p.counters[L.C_PP_HEADERS];
  return { ...p, fromClient, fromServer, headers, port: () => lport, setPort: (x: number) => (lport = x) };
}

/** With offloads: the packet behind a plain virtio header (no checksum left to the device). */
function frame(pkt: Uint8Array): Uint8Array {
  const b = new Uint8Array(V + pkt.length);
  b.set(pkt, V);
  return b;
}

const ISN = 0x10000000;
const SISN = 0x50000000;
const V2_SIG = [0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a];

/** Handshake; returns the header segment the client's ACK became. */
function handshake(f: ReturnType<typeof setup>) {
  const syn = f.fromClient({ seq: ISN, flags: TCPF_SYN });
  assert.equal(syn.v, FORWARD);
  assert.equal(parse(syn.outs[0]!).seq, ISN, 'the SYN keeps its number');
  const sa = f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  assert.equal(sa.ack, ISN + 1, 'the SYN-ACK acknowledges the SYN as it was');
  const ack = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK });
  assert.equal(ack.v, REPLY);
  assert.equal(ack.outs.length, 1, 'the bare ACK is replaced by the header segment');
  return ack.outs[0]!;
}

// ── header bytes ─────────────────────────────────────────────────────────────────────────────
function header(version: number, src: string, dst: string, sport: number, dport: number): Uint8Array {
  const v6 = src.includes(':');
  const w = new Int32Array(8);
  if (v6) {
    w.set(parseIPv6(src)!, 0);
    w.set(parseIPv6(dst)!, 4);
  } else {
    w[3] = parseIPv4(src)!;
    w[7] = parseIPv4(dst)!;
  }
  const b = new Uint8Array(200).fill(0xee);
  const n = writeProxyHeader(b, 10, version, v6, w, sport, dport);
  assert.equal(b[9], 0xee, 'nothing written before');
  assert.equal(b[10 + n], 0xee, 'nothing written after');
  return b.slice(10, 10 + n);
}

test("PROXY v1 lines are the spec's text: TCP4 dotted quads, TCP6 in RFC 5952 form, decimal ports, CRLF", () => {
  assert.equal(ascii(header(PP_V1, '192.0.2.7', '10.96.0.10', 40000, 80)), 'PROXY TCP4 192.0.2.7 10.96.0.10 40000 80\r\n');
  assert.equal(ascii(header(PP_V1, '255.255.255.255', '0.0.0.0', 65535, 1)), 'PROXY TCP4 255.255.255.255 0.0.0.0 65535 1\r\n');
  const six: [string, string][] = [
    ['2001:db8::7', '2001:db8::7'],
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1'],
    ['::1', '::1'],
    ['::', '::'],
    ['fe80::', 'fe80::'],
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'], // one zero group is not shortened
    ['2001:0:0:1:0:0:0:1', '2001:0:0:1::1'], // the longest run
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'], // the first of equal runs
    ['FD00:96::ABCD', 'fd00:96::abcd'],
  ];
  for (const [a, want] of six) {
    const line = ascii(header(PP_V1, a, 'fd00:96::10', 1234, 443));
    assert.equal(line, `PROXY TCP6 ${want} fd00:96::10 1234 443\r\n`);
    assert.deepEqual([...parseIPv6(want)!], [...parseIPv6(a)!], `${want} reads back as ${a}`);
  }
  const longest = ascii(header(PP_V1, 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe', 65535, 65535));
  assert.equal(longest.length, 104, 'the longest line this writes (the spec allows 107)');
});

test('PROXY v2 headers are the signature, 0x21, family/transport, the address block length and the addresses in network order', () => {
  assert.deepEqual(
    [...header(PP_V2, '192.0.2.7', '10.96.0.10', 40000, 80)],
    [...V2_SIG, 0x21, 0x11, 0, 12, 192, 0, 2, 7, 10, 96, 0, 10, 0x9c, 0x40, 0, 80],
  );
  const h6 = header(PP_V2, '2001:db8::7', 'fd00:96::10', 40000, 443);
  assert.deepEqual([...h6], [...V2_SIG, 0x21, 0x21, 0, 36, ...addrBytes('2001:db8::7'), ...addrBytes('fd00:96::10'), 0x9c, 0x40, 1, 187]);
  assert.equal(h6.length, 52);
});

// ── flows ────────────────────────────────────────────────────────────────────────────────────
test("the client's handshake ACK becomes the header segment: at the SYN + 1, ACK|PSH, options kept, checksums valid (IPv4, v2)", () => {
  const f = setup();
  const h = handshake(f);
  const s = parse(h);
  assert.deepEqual([s.src, s.dst, s.dport], ['10.99.0.1', RS, 8080]);
  assert.equal(s.seq, ISN + 1);
  assert.equal(s.ack, SISN + 1);
  assert.equal(s.flags, TCPF_ACK | TCPF_PSH);
  assert.equal(s.ts, 0x01020304, 'the timestamp option goes with it (PAWS)');
  assert.deepEqual([...s.data], [...V2_SIG, 0x21, 0x11, 0, 12, 192, 0, 2, 7, 10, 96, 0, 10, 0x9c, 0x40, 0, 80]);
  assert.ok(tcpValid(h), 'IP and TCP checksums');
  assert.equal(f.headers(), 1);
});

test('client→server sequence numbers move by the header length, server→client acknowledgements and SACK blocks move back', () => {
  const f = setup();
  handshake(f);
  const d1 = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: bytes(100) });
  assert.equal(d1.v, FORWARD, 'the first data right behind the header segment is only shifted');
  const s1 = parse(d1.outs[0]!);
  assert.equal(s1.seq, ISN + 1 + 28);
  assert.deepEqual([...s1.data], [...bytes(100)], 'payload untouched');
  assert.ok(tcpValid(d1.outs[0]!));
  const d2 = f.fromClient({ seq: ISN + 101, ack: SISN + 1, flags: TCPF_ACK, data: bytes(50, 9) });
  assert.equal(parse(d2.outs[0]!).seq, ISN + 101 + 28);
  assert.ok(tcpValid(d2.outs[0]!));
  // The server acknowledges the header and the first 100 bytes, SACKs two later ranges.
  const r = f.fromServer({
    seq: SISN + 1,
    ack: ISN + 1 + 28 + 100,
    flags: TCPF_ACK,
    sack: [
      [ISN + 1 + 28 + 150, ISN + 1 + 28 + 200],
      [ISN + 1 + 28 + 300, ISN + 1 + 28 + 400],
    ],
  });
  assert.equal(r.ack, ISN + 101);
  assert.deepEqual(r.sack, [
    [ISN + 151, ISN + 201],
    [ISN + 301, ISN + 401],
  ]);
  assert.equal(r.seq, SISN + 1, "the server's own numbers are not touched");
  assert.deepEqual([r.src, r.dst, r.sport], [VIP, CLIENT, 80]);
  const back = segment({ src: VIP, dst: CLIENT, sport: 80, dport: 40000, seq: r.seq, ack: r.ack, flags: TCPF_ACK, sack: r.sack });
  assert.equal(sum(back), sum(back), 'sanity');
  // The client's pure ACKs of server data are shifted too.
  const a = f.fromClient({ seq: ISN + 151, ack: SISN + 1001, flags: TCPF_ACK });
  assert.equal(a.v, FORWARD);
  assert.equal(parse(a.outs[0]!).seq, ISN + 151 + 28);
  assert.equal(parse(a.outs[0]!).ack, SISN + 1001, "the client's acknowledgement of server data is not shifted");
  assert.ok(tcpValid(a.outs[0]!));
  assert.equal(f.headers(), 1, 'exactly one header without loss');
});

test('a reply with a partial checksum from the server keeps it partial; SACK edges change, the checksum field does not', () => {
  const f = setup({ offload: true });
  f.fromClient({ seq: ISN, flags: TCPF_SYN });
  f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK });
  // A server data super-packet with a partial checksum (the pseudo-header sum in the field).
  const seg = segment({
    src: RS,
    dst: POOL,
    sport: 8080,
    dport: f.port(),
    seq: SISN + 1,
    ack: ISN + 1 + 28,
    flags: TCPF_ACK,
    data: bytes(3000),
    sack: [[ISN + 1 + 28 + 10, ISN + 1 + 28 + 20]],
  });
  const pkt = frame(seg);
  const ps = P.pseudoSum(P.u32(seg, 12), P.u32(seg, 16), 6, seg.length - 20);
  P.put16(pkt, V + 20 + 16, P.fold16(ps));
  pkt[0] = P.VNET_F_NEEDS_CSUM;
  pkt[1] = P.VNET_GSO_TCPV4;
  P.putLe16(pkt, P.VNET_GSO_SIZE, 1400);
  P.putLe16(pkt, P.VNET_CSUM_START, 20);
  P.putLe16(pkt, P.VNET_CSUM_OFFSET, 16);
  assert.equal(f.run(pkt).v, FORWARD);
  const out = pkt.slice(V);
  const r = parse(out);
  assert.equal(r.ack, ISN + 1);
  assert.deepEqual(r.sack, [[ISN + 11, ISN + 21]]);
  assert.equal(pkt[0], P.VNET_F_NEEDS_CSUM, 'still partial');
  // What the device does: complete over the segment with the field as left.
  const c = ~sum([...out.subarray(20)]) & 0xffff;
  P.put16(out, 20 + 16, c);
  assert.ok(tcpValid(out), 'completed by the device, the checksum is valid for the new pseudo-header and numbers');
});

test('a retransmission of the first data while the header is unacknowledged carries the header again, in its own segment before it', () => {
  const f = setup();
  const h = handshake(f);
  const first = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: bytes(1400) });
  assert.equal(first.v, FORWARD);
  // No acknowledgement from the server yet: the header segment (or the data) may be lost.
  const again = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: bytes(1400) });
  assert.equal(again.v, REPLY);
  assert.equal(again.outs.length, 2);
  assert.deepEqual(
    [...again.outs[0]!],
    [...h].map((x, i) => (i === 4 || i === 5 || i === 10 || i === 11 ? again.outs[0]![i]! : x)),
    'the same header segment (only the IP id and its checksum differ)',
  );
  assert.ok(tcpValid(again.outs[0]!));
  const d = parse(again.outs[1]!);
  assert.equal(d.seq, ISN + 1 + 28);
  assert.equal(d.data.length, 1400, 'the client segment is not grown: it still fits the path');
  assert.ok(tcpValid(again.outs[1]!));
  assert.equal(f.headers(), 2);
  // A server ACK that covers only part of the header says nothing about the client's bytes.
  assert.equal(f.fromServer({ seq: SISN + 1, ack: ISN + 1 + 10, flags: TCPF_ACK }).ack, ISN + 1);
  assert.equal(
    f.fromServer({ seq: SISN + 1, ack: ISN + 1, flags: TCPF_ACK, sack: [[ISN + 1 + 28, ISN + 1 + 28 + 1400]] }).sack[0]![0],
    ISN + 1,
  );
  // Once the server has the header, a retransmission at the same place is only shifted.
  assert.equal(f.fromServer({ seq: SISN + 1, ack: ISN + 1 + 28, flags: TCPF_ACK }).ack, ISN + 1);
  const late = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: bytes(1400) });
  assert.equal(late.v, FORWARD);
  assert.equal(parse(late.outs[0]!).seq, ISN + 1 + 28);
  assert.equal(f.headers(), 2);
});

test('a lost header segment is sent again when the client repeats its ACK (server speaks first, SYN-ACK retransmitted)', () => {
  const f = setup();
  handshake(f);
  f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  const again = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK });
  assert.equal(again.v, REPLY);
  assert.equal(parse(again.outs[0]!).data.length, 28);
  assert.equal(f.headers(), 2);
  // The server's banner acknowledges the header: later bare ACKs are shifted, no more headers.
  const banner = f.fromServer({ seq: SISN + 1, ack: ISN + 1 + 28, flags: TCPF_ACK | TCPF_PSH, data: bytes(30) });
  assert.equal(banner.ack, ISN + 1);
  const ack = f.fromClient({ seq: ISN + 1, ack: SISN + 31, flags: TCPF_ACK });
  assert.equal(ack.v, FORWARD);
  assert.equal(parse(ack.outs[0]!).seq, ISN + 1 + 28);
  assert.equal(f.headers(), 2);
});

test('data before any bare ACK (the ACK lost before uvs) gets the header in front of it', () => {
  const f = setup();
  f.fromClient({ seq: ISN, flags: TCPF_SYN });
  f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  const d = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: bytes(10) });
  assert.equal(d.v, REPLY);
  assert.deepEqual(
    d.outs.map((x) => [parse(x).seq, parse(x).data.length]),
    [
      [ISN + 1, 28],
      [ISN + 1 + 28, 10],
    ],
  );
  assert.ok(d.outs.every(tcpValid));
});

test('FIN and RST: a FIN is shifted (with the header first if it never went), a RST at the header place only once the header went', () => {
  const f = setup();
  f.fromClient({ seq: ISN, flags: TCPF_SYN });
  f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  // A RST before anything was sent: the server still expects ISN + 1.
  const rst = f.fromClient({ seq: ISN + 1, flags: TCPF_RST });
  assert.equal(rst.v, FORWARD);
  assert.equal(parse(rst.outs[0]!).seq, ISN + 1);
  assert.ok(tcpValid(rst.outs[0]!));

  const g = setup();
  handshake(g);
  const fin = g.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK | TCPF_FIN });
  assert.equal(fin.v, FORWARD, 'right behind the header segment');
  assert.equal(parse(fin.outs[0]!).seq, ISN + 1 + 28);
  assert.ok(tcpValid(fin.outs[0]!));
  const sfin = g.fromServer({ seq: SISN + 1, ack: ISN + 1 + 28 + 1, flags: TCPF_ACK | TCPF_FIN });
  assert.equal(sfin.ack, ISN + 2, "the server's FIN acknowledges the client's FIN");
  const last = g.fromClient({ seq: ISN + 2, ack: SISN + 2, flags: TCPF_ACK });
  assert.equal(parse(last.outs[0]!).seq, ISN + 2 + 28);
  const r2 = g.fromClient({ seq: ISN + 2, flags: TCPF_RST });
  assert.equal(parse(r2.outs[0]!).seq, ISN + 2 + 28);
  // A server RST without ACK has no acknowledgement to change.
  const srst = g.fromServer({ seq: SISN + 2, ack: 0x12345678, flags: TCPF_RST });
  assert.equal(srst.ack, 0x12345678);

  const h = setup();
  handshake(h);
  const rst3 = h.fromClient({ seq: ISN + 1, flags: TCPF_RST });
  assert.equal(parse(rst3.outs[0]!).seq, ISN + 1 + 28, 'after the header segment the server expects the number behind it');
});

test('once the header is acknowledged, the shift is plain across the 2^32 wrap and beyond 2 GiB', () => {
  const f = setup();
  f.fromClient({ seq: 0xfffffff0, flags: TCPF_SYN });
  f.fromServer({ seq: SISN, ack: 0xfffffff1, flags: TCPF_SYN | TCPF_ACK });
  const h = f.fromClient({ seq: 0xfffffff1, ack: SISN + 1, flags: TCPF_ACK });
  assert.equal(parse(h.outs[0]!).seq, 0xfffffff1);
  assert.equal(f.fromServer({ seq: SISN + 1, ack: (0xfffffff1 + 28) % 2 ** 32, flags: TCPF_ACK }).ack, 0xfffffff1);
  const d = f.fromClient({ seq: 0xfffffff1, ack: SISN + 1, flags: TCPF_ACK, data: bytes(100) });
  assert.equal(parse(d.outs[0]!).seq, (0xfffffff1 + 28) % 2 ** 32);
  assert.ok(tcpValid(d.outs[0]!));
  // 3 GiB later (numbers relative to the header's place are "negative" as signed 32-bit).
  const far = (0xfffffff1 + 3 * 2 ** 30) % 2 ** 32;
  assert.equal(parse(f.fromClient({ seq: far, ack: SISN + 1, flags: TCPF_ACK, data: bytes(10) }).outs[0]!).seq, (far + 28) % 2 ** 32);
  const r = f.fromServer({
    seq: SISN + 1,
    ack: (far + 28) % 2 ** 32,
    flags: TCPF_ACK,
    sack: [[(far + 28 + 100) % 2 ** 32, (far + 28 + 200) % 2 ** 32]],
  });
  assert.equal(r.ack, far);
  assert.deepEqual(r.sack, [[(far + 100) % 2 ** 32, (far + 200) % 2 ** 32]]);
});

test('IPv6 with PROXY v1: the TCP6 line, shifts by its length, IPv6 checksums valid', () => {
  const f = setup({ v6: true, pp: 'v1' });
  const h = handshake(f);
  const s = parse(h);
  const line = 'PROXY TCP6 2001:db8::7 fd00:96::10 40000 80\r\n';
  assert.equal(ascii(s.data), line);
  assert.ok(tcpValid(h));
  assert.equal(s.dst, 'fd00:1:0:0:0:0:0:1');
  const d = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK, data: bytes(500) });
  assert.equal(parse(d.outs[0]!).seq, ISN + 1 + line.length);
  assert.ok(tcpValid(d.outs[0]!));
  const r = f.fromServer({
    seq: SISN + 1,
    ack: ISN + 1 + line.length + 500,
    flags: TCPF_ACK,
    sack: [[ISN + 1 + line.length + 600, ISN + 1 + line.length + 700]],
  });
  assert.equal(r.ack, ISN + 501);
  assert.deepEqual(r.sack, [[ISN + 601, ISN + 701]]);
});

test('IPv6 with PROXY v2: the 52-byte header with both 16-byte addresses', () => {
  const f = setup({ v6: true, pp: 'v2' });
  const s = parse(handshake(f));
  assert.deepEqual([...s.data], [...V2_SIG, 0x21, 0x21, 0, 36, ...addrBytes(CLIENT6), ...addrBytes(VIP6), 0x9c, 0x40, 0, 80]);
});

test('offloads: a GSO super-packet at the header place goes out behind a plain header segment, its virtio header kept', () => {
  const f = setup({ offload: true });
  f.fromClient({ seq: ISN, flags: TCPF_SYN });
  f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  const seg = segment({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK, data: bytes(20000) });
  const pkt = frame(seg);
  P.put16(pkt, V + 20 + 16, P.fold16(P.pseudoSum(P.u32(seg, 12), P.u32(seg, 16), 6, seg.length - 20)));
  pkt[0] = P.VNET_F_NEEDS_CSUM;
  pkt[1] = P.VNET_GSO_TCPV4;
  P.putLe16(pkt, P.VNET_HDR_LEN, 52);
  P.putLe16(pkt, P.VNET_GSO_SIZE, 1448);
  P.putLe16(pkt, P.VNET_CSUM_START, 20);
  P.putLe16(pkt, P.VNET_CSUM_OFFSET, 16);
  const vh = [...pkt.subarray(0, V)];
  const r = f.run(pkt);
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, 2);
  const hdr = r.outs[0]!;
  assert.deepEqual([...hdr.subarray(0, V)], new Array(V).fill(0), 'the header segment asks the device for nothing');
  assert.ok(tcpValid(hdr.subarray(V)));
  assert.equal(parse(hdr.subarray(V)).data.length, 28);
  const big = r.outs[1]!;
  assert.deepEqual([...big.subarray(0, V)], vh, 'GSO and partial checksum metadata as they came');
  const b = big.slice(V);
  assert.equal(parse(b).seq, ISN + 1 + 28);
  assert.deepEqual([...parse(b).data], [...bytes(20000)]);
  P.put16(b, 20 + 16, ~sum([...b.subarray(20)]) & 0xffff);
  assert.ok(tcpValid(b), 'the device completes a valid checksum (the shift is not in the pseudo-header)');
});

test('a new SYN with another ISN on the entry (port reused after a RST) starts the header over', () => {
  const f = setup();
  handshake(f);
  f.fromClient({ seq: ISN + 1 + 0, flags: TCPF_RST | TCPF_ACK, ack: SISN + 1 });
  const syn = f.fromClient({ seq: 0x70000000, flags: TCPF_SYN });
  assert.equal(syn.v, FORWARD);
  f.fromServer({ seq: SISN, ack: 0x70000001, flags: TCPF_SYN | TCPF_ACK });
  const h = f.fromClient({ seq: 0x70000001, ack: SISN + 1, flags: TCPF_ACK });
  assert.equal(h.v, REPLY);
  assert.equal(parse(h.outs[0]!).seq, 0x70000001);
});

test("an ICMP error from the server side quoting a shifted segment quotes it in the client's numbering", () => {
  const f = setup();
  handshake(f);
  const d = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK, data: bytes(1400) });
  const sent = d.outs[0]!;
  // A router on the server side: fragmentation needed, quoting our segment's IP header + 8 bytes.
  const quoted = [...sent.subarray(0, 28)];
  const icmp = [3, 4, 0, 0, 0, 0, 0x05, 0x78, ...quoted];
  icmp.splice(2, 2, ...be(2, ~sum(icmp) & 0xffff));
  const ip = [0x45, 0, ...be(2, 20 + icmp.length), 0, 1, 0, 0, 64, 1, 0, 0, ...addrBytes('10.0.0.254'), ...addrBytes(POOL)];
  ip.splice(10, 2, ...be(2, ~sum(ip) & 0xffff));
  const pkt = Uint8Array.from([...ip, ...icmp]);
  assert.equal(f.run(pkt).v, FORWARD);
  assert.equal(P.u32(pkt, 28 + 20 + 4) >>> 0, ISN + 1, 'quoted sequence number as the client sent it');
  assert.equal(sum([...pkt.subarray(20)]), 0xffff, 'ICMP checksum');
});

test('flows of real servers without proxyProtocol, and UDP, are untouched', () => {
  const p = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: [POOL] } },
    services: [
      {
        address: VIP,
        port: 80,
        forwarding: 'fullnat',
        proxyProtocol: 'v2',
        realServers: [{ address: RS, port: 8080, proxyProtocol: 'none' }],
      },
    ],
  });
  p.run(segment({ src: CLIENT, dst: VIP, sport: 1, dport: 80, seq: ISN, flags: TCPF_SYN }));
  const a = segment({ src: CLIENT, dst: VIP, sport: 1, dport: 80, seq: ISN + 1, ack: 5, flags: TCPF_ACK });
  assert.equal(p.run(a).v, FORWARD);
  assert.equal(parse(a).seq, ISN + 1);
  assert.equal(p.counters[L.C_PP_HEADERS], 0);
  assert.notEqual(DROP, FORWARD);
});

test('a flow adopted by another node from its Redis record keeps its shift and its header state', () => {
  const a = setup();
  handshake(a);
  a.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK, data: bytes(100) });
  a.fromServer({ seq: SISN + 1, ack: ISN + 1 + 28 + 100, flags: TCPF_ACK });
  // The record node A writes (conntrack/redis-sync.ts collect), read by node B.
  let rec = '';
  a.table.forEach((_e, o) => {
    const x = a.table.i32;
    const f = [
      x[o + L.E_PROTO],
      x[o + L.E_CADDR],
      x[o + L.E_CPORTS],
      x[o + L.E_VADDR],
      x[o + L.E_DADDR],
      x[o + L.E_DPORTS],
      x[o + L.E_LADDR],
      x[o + L.E_FLAGS]! & L.FWD_MASK,
      'tcp 10.96.0.10:80',
      `${RS}:8080`,
      x[o + L.E_STATE],
      0,
      Date.now() + 600_000,
      '',
    ];
    rec = f.join('|') + ppField(x[o + L.E_PP]!, x[o + L.E_PP_SEQ]!);
  });
  const r = parseRecord(rec, null) as FlowRecord;
  assert.equal(typeof r, 'object', rec);
  assert.equal(r.pp & (L.PP_SENT | L.PP_DATA | L.PP_ACKED), L.PP_SENT | L.PP_DATA | L.PP_ACKED);
  const b = setup();
  const t = b.model.flowTarget(r.service, r.realServer);
  assert.equal(
    checkRecord(r, t, Date.now(), () => 900_000),
    null,
  );
  const shadow = {
    proto: r.proto,
    caddr: r.caddr,
    cports: r.cports,
    vaddr: r.vaddr,
    daddr: r.daddr,
    dports: r.dports,
    laddr: r.laddr,
    rs: t!.slot,
    svc: t!.svcSlot,
  };
  assert.ok(
    b.table.putShadow(
      newFlow({
        ...shadow,
        flags: r.fwd | (r.inactive ? L.F_INACTIVE : 0),
        state: r.state,
        expires: b.table.now() + 600_000,
        pp: r.pp,
        ppSeq: r.ppSeq,
      }),
    ) >= 0,
  );
  const d = b.fromClient({ seq: ISN + 101, ack: SISN + 1, flags: TCPF_ACK, data: bytes(10) });
  assert.equal(d.v, FORWARD);
  assert.equal(b.counters[L.C_ADOPTED], 1);
  assert.equal(parse(d.outs[0]!).seq, ISN + 101 + 28);
  b.setPort(r.dports & 0xffff);
  assert.equal(b.fromServer({ seq: SISN + 1, ack: ISN + 111 + 28, flags: TCPF_ACK }).ack, ISN + 111);
  // Node B knows the header was acknowledged: a late retransmission of the first data is only shifted.
  assert.equal(b.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK, data: bytes(100) }).v, FORWARD);
  assert.equal(b.headers(), 0);
});

// ── a client that forges the header (issue 25) ───────────────────────────────────────────────
/** A client's own v2 header for 6.6.6.6:6666 → VIP:80, as an attacker would send it. */
function forged(v6 = false): Uint8Array {
  return v6 ? header(PP_V2, '2001:db8::666', VIP6, 6666, 80) : header(PP_V2, '6.6.6.6', VIP, 6666, 80);
}

test('client bytes before the stream start never reach the server while the header is unacknowledged: a segment ending at S is dropped', () => {
  for (const v6 of [false, true]) {
    const f = setup({ v6 });
    const fake = forged(v6);
    f.fromClient({ seq: ISN, flags: TCPF_SYN });
    f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
    // Before the handshake ACK (no header sent yet), and after it (sent, not acknowledged).
    const early = f.fromClient({ seq: ISN + 1 - fake.length, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: fake });
    assert.equal(early.v, DROP, 'a segment ending exactly at S');
    const over = f.fromClient({ seq: ISN + 1 - 10, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: bytes(40) });
    assert.equal(over.v, DROP, 'a segment overlapping S');
    const fin = f.fromClient({ seq: ISN, ack: SISN + 1, flags: TCPF_ACK | TCPF_FIN });
    assert.equal(fin.v, DROP, 'a FIN before S');
    const h = f.fromClient({ seq: ISN + 1, ack: SISN + 1, flags: TCPF_ACK });
    assert.equal(h.v, REPLY, 'the handshake ACK still becomes the header segment');
    const keepalive = f.fromClient({ seq: ISN, ack: SISN + 1, flags: TCPF_ACK, data: bytes(1) });
    assert.equal(keepalive.v, DROP, 'a one-byte probe at S − 1 would be the header’s last byte');
    const bare = f.fromClient({ seq: ISN, ack: SISN + 1, flags: TCPF_ACK });
    assert.equal(bare.v, FORWARD, 'a bare ACK before S carries no byte: it passes, shifted');
    assert.equal(f.drops('proxy_protocol_forged'), 4);
    // Once the server acknowledges the header, the server has [S, S + len): old bytes are duplicates.
    f.fromServer({ seq: SISN + 1, ack: ISN + 1 + (v6 ? 52 : 28), flags: TCPF_ACK });
    assert.equal(f.fromClient({ seq: ISN + 1 - 5, ack: SISN + 1, flags: TCPF_ACK, data: bytes(5) }).v, FORWARD);
  }
});

test("a SYN with data (TCP Fast Open) reaches the server without it: the data would have been the server's first bytes", () => {
  for (const v6 of [false, true]) {
    for (const offload of [false, true]) {
      const f = setup({ v6, offload });
      const syn = f.fromClient({ seq: ISN, flags: TCPF_SYN, data: forged(v6) });
      assert.equal(syn.v, REPLY);
      assert.equal(syn.outs.length, 1);
      const out = syn.outs[0]!;
      const s = parse(out);
      assert.equal(s.flags, TCPF_SYN);
      assert.equal(s.seq, ISN);
      assert.equal(s.data.length, 0, 'no data');
      assert.equal(s.ts, 0x01020304, 'options kept');
      assert.deepEqual([s.dst, s.dport], [v6 ? 'fd00:1:0:0:0:0:0:1' : RS, 8080]);
      assert.ok(tcpValid(out), 'lengths and checksums');
      assert.equal(f.counters[L.C_PP_SYN_DATA], 1);
    }
  }
});

test("the stream start is the server's: a client SYN with another ISN moves nothing, the server's SYN-ACK does", () => {
  const f = setup();
  const fake = forged();
  f.fromClient({ seq: ISN, flags: TCPF_SYN });
  f.fromServer({ seq: SISN, ack: ISN + 1, flags: TCPF_SYN | TCPF_ACK });
  // The attacker picks a second ISN so that its forged segment lies after the new S, and sends
  // it where the server (still in the first handshake) expects its S.
  const isn2 = ISN - fake.length - 100;
  assert.equal(f.fromClient({ seq: isn2, flags: TCPF_SYN }).v, FORWARD);
  const forgedSeg = f.fromClient({ seq: ISN + 1 - fake.length, ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: fake });
  assert.equal(forgedSeg.v, DROP, 'still before the S the server gave');
  // A real reuse: the server answers a new SYN with a SYN-ACK naming the new start.
  f.fromClient({ seq: 0x70000000, flags: TCPF_SYN });
  f.fromServer({ seq: SISN + 5000, ack: 0x70000001, flags: TCPF_SYN | TCPF_ACK });
  assert.equal(f.fromClient({ seq: 0x70000001 - fake.length, ack: SISN + 5001, flags: TCPF_ACK, data: fake }).v, DROP);
  const h = f.fromClient({ seq: 0x70000001, ack: SISN + 5001, flags: TCPF_ACK });
  assert.equal(h.v, REPLY);
  assert.equal(parse(h.outs[0]!).seq, 0x70000001);
});

/**
 * A receiver as the real server's TCP keeps its stream: S from the SYN-ACK it sent, bytes kept
 * where they land first (a later copy of the same number is a duplicate), ACKs of what is in
 * order. Random client segments around S — forged headers ending at or overlapping S, SYN data,
 * retransmissions, out of order, new SYNs — never put a byte into [S, S + len) that is not
 * uvs's header.
 */
test('random client segments around the stream start never place a byte in the header’s place that is not the header', () => {
  for (const v6 of [false, true]) {
    for (let seed = 1; seed <= 300; seed++) {
      const r = rngBelow(seed * 7919 + (v6 ? 1 : 0));
      const f = setup({ v6 });
      const want = header(PP_V2, v6 ? CLIENT6 : CLIENT, v6 ? VIP6 : VIP, 40000, 80);
      const len = want.length;
      const fake = forged(v6);
      let isn = ISN;
      let s = 0; // the server's stream start; 0 = no connection
      const got = new Map<number, number>(); // offset from S → byte
      let log: string[] = [];
      const deliver = (pkts: Uint8Array[]) => {
        for (const pkt of pkts) {
          const x = parse(pkt);
          if (x.flags & TCPF_SYN) {
            if (s === 0) {
              s = (x.seq + 1) >>> 0;
              f.fromServer({ seq: SISN, ack: s, flags: TCPF_SYN | TCPF_ACK });
            }
            continue;
          }
          if (s === 0) continue;
          log.push(`>${x.flags}@${(x.seq - s) | 0}+${x.data.length}`);
          for (let i = 0; i < x.data.length; i++) {
            const at = ((x.seq + i - s) | 0) >>> 0;
            if (at < len + 200 && !got.has(at)) got.set(at, x.data[i]!);
          }
        }
        let nxt = 0;
        while (got.has(nxt)) nxt++;
        if (s !== 0 && nxt > 0) {
          log.push(`<${nxt}`);
          f.fromServer({ seq: SISN + 1, ack: (s + nxt) >>> 0, flags: TCPF_ACK });
        }
      };
      const send = (seg: Omit<Seg, 'src' | 'dst' | 'sport' | 'dport'>) => {
        log.push(`${seg.flags}@${(seg.seq - isn - 1) | 0}+${seg.data?.length ?? 0}`);
        const o = f.fromClient(seg);
        deliver(o.v === DROP ? [] : o.outs);
      };
      send({ seq: isn, flags: TCPF_SYN, data: r(2) ? fake : undefined });
      for (let k = 0; k < 12; k++) {
        const base = (isn + 1) | 0;
        switch (r(6)) {
          case 0: // a forged header ending at, or overlapping, the start
            send({ seq: base - fake.length + r(2) * r(10), ack: SISN + 1, flags: TCPF_ACK | TCPF_PSH, data: fake });
            break;
          case 1: // the handshake ACK (or its repeat)
            send({ seq: base, ack: SISN + 1, flags: TCPF_ACK });
            break;
          case 2: // client data at or after the start, maybe out of order
            send({ seq: base + r(3) * 20, ack: SISN + 1, flags: TCPF_ACK, data: bytes(1 + r(40), seed) });
            break;
          case 3: // bytes just before the start
            send({ seq: base - 1 - r(len + 20), ack: SISN + 1, flags: TCPF_ACK, data: bytes(1 + r(60), 3) });
            break;
          case 4: // a new SYN with another ISN, maybe with data
            isn = (isn - len - r(200)) | 0;
            send({ seq: isn, flags: TCPF_SYN, data: r(2) ? fake : undefined });
            break;
          default: // a FIN or RST somewhere near
            send({ seq: base + r(len) - (len >> 1), ack: SISN + 1, flags: r(2) ? TCPF_ACK | TCPF_FIN : TCPF_RST | TCPF_ACK });
        }
      }
      for (let i = 0; i < len; i++) {
        if (got.has(i)) assert.equal(got.get(i), want[i], `v6=${v6} seed ${seed}: byte ${i} of the header's place; ${log.join(' ')}`);
      }
      log = [];
    }
  }
});
