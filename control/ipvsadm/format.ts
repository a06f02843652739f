/**
 * ipvsadm's output formats, byte for byte (ipvsadm 1.31 ipvsadm.c: print_title,
 * print_service_entry, print_largenum, list_conn, list_timeout; docs/ipvs-semantics.md
 * §6.2). Pure functions of API data, so tests can compare them with known ipvsadm output.
 *
 * Names: without -n ipvsadm prints host and service names (addrport_to_anyname: gethostbyaddr,
 * getservbyport). Looking them up is asynchronous, so the caller resolves first (names.ts) and
 * passes the answers as `names`; absent, every address and port is numeric (-n).
 */
import type { DefenseView } from '../../conntrack/defense';
import { hostPort, parseIPv4, parseIPv6, splitHostPort } from '../../net/addr';
import { isProtocol, PROTO_LABEL, PROTO_NUMBER, PROTO_SWITCH } from '../../net/proto';
import { schedFlagNames } from '../../schedulers/registry';
import { SCHED_FLAG_BITS, schedFlagBits } from '../../schedulers/types';
import type { ConnectionStatus } from '../api-types';

export interface FmtStats {
  conns: number;
  inPkts: number;
  outPkts: number;
  inBytes: number;
  outBytes: number;
}
/** The kernel estimator's read-out (ip_vs_est.c): per second, already unscaled. */
export interface FmtRates {
  cps: number;
  inPps: number;
  outPps: number;
  inBps: number;
  outBps: number;
}
export interface FmtRealServer {
  address: string;
  port: number;
  forwarding: string;
  weight: number;
  activeConns: number;
  inactConns: number;
  persistConns?: number;
  upperThreshold?: number;
  lowerThreshold?: number;
  /** uvs: PROXY protocol version towards it ('v1', 'v2'); absent = none. */
  proxyProtocol?: string;
  stats: FmtStats;
  /** Absent when the daemon does not estimate rates: printed as zeros. */
  rates?: FmtRates;
}
export interface FmtService {
  protocol: string;
  address: string;
  port: number;
  scheduler: string;
  schedFlags: string[];
  /** Persistence timeout in seconds; 0 = not persistent. */
  persistence: number;
  /** Persistence granularity (IPv4 dotted mask); absent = 255.255.255.255. */
  netmask?: string;
  /** Persistence engine name (--pe). */
  pe?: string;
  /** One-packet scheduling (-o). */
  ops?: boolean;
  stats: FmtStats;
  rates?: FmtRates;
  realServers: FmtRealServer[];
}
/** What `-Lc` prints of a connection (GET /v1/connections' entry). */
export type FmtConnection = Pick<ConnectionStatus, 'protocol' | 'client' | 'virtual' | 'realServer' | 'state' | 'expiresIn'>;

/** What `-L` prints; the title precedence is ipvsadm's: stats, rate, thresholds, persistent-conn, tun-info. */
export interface ListOptions {
  /** The version line (only when the whole table is listed). */
  header?: boolean;
  stats?: boolean;
  rate?: boolean;
  thresholds?: boolean;
  persistentConn?: boolean;
  tunInfo?: boolean;
  exact?: boolean;
  /** Kernel order (as the API lists them) instead of libipvs's sort. */
  nosort?: boolean;
  /** Host and service names (no -n); absent = numeric. */
  names?: Names;
}

/** Answers already looked up (names.ts); null = print the number. */
export interface Names {
  host(address: string): string | null;
  /** getservbyport(port, protocol) for 'tcp', 'udp' or 'sctp'. */
  service(port: number, protocol: string): string | null;
}

/**
 * addrport_to_anyname(): "addr:port" (IPv6 "[addr]:port") with the names found, else numbers. Its
 * buffer is 60 bytes, so a name makes at most 59 characters.
 */
export function addrPort(address: string, port: number, protocol: string, names?: Names): string {
  if (!names) return hostPort(address, port);
  const host = names.host(address) ?? address;
  const p = names.service(port, protocol) ?? String(port);
  return (address.includes(':') ? `[${host}]:${p}` : `${host}:${p}`).slice(0, 59);
}

const left = (s: string | number, w: number) => String(s).padEnd(w);
const right = (s: string | number, w: number) => String(s).padStart(w);

