/** Builders for the ipvsadm listing tests (control/ipvsadm/format.ts's input shapes). */
import type { FmtRealServer, FmtService } from '../../control/ipvsadm/format';

/** Counters of a service or server that has seen nothing. */
export const zero = { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0 };

/** A service as the listings take it: no scheduler flags, no persistence, zero counters, unless `more` says. */
export const svc = (
  protocol: string,
  address: string,
  port: number,
  scheduler: string,
  realServers: FmtRealServer[],
  more: Partial<FmtService> = {},
): FmtService => ({
  protocol,
  address,
  port,
  scheduler,
  schedFlags: [],
  persistence: 0,
  stats: zero,
  realServers,
  ...more,
});

/** Lines as a listing prints them: each ended by a newline. */
export const lines = (...l: string[]) => l.join('\n') + '\n';
