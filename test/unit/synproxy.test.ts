/**
 * The SYN proxy (lb/synproxy.ts): the cookie (round trip, wrong key, old minute, altered tuple,
 * every MSS index, the options in the timestamp), the adjustments (checksums checked by a
 * recomputation written here, SACK blocks, sequence wraparound) and the whole handshake through
 * the packet path: SYN → cookie SYN-ACK (no entry), ACK → our SYN to the server, held data, the
 * server's SYN-ACK → our ACK and the held data adjusted, then both directions adjusted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Defense } from '../../conntrack/defense';
import { ConnTable } from '../../conntrack/table';
import * as L from '../../conntrack/layout';
import { FlowView, newFlow } from '../../conntrack/flow';
import { TCP_ESTABLISHED, TCPF_ACK, TCPF_PSH, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import type { PacketContext } from '../../lb/context';
import { PacketProcessor } from '../../lb/core';
import {
  adjustIn,
  adjustOut,
  checkCookie,
  cookieTimestamp,
  makeCookie,
  MSS_TABLE4,
  MSS_TABLE6,
  mssIndex,
  timestampSack,
  timestampWscale,
  tsOffset,
} from '../../lb/synproxy';
import { DROP, FORWARD, OutRegion, REPLY } from '../../lb/verdict';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import * as P from '../../net/packet';
import { HalfSipHash } from '../../net/siphash';
import { complete, partial } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

// ── an independent checksum ──────────────────────────────────────────────────────────────────
/** The one's-complement sum of 16-bit words, summed plainly in a Number and folded at the end. */
function ocSum(words: number[]): number {
  let s = 0;
  for (const w of words) s += w;
  while (s > 0xffff) s = (s & 0xffff) + Math.floor(s / 0x10000);
  return s;
}
function words(b: Uint8Array, from: number, to: number): number[] {
  const w: number[] = [];
  for (let i = from; i < to; i += 2) w.push((b[i]! << 8) | (i + 1 < to ? b[i + 1]! : 0));
  return w;
}
/** Whether every checksum of an IPv4 or IPv6 TCP packet (no extension headers) is right. */
function valid(b: Uint8Array): boolean {
  if (b[0]! >> 4 === 6) {
    const plen = (b[4]! << 8) | b[5]!;
    return ocSum([...words(b, 8, 40), 0, plen, 0, b[6]!, ...words(b, 40, 40 + plen)]) === 0xffff;
  }
  const ihl = (b[0]! & 15) * 4;
  const total = (b[2]! << 8) | b[3]!;
  if (ocSum(words(b, 0, ihl)) !== 0xffff) return false;
  return ocSum([...words(b, 12, 20), b[9]!, total - ihl, ...words(b, ihl, total)]) === 0xffff;
}