const FWD_NAME: Record<string, string> = { masq: 'Masq', tunnel: 'Tunnel', route: 'Route', local: 'Local', fullnat: 'FullNat' }; // FullNat: uvs's own (7 wide, as the column)
/** fwd_switch(): Local is saved as -g. */
const FWD_SWITCH: Record<string, string> = { masq: '-m', tunnel: '-i', route: '-g', local: '-g', fullnat: '--fullnat' };
const ZERO_RATES: FmtRates = { cps: 0, inPps: 0, outPps: 0, inBps: 0, outBps: 0 };

function addrU32(a: string): number {
  return (parseIPv4(a) ?? 0) >>> 0;
}
/** libipvs comparator quirk: (int)(a − b) in 32 bits. */
function cmpU32(a: number, b: number): number {
  return (a - b) | 0;
}
const protoOrder = (p: string): number => (isProtocol(p) ? PROTO_NUMBER[p] : 0);

/**
 * Address order of libipvs's comparators (ipvs_cmp_services, ipvs_cmp_dests): IPv4 before IPv6
 * (af), then the address as host-order 32-bit words, each compared as `int r = ntohl(a) -
 * ntohl(b)` — a difference of unsigned words kept in a signed int, so two words 2^31 or more apart
 * compare backwards (192.168.x before 10.x; fd00:: before 2001:db8::). IPv6 stops at the first
 * word that differs.
 */
function cmpAddr(x: string, y: string): number {
  const x6 = x.includes(':');
  const y6 = y.includes(':');
  if (x6 !== y6) return x6 ? 1 : -1;
  if (!x6) return cmpU32(addrU32(x), addrU32(y));
  const a = parseIPv6(x)!;
  const b = parseIPv6(y)!;
  for (let i = 0; i < 4; i++) {
    const r = cmpU32(a[i]! >>> 0, b[i]! >>> 0);
    if (r !== 0) return r;
  }
  return 0;
}

/**
 * glibc's qsort (stdlib/msort.c; Debian 12's glibc 2.36): a top-down merge sort, left half n/2,
 * merging from the left while cmp(left, right) <= 0. libipvs's comparator is not transitive (see
 * cmpAddr), so the order depends on the algorithm: this is ipvsadm's on glibc systems, where
 * Array.prototype.sort (TimSort) can differ (test/unit/uvsadm-format.test.ts has such an input).
 */
export function glibcSort<T>(items: T[], cmp: (a: T, b: T) => number): T[] {
  const b = [...items];
  const tmp = new Array<T>(b.length);
  const msort = (lo: number, n: number): void => {
    if (n <= 1) return;
    const n1 = n >>> 1;
    msort(lo, n1);
    msort(lo + n1, n - n1);
    let i = lo;
    let j = lo + n1;
    let k = 0;
    const iEnd = lo + n1;
    const jEnd = lo + n;
    while (i < iEnd && j < jEnd) tmp[k++] = cmp(b[i]!, b[j]!) <= 0 ? b[i++]! : b[j++]!;
    while (i < iEnd) tmp[k++] = b[i++]!;
    for (let m = 0; m < k; m++) b[lo + m] = tmp[m]!;
  };
  msort(0, b.length);
  return b;
}

/** ipvs_cmp_services (libipvs.c): family, protocol, then address and port. */
export function sortServices<T extends FmtService>(svcs: T[]): T[] {
  return glibcSort(
    svcs,
    (x, y) =>
      Number(x.address.includes(':')) - Number(y.address.includes(':')) ||
      protoOrder(x.protocol) - protoOrder(y.protocol) ||
      cmpAddr(x.address, y.address) ||
      x.port - y.port,
  );
}
/** ipvs_cmp_dests (libipvs.c). */
export function sortRealServers<T extends { address: string; port: number }>(rs: T[]): T[] {
  return glibcSort(rs, (x, y) => cmpAddr(x.address, y.address) || x.port - y.port);
}

/**
 * print_sched_flags(): the names depend on the scheduler (schedFlagNames: sh's and mh's own, else
 * flag-1..3); sh and mh have no name for SCHED3, so it is not printed for them.
 */
