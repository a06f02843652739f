/**
 * The configuration: one YAML file, one schema. The schema below is the only place a field is
 * written: its type (the TypeScript types are `Out<>` of it), its bounds, its default, the rules
 * it obeys and its JSON Schema (control/schema.ts says how). It validates the file and the API's
 * service and real-server bodies alike (control/api-bodies.ts), refuses unknown fields, and every
 * error names the field path and the reason. Durations are seconds, or strings with a unit
 * ("900s", "15m", "2h", "1d"). uvs.example.yaml documents every field.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { availableParallelism, hostname } from 'node:os';
import { parseConfigYaml } from './yaml-items';
import { parseYamlBounded as parseYaml } from './yaml-limits';
import { formatIPv6, hostPort, inAnyCidr, isCidr, maskBits, parseIPv4, parseIPv6, splitHostPort } from '../net/addr';
import { PROTOCOLS, type Protocol } from '../net/proto';
import type { RedisSyncOptions } from '../conntrack/redis-sync';
import { DROP_ENTRY_SCOPES, type DefenseSettings } from '../conntrack/defense';
import { MH_DEFAULT_TABLE_SIZE, MH_PRIMES } from '../schedulers/mh';
import { DEFAULT_SCHEDULER, flagScheduler, getScheduler, SCHED_FLAG_NAMES, schedulerNames } from '../schedulers/registry';
import { SCTP_DEFAULT_TIMEOUTS, SCTP_STATE_KEYS } from '../conntrack/sctp-state';
import { TCP_DEFAULT_TIMEOUTS, TCP_ESTABLISHED, TCP_FIN_WAIT, TCP_STATE_NAMES, UDP_DEFAULT_TIMEOUT } from '../conntrack/state';
import { GEN_KIND_NAMES } from '../conntrack/layout';

/** The generated kinds a limit may apply to: all but the SYN proxy's cookie SYN-ACK (one per SYN, never limited). */
const LIMITED_KINDS = GEN_KIND_NAMES.filter((k) => k !== 'syn_ack');
import { UvsError } from './errors';
import { bool, fail, int, isObj, leaf, list, map, nullable, obj, oneOf, opt, run, str, takeStr } from './schema';
import type { JsonSchema, LeafOpts, Out, Schema, Scope } from './schema';

// ── values with their own syntax ─────────────────────────────────────────────────────────────
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
const MAX_TIMEOUT_WHY = " (24.8 days: the kernel's INT_MAX / HZ at HZ=1000; entry times are 32-bit milliseconds)";

/** What a duration may be written as: seconds, or number+unit parts as Go's time.Duration prints them. */
const DURATION_JSON = (max: number): JsonSchema => ({
  oneOf: [
    { type: 'number', minimum: 0, maximum: max },
    { type: 'string', pattern: '^(\\d+(\\.\\d+)?|(\\d+(\\.\\d+)?(ms|s|m|h|d))+)$' },
  ],
});

