/**
 * What the schedulers share: the kernel's few helpers that several ip_vs_*.c files use, in one
 * place, each read as the kernel reads it.
 *
 *  - overhead(): include/net/ip_vs.h ip_vs_dest_conn_overhead(), (activeconns << 8) + inactconns,
 *    i.e. 256·ActiveConn + InActConn (docs/ipvs-semantics.md §1.4): the load lc, wlc, lblc and
 *    lblcr (through wlc and their own set walks) and twos compare. The kernel returns an int;
 *    here the sum is an exact double (the counts are bounded by dataplane.tableSize, at most 2^26,
 *    so a product with a weight ≤ 65535 stays below 2^53). twos multiplies with Math.imul, which
 *    converts both sides to int32 first, as the kernel's int arithmetic wraps.
 *  - activeConns(): ActiveConn alone, for the schedulers whose overhead ignores inactive
 *    connections (sed, nq: ActiveConn + 1; ovf's ActiveConn ≤ weight).
 *  - overloaded(): IP_VS_DEST_F_OVERLOAD, which net/netfilter/ipvs/ip_vs_conn.c sets in
 *    ip_vs_bind_dest when ActiveConn + InActConn reaches the upper threshold and clears in
 *    ip_vs_unbind_dest below the lower one (§1.3). Every scheduler skips such a server for a new
 *    flow, except lblc/lblcr's cache hit, which applies its own "overloaded" rule (lblc.ts).
 *  - unavailable(): weight ≤ 0 or OVERLOAD, the hashing schedulers' test of the server their table
 *    gives (ip_vs_sh.c and ip_vs_mh.c is_unavailable(); ip_vs_dh.c adds !AVAILABLE, which a server
 *    in svc.dests always is; §2 "Unavailable").
 *  - gcd(): lib/math/gcd.c gcd() of two positive numbers, for wrr's di (ip_vs_wrr_gcd_weight) and
 *    mh's weight divisor (ip_vs_mh_gcd_weight).
 *  - positionOf(): a real-server slot's position in the list, -1 if absent: how the cursor
 *    schedulers (rr, wrr) and lblcr's set find the kernel's dest pointer again in svc.dests.
 *
 * Plain reads, not Atomics.load: schedule() runs under the service's scheduler lock, an aligned
 * int32 read cannot tear, and a count a few nanoseconds stale is what the kernel's atomic_read
 * gives too. Measured: wlc over 100 servers 0.5 M decisions/s with Atomics.load, 3.0 M/s without.
 */
import { RS_ACTIVE, RS_FLAGS, RS_INACTIVE, RS_WORDS, RSF_OVERLOAD } from '../conntrack/layout';
import type { SchedDest } from './types';

/** ip_vs_dest_conn_overhead: 256·ActiveConn + InActConn of the real server in `slot`. */
export function overhead(rs: Int32Array, slot: number): number {
  const o = slot * RS_WORDS;
  return rs[o + RS_ACTIVE]! * 256 + rs[o + RS_INACTIVE]!;
}

/** ActiveConn of the real server in `slot`. */
export function activeConns(rs: Int32Array, slot: number): number {
  return rs[slot * RS_WORDS + RS_ACTIVE]!;
}

/** IP_VS_DEST_F_OVERLOAD set on the real server in `slot`. */
export function overloaded(rs: Int32Array, slot: number): boolean {
  return (rs[slot * RS_WORDS + RS_FLAGS]! & RSF_OVERLOAD) !== 0;
}

/** is_unavailable() of sh and mh, dh's test too: weight ≤ 0 or OVERLOAD. */
export function unavailable(d: SchedDest, rs: Int32Array): boolean {
  return d.weight <= 0 || overloaded(rs, d.rs);
}

/** lib/math/gcd.c gcd(a, b) for a, b > 0. */
export function gcd(a: number, b: number): number {
  while (b !== 0) {
    const t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/** Position in `dests` of the real server in slot `rs`; -1 for -1 (the list head) or a slot not listed. */
export function positionOf(dests: SchedDest[], rs: number): number {
  if (rs < 0) return -1;
  for (let i = 0; i < dests.length; i++) if (dests[i]!.rs === rs) return i;
  return -1;
}