// ── packets with options ─────────────────────────────────────────────────────────────────────
interface Seg {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  seq: number;
  ack?: number;
  flags: number;
  win?: number;
  opts?: number[];
  payload?: Uint8Array;
}
const MSS = (v: number) => [2, 4, v >> 8, v & 255];
const WS = (v: number) => [1, 3, 3, v];
const SACKP = [1, 1, 4, 2];
const TS = (val: number, ecr: number) => [1, 1, 8, 10, ...be32(val), ...be32(ecr)];
const SACK = (...edges: number[]) => [1, 1, 5, 2 + 4 * edges.length, ...edges.flatMap(be32)];
function be32(v: number): number[] {
  return [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
}
function seg(s: Seg): Uint8Array {
  const v6 = s.src.includes(':');
  const opts = s.opts ?? [];
  while (opts.length % 4) opts.push(1);
  const payload = s.payload ?? new Uint8Array(0);
  const ih = v6 ? 40 : 20;
  const thl = 20 + opts.length;
  const b = new Uint8Array(ih + thl + payload.length);
  if (v6) {
    P.put32(b, 0, 0x60000000);
    P.put16(b, P.IP6_PLEN, thl + payload.length);
    b[P.IP6_NEXT] = P.IPPROTO_TCP;
    b[P.IP6_HOPS] = 64;
    const a = parseIPv6(s.src)!;
    const d = parseIPv6(s.dst)!;
    for (let i = 0; i < 4; i++) {
      P.put32(b, P.IP6_SRC + 4 * i, a[i]!);
      P.put32(b, P.IP6_DST + 4 * i, d[i]!);
    }
  } else {
    b[0] = 0x45;
    P.put16(b, P.IP_TOTLEN, b.length);
    P.put16(b, P.IP_FRAG, 0x4000);
    b[P.IP_TTL] = 64;
    b[P.IP_PROTO] = P.IPPROTO_TCP;
    P.put32(b, P.IP_SRC, parseIPv4(s.src)!);
    P.put32(b, P.IP_DST, parseIPv4(s.dst)!);
    P.put16(b, P.IP_CSUM, ~ocSum(words(b, 0, 20)) & 0xffff);
  }
  const t = ih;
  P.put16(b, t, s.sport);
  P.put16(b, t + 2, s.dport);
  P.put32(b, t + 4, s.seq);
  P.put32(b, t + 8, s.ack ?? 0);
  b[t + 12] = (thl >> 2) << 4;
  b[t + 13] = s.flags;
  P.put16(b, t + 14, s.win ?? 1000);
  b.set(opts, t + 20);
  b.set(payload, t + thl);
  const ps = v6 ? [...words(b, 8, 40), 0, thl + payload.length, 0, 6] : [...words(b, 12, 20), 6, thl + payload.length];
  P.put16(b, t + 16, ~ocSum([...ps, ...words(b, t, b.length)]) & 0xffff);
  return b;
}
interface TcpView {
  src: number;
  dst: number;
  sport: number;
  dport: number;
  seq: number;
  ack: number;
  flags: number;
  win: number;
  payload: number;
  mss?: number;
  ws?: number;
  sackOk?: number;
  tsval?: number;
  tsecr?: number;
  sack?: number[];
}
/** The TCP fields and options of a packet. */
function tcpOf(b: Uint8Array): TcpView {
  const t = b[0]! >> 4 === 6 ? 40 : (b[0]! & 15) * 4;
  const thl = (b[t + 12]! >> 4) * 4;
  const o: Record<string, number | number[]> = {};
  for (let i = t + 20; i < t + thl; ) {
    const k = b[i]!;
    if (k === 0) break;
    if (k === 1) {
      i++;
      continue;
    }
    const n = b[i + 1]!;
    if (k === 2) o.mss = P.u16(b, i + 2);
    if (k === 3) o.ws = b[i + 2]!;
    if (k === 4) o.sackOk = 1;
    if (k === 8) {
      o.tsval = P.u32(b, i + 2) >>> 0;
      o.tsecr = P.u32(b, i + 6) >>> 0;
    }
    if (k === 5) o.sack = Array.from({ length: (n - 2) / 4 }, (_, j) => P.u32(b, i + 2 + 4 * j) >>> 0);
    i += n;
  }
  const ip = (at: number) => (b[0]! >> 4 === 6 ? P.u32(b, at + 12) >>> 0 : P.u32(b, at) >>> 0);
  return {
    src: b[0]! >> 4 === 6 ? ip(8) : ip(12),
    dst: b[0]! >> 4 === 6 ? ip(24) : ip(16),
    sport: P.u16(b, t),
    dport: P.u16(b, t + 2),
    seq: P.u32(b, t + 4) >>> 0,
    ack: P.u32(b, t + 8) >>> 0,
    flags: b[t + 13]!,
    win: P.u16(b, t + 14),
    payload: b.length - t - thl,
    ...o,
  };
}
const u = (x: number) => x >>> 0;

// ── the cookie ───────────────────────────────────────────────────────────────────────────────
const KEY = Int32Array.of(0x01234567, 0x89abcdef, 0x0badf00d, 0x5eed1234);
const pa4 = Int32Array.of(0, 0, 0, parseIPv4('192.0.2.7')!, 0, 0, 0, parseIPv4('10.96.0.1')!);
const pa6 = Int32Array.from([...parseIPv6('2001:db8::7')!, ...parseIPv6('fd00:96::10')!]);
const PORTS = (40000 << 16) | 80;
const h = new HalfSipHash();

test('a cookie round-trips for every MSS index, IPv4 and IPv6, for 2 minutes', () => {
  for (const [v6, pa] of [
    [false, pa4],
    [true, pa6],
  ] as const) {
    for (let idx = 0; idx < 4; idx++) {
      for (const isn of [0, 1, 0x7fffffff, -1, 0x12345678]) {
        const c = makeCookie(h, KEY, 0, v6, pa, PORTS, isn, 29_000_000, idx);
        assert.equal(checkCookie(h, KEY, 0, v6, pa, PORTS, isn, c, 29_000_000), idx, 'the same minute');
        assert.equal(checkCookie(h, KEY, 0, v6, pa, PORTS, isn, c, 29_000_001), idx, 'the next minute');
        assert.equal(checkCookie(h, KEY, 0, v6, pa, PORTS, isn, c, 29_000_002), -1, 'two minutes on: too old');
        assert.equal(checkCookie(h, KEY, 0, v6, pa, PORTS, isn, c, 28_999_999), -1, 'a minute from the future');
      }
    }
  }
});

test('a cookie is refused under another key, for another tuple or ISN, or when it is no cookie at all', () => {
  const c = makeCookie(h, KEY, 0, false, pa4, PORTS, 1000, 500, 3);
  const other = Int32Array.from(KEY);
  other[2] = other[2]! ^ 1;
  assert.equal(checkCookie(h, other, 0, false, pa4, PORTS, 1000, c, 500), -1, 'another key');
  assert.equal(checkCookie(h, KEY, 0, false, pa4, PORTS + 1, 1000, c, 500), -1, 'another port');
  const pa = Int32Array.from(pa4);
  pa[3] = pa[3]! + 1;
  assert.equal(checkCookie(h, KEY, 0, false, pa, PORTS, 1000, c, 500), -1, 'another client');
  // The ISN is added to the cookie (as in Linux): one a few numbers off moves the MSS index by as
  // much, one further off leaves no index — the tuple and the key are what a forger cannot know.
  assert.equal(checkCookie(h, KEY, 0, false, pa4, PORTS, 1000 + 4096, c, 500), -1, 'another ISN');
  assert.equal(checkCookie(h, KEY, 0, true, pa6, PORTS, 1000, makeCookie(h, KEY, 0, false, pa4, PORTS, 1000, 500, 3), 500), -1);
  const p6 = Int32Array.from(pa6);
  p6[1] = p6[1]! ^ 0x100; // another host of another /64, same low word
  assert.equal(checkCookie(h, KEY, 0, true, p6, PORTS, 7, makeCookie(h, KEY, 0, true, pa6, PORTS, 7, 500, 1), 500), -1);
  // Random numbers: a valid one by chance is 1 in 2^29 (2 minutes of 256, 4 indexes of 2^24); none of 10 000.
  let passed = 0;
  for (let i = 0; i < 10_000; i++) if (checkCookie(h, KEY, 0, false, pa4, PORTS, 1000, (Math.random() * 2 ** 32) | 0, 500) >= 0) passed++;
  assert.equal(passed, 0);
});

test('the MSS index is the largest table MSS not above the client MSS', () => {
  assert.deepEqual(
    [400, 536, 1299, 1300, 1459, 1460, 9000].map((m) => MSS_TABLE4[mssIndex(m, false)]),
    [536, 536, 536, 1300, 1440, 1460, 1460],
  );
  assert.deepEqual(
    [1000, 1220, 1440, 1500, 9000].map((m) => MSS_TABLE6[mssIndex(m, true)]),
    [1220, 1220, 1440, 1440, 8940],
  );
});

test("our timestamp carries the client's window scale and SACK in its low 6 bits and is never ahead of now", () => {
  for (const now of [0x12345678, 0x1234567f, 64, 0xffffffc0 | 0, 5]) {
    for (const ws of [-1, 0, 7, 14]) {
      for (const sack of [false, true]) {
        const ts = cookieTimestamp(now, ws, sack, false);
        assert.equal(timestampWscale(ts), ws);
        assert.equal(timestampSack(ts), sack);
        const behind = (u(now) - u(ts) + 2 ** 32) % 2 ** 32;
        assert.ok(behind < 64, `now ${now} ts ${ts}`);
      }
    }
  }
});

// ── the adjustments, alone ───────────────────────────────────────────────────────────────────
function ctxFor(b: Uint8Array): PacketContext {
  return { l4: b[0]! >> 4 === 6 ? 40 : 20, partial: false } as PacketContext;
}
function view(delta: number, tsDelta: number, ourWs: number, srvWs: number): FlowView {
  const f = new FlowView();
  f.sp = L.F_SYNPROXY;
  f.spDelta = delta;
  f.spTsDelta = tsDelta;
  f.spOpts = L.SPO_TS | (ourWs << L.SPO_OURWS_SHIFT) | (srvWs << L.SPO_SRVWS_SHIFT);
  return f;
}

test('server → client: seq and TSval wrap around 2^32, the window is rescaled and clamped, checksums stay right', () => {
  const f = view(100, -50, 7, 9);
  const b = seg({
    src: '10.0.0.2',
    dst: '192.0.2.7',
    sport: 8080,
    dport: 40000,
    seq: 0xffffffc0 | 0,
    ack: 5,
    flags: TCPF_ACK,
    win: 300,
    opts: TS(20, 9),
  });
  adjustOut(ctxFor(b), b, f);
  const t = tcpOf(b);
  assert.equal(t.seq, 0x24, '0xffffffc0 + 100 wraps');
  assert.equal(t.tsval, u(20 - 50), 'TSval wraps the other way');
  assert.equal(t.tsecr, 9, 'TSecr is the client’s own');
  assert.equal(t.ack, 5, 'ack untouched');
  assert.equal(t.win, 1200, '300 << 9 >> 7');
  assert.ok(valid(b));
  const big = seg({
    src: '10.0.0.2',
    dst: '192.0.2.7',
    sport: 8080,
    dport: 40000,
    seq: 1,
    ack: 5,
    flags: TCPF_ACK,
    win: 40000,
    opts: TS(1, 1),
  });
  adjustOut(ctxFor(big), big, f);
  assert.equal(tcpOf(big).win, 65535, 'clamped');
  assert.ok(valid(big));
  const down = seg({
    src: '2001:db8::2',
    dst: '2001:db8::7',
    sport: 8080,
    dport: 40000,
    seq: 7,
    ack: 5,
    flags: TCPF_ACK,
    win: 1000,
    opts: TS(1, 1),
  });
  adjustOut(ctxFor(down), down, view(-8, 0, 7, 2));
  assert.deepEqual([tcpOf(down).seq, tcpOf(down).win], [u(-1), 32], 'IPv6: 1000 << 2 >> 7 rounded up, seq 7 − 8 wraps');
  assert.ok(valid(down));
  const tiny = seg({ src: '10.0.0.2', dst: '192.0.2.7', sport: 8080, dport: 40000, seq: 1, ack: 5, flags: TCPF_ACK, win: 100 });
  adjustOut(ctxFor(tiny), tiny, view(0, 0, 7, 0));
  assert.equal(tcpOf(tiny).win, 1, '100 bytes in scale 7: 1, never 0 (a stalled client)');
  assert.ok(valid(tiny));
});

test('client → server with a server that has window scaling off: the window is shifted by the client’s scale, clamped', () => {
  const f = view(0, 0, 7, 0);
  f.spOpts = L.spServerOpts(f.spOpts | (6 << L.SPO_WS_SHIFT), -1);
  assert.ok(f.spOpts & L.SPO_SRV_NOWS);
  const seg6 = (win: number, flags = TCPF_ACK) => seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: 1, ack: 5, flags, win });
  const b = seg6(500);
  adjustIn(ctxFor(b), b, f);
  assert.equal(tcpOf(b).win, 32000, '500 << 6');
  assert.ok(valid(b));
  const big = seg6(2000);
  adjustIn(ctxFor(big), big, f);
  assert.equal(tcpOf(big).win, 65535, 'clamped');
  assert.ok(valid(big));
  // A server that did scale (even by 0), or a client that offered none: windows untouched.
  for (const opts of [
    L.spServerOpts(6 << L.SPO_WS_SHIFT, 0),
    L.spServerOpts(0xf << L.SPO_WS_SHIFT, -1),
    L.spServerOpts(0xf << L.SPO_WS_SHIFT, 5),
  ]) {
    const g = view(0, 0, 0, 0);
    g.spOpts = opts;
    const x = seg6(500);
    adjustIn(ctxFor(x), x, g);
    assert.equal(tcpOf(x).win, 500);
    assert.equal((opts >>> L.SPO_SRVWS_SHIFT) & 0xf, 0, 'a WS on the SYN-ACK when our SYN had none is ignored');
  }
});