/** Seconds from a number or a string with a unit ("900", "15m", "1m30s", "500ms"). */
function seconds(v: unknown, path: string, max: number, why: string): number {
  let secs: number;
  if (typeof v === 'number') secs = v;
  else if (typeof v === 'string') {
    const t = v.trim();
    const plain = /^(\d+(?:\.\d+)?)$/.exec(t);
    if (plain) secs = Number(plain[1]);
    else {
      // One or more number+unit parts, as Go's time.Duration prints them ("1m30s", "15m0s").
      const parts = [...t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
      if (parts.length === 0 || parts.map((x) => x[0]).join('') !== t) {
        fail(path, `must be a duration like 900, "900s", "15m", "1m30s" or "2h", got ${JSON.stringify(v)}`);
      }
      secs = parts.reduce((a, x) => a + Number(x[1]) * UNIT[x[2]!]!, 0);
    }
  } else fail(path, 'must be a duration (seconds, or a string with a unit)');
  if (!(secs >= 0) || secs > max) fail(path, `must be between 0 and ${max} seconds${why}, got ${JSON.stringify(v)}`);
  return secs;
}

interface DurationOpts extends LeafOpts<number> {
  /** Seconds; 31 days unless given. */
  max?: number;
  /** The smallest non-zero… the smallest value, with the reason appended to the message. */
  min?: number;
  minWhy?: string;
}

function duration(o: DurationOpts): Schema<number, false> {
  const max = o.max ?? 2678400;
  return leaf(
    DURATION_JSON(max),
    (v, path) => {
      const s = seconds(v, path, max, '');
      if (o.min !== undefined && s < o.min) fail(path, `must be at least ${o.min} s${o.minWhy ?? ''}`);
      return s;
    },
    { ...o, doc: `${o.doc ? `${o.doc}. ` : ''}Seconds, or a string with a unit ("900s", "15m", "1m30s")` },
  );
}

/** A connection or persistence timeout: a duration of at most MAX_TIMEOUT seconds. */
export function timeout(o: LeafOpts<number>): Schema<number, false> {
  return leaf(DURATION_JSON(MAX_TIMEOUT), (v, path) => seconds(v, path, MAX_TIMEOUT, MAX_TIMEOUT_WHY), {
    ...o,
    doc: `${o.doc ? `${o.doc}. ` : ''}Seconds or a string with a unit, at most ${MAX_TIMEOUT} (24.8 days)`,
  });
}

function ipv4Of(s: string, path: string): string {
  if (parseIPv4(s) === null) fail(path, `must be an IPv4 address, got ${JSON.stringify(s)}`);
  return s;
}

function ipv6Of(s: string, path: string): string {
  const w = parseIPv6(s);
  if (w === null) fail(path, `must be an IPv6 address, got ${JSON.stringify(s)}`);
  return formatIPv6(w); // one spelling per address (RFC 5952), so keys and listings agree
}

/** An address of either family; IPv6 in its RFC 5952 form. */
function ipAddrOf(s: string, path: string): string {
  if (parseIPv4(s) !== null) return s;
  if (parseIPv6(s) !== null) return ipv6Of(s, path);
  fail(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(s)}`);
}

const ipAddr = (o: LeafOpts<string> = {}) =>
  leaf({ type: 'string', description: 'IPv4 or IPv6 address' }, (v, path) => ipAddrOf(takeStr(v, path), path), o);

const cidr = (msg: string) =>
  leaf({ type: 'string', description: 'IPv4 or IPv6 CIDR' }, (v, path) => {
    if (typeof v !== 'string' || !isCidr(v)) fail(path, `${msg}, got ${JSON.stringify(v)}`);
    return v;
  });

/** Routing tables 253–255 are the kernel's default, main and local. */
const notReservedTable = (v: number, path: string) => {
  if ([253, 254, 255].includes(v)) fail(path, 'must not be 253–255 (the default, main and local tables)');
};

/** A service's protocol when it names none (also when a raw document is searched by key). */
export const DEFAULT_PROTOCOL: Protocol = 'tcp';
export const FORWARDINGS = ['masq', 'fullnat', 'tunnel'] as const;
export type Forwarding = (typeof FORWARDINGS)[number];
/** A service's forwarding when it names none: masq (ipvsadm's is direct routing, which a TUN device cannot do). */
export const DEFAULT_FORWARDING: Forwarding = 'masq';
/** PROXY protocol towards a real server (lb/proxy-protocol.ts): full-NAT TCP only. */
export type ProxyProtocol = 'v1' | 'v2';

function forwarding(o: LeafOpts<Forwarding>): Schema<Forwarding, false> {
  return leaf(
    { type: 'string', enum: [...FORWARDINGS] },
    (v, path) => {
      if ((FORWARDINGS as readonly unknown[]).includes(v)) return v as Forwarding;
      if (v === 'route' || v === 'droute' || v === 'direct') {
        throw new UvsError(
          'UVS_ERR_CONFIG_UNSUPPORTED',
          'direct routing needs layer-2 frames, which a TUN device does not carry; use "masq"',
          path,
        );
      }
      fail(path, `must be "masq", "fullnat" or "tunnel", got ${JSON.stringify(v)}`);
    },
    o,
  );
}

/** 'v1' | 'v2'; 'none' → absent (a real server's way to opt out of its service's default). */
function proxyProtocol(o: LeafOpts<ProxyProtocol | undefined>): Schema<ProxyProtocol | undefined, true> {
  const s = leaf<ProxyProtocol | undefined>(
    { type: 'string', enum: ['v1', 'v2', 'none'] },
    (v, path) => {
      if (v === 'v1' || v === 'v2') return v;
      if (v === 'none') return undefined;
      fail(path, `must be "v1", "v2" or "none", got ${JSON.stringify(v)}`);
    },
    { ...o, default: o.default ?? (() => undefined) },
  );
  return { ...s, optional: true };
}

// ── scopes: the fields a default or a rule reads elsewhere in the document ───────────────────
function rootOf(s: Scope | null): Scope | null {
  while (s?.up) s = s.up;
  return s;
}
/** The kube-proxy `ipvs:` section, when the document has one (parsed first). */
const kubeProxyOf = (s: Scope | null) => rootOf(s)?.out.ipvs as KubeProxyIpvs | undefined;
const dataplaneOf = (s: Scope | null) => rootOf(s)?.out.dataplane as Out<typeof DATAPLANE>;
/** The service a real server belongs to (its scope's parent; lists add no level). */
const serviceOf = (s: Scope | null) => (s?.up?.out ?? {}) as { port?: number; forwarding?: Forwarding; proxyProtocol?: ProxyProtocol };

// ── the schema ───────────────────────────────────────────────────────────────────────────────
/** kube-proxy's KubeProxyIPVSConfiguration (the `ipvs:` section of a KubeProxyConfiguration). */
const KUBE_PROXY_IPVS = obj(
  {
    scheduler: leaf(
      { type: 'string' },
      (v, path) => {
        if (v === '') return 'rr';
        const name = takeStr(v, path);
        if (!getScheduler(name)) fail(path, `unknown scheduler ${JSON.stringify(name)} (available: ${schedulerNames().join(', ')})`);
        return name;
      },
      { default: 'rr', doc: 'The default scheduler of the services ("" = rr, as kube-proxy)' },
    ),
    syncPeriod: duration({ default: 30, doc: '→ reload.syncPeriod' }),
    minSyncPeriod: duration({ default: 0, doc: '→ reload.minInterval' }),
    excludeCIDRs: list(cidr('must be an IPv4 or IPv6 CIDR'), {
      msg: 'must be a list of CIDRs',
      doc: 'Services with VIPs here survive a file reload that omits them',
    }),
    strictARP: bool({ default: false, doc: 'No effect: a TUN device answers no ARP' }),
    // kube-proxy: a timeout of 0 keeps the current value; a non-zero one is `ipvsadm --set`.
    tcpTimeout: timeout({ default: 0, doc: '→ timeouts.tcp; 0 keeps it' }),
    tcpFinTimeout: timeout({ default: 0, doc: '→ timeouts.tcpFin; 0 keeps it' }),
    udpTimeout: timeout({ default: 0, doc: '→ timeouts.udp; 0 keeps it' }),
  },
  { doc: "kube-proxy's ipvs: section (KubeProxyIPVSConfiguration), accepted as is" },
);
type KubeProxyIpvs = Out<typeof KUBE_PROXY_IPVS>;

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|::1)$/;

const token = () =>
  opt(
    leaf({ type: 'string', minLength: 16 }, (v, path) =>
      typeof v === 'string' && v.length >= 16 ? v : fail(path, 'must be a string of at least 16 characters'),
    ),
  );

/**
 * An HTTP listener: "host:port" ('' = off); beyond loopback only with a token (≥ 16 characters),
 * and with `alwaysToken` (the admin API, which can change everything) on loopback too.
 */
function checkListener(address: string, tok: string | undefined, addressPath: string, tokenPath: string, alwaysToken: boolean): void {
  if (!address) return;
  const hp = splitHostPort(address);
  if (!hp || (hp.bracketed && !/^[0-9a-fA-F:]+$/.test(hp.host)))
    fail(addressPath, `must be host:port (IPv6 as [addr]:port), got ${JSON.stringify(address)}`);
  if (alwaysToken && tok === undefined) {
    fail(
      tokenPath,
      `is required with a TCP listener (${address}): any local user or browser page reaches a loopback port; the root-only unix socket needs none`,
    );
  }
  if (!LOOPBACK.test(hp.host) && tok === undefined) {
    fail(tokenPath, `is required when listening beyond loopback (${address}): anything reachable from the network needs a bearer token`);
  }
}

const listener = (defAddress: string, doc: string) =>
  obj(
    { address: str({ empty: true, default: defAddress, doc: "host:port ('' = off)" }), token: token() },
    { doc, check: (l, path) => checkListener(l.address, l.token, `${path}.address`, `${path}.token`, false) },
  );

/**
 * dataplane.generatedLimit, with the kernel's defaults: one answer per source per
 * icmp_ratelimit (1000 ms) with a burst of XRLIM_BURST_FACTOR (6), icmp_msgs_per_sec 1000 and
 * icmp_msgs_burst 50 for the node; limited kinds as icmp_ratemask 0x1818 limits destination
 * unreachable but not echo replies or fragmentation needed (PMTU discovery is never limited) —
 * plus RSTs, which the kernel does not limit but uvs sends to whatever source a packet names.
 */
const GENERATED_LIMIT = obj(
  {
    perSourceInterval: duration({
      default: 1,
      max: 60,
      doc: 'One answer per source per this (net.ipv4.icmp_ratelimit); 0 = no per-source limit',
    }),
    perSourceBurst: int({ default: 6, min: 1, max: 1000, doc: "Per-source burst (the kernel's XRLIM_BURST_FACTOR)" }),
    perSecond: int({
      default: 1000,
      min: 0,
      max: 10_000_000,
      doc: "The node's answers per second (icmp_msgs_per_sec); 0 = no global limit",
    }),
    burst: int({ default: 50, min: 1, max: 10_000_000, doc: 'Global burst (icmp_msgs_burst)' }),
    kinds: map(
      list(oneOf(LIMITED_KINDS, { strict: true, msg: (k) => `must be one of ${LIMITED_KINDS.join(', ')}, got ${JSON.stringify(k)}` }), {
        msg: `must be a list of ${LIMITED_KINDS.join(', ')}`,
        default: ['reset', 'unreachable'],
        doc: 'The kinds limited (icmp_ratemask)',
      }),
      (kinds) => [...new Set(kinds)],
    ),
  },
  { doc: 'Limits on the packets uvs generates (docs/generated-packets.md)' },
);
export type GeneratedLimitConfig = Out<typeof GENERATED_LIMIT>;

/**
 * sloppy_tcp / sloppy_sctp (docs/sloppy.md): true, false, or auto — on for the services where a
 * mid-flow packet lands where the dead node had sent it: a consistent scheduler (mh, sh, dh),
 * no persistence, no full-NAT real server.
 */
export type SloppyMode = boolean | 'auto';
function sloppyMode(proto: string, kernel: string) {
  return leaf<SloppyMode>(
    { oneOf: [{ type: 'boolean' }, { type: 'string', enum: ['auto'] }] },
    (v, path) => (typeof v === 'boolean' || v === 'auto' ? v : fail(path, `must be true, false or auto, got ${JSON.stringify(v)}`)),
    {
      default: 'auto',
      doc: `A ${proto} packet with no connection may start one, not only ${kernel} (kernel sloppy_${proto.toLowerCase()}); auto: for services whose scheduler is consistent across nodes (mh, sh, dh), not persistent, without full-NAT servers`,
    },
  );
}

/**
 * dataplane.markMask's default: bits 1, 7 and 12, which no common neighbour uses (lb/marks.ts
 * lists kube-proxy's, Calico's, Cilium's, Weave's, Tailscale's, Istio's and wg-quick's).
 */
export const DEFAULT_MARK_MASK = 0x1082;

const DATAPLANE = obj(
  {
    device: str({
      default: 'uvs0',
      doc: 'TUN device uvsd creates',
      check: (v, path) => /^[a-zA-Z0-9_.-]{1,15}$/.test(v) || fail(path, 'must be 1–15 characters of letters, digits, _ . -'),
    }),
    vipCidrs: list(cidr('must be an IPv4 or IPv6 CIDR like 10.0.0.0/24 or fd00:10::/64'), {
      nonEmpty: true,
      msg: 'must be a non-empty list of IPv4 or IPv6 CIDRs',
      doc: 'VIP ranges routed to the device',
    }),
    workers: int({
      default: () => availableParallelism(),
      min: 1,
      max: 64,
      doc: 'Dataplane threads = TUN queues; default: the number of CPUs',
    }),
    // 144 B an entry: 128 of entry words, 12 of chain heads and bucket lock, 4 of per-source
    // counter (conntrack/layout.ts tableBytes) → 9 MiB at the default.
    tableSize: int({
      default: 65536,
      min: 16,
      max: 1 << 26,
      doc: 'Connection table capacity, a power of two',
      check: (v, path) => (v & (v - 1)) === 0 || fail(path, `must be a power of two, got ${v}`),
    }),
    // Sized for 10,000 services of 10 servers with room for a reload that replaces some of them
    // (new servers take slots before the old ones give theirs up). perf/SCALE.md has the RSS.
    maxRealServers: int({
      default: 131072,
      min: 1,
      max: 1 << 20,
      doc: 'Real-server slots (deleted servers keep theirs while they have connections): 32 B each and 40 B of counters per worker (14 MiB at the default with 2 workers)',
    }),
    maxServices: int({
      default: 16384,
      min: 1,
      max: 1 << 16,
      doc: 'Service slots: 256 B of scheduler state each and 40 B of counters per worker (5.3 MiB at the default with 2 workers)',
    }),
    mtu: int({ default: 1500, min: 576, max: 9000 }),
    routeTable: int({
      default: 4711,
      min: 1,
      max: 0x7fffffff,
      doc: 'Policy-routing table that sends masq replies and replayed packets into the device; any unused id',
      check: notReservedTable,
    }),
    rulePriority: int({
      default: 4711,
      min: 3,
      max: 32765,
      doc: 'Policy-rule priorities: the into-device rule (fwmark, masq replies and replayed packets) takes this − 2, the device rule this − 1; this one itself is used only without nftables (a rule per masq real server)',
    }),
    markMask: int({
      default: DEFAULT_MARK_MASK,
      min: 1,
      max: 0xffffffff,
      doc: "Bits of the packet mark uvs may set and test, handed out lowest first (docs/node-resources.md): the lowest routes masq replies and replayed packets into the device. Other systems' bits stay untouched; give uvs bits nothing else uses",
    }),
    resyncInterval: duration({
      default: 5,
      min: 0.2,
      max: 3600,
      doc: "Seconds between checks that uvs's routes, rules and nftables table are still in place (another tool's flush, a deleted route); what is missing is restored, counted and logged",
    }),
    batch: int({ default: 64, min: 1, max: 1024, doc: 'Packets per read; amortises poll() and the JS↔C crossing' }),
    offload: bool({ default: true, doc: 'Kernel offloads on the device (virtio header, checksum + TSO: 64 KB super-packets)' }),
    io: oneOf(['auto', 'io_uring', 'poll'], {
      default: 'auto',
      strict: true,
      msg: (v) => `must be auto, io_uring or poll, got ${JSON.stringify(v)}`,
      doc: 'Worker I/O: io_uring (one io_uring_enter per batch), poll (poll + read + write), or auto (io_uring where the kernel allows it)',
    }),
    steering: oneOf(['auto', 'ebpf', 'automq'], {
      default: 'auto',
      strict: true,
      msg: (v) => `must be auto, ebpf or automq, got ${JSON.stringify(v)}`,
      doc: "Queue steering: ebpf (uvs's program keys a packet on its client's endpoint: a connection's packets share one queue), automq (the device's own flow table), or auto (ebpf where the kernel allows it)",
    }),
    answerPing: bool({ default: true, doc: 'Answer ICMP echo requests sent to a VIP' }),
    sloppyTcp: sloppyMode('TCP', 'a SYN'),
    sloppySctp: sloppyMode('SCTP', 'an INIT'),
    expireQuiescentTemplate: bool({
      default: false,
      doc: 'Persistence templates of a weight-0 server are not used (kernel sysctl, default off; kube-proxy sets it)',
    }),
    fullnat: obj(
      {
        addresses: list(ipAddr(), { msg: 'must be a list of IPv4 and/or IPv6 addresses' }),
        portMin: int({ default: 1024, min: 1, max: 65535 }),
        portMax: int({ default: 65535, min: 1, max: 65535 }),
      },
      {
        doc: 'Full-NAT source addresses (routed to the device) and the port range allocated on them',
        check: (f, path) => f.portMax >= f.portMin || fail(`${path}.portMax`, `must not be below portMin (${f.portMin})`),
      },
    ),
    tunnelSource: leaf({ type: 'string' }, (v, path) => ipv4Of(takeStr(v, path), path), {
      default: '',
      doc: 'Outer source address of IPIP-tunnelled packets (an address of this node the real servers reach)',
    }),
    tunnelSource6: leaf({ type: 'string' }, (v, path) => ipv6Of(takeStr(v, path), path), {
      default: '',
      doc: 'The same for ip6ip6-tunnelled IPv6 services',
    }),
    generatedLimit: GENERATED_LIMIT,
    announceTable: int({
      default: 0,
      min: 0,
      max: 0x7fffffff,
      doc: 'Kernel table where uvsd keeps the VIP ranges while it wants traffic (a BGP speaker announces them); 0 = none',
      check: (v, path, s) => {
        notReservedTable(v, path);
        const routeTable = s!.out.routeTable as number;
        if (v !== 0 && v === routeTable)
          fail(path, `must differ from dataplane.routeTable (${routeTable}), which holds the masq reply routes`);
      },
    }),
  },
  {
    retired: {
      replayMark:
        'replaced by dataplane.markMask (uvs now sets and tests bits of the mark, not a whole value; docs/node-resources.md): remove it, or give markMask bits nothing else on the node uses',
    },
  },
);

/** Seconds per state name, each absent one left to the defaults (`defaults`, or none). */
function stateTimeouts(names: readonly string[], defaults: readonly number[] | null, doc: string) {
  const fields: Record<string, Schema<number | undefined>> = {};
  names.forEach((n, i) => (fields[n] = defaults ? timeout({ default: defaults[i]! }) : opt(timeout({}))));
  return obj(fields, { doc });
}

/** ipvs: tcpTimeout… and timeouts.tcp… name one setting each. */
const KUBE_PROXY_TIMEOUTS = [
  ['tcpTimeout', 'tcp'],
  ['tcpFinTimeout', 'tcpFin'],
  ['udpTimeout', 'udp'],
] as const;
const kubeProxyTimeout = (s: Scope | null, k: (typeof KUBE_PROXY_TIMEOUTS)[number][0]) => kubeProxyOf(s)?.[k] || undefined;

const TIMEOUTS = map(
  obj(
    {
      tcp: timeout({
        default: (s) => kubeProxyTimeout(s, 'tcpTimeout') ?? TCP_DEFAULT_TIMEOUTS[TCP_ESTABLISHED]!,
        doc: 'ESTABLISHED (ipvsadm --set tcp)',
      }),
      tcpFin: timeout({
        default: (s) => kubeProxyTimeout(s, 'tcpFinTimeout') ?? TCP_DEFAULT_TIMEOUTS[TCP_FIN_WAIT]!,
        doc: 'FIN_WAIT (ipvsadm --set tcpfin)',
      }),
      udp: timeout({ default: (s) => kubeProxyTimeout(s, 'udpTimeout') ?? UDP_DEFAULT_TIMEOUT, doc: 'ipvsadm --set udp' }),
      tcpStates: stateTimeouts(TCP_STATE_NAMES, null, "Any other TCP state by name; absent = the kernel's"),
      // SCTP: the kernel's per-state timeouts (its ipvsadm --set has no SCTP field); any may be changed.
      sctp: stateTimeouts(
        SCTP_STATE_KEYS,
        SCTP_DEFAULT_TIMEOUTS,
        "Seconds per SCTP state (conntrack/sctp-state.ts); absent = the kernel's",
      ),
      sweepInterval: duration({ default: 1, max: 60, min: 0.05, doc: 'Sweeper period' }),
    },
    {
      check: (_t, _path, s, raw) => {
        for (const [k, u] of KUBE_PROXY_TIMEOUTS) {
          if (kubeProxyTimeout(s, k) !== undefined && raw[u] !== undefined)
            fail(`ipvs.${k}`, `conflicts with timeouts.${u}: set one of them`);
        }
      },
    },
  ),
  (t) => {
    const tcp: Record<string, number> = {};
    TCP_STATE_NAMES.forEach((n, i) => (tcp[n] = TCP_DEFAULT_TIMEOUTS[i]!));
    Object.assign(tcp, { ESTABLISHED: t.tcp, FIN_WAIT: t.tcpFin }, t.tcpStates);
    return { tcp, udp: t.udp, sctp: t.sctp as Record<string, number>, sweepInterval: t.sweepInterval };
  },
);

/** Mode of an overload defense: 0 off, 1–2 automatic, 3 always (the kernel's sysctls). */
const mode = (def: number, doc: string) => int({ default: def, min: 0, max: 3, doc });
const tableSizeOf = (s: Scope | null) => dataplaneOf(s).tableSize;

/**
 * `defense:` — the kernel's sysctls (modes 0 off, 1–2 automatic, 3 always) with the trigger in
 * free table entries. uvs turns drop_entry, secure_tcp and the per-source limit on (1) by default,
 * where the kernel ships them off: a fixed-size table fills under a SYN flood long before a node
 * runs out of memory, and the automatic modes act only then. Being on by default, drop_entry
 * drops by default only half-open entries (dropEntryScope): a flood never costs a flow past its
 * handshake unless the kernel's choice is asked for.
 */
const DEFENSE: Schema<DefenseSettings, false> = obj(
  {
    amemthresh: int({
      default: (s) => tableSizeOf(s) >>> 4,
      min: 0,
      max: tableSizeOf,
      doc: 'Free table entries below which the automatic defenses act; default tableSize / 16, at most tableSize',
    }),
    amDroprate: int({ default: 10, min: 1, max: 1_000_000, doc: "drop_packet's rate in mode 3 (1 of every this many new flows)" }),
    dropEntry: mode(1, 'Drop entries while the table is short of room; which ones: dropEntryScope (kernel default 0)'),
    dropEntryScope: oneOf(DROP_ENTRY_SCOPES, {
      default: 'halfOpen',
      strict: true,
      msg: (v) =>
        `must be halfOpen (handshakes that never completed, nearest their timer first) or kernel (also idle established and UDP entries with 1–8 packets), got ${JSON.stringify(v)}`,
      doc: 'What drop_entry drops: halfOpen (default) only TCP SYN_RECV/SYNACK and SCTP INIT1/INIT entries, nearest their timer first, never an established flow; kernel as ip_vs_random_dropentry, also idle (60 s) established TCP/SCTP and UDP entries with 1–8 client packets',
    }),
    dropPacket: mode(0, 'Refuse a share of new flows'),
    secureTcp: mode(1, 'tcp_states_dos and short half-open timers (kernel default 0)'),
    secureTcpTimeout: duration({
      default: 10,
      max: 3600,
      min: 1,
      minWhy: ' (a handshake needs a round trip and a retransmitted SYN)',
      doc: 'The half-open TCP timeout while secure_tcp acts',
    }),
    halfOpenPerSource: mode(1, 'Limit the half-open entries of one source (IPv4 address, IPv6 /64)'),
    maxHalfOpenPerSource: int({
      default: (s) => Math.min(256, tableSizeOf(s)),
      min: 1,
      max: tableSizeOf,
      doc: 'Default 256, at most tableSize',
    }),
    holdTime: duration({ default: 60, max: 3600, doc: 'Automatic defenses stay on this long after the last shortage (0 = as the kernel)' }),
    synProxy: mode(1, 'SYN proxy: SYNs of masq/full-NAT TCP services answered with SYN cookies, no entry until the client ACKs'),
    synProxyMss: opt(
      int({ min: 536, max: 9000, doc: 'MSS offered to clients at most (IPv6: 20 less, at least 1220); default 1460 / 1440' }),
    ),
    synProxyWscale: int({ default: 7, min: 0, max: 14, doc: 'Window scale offered to clients that use timestamps' }),
    // 16 characters: 128 bits if random hex or base64 is used, the key's own size.
    synProxyKey: opt(
      str({
        minLength: 16,
        doc: "Cookie secret shared by nodes that must accept each other's cookies (ECMP); default random per start",
        check: (k, path) => k.length >= 16 || fail(path, `must be at least 16 characters, got ${k.length}`),
      }),
    ),
  },
  { doc: "Overload defenses (conntrack/defense.ts, docs/defense.md): the kernel's /proc/sys/net/ipv4/vs ones" },
);

const hostPorts = () =>
  opt(
    list(obj({ host: str(), port: int({ default: 6379, min: 1, max: 65535 }) }), {
      nonEmpty: true,
      msg: 'must be a non-empty list of {host, port}',
    }),
  );

/** Shared flow state (conntrack/redis-sync.ts, redis-record.ts): where Redis is, and what a node believes of it. */
const REDIS: Schema<RedisSyncOptions, false> = obj(
  {
    url: opt(
      str({
        doc: 'redis://host:port[/db] or rediss://…',
        check: (u, path) => /^rediss?:\/\//.test(u) || fail(path, `must be redis://host:port[/db] or rediss://…, got ${JSON.stringify(u)}`),
      }),
    ),
    sentinels: hostPorts(),
    name: opt(str({ doc: 'The Sentinel master name (with sentinels)' })),
    cluster: hostPorts(),
    password: opt(str()),
    keyPrefix: str({ default: 'uvs:' }),
    nodeId: str({ default: () => hostname(), doc: 'This node in cluster-wide counts; default: the host name' }),
    parkTimeout: duration({ default: 1, max: 60, doc: 'How long a parked packet may wait for Redis' }),
    countsInterval: duration({ default: 2, max: 3600, min: 0.1, doc: 'How often this node publishes its connection counts' }),
    maxQueue: int({ default: 100000, min: 100, max: 10_000_000, doc: 'Most flow records waiting to be written' }),
    // 16 characters: 128 bits if random hex or base64 is used, the MAC's own strength.
    recordKey: opt(
      str({
        minLength: 16,
        doc: 'Shared secret: records and counts carry an HMAC-SHA256',
        check: (k, path) => k.length >= 16 || fail(path, `must be at least 16 characters, got ${k.length}`),
      }),
    ),
    maxShadowShare: leaf(
      { type: 'number', minimum: 0, exclusiveMinimum: true, maximum: 1 },
      (v, path) =>
        typeof v === 'number' && v > 0 && v <= 1 ? v : fail(path, `must be a number above 0 and at most 1, got ${JSON.stringify(v)}`),
      { default: 0.5, doc: 'Share of the table shadow entries may hold' },
    ),
    maxNodes: int({ default: 64, min: 1, max: 10_000, doc: 'Most other nodes whose counts are read per exchange' }),
    maxLookups: int({ default: 1024, min: 1, max: 1_000_000, doc: 'Most adoption lookups in flight' }),
    commandTimeout: duration({ default: 1, max: 60, min: 0.01, doc: 'Seconds a Redis command may take' }),
  },
  {
    doc: 'Shared flow state (multi-node); null = this node works alone',
    check: (r, path, _s, raw) => {
      const modes = ['url', 'sentinels', 'cluster'].filter((k) => raw[k] !== undefined);
      if (modes.length !== 1)
        fail(path, `needs exactly one of url, sentinels (with name) or cluster; got ${modes.length ? modes.join(', ') : 'none'}`);
      if (r.sentinels && r.name === undefined) fail(`${path}.name`, 'is required');
    },
  },
);

