/**
 * The configuration: one YAML file, one validator (also used for API bodies), one defaults object.
 * Unknown fields are errors; every error names the field path and the reason. Durations are
 * seconds, or strings with a unit ("900s", "15m", "2h", "1d"). uvs.example.yaml documents every
 * field.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { availableParallelism, hostname } from 'node:os';
import { parse as parseYaml } from 'yaml';
import { formatIPv6, hostPort, inAnyCidr, isCidr, maskBits, parseIPv4, parseIPv6, splitHostPort } from '../net/addr';
import { isProtocol, type Protocol } from '../net/proto';
import type { RedisSyncOptions } from '../conntrack/redis-sync';
import type { DefenseSettings } from '../conntrack/defense';
import { MH_PRIMES } from '../schedulers/mh';
import { getScheduler, schedulerNames } from '../schedulers/registry';
import { SCTP_DEFAULT_TIMEOUTS, SCTP_STATE_KEYS } from '../conntrack/sctp-state';
import { TCP_DEFAULT_TIMEOUTS, TCP_STATE_NAMES, UDP_DEFAULT_TIMEOUT } from '../conntrack/state';
import { GEN_KIND_NAMES } from '../conntrack/layout';
import { UvsError } from './errors';

export type Forwarding = 'masq' | 'fullnat' | 'tunnel';
/** PROXY protocol towards a real server (lb/proxy-protocol.ts): full-NAT TCP only. */
export type ProxyProtocol = 'v1' | 'v2';

export interface RealServerConfig {
  address: string;
  port: number;
  weight: number;
  forwarding: Forwarding;
  upperThreshold: number;
  lowerThreshold: number;
  /** Seconds over which a returning server's weight ramps up; absent = the service's slowStart. */
  slowStart?: number;
  /** PROXY protocol header in front of each connection's bytes; absent = none. */
  proxyProtocol?: ProxyProtocol;
}

/** Shared flow state: conntrack/redis-sync.ts defines the options. */
export type RedisConfig = RedisSyncOptions;

export interface HealthCheckConfig {
  /** tcp: connect; http: GET path; ping: ICMP / ICMPv6 echo (keepalived's PING_CHECK; port unused). */
  type: 'tcp' | 'http' | 'ping';
  /** Port to check; absent = the real server's port. */
  port?: number;
  path: string;
  expectStatus: number;
  /** Seconds. */
  interval: number;
  timeout: number;
  rise: number;
  fall: number;
}

export interface ServiceConfig {
  name: string;
  protocol: Protocol;
  address: string;
  port: number;
  scheduler: string;
  schedFlags: string[];
  forwarding: Forwarding;
  realServers: RealServerConfig[];
  /** Persistence timeout in seconds (ipvsadm -p), 0 = none. */
  persistence: number;
  /** Persistence netmask, dotted (ipvsadm -M). */
  netmask: string;
  /** Seconds a removed real server may drain before it is deleted with connections left; absent = gracefulTermination.maxDrainTime. */
  maxDrainTime?: number;
  /** mh lookup-table size (one of the kernel's primes); absent = 4093. */
  mhTableSize?: number;
  healthCheck?: HealthCheckConfig;
  /**
   * Seconds over which a real server that comes back (health check up, re-added, weight raised
   * from 0) ramps from weight 1 to its weight, as HAProxy's slowstart; absent or 0 = at once.
   */
  slowStart?: number;
  /** Default of its real servers' proxyProtocol (as `forwarding` is); absent = none. */
  proxyProtocol?: ProxyProtocol;
}

/** Seconds per source and kinds by name (conntrack/layout.ts GEN_KIND_NAMES); perSecond 0 = no global limit. */
export interface GeneratedLimitConfig {
  perSourceInterval: number;
  perSourceBurst: number;
  perSecond: number;
  burst: number;
  kinds: string[];
}

