/**
 * sed — shortest expected delay (kernel net/netfilter/ipvs/ip_vs_sed.c).
 *
 * Like wlc with the expected delay (ActiveConn + 1) / weight as the load: inactive connections
 * are ignored. The first eligible server (weight > 0, no OVERLOAD) in list order starts as the
 * least loaded; each later server without OVERLOAD replaces it when loh·w > doh·lw (strict), so
 * ties keep the earlier server and a weight-0 server can never win (its side is 0).
 */
import { RS_ACTIVE, RS_WORDS } from '../conntrack/layout';
import { overloaded } from './lc';
import type { Scheduler } from './types';

/** ip_vs_sed_dest_overhead / ip_vs_nq_dest_overhead: ActiveConn + 1. */
export function expectedDelay(rs: Int32Array, slot: number): number {
  return Atomics.load(rs, slot * RS_WORDS + RS_ACTIVE) + 1;
}

export const sed: Scheduler = {
  name: 'sed',
  schedule(svc, _state, _base, rs) {
    const dests = svc.dests;
    let least = -1;
    let loh = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      if (least < 0) {
        if (d.weight > 0 && !overloaded(rs, d.rs)) {
          least = i;
          loh = expectedDelay(rs, d.rs);
        }
        continue;
      }
      if (overloaded(rs, d.rs)) continue;
      const doh = expectedDelay(rs, d.rs);
      // The kernel compares as s64; these products stay far below 2^53.
      if (loh * d.weight > doh * dests[least]!.weight) {
        least = i;
        loh = doh;
      }
    }
    return least;
  },
};