/**
 * A health-check path as it can go on an HTTP request line: a space or a character beyond ASCII
 * is percent-encoded as UTF-8 (what a browser sends; node's http.request throws on them), `%XX`
 * already there is kept; control characters are refused (they could split the request).
 */
function requestPath(p: string, path: string): string {
  if (!p.startsWith('/')) fail(path, 'must start with /');
  if (/[\x00-\x1f\x7f]/.test(p)) fail(path, `must not contain control characters, got ${JSON.stringify(p)}`);
  try {
    return p.replace(/[^\x21-\x7e]/gu, (c) => encodeURIComponent(c));
  } catch {
    fail(path, `is not valid Unicode text, got ${JSON.stringify(p)}`); // a lone surrogate
  }
}

const HEALTH_CHECK = obj(
  {
    type: oneOf(['tcp', 'http', 'ping'], {
      default: 'tcp',
      msg: (v) => `must be tcp, http or ping, got ${JSON.stringify(v)}`,
      doc: "tcp: connect; http: GET path; ping: ICMP / ICMPv6 echo (keepalived's PING_CHECK; port unused)",
    }),
    port: opt(int({ min: 1, max: 65535, doc: "Port to check; absent = the real server's port" })),
    path: leaf({ type: 'string', pattern: '^/' }, (v, path) => requestPath(takeStr(v, path), path), {
      default: '/',
      doc: 'HTTP path (spaces and non-ASCII are sent percent-encoded)',
    }),
    expectStatus: int({ default: 200, min: 100, max: 599 }),
    interval: duration({ default: 2, max: 3600, min: 0.1 }),
    timeout: duration({
      default: 1,
      max: 3600,
      check: (t, path, s) => {
        const interval = s!.out.interval as number;
        if (t <= 0 || t > interval) fail(path, `must be more than 0 and at most the interval (${interval} s)`);
      },
    }),
    rise: int({ default: 2, min: 1, max: 100, doc: 'Consecutive successes to restore' }),
    fall: int({ default: 3, min: 1, max: 100, doc: 'Consecutive failures to quiesce' }),
  },
  { doc: 'keepalived-style check; failing servers get weight 0, recovering ones their weight back' },
);
export type HealthCheckConfig = Out<typeof HEALTH_CHECK>;