export interface UvsConfig {
  dataplane: {
    device: string;
    vipCidrs: string[];
    workers: number;
    tableSize: number;
    maxRealServers: number;
    maxServices: number;
    mtu: number;
    routeTable: number;
    rulePriority: number;
    batch: number;
    /** Kernel offloads on the device (virtio header, checksum + TSO: 64 KB super-packets). */
    offload: boolean;
    /** Worker I/O: io_uring (one io_uring_enter per batch), poll (poll + read + write), or auto (io_uring where the kernel allows it). */
    io: 'auto' | 'io_uring' | 'poll';
    /** Answer ICMP echo requests sent to a VIP. */
    answerPing: boolean;
    /** Persistence templates of a weight-0 server are not used (kernel sysctl, default off; kube-proxy sets it). */
    expireQuiescentTemplate: boolean;
    /** Outer source address of IPIP-tunnelled packets (an address of this node the real servers reach). */
    tunnelSource: string;
    /** The same for ip6ip6-tunnelled IPv6 services. */
    tunnelSource6: string;
    /** Full-NAT source addresses (routed to the device) and the port range allocated on them. */
    fullnat: { addresses: string[]; portMin: number; portMax: number };
    /** Limits on the packets uvs generates (docs/generated-packets.md): the kernel's icmp_ratelimit, icmp_msgs_per_sec, icmp_msgs_burst, icmp_ratemask. */
    generatedLimit: GeneratedLimitConfig;
    /** Kernel table where uvsd keeps the VIP ranges while it wants traffic (a BGP speaker announces them); 0 = none. */
    announceTable: number;
  };
  timeouts: {
    /** Seconds per TCP state name (ESTABLISHED, FIN_WAIT, …). */
    tcp: Record<string, number>;
    udp: number;
    /** Seconds per SCTP state (conntrack/sctp-state.ts SCTP_STATE_KEYS: ESTABLISHED, COOKIE_SENT, …). */
    sctp: Record<string, number>;
    /** Sweeper period, seconds. */
    sweepInterval: number;
  };
  gracefulTermination: {
    /** Seconds between drain checks (kube-proxy: 60). */
    checkInterval: number;
    /** Seconds; 0 = wait for the last connection however long (kube-proxy's behaviour). */
    maxDrainTime: number;
    /** A packet of a deleted real server's connection expires the entry and is scheduled anew (kernel sysctl, kube-proxy sets 1). */
    expireNodestConn: boolean;
  };
  /** Admin API: the root-only unix socket, and an optional TCP listener ('' = none). */
  api: { socket: string; listen: string; token?: string };
  /** Prometheus metrics; address '' = off. */
  metrics: { address: string; token?: string };
  /** /healthz and /livez; address '' = off. */
  healthz: { address: string; token?: string };
  /** Reloading: on file change (watch), every syncPeriod seconds (0 = never), at most once per minInterval seconds. */
  reload: { watch: boolean; syncPeriod: number; minInterval: number };
  /** kube-proxy's ipvs: settings that have no other home: VIP ranges whose services a file reload never removes, strictARP (no effect: a TUN device answers no ARP). */
  kubeProxy: { excludeCIDRs: string[]; strictARP: boolean } | null;
  /** Shared flow state (multi-node); null = this node works alone. */
  redis: RedisConfig | null;
  /** Overload defenses (conntrack/defense.ts, docs/defense.md): the kernel's /proc/sys/net/ipv4/vs ones. */
  defense: DefenseSettings;
  /** Where uvsd keeps what must survive a restart (the drain list); '' = nowhere. */
  stateFile: string;
  log: { level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'; pretty: boolean };
  services: ServiceConfig[];
}

export const DEFAULTS = {
  device: 'uvs0',
  tableSize: 65536, // entries; 64 B each + 12 B of chains and locks → ~5 MiB
  maxRealServers: 4096,
  maxServices: 1024,
  mtu: 1500,
  routeTable: 4711, // policy-routing table for masq replies; any unused id
  rulePriority: 4711,
  batch: 64, // packets per read; amortises poll() and the JS↔C crossing
  socket: '/run/uvs/uvsd.sock',
  stateFile: '/var/lib/uvs/state.json',
  sweepInterval: 1,
  weight: 1,
} as const;

const SCHED_FLAG_NAMES = ['flag-1', 'flag-2', 'flag-3', 'sh-fallback', 'sh-port', 'mh-fallback', 'mh-port'];

// ── small validation kit ─────────────────────────────────────────────────────────────────────
type Obj = Record<string, unknown>;

function fail(path: string, reason: string): never {
  throw new UvsError('UVS_ERR_CONFIG_INVALID', reason, path);
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function obj(v: unknown, path: string, allowed: string[]): Obj {
  if (v === undefined || v === null) return {};
  if (!isObj(v)) fail(path, 'must be a mapping');
  for (const k of Object.keys(v)) {
    if (!allowed.includes(k)) fail(path ? `${path}.${k}` : k, `unknown field (allowed: ${allowed.join(', ')})`);
  }
  return v;
}

function int(v: unknown, path: string, def: number | undefined, min: number, max: number): number {
  if (v === undefined) {
    if (def === undefined) fail(path, 'is required');
    return def;
  }
  if (typeof v !== 'number' || !Number.isInteger(v)) fail(path, `must be an integer, got ${JSON.stringify(v)}`);
  if (v < min || v > max) fail(path, `must be between ${min} and ${max}, got ${v}`);
  return v;
}

function str(v: unknown, path: string, def?: string): string {
  if (v === undefined) {
    if (def === undefined) fail(path, 'is required');
    return def;
  }
  if (typeof v !== 'string' || v.length === 0) fail(path, 'must be a non-empty string');
  return v;
}

function ioMode(v: unknown): 'auto' | 'io_uring' | 'poll' {
  if (v === undefined) return 'auto';
  if (v === 'auto' || v === 'io_uring' || v === 'poll') return v;
  fail('dataplane.io', `must be auto, io_uring or poll, got ${JSON.stringify(v)}`);
}

function bool(v: unknown, path: string, def: boolean): boolean {
  if (v === undefined) return def;
  if (typeof v !== 'boolean') fail(path, 'must be true or false');
  return v;
}

const UNIT: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };

/**
 * The longest connection or persistence timeout, in seconds: 2147483 (24.85 days). The connection
 * table keeps times as signed 32-bit milliseconds compared by wrapping difference
 * (conntrack/layout.ts E_EXPIRES), so a longer timeout would read as already past and its
 * entries would be removed at the next sweep. It is also the kernel's own bound on a HZ=1000
 * kernel: ip_vs_set_timeout (net/netfilter/ipvs/ip_vs_ctl.c) refuses a tcp, tcpfin or udp
 * timeout above INT_MAX / HZ seconds with EINVAL. ipvsadm lets `-p` go up to 31 days
 * (MAX_TIMEOUT, 2678400 s) and the kernel stores it in jiffies; uvs refuses persistence above
 * this bound instead (docs/control-plane.md).
 */
export const MAX_TIMEOUT = Math.floor(0x7fffffff / 1000);

/** A connection or persistence timeout: a duration of at most MAX_TIMEOUT seconds. */
function timeout(v: unknown, path: string, def: number): number {
  return duration(v, path, def, MAX_TIMEOUT, " (24.8 days: the kernel's INT_MAX / HZ at HZ=1000; entry times are 32-bit milliseconds)");
}

/** Seconds from a number or a string with a unit. */
export function duration(v: unknown, path: string, def: number, max = 2678400, why = ''): number {
  if (v === undefined) return def;
  let secs: number;
  if (typeof v === 'number') secs = v;
  else if (typeof v === 'string') {
    const t = v.trim();
    const plain = /^(\d+(?:\.\d+)?)$/.exec(t);
    if (plain) secs = Number(plain[1]);
    else {
      // One or more number+unit parts, as Go's time.Duration prints them ("1m30s", "15m0s").
      const parts = [...t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
      if (parts.length === 0 || parts.map((x) => x[0]).join('') !== t) fail(path, `must be a duration like 900, "900s", "15m", "1m30s" or "2h", got ${JSON.stringify(v)}`);
      secs = parts.reduce((a, x) => a + Number(x[1]) * UNIT[x[2]!]!, 0);
    }
  } else fail(path, 'must be a duration (seconds, or a string with a unit)');
  if (!(secs >= 0) || secs > max) fail(path, `must be between 0 and ${max} seconds${why}, got ${JSON.stringify(v)}`);
  return secs;
}

function ipv4(v: unknown, path: string): string {
  const s = str(v, path);
  if (parseIPv4(s) === null) fail(path, `must be an IPv4 address, got ${JSON.stringify(s)}`);
  return s;
}

function ipv6(v: unknown, path: string): string {
  const s = str(v, path);
  const w = parseIPv6(s);
  if (w === null) fail(path, `must be an IPv6 address, got ${JSON.stringify(s)}`);
  return formatIPv6(w); // one spelling per address (RFC 5952), so keys and listings agree
}

/** An address of either family; IPv6 in its RFC 5952 form. */
function ipAddr(v: unknown, path: string): string {
  const s = str(v, path);
  if (parseIPv4(s) !== null) return s;
  if (parseIPv6(s) !== null) return ipv6(s, path);
  fail(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(s)}`);
}

function forwarding(v: unknown, path: string, def: Forwarding): Forwarding {
  if (v === undefined) return def;
  if (v === 'masq' || v === 'fullnat' || v === 'tunnel') return v;
  if (v === 'route' || v === 'droute' || v === 'direct') {
    throw new UvsError(
      'UVS_ERR_CONFIG_UNSUPPORTED',
      'direct routing needs layer-2 frames, which a TUN device does not carry; use "masq"',
      path,
    );
  }
  fail(path, `must be "masq", "fullnat" or "tunnel", got ${JSON.stringify(v)}`);
}

function fullnatPool(v: unknown): { addresses: string[]; portMin: number; portMax: number } {
  const f = obj(v, 'dataplane.fullnat', ['addresses', 'portMin', 'portMax']);
  if (f.addresses !== undefined && !Array.isArray(f.addresses)) fail('dataplane.fullnat.addresses', 'must be a list of IPv4 and/or IPv6 addresses');
  const addresses = ((f.addresses as unknown[] | undefined) ?? []).map((a, i) => ipAddr(a, `dataplane.fullnat.addresses[${i}]`));
  const portMin = int(f.portMin, 'dataplane.fullnat.portMin', 1024, 1, 65535);
  const portMax = int(f.portMax, 'dataplane.fullnat.portMax', 65535, 1, 65535);
  if (portMax < portMin) fail('dataplane.fullnat.portMax', `must not be below portMin (${portMin})`);
  return { addresses, portMin, portMax };
}

/**
 * dataplane.generatedLimit, with the kernel's defaults: one answer per source per
 * icmp_ratelimit (1000 ms) with a burst of XRLIM_BURST_FACTOR (6), icmp_msgs_per_sec 1000 and
 * icmp_msgs_burst 50 for the node; limited kinds as icmp_ratemask 0x1818 limits destination
 * unreachable but not echo replies or fragmentation needed (PMTU discovery is never limited) —
 * plus RSTs, which the kernel does not limit but uvs sends to whatever source a packet names.
 */
function generatedLimit(v: unknown): GeneratedLimitConfig {
  const p = 'dataplane.generatedLimit';
  const g = obj(v, p, ['perSourceInterval', 'perSourceBurst', 'perSecond', 'burst', 'kinds']);
  if (g.kinds !== undefined && !Array.isArray(g.kinds)) fail(`${p}.kinds`, `must be a list of ${GEN_KIND_NAMES.join(', ')}`);
  const kinds = ((g.kinds as unknown[] | undefined) ?? ['reset', 'unreachable']).map((k, i) => {
    if (typeof k !== 'string' || !(GEN_KIND_NAMES as readonly string[]).includes(k)) fail(`${p}.kinds[${i}]`, `must be one of ${GEN_KIND_NAMES.join(', ')}, got ${JSON.stringify(k)}`);
    return k;
  });
  return {
    perSourceInterval: duration(g.perSourceInterval, `${p}.perSourceInterval`, 1, 60),
    perSourceBurst: int(g.perSourceBurst, `${p}.perSourceBurst`, 6, 1, 1000),
    perSecond: int(g.perSecond, `${p}.perSecond`, 1000, 0, 10_000_000),
    burst: int(g.burst, `${p}.burst`, 50, 1, 10_000_000),
    kinds: [...new Set(kinds)],
  };
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|::1)$/;

/**
 * An HTTP listener: "host:port" ('' = off); beyond loopback only with a token (≥ 16 characters),
 * and with `alwaysToken` (the admin API, which can change everything) on loopback too.
 */
function listener(v: unknown, path: string, defAddress: string, alwaysToken = false): { address: string; token?: string } {
  const o = obj(v, path, ['address', 'token']);
  const address = o.address === '' ? '' : str(o.address, `${path}.address`, defAddress);
  if (address) {
    const hp = splitHostPort(address);
    if (!hp || (hp.bracketed && !/^[0-9a-fA-F:]+$/.test(hp.host))) fail(`${path}.address`, `must be host:port (IPv6 as [addr]:port), got ${JSON.stringify(address)}`);
    if (alwaysToken && o.token === undefined) {
      fail(`${path}.token`, `is required with a TCP listener (${address}): any local user or browser page reaches a loopback port; the root-only unix socket needs none`);
    }
    if (!LOOPBACK.test(hp.host) && o.token === undefined) {
      fail(`${path}.token`, `is required when listening beyond loopback (${address}): anything reachable from the network needs a bearer token`);
    }
  }
  if (o.token !== undefined && (typeof o.token !== 'string' || o.token.length < 16)) fail(`${path}.token`, 'must be a string of at least 16 characters');
  return o.token === undefined ? { address } : { address, token: o.token as string };
}

// ── the validator ────────────────────────────────────────────────────────────────────────────
/** Validates a parsed YAML document and fills defaults. Throws UvsError naming the field. */
export function validateConfig(doc: unknown): UvsConfig {
  const root = obj(doc, '', ['dataplane', 'timeouts', 'gracefulTermination', 'defense', 'api', 'metrics', 'healthz', 'reload', 'ipvs', 'redis', 'stateFile', 'log', 'services']);
  // kube-proxy's KubeProxyIPVSConfiguration (the `ipvs:` section of a KubeProxyConfiguration).
  const kp = root.ipvs === undefined ? null : obj(root.ipvs, 'ipvs', ['scheduler', 'syncPeriod', 'minSyncPeriod', 'excludeCIDRs', 'strictARP', 'tcpTimeout', 'tcpFinTimeout', 'udpTimeout']);
  const dp = obj(root.dataplane, 'dataplane', [
    'device',
    'vipCidrs',
    'workers',
    'tableSize',
    'maxRealServers',
    'maxServices',
    'mtu',
    'routeTable',
    'rulePriority',
    'batch',
    'offload',
    'io',
    'answerPing',
    'expireQuiescentTemplate',
    'fullnat',
    'tunnelSource',
    'tunnelSource6',
    'generatedLimit',
    'announceTable',
  ]);
  const device = str(dp.device, 'dataplane.device', DEFAULTS.device);
  if (!/^[a-zA-Z0-9_.-]{1,15}$/.test(device)) fail('dataplane.device', 'must be 1–15 characters of letters, digits, _ . -');
  if (!Array.isArray(dp.vipCidrs) || dp.vipCidrs.length === 0) fail('dataplane.vipCidrs', 'must be a non-empty list of IPv4 or IPv6 CIDRs');
  const vipCidrs = dp.vipCidrs.map((c, i) => {
    const p = `dataplane.vipCidrs[${i}]`;
    if (typeof c !== 'string' || !isCidr(c)) fail(p, `must be an IPv4 or IPv6 CIDR like 10.0.0.0/24 or fd00:10::/64, got ${JSON.stringify(c)}`);
    return c;
  });
  const tableSize = int(dp.tableSize, 'dataplane.tableSize', DEFAULTS.tableSize, 16, 1 << 26);
  if ((tableSize & (tableSize - 1)) !== 0) fail('dataplane.tableSize', `must be a power of two, got ${tableSize}`);
  if ([253, 254, 255].includes(dp.routeTable as number)) fail('dataplane.routeTable', 'must not be 253–255 (the default, main and local tables)');
  const dataplane = {
    device,
    vipCidrs,
    workers: int(dp.workers, 'dataplane.workers', availableParallelism(), 1, 64),
    tableSize,
    maxRealServers: int(dp.maxRealServers, 'dataplane.maxRealServers', DEFAULTS.maxRealServers, 1, 1 << 20),
    maxServices: int(dp.maxServices, 'dataplane.maxServices', DEFAULTS.maxServices, 1, 1 << 16),
    mtu: int(dp.mtu, 'dataplane.mtu', DEFAULTS.mtu, 576, 9000),
    routeTable: int(dp.routeTable, 'dataplane.routeTable', DEFAULTS.routeTable, 1, 0x7fffffff),
    rulePriority: int(dp.rulePriority, 'dataplane.rulePriority', DEFAULTS.rulePriority, 2, 32765),
    batch: int(dp.batch, 'dataplane.batch', DEFAULTS.batch, 1, 1024),
    offload: bool(dp.offload, 'dataplane.offload', true),
    io: ioMode(dp.io),
    answerPing: bool(dp.answerPing, 'dataplane.answerPing', true),
    expireQuiescentTemplate: bool(dp.expireQuiescentTemplate, 'dataplane.expireQuiescentTemplate', false),
    fullnat: fullnatPool(dp.fullnat),
    tunnelSource: dp.tunnelSource === undefined ? '' : ipv4(dp.tunnelSource, 'dataplane.tunnelSource'),
    tunnelSource6: dp.tunnelSource6 === undefined ? '' : ipv6(dp.tunnelSource6, 'dataplane.tunnelSource6'),
    generatedLimit: generatedLimit(dp.generatedLimit),
    announceTable: int(dp.announceTable, 'dataplane.announceTable', 0, 0, 0x7fffffff),
  };
  if ([253, 254, 255].includes(dataplane.announceTable)) fail('dataplane.announceTable', 'must not be 253–255 (the default, main and local tables)');
  if (dataplane.announceTable !== 0 && dataplane.announceTable === dataplane.routeTable) fail('dataplane.announceTable', `must differ from dataplane.routeTable (${dataplane.routeTable}), which holds the masq reply routes`);

  const to = { ...obj(root.timeouts, 'timeouts', ['tcp', 'tcpFin', 'udp', 'tcpStates', 'sctp', 'sweepInterval']) }; // a copy: validation never changes the document
  if (kp) {
    // kube-proxy: a timeout of 0 keeps the current value; a non-zero one is `ipvsadm --set`.
    const pairs = [['tcpTimeout', 'tcp'], ['tcpFinTimeout', 'tcpFin'], ['udpTimeout', 'udp']] as const;
    for (const [k, u] of pairs) {
      const secs = timeout(kp[k], `ipvs.${k}`, 0);
      if (secs > 0 && to[u] !== undefined) fail(`ipvs.${k}`, `conflicts with timeouts.${u}: set one of them`);
      if (secs > 0) to[u] = secs;
    }
  }
  const tcp: Record<string, number> = {};
  TCP_STATE_NAMES.forEach((n, i) => (tcp[n] = TCP_DEFAULT_TIMEOUTS[i]!));
  tcp.ESTABLISHED = timeout(to.tcp, 'timeouts.tcp', tcp.ESTABLISHED!);
  tcp.FIN_WAIT = timeout(to.tcpFin, 'timeouts.tcpFin', tcp.FIN_WAIT!);
  const states = obj(to.tcpStates, 'timeouts.tcpStates', [...TCP_STATE_NAMES]);
  for (const [k, v] of Object.entries(states)) tcp[k] = timeout(v, `timeouts.tcpStates.${k}`, tcp[k]!);
  // SCTP: the kernel's per-state timeouts (its ipvsadm --set has no SCTP field); any may be changed.
  const sctp: Record<string, number> = {};
  SCTP_STATE_KEYS.forEach((n, i) => (sctp[n] = SCTP_DEFAULT_TIMEOUTS[i]!));
  for (const [k, v] of Object.entries(obj(to.sctp, 'timeouts.sctp', [...SCTP_STATE_KEYS]))) sctp[k] = timeout(v, `timeouts.sctp.${k}`, sctp[k]!);
  const timeouts = {
    tcp,
    udp: timeout(to.udp, 'timeouts.udp', UDP_DEFAULT_TIMEOUT),
    sctp,
    sweepInterval: duration(to.sweepInterval, 'timeouts.sweepInterval', DEFAULTS.sweepInterval, 60),
  };
  if (timeouts.sweepInterval < 0.05) fail('timeouts.sweepInterval', 'must be at least 0.05 s');

  const gt = obj(root.gracefulTermination, 'gracefulTermination', ['checkInterval', 'maxDrainTime', 'expireNodestConn']);
  const gracefulTermination = {
    checkInterval: duration(gt.checkInterval, 'gracefulTermination.checkInterval', 60, 86400),
    maxDrainTime: duration(gt.maxDrainTime, 'gracefulTermination.maxDrainTime', 0),
    expireNodestConn: bool(gt.expireNodestConn, 'gracefulTermination.expireNodestConn', true),
  };
  if (gracefulTermination.checkInterval < 0.1) fail('gracefulTermination.checkInterval', 'must be at least 0.1 s');
  const api = obj(root.api, 'api', ['socket', 'listen', 'token']);
  const apiTcp = listener({ address: api.listen ?? '', ...(api.token !== undefined ? { token: api.token } : {}) }, 'api', '', true);
  const metrics = listener(root.metrics, 'metrics', '127.0.0.1:10249');
  const healthz = listener(root.healthz, 'healthz', '127.0.0.1:10256');
  const log = obj(root.log, 'log', ['level', 'pretty']);
  const level = str(log.level, 'log.level', 'info');
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
  if (!(levels as readonly string[]).includes(level)) fail('log.level', `must be one of ${levels.join(', ')}`);

  const rl = obj(root.reload, 'reload', ['watch', 'syncPeriod', 'minInterval']);
  const reload = {
    watch: bool(rl.watch, 'reload.watch', true),
    syncPeriod: duration(rl.syncPeriod, 'reload.syncPeriod', kp ? duration(kp.syncPeriod, 'ipvs.syncPeriod', 30) : 0),
    minInterval: duration(rl.minInterval, 'reload.minInterval', kp ? duration(kp.minSyncPeriod, 'ipvs.minSyncPeriod', 0) : 0),
  };
  let kubeProxy: UvsConfig['kubeProxy'] = null;
  let defaultScheduler = 'wlc'; // ipvsadm's default
  if (kp) {
    defaultScheduler = kp.scheduler === undefined || kp.scheduler === '' ? 'rr' : str(kp.scheduler, 'ipvs.scheduler'); // kube-proxy's default
    if (!getScheduler(defaultScheduler)) fail('ipvs.scheduler', `unknown scheduler ${JSON.stringify(defaultScheduler)} (available: ${schedulerNames().join(', ')})`);
    if (kp.excludeCIDRs !== undefined && !Array.isArray(kp.excludeCIDRs)) fail('ipvs.excludeCIDRs', 'must be a list of CIDRs');
    const excludeCIDRs = ((kp.excludeCIDRs as unknown[] | undefined) ?? []).map((c, i) => {
      if (typeof c !== 'string' || !isCidr(c)) fail(`ipvs.excludeCIDRs[${i}]`, `must be an IPv4 or IPv6 CIDR, got ${JSON.stringify(c)}`);
      return c;
    });
    kubeProxy = { excludeCIDRs, strictARP: bool(kp.strictARP, 'ipvs.strictARP', false) };
  }

  if (root.services !== undefined && !Array.isArray(root.services)) fail('services', 'must be a list');
  const services = ((root.services as unknown[] | undefined) ?? []).map((s, i) => validateService(s, `services[${i}]`, defaultScheduler));
  const seen = new Map<string, string>();
  services.forEach((s, i) => {
    const key = `${s.protocol} ${s.address}:${s.port}`;
    if (seen.has(key)) fail(`services[${i}]`, `duplicates ${seen.get(key)} (${key})`);
    seen.set(key, `services[${i}]`);
    const v6 = s.address.includes(':');
    if ((s.forwarding === 'tunnel' || s.realServers.some((r) => r.forwarding === 'tunnel')) && !(v6 ? dataplane.tunnelSource6 : dataplane.tunnelSource)) {
      fail(`services[${i}].forwarding`, `tunnel needs dataplane.${v6 ? 'tunnelSource6' : 'tunnelSource'} (the outer source address the real servers see)`);
    }
    if ((s.forwarding === 'fullnat' || s.realServers.some((r) => r.forwarding === 'fullnat')) && !dataplane.fullnat.addresses.some((a) => a.includes(':') === v6)) {
      fail(`services[${i}].forwarding`, `fullnat needs ${v6 ? 'an IPv6' : 'an IPv4'} address in dataplane.fullnat.addresses (the source addresses real servers answer to)`);
    }
    if (!inAnyCidr(s.address, vipCidrs)) fail(`services[${i}].address`, `${s.address} is not inside dataplane.vipCidrs (${vipCidrs.join(', ')})`);
  });
  if (services.length > dataplane.maxServices) fail('services', `more than dataplane.maxServices (${dataplane.maxServices})`);

  return {
    dataplane,
    timeouts,
    gracefulTermination,
    api: { socket: str(api.socket, 'api.socket', DEFAULTS.socket), listen: apiTcp.address, ...(apiTcp.token !== undefined ? { token: apiTcp.token } : {}) },
    metrics,
    healthz,
    reload,
    kubeProxy,
    defense: defenseConfig(root.defense, tableSize),
    redis: root.redis === undefined || root.redis === null ? null : redisConfig(root.redis),
    stateFile: root.stateFile === '' ? '' : str(root.stateFile, 'stateFile', DEFAULTS.stateFile),
    log: { level: level as UvsConfig['log']['level'], pretty: bool(log.pretty, 'log.pretty', false) },
    services,
  };
}

export function validateService(v: unknown, path: string, defaultScheduler = 'wlc'): ServiceConfig {
  const s = obj(v, path, [
    'name',
    'protocol',
    'address',
    'port',
    'scheduler',
    'schedFlags',
    'persistence',
    'netmask',
    'forwarding',
    'realServers',
    'maxDrainTime',
    'mhTableSize',
    'healthCheck',
    'slowStart',
    'proxyProtocol',
  ]);
  if (!isObj(v)) fail(path, 'must be a mapping');
  const protocol = str(s.protocol, `${path}.protocol`, 'tcp');
  if (!isProtocol(protocol)) fail(`${path}.protocol`, `must be tcp, udp or sctp, got ${JSON.stringify(protocol)}`);
  const address = ipAddr(s.address, `${path}.address`);
  const v6 = address.includes(':');
  const port = int(s.port, `${path}.port`, undefined, 1, 65535);
  const scheduler = str(s.scheduler, `${path}.scheduler`, defaultScheduler);
  if (!getScheduler(scheduler)) fail(`${path}.scheduler`, `unknown scheduler ${JSON.stringify(scheduler)} (available: ${schedulerNames().join(', ')})`);
  const flags = s.schedFlags === undefined ? [] : s.schedFlags;
  if (!Array.isArray(flags)) fail(`${path}.schedFlags`, 'must be a list');
  const schedFlags = flags.map((f, i) => {
    if (typeof f !== 'string' || !SCHED_FLAG_NAMES.includes(f)) fail(`${path}.schedFlags[${i}]`, `must be one of ${SCHED_FLAG_NAMES.join(', ')}`);
    if (f.startsWith('sh-') && scheduler !== 'sh') fail(`${path}.schedFlags[${i}]`, `${f} needs scheduler sh`);
    if (f.startsWith('mh-') && scheduler !== 'mh') fail(`${path}.schedFlags[${i}]`, `${f} needs scheduler mh`);
    return f;
  });
  // ipvsadm -p [timeout]: a bare flag (true) means 360 s (IPVS_SVC_PERSISTENT_TIMEOUT); ipvsadm takes
  // 1..2678400, uvs 1..MAX_TIMEOUT (templates live in the same 32-bit millisecond table).
  let persistence = 0;
  if (s.persistence === true) persistence = 360;
  else if (s.persistence !== undefined && s.persistence !== false && s.persistence !== 0) {
    persistence = timeout(s.persistence, `${path}.persistence`, 0);
    if (persistence < 1) fail(`${path}.persistence`, 'must be at least 1 second (or false/0 for none)');
  }
  let netmask: string;
  if (v6) {
    // ipvsadm -M for an IPv6 service is a prefix length.
    netmask = s.netmask === undefined ? '128' : String(s.netmask);
    if (!/^\d{1,3}$/.test(netmask) || Number(netmask) < 1 || Number(netmask) > 128) fail(`${path}.netmask`, `must be a prefix length from 1 to 128 for an IPv6 service, got ${JSON.stringify(s.netmask)}`);
  } else {
    netmask = s.netmask === undefined ? '255.255.255.255' : str(s.netmask, `${path}.netmask`);
    const nm = parseIPv4(netmask);
    if (nm === null || maskBits(nm) === null) fail(`${path}.netmask`, `must be a contiguous IPv4 netmask like 255.255.255.0, got ${JSON.stringify(netmask)}`);
  }
  const fwd = forwarding(s.forwarding, `${path}.forwarding`, 'masq');
  const pp = proxyProtocol(s.proxyProtocol, `${path}.proxyProtocol`, undefined);
  if (s.realServers !== undefined && !Array.isArray(s.realServers)) fail(`${path}.realServers`, 'must be a list');
  const realServers = ((s.realServers as unknown[] | undefined) ?? []).map((r, j) => validateRealServer(r, `${path}.realServers[${j}]`, port, fwd, pp));
  realServers.forEach((r, j) => {
    if (r.proxyProtocol === undefined) return;
    // The header goes into the TCP stream with every sequence number behind it shifted, which
    // needs both directions through uvs and a server that does not see the client (full-NAT).
    // masq: the server already sees the client's own address; tunnel: its replies bypass uvs.
    const own = isObj((s.realServers as unknown[])[j]) && ((s.realServers as Record<string, unknown>[])[j]!.proxyProtocol !== undefined);
    const where = own ? `${path}.realServers[${j}].proxyProtocol` : `${path}.proxyProtocol`;
    if (protocol !== 'tcp') fail(where, `PROXY protocol is for TCP services (this one is ${protocol})`);
    if (r.forwarding !== 'fullnat') {
      fail(where, `needs forwarding fullnat, real server ${hostPort(r.address, r.port)} uses ${r.forwarding}: ${r.forwarding === 'masq' ? 'it already sees the client\'s address' : 'its replies do not pass uvs, so their acknowledgements cannot be shifted'}${own ? '' : ' (give it proxyProtocol: none)'}`);
    }
  });
  realServers.forEach((r, j) => {
    // IPVS allows another family only for tunnelled servers; uvs tunnels within one family.
    if (r.address.includes(':') !== v6) fail(`${path}.realServers[${j}].address`, `${r.address} is not of the service's address family (${v6 ? 'IPv6' : 'IPv4'})`);
  });
  const seen = new Set<string>();
  realServers.forEach((r, j) => {
    const k = `${r.address}:${r.port}`;
    if (seen.has(k)) fail(`${path}.realServers[${j}]`, `${k} is listed twice`);
    seen.add(k);
  });
  const name = s.name === undefined ? `${protocol}/${hostPort(address, port)}` : str(s.name, `${path}.name`);
  const out: ServiceConfig = { name, protocol, address, port, scheduler, schedFlags, forwarding: fwd, realServers, persistence, netmask };
  if (pp !== undefined) out.proxyProtocol = pp;
  if (s.healthCheck !== undefined) out.healthCheck = healthCheck(s.healthCheck, `${path}.healthCheck`);
  if (s.maxDrainTime !== undefined) out.maxDrainTime = duration(s.maxDrainTime, `${path}.maxDrainTime`, 0);
  if (s.slowStart !== undefined) out.slowStart = duration(s.slowStart, `${path}.slowStart`, 0, 3600);
  if (s.mhTableSize !== undefined) {
    const primes = MH_PRIMES;
    if (scheduler !== 'mh') fail(`${path}.mhTableSize`, 'applies only to scheduler mh');
    out.mhTableSize = int(s.mhTableSize, `${path}.mhTableSize`, undefined, 1, 131071);
    if (!primes.includes(out.mhTableSize)) fail(`${path}.mhTableSize`, `must be one of the kernel's sizes ${primes.join(', ')}`);
  }
  return out;
}

