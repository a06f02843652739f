/**
 * lc — least connection (kernel net/netfilter/ipvs/ip_vs_lc.c).
 *
 * Picks the eligible real server (weight > 0, no OVERLOAD) with the smallest overhead
 * 256·ActiveConn + InActConn (ip_vs_dest_conn_overhead, common.ts). Strict comparison: on a tie
 * the first in list order (newest first) wins. Weights other than 0 are ignored.
 */
import { overhead, overloaded } from './common';
import type { Scheduler } from './types';

export const lc: Scheduler = {
  name: 'lc',
  schedule(svc, _state, _base, rs) {
    const dests = svc.dests;
    let best = -1;
    let bestOh = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      if (d.weight === 0 || overloaded(rs, d.rs)) continue;
      const oh = overhead(rs, d.rs);
      if (best < 0 || oh < bestOh) {
        best = i;
        bestOh = oh;
      }
    }
    return best;
  },
};
