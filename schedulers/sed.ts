/**
 * sed — shortest expected delay (kernel net/netfilter/ipvs/ip_vs_sed.c).
 *
 * Like wlc with the expected delay (ActiveConn + 1) / weight as the load: inactive connections
 * are ignored. The first eligible server (weight > 0, no OVERLOAD) in list order starts as the
 * least loaded; each later server without OVERLOAD replaces it when loh·w > doh·lw (strict), so
 * ties keep the earlier server and a weight-0 server can never win (its side is 0).
 */
import { activeConns } from './common';
import type { Scheduler } from './types';
import { weightedLeast } from './wlc';

/** ip_vs_sed_dest_overhead / ip_vs_nq_dest_overhead: ActiveConn + 1. */
export function expectedDelay(rs: Int32Array, slot: number): number {
  return activeConns(rs, slot) + 1;
}

export const sed: Scheduler = {
  name: 'sed',
  schedule(svc, _state, _base, rs) {
    return weightedLeast(svc, rs, expectedDelay);
  },
};