export function schedFlagsText(scheduler: string, flags: string[]): string {
  // IP_VS_SVC_F_SCHED1..3: the kernel keeps bits, so flag-1, sh-fallback and mh-fallback are one flag.
  const bits = schedFlagBits(flags);
  return schedFlagNames(scheduler)
    .filter((f) => (bits & SCHED_FLAG_BITS[f]!) !== 0)
    .join(',');
}
function hasFlags(flags: string[]): boolean {
  return flags.some((f) => SCHED_FLAG_BITS[f] !== undefined);
}

/** svc_name: "%-4s %s", cut at 33 characters for IPv4; IPv6 as [addr]:port, whole. */
function svcName(s: FmtService, names?: Names): string {
  const name = `${left(isProtocol(s.protocol) ? PROTO_LABEL[s.protocol] : '?', 4)} ${addrPort(s.address, s.port, s.protocol, names)}`;
  return s.address.includes(':') ? name : name.slice(0, 33);
}
/** dname, cut at 28 characters for IPv4 (print_service_entry), whole for IPv6 and in -S. */
function destName(r: FmtRealServer, protocol: string, names?: Names): string {
  const d = addrPort(r.address, r.port, protocol, names);
  return r.address.includes(':') ? d : d.slice(0, 28);
}

/**
 * The persistence mask as ipvsadm prints it, or null when it is the default: IPv4 a dotted mask
 * other than 255.255.255.255 (inet_ntoa), IPv6 a prefix length other than 128 (" mask %i").
 */
function maskText(s: FmtService): string | null {
  if (s.netmask === undefined) return null;
  if (s.address.includes(':')) return Number(s.netmask) === 128 ? null : String(Number(s.netmask));
  return s.netmask === '255.255.255.255' ? null : s.netmask;
}

/** The default service line: scheduler, (flags), persistent T [mask M] [pe P], ops. */
function svcLine(s: FmtService, names?: Names): string {
  let line = `${svcName(s, names)} ${s.scheduler}`;
  if (hasFlags(s.schedFlags)) line += ` (${schedFlagsText(s.scheduler, s.schedFlags)})`;
  if (s.persistence) {
    line += ` persistent ${s.persistence}`;
    const mask = maskText(s);
    if (mask !== null) line += ` mask ${mask}`;
    if (s.pe) line += ` pe ${s.pe}`;
  }
  if (s.ops) line += ' ops';
  return line;
}

/** print_largenum: 9 columns, scaled K/M/G/T unless exact. */
export function largeNum(n: number, exact: boolean): string {
  if (exact) {
    const s = String(n);
    return right(s, s.length <= 8 ? 9 : s.length + 1);
  }
  if (n < 1e8) return right(n, 9);
  if (n < 1e9) return right(Math.floor(n / 1e3), 8) + 'K';
  if (n < 1e11) return right(Math.floor(n / 1e6), 8) + 'M';
  if (n < 1e14) return right(Math.floor(n / 1e9), 8) + 'G';
  return right(Math.floor(n / 1e12), 8) + 'T';
}

/** print_title(). */
function title(o: ListOptions): string[] {
  const cols = (names: string[], fmt: (n: string) => string) => `${left('Prot LocalAddress:Port', 33)} ${names.map(fmt).join(' ')}`;
  if (o.stats) return [cols(['Conns', 'InPkts', 'OutPkts', 'InBytes', 'OutBytes'], (n) => right(n, 8)), '  -> RemoteAddress:Port'];
  if (o.rate) return [cols(['CPS', 'InPPS', 'OutPPS', 'InBPS', 'OutBPS'], (n) => right(n, 8)), '  -> RemoteAddress:Port'];
  if (o.thresholds) return [cols(['Uthreshold', 'Lthreshold', 'ActiveConn', 'InActConn'], (n) => left(n, 10)), '  -> RemoteAddress:Port'];
  if (o.persistentConn) {
    return [
      `${left('Prot LocalAddress:Port', 33)} ${left('Weight', 9)} ${left('PersistConn', 11)} ${left('ActiveConn', 10)} ${left('InActConn', 10)}`,
      '  -> RemoteAddress:Port',
    ];
  }
  if (o.tunInfo)
    return [
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn',
    ];
  return ['Prot LocalAddress:Port Scheduler Flags', '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn'];
}

