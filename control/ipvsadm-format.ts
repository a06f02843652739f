/**
 * ipvsadm's output formats, byte for byte (ipvsadm 1.31 ipvsadm.c; ../shared/ipvs-semantics.md
 * §6.2). Pure functions of API data, so tests can compare them with known ipvsadm output.
 */

export interface FmtStats {
  conns: number;
  inPkts: number;
  outPkts: number;
  inBytes: number;
  outBytes: number;
}
export interface FmtRealServer {
  address: string;
  port: number;
  forwarding: string;
  weight: number;
  activeConns: number;
  inactConns: number;
  stats: FmtStats;
}
export interface FmtService {
  protocol: string;
  address: string;
  port: number;
  scheduler: string;
  schedFlags: string[];
  persistence: number;
  stats: FmtStats;
  realServers: FmtRealServer[];
}
export interface FmtConnection {
  protocol: string;
  client: string;
  virtual: string;
  realServer: string;
  state: string;
  expiresIn: number;
}

const left = (s: string | number, w: number) => String(s).padEnd(w);
const right = (s: string | number, w: number) => String(s).padStart(w);

const FWD_NAME: Record<string, string> = { masq: 'Masq', tunnel: 'Tunnel', route: 'Route', local: 'Local' };

function addrU32(a: string): number {
  const p = a.split('.').map(Number);
  return ((p[0]! << 24) | (p[1]! << 16) | (p[2]! << 8) | p[3]!) >>> 0;
}
/** libipvs comparator quirk: (int)(a − b) in 32 bits. */
function cmpU32(a: number, b: number): number {
  return (a - b) | 0;
}
const PROTO_ORDER: Record<string, number> = { tcp: 6, udp: 17, sctp: 132 };

export function sortServices<T extends FmtService>(svcs: T[]): T[] {
  return [...svcs].sort(
    (x, y) =>
      (PROTO_ORDER[x.protocol] ?? 0) - (PROTO_ORDER[y.protocol] ?? 0) ||
      cmpU32(addrU32(x.address), addrU32(y.address)) ||
      x.port - y.port,
  );
}
export function sortRealServers<T extends FmtRealServer>(rs: T[]): T[] {
  return [...rs].sort((x, y) => cmpU32(addrU32(x.address), addrU32(y.address)) || x.port - y.port);
}

function svcName(s: FmtService): string {
  return `${left(s.protocol.toUpperCase(), 4)} ${s.address}:${s.port}`;
}

function svcLine(s: FmtService): string {
  let line = `${svcName(s)} ${s.scheduler}`;
  if (s.schedFlags.length) line += ` (${s.schedFlags.join(',')})`;
  if (s.persistence) line += ` persistent ${s.persistence}`;
  return line;
}

/** print_largenum: 9 columns, scaled K/M/G/T unless exact. */
export function largeNum(n: number, exact: boolean): string {
  if (exact) {
    const s = String(n);
    return right(s, s.length <= 8 ? 9 : s.length + 1);
  }
  if (n < 1e8) return right(n, 9);
  if (n < 1e9) return right(Math.floor(n / 1e3), 9 - 1) + 'K';
  if (n < 1e11) return right(Math.floor(n / 1e6), 8) + 'M';
  if (n < 1e14) return right(Math.floor(n / 1e9), 8) + 'G';
  return right(Math.floor(n / 1e12), 8) + 'T';
}

