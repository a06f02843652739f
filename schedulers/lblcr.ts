/**
 * lblcr — locality-based least connection with replication (kernel
 * net/netfilter/ipvs/ip_vs_lblcr.c).
 *
 * A cache maps the packet's destination address (a uvs service's virtual address) to a *set* of
 * real servers, newest member first. On a hit: min = the set's weighted-least-connection member
 * (members still in the list, without OVERLOAD, the first one needing weight > 0, strict
 * loh·w > doh·lw); then, if the set has more than one member and was last changed more than 24 h
 * (lblcr_expiration) ago, the weighted-*most*-loaded member (the first with weight > 0, replaced
 * when moh·w < doh·mw with w > 0; deleted members count) is dropped. min is used if it exists and
 * is not "overloaded" (lblc's rule: ActiveConn > weight while some server has 2·ActiveConn <
 * weight) — even when it was the member just dropped, as in the kernel; otherwise the wlc rule
 * picks a server from the whole list and it joins the set. A miss creates the entry with the wlc
 * pick. Adding or dropping a member marks the set changed.
 *
 * Collector: as lblc (tick() every 60 s; every 30th run drops entries last used ≥ 24 h ago).
 *
 * Shared state: word 0 the collector's run counter, then one entry [used, daddr, last use,
 * last change, size, members (real-server slots)…] with room for SET_CAPACITY members; times are
 * ms as int32 compared by wrapping difference. A member that would exceed the capacity is not
 * added — what the kernel does when allocating it fails. A second destination address (impossible
 * with one virtual address per service) replaces the entry.
 *
 * A member is held as the kernel's ip_vs_dest_set_insert holds it (ip_vs_dest_hold): holds() tells
 * the service model, which keeps a deleted member in the trash — its slot not reused, its counters
 * and weight kept — until the set lets it go (set_max drops it, or the entry expires); so a slot in
 * the set is that member's (bar a worker on an older snapshot adding a server just deleted, whose
 * slot the model may free first), and a member re-added from the trash (same slot) counts again.
 * The kernel has no other pass that removes deleted members: set_min skips them (!AVAILABLE).
 */
import { RS_WEIGHT, RS_WORDS } from '../conntrack/layout';
import { overhead, overloaded, positionOf } from './common';
import { collectorRun, LBLC_COLLECT_MS, LBLC_EXPIRATION_MS, lblcOverloaded } from './lblc';
import { wlc } from './wlc';
import { SCHED_STATE_WORDS, type SchedService, type Scheduler } from './types';

const USED = 1;
const DADDR = 2;
const LASTUSE = 3;
const LASTMOD = 4;
const SIZE = 5;
const MEMBERS = 6;
export const LBLCR_SET_CAPACITY = SCHED_STATE_WORDS - MEMBERS; // 57

/** A member's weight: from the list while listed, else the deleted server's last weight. */
function weightOf(svc: SchedService, rs: Int32Array, slot: number, pos: number): number {
  return pos >= 0 ? svc.dests[pos]!.weight : Atomics.load(rs, slot * RS_WORDS + RS_WEIGHT);
}

/** ip_vs_dest_set_min: list position of the least loaded usable member, or -1. */
function setMin(svc: SchedService, state: Int32Array, base: number, rs: Int32Array): number {
  const size = state[base + SIZE]!;
  let least = -1;
  let loh = 0;
  for (let k = 0; k < size; k++) {
    const slot = state[base + MEMBERS + k]!;
    if (overloaded(rs, slot)) continue;
    const pos = positionOf(svc.dests, slot);
    if (pos < 0) continue; // not AVAILABLE: deleted
    const d = svc.dests[pos]!;
    if (least < 0) {
      if (d.weight > 0) {
        least = pos;
        loh = overhead(rs, slot);
      }
      continue;
    }
    const doh = overhead(rs, slot);
    if (loh * d.weight > doh * svc.dests[least]!.weight) {
      least = pos;
      loh = doh;
    }
  }
  return least;
}

