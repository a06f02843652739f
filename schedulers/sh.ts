/**
 * sh — source hashing (kernel net/netfilter/ipvs/ip_vs_sh.c, modern version with sh-fallback and
 * sh-port).
 *
 * prepare() fills 256 buckets (CONFIG_IP_VS_SH_TAB_BITS = 8) walking the list cyclically: each
 * server takes `weight` consecutive buckets, so a weight-0 server still takes one bucket per round
 * and a weight ≥ the remaining buckets takes them all. Lookup: bucket =
 * (offset + hash_32(source port + client address, 8)) & 255, the port only with sh-port.
 *
 * Invariants: a bucket whose server has weight 0 or OVERLOAD gives none — with sh-fallback the
 * lookup re-hashes with offsets ihash, ihash+1, … (mod 256) until an eligible server, an empty
 * bucket stopping it. The table changes only on add/delete/edit (current weights, not
 * last_weight), and depends on list order. Empty list: every bucket empty.
 *
 * data: the 256 buckets as list positions (-1 = empty).
 */
import { unavailable } from './common';
import { hash32 } from './hash';
import type { SchedService, Scheduler } from './types';

export const SH_TAB_BITS = 8;
export const SH_TAB_SIZE = 1 << SH_TAB_BITS;
const SH_TAB_MASK = SH_TAB_SIZE - 1;

const FALLBACK = 1; // IP_VS_SVC_F_SCHED_SH_FALLBACK
const PORT = 2; // IP_VS_SVC_F_SCHED_SH_PORT

/** ip_vs_sh_hashkey. */
export function shBucket(addr: number, port: number, offset: number): number {
  return (offset + hash32((port + addr) >>> 0, SH_TAB_BITS)) & SH_TAB_MASK;
}

/** ip_vs_sh_reassign. */
export function shBuild(svc: SchedService): Int32Array {
  const table = new Int32Array(SH_TAB_SIZE).fill(-1);
  const dests = svc.dests;
  if (dests.length === 0) return table;
  let p = 0;
  let count = 0;
  for (let b = 0; b < SH_TAB_SIZE; b++) {
    table[b] = p;
    if (++count >= dests[p]!.weight) {
      p = (p + 1) % dests.length;
      count = 0;
    }
  }
  return table;
}

export const sh: Scheduler = {
  name: 'sh',
  flags: ['sh-fallback', 'sh-port'],
  prepare(svc) {
    return shBuild(svc);
  },
  lookupTable(data) {
    return data.subarray(0, SH_TAB_SIZE);
  },
  schedule(svc, _state, _base, rs, input) {
    const table = svc.data!;
    const port = svc.schedFlags & PORT ? input.cport : 0;
    const ihash = shBucket(input.caddr, port, 0);
    let i = table[ihash]!;
    if (i < 0) return -1;
    if (!unavailable(svc.dests[i]!, rs)) return i;
    if ((svc.schedFlags & FALLBACK) === 0) return -1;
    for (let offset = 0; offset < SH_TAB_SIZE; offset++) {
      i = table[shBucket(input.caddr, port, (offset + ihash) % SH_TAB_SIZE)]!;
      if (i < 0) return -1;
      if (!unavailable(svc.dests[i]!, rs)) return i;
    }
    return -1;
  },
};