test('client → server: ack, every SACK edge and TSecr come back into the server’s numbers, checksums stay right', () => {
  const f = view(0x10, 0x7fffffff, 7, 7);
  const b = seg({
    src: '192.0.2.7',
    dst: '10.96.0.1',
    sport: 40000,
    dport: 80,
    seq: 77,
    ack: 5,
    flags: TCPF_ACK,
    opts: [...TS(1000, 3), ...SACK(0x20, 0x30, 0x08, 0x0c)],
  });
  adjustIn(ctxFor(b), b, f);
  const t = tcpOf(b);
  assert.equal(t.seq, 77, 'the client’s seq is the server’s numbering already');
  assert.equal(t.ack, u(5 - 0x10), 'ack wraps below 0');
  assert.deepEqual(t.sack, [0x10, 0x20, u(0x08 - 0x10), u(0x0c - 0x10)]);
  assert.equal(t.tsval, 1000);
  assert.equal(t.tsecr, u(3 - 0x7fffffff));
  assert.ok(valid(b));
});

// ── the handshake through the packet path ────────────────────────────────────────────────────
const VIP = '10.96.0.1';
const CLIENT = '192.0.2.7';
const RS = '10.1.0.1';
const doc = (forwarding: string, synProxy = 3) => ({
  dataplane: {
    vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'],
    fullnat: { addresses: ['10.99.0.1', 'fd00:99::1'] },
    tunnelSource: '10.0.0.1',
  },
  services: [
    { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding, realServers: [{ address: RS, port: 8080 }] },
    {
      protocol: 'tcp',
      address: 'fd00:96::10',
      port: 80,
      scheduler: 'rr',
      forwarding,
      realServers: [{ address: 'fd00:10::1', port: 8080 }],
    },
    { protocol: 'tcp', address: VIP, port: 81, scheduler: 'rr', forwarding: 'tunnel', realServers: [{ address: RS }] },
  ],
  defense: { synProxy },
});

/** The processor and, as uvsd's control thread has it, the defense that switches the proxy on. */
function proxied(forwarding: string, synProxy = 3, capacity = 1024) {
  const p = makeProcessor(doc(forwarding, synProxy), { outBytes: 1 << 16, capacity });
  const d = new Defense(p.table, p.cfg.defense);
  return { p, d };
}

function handshake(forwarding: string, v6 = false) {
  const { p } = proxied(forwarding);
  const vip = v6 ? 'fd00:96::10' : VIP;
  const client = v6 ? '2001:db8::7' : CLIENT;
  const isn = 0xfffffff0 | 0; // the client's numbers wrap soon after
  const syn = p.run(
    seg({
      src: client,
      dst: vip,
      sport: 40000,
      dport: 80,
      seq: isn,
      flags: TCPF_SYN,
      win: 64240,
      opts: [...MSS(1460), ...SACKP, ...TS(5000, 0), ...WS(7)],
    }),
  );
  return { p, vip, client, isn, syn };
}

test('a SYN is answered with a cookie SYN-ACK from the VIP, with the options it may carry, and makes no entry', () => {
  const { p, isn, syn } = handshake('masq');
  assert.equal(syn.v, REPLY);
  const r = tcpOf(syn.reply!);
  assert.ok(valid(syn.reply!));
  assert.deepEqual([r.src, r.dst, r.sport, r.dport], [parseIPv4(VIP)! >>> 0, parseIPv4(CLIENT)! >>> 0, 80, 40000]);
  assert.equal(r.flags, TCPF_SYN | TCPF_ACK);
  assert.equal(r.ack, u(isn + 1));
  assert.equal(r.win, 0, 'window 0: nothing but the ACK until the server has answered');
  assert.deepEqual([r.mss, r.ws, r.sackOk, r.tsecr], [1460, 7, 1, 5000]);
  // Our TSval: the clock's ms with the client's scale in the low bits, plus the pair's keyed offset.
  const pa = Int32Array.of(0, 0, 0, parseIPv4(CLIENT)!, 0, 0, 0, parseIPv4(VIP)!);
  const off = tsOffset(new HalfSipHash(), p.table.i32, L.H_SP_KEY, false, pa);
  assert.equal(timestampWscale((r.tsval! - off) | 0), 7, "the client's scale, in our TSval");
  assert.ok(Math.abs((r.tsval! - off - ((p.table.epoch + p.now()) % 2 ** 32)) | 0) < 64, 'the clock under the offset');
  const pb = Int32Array.from(pa);
  pb[3] = pb[3]! + 1;
  assert.notEqual(tsOffset(new HalfSipHash(), p.table.i32, L.H_SP_KEY, false, pb), off, 'another client, another offset');
  assert.equal(p.table.count(), 0, 'no entry');
  assert.equal(p.counters[L.C_GEN_BASE + L.GEN_SYN_ACK * L.GEN_RESULTS + L.GEN_SENT], 1);
  // Without timestamps only the MSS can come back: no window scale, no SACK offered.
  const plain = p.run(
    seg({ src: CLIENT, dst: VIP, sport: 40001, dport: 80, seq: 9, flags: TCPF_SYN, opts: [...MSS(1300), ...SACKP, ...WS(7)] }),
  );
  const q = tcpOf(plain.reply!);
  assert.deepEqual([q.mss, q.ws, q.sackOk, q.tsval], [1300, undefined, undefined, undefined]);
  assert.ok(valid(plain.reply!));
  // Never to a source inside the VIP ranges (an answer loop), and a tunnel service is not proxied.
  assert.equal(p.run(seg({ src: '10.96.0.9', dst: VIP, sport: 1, dport: 80, seq: 1, flags: TCPF_SYN })).v, DROP);
  assert.equal(p.drops('unanswerable_source'), 1);
  const tunnel = p.run(seg({ src: CLIENT, dst: VIP, sport: 40002, dport: 81, seq: 1, flags: TCPF_SYN }));
  assert.equal(tunnel.outs[0]![P.IP_PROTO], 4, 'tunnel: the normal path (IPIP to the server)');
  assert.equal(p.table.count(), 1);
});