/** print_service_entry() without FMT_RULE: the service line and its real servers. */
function serviceEntry(s: FmtService, o: ListOptions): string[] {
  const ex = !!o.exact;
  const nums = (v: number[]) => v.map((x) => largeNum(x, ex)).join('');
  const st = (x: FmtStats) => nums([x.conns, x.inPkts, x.outPkts, x.inBytes, x.outBytes]);
  const out: string[] = [];
  if (o.stats) out.push(`${left(svcName(s, o.names), 33)}${st(s.stats)}`);
  else if (o.rate) {
    const r = s.rates ?? ZERO_RATES;
    out.push(`${left(svcName(s, o.names), 33)}${nums([r.cps, r.inPps, r.outPps, r.inBps, r.outBps])}`);
  } else out.push(svcLine(s, o.names));
  for (const r of o.nosort ? s.realServers : sortRealServers(s.realServers)) {
    const d = destName(r, s.protocol, o.names);
    if (o.stats) out.push(`  -> ${left(d, 28)}${st(r.stats)}`);
    else if (o.rate) {
      const x = r.rates ?? ZERO_RATES;
      out.push(`  -> ${left(d, 28)} ${right(x.cps, 8)} ${right(x.inPps, 8)} ${right(x.outPps, 8)}${nums([x.inBps, x.outBps])}`);
    } else if (o.thresholds) {
      out.push(
        `  -> ${left(d, 28)} ${left(r.upperThreshold ?? 0, 10)} ${left(r.lowerThreshold ?? 0, 10)} ${left(r.activeConns, 10)} ${left(r.inactConns, 10)}`,
      );
    } else if (o.persistentConn) {
      out.push(
        `  -> ${left(d, 28)} ${left(r.weight, 9)} ${left(r.persistConns ?? 0, 11)} ${left(r.activeConns, 10)} ${left(r.inactConns, 10)}`,
      );
    } else if (o.tunInfo) {
      // Tunnel servers would show ipip; uvs has none yet, so every row is n/a.
      const ti = r.forwarding === 'tunnel' ? 'ipip' : 'n/a';
      out.push(
        `  -> ${left(d, 28)} ${left(FWD_NAME[r.forwarding] ?? r.forwarding, 7)} ${left(ti, 13)} ${left(r.weight, 6)} ${left(r.activeConns, 10)} ${left(r.inactConns, 10)}`,
      );
    } else {
      out.push(
        `  -> ${left(d, 28)} ${left(FWD_NAME[r.forwarding] ?? r.forwarding, 7)} ${left(r.weight, 6)} ${left(r.activeConns, 10)} ${left(r.inactConns, 10)}`,
      );
    }
  }
  return out;
}

/** `-L` (whole table: version line, title, services) or, with header false, `-L <service>`. */
export function formatList(tableSize: number, services: FmtService[], opts: ListOptions = {}): string {
  const out: string[] = [];
  if (opts.header !== false) out.push(`IP Virtual Server version 1.2.1 (size=${tableSize})`);
  out.push(...title(opts));
  for (const s of opts.nosort ? services : sortServices(services)) out.push(...serviceEntry(s, opts));
  return out.join('\n') + '\n';
}

/**
 * `-S` (FMT_RULE): the commands that rebuild the table; no title, always sorted. One deviation:
 * ipvsadm's "-a %s -r %s %s -w %d" drops the thresholds, so its save/restore loses them; uvs
 * appends " -x U" / " -y L" when they are set (still valid ipvsadm input) so -S | -R is lossless;
 * likewise uvs's own " --proxy-protocol v1|v2" (which ipvsadm does not take).
 */
