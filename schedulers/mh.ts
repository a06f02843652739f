/**
 * mh — Maglev hashing (kernel net/netfilter/ipvs/ip_vs_mh.c; Eisenbud et al., "Maglev", NSDI 2016,
 * §3.4).
 *
 * prepare() builds the lookup table of M slots (a kernel prime, default 4093): each real server,
 * in list order, gets a permutation of the slots from two SipHashes of its address and port
 * (offset = h1 % M, skip = h2 % (M − 1) + 1), and the servers take turns claiming their next free
 * preferred slot until all M are owned. A server takes (lastWeight / gcd) >> rshift slots per turn
 * (at least 1 if its lastWeight is not 0), rshift = max(fls(max lastWeight / gcd) − bits, 0) with
 * bits = (index of M among the primes + 8) / 2 — the kernel's IP_VS_MH_TAB_BITS for that size.
 * A lookup hashes the client address (plus the source port with mh-port) to a slot.
 *
 * Invariants: the table is built from last_weight, so setting a weight to 0 leaves it unchanged
 * and lookups landing on that server return none (or, with mh-fallback, re-hash with increasing
 * offsets until an eligible server; an empty slot stops the search). Equal weights give slot
 * counts differing by at most one; removing one of N servers moves about 1/N of the slots. The
 * table depends on list order only. More servers than slots: the kernel refuses the rebuild
 * (-EINVAL) and keeps the previous table; so does this one.
 *
 * data: [M, n, table[M] (list position or -1), slots[n] (real-server slot of each position)].
 */
import { hsiphash4, sipInit } from '../net/siphash';
import { gcd, unavailable } from './common';
import type { SchedService, Scheduler } from './types';

/** The kernel's table sizes (ip_vs_mh.c primes[]); CONFIG_IP_VS_MH_TAB_INDEX picks one. */
export const MH_PRIMES: readonly number[] = [251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071];
export const MH_DEFAULT_TABLE_SIZE = 4093;

const D_M = 0;
const D_N = 1;
const D_TABLE = 2;

// generate_hash_secret(): fixed keys, k0 = k1, upper 32 bits zero on a 64-bit kernel.
const HASH1 = sipInit([0, 2654435761, 0, 2654435761]);
const HASH2 = sipInit([0, 2654446892, 0, 2654446892]);

const FALLBACK = 1; // IP_VS_SVC_F_SCHED_MH_FALLBACK
const PORT = 2; // IP_VS_SVC_F_SCHED_MH_PORT

/** ip_vs_mh_hashkey with hash1: the client's (or a real server's) 32-bit hash. */
export function mhHash1(addr: number, port: number, offset: number): number {
  return hsiphash4(HASH1, (offset + port + addr) >>> 0);
}

export function mhHash2(addr: number, port: number): number {
  return hsiphash4(HASH2, (port + addr) >>> 0);
}

/** Index of the highest set bit, 1-based; 0 for 0 (the kernel's fls). */
function fls(x: number): number {
  return x === 0 ? 0 : 32 - Math.clz32(x);
}

export function mhTableSize(svc: SchedService): number {
  const m = svc.mhTableSize ?? MH_DEFAULT_TABLE_SIZE;
  if (!MH_PRIMES.includes(m)) throw new Error(`mh table size ${m} is not one of ${MH_PRIMES.join(', ')}`);
  return m;
}

/**
 * The table's words in shared memory: a published snapshot carries one table per mh service to
 * every worker, and postMessage copies an ordinary Int32Array but shares a SharedArrayBuffer.
 * 1023 services of 4093 slots made each worker's copy 16 MB and ~17 ms of the control thread;
 * shared, it costs nothing. A table is never written after it is returned, so sharing is safe.
 */
function tableWords(n: number): Int32Array {
  return new Int32Array(new SharedArrayBuffer(n * 4));
}

