/**
 * mh against a transcription of net/netfilter/ipvs/ip_vs_mh.c, on seeded random scenarios: after
 * every list change the whole lookup table must be the kernel's, slot by slot, and every decision
 * the kernel's. The reference is written from the kernel file, not from schedulers/mh.ts: its own
 * hsiphash (lib/siphash.c on a 64-bit kernel: SipHash-1-3 of the 4-byte value, in BigInt, checked
 * against lib/siphash_kunit.c), ip_vs_mh_gcd_weight, ip_vs_mh_shift_weight (IP_VS_MH_TAB_BITS =
 * CONFIG_IP_VS_MH_TAB_INDEX / 2), ip_vs_mh_permutate, ip_vs_mh_populate with its list walk
 * (p, ds, dt_count), ip_vs_mh_reassign's -EINVAL for more dests than slots (the table is kept),
 * the reset when every last_weight is 0, and ip_vs_mh_get / ip_vs_mh_get_fallback.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { SchedModel } from '../../control/sched-model';
import { parseInet } from '../../net/addr';
import { MH_PRIMES, mhSlots } from '../../schedulers/mh';
import { rngBelow } from '../helpers/rng';

const MASK = (1n << 64n) - 1n;
const rol = (x: bigint, b: bigint) => ((x << b) | (x >> (64n - b))) & MASK;

/** hsiphash(&v, 4, key) on a 64-bit kernel: HPREAMBLE(4), b |= le32(v), HPOSTAMBLE (SipHash-1-3). */
function hsiphash(k0: bigint, k1: bigint, v: number): number {
  let v0 = 0x736f6d6570736575n ^ k0;
  let v1 = 0x646f72616e646f6dn ^ k1;
  let v2 = 0x6c7967656e657261n ^ k0;
  let v3 = 0x7465646279746573n ^ k1;
  const b = (4n << 56n) | BigInt(v >>> 0);
  const round = () => {
    v0 = (v0 + v1) & MASK;
    v1 = rol(v1, 13n) ^ v0;
    v0 = rol(v0, 32n);
    v2 = (v2 + v3) & MASK;
    v3 = rol(v3, 16n) ^ v2;
    v0 = (v0 + v3) & MASK;
    v3 = rol(v3, 21n) ^ v0;
    v2 = (v2 + v1) & MASK;
    v1 = rol(v1, 17n) ^ v2;
    v2 = rol(v2, 32n);
  };
  v3 ^= b;
  round();
  v0 ^= b;
  v2 ^= 0xffn;
  round();
  round();
  round();
  return Number((v0 ^ v1 ^ v2 ^ v3) & 0xffffffffn);
}

// generate_hash_secret(): key[0] = key[1], unsigned long.
const H1 = 2654435761n;
const H2 = 2654446892n;

/** ip_vs_mh_hashkey: hsiphash of (offset + port + addr) as an unsigned int, host order. */
const hashkey = (key: bigint, addr: number, port: number, offset: number) => hsiphash(key, key, (offset + port + (addr >>> 0)) >>> 0);

interface KDest {
  key: string;
  addr: number;
  port: number;
  weight: number;
  lastWeight: number;
  overload: boolean;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
const fls = (x: number) => (x === 0 ? 0 : 32 - Math.clz32(x));

/** The kernel's mh state of one service: the lookup table (dest or null per slot) and M. */
class KernelMh {
  lookup: (KDest | null)[];
  constructor(readonly M: number) {
    this.lookup = new Array<KDest | null>(M).fill(null);
  }

  /** init_service and add/del/upd_dest: ip_vs_mh_gcd_weight, _shift_weight, _reassign. */
  changed(list: KDest[]): void {
    const M = this.M;
    let g = 0;
    for (const d of list) if (d.lastWeight > 0) g = g > 0 ? gcd(d.lastWeight, g) : d.lastWeight;
    let rshift = 0;
    if (g >= 1) {
      let weight = 0;
      for (const d of list) if (d.lastWeight > weight) weight = d.lastWeight;
      const bits = Math.trunc((MH_PRIMES.indexOf(M) + 8) / 2); // CONFIG_IP_VS_MH_TAB_INDEX / 2
      const shift = fls(Math.trunc(weight / g)) - bits;
      rshift = shift >= 0 ? shift : 0;
    }
    if (list.length > M) return; // -EINVAL: the old table stays
    if (g < 1) {
      this.lookup.fill(null); // ip_vs_mh_reset
      return;
    }
    const ds = list.map((d) => {
      const offset = hashkey(H1, d.addr, d.port, 0) % M;
      const skip = (hashkey(H2, d.addr, d.port, 0) % (M - 1)) + 1;
      const t = Math.trunc(d.lastWeight / g) >> rshift;
      return { perm: offset, skip, turns: t !== 0 ? t : d.lastWeight !== 0 ? 1 : 0 };
    });
    const table = new Uint8Array(M);
    let n = 0;
    let dtCount = 0;
    let p = -1; // -1: the list head
    for (;;) {
      if (p === -1) p = 0;
      let k = 0;
      while (p < list.length) {
        const s = ds[k]!;
        if (s.turns < 1) {
          p++;
          k++;
          continue;
        }
        let c = s.perm;
        while (table[c]) {
          s.perm += s.skip;
          if (s.perm >= M) s.perm -= M;
          c = s.perm;
        }
        table[c] = 1;
        this.lookup[c] = list[p]!;
        if (++n === M) return;
        if (++dtCount >= s.turns) {
          dtCount = 0;
          p++;
          k++;
        }
      }
      p = -1;
    }
  }