/**
 * `defense:` — the kernel's sysctls (modes 0 off, 1–2 automatic, 3 always) with the trigger in
 * free table entries. uvs turns drop_entry, secure_tcp and the per-source limit on (1) by default,
 * where the kernel ships them off: a fixed-size table fills under a SYN flood long before a node
 * runs out of memory, and the automatic modes act only then.
 */
function defenseConfig(v: unknown, tableSize: number): DefenseSettings {
  const p = 'defense';
  const d = obj(v, p, ['amemthresh', 'amDroprate', 'dropEntry', 'dropPacket', 'secureTcp', 'secureTcpTimeout', 'halfOpenPerSource', 'maxHalfOpenPerSource', 'holdTime']);
  const mode = (k: string, def: number) => int(d[k], `${p}.${k}`, def, 0, 3);
  const out: DefenseSettings = {
    amemthresh: int(d.amemthresh, `${p}.amemthresh`, tableSize >>> 4, 0, tableSize),
    amDroprate: int(d.amDroprate, `${p}.amDroprate`, 10, 1, 1_000_000),
    dropEntry: mode('dropEntry', 1),
    dropPacket: mode('dropPacket', 0),
    secureTcp: mode('secureTcp', 1),
    secureTcpTimeout: duration(d.secureTcpTimeout, `${p}.secureTcpTimeout`, 10, 3600),
    halfOpenPerSource: mode('halfOpenPerSource', 1),
    maxHalfOpenPerSource: int(d.maxHalfOpenPerSource, `${p}.maxHalfOpenPerSource`, Math.min(256, tableSize), 1, tableSize),
    holdTime: duration(d.holdTime, `${p}.holdTime`, 60, 3600),
  };
  if (out.secureTcpTimeout < 1) fail(`${p}.secureTcpTimeout`, 'must be at least 1 s (a handshake needs a round trip and a retransmitted SYN)');
  return out;
}