for (const [forwarding, v6] of [
  ['masq', false],
  ['fullnat', false],
  ['masq', true],
  ['fullnat', true],
] as const) {
  test(`${forwarding} ${v6 ? 'IPv6' : 'IPv4'}: cookie ACK → our SYN; held data; the server's SYN-ACK → our ACK and the data; then both ways adjusted`, () => {
    const { p, vip, client, isn, syn } = handshake(forwarding, v6);
    const r = tcpOf(syn.reply!);
    const cookie = r.seq;
    const ours = r.tsval as number;
    // The client's ACK (its scale 7 in its window field), then its request right behind it.
    const ack = p.run(
      seg({
        src: client,
        dst: vip,
        sport: 40000,
        dport: 80,
        seq: isn + 1,
        ack: cookie + 1,
        flags: TCPF_ACK,
        win: 502,
        opts: TS(5001, ours),
      }),
    );
    assert.equal(ack.v, REPLY);
    const s = tcpOf(ack.reply!);
    assert.ok(valid(ack.reply!), 'our SYN');
    assert.equal(s.flags, TCPF_SYN);
    assert.equal(s.seq, u(isn), "the client's ISN");
    assert.deepEqual([s.mss, s.ws, s.sackOk, s.tsval, s.tsecr, s.dport], [v6 ? 1440 : 1460, 7, 1, 5001, 0, 8080]);
    assert.equal(s.win, 64256, '502 << 7: a SYN’s window is never scaled');
    if (forwarding === 'fullnat') assert.notEqual(s.src, parseIPv4(client) ?? 0, 'from the pool');
    assert.equal(p.table.count(), 1);
    assert.equal(p.table.spPending(), 1);
    const req = new Uint8Array(100).fill(0x41);
    const held = p.run(
      seg({
        src: client,
        dst: vip,
        sport: 40000,
        dport: 80,
        seq: isn + 1,
        ack: cookie + 1,
        flags: TCPF_ACK | TCPF_PSH,
        win: 502,
        opts: TS(5002, ours),
        payload: req,
      }),
    );
    assert.equal(held.v, DROP);
    assert.equal(p.counters[L.C_SP_HELD], 1);
    assert.equal(p.table.holdUsed(), 1);
    // The server answers our SYN: scale 9, its own ISN and clock.
    const S = 0x40000000;
    const synack = p.run(
      seg({
        src: v6 ? 'fd00:10::1' : RS,
        dst: v6 ? (forwarding === 'fullnat' ? 'fd00:99::1' : client) : forwarding === 'fullnat' ? '10.99.0.1' : client,
        sport: 8080,
        dport: s.sport,
        seq: S,
        ack: isn + 1,
        flags: TCPF_SYN | TCPF_ACK,
        win: 65160,
        opts: [...MSS(1460), ...SACKP, ...TS(777, 5001), ...WS(9)],
      }),
    );
    assert.equal(synack.v, REPLY);
    assert.equal(synack.outs.length, 3, 'our ACK, then the held request, then the client’s window update');
    const [a, d, wu] = synack.outs.map((x) => tcpOf(x));
    assert.ok(synack.outs.every(valid));
    const ip = (x: string) => (v6 ? parseIPv6(x)![3]! >>> 0 : parseIPv4(x)! >>> 0); // tcpOf gives an address's last word
    assert.deepEqual(
      [wu!.src, wu!.dst, wu!.sport, wu!.dport, wu!.flags, wu!.seq, wu!.ack, wu!.win, wu!.tsval, wu!.tsecr, wu!.payload],
      [ip(vip), ip(client), 80, 40000, TCPF_ACK, u(cookie + 1), u(isn + 1), 510, ours, 5001, 0],
      'the window update: 65160 in our scale 7, rounded up',
    );
    assert.deepEqual([a!.flags, a!.seq, a!.ack, a!.tsval, a!.tsecr, a!.win], [TCPF_ACK, u(isn + 1), S + 1, 5001, 777, 502]);
    assert.deepEqual([d!.seq, d!.ack, d!.tsval, d!.tsecr, d!.payload, d!.dport], [u(isn + 1), S + 1, 5002, 777, 100, 8080]);
    assert.equal(p.table.spPending(), 0);
    assert.equal(p.table.holdUsed(), 0, 'the held slot is free again');
    // The server's data: into the client's numbers, window from scale 9 to our 7.
    const srvDst = v6 ? (forwarding === 'fullnat' ? 'fd00:99::1' : client) : forwarding === 'fullnat' ? '10.99.0.1' : client;
    const data = p.run(
      seg({
        src: v6 ? 'fd00:10::1' : RS,
        dst: srvDst,
        sport: 8080,
        dport: s.sport,
        seq: S + 1,
        ack: isn + 101,
        flags: TCPF_ACK,
        win: 100,
        opts: TS(800, 5002),
        payload: new Uint8Array(50),
      }),
    );
    assert.equal(data.v, FORWARD);
    const o = tcpOf(data.pkt);
    assert.ok(valid(data.pkt));
    assert.deepEqual(
      [o.seq, o.ack, o.tsval, o.tsecr, o.win, o.sport, o.dport],
      [u(cookie + 1), u(isn + 101), u(ours + 23), 5002, 400, 80, 40000],
    );
    // The client's SACK of it, back into the server's numbers.
    const sack = p.run(
      seg({
        src: client,
        dst: vip,
        sport: 40000,
        dport: 80,
        seq: isn + 101,
        ack: cookie + 1,
        flags: TCPF_ACK,
        win: 502,
        opts: [...TS(5003, ours + 23), ...SACK(cookie + 11, cookie + 21)],
      }),
    );
    assert.equal(sack.v, FORWARD);
    const k = tcpOf(sack.pkt);
    assert.ok(valid(sack.pkt));
    assert.deepEqual([k.ack, k.tsecr, k.sack], [S + 1, 800, [S + 11, S + 21]]);
    // A retransmitted SYN-ACK (our ACK lost) gets the ACK again, not forwarded to the client.
    const again = p.run(
      seg({
        src: v6 ? 'fd00:10::1' : RS,
        dst: srvDst,
        sport: 8080,
        dport: s.sport,
        seq: S,
        ack: isn + 1,
        flags: TCPF_SYN | TCPF_ACK,
        opts: TS(900, 5001),
      }),
    );
    assert.equal(again.v, REPLY);
    assert.deepEqual([tcpOf(again.outs[0]!).flags, tcpOf(again.outs[0]!).ack], [TCPF_ACK, S + 1]);
  });
}

test('an ACK with no flow and no valid cookie is reset (bad_cookie, within the RST limits, never to an unanswerable source); before any cookie it is answered as before', () => {
  const { p } = proxied('masq');
  const stray = (src = CLIENT) => p.run(seg({ src, dst: VIP, sport: 41000, dport: 80, seq: 5, ack: 12345, flags: TCPF_ACK }));
  const sent = () => p.counters[L.C_GEN_BASE + L.GEN_RESET * L.GEN_RESULTS + L.GEN_SENT];
  assert.equal(stray().v, REPLY, 'no cookie went out yet: the RST of today');
  p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: 1, flags: TCPF_SYN }));
  const r = stray();
  assert.equal(r.v, REPLY);
  const t = tcpOf(r.reply!);
  assert.deepEqual([t.flags, t.seq, t.dport], [TCPF_RST, 12345, 41000], 'a RST at the ACK’s number, as a LISTEN socket sends it');
  assert.equal(p.drops('bad_cookie'), 1);
  assert.equal(sent(), 2);
  assert.equal(p.table.count(), 0);
  // Never to a source answers must not reach (here: inside the VIP range).
  assert.equal(stray('10.96.0.9').v, DROP);
  assert.equal(p.drops('unanswerable_source'), 1);
  assert.equal(sent(), 2);
  // Another worker's clock a little ahead of this one's (it sent the cookie): still checked.
  p.setNow(p.now() - 5);
  assert.equal(stray().v, REPLY);
  assert.equal(p.drops('bad_cookie'), 2);
  // 2 minutes after the last cookie ACKs are no longer checked: the RST of today again.
  p.setNow(p.now() + 120_005);
  assert.equal(stray().v, REPLY);
  assert.equal(p.drops('bad_cookie'), 2);
});

test("a zero-window probe after a lost ACK (seq = the client's ISN) opens the flow; with data at that seq it is no cookie", () => {
  const { p, isn, syn } = handshake('masq');
  const r = tcpOf(syn.reply!);
  const cookie = r.seq;
  // Linux's tcp_xmit_probe_skb: a bare ACK at snd_una − 1 = the ISN, acknowledging our cookie.
  const probe = (seq: number, payload?: Uint8Array) =>
    p.run(
      seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq, ack: cookie + 1, flags: TCPF_ACK, opts: TS(5003, r.tsval!), payload }),
    );
  assert.equal(probe(isn, new Uint8Array(1)).v, REPLY, 'data at the ISN is no probe: reset as a bad cookie');
  assert.equal(p.drops('bad_cookie'), 1);
  assert.equal(p.table.count(), 0);
  const o = probe(isn);
  assert.equal(o.v, REPLY);
  const s = tcpOf(o.reply!);
  assert.ok(valid(o.reply!));
  assert.deepEqual([s.flags, s.seq, s.dport], [TCPF_SYN, u(isn), 8080], "our SYN to the server, at the client's ISN");
  assert.equal(p.drops('bad_cookie'), 1, 'the probe is no bad cookie');
  assert.equal(p.table.spPending(), 1);
});

test("the server's RST to our SYN: the client gets a RST at its numbers and the flow is gone", () => {
  const { p, isn, syn } = handshake('masq');
  const cookie = tcpOf(syn.reply!).seq;
  const ours = tcpOf(syn.reply!).tsval as number;
  p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 1, ack: cookie + 1, flags: TCPF_ACK, opts: TS(5001, ours) }));
  p.run(
    seg({
      src: CLIENT,
      dst: VIP,
      sport: 40000,
      dport: 80,
      seq: isn + 1,
      ack: cookie + 1,
      flags: TCPF_ACK,
      opts: TS(5001, ours),
      payload: new Uint8Array(10),
    }),
  );
  const rst = p.run(seg({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, seq: 0, ack: isn + 1, flags: TCPF_RST | TCPF_ACK }));
  assert.equal(rst.v, REPLY);
  const r = tcpOf(rst.reply!);
  assert.ok(valid(rst.reply!));
  assert.deepEqual(
    [r.src, r.dst, r.sport, r.dport, r.flags, r.seq],
    [parseIPv4(VIP)! >>> 0, parseIPv4(CLIENT)! >>> 0, 80, 40000, TCPF_RST, u(cookie + 1)],
  );
  assert.equal(p.table.count(), 0);
  assert.equal(p.table.holdUsed(), 0);
  assert.equal(p.table.spPending(), 0);
  assert.equal(p.counters[L.C_SP_SERVER_FAIL], 1);
});