export const REAL_SERVER = obj(
  {
    address: ipAddr(),
    port: int({ default: (s) => serviceOf(s).port!, min: 1, max: 65535, doc: "Default: the service's port" }),
    weight: int({ default: 1, min: 0, max: 65535, doc: '0 = quiesced: keeps its flows, gets no new ones (ipvsadm default 1)' }),
    forwarding: forwarding({ default: (s) => serviceOf(s).forwarding!, doc: "Default: the service's" }),
    upperThreshold: int({ default: 0, min: 0, max: 0x7fffffff, doc: 'Stop sending new flows at this many connections (0 = no limit)' }),
    lowerThreshold: int({ default: 0, min: 0, max: 0x7fffffff, doc: 'Resume below this many' }),
    slowStart: opt(
      duration({ max: 3600, doc: "Seconds over which a returning server's weight ramps up; absent = the service's slowStart" }),
    ),
    proxyProtocol: proxyProtocol({
      default: (s) => serviceOf(s).proxyProtocol,
      doc: "PROXY protocol header in front of each connection's bytes; absent = the service's, none = none",
    }),
  },
  {
    mapping: true,
    check: (r, path, s) => {
      if (r.lowerThreshold > r.upperThreshold)
        fail(`${path}.lowerThreshold`, `must not exceed upperThreshold (${r.upperThreshold}), as in the kernel`);
      const servicePort = serviceOf(s).port!;
      if (r.forwarding === 'tunnel' && r.port !== servicePort) {
        fail(
          `${path}.port`,
          `tunnel forwarding cannot map ports (the inner packet is not rewritten): must be the service port ${servicePort}`,
        );
      }
    },
  },
);
export type RealServerConfig = Out<typeof REAL_SERVER>;