function hostPorts(v: unknown, path: string): { host: string; port: number }[] {
  if (!Array.isArray(v) || v.length === 0) fail(path, 'must be a non-empty list of {host, port}');
  return v.map((x, i) => {
    const o = obj(x, `${path}[${i}]`, ['host', 'port']);
    return { host: str(o.host, `${path}[${i}].host`), port: int(o.port, `${path}[${i}].port`, 6379, 1, 65535) };
  });
}

/** What a node believes of Redis and how much of it (conntrack/redis-record.ts, redis-sync.ts). */
const REDIS_LIMITS = ['recordKey', 'maxShadowShare', 'maxNodes', 'maxLookups', 'commandTimeout'];
function redisLimits(r: Obj): Pick<RedisConfig, 'recordKey' | 'maxShadowShare' | 'maxNodes' | 'maxLookups' | 'commandTimeout'> {
  const share = r.maxShadowShare ?? 0.5;
  if (typeof share !== 'number' || !(share > 0 && share <= 1)) fail('redis.maxShadowShare', `must be a number above 0 and at most 1, got ${JSON.stringify(share)}`);
  const commandTimeout = duration(r.commandTimeout, 'redis.commandTimeout', 1, 60);
  if (commandTimeout < 0.01) fail('redis.commandTimeout', 'must be at least 0.01 s');
  const out = {
    maxShadowShare: share,
    maxNodes: int(r.maxNodes, 'redis.maxNodes', 64, 1, 10_000),
    maxLookups: int(r.maxLookups, 'redis.maxLookups', 1024, 1, 1_000_000),
    commandTimeout,
  };
  if (r.recordKey === undefined) return out;
  // 16 characters: 128 bits if random hex or base64 is used, the MAC's own strength.
  const recordKey = str(r.recordKey, 'redis.recordKey');
  if (recordKey.length < 16) fail('redis.recordKey', `must be at least 16 characters, got ${recordKey.length}`);
  return { ...out, recordKey };
}

