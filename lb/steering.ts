/**
 * The queue-steering key of lb/native/steer.c, in TypeScript: which queue the device gives a
 * packet the kernel sends into it. The eBPF program is what runs; this is its specification,
 * checked against the kernel by test/integration/steering.test.ts, and documented in
 * docs/steering.md.
 *
 *   - TCP, UDP, SCTP (IPv4 not a later fragment; IPv6 with the transport header right after the
 *     fixed one):
 *       to a VIP range: the source endpoint — a client's packet;
 *       to a full-NAT pool address: the 4-tuple — a real server's reply, whose pool port the
 *         worker that opened the connection chose for its own queue (lb/xmit.ts);
 *       else: the destination endpoint — a masq reply (routed into the device by its real
 *         server's rule), to the client.
 *   - other IPv4/IPv6 packets: both addresses xor'ed, word by word (either direction).
 *   - anything else: 0.
 * The key's words — every address word — are hashed with HalfSipHash-1-3 (net/siphash.ts) under a
 * 64-bit key (k0, k1) drawn at each start: an endpoint as the address words then a last block
 * (6 or 18 bytes) << 24 | port; an address pair the same with port 0; a 4-tuple as the source's
 * words, the destination's, sport << 16 | dport, then (12 or 36) << 24. value = hash >>> 16;
 * queue = value mod queues (the kernel's tun_ebpf_select_queue).
 *
 * steeringValue/steeringQueue are the specification and not for the packet path. steeringPrefix
 * and steeringPorts are used there, allocation-free: full-NAT picks pool ports whose
 * server→client packets the program steers to the worker's own queue (lb/xmit.ts).
 */
import { parseCidr, parseCidr6, parseIPv4, parseIPv6 } from '../net/addr';
import { HalfSipHash } from '../net/siphash';

/** What the program is built from: its 64-bit key, and the destinations it tells apart. */
export interface SteeringKey {
  readonly k0: number;
  readonly k1: number;
  /** VIP ranges: IPv4 (network, mask) pairs; IPv6 eight words each (network, then mask). */
  readonly vip4: Uint32Array;
  readonly vip6: Uint32Array;
  /** Full-NAT pool addresses: IPv4 one word each; IPv6 four words each. */
  readonly pool4: Uint32Array;
  readonly pool6: Uint32Array;
}

/**
 * Words per entry of the table steerAttach takes (lb/native/steer.c STEER_ENTRY), and its kinds.
 * The program takes at most 256 entries (STEER_MAX): more, and steerAttach says so (auto then
 * falls back to the device's own steering, ebpf refuses to start).
 */
const ENTRY = 10;
const KIND_VIP = 1;
const KIND_POOL = 2;

/** The key for (k0, k1), the VIP ranges (dataplane.vipCidrs) and pool addresses (dataplane.fullnat.addresses). */
export function steeringKey(k0: number, k1: number, vipCidrs: readonly string[], poolAddrs: readonly string[]): SteeringKey {
  const v4 = vipCidrs.map((c) => parseCidr(c)).filter((c) => c !== null);
  const v6 = vipCidrs.map((c) => parseCidr6(c)).filter((c) => c !== null);
  const p4 = poolAddrs.map((a) => parseIPv4(a)).filter((a) => a !== null);
  const p6 = poolAddrs.map((a) => parseIPv6(a)).filter((a) => a !== null);
  return {
    k0: k0 >>> 0,
    k1: k1 >>> 0,
    vip4: Uint32Array.from(v4.flatMap((c) => [(c.net & c.mask) >>> 0, c.mask >>> 0])),
    vip6: Uint32Array.from(v6.flatMap((c) => [...[0, 1, 2, 3].map((i) => (c.net[i]! & c.mask[i]!) >>> 0), ...c.mask])),
    pool4: Uint32Array.from(p4, (a) => a >>> 0),
    pool6: Uint32Array.from(p6.flatMap((a) => [...a])),
  };
}

/** The table lb/native/steer.c builds its program from: kind, family, network (4 words), mask (4 words) per entry. */
export function steeringTable(k: SteeringKey): Uint32Array {
  const rows: number[][] = [];
  for (let i = 0; i < k.vip4.length; i += 2) rows.push([KIND_VIP, 4, k.vip4[i]!, 0, 0, 0, k.vip4[i + 1]!, 0, 0, 0]);
  for (let i = 0; i < k.vip6.length; i += 8) rows.push([KIND_VIP, 6, ...k.vip6.subarray(i, i + 8)]);
  for (const a of k.pool4) rows.push([KIND_POOL, 4, a, 0, 0, 0, 0xffffffff, 0, 0, 0]);
  for (let i = 0; i < k.pool6.length; i += 4) rows.push([KIND_POOL, 6, ...k.pool6.subarray(i, i + 4), ~0, ~0, ~0, ~0]);
  const t = new Uint32Array(rows.length * ENTRY);
  rows.forEach((r, i) => t.set(r, i * ENTRY));
  return t;
}