test('a pending flow holds at most 3 packets; a client retransmission re-sends our SYN once a second', () => {
  const { p, isn, syn } = handshake('masq');
  const cookie = tcpOf(syn.reply!).seq;
  const ours = tcpOf(syn.reply!).tsval as number;
  p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 1, ack: cookie + 1, flags: TCPF_ACK, opts: TS(5001, ours) }));
  const data = (n: number) =>
    p.run(
      seg({
        src: CLIENT,
        dst: VIP,
        sport: 40000,
        dport: 80,
        seq: isn + 1 + 10 * n,
        ack: cookie + 1,
        flags: TCPF_ACK,
        opts: TS(5001, ours),
        payload: new Uint8Array(10),
      }),
    );
  assert.deepEqual(
    [0, 1, 2, 3].map((n) => data(n).v),
    [DROP, DROP, DROP, DROP],
  );
  assert.equal(p.table.holdUsed(), 3);
  assert.equal(p.drops('synproxy_hold_full'), 1);
  p.setNow(p.now() + 1000);
  const re = data(0);
  assert.equal(re.v, REPLY, 'a second on: our SYN again');
  assert.equal(tcpOf(re.reply!).flags, TCPF_SYN);
});

test('mode 1 answers SYNs with cookies only while the table is short of room', () => {
  const { p, d } = proxied('masq', 1, 64);
  const synAt = (port: number) => p.run(seg({ src: CLIENT, dst: VIP, sport: port, dport: 80, seq: 1, flags: TCPF_SYN }));
  assert.equal(d.active.synProxy, false);
  assert.equal(synAt(1000).v, FORWARD, 'room: the normal path');
  d.configure({ ...d.settings, amemthresh: 64 });
  assert.equal(d.active.synProxy, true, '63 free < 64');
  assert.equal(d.modes.synProxy, 2);
  assert.equal(synAt(1001).v, REPLY, 'short of room: a cookie');
  assert.equal(p.table.count(), 1);
});

test('a service with no weighted server is not proxied (ICMP port unreachable); after a cookie, the ACK to one is reset', () => {
  const { p } = proxied('masq');
  const cookieOf = (sport: number) => tcpOf(p.run(seg({ src: CLIENT, dst: VIP, sport, dport: 80, seq: 99, flags: TCPF_SYN })).reply!).seq;
  const cookie = cookieOf(40000);
  const quiesced = doc('masq');
  quiesced.services[0]!.realServers = [{ address: RS, port: 8080, weight: 0 } as (typeof quiesced.services)[0]['realServers'][0]];
  p.apply(quiesced);
  const syn = p.run(seg({ src: CLIENT, dst: VIP, sport: 40001, dport: 80, seq: 5, flags: TCPF_SYN }));
  assert.equal(syn.reply![P.IP_PROTO], P.IPPROTO_ICMP, 'no cookie: port unreachable as before');
  const ack = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: 100, ack: cookie + 1, flags: TCPF_ACK }));
  const r = tcpOf(ack.reply!);
  assert.deepEqual([r.flags, r.seq], [TCPF_RST, u(cookie + 1)], 'the client, connected to uvs, is reset at its numbers');
  assert.equal(p.table.count(), 0);
});

test("another node's proxied flow (a Redis shadow with its SP words) is adopted and adjusted both ways", () => {
  const { p } = proxied('masq');
  const slot = [...p.model.eachRsSlotAddr()].find((r) => r.addr.startsWith(RS))!.slot;
  const caddr = parseIPv4(CLIENT)!;
  const opts = 1460 | L.SPO_TS | (7 << L.SPO_WS_SHIFT) | (7 << L.SPO_OURWS_SHIFT) | (9 << L.SPO_SRVWS_SHIFT);
  const r = newFlow({
    proto: 6,
    caddr,
    cports: (40000 << 16) | 80,
    vaddr: parseIPv4(VIP)!,
    daddr: parseIPv4(RS)!,
    dports: (8080 << 16) | 40000,
    laddr: caddr,
    flags: L.FWD_MASQ,
    rs: slot,
    svc: 0,
    state: TCP_ESTABLISHED,
    expires: p.table.now() + 60_000,
    sp: 1,
    spDelta: 1000,
    spTsDelta: -7,
    spOpts: opts,
  });
  assert.ok(p.table.putShadow(r) >= 0);
  const c = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: 5, ack: 3000, flags: TCPF_ACK, opts: TS(1, 100) }));
  assert.equal(c.v, FORWARD);
  assert.deepEqual([tcpOf(c.pkt).ack, tcpOf(c.pkt).tsecr], [2000, 107]);
  assert.equal(p.counters[L.C_ADOPTED], 1);
  const s = p.run(seg({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, seq: 2000, ack: 6, flags: TCPF_ACK, win: 10, opts: TS(107, 1) }));
  assert.equal(s.v, FORWARD);
  assert.deepEqual([tcpOf(s.pkt).seq, tcpOf(s.pkt).tsval, tcpOf(s.pkt).win], [3000, 100, 40]);
  assert.ok(valid(c.pkt) && valid(s.pkt));
});

test("a dead worker's lock on the held-packet area is released with its other locks", () => {
  const { p } = proxied('masq');
  const lock = L.holdOffset(p.table.capacity) + L.HOLD_LOCK;
  Atomics.store(p.table.i32, lock, 7);
  assert.equal(p.table.releaseLocksOf(7), 1);
  assert.equal(p.table.i32[lock], 0);
});

/** A masq flow through the whole handshake (server ISN 77, scale 7): ESTABLISHED, its cookie and our TSval. */
function established(v6 = false) {
  const { p, isn, syn } = handshake('masq', v6);
  const client = v6 ? '2001:db8::7' : CLIENT;
  const vip = v6 ? 'fd00:96::10' : VIP;
  const rs = v6 ? 'fd00:10::1' : RS;
  const r = tcpOf(syn.reply!);
  p.run(seg({ src: client, dst: vip, sport: 40000, dport: 80, seq: isn + 1, ack: r.seq + 1, flags: TCPF_ACK, opts: TS(5001, r.tsval!) }));
  p.run(
    seg({
      src: rs,
      dst: client,
      sport: 8080,
      dport: 40000,
      seq: 77,
      ack: isn + 1,
      flags: TCPF_SYN | TCPF_ACK,
      opts: [...TS(9, 5001), ...WS(7)],
    }),
  );
  return { p, isn, cookie: r.seq, ours: r.tsval!, client, vip, rs };
}

for (const v6 of [false, true]) {
  test(`${v6 ? 'IPv6' : 'IPv4'}: an ICMP error on the client's path quoting a proxied server segment reaches the server with the server's seq`, () => {
    const { p, isn, cookie, client, vip, rs } = established(v6);
    const data = p.run(
      seg({ src: rs, dst: client, sport: 8080, dport: 40000, seq: 78, ack: isn + 1, flags: TCPF_ACK, payload: new Uint8Array(1400) }),
    );
    assert.equal(data.v, FORWARD);
    assert.equal(tcpOf(data.pkt).seq, u(cookie + 1));
    const ih = v6 ? 40 : 20;
    const quoted = data.pkt.subarray(0, ih + 8); // the IP header + 8 bytes, as a router quotes it
    const icmp = new Uint8Array(ih + 8 + quoted.length);
    let err: Uint8Array;
    if (v6) {
      const b = seg({ src: '2001:db8::fe', dst: vip, sport: 0, dport: 0, seq: 0, flags: 0 }).subarray(0, 40);
      icmp.set(b);
      P.put16(icmp, P.IP6_PLEN, 8 + quoted.length);
      icmp[P.IP6_NEXT] = P.IPPROTO_ICMPV6;
      icmp[40] = 2; // Packet Too Big
      P.put32(icmp, 44, 1280);
      icmp.set(quoted, 48);
      P.put16(icmp, 42, ~ocSum([...words(icmp, 8, 40), 0, 8 + quoted.length, 0, 58, ...words(icmp, 40, icmp.length)]) & 0xffff);
      err = icmp;
    } else {
      const b = seg({ src: '192.0.2.254', dst: vip, sport: 0, dport: 0, seq: 0, flags: 0 }).subarray(0, 20);
      icmp.set(b);
      P.put16(icmp, P.IP_TOTLEN, icmp.length);
      icmp[P.IP_PROTO] = P.IPPROTO_ICMP;
      P.put16(icmp, P.IP_CSUM, 0);
      P.put16(icmp, P.IP_CSUM, ~ocSum(words(icmp, 0, 20)) & 0xffff);
      icmp[20] = 3; // fragmentation needed
      icmp[21] = 4;
      P.put16(icmp, 26, 1280);
      icmp.set(quoted, 28);
      P.put16(icmp, 22, ~ocSum(words(icmp, 20, icmp.length)) & 0xffff);
      err = icmp;
    }
    const r = p.run(err);
    assert.equal(r.v, FORWARD);
    const q = ih + 8 + ih;
    assert.equal(P.u32(err, q + P.TCP_SEQ) >>> 0, 78, 'the quoted seq in the server’s numbering');
    assert.equal(P.u16(err, q + P.L4_SPORT), 8080, 'the quoted source the real server’s');
    if (v6)
      assert.equal(ocSum([...words(err, 8, 40), 0, err.length - 40, 0, 58, ...words(err, 40, err.length)]), 0xffff, 'ICMPv6 checksum');
    else assert.equal(ocSum(words(err, 20, err.length)), 0xffff, 'ICMP checksum');
  });
}

