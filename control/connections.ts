/**
 * GET /v1/connections (uvsadm -Lc): the connection table as rows. Run by the control worker
 * (control/offload-jobs.ts) over the shared table, off the control thread: a full table's walk
 * and up to 100 000 rows are work of the request's choosing.
 */
import * as L from '../conntrack/layout';
import { SCTP_STATE_NAMES } from '../conntrack/sctp-state';
import { TCP_STATE_NAMES } from '../conntrack/state';
import { entryAddr, type ConnTable } from '../conntrack/table';
import { hostPort } from '../net/addr';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../net/packet';
import { protoLabel } from '../net/proto';
import type { ConnectionsResponse, ConnectionStatus } from './api-types';

export function connectionsView(d: { table: ConnTable }, limit: number, offset: number): ConnectionsResponse {
  const t = d.table;
  const a = t.i32;
  const now = t.now();
  const rows: ConnectionStatus[] = [];
  let total = 0;
  t.forEach((_e, o) => {
    total++;
    if (total <= offset || rows.length >= limit) return;
    const proto = a[o + L.E_PROTO]! & 0xff;
    const cports = a[o + L.E_CPORTS]!;
    const dports = a[o + L.E_DPORTS]!;
    rows.push({
      protocol: protoLabel(proto),
      client: hostPort(entryAddr(a, o, L.E_CADDR), cports >>> 16),
      virtual: hostPort(entryAddr(a, o, L.E_VADDR), cports & 0xffff),
      realServer: hostPort(entryAddr(a, o, L.E_DADDR), dports >>> 16),
      // Templates: ip_vs_state_name()'s template names (ip_vs_proto.c), not the protocol's.
      state:
        a[o + L.E_FLAGS]! & L.F_TEMPLATE
          ? a[o + L.E_STATE]! & L.CTPL_ASSURED
            ? 'ASSURED'
            : 'NONE'
          : proto === IPPROTO_TCP
            ? TCP_STATE_NAMES[a[o + L.E_STATE]!]!
            : proto === IPPROTO_SCTP
              ? SCTP_STATE_NAMES[a[o + L.E_STATE]!]!
              : 'UDP',
      expiresIn: Math.max(0, ((a[o + L.E_EXPIRES]! - now) | 0) / 1000),
      inactive: (a[o + L.E_FLAGS]! & L.F_INACTIVE) !== 0,
      shadow: (a[o + L.E_FLAGS]! & L.F_SHADOW) !== 0,
    });
  });
  return { total, offset, connections: rows };
}