/** ip_vs_dest_set_max: member index of the most loaded member with weight > 0, or -1. */
function setMax(svc: SchedService, state: Int32Array, base: number, rs: Int32Array): number {
  const size = state[base + SIZE]!;
  let most = -1;
  let moh = 0;
  let mw = 0;
  for (let k = 0; k < size; k++) {
    const slot = state[base + MEMBERS + k]!;
    const w = weightOf(svc, rs, slot, positionOf(svc.dests, slot));
    if (most < 0) {
      if (w > 0) {
        most = k;
        moh = overhead(rs, slot);
        mw = w;
      }
      continue;
    }
    const doh = overhead(rs, slot);
    if (moh * w < doh * mw && w > 0) {
      most = k;
      moh = doh;
      mw = w;
    }
  }
  return most;
}

/** ip_vs_dest_set_insert with check: newest first; a set change stamps the time. */
function insert(state: Int32Array, base: number, slot: number, now: number): void {
  const size = state[base + SIZE]!;
  for (let k = 0; k < size; k++) if (state[base + MEMBERS + k] === slot) return;
  if (size >= LBLCR_SET_CAPACITY) return;
  state.copyWithin(base + MEMBERS + 1, base + MEMBERS, base + MEMBERS + size);
  state[base + MEMBERS] = slot;
  state[base + SIZE] = size + 1;
  state[base + LASTMOD] = now;
}

function erase(state: Int32Array, base: number, k: number, now: number): void {
  const size = state[base + SIZE]!;
  state.copyWithin(base + MEMBERS + k, base + MEMBERS + k + 1, base + MEMBERS + size);
  state[base + SIZE] = size - 1;
  state[base + LASTMOD] = now;
}

/** The cached set for a destination address, newest member first (real-server slots); [] = none. */
export function lblcrSet(state: Int32Array, base: number, daddr: number): number[] {
  if (state[base + USED] !== 1 || state[base + DADDR] !== (daddr | 0)) return [];
  return Array.from(state.subarray(base + MEMBERS, base + MEMBERS + state[base + SIZE]!));
}

export const lblcr: Scheduler = {
  name: 'lblcr',
  tickInterval: LBLC_COLLECT_MS,
  init(_svc, state, base) {
    state[base] = 1; // collector run counter (shared word 0 with lblc's layout)
  },
  schedule(svc, state, base, rs, input) {
    const now = input.now | 0;
    const daddr = input.vaddr | 0;
    if (state[base + USED] === 1 && state[base + DADDR] === daddr) {
      state[base + LASTUSE] = now;
      const min = setMin(svc, state, base, rs);
      if (state[base + SIZE]! > 1 && ((now - state[base + LASTMOD]!) | 0) > LBLC_EXPIRATION_MS) {
        const m = setMax(svc, state, base, rs);
        if (m >= 0) erase(state, base, m, now);
      }
      if (min >= 0 && !lblcOverloaded(svc.dests[min]!, svc.dests, rs)) return min;
      const i = wlc.schedule(svc, state, base, rs, input);
      if (i < 0) return -1;
      insert(state, base, svc.dests[i]!.rs, now);
      return i;
    }
    const i = wlc.schedule(svc, state, base, rs, input);
    if (i < 0) return -1;
    state[base + USED] = 1;
    state[base + DADDR] = daddr;
    state[base + LASTUSE] = now;
    state[base + SIZE] = 0;
    insert(state, base, svc.dests[i]!.rs, now);
    return i;
  },
  tick(_svc, state, base, _rs, now) {
    if (!collectorRun(state, base)) return;
    if (state[base + USED] === 1 && (((now | 0) - state[base + LASTUSE]!) | 0) >= LBLC_EXPIRATION_MS) {
      state[base + USED] = 0;
      state[base + SIZE] = 0;
    }
  },
  holds(state, base, slot) {
    if (state[base + USED] !== 1) return false;
    const size = state[base + SIZE]!;
    for (let k = 0; k < size; k++) if (state[base + MEMBERS + k] === slot) return true;
    return false;
  },
};