  schedule(flags: number, caddr: number, cport: number): KDest | null {
    const M = this.M;
    const unavailable = (d: KDest) => d.weight <= 0 || d.overload;
    const port = flags & 2 ? cport : 0;
    if (!(flags & 1)) {
      const d = this.lookup[hashkey(H1, caddr, port, 0) % M]!;
      return !d || unavailable(d) ? null : d;
    }
    const ihash = hashkey(H1, caddr, port, 0) % M;
    let d = this.lookup[ihash]!;
    if (!d) return null;
    if (!unavailable(d)) return d;
    for (let offset = 0; offset < M; offset++) {
      const roffset = (offset + ihash) % M;
      d = this.lookup[hashkey(H1, caddr, port, roffset) % M]!;
      if (!d) break;
      if (!unavailable(d)) return d;
    }
    return null;
  }
}

test('the reference hsiphash matches the 64-bit kernel self-test vector and the §11 mh values', () => {
  // lib/siphash_kunit.c: key 00 01 … 0f, bytes 00 01 02 03 → 0x88d38328
  assert.equal(hsiphash(0x0706050403020100n, 0x0f0e0d0c0b0a0908n, 0x03020100), 0x88d38328);
  const ip = (s: string) => kernelFold(s);
  assert.equal(hashkey(H1, ip('10.0.0.1'), 80, 0), 0x439c0cbe);
  assert.equal(hashkey(H2, ip('10.0.0.1'), 80, 0), 0x97b3dc47);
  assert.equal(hashkey(H1, ip('192.168.1.100'), 0, 0), 0xc15d2cf8);
});

/** The address as ip_vs_mh_hashkey reads it: IPv4 in host order; IPv6 as ntohl of the XOR of its words. */
function kernelFold(addr: string): number {
  return parseInet(addr)!.words.reduce((x, w) => (x ^ w) >>> 0, 0);
}

const POOL = [...Array.from({ length: 8 }, (_, i) => `10.${i & 1}.${i >> 1}.${7 * i + 1}`), '2001:db8::5', 'fd00::1:0:7'];

/** The model service and the kernel's view of it, changed together. */
class Twin {
  readonly m: SchedModel;
  readonly k: KernelMh;
  readonly list: KDest[] = [];
  readonly log: string[] = [];
  constructor(
    readonly flags: number,
    M: number,
    capacity = POOL.length * 3 + 1,
  ) {
    this.m = new SchedModel('mh', flags, M, capacity);
    this.k = new KernelMh(M);
    this.k.changed(this.list);
  }
  private sync(d: KDest): void {
    const o = this.m.servers.get(d.key)!.rs * L.RS_WORDS;
    if (d.overload) this.m.rs[o + L.RS_FLAGS]! |= L.RSF_OVERLOAD;
    else this.m.rs[o + L.RS_FLAGS]! &= ~L.RSF_OVERLOAD;
  }
  add(addr: string, port: number, weight: number): void {
    const key = addr.includes(':') ? `[${addr}]:${port}` : `${addr}:${port}`;
    const d: KDest = { key, addr: kernelFold(addr), port, weight, lastWeight: weight, overload: false };
    this.m.add(parseInet(addr)!, port, weight);
    this.list.unshift(d);
    this.k.changed(this.list);
    this.log.push(`add ${d.key} w${weight}`);
  }
  del(i: number): void {
    const d = this.list.splice(i, 1)[0]!;
    this.m.del(this.m.servers.get(d.key)!);
    this.k.changed(this.list);
    this.log.push(`del ${d.key}`);
  }
  edit(i: number, weight: number): void {
    const d = this.list[i]!;
    d.weight = weight;
    if (weight !== 0) d.lastWeight = weight; // __ip_vs_update_dest
    d.overload = false; // an upper threshold of 0 clears OVERLOAD
    this.m.edit(this.m.servers.get(d.key)!, weight, 0, 0);
    this.k.changed(this.list);
    this.log.push(`edit ${d.key} w${weight}`);
  }
  overload(i: number, on: boolean): void {
    const d = this.list[i]!;
    d.overload = on;
    this.sync(d);
    this.log.push(`overload ${d.key} ${on}`);
  }
  /** The model's table as "addr:port" per slot (null = empty) must be the kernel's. */
  checkTable(what: string): void {
    const listed = this.m.listed();
    const got = Array.from(mhSlots(this.m.svc.data!), (p) => (p < 0 ? null : listed[p]!.key));
    const want = this.k.lookup.map((d) => d?.key ?? null);
    if (got.length !== want.length) assert.fail(`${what}: table of ${got.length} slots, the kernel's ${want.length}`);
    for (let s = 0; s < want.length; s++) {
      if (got[s] !== want[s]) assert.fail(`${what}: slot ${s} is ${got[s]}, the kernel's ${want[s]} — ${this.log.join('; ')}`);
    }
  }
  checkPick(what: string, caddr: number, cport: number): void {
    const got = this.m.schedule({ caddr, cport, vaddr: 0, vport: 80, now: 0 })?.key ?? null;
    const want = this.k.schedule(this.flags, caddr, cport)?.key ?? null;
    assert.equal(got, want, `${what}: client ${caddr >>> 0}:${cport} — ${this.log.join('; ')}`);
  }
}

/** Random -a/-d/-e and OVERLOAD flips, the table checked after each change and picks in between. */
function scenario(seed: number, M: number, steps: number, bigWeights: boolean): void {
  const r = rngBelow(seed);
  const flags = r(4);
  const t = new Twin(flags, M);
  const what = `M ${M} flags ${flags} seed ${seed}`;
  const weight = () => {
    const x = r(8);
    if (x === 0) return 0;
    if (bigWeights && x >= 6) return 1 + r(5000);
    return x * (1 + r(3)); // shared factors: a gcd above 1
  };
  for (let step = 0; step < steps; step++) {
    const op = r(8);
    const keys = new Set(t.list.map((d) => d.key));
    if (op <= 2 || t.list.length === 0) {
      const addr = POOL[r(POOL.length)]!;
      const port = [80, 443, 8080][r(3)]!;
      const key = addr.includes(':') ? `[${addr}]:${port}` : `${addr}:${port}`;
      if (!keys.has(key)) t.add(addr, port, weight());
    } else if (op === 3) {
      t.del(r(t.list.length));
    } else if (op <= 5) {
      t.edit(r(t.list.length), weight());
    } else {
      t.overload(r(t.list.length), r(2) === 0);
    }
    t.checkTable(`${what} step ${step}`);
    for (let c = 0; c < 6; c++) t.checkPick(`${what} step ${step}`, r(0xffffffff) | 0, r(65536));
  }
}

test('mh builds the kernel table and picks as ip_vs_mh.c: small tables, random lists, weights, flags, OVERLOAD', () => {
  for (let seed = 1; seed <= 60; seed++) scenario(seed * 7919, MH_PRIMES[seed % 3]!, 25, false);
});

test('mh shifts large weights as ip_vs_mh_shift_weight for every table size', () => {
  MH_PRIMES.forEach((M, i) => {
    for (let s = 0; s < (M > 20000 ? 1 : 3); s++) scenario(1000 + i * 31 + s, M, M > 20000 ? 6 : 12, true);
  });
});

test('mh keeps its table when there are more servers than slots, and rebuilds once they fit again', () => {
  // M = 251, with 252 servers: the kernel refuses the rebuild (-EINVAL) and keeps the old table.
  const t = new Twin(0, 251, 253);
  const addrs = Array.from({ length: 252 }, (_, i) => `10.9.${i >> 8}.${i & 255}`);
  for (const a of addrs.slice(0, 251)) t.add(a, 80, 1 + (a.length % 3));
  t.checkTable('251 servers');
  t.add(addrs[251]!, 80, 2);
  t.checkTable('252 servers: kept');
  t.edit(0, 3); // still too many: kept, the edited server's slots unchanged
  t.checkTable('252 servers, an edit: kept');
  t.del(251); // the oldest; 251 fit again: rebuilt
  t.checkTable('251 again: rebuilt');
  for (let c = 0; c < 50; c++) t.checkPick('251 again', (c * 2654435761) | 0, c);
});