function w32(b: Uint8Array, o: number): number {
  return ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
}
function w16(b: Uint8Array, o: number): number {
  return (b[o]! << 8) | b[o + 1]!;
}

const PORTED = new Set([6, 17, 132]);
/** The specification's own hasher (steeringValue is not for the packet path). */
const spec = new HalfSipHash();

function dest4In(d: number, ranges: Uint32Array, step: number): boolean {
  for (let i = 0; i < ranges.length; i += step) if ((d & (step === 2 ? ranges[i + 1]! : -1)) >>> 0 === ranges[i]) return true;
  return false;
}
function dest6In(b: Uint8Array, ranges: Uint32Array, masked: boolean): boolean {
  const step = masked ? 8 : 4;
  next: for (let i = 0; i < ranges.length; i += step) {
    for (let w = 0; w < 4; w++) {
      const m = masked ? ranges[i + 4 + w]! : 0xffffffff;
      if ((w32(b, 24 + 4 * w) & m) >>> 0 !== ranges[i + w]) continue next;
    }
    return true;
  }
  return false;
}

/** Endpoint or pair key: the address words, then (bytes << 24 | port). */
function keyHash(k: SteeringKey, words: readonly number[], port: number): number {
  spec.begin(k.k0, k.k1);
  for (const w of words) spec.word(w);
  return spec.end(((words.length * 4 + 2) << 24) | port) >>> 16;
}
/** 4-tuple key: the source's words, the destination's, sport << 16 | dport, then (bytes << 24). */
function tupleHash(k: SteeringKey, src: readonly number[], dst: readonly number[], sport: number, dport: number): number {
  spec.begin(k.k0, k.k1);
  for (const w of src) spec.word(w);
  for (const w of dst) spec.word(w);
  spec.word((sport << 16) | dport);
  return spec.end(((src.length * 8 + 4) << 24) | 0) >>> 16;
}

/** The program's return value for the IP packet in b (its first byte the IP header). */
export function steeringValue(b: Uint8Array, k: SteeringKey): number {
  const v = b[0]! & 0xf0;
  if (v === 0x40) {
    const s = w32(b, 12);
    const d = w32(b, 16);
    const laterFragment = (w16(b, 6) & 0x1fff) !== 0;
    if (laterFragment || !PORTED.has(b[9]!)) return keyHash(k, [(s ^ d) >>> 0], 0);
    const l4 = (b[0]! & 0x0f) * 4;
    const sp = w16(b, l4);
    const dp = w16(b, l4 + 2);
    if (dest4In(d, k.vip4, 2)) return keyHash(k, [s], sp);
    if (dest4In(d, k.pool4, 1)) return tupleHash(k, [s], [d], sp, dp);
    return keyHash(k, [d], dp);
  }
  if (v === 0x60) {
    const s = [0, 1, 2, 3].map((i) => w32(b, 8 + 4 * i));
    const d = [0, 1, 2, 3].map((i) => w32(b, 24 + 4 * i));
    const pair = s.map((x, i) => (x ^ d[i]!) >>> 0);
    if (!PORTED.has(b[6]!)) return keyHash(k, pair, 0);
    const sp = w16(b, 40);
    const dp = w16(b, 42);
    if (dest6In(b, k.vip6, true)) return keyHash(k, s, sp);
    if (dest6In(b, k.pool6, false)) return tupleHash(k, s, d, sp, dp);
    return keyHash(k, d, dp);
  }
  return 0;
}

/** The queue of that packet on a device with `queues` queues. */
export function steeringQueue(b: Uint8Array, k: SteeringKey, queues: number): number {
  return steeringValue(b, k) % queues;
}

/**
 * The packet path's half of the 4-tuple key (full-NAT, lb/xmit.ts): `h` absorbs the key and
 * the real server's and pool address's words (IPv4: hi null; IPv6: hi[6..8] and hi[9..11] the
 * high words, as a flow's), the part every candidate pool port shares. Allocation-free.
 */
export function steeringPrefix(h: HalfSipHash, k0: number, k1: number, raddr: number, laddr: number, hi: Int32Array | null): void {
  h.begin(k0, k1);
  if (hi === null) {
    h.word(raddr);
    h.word(laddr);
    return;
  }
  h.word(hi[6]!);
  h.word(hi[7]!);
  h.word(hi[8]!);
  h.word(raddr);
  h.word(hi[9]!);
  h.word(hi[10]!);
  h.word(hi[11]!);
  h.word(laddr);
}

/**
 * The program's value for the reply rport → lport of a 4-tuple whose prefix `prefix` holds
 * (steeringPrefix; left as it is, for the next candidate). v6: the family. Allocation-free.
 */
export function steeringPorts(prefix: HalfSipHash, rport: number, lport: number, v6: boolean): number {
  return prefix.wordEnd((rport << 16) | lport, (v6 ? 36 : 12) << 24) >>> 16;
}
