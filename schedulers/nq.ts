/**
 * nq — never queue (kernel net/netfilter/ipvs/ip_vs_nq.c).
 *
 * Walks the list skipping weight 0 and OVERLOAD; the first server with no active connection is
 * taken at once (an idle server beats a fast one). Otherwise the sed rule: least
 * (ActiveConn + 1) / weight by loh·w > doh·lw, strict, so the earlier server wins ties.
 * Invariant: weight 0 and OVERLOAD are never chosen; none eligible → none.
 */
import { activeConns, overloaded } from './common';
import type { Scheduler } from './types';

export const nq: Scheduler = {
  name: 'nq',
  schedule(svc, _state, _base, rs) {
    const dests = svc.dests;
    let least = -1;
    let loh = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      if (d.weight === 0 || overloaded(rs, d.rs)) continue;
      const active = activeConns(rs, d.rs);
      if (active === 0) return i;
      const doh = active + 1;
      if (least < 0 || loh * d.weight > doh * dests[least]!.weight) {
        least = i;
        loh = doh;
      }
    }
    return least;
  },
};