export function formatSave(services: FmtService[], names?: Names): string {
  const out: string[] = [];
  for (const s of sortServices(services)) {
    const name = `${isProtocol(s.protocol) ? PROTO_SWITCH[s.protocol] : '--xxx-service'} ${addrPort(s.address, s.port, s.protocol, names)}`;
    let line = `-A ${name} -s ${s.scheduler}`;
    if (s.persistence) {
      line += ` -p ${s.persistence}`;
      const mask = maskText(s);
      if (mask !== null) line += ` -M ${mask}`;
    }
    if (s.pe) line += ` --pe ${s.pe}`;
    if (s.ops) line += ' -o';
    if (hasFlags(s.schedFlags)) line += ` -b ${schedFlagsText(s.scheduler, s.schedFlags)}`;
    out.push(line);
    for (const r of sortRealServers(s.realServers)) {
      const tun = r.forwarding === 'tunnel' ? ' --tun-type ipip' : '';
      const thresholds = `${r.upperThreshold ? ` -x ${r.upperThreshold}` : ''}${r.lowerThreshold ? ` -y ${r.lowerThreshold}` : ''}`;
      const pp = r.proxyProtocol ? ` --proxy-protocol ${r.proxyProtocol}` : '';
      out.push(
        `-a ${name} -r ${addrPort(r.address, r.port, s.protocol, names)} ${FWD_SWITCH[r.forwarding] ?? '-g'} -w ${r.weight}${tun}${thresholds}${pp}`,
      );
    }
  }
  return out.map((l) => l + '\n').join('');
}

function connName(s: string, protocol: string, names?: Names): string {
  const hp = names ? splitHostPort(s) : null;
  return hp ? addrPort(hp.host, hp.port, protocol.toLowerCase(), names) : s;
}