/** Builds the table (ip_vs_mh_gcd_weight, _shift_weight, _permutate, _populate). */
export function mhBuild(svc: SchedService): Int32Array {
  const M = mhTableSize(svc);
  const dests = svc.dests;
  const n = dests.length;
  const old = svc.data;
  if (n > M && old !== null && old[D_M] === M) return remap(old, svc);
  const data = tableWords(D_TABLE + M + n);
  data[D_M] = M;
  data[D_N] = n;
  for (let i = 0; i < n; i++) data[D_TABLE + M + i] = dests[i]!.rs;
  const table = data.subarray(D_TABLE, D_TABLE + M);
  table.fill(-1);
  let g = 0;
  let maxW = 0;
  for (const d of dests) {
    const lw = d.lastWeight ?? d.weight;
    if (lw > 0) g = g > 0 ? gcd(lw, g) : lw;
    if (lw > maxW) maxW = lw;
  }
  if (g < 1 || n > M) return data; // no positive last_weight: every slot empty
  const bits = (MH_PRIMES.indexOf(M) + 8) >> 1;
  const rshift = Math.max(fls(Math.trunc(maxW / g)) - bits, 0);
  const perm = new Int32Array(n);
  const skip = new Int32Array(n);
  const turns = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const d = dests[i]!;
    perm[i] = mhHash1(d.addr, d.port, 0) % M;
    skip[i] = (mhHash2(d.addr, d.port) % (M - 1)) + 1;
    const lw = d.lastWeight ?? d.weight;
    turns[i] = Math.trunc(lw / g) >> rshift || (lw !== 0 ? 1 : 0);
  }
  const taken = new Uint8Array(M);
  let filled = 0;
  let dt = 0;
  for (;;) {
    for (let i = 0; i < n; ) {
      if (turns[i]! < 1) {
        i++;
        continue;
      }
      let c = perm[i]!;
      while (taken[c] !== 0) {
        c += skip[i]!;
        if (c >= M) c -= M;
      }
      perm[i] = c;
      taken[c] = 1;
      table[c] = i;
      if (++filled === M) return data;
      if (++dt >= turns[i]!) {
        dt = 0;
        i++;
      }
    }
  }
}

/** The kernel kept the old table (pointers to servers): re-express it in the new list's positions. */
function remap(old: Int32Array, svc: SchedService): Int32Array {
  const M = old[D_M]!;
  const n = svc.dests.length;
  const data = tableWords(D_TABLE + M + n);
  data[D_M] = M;
  data[D_N] = n;
  const oldN = old[D_N]!;
  const where = new Map<number, number>();
  svc.dests.forEach((d, i) => {
    where.set(d.rs, i);
    data[D_TABLE + M + i] = d.rs;
  });
  for (let s = 0; s < M; s++) {
    const p = old[D_TABLE + s]!;
    // A server deleted since is no longer ours to return (the kernel would still use it).
    data[D_TABLE + s] = p < 0 || p >= oldN ? -1 : (where.get(old[D_TABLE + M + p]!) ?? -1);
  }
  return data;
}

/** The table as list positions per slot (-1 = empty), for the disruption preview. */
export function mhSlots(data: Int32Array): Int32Array {
  return data.subarray(D_TABLE, D_TABLE + data[D_M]!);
}

export const mh: Scheduler = {
  name: 'mh',
  flags: ['mh-fallback', 'mh-port'],
  prepare(svc) {
    return mhBuild(svc);
  },
  lookupTable: mhSlots,
  schedule(svc, _state, _base, rs, input) {
    const data = svc.data!;
    const M = data[D_M]!;
    const port = svc.schedFlags & PORT ? input.cport : 0;
    const ihash = mhHash1(input.caddr, port, 0) % M;
    let i = data[D_TABLE + ihash]!;
    if (i < 0) return -1;
    if (!unavailable(svc.dests[i]!, rs)) return i;
    if ((svc.schedFlags & FALLBACK) === 0) return -1;
    for (let offset = 0; offset < M; offset++) {
      const roffset = (offset + ihash) % M;
      i = data[D_TABLE + (mhHash1(input.caddr, port, roffset) % M)]!;
      if (i < 0) return -1;
      if (!unavailable(svc.dests[i]!, rs)) return i;
    }
    return -1;
  },
};
