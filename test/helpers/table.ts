/** A fresh connection table for unit tests (control thread's owner id), with its real-server region. */
import * as L from '../../conntrack/layout';
import { TCP_DEFAULT_TIMEOUTS } from '../../conntrack/state';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';

export const TABLE_TIMEOUTS = { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300 };

/** `available`: the 8 real-server slots marked available with weight 1 (else all words 0). */
export function freshTable(capacity = 1024, available = false): { t: ConnTable; rs: Int32Array } {
  const region = createRealServerRegion(8);
  const t = new ConnTable(ConnTable.create(capacity, TABLE_TIMEOUTS), region, L.OWNER_CONTROL);
  const rs = new Int32Array(region);
  if (available) {
    for (let s = 0; s < 8; s++) {
      rs[s * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE;
      rs[s * L.RS_WORDS + L.RS_WEIGHT] = 1;
    }
  }
  return { t, rs };
}