/** The default scheduler: kube-proxy's (rr) in a document with an `ipvs:` section, ipvsadm's otherwise. */
const defaultScheduler = (s: Scope | null) => kubeProxyOf(s)?.scheduler ?? DEFAULT_SCHEDULER;

export const SERVICE = obj(
  {
    protocol: oneOf(PROTOCOLS, { default: DEFAULT_PROTOCOL, msg: (v) => `must be tcp, udp or sctp, got ${JSON.stringify(v)}` }),
    address: ipAddr(),
    port: int({ min: 1, max: 65535 }),
    name: str({
      default: (s) => `${s!.out.protocol as string}/${hostPort(s!.out.address as string, s!.out.port as number)}`,
      doc: 'Default "protocol/address:port"',
    }),
    scheduler: leaf(
      { type: 'string', enum: schedulerNames() },
      (v, path) => {
        const name = takeStr(v, path);
        if (!getScheduler(name)) fail(path, `unknown scheduler ${JSON.stringify(name)} (available: ${schedulerNames().join(', ')})`);
        return name;
      },
      {
        default: defaultScheduler,
        doc: `Default ${DEFAULT_SCHEDULER} (as ipvsadm); rr in a document with an ipvs: section (as kube-proxy)`,
      },
    ),
    schedFlags: list(
      oneOf(SCHED_FLAG_NAMES, {
        strict: true,
        msg: () => `must be one of ${SCHED_FLAG_NAMES.join(', ')}`,
        check: (f, path, s) => {
          const needs = flagScheduler(f);
          if (needs !== null && s!.out.scheduler !== needs) fail(path, `${f} needs scheduler ${needs}`);
        },
      }),
    ),
    // ipvsadm -p [timeout]: a bare flag (true) means 360 s (IPVS_SVC_PERSISTENT_TIMEOUT); ipvsadm
    // takes 1..2678400, uvs 1..MAX_TIMEOUT (templates live in the same 32-bit millisecond table).
    persistence: leaf(
      {
        oneOf: [{ type: 'boolean' }, DURATION_JSON(MAX_TIMEOUT)],
        description: 'Persistence timeout (ipvsadm -p): seconds, true = 360, false/0 = none',
      },
      (v, path) => {
        if (v === true) return 360;
        if (v === false || v === 0) return 0;
        const secs = seconds(v, path, MAX_TIMEOUT, MAX_TIMEOUT_WHY);
        if (secs < 1) fail(path, 'must be at least 1 second (or false/0 for none)');
        return secs;
      },
      { default: 0 },
    ),
    netmask: leaf(
      {
        oneOf: [{ type: 'string' }, { type: 'integer', minimum: 1, maximum: 128 }],
        description:
          'Persistence netmask (ipvsadm -M): dotted for IPv4 (default 255.255.255.255), a prefix length 1–128 for IPv6 (default 128)',
      },
      (v, path, s) => {
        if ((s!.out.address as string).includes(':')) {
          const bits = String(v);
          if (!/^\d{1,3}$/.test(bits) || Number(bits) < 1 || Number(bits) > 128) {
            fail(path, `must be a prefix length from 1 to 128 for an IPv6 service, got ${JSON.stringify(v)}`);
          }
          return bits;
        }
        const mask = takeStr(v, path);
        const nm = parseIPv4(mask);
        if (nm === null || maskBits(nm) === null)
          fail(path, `must be a contiguous IPv4 netmask like 255.255.255.0, got ${JSON.stringify(mask)}`);
        return mask;
      },
      { default: (s) => ((s!.out.address as string).includes(':') ? '128' : '255.255.255.255') },
    ),
    forwarding: forwarding({ default: DEFAULT_FORWARDING, doc: 'Default of its real servers (route: needs layer 2, refused)' }),
    proxyProtocol: proxyProtocol({ doc: 'Default of its real servers (as forwarding is); absent = none' }),
    realServers: list(REAL_SERVER),
    healthCheck: opt(HEALTH_CHECK),
    maxDrainTime: opt(
      duration({
        doc: 'Seconds a removed real server may drain before it is deleted with connections left; absent = gracefulTermination.maxDrainTime',
      }),
    ),
    sloppy: opt(
      bool({
        doc: 'A mid-flow packet with no connection may start one (sloppy_tcp / sloppy_sctp for this service); absent = dataplane.sloppyTcp / sloppySctp',
      }),
    ),
    slowStart: opt(
      duration({
        max: 3600,
        doc:
          'Seconds over which a real server that comes back (health check up, re-added, weight raised from 0) ramps from weight 1 ' +
          "to its weight, as HAProxy's slowstart; absent or 0 = at once",
      }),
    ),
    mhTableSize: opt(
      int({
        min: 1,
        max: 131071,
        doc: `mh lookup-table size, one of the kernel's primes, not below the number of real servers; absent = 4093`,
        check: (m, path, s) => {
          if (s!.out.scheduler !== 'mh') fail(path, 'applies only to scheduler mh');
          if (!MH_PRIMES.includes(m)) fail(path, `must be one of the kernel's sizes ${MH_PRIMES.join(', ')}`);
        },
      }),
    ),
  },
  {
    mapping: true,
    check: (svc, path, _s, raw) => {
      const v6 = svc.address.includes(':');
      const given = raw.realServers as unknown[];
      svc.realServers.forEach((r, j) => {
        if (r.proxyProtocol === undefined) return;
        // The header goes into the TCP stream with every sequence number behind it shifted, which
        // needs both directions through uvs and a server that does not see the client (full-NAT).
        // masq: the server already sees the client's own address; tunnel: its replies bypass uvs.
        const g = given[j];
        const own = isObj(g) && g.proxyProtocol !== undefined;
        const where = own ? `${path}.realServers[${j}].proxyProtocol` : `${path}.proxyProtocol`;
        if (svc.protocol !== 'tcp') fail(where, `PROXY protocol is for TCP services (this one is ${svc.protocol})`);
        if (r.forwarding !== 'fullnat') {
          const why =
            r.forwarding === 'masq'
              ? "it already sees the client's address"
              : 'its replies do not pass uvs, so their acknowledgements cannot be shifted';
          fail(
            where,
            `needs forwarding fullnat, real server ${hostPort(r.address, r.port)} uses ${r.forwarding}: ${why}${own ? '' : ' (give it proxyProtocol: none)'}`,
          );
        }
      });
      if (svc.sloppy === true) {
        if (svc.protocol === 'udp') fail(`${path}.sloppy`, 'applies to TCP and SCTP services (a UDP datagram always may start a flow)');
        const j = svc.realServers.findIndex((r) => r.forwarding === 'fullnat');
        if (j >= 0)
          fail(
            `${path}.sloppy`,
            `real server ${hostPort(svc.realServers[j]!.address, svc.realServers[j]!.port)} uses fullnat: a mid-flow packet cannot be given the pool address and port its connection had`,
          );
      }
      // IPVS allows another family only for tunnelled servers; uvs tunnels within one family.
      svc.realServers.forEach((r, j) => {
        if (r.address.includes(':') !== v6)
          fail(`${path}.realServers[${j}].address`, `${r.address} is not of the service's address family (${v6 ? 'IPv6' : 'IPv4'})`);
      });
      const seen = new Set<string>();
      svc.realServers.forEach((r, j) => {
        const k = `${r.address}:${r.port}`;
        if (seen.has(k)) fail(`${path}.realServers[${j}]`, `${k} is listed twice`);
        seen.add(k);
      });
      // The kernel's mh refuses to build a table for more real servers than it has slots
      // (docs/ipvs-semantics.md §2.9): uvs refuses the configuration, so the old one keeps running.
      if (svc.scheduler === 'mh') {
        const m = svc.mhTableSize ?? MH_DEFAULT_TABLE_SIZE;
        if (svc.realServers.length > m)
          fail(
            `${path}.realServers`,
            `scheduler mh has ${m} table slots (mhTableSize) and cannot hold ${svc.realServers.length} real servers`,
          );
      }
    },
  },
);
export type ServiceConfig = Out<typeof SERVICE>;