/** `-Lnc`; with --persistent-conn the title gains the pe columns (rows only when an entry has pe data, which uvs never has). */
export function formatConnections(conns: FmtConnection[], opts: { persistentConn?: boolean; names?: Names } = {}): string {
  const head = opts.persistentConn
    ? `pro expire ${left('state', 11)} ${left('source', 18)} ${left('virtual', 18)} ${left('destination', 18)} ${left('pe name', 16)} pe_data`
    : `pro expire ${left('state', 11)} ${left('source', 18)} ${left('virtual', 18)} destination`;
  const out = ['IPVS connection entries', head];
  for (const c of conns) {
    const secs = Math.max(0, Math.floor(c.expiresIn));
    const expire = `${String(Math.floor(secs / 60)).padStart(2, '0')}:${String(secs % 60).padStart(2, '0')}`;
    const n = opts.names;
    out.push(
      `${left(c.protocol, 3)} ${left(expire, 6)} ${left(c.state, 11)} ${left(connName(c.client, c.protocol, n), 18)} ${left(connName(c.virtual, c.protocol, n), 18)} ${connName(c.realServer, c.protocol, n)}`,
    );
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
  const out = [
    `Draining real servers (checked every ${checkInterval} s)`,
    `${left('Prot LocalAddress:Port', 27)} ${left('-> RemoteAddress:Port', 28)} ${left('Since', 9)} ${left('ActiveConn', 10)} ${left('InActConn', 10)} Deadline`,
  ];
  for (const d of drains) {
    const [proto, addr] = d.service.split(' ');
    const s = Math.floor(d.drainingFor);
    const since = `${String(Math.floor(s / 3600)).padStart(2, '0')}:${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
    out.push(
      `${left(`${left(proto!.toUpperCase(), 4)} ${addr}`, 27)} ${left(`-> ${d.realServer}`, 28)} ${left(since, 9)} ${left(d.activeConns, 10)} ${left(d.inactConns, 10)} ${d.deadline ?? '-'}`,
    );
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

export interface FmtWorker {
  id: number;
  ready: boolean;
  restarts: number;
  /** io_uring or poll (docs/io_uring.md); null while the worker starts. */
  io: string | null;
  rxPackets: number;
  txPackets: number;
}

/**
 * uvs's own listing (`uvsadm -L --workers`): the dataplane workers and the I/O path of each; then
 * how the device steers packets to them (docs/steering.md), when known.
 */
export function formatWorkers(workers: FmtWorker[], steering?: { path: string; reason: string | null }): string {
  const out = [`${left('Worker', 7)} ${left('State', 6)} ${left('Restarts', 9)} ${left('I/O', 9)} ${left('RxPkts', 12)} TxPkts`];
  for (const w of workers) {
    out.push(
      `${left(w.id, 7)} ${left(w.ready ? 'up' : 'DOWN', 6)} ${left(w.restarts, 9)} ${left(w.io ?? '-', 9)} ${left(w.rxPackets, 12)} ${w.txPackets}`,
    );
  }
  if (steering) out.push(`Queue steering: ${steering.path}${steering.reason ? ` (${steering.reason})` : ''}`);
  return out.join('\n') + '\n';
}

/** uvs's own listing (`uvsadm -L --health`): health-check verdicts per real server. */
export function formatHealth(checks: FmtHealth[]): string {
  const out = [
    `${left('Prot LocalAddress:Port', 27)} ${left('-> RemoteAddress:Port', 28)} ${left('Health', 7)} ${left('Checks', 8)} Last error`,
  ];
  for (const c of [...checks].sort((a, b) => (a.service + a.realServer).localeCompare(b.service + b.realServer))) {
    const [proto, addr] = c.service.split(' ');
    out.push(
      `${left(`${left(proto!.toUpperCase(), 4)} ${addr}`, 27)} ${left(`-> ${c.realServer}`, 28)} ${left(c.healthy ? 'up' : 'DOWN', 7)} ${left(c.checks, 8)} ${c.lastError ?? '-'}`,
    );
  }
  return out.join('\n') + '\n';
}

/** GET /v1/defense: the defense's own view (conntrack/defense.ts) and what it refused. */
export type FmtDefense = Omit<DefenseView, 'holdTime' | 'ticks' | 'nomemTicks'> & {
  refused: { dropPacket: number; halfOpenPerSource: number; tableFull: number; fullnatPortsExhausted: number };
  synProxyCounts?: { cookies: number; accepted: number; badCookies: number; held: number; heldRefused: number; serverFailures: number };
};

/** The kernel's sysctl names for the defenses (uvs's own limit has none: its config name). */
const DEFENSE_SYSCTL: Record<string, string> = {
  dropEntry: 'drop_entry',
  dropPacket: 'drop_packet',
  secureTcp: 'secure_tcp',
  halfOpenPerSource: 'half_open_per_source',
  synProxy: 'syn_proxy',
};

/** uvs's own listing (`uvsadm -L --defense`): the overload defenses as /proc/sys/net/ipv4/vs shows them, and what they did. */
export function formatDefense(v: FmtDefense): string {
  const out = [
    `Overload defenses: ${v.freeEntries} of ${v.capacity} entries free, amemthresh ${v.amemthresh}: ${v.nomem ? 'SHORT OF ROOM' : 'room'}`,
    `${left('Defense', 21)} ${left('Set', 4)} ${left('Mode', 5)} Active`,
  ];
  for (const d of v.defenses)
    out.push(`${left(DEFENSE_SYSCTL[d.name] ?? d.name, 21)} ${left(d.configured, 4)} ${left(d.mode, 5)} ${d.active ? 'yes' : 'no'}`);
  out.push(
    `am_droprate ${v.amDroprate}, drop rate now ${v.dropRate === 0 ? '-' : `1/${v.dropRate}`}, secure_tcp half-open timeout ${v.secureTcpTimeout} s, half-open limit per source ${v.maxHalfOpenPerSource}`,
  );
  out.push(
    v.dropEntryScope === 'kernel'
      ? 'drop_entry drops: as the kernel, half-open entries and idle ones with 1-8 packets, established ones too (dropEntryScope kernel)'
      : 'drop_entry drops: half-open entries only, nearest their timer first (dropEntryScope halfOpen)',
  );
  out.push(`Dropped entries: ${v.droppedHalfOpen} half-open, ${v.droppedIdle} idle; secure_tcp shortened ${v.secureTcpShortened}`);
  out.push(
    `Refused new flows: ${v.refused.dropPacket} drop_packet, ${v.refused.halfOpenPerSource} half-open limit, ${v.refused.tableFull} table full, ${v.refused.fullnatPortsExhausted} full-NAT ports exhausted`,
  );
  const sp = v.synProxyCounts;
  if (sp)
    out.push(
      `SYN proxy: ${sp.cookies} cookies sent, ${sp.accepted} accepted, ${sp.badCookies} bad; ${v.synProxyPending ?? 0} waiting for their server, ${v.synProxyHeld ?? 0} packets held (${sp.held} in all, ${sp.heldRefused} refused); ${sp.serverFailures} refused by the server`,
    );
  for (const p of v.fullnatPools) out.push(`Full-NAT pool ${p.realServer}: ${p.used} of ${p.capacity} address:port pairs in use`);
  return out.join('\n') + '\n';
}
