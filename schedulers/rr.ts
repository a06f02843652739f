/**
 * rr — round robin (kernel net/netfilter/ipvs/ip_vs_rr.c).
 *
 * The cursor remembers the last chosen real server (by slot; -1 = the list head). A pick walks
 * forward from the one after it, wrapping, and checks the last chosen one last, so a single
 * eligible server is chosen again. Invariants: weight 0 or OVERLOAD is never chosen; after adding
 * A, B, C the picks run C, B, A (newest first); deleting the server under the cursor moves the
 * cursor to the one before it, so the next pick is the one after the deleted server.
 */
import { overloaded, positionOf } from './common';
import type { DestListChange, Scheduler } from './types';

const LAST = 0; // state word: real-server slot of the last pick, -1 = head

export const rr: Scheduler = {
  name: 'rr',
  prepare() {
    return null;
  },
  init(_svc, state, base) {
    state[base + LAST] = -1;
  },
  update(_svc, state, base, change: DestListChange) {
    // ip_vs_rr_del_dest: if the cursor is on the deleted server, step back to the one before it.
    if (change.kind === 'del' && state[base + LAST] === change.rs) {
      state[base + LAST] = change.position > 0 ? change.before[change.position - 1]!.rs : -1;
    }
  },
  schedule(svc, state, base, rs) {
    const dests = svc.dests;
    const n = dests.length;
    const p = positionOf(dests, state[base + LAST]!);
    for (let k = 1; k <= n; k++) {
      const i = (p + k) % n;
      const d = dests[i]!;
      if (d.weight > 0 && !overloaded(rs, d.rs)) {
        state[base + LAST] = d.rs;
        return i;
      }
    }
    return -1;
  },
};