/**
 * Services that passed checkServices' own checks, with the dataplane settings they passed under:
 * a remembered service (validateRemembering) is not checked again while those stay the same, so
 * a change of one of 10,000 services checks one (the whole pass took ~12 ms). Configuration
 * objects are never changed in place.
 */
const servicesChecked = new WeakMap<ServiceConfig, { context: string; key: string }>();

/** Services against each other and against the dataplane: keys, VIP ranges, forwarding prerequisites. */
function checkServices(services: ServiceConfig[], path: string, s: Scope | null): void {
  const dp = dataplaneOf(s);
  const context = JSON.stringify([dp.tunnelSource, dp.tunnelSource6, dp.fullnat.addresses, dp.vipCidrs]);
  const seen = new Map<string, number>();
  services.forEach((svc, i) => {
    const known = servicesChecked.get(svc);
    const key = known?.key ?? `${svc.protocol} ${svc.address}:${svc.port}`;
    const first = seen.get(key);
    if (first !== undefined) fail(`${path}[${i}]`, `duplicates ${path}[${first}] (${key})`);
    seen.set(key, i);
    if (known?.context === context) return;
    const v6 = svc.address.includes(':');
    if (
      (svc.forwarding === 'tunnel' || svc.realServers.some((r) => r.forwarding === 'tunnel')) &&
      !(v6 ? dp.tunnelSource6 : dp.tunnelSource)
    ) {
      fail(
        `${path}[${i}].forwarding`,
        `tunnel needs dataplane.${v6 ? 'tunnelSource6' : 'tunnelSource'} (the outer source address the real servers see)`,
      );
    }
    if (
      (svc.forwarding === 'fullnat' || svc.realServers.some((r) => r.forwarding === 'fullnat')) &&
      !dp.fullnat.addresses.some((a) => a.includes(':') === v6)
    ) {
      const family = v6 ? 'an IPv6' : 'an IPv4';
      fail(
        `${path}[${i}].forwarding`,
        `fullnat needs ${family} address in dataplane.fullnat.addresses (the source addresses real servers answer to)`,
      );
    }
    if (!inAnyCidr(svc.address, dp.vipCidrs))
      fail(`${path}[${i}].address`, `${svc.address} is not inside dataplane.vipCidrs (${dp.vipCidrs.join(', ')})`);
    servicesChecked.set(svc, { context, key });
  });
  if (services.length > dp.maxServices) fail(path, `more than dataplane.maxServices (${dp.maxServices})`);
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** api.socket's default, also where uvsadm looks without --socket or $UVS_SOCKET. */
export const DEFAULT_API_SOCKET = '/run/uvs/uvsd.sock';

/** The whole document. Sections are parsed in this order: a default or rule reads only what is above it. */
const CONFIG = map(
  obj({
    ipvs: opt(KUBE_PROXY_IPVS),
    dataplane: DATAPLANE,
    timeouts: TIMEOUTS,
    gracefulTermination: obj({
      checkInterval: duration({ default: 60, max: 86400, min: 0.1, doc: 'Between drain checks (kube-proxy: 60)' }),
      maxDrainTime: duration({ default: 0, doc: "0 = wait for the last connection however long (kube-proxy's behaviour)" }),
      expireNodestConn: bool({
        default: true,
        doc: "A packet of a deleted real server's connection expires the entry and is scheduled anew (kernel sysctl, kube-proxy sets 1)",
      }),
    }),
    defense: DEFENSE,
    api: obj(
      {
        socket: str({ default: DEFAULT_API_SOCKET, doc: 'The root-only unix socket' }),
        listen: str({ empty: true, default: '', doc: "Optional TCP listener, host:port ('' = none); needs the token, on loopback too" }),
        token: token(),
      },
      { doc: 'Admin API', check: (a, path) => checkListener(a.listen, a.token, `${path}.listen`, `${path}.token`, true) },
    ),
    metrics: listener('127.0.0.1:10249', 'Prometheus /metrics'),
    healthz: listener('127.0.0.1:10256', '/healthz and /livez'),
    reload: obj(
      {
        watch: bool({ default: true, doc: 'Reload when the file changes' }),
        syncPeriod: duration({ default: (s) => kubeProxyOf(s)?.syncPeriod ?? 0, doc: 'Also re-read the file this often (0 = never)' }),
        minInterval: duration({ default: (s) => kubeProxyOf(s)?.minSyncPeriod ?? 0, doc: 'At most one reload per this long' }),
      },
      { doc: 'Reloading' },
    ),
    redis: nullable(REDIS),
    stateFile: str({
      empty: true,
      default: '/var/lib/uvs/state.json',
      doc: "Where uvsd keeps what must survive a restart (the drain list); '' = nowhere",
    }),
    log: obj({
      level: oneOf(LOG_LEVELS, { default: 'info', msg: () => `must be one of ${LOG_LEVELS.join(', ')}` }),
      pretty: bool({ default: false }),
    }),
    services: list(remembered(SERVICE), { check: checkServices }),
  }),
  // kube-proxy's section leaves what has no other home: excludeCIDRs and strictARP.
  ({ ipvs, ...cfg }) => ({ ...cfg, kubeProxy: ipvs ? { excludeCIDRs: ipvs.excludeCIDRs, strictARP: ipvs.strictARP } : null }),
);
export type UvsConfig = Out<typeof CONFIG>;
/** Shared flow state: conntrack/redis-sync.ts defines the options. */
export type RedisConfig = RedisSyncOptions;

/**
 * A service validated once per raw mapping (issue 37): validation of 10,000 services × 10 servers
 * took 170–200 ms on every change. A service's result depends on its mapping and on the sections
 * validated before the services (dataplane, ipvs, …): it is remembered by the mapping object's
 * identity while those sections stay the same. The control worker's document keeps an unchanged
 * service's mapping (control/yaml-items.ts reuses it across reloads, edits copy only the services
 * they touch), and nothing changes a mapping or a validated service in place. Only
 * validateRemembering() uses it: other callers may change a document and validate it again.
 */
let remembering = false;

function remembered<T>(inner: Schema<T, false>): Schema<T, false> {
  const contexts = new WeakMap<object, string>();
  let context = '';
  let seen = new WeakMap<object, T>();
  return {
    ...inner,
    parse(v, path, scope) {
      const root = rootOf(scope)?.out;
      if (!remembering || !root || v === null || typeof v !== 'object' || Array.isArray(v)) return inner.parse(v, path, scope);
      let key = contexts.get(root);
      if (key === undefined) {
        const { services: _s, ...sections } = root;
        key = JSON.stringify(sections);
        contexts.set(root, key);
      }
      if (key !== context) {
        context = key;
        seen = new WeakMap();
      }
      const hit = seen.get(v);
      if (hit !== undefined) return hit;
      const out = inner.parse(v, path, scope);
      seen.set(v, out);
      return out;
    },
  };
}

// ── entry points ─────────────────────────────────────────────────────────────────────────────
/** Validates a parsed YAML document and fills defaults. Throws UvsError naming the field. */
export function validateConfig(doc: unknown): UvsConfig {
  return run(CONFIG, doc);
}

/**
 * validateConfig for a document whose service mappings are never changed in place (the control
 * worker's, control/offload-jobs.ts): a mapping validated before, under the same other sections,
 * gives the same service without being validated again.
 */
export function validateRemembering(doc: unknown): UvsConfig {
  remembering = true;
  try {
    return run(CONFIG, doc);
  } finally {
    remembering = false;
  }
}

/** One service, as the API gives it (`path`: where it sits in the request, for the messages). */
export function validateService(v: unknown, path: string): ServiceConfig {
  return run(SERVICE, v, path);
}

/** One real server of a service with this port, forwarding and PROXY protocol default. */
export function validateRealServer(
  v: unknown,
  path: string,
  servicePort: number,
  fwd: Forwarding,
  servicePp?: ProxyProtocol,
): RealServerConfig {
  const service = { port: servicePort, forwarding: fwd, ...(servicePp ? { proxyProtocol: servicePp } : {}) };
  return run(REAL_SERVER, v, path, 'UVS_ERR_CONFIG_INVALID', { out: service, up: null });
}

/** An error outside the schema (the file's kubeProxyConfigFile reference). */
function invalid(path: string, reason: string): never {
  throw new UvsError('UVS_ERR_CONFIG_INVALID', reason, path);
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
    doc = parseConfigYaml(text); // its depth checked, only the services not seen in the last parse (control/yaml-items.ts)
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
  if (typeof ref !== 'string' || ref === '') invalid('kubeProxyConfigFile', 'must be a file path');
  if (doc.ipvs !== undefined) invalid('kubeProxyConfigFile', 'conflicts with the inline ipvs: section: use one of them');
  const path = ref.startsWith('/') ? ref : join(dirname(file), ref);
  let kp: unknown;
  try {
    kp = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new UvsError('UVS_ERR_CONFIG_READ', `${path}: ${(e as Error).message}`, 'kubeProxyConfigFile');
  }
  if (!isObj(kp) || kp.kind !== 'KubeProxyConfiguration')
    invalid('kubeProxyConfigFile', `${path} is not a KubeProxyConfiguration (kind: ${isObj(kp) ? JSON.stringify(kp.kind) : 'none'})`);
  const { kubeProxyConfigFile: _ref, ...rest } = doc;
  return kp.ipvs === undefined ? rest : { ...rest, ipvs: kp.ipvs };
}