test('a SYN on a proxied flow the client reset (its port reused) gets a cookie of its own', () => {
  const { p, isn, cookie } = established();
  assert.equal(p.table.count(), 1);
  const rst = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 1, ack: cookie + 1, flags: TCPF_RST | TCPF_ACK }));
  assert.equal(rst.v, FORWARD);
  assert.equal(tcpOf(rst.pkt).ack, 78, 'the RST in the server’s numbers');
  assert.equal(p.table.count(), 1);
  const fresh = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: 123456, flags: TCPF_SYN, opts: TS(6000, 0) }));
  assert.equal(fresh.v, REPLY);
  assert.deepEqual([tcpOf(fresh.reply!).flags, tcpOf(fresh.reply!).ack], [TCPF_SYN | TCPF_ACK, 123457], 'a cookie for the new ISN');
  assert.equal(p.table.count(), 0, 'the old flow is gone');
});

test('a spoofed SYN (or a late duplicate) on an ESTABLISHED proxied flow ends nothing: it goes to the server, the flow stays adjusted', () => {
  const { p, isn, cookie, ours } = established();
  const dup = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn, flags: TCPF_SYN, opts: TS(5000, 0) }));
  assert.equal(dup.v, FORWARD, 'the flow’s own SYN, late: the flow stays');
  const spoof = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: 0x5eed, flags: TCPF_SYN, opts: TS(6000, 0) }));
  assert.equal(spoof.v, FORWARD, 'to the server (its challenge ACK answers), no cookie');
  assert.equal(p.table.count(), 1);
  assert.equal(p.counters[L.C_GEN_BASE + L.GEN_SYN_ACK * L.GEN_RESULTS + L.GEN_SENT], 1, 'only the first SYN got a cookie');
  // The connection goes on, both ways in the other side's numbers.
  const c = p.run(
    seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 1, ack: cookie + 1, flags: TCPF_ACK, opts: TS(5002, ours) }),
  );
  assert.equal(c.v, FORWARD);
  assert.equal(tcpOf(c.pkt).ack, 78);
  const s = p.run(seg({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, seq: 78, ack: isn + 1, flags: TCPF_ACK, opts: TS(10, 5002) }));
  assert.equal(s.v, FORWARD);
  assert.equal(tcpOf(s.pkt).seq, u(cookie + 1));
  assert.equal(p.drops('bad_cookie'), 0);
});

/** A masq flow pending: the client's cookie ACK made it and our SYN went to the server. */
function pending() {
  const { p, isn, syn } = handshake('masq');
  const r = tcpOf(syn.reply!);
  const ack = p.run(
    seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 1, ack: r.seq + 1, flags: TCPF_ACK, opts: TS(5001, r.tsval!) }),
  );
  assert.equal(tcpOf(ack.reply!).flags, TCPF_SYN);
  assert.equal(p.table.spPending(), 1);
  const fromServer = (flags: number, seq: number, ack: number) =>
    p.run(seg({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, seq, ack, flags, opts: [...TS(9, 5001), ...WS(7)] }));
  return { p, isn, cookie: r.seq, ours: r.tsval!, fromServer };
}

test("a SYN-ACK whose ack is not our SYN's is dropped and changes nothing; the right one completes; a retransmitted one is checked too", () => {
  const { p, isn, fromServer } = pending();
  const wrong = fromServer(TCPF_SYN | TCPF_ACK, 77, isn + 2);
  assert.equal(wrong.v, DROP);
  assert.equal(p.table.spPending(), 1, 'still pending');
  const right = fromServer(TCPF_SYN | TCPF_ACK, 1000, isn + 1);
  assert.equal(right.v, REPLY);
  assert.deepEqual([tcpOf(right.outs[0]!).flags, tcpOf(right.outs[0]!).ack], [TCPF_ACK, 1001]);
  assert.equal(p.table.spPending(), 0);
  assert.equal(fromServer(TCPF_SYN | TCPF_ACK, 1000, isn + 5).v, DROP, 'a retransmission with another ack: dropped');
  const again = fromServer(TCPF_SYN | TCPF_ACK, 1000, isn + 1);
  assert.equal(again.v, REPLY, 'the right retransmission: our ACK again');
  assert.equal(tcpOf(again.outs[0]!).ack, 1001, 'the deltas of the first SYN-ACK');
});

test("a stale server socket's challenge ACK to our SYN gets a RST at its ack and our SYN again; its packets do not re-arm the pending timer", () => {
  const { p, isn, fromServer } = pending();
  let expires = 0;
  const readExpires = () => p.table.forEach((_e, o) => (expires = p.table.i32[o + L.E_EXPIRES]!));
  readExpires();
  const armed = expires;
  p.setNow(p.now() + 3000);
  const chal = fromServer(TCPF_ACK, 555, 0x12345678);
  assert.equal(chal.v, REPLY);
  assert.equal(chal.outs.length, 2, 'a RST, then our SYN');
  const [rst, syn] = chal.outs.map((x) => tcpOf(x));
  assert.ok(chal.outs.every(valid));
  assert.deepEqual([rst!.flags, rst!.seq, rst!.dport, rst!.dst], [TCPF_RST, 0x12345678, 8080, parseIPv4(RS)! >>> 0]);
  assert.deepEqual([syn!.flags, syn!.seq, syn!.dport], [TCPF_SYN, u(isn), 8080]);
  readExpires();
  assert.equal(expires, armed, 'the server’s ACK did not re-arm the timer');
  // The server now answers our SYN: the flow completes.
  assert.equal(fromServer(TCPF_SYN | TCPF_ACK, 1000, isn + 1).v, REPLY);
  assert.equal(p.table.spPending(), 0);
});

test('with offloads a GSO packet of a pending flow is never held (refused, our SYN still re-sent); a partial one is held complete', () => {
  const p = makeProcessor(doc('masq'), { outBytes: 1 << 16, capacity: 1024, offload: true });
  new Defense(p.table, p.cfg.defense); // sets the SYN proxy on (mode 3)
  const V = P.VNET_HLEN;
  const plain = (pkt: Uint8Array) => {
    const b = new Uint8Array(V + pkt.length);
    b.set(pkt, V);
    return b;
  };
  const isn = 1000;
  const syn = p.run(
    plain(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn, flags: TCPF_SYN, opts: [...MSS(1460), ...TS(5000, 0)] })),
  );
  assert.equal(syn.v, REPLY);
  const r = tcpOf(syn.reply!);
  const ackSeg = {
    src: CLIENT,
    dst: VIP,
    sport: 40000,
    dport: 80,
    seq: isn + 1,
    ack: r.seq + 1,
    flags: TCPF_ACK,
    opts: TS(5001, r.tsval!),
  };
  assert.equal(p.run(plain(seg(ackSeg))).v, REPLY);
  assert.equal(p.table.spPending(), 1);
  const big = partial(seg({ ...ackSeg, flags: TCPF_ACK | TCPF_PSH, payload: new Uint8Array(1200) }), 600);
  assert.equal(p.run(big).v, DROP);
  assert.equal(p.drops('synproxy_hold_full'), 1);
  assert.equal(p.table.holdUsed(), 0, 'nothing held');
  p.setNow(p.now() + 1000);
  const again = p.run(partial(seg({ ...ackSeg, flags: TCPF_ACK | TCPF_PSH, payload: new Uint8Array(1200) }), 600));
  assert.equal(again.v, REPLY, 'a second on: our SYN again, the packet still refused');
  assert.equal(tcpOf(again.outs[0]!.subarray(V)).flags, TCPF_SYN);
  assert.equal(p.table.holdUsed(), 0);
  const small = p.run(partial(seg({ ...ackSeg, flags: TCPF_ACK | TCPF_PSH, payload: new Uint8Array(100) })));
  assert.equal(small.v, DROP);
  assert.equal(p.table.holdUsed(), 1, 'a plain partial packet is held');
  const done = p.run(
    plain(seg({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, seq: 77, ack: isn + 1, flags: TCPF_SYN | TCPF_ACK, opts: TS(9, 5001) })),
  );
  assert.equal(done.outs.length, 3);
  assert.ok(valid(done.outs[1]!.subarray(V)), 'the held packet replayed with its checksum complete');
});

