/**
 * wlc — weighted least connection, ipvsadm's default (kernel net/netfilter/ipvs/ip_vs_wlc.c).
 *
 * The first eligible server (weight > 0, no OVERLOAD) in list order starts as the least loaded;
 * each later server without OVERLOAD replaces it when loh·w > doh·lw, i.e. its overhead per weight
 * is strictly smaller (overhead = 256·ActiveConn + InActConn). Ties keep the earlier server; a
 * weight-0 server can never win because its side of the comparison is 0.
 */
import { overhead, overloaded } from './common';
import type { SchedService, Scheduler } from './types';

/**
 * The walk wlc and sed share (they differ only in the overhead): the first eligible server is
 * the initial least; a later one without OVERLOAD replaces it when loh·w > doh·lw (strict).
 */
export function weightedLeast(svc: SchedService, rs: Int32Array, cost: (rs: Int32Array, slot: number) => number): number {
  const dests = svc.dests;
  let least = -1;
  let loh = 0;
  for (let i = 0; i < dests.length; i++) {
    const d = dests[i]!;
    if (least < 0) {
      if (d.weight > 0 && !overloaded(rs, d.rs)) {
        least = i;
        loh = cost(rs, d.rs);
      }
      continue;
    }
    if (overloaded(rs, d.rs)) continue;
    const doh = cost(rs, d.rs);
    // Products stay below 2^53 (overhead < 2^40, weight ≤ 65535): exact in doubles.
    if (loh * d.weight > doh * dests[least]!.weight) {
      least = i;
      loh = doh;
    }
  }
  return least;
}

export const wlc: Scheduler = {
  name: 'wlc',
  schedule(svc, _state, _base, rs) {
    return weightedLeast(svc, rs, overhead);
  },
};
