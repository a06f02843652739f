/**
 * lblc — locality-based least connection (kernel net/netfilter/ipvs/ip_vs_lblc.c).
 *
 * A cache maps the packet's destination address (for a uvs service: its virtual address) to a
 * real server. On a hit the cached server is used if it is still in the list, has weight > 0 and
 * is not "overloaded" in lblc's sense: ActiveConn > weight while some server of the service has
 * 2·ActiveConn < weight (the OVERLOAD flag is not checked here, as in the kernel). Otherwise the
 * wlc rule picks a server and the entry is replaced. A hit refreshes the entry's last use even
 * when the entry is then replaced.
 *
 * The kernel's collector timer runs every 60 s from service creation (tick()); every 30th run it
 * removes entries last used 24 h (lblc_expiration) or more ago. Its other pass (entries unused for
 * 6 min once there are more than 16384) cannot trigger with this cache's size.
 *
 * Shared state (the kernel's 1024-bucket table, in a fixed region): word 0 is the collector's run
 * counter (tbl->counter), then CACHE_ENTRIES entries of [daddr, real-server slot, its address, its
 * port + 1 (0 = free), last use (ms, int32, compared by wrapping difference like jiffies)]. With
 * more destination addresses than entries (impossible with one virtual address per service) the
 * least recently used entry is replaced.
 *
 * An entry holds its server as the kernel's does (ip_vs_lblc_new's ip_vs_dest_hold): holds() tells
 * the service model, which keeps a deleted server in the trash, slot and counters, while an entry
 * names it (control/services.ts collectTrash). A deleted cached server is not used (the kernel's
 * !AVAILABLE: reschedule and replace the entry, which lets it go); re-added before that, it is the
 * same slot again and the entry is a hit, as the kernel's revived dest. The cached server is found
 * again by slot, address and port, so even a slot freed under an entry (a worker still on an older
 * snapshot caching a server just deleted) and reused by another server is not mistaken for it.
 */
import { activeConns } from './common';
import { wlc } from './wlc';
import type { SchedDest, SchedService, Scheduler } from './types';

/** CHECK_EXPIRE_INTERVAL: the collector's period. */
export const LBLC_COLLECT_MS = 60_000;
/** Default lblc_expiration / lblcr_expiration sysctl. */
export const LBLC_EXPIRATION_MS = 86_400_000;
/** COUNT_FOR_FULL_EXPIRATION. */
export const LBLC_FULL_EVERY = 30;

const COUNTER = 0;
const ENTRIES = 1;
const E_DADDR = 0;
const E_RS = 1;
const E_RADDR = 2;
const E_RPORT1 = 3;
const E_LASTUSE = 4;
const ENTRY_WORDS = 5;
export const LBLC_CACHE_ENTRIES = 12; // 1 + 12·5 = 61 of the 63 state words

/** is_overloaded() of lblc/lblcr: busier than its weight while another server is under half. */
export function lblcOverloaded(d: SchedDest, dests: SchedDest[], rs: Int32Array): boolean {
  if (activeConns(rs, d.rs) <= d.weight) return false;
  for (let i = 0; i < dests.length; i++) {
    const m = dests[i]!;
    if (activeConns(rs, m.rs) * 2 < m.weight) return true;
  }
  return false;
}

/** The collector's bookkeeping shared by lblc and lblcr; returns whether this run is a full check. */
export function collectorRun(state: Int32Array, base: number): boolean {
  const c = state[base + COUNTER]!;
  if (c % LBLC_FULL_EVERY === 0) {
    state[base + COUNTER] = 1;
    return true;
  }
  state[base + COUNTER] = c + 1;
  return false;
}

function findCached(svc: SchedService, state: Int32Array, e: number): number {
  const slot = state[e + E_RS]!;
  const addr = state[e + E_RADDR]!;
  const port = state[e + E_RPORT1]! - 1;
  const dests = svc.dests;
  for (let i = 0; i < dests.length; i++) {
    const d = dests[i]!;
    if (d.rs === slot && d.addr === addr && d.port === port) return i;
  }
  return -1; // deleted (the kernel's !AVAILABLE): in the trash or gone
}

export const lblc: Scheduler = {
  name: 'lblc',
  tickInterval: LBLC_COLLECT_MS,
  init(_svc, state, base) {
    state[base + COUNTER] = 1;
  },
  schedule(svc, state, base, rs, input) {
    const now = input.now | 0;
    const daddr = input.vaddr | 0;
    let entry = -1;
    for (let k = 0; k < LBLC_CACHE_ENTRIES; k++) {
      const e = base + ENTRIES + k * ENTRY_WORDS;
      if (state[e + E_RPORT1] !== 0 && state[e + E_DADDR] === daddr) {
        entry = e;
        break;
      }
    }
    if (entry >= 0) {
      state[entry + E_LASTUSE] = now;
      const i = findCached(svc, state, entry);
      if (i >= 0 && svc.dests[i]!.weight > 0 && !lblcOverloaded(svc.dests[i]!, svc.dests, rs)) return i;
    }
    const i = wlc.schedule(svc, state, base, rs, input);
    if (i < 0) return -1;
    const d = svc.dests[i]!;
    if (entry >= 0 && findCached(svc, state, entry) === i) return i; // ip_vs_lblc_new: same server, keep
    if (entry < 0) {
      // A free entry, else the least recently used one.
      let oldest = -1;
      for (let k = 0; k < LBLC_CACHE_ENTRIES; k++) {
        const e = base + ENTRIES + k * ENTRY_WORDS;
        if (state[e + E_RPORT1] === 0) {
          entry = e;
          break;
        }
        const age = (now - state[e + E_LASTUSE]!) | 0;
        if (age > oldest) {
          oldest = age;
          entry = e;
        }
      }
    }
    state[entry + E_DADDR] = daddr;
    state[entry + E_RS] = d.rs;
    state[entry + E_RADDR] = d.addr;
    state[entry + E_RPORT1] = d.port + 1;
    state[entry + E_LASTUSE] = now;
    return i;
  },
  tick(_svc, state, base, _rs, now) {
    if (!collectorRun(state, base)) return;
    for (let k = 0; k < LBLC_CACHE_ENTRIES; k++) {
      const e = base + ENTRIES + k * ENTRY_WORDS;
      const age = ((now | 0) - state[e + E_LASTUSE]!) | 0;
      if (state[e + E_RPORT1] !== 0 && age >= LBLC_EXPIRATION_MS) state[e + E_RPORT1] = 0;
    }
  },
  holds(state, base, slot) {
    for (let k = 0; k < LBLC_CACHE_ENTRIES; k++) {
      const e = base + ENTRIES + k * ENTRY_WORDS;
      if (state[e + E_RPORT1] !== 0 && state[e + E_RS] === slot) return true;
    }
    return false;
  },
};
