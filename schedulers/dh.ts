/**
 * dh — destination hashing (kernel net/netfilter/ipvs/ip_vs_dh.c), meant for cache clusters.
 *
 * prepare() fills 256 buckets (CONFIG_IP_VS_DH_TAB_BITS = 8) with the servers in list order,
 * round robin, one bucket each: weights do not shape the table. Lookup: bucket =
 * hash_32(destination address, 8) — the packet's destination, i.e. the virtual address for a uvs
 * service, so every flow of a service lands in the same bucket.
 *
 * Invariants: a bucket whose server has weight 0 or OVERLOAD gives none (no fallback); the table
 * changes only on add/delete/edit and depends on list order; empty list: none.
 *
 * data: the 256 buckets as list positions (-1 = empty).
 */
import { unavailable } from './common';
import { hash32 } from './hash';
import type { SchedService, Scheduler } from './types';

export const DH_TAB_BITS = 8;
export const DH_TAB_SIZE = 1 << DH_TAB_BITS;

/** ip_vs_dh_hashkey. */
export function dhBucket(addr: number): number {
  return hash32(addr >>> 0, DH_TAB_BITS);
}

/** ip_vs_dh_reassign. */
export function dhBuild(svc: SchedService): Int32Array {
  const table = new Int32Array(DH_TAB_SIZE).fill(-1);
  const n = svc.dests.length;
  if (n > 0) for (let b = 0; b < DH_TAB_SIZE; b++) table[b] = b % n;
  return table;
}

export const dh: Scheduler = {
  name: 'dh',
  prepare(svc) {
    return dhBuild(svc);
  },
  lookupTable(data) {
    return data.subarray(0, DH_TAB_SIZE);
  },
  schedule(svc, _state, _base, rs, input) {
    const i = svc.data![dhBucket(input.vaddr)]!;
    if (i < 0) return -1;
    return unavailable(svc.dests[i]!, rs) ? -1 : i;
  },
};
