/**
 * ovf — overflow (kernel net/netfilter/ipvs/ip_vs_ovf.c).
 *
 * Among servers without OVERLOAD, with weight > 0 and with ActiveConn ≤ weight, picks the highest
 * weight (strict: the first in list order wins ties). A server keeps taking flows until its active
 * connections exceed its weight, then they overflow to the next-highest weight. Inactive
 * connections are not counted (UDP flows never fill a server). None eligible → none.
 */
import { activeConns, overloaded } from './common';
import type { Scheduler } from './types';

export const ovf: Scheduler = {
  name: 'ovf',
  schedule(svc, _state, _base, rs) {
    const dests = svc.dests;
    let best = -1;
    let hw = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      const w = d.weight;
      if (w === 0 || overloaded(rs, d.rs) || activeConns(rs, d.rs) > w) continue;
      if (best < 0 || w > hw) {
        best = i;
        hw = w;
      }
    }
    return best;
  },
};