function redisConfig(v: unknown): RedisConfig {
  const r = obj(v, 'redis', ['url', 'sentinels', 'name', 'cluster', 'password', 'keyPrefix', 'nodeId', 'parkTimeout', 'countsInterval', 'maxQueue', ...REDIS_LIMITS]);
  const modes = ['url', 'sentinels', 'cluster'].filter((k) => r[k] !== undefined);
  if (modes.length !== 1) fail('redis', `needs exactly one of url, sentinels (with name) or cluster; got ${modes.length ? modes.join(', ') : 'none'}`);
  const out: RedisConfig = {
    keyPrefix: str(r.keyPrefix, 'redis.keyPrefix', 'uvs:'),
    nodeId: str(r.nodeId, 'redis.nodeId', hostname()),
    parkTimeout: duration(r.parkTimeout, 'redis.parkTimeout', 1, 60),
    countsInterval: duration(r.countsInterval, 'redis.countsInterval', 2, 3600),
    maxQueue: int(r.maxQueue, 'redis.maxQueue', 100000, 100, 10_000_000),
    ...redisLimits(r),
  };
  if (r.url !== undefined) {
    const url = str(r.url, 'redis.url');
    if (!/^rediss?:\/\//.test(url)) fail('redis.url', `must be redis://host:port[/db] or rediss://…, got ${JSON.stringify(url)}`);
    out.url = url;
  }
  if (r.sentinels !== undefined) {
    out.sentinels = hostPorts(r.sentinels, 'redis.sentinels');
    out.name = str(r.name, 'redis.name');
  }
  if (r.cluster !== undefined) out.cluster = hostPorts(r.cluster, 'redis.cluster');
  if (r.password !== undefined) out.password = str(r.password, 'redis.password');
  if (out.countsInterval < 0.1) fail('redis.countsInterval', 'must be at least 0.1 s');
  return out;
}

/**
 * A health-check path as it can go on an HTTP request line: a space or a character beyond ASCII
 * is percent-encoded as UTF-8 (what a browser sends; node's http.request throws on them), `%XX`
 * already there is kept; control characters are refused (they could split the request).
 */
function requestPath(p: string, path: string): string {
  if (/[\x00-\x1f\x7f]/.test(p)) fail(path, `must not contain control characters, got ${JSON.stringify(p)}`);
  try {
    return p.replace(/[^\x21-\x7e]/gu, (c) => encodeURIComponent(c));
  } catch {
    fail(path, `is not valid Unicode text, got ${JSON.stringify(p)}`); // a lone surrogate
  }
}

function healthCheck(v: unknown, path: string): HealthCheckConfig {
  const h = obj(v, path, ['type', 'port', 'path', 'expectStatus', 'interval', 'timeout', 'rise', 'fall']);
  const type = str(h.type, `${path}.type`, 'tcp');
  if (type !== 'tcp' && type !== 'http' && type !== 'ping') fail(`${path}.type`, `must be tcp, http or ping, got ${JSON.stringify(type)}`);
  const out: HealthCheckConfig = {
    type,
    path: str(h.path, `${path}.path`, '/'),
    expectStatus: int(h.expectStatus, `${path}.expectStatus`, 200, 100, 599),
    interval: duration(h.interval, `${path}.interval`, 2, 3600),
    timeout: duration(h.timeout, `${path}.timeout`, 1, 3600),
    rise: int(h.rise, `${path}.rise`, 2, 1, 100),
    fall: int(h.fall, `${path}.fall`, 3, 1, 100),
  };
  if (!out.path.startsWith('/')) fail(`${path}.path`, 'must start with /');
  out.path = requestPath(out.path, `${path}.path`);
  if (out.interval < 0.1) fail(`${path}.interval`, 'must be at least 0.1 s');
  if (out.timeout <= 0 || out.timeout > out.interval) fail(`${path}.timeout`, `must be more than 0 and at most the interval (${out.interval} s)`);
  if (h.port !== undefined) out.port = int(h.port, `${path}.port`, undefined, 1, 65535);
  return out;
}

/** 'v1' | 'v2', 'none' (→ undefined), absent → def. */
function proxyProtocol(v: unknown, path: string, def: ProxyProtocol | undefined): ProxyProtocol | undefined {
  if (v === undefined) return def;
  if (v === 'v1' || v === 'v2') return v;
  if (v === 'none') return undefined;
  fail(path, `must be "v1", "v2" or "none", got ${JSON.stringify(v)}`);
}

export function validateRealServer(v: unknown, path: string, servicePort: number, fwd: Forwarding, servicePp?: ProxyProtocol): RealServerConfig {
  const r = obj(v, path, ['address', 'port', 'weight', 'forwarding', 'upperThreshold', 'lowerThreshold', 'slowStart', 'proxyProtocol']);
  if (!isObj(v)) fail(path, 'must be a mapping');
  const upperThreshold = int(r.upperThreshold, `${path}.upperThreshold`, 0, 0, 0x7fffffff);
  const lowerThreshold = int(r.lowerThreshold, `${path}.lowerThreshold`, 0, 0, 0x7fffffff);
  if (lowerThreshold > upperThreshold) fail(`${path}.lowerThreshold`, `must not exceed upperThreshold (${upperThreshold}), as in the kernel`);
  const rsFwd = forwarding(r.forwarding, `${path}.forwarding`, fwd);
  const port = int(r.port, `${path}.port`, servicePort, 1, 65535);
  if (rsFwd === 'tunnel' && port !== servicePort) fail(`${path}.port`, `tunnel forwarding cannot map ports (the inner packet is not rewritten): must be the service port ${servicePort}`);
  const pp = proxyProtocol(r.proxyProtocol, `${path}.proxyProtocol`, servicePp);
  const out: RealServerConfig = {
    address: ipAddr(r.address, `${path}.address`),
    port,
    weight: int(r.weight, `${path}.weight`, DEFAULTS.weight, 0, 65535),
    forwarding: rsFwd,
    upperThreshold,
    lowerThreshold,
    ...(pp !== undefined ? { proxyProtocol: pp } : {}),
  };
  if (r.slowStart !== undefined) out.slowStart = duration(r.slowStart, `${path}.slowStart`, 0, 3600);
  return out;
}

/** Reads and validates a YAML file. */
export function loadConfigFile(file: string): UvsConfig {
  return validateConfig(readConfigDoc(file));
}

/** Reads a YAML file into its raw document (not validated). */
export function readConfigDoc(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new UvsError('UVS_ERR_CONFIG_READ', `${file}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new UvsError('UVS_ERR_CONFIG_READ', `${file}: not valid YAML: ${(e as Error).message}`);
  }
  return withKubeProxyFile(doc, file);
}

/**
 * `kubeProxyConfigFile: PATH` names a kube-proxy KubeProxyConfiguration file; its `ipvs:` section is
 * taken as if written inline (an inline `ipvs:` and the reference together are an error).
 */
function withKubeProxyFile(doc: unknown, file: string): unknown {
  if (!isObj(doc) || doc.kubeProxyConfigFile === undefined) return doc;
  const ref = doc.kubeProxyConfigFile;
  if (typeof ref !== 'string' || ref === '') fail('kubeProxyConfigFile', 'must be a file path');
  if (doc.ipvs !== undefined) fail('kubeProxyConfigFile', 'conflicts with the inline ipvs: section: use one of them');
  const path = ref.startsWith('/') ? ref : join(dirname(file), ref);
  let kp: unknown;
  try {
    kp = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new UvsError('UVS_ERR_CONFIG_READ', `${path}: ${(e as Error).message}`, 'kubeProxyConfigFile');
  }
  if (!isObj(kp) || kp.kind !== 'KubeProxyConfiguration') fail('kubeProxyConfigFile', `${path} is not a KubeProxyConfiguration (kind: ${isObj(kp) ? JSON.stringify(kp.kind) : 'none'})`);
  const { kubeProxyConfigFile: _ref, ...rest } = doc;
  return kp.ipvs === undefined ? rest : { ...rest, ipvs: kp.ipvs };
}