test('mode 1 stays on under a sustained flood after the table has room again and the hold has run out; off once the flood stops', () => {
  const { p } = proxied('masq', 1, 64);
  let cookies = 0;
  const base = { ...p.cfg.defense, holdTime: 5, amemthresh: 8, secureTcp: 1, secureTcpTimeout: 10, dropEntry: 1 };
  const d = new Defense(
    p.table,
    base,
    () => [],
    () => cookies,
  );
  let now = p.table.now();
  d.tick((now += 1000));
  assert.equal(d.active.synProxy, false, 'no shortage, no cookies');
  // The flood fills the table (here: the threshold above the table), the proxy comes on and frees it.
  d.configure({ ...base, amemthresh: 65 });
  assert.equal(d.active.synProxy, true);
  d.configure(base);
  // 1 000 cookies a second for 10 s: as entries they would live 10 s — far more than the 56 free above amemthresh.
  for (let i = 0; i < 10; i++) {
    cookies += 1000;
    d.tick((now += 1000));
  }
  assert.equal(d.cookieRate, 1000);
  assert.equal(d.active.dropEntry, false, 'the other defenses: the hold has run out');
  assert.equal(d.active.synProxy, true, 'the proxy stays on while the flood lasts');
  assert.equal(d.modes.synProxy, 2);
  // The flood stops: the clients' 5 cookies a second (50 half-open entries at most) fit in the room.
  cookies += 5;
  d.tick((now += 1000));
  assert.equal(d.active.synProxy, false);
  assert.equal(d.modes.synProxy, 1);
});

test('data on the cookie ACK that cannot be held is counted as a drop; IPv6 is never offered an MSS below 1220', () => {
  const { p, isn, syn } = handshake('masq');
  const r = tcpOf(syn.reply!);
  const ack = p.run(
    seg({
      src: CLIENT,
      dst: VIP,
      sport: 40000,
      dport: 80,
      seq: isn + 1,
      ack: r.seq + 1,
      flags: TCPF_ACK | TCPF_PSH,
      opts: TS(5001, r.tsval!),
      payload: new Uint8Array(2100), // larger than a held slot
    }),
  );
  assert.equal(ack.v, REPLY);
  assert.equal(tcpOf(ack.reply!).flags, TCPF_SYN, 'our SYN all the same');
  assert.equal(p.drops('synproxy_hold_full'), 1);
  assert.equal(p.counters[L.C_SP_HELD_REFUSED], 1);
  assert.equal(p.counters[L.C_TX_EXTRA], 1, 'the SYN a write beyond the dropped packet');
  new Defense(p.table, { ...p.cfg.defense, synProxyMss: 536 });
  assert.deepEqual([p.table.i32[L.H_SP_MSS4], p.table.i32[L.H_SP_MSS6]], [536, 1220]);
});

/** A client data segment of the pending() flow: n-th of 10-byte ones, its bytes all n + 1. */
function pendingData(
  p: ReturnType<typeof pending>['p'],
  isn: number,
  cookie: number,
  ours: number,
  n: number,
  flags = TCPF_ACK | TCPF_PSH,
) {
  return p.run(
    seg({
      src: CLIENT,
      dst: VIP,
      sport: 40000,
      dport: 80,
      seq: isn + 1 + 10 * n,
      ack: cookie + 1,
      flags,
      opts: TS(5002 + n, ours),
      payload: new Uint8Array(10).fill(n + 1),
    }),
  );
}

test('three held packets are replayed in the order they came, each with its own bytes, adjusted and rewritten', () => {
  const { p, isn, cookie, ours, fromServer } = pending();
  for (const n of [0, 1, 2]) assert.equal(pendingData(p, isn, cookie, ours, n).v, DROP);
  assert.equal(p.table.holdUsed(), 3);
  const done = fromServer(TCPF_SYN | TCPF_ACK, 1000, isn + 1);
  assert.equal(done.outs.length, 5, 'our ACK, 3 replays, the window update');
  assert.ok(done.outs.every(valid));
  const replays = done.outs.slice(1, 4);
  replays.forEach((x, n) => {
    const t = tcpOf(x);
    assert.deepEqual(
      [t.seq, t.ack, t.tsval, t.tsecr, t.dst, t.dport],
      [u(isn + 1 + 10 * n), 1001, 5002 + n, 9, parseIPv4(RS)! >>> 0, 8080],
    );
    assert.deepEqual([...x.subarray(x.length - 10)], new Array(10).fill(n + 1), `replay ${n}: its own bytes`);
  });
  assert.equal(p.table.holdUsed(), 0);
});

test("a client's RST while pending ends the flow and frees its held packets", () => {
  const { p, isn, cookie, ours } = pending();
  pendingData(p, isn, cookie, ours, 0);
  assert.equal(p.table.holdUsed(), 1);
  const rst = p.run(seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 11, flags: TCPF_RST }));
  assert.equal(rst.v, DROP);
  assert.deepEqual([p.table.count(), p.table.holdUsed(), p.table.spPending()], [0, 0, 0]);
});

test('a pending flow its server never answers expires by its timer, its held slots and the pending gauge freed', () => {
  const { p, isn, cookie, ours } = pending();
  pendingData(p, isn, cookie, ours, 0);
  pendingData(p, isn, cookie, ours, 1);
  assert.deepEqual([p.table.count(), p.table.holdUsed(), p.table.spPending()], [1, 2, 1]);
  assert.equal(p.table.expire(p.now() + 4000), 0, 'not yet');
  assert.equal(p.table.expire(p.now() + 5000), 1);
  assert.deepEqual([p.table.count(), p.table.holdUsed(), p.table.spPending()], [0, 0, 0]);
});

test('with partial checksums (offloads) the adjustments leave the checksum field to the device: the completed packet is right', () => {
  const f = view(0x1234567, 99, 7, 9);
  for (const [dir, b] of [
    [
      'in',
      seg({
        src: CLIENT,
        dst: VIP,
        sport: 40000,
        dport: 80,
        seq: 5,
        ack: 0x2000000,
        flags: TCPF_ACK,
        opts: [...TS(1, 500), ...SACK(0x2000010, 0x2000020)],
      }),
    ],
    ['out', seg({ src: RS, dst: CLIENT, sport: 8080, dport: 40000, seq: 0x300, ack: 6, flags: TCPF_ACK, win: 100, opts: TS(7, 1) })],
  ] as const) {
    const framed = partial(b);
    const V = P.VNET_HLEN;
    const x = framed.subarray(V);
    const c = { l4: 20, partial: true } as PacketContext;
    const before = P.u16(x, 20 + P.TCP_CSUM);
    if (dir === 'in') adjustIn(c, x, f);
    else adjustOut(c, x, f);
    assert.equal(P.u16(x, 20 + P.TCP_CSUM), before, `${dir}: the pseudo-header sum untouched`);
    const done = complete(framed);
    assert.ok(valid(done), `${dir}: completed by the device, right`);
    const t = tcpOf(done);
    if (dir === 'in')
      assert.deepEqual(
        [t.ack, t.tsecr, t.sack],
        [u(0x2000000 - 0x1234567), u(500 - 99), [u(0x2000010 - 0x1234567), u(0x2000020 - 0x1234567)]],
      );
    else assert.deepEqual([t.seq, t.tsval, t.win], [u(0x300 + 0x1234567), 106, 400]);
  }
});

