/**
 * wrr — weighted round robin (kernel net/netfilter/ipvs/ip_vs_wrr.c, the modern version with the
 * last-pass guard).
 *
 * di = gcd of the positive weights (1 if none), mw = max weight − (di − 1). The cursor cl walks
 * the list; at each list end the current weight cw drops by di, and at or below zero restarts at
 * mw. A server is picked when its weight ≥ cw, so over one cycle each is picked in proportion to
 * its weight: A=4, B=3, C=2 (list order) gives A A B A B C A B C. Any list change puts cl back at
 * the head and clamps cw (ip_vs_wrr_dest_changed). Weight 0 and OVERLOAD are never picked.
 */
import { gcd, overloaded, positionOf } from './common';
import type { SchedService, Scheduler } from './types';

const CL = 0; // state word: slot of the current server, -1 = head
const CW = 1; // state word: current weight
const DATA_DI = 0;
const DATA_MW = 1;

export const wrr: Scheduler = {
  name: 'wrr',
  prepare(svc: SchedService) {
    let g = 0;
    let max = 0;
    for (const d of svc.dests) {
      if (d.weight > 0) g = g > 0 ? gcd(d.weight, g) : d.weight;
      if (d.weight > max) max = d.weight;
    }
    const di = g || 1;
    return Int32Array.of(di, max - (di - 1));
  },
  init(svc, state, base) {
    // init_service on the (empty or given) list: cl = head, cw = mw.
    state[base + CL] = -1;
    state[base + CW] = svc.data ? svc.data[DATA_MW]! : 0;
  },
  update(svc, state, base) {
    const data = svc.data!;
    const di = data[DATA_DI]!;
    const mw = data[DATA_MW]!;
    state[base + CL] = -1;
    const cw = state[base + CW]!;
    if (cw > mw || cw === 0) state[base + CW] = mw;
    else if (di > 1) state[base + CW] = Math.trunc(cw / di) * di + 1;
  },
  schedule(svc, state, base, rs) {
    const dests = svc.dests;
    const n = dests.length;
    const data = svc.data!;
    const di = data[DATA_DI]!;
    const mw = data[DATA_MW]!;
    if (mw === 0) return -1;
    const last = positionOf(dests, state[base + CL]!);
    let pos = last;
    let cw = state[base + CW]!;
    let stop = -2;
    let lastPass = false;
    let restarted = false;
    for (;;) {
      for (let i = pos + 1; i < n; i++) {
        const d = dests[i]!;
        if (!overloaded(rs, d.rs) && d.weight >= cw) {
          state[base + CL] = d.rs;
          state[base + CW] = cw;
          return i;
        }
        if (i === stop) {
          state[base + CL] = d.rs;
          state[base + CW] = cw;
          return -1; // all destinations are overloaded
        }
      }
      pos = -1;
      cw -= di;
      if (cw <= 0) {
        cw = mw;
        if (lastPass || last === -1) {
          state[base + CL] = -1;
          state[base + CW] = cw;
          return -1;
        }
        restarted = true;
      }
      lastPass = cw <= di;
      if (lastPass && restarted && last !== -1) stop = last;
    }
  },
};