export function formatList(tableSize: number, services: FmtService[], opts: { stats?: boolean; exact?: boolean; header?: boolean } = {}): string {
  const out: string[] = [];
  if (opts.header !== false) out.push(`IP Virtual Server version 1.2.1 (size=${tableSize})`);
  if (opts.stats) {
    out.push(`${left('Prot LocalAddress:Port', 33)} ${right('Conns', 8)} ${right('InPkts', 8)} ${right('OutPkts', 8)} ${right('InBytes', 8)} ${right('OutBytes', 8)}`);
    out.push('  -> RemoteAddress:Port');
  } else {
    out.push('Prot LocalAddress:Port Scheduler Flags');
    out.push('  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn');
  }
  const ex = !!opts.exact;
  const nums = (st: FmtStats) => [st.conns, st.inPkts, st.outPkts, st.inBytes, st.outBytes].map((v) => largeNum(v, ex)).join('');
  for (const s of sortServices(services)) {
    if (opts.stats) out.push(`${left(svcName(s), 33)}${nums(s.stats)}`);
    else out.push(svcLine(s));
    for (const r of sortRealServers(s.realServers)) {
      const addr = `${r.address}:${r.port}`;
      if (opts.stats) out.push(`  -> ${left(addr, 28)}${nums(r.stats)}`);
      else out.push(`  -> ${left(addr, 28)} ${left(FWD_NAME[r.forwarding] ?? r.forwarding, 7)} ${left(r.weight, 6)} ${left(r.activeConns, 10)} ${left(r.inactConns, 10)}`);
    }
  }
  return out.join('\n') + '\n';
}

export function formatConnections(conns: FmtConnection[]): string {
  const out = ['IPVS connection entries', `pro expire ${left('state', 11)} ${left('source', 18)} ${left('virtual', 18)} destination`];
  for (const c of conns) {
    const secs = Math.max(0, Math.floor(c.expiresIn));
    const expire = `${String(Math.floor(secs / 60)).padStart(2, '0')}:${String(secs % 60).padStart(2, '0')}`;
    out.push(`${left(c.protocol, 3)} ${left(expire, 6)} ${left(c.state, 11)} ${left(c.client, 18)} ${left(c.virtual, 18)} ${c.realServer}`);
  }
  return out.join('\n') + '\n';
}

export function formatTimeouts(t: { tcp: number; tcpFin: number; udp: number }): string {
  return `Timeout (tcp tcpfin udp): ${t.tcp} ${t.tcpFin} ${t.udp}\n`;
}

export interface FmtDrain {
  service: string;
  realServer: string;
  drainingFor: number;
  deadline: string | null;
  activeConns: number;
  inactConns: number;
}

/** uvs's own listing (`uvsadm -L --drain`): the servers being drained and what keeps them. */
export function formatDrains(checkInterval: number, drains: FmtDrain[]): string {
  const out = [`Draining real servers (checked every ${checkInterval} s)`, `${left('Prot LocalAddress:Port', 27)} ${left('-> RemoteAddress:Port', 28)} ${left('Since', 9)} ${left('ActiveConn', 10)} ${left('InActConn', 10)} Deadline`];
  for (const d of drains) {
    const [proto, addr] = d.service.split(' ');
    const s = Math.floor(d.drainingFor);
    const since = `${String(Math.floor(s / 3600)).padStart(2, '0')}:${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
    out.push(`${left(`${left(proto!.toUpperCase(), 4)} ${addr}`, 27)} ${left(`-> ${d.realServer}`, 28)} ${left(since, 9)} ${left(d.activeConns, 10)} ${left(d.inactConns, 10)} ${d.deadline ?? '-'}`);
  }
  return out.join('\n') + '\n';
}

export interface FmtHealth {
  service: string;
  realServer: string;
  healthy: boolean;
  consecutiveOk: number;
  consecutiveFail: number;
  lastError: string | null;
  checks: number;
}

/** uvs's own listing (`uvsadm -L --health`): health-check verdicts per real server. */
export function formatHealth(checks: FmtHealth[]): string {
  const out = [`${left('Prot LocalAddress:Port', 27)} ${left('-> RemoteAddress:Port', 28)} ${left('Health', 7)} ${left('Checks', 8)} Last error`];
  for (const c of [...checks].sort((a, b) => (a.service + a.realServer).localeCompare(b.service + b.realServer))) {
    const [proto, addr] = c.service.split(' ');
    out.push(`${left(`${left(proto!.toUpperCase(), 4)} ${addr}`, 27)} ${left(`-> ${c.realServer}`, 28)} ${left(c.healthy ? 'up' : 'DOWN', 7)} ${left(c.checks, 8)} ${c.lastError ?? '-'}`);
  }
  return out.join('\n') + '\n';
}