test("across workers: packets held by one processor are replayed by another that reads the server's SYN-ACK", () => {
  const { p: a, isn, cookie, ours } = pending();
  for (const n of [0, 1]) assert.equal(pendingData(a, isn, cookie, ours, n).v, DROP);
  // Worker B: its own processor, counters and output region over the same shared table.
  const counters = new Float64Array(L.counterWords(16, 8));
  const b = new PacketProcessor(a.table, counters, new Int32Array(8 * L.SCHED_WORDS), 16, a.model.apply(a.cfg), false);
  b.setTime(a.now());
  const buf = new Uint8Array(1 << 16);
  const region = new OutRegion(buf);
  region.off = 0;
  region.end = buf.length;
  const synack = seg({
    src: RS,
    dst: CLIENT,
    sport: 8080,
    dport: 40000,
    seq: 1000,
    ack: isn + 1,
    flags: TCPF_SYN | TCPF_ACK,
    opts: [...TS(9, 5001), ...WS(7)],
  });
  assert.equal(b.process(synack, 0, synack.length, region), REPLY);
  assert.equal(region.count, 4, 'our ACK, the 2 packets A held, the window update');
  const outs = Array.from({ length: region.count }, (_, k) => buf.slice(region.offs[k]!, region.offs[k]! + region.lens[k]!));
  assert.ok(outs.every(valid));
  assert.deepEqual(
    outs.slice(1, 3).map((x) => [tcpOf(x).seq, tcpOf(x).ack, tcpOf(x).payload, x[x.length - 1]]),
    [
      [u(isn + 1), 1001, 10, 1],
      [u(isn + 11), 1001, 10, 2],
    ],
  );
  assert.deepEqual([a.table.holdUsed(), a.table.spPending()], [0, 0]);
  // A's next client packet finds the flow established, adjusted by B's deltas.
  const next = a.run(
    seg({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, seq: isn + 21, ack: cookie + 1, flags: TCPF_ACK, opts: TS(5010, ours) }),
  );
  assert.equal(next.v, FORWARD);
  assert.equal(tcpOf(next.pkt).ack, 1001);
});

/**
 * A pending flow from `client`:`port` (its cookie handshake done, our SYN out): its n-th 10-byte
 * data segment, and the server's SYN-ACK that completes it.
 */
function openFlow(p: ReturnType<typeof proxied>['p'], client: string, port: number) {
  const isn = 1000;
  const syn = p.run(
    seg({ src: client, dst: VIP, sport: port, dport: 80, seq: isn, flags: TCPF_SYN, opts: [...MSS(1460), ...TS(5000, 0)] }),
  );
  const r = tcpOf(syn.reply!);
  const ack = p.run(
    seg({ src: client, dst: VIP, sport: port, dport: 80, seq: isn + 1, ack: r.seq + 1, flags: TCPF_ACK, opts: TS(5001, r.tsval!) }),
  );
  assert.equal(tcpOf(ack.reply!).flags, TCPF_SYN, 'pending: our SYN to the server');
  const data = (n: number) =>
    p.run(
      seg({
        src: client,
        dst: VIP,
        sport: port,
        dport: 80,
        seq: isn + 1 + 10 * n,
        ack: r.seq + 1,
        flags: TCPF_ACK | TCPF_PSH,
        opts: TS(5002 + n, r.tsval!),
        payload: new Uint8Array(10).fill(n + 1),
      }),
    );
  const synAck = () =>
    p.run(seg({ src: RS, dst: client, sport: 8080, dport: port, seq: 77, ack: isn + 1, flags: TCPF_SYN | TCPF_ACK, opts: TS(9, 5001) }));
  return { data, synAck };
}

/** The held-packet counter of an IPv4 client source (ConnTable.holdSource's fold of the keyed hash). */
const holdSrc = (p: ReturnType<typeof proxied>['p'], client: string) =>
  p.table.sourceSlot(false, parseIPv4(client)!, 0, 0) & (L.HOLD_SOURCES - 1);

test('one client source holds at most HOLD_PER_SOURCE packets (synproxy_hold_per_source); another source still holds; completed flows give room back', () => {
  const { p } = proxied('masq');
  const flows = Math.ceil(L.HOLD_PER_SOURCE / L.HOLD_PER_FLOW) + 1;
  const mine = Array.from({ length: flows }, (_, i) => openFlow(p, CLIENT, 41000 + i));
  for (const f of mine) for (let n = 0; n < L.HOLD_PER_FLOW; n++) assert.equal(f.data(n).v, DROP);
  assert.equal(p.table.holdUsed(), L.HOLD_PER_SOURCE, 'far from the area of 512: the source is full');
  assert.equal(p.table.holdAtSource(holdSrc(p, CLIENT)), L.HOLD_PER_SOURCE);
  assert.equal(p.drops('synproxy_hold_per_source'), flows * L.HOLD_PER_FLOW - L.HOLD_PER_SOURCE);
  assert.equal(p.drops('synproxy_hold_full'), 0);
  assert.equal(p.counters[L.C_SP_HELD_REFUSED], flows * L.HOLD_PER_FLOW - L.HOLD_PER_SOURCE, 'refusals are counted as refused holds too');
  // Another source (one with its own counter: the hash is keyed per table).
  let other = 8;
  while (holdSrc(p, `192.0.2.${other}`) === holdSrc(p, CLIENT)) other++;
  const theirs = openFlow(p, `192.0.2.${other}`, 41000);
  assert.equal(theirs.data(0).v, DROP);
  assert.equal(p.table.holdUsed(), L.HOLD_PER_SOURCE + 1, 'held');
  // The first flow's server answers: its 3 packets replayed and given back, room for 3 more.
  const done = mine[0]!.synAck();
  assert.equal(done.outs.length, 2 + L.HOLD_PER_FLOW, 'our ACK, the replays, the window update');
  assert.equal(p.table.holdAtSource(holdSrc(p, CLIENT)), L.HOLD_PER_SOURCE - L.HOLD_PER_FLOW);
  const late = openFlow(p, CLIENT, 42000);
  for (let n = 0; n < L.HOLD_PER_FLOW; n++) assert.equal(late.data(n).v, DROP);
  assert.equal(p.table.holdAtSource(holdSrc(p, CLIENT)), L.HOLD_PER_SOURCE);
  assert.equal(p.drops('synproxy_hold_per_source'), flows * L.HOLD_PER_FLOW - L.HOLD_PER_SOURCE, 'no new refusal');
});

test("held slots a dead worker had in hand are given back (holdReclaim); a pending flow's and another worker's stay", () => {
  const { p } = proxied('masq');
  const control = new ConnTable(p.table.sab, p.rs.buffer as SharedArrayBuffer, L.OWNER_CONTROL);
  const a = openFlow(p, CLIENT, 43000);
  const b = openFlow(p, CLIENT, 43001);
  for (let n = 0; n < 3; n++) a.data(n);
  b.data(0);
  b.data(1);
  assert.equal(p.table.holdUsed(), 5);
  // The worker takes a's SYN-ACK (the slots leave the flow) and dies before giving them back.
  const t = p.table as unknown as { holdRelease: (first: number) => void; holdAlloc: (src: number) => number };
  t.holdRelease = () => {
    throw new Error('worker died');
  };
  assert.throws(() => a.synAck(), /worker died/);
  delete (t as { holdRelease?: unknown }).holdRelease;
  assert.equal(p.table.holdUsed(), 5, "a's 3 slots are on no flow's list and not free");
  assert.equal(control.holdReclaim(2), 0, "another worker's: nothing");
  assert.equal(control.holdReclaim(1), 3);
  assert.equal(p.table.holdUsed(), 2, "b's two stay held");
  assert.equal(p.table.holdAtSource(holdSrc(p, CLIENT)), 2, 'the source counter recounted');
  // A worker dies between taking a slot and putting it on its flow's list (its bucket locks held).
  const c = openFlow(p, CLIENT, 43002);
  const alloc = Object.getPrototypeOf(p.table).holdAlloc as (src: number) => number;
  t.holdAlloc = function (this: ConnTable, src: number) {
    alloc.call(this, src);
    throw new Error('worker died');
  };
  assert.throws(() => c.data(0), /worker died/);
  delete (t as { holdAlloc?: unknown }).holdAlloc;
  assert.equal(p.table.holdUsed(), 3);
  assert.ok(control.releaseLocksOf(1) >= 1, "the flow's bucket lock");
  assert.equal(control.holdReclaim(1), 1);
  assert.equal(p.table.holdUsed(), 2);
  // b's packets are still there, replayed in order; then every slot is free again.
  const done = b.synAck();
  assert.equal(done.outs.length, 4, 'our ACK, 2 replays, the window update');
  assert.deepEqual(
    done.outs.slice(1, 3).map((x) => x[x.length - 1]),
    [1, 2],
  );
  assert.equal(p.table.holdUsed(), 0);
  assert.equal(control.holdReclaim(1), 0);
  assert.equal(p.table.holdUsed(), 0, 'recounted from the free list: all 512 on it');
  assert.equal(p.table.holdAtSource(holdSrc(p, CLIENT)), 0);
});
