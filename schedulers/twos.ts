/**
 * twos — weighted power of two choices (kernel net/netfilter/ipvs/ip_vs_twos.c, Linux 6.2+).
 *
 * total = Σ weight over servers without OVERLOAD and with weight > 0 (none → none, and no random
 * numbers are drawn). r1, r2 = random % (total + 1); walking those servers in list order and
 * subtracting each weight from both, choice 1 is the first where r1 ≤ 0, choice 2 the first where
 * r2 ≤ 0. Choice 2 wins if weight2·overhead1 > weight1·overhead2 (int32 products, as the kernel's
 * int arithmetic), else choice 1 (overhead = 256·ActiveConn + InActConn).
 *
 * The kernel draws from prandom_u32; uvs draws from a mulberry32 stream kept in the shared state
 * word (one stream per service, advanced under the scheduler lock), so runs are reproducible:
 * each draw a = a + 0x6D2B79F5 (mod 2^32), t = imul(a ^ a>>>15, a | 1),
 * t ^= t + imul(t ^ t>>>7, t | 61), value = (t ^ t>>>14) >>> 0. init() seeds it from the system's
 * random source; uvs simulate seeds it from the scenario (seed(), i.e. seedTwos).
 * Invariant: weight 0 and OVERLOAD are never chosen.
 */
import { randomBytes } from 'node:crypto';
import { overhead, overloaded } from './common';
import type { Scheduler } from './types';

const RNG = 0; // state word: mulberry32 counter

/** Sets the random stream's seed (taken mod 2^32). */
export function seedTwos(state: Int32Array, base: number, seed: number): void {
  state[base + RNG] = Number(BigInt.asUintN(32, BigInt(Math.trunc(seed))));
}

/** One mulberry32 draw from the state word, as uint32. */
export function twosNext(state: Int32Array, base: number): number {
  const a = (state[base + RNG]! + 0x6d2b79f5) | 0;
  state[base + RNG] = a;
  let t = Math.imul(a ^ (a >>> 15), a | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return (t ^ (t >>> 14)) >>> 0;
}

export const twos: Scheduler = {
  name: 'twos',
  init(_svc, state, base) {
    state[base + RNG] = randomBytes(4).readInt32LE(0);
  },
  seed: seedTwos,
  schedule(svc, state, base, rs) {
    const dests = svc.dests;
    let total = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      if (d.weight > 0 && !overloaded(rs, d.rs)) total += d.weight;
    }
    if (total === 0) return -1;
    let r1 = twosNext(state, base) % (total + 1);
    let r2 = twosNext(state, base) % (total + 1);
    let c1 = -1;
    let c2 = -1;
    let w1 = -1;
    let w2 = -1;
    let oh1 = 0;
    let oh2 = 0;
    for (let i = 0; i < dests.length; i++) {
      const d = dests[i]!;
      const w = d.weight;
      if (w <= 0 || overloaded(rs, d.rs)) continue;
      r1 -= w;
      r2 -= w;
      if (r1 <= 0 && w1 === -1) {
        c1 = i;
        w1 = w;
        oh1 = overhead(rs, d.rs);
      }
      if (r2 <= 0 && w2 === -1) {
        c2 = i;
        w2 = w;
        oh2 = overhead(rs, d.rs);
      }
      if (w1 !== -1 && w2 !== -1) break;
    }
    return c2 >= 0 && Math.imul(w2, oh1) > Math.imul(w1, oh2) ? c2 : c1;
  },
};
