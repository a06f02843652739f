/**
 * fo — weighted failover (kernel net/netfilter/ipvs/ip_vs_fo.c).
 *
 * Every new flow goes to the server with the highest weight that has no OVERLOAD; connection
 * counts are ignored. Strict comparison from 0: the first in list order wins ties and weight 0 is
 * never chosen. All weights 0 or all overloaded → none.
 */
import { overloaded } from './common';
import type { Scheduler } from './types';

export const fo: Scheduler = {
  name: 'fo',
  schedule(svc, _state, _base, rs) {
    const dests = svc.dests;
    let best = -1;
    let hw = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      if (d.weight > hw && !overloaded(rs, d.rs)) {
        best = i;
        hw = d.weight;
      }
    }
    return best;
  },
};
