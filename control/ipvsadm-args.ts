/**
 * ipvsadm's command line, parsed as ipvsadm 1.31 parses it (popt + parse_options /
 * process_options in ipvsadm.c, config_stream.c; docs/ipvs-semantics.md §6.1): the same
 * options, short and long, clustered the way popt allows (`-Ln`, `-At VIP:80`, `-p` with an
 * optional timeout), the same checks in the same order, the same messages and exit statuses,
 * with `uvsadm` as the program name. Pure: argv in, a command (API operations or a listing) or an
 * error (stderr text and exit status) out, so it is tested without a daemon.
 *
 * Exit statuses, as ipvsadm's: 255 for usage errors (tryhelp_exit(-1), popt errors), 2 for
 * fail(2, …) — bad values, illegal option combinations — and for what uvs cannot do.
 *
 * Deviations (each is said in the help text or the README):
 * - the default forwarding method is masquerading (-m), not direct routing (-g): a TUN device
 *   carries no layer-2 frames, so uvs cannot route directly;
 * - host names come from /etc/hosts only (the caller's lookupHost), never DNS; ports may be
 *   /etc/services names (lookupService);
 * - IPv6 addresses are written back in one spelling (RFC 5952), so lookups match uvsd's;
 * - --tun-type gue|gre (and so --tun-port, --tun-*csum) are refused: uvs tunnels in IPIP only;
 * - a second command (`-A … -D`) says `multiple commands specified` (popt-built ipvsadm says
 *   `invalid option`);
 * - `-r` without a port takes the service's port wherever -t/-u comes on the line;
 * - `--timeout`, `--drain`, `--health`, `--defense` and `--workers` may come first (they imply -L);
 * - in -R input, blank lines and lines starting with # are skipped.
 */
import { isIPv6 } from 'node:net';
import { formatIPv6, parseIPv6 } from '../net/addr';
import { DEFAULT_SCHEDULER, flagScheduler, SCHED_FLAG_NAMES } from '../schedulers/registry';
import { DEFAULT_FORWARDING, DEFAULT_PROTOCOL } from './config';
import type { EditOp, ServiceRef } from './edits';

export const PROGRAM = 'uvsadm';
export const VERSION = 'v0.1.0';

/** ipvsadm's MAX_TIMEOUT: 31 days. */
const MAX_TIMEOUT = 86400 * 31;
/** IPVS_SVC_PERSISTENT_TIMEOUT: `-p` without a value. */
export const DEFAULT_PERSISTENT_TIMEOUT = 360;
const INT_MAX = 0x7fffffff;

// ── commands and options (ipvsadm.c's CMD_*, OPTC_* and commands_v_options) ──────────────────
const CMD = {
  NONE: 0,
  ADD: 1,
  EDIT: 2,
  DEL: 3,
  FLUSH: 4,
  LIST: 5,
  ADDDEST: 6,
  DELDEST: 7,
  EDITDEST: 8,
  TIMEOUT: 9,
  STARTDAEMON: 10,
  STOPDAEMON: 11,
  RESTORE: 12,
  SAVE: 13,
  ZERO: 14,
  // uvs's own commands
  RELOAD: 15,
  KILLWORKER: 16,
  MAINTENANCE: 17,
} as const;
type Cmd = (typeof CMD)[keyof typeof CMD];
const CMD_NAMES = ['add-service', 'edit-service', 'delete-service', 'flush', 'list', 'add-server', 'delete-server', 'edit-server', 'set', 'start-daemon', 'stop-daemon', 'restore', 'save', 'zero', 'reload', 'kill-worker', 'maintenance'];

/** Option columns, in ipvsadm's order (the order its checks run in), then uvs's two listings. */
const OPT_NAMES = [
  'numeric',
  'connection',
  'service-address',
  'scheduler',
  'persistent',
  'netmask',
  'real-server',
  'forwarding-method',
  'weight',
  'u-threshold',
  'l-threshold',
  'mcast-interface',
  'timeout',
  'daemon',
  'stats',
  'rate',
  'thresholds',
  'persistent-conn',
  'nosort',
  'syncid',
  'exact',
  'ops',
  'pe',
  'sched-flags',
  'mcast-group',
  'mcast-port',
  'mcast-ttl',
  'sync-maxlen',
  'tun-info',
  'tun-type',
  'tun-port',
  'tun-nocsum',
  'tun-csum',
  'tun-remcsum',
  'drain',
  'health',
  'defense',
  'workers',
  'proxy-protocol',
] as const;
type OptName = (typeof OPT_NAMES)[number];
const OPT = Object.fromEntries(OPT_NAMES.map((n, i) => [n, i])) as Record<OptName, number>;

/** One row of commands_v_options: '+' compulsory, 'x' illegal, '1' exclusive, ' ' optional. */
function row(allowed: Partial<Record<OptName, '+' | '1' | ' '>>): string {
  return OPT_NAMES.map((n) => allowed[n] ?? 'x').join('');
}
const SERVER_OPTS = { 'service-address': '+', 'real-server': '+', 'forwarding-method': ' ', weight: ' ', 'u-threshold': ' ', 'l-threshold': ' ', 'tun-type': ' ', 'tun-port': ' ', 'tun-nocsum': ' ', 'tun-csum': ' ', 'tun-remcsum': ' ', 'proxy-protocol': ' ' } as const;
const SERVICE_OPTS = { 'service-address': '+', scheduler: ' ', persistent: ' ', netmask: ' ', ops: ' ', pe: ' ', 'sched-flags': ' ' } as const;
const COMMANDS_V_OPTIONS: Record<number, string> = {
  [CMD.ADD]: row(SERVICE_OPTS),
  [CMD.EDIT]: row(SERVICE_OPTS),
  [CMD.DEL]: row({ 'service-address': '+' }),
  [CMD.FLUSH]: row({}),
  [CMD.LIST]: row({
    numeric: ' ',
    connection: '1',
    'service-address': '1',
    timeout: '1',
    daemon: '1',
    stats: ' ',
    rate: ' ',
    thresholds: ' ',
    'persistent-conn': ' ',
    nosort: ' ',
    syncid: ' ',
    exact: ' ',
    'tun-info': ' ',
    drain: '1',
    health: '1',
    defense: '1',
    workers: '1',
  }),
  [CMD.ADDDEST]: row(SERVER_OPTS),
  [CMD.DELDEST]: row({ 'service-address': '+', 'real-server': '+' }),
  [CMD.EDITDEST]: row(SERVER_OPTS),
  [CMD.TIMEOUT]: row({}),
  [CMD.STARTDAEMON]: row({ 'mcast-interface': ' ', syncid: ' ', 'mcast-group': ' ', 'mcast-port': ' ', 'mcast-ttl': ' ', 'sync-maxlen': ' ' }),
  [CMD.STOPDAEMON]: row({ syncid: ' ' }),
  [CMD.RESTORE]: row({}),
  [CMD.SAVE]: row({ numeric: ' ' }),
  [CMD.ZERO]: row({ 'service-address': ' ' }),
  [CMD.RELOAD]: row({}),
  [CMD.KILLWORKER]: row({}),
  [CMD.MAINTENANCE]: row({}),
};

/** tunnel_types_v_options: rows ipip, gue, gre; columns tun-port, tun-nocsum, tun-csum, tun-remcsum. */
const TUN_NAMES = ['ipip', 'gue', 'gre'];
const TUN_OPTS: OptName[] = ['tun-port', 'tun-nocsum', 'tun-csum', 'tun-remcsum'];
const TUNNEL_V_OPTIONS = ['xxxx', '+111', 'x11x'];

// ── popt ─────────────────────────────────────────────────────────────────────────────────────
/** 0 = no argument, 1 = required, 2 = optional (POPT_ARGFLAG_OPTIONAL). */
interface OptDef {
  long: string | null;
  short: string | null;
  arg: 0 | 1 | 2;
  tag: string;
}
const d = (long: string | null, short: string | null, arg: 0 | 1 | 2, tag?: string): OptDef => ({ long, short, arg, tag: tag ?? short ?? long! });
/** ipvsadm's options_table, in its order (a long name listed twice, like "list", finds the first). */
const OPTIONS: OptDef[] = [
  d('add-service', 'A', 0),
  d('edit-service', 'E', 0),
  d('delete-service', 'D', 0),
  d('clear', 'C', 0),
  d('list', 'L', 0),
  d('list', 'l', 0),
  d('zero', 'Z', 0),
  d('add-server', 'a', 0),
  d('edit-server', 'e', 0),
  d('delete-server', 'd', 0),
  d('set', null, 0),
  d('help', 'h', 0),
  d('version', 'v', 0),
  d('restore', 'R', 0),
  d('save', 'S', 0),
  d('start-daemon', null, 1),
  d('stop-daemon', null, 1),
  d('tcp-service', 't', 1),
  d('udp-service', 'u', 1),
  d('sctp-service', null, 1),
  d('fwmark-service', 'f', 1),
  d('scheduler', 's', 1),
  d('persistent', 'p', 2),
  d('netmask', 'M', 1),
  d('real-server', 'r', 1),
  d('masquerading', 'm', 0),
  d('fullnat', null, 0), // uvs: full-NAT (source NAT to uvsd's pool), no ipvsadm equivalent
  d('ipip', 'i', 0),
  d('gatewaying', 'g', 0),
  d('weight', 'w', 1),
  d('u-threshold', 'x', 1),
  d('l-threshold', 'y', 1),
  d('numeric', 'n', 0),
  d('connection', 'c', 0),
  d('mcast-interface', null, 1),
  d('syncid', null, 1),
  d('timeout', null, 0),
  d('daemon', null, 0),
  d('stats', null, 0),
  d('rate', null, 0),
  d('thresholds', null, 0),
  d('persistent-conn', null, 0),
  d('nosort', null, 0),
  d('sort', null, 0),
  d('exact', 'X', 0),
  d('ipv6', '6', 0),
  d('ops', 'o', 0),
  d('pe', null, 1),
  d('sched-flags', 'b', 1),
  d('mcast-group', null, 1),
  d('mcast-port', null, 1),
  d('mcast-ttl', null, 1),
  d('sync-maxlen', null, 1),
  d('tun-info', null, 0),
  d('tun-type', null, 1),
  d('tun-port', null, 1),
  d('tun-nocsum', null, 0),
  d('tun-csum', null, 0),
  d('tun-remcsum', null, 0),
  // uvs's additions
  d('drain', null, 0),
  d('health', null, 0),
  d('defense', null, 0),
  d('workers', null, 0),
  d('proxy-protocol', null, 1), // full-NAT TCP: PROXY protocol header to the real server
  d('reload', null, 0),
  d('kill-worker', null, 1),
  d('maintenance', null, 1),
];

type Token = { t: 'opt'; tag: string; arg: string | null; text: string } | { t: 'arg'; v: string } | { t: 'err'; text: string; why: string };

const POPT_BADOPT = 'unknown option';
const POPT_NOARG = 'missing argument';
const POPT_UNWANTEDARG = 'option does not take an argument';

/**
 * poptGetNextOpt over the whole line: options in order, leftovers as arguments, and the first
 * error last (popt stops there). An option's argument is `--long=ARG`, the rest of a short
 * cluster (`-w3`, `-p=60`), or the next word — for an optional argument only if that word does
 * not start with '-'.
 */
function tokenize(argv: string[]): Token[] {
  const out: Token[] = [];
  let rest = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (rest || a[0] !== '-' || a === '-') {
      out.push({ t: 'arg', v: a });
      continue;
    }
    if (a === '--') {
      rest = true;
      continue;
    }
    const next = (def: OptDef): string | null | undefined => {
      if (i + 1 < argv.length && !(def.arg === 2 && argv[i + 1]![0] === '-')) return argv[++i]!;
      return def.arg === 1 ? undefined : null;
    };
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
      const def = OPTIONS.find((o) => o.long === name);
      if (!def) return [...out, { t: 'err', text: a, why: POPT_BADOPT }];
      let arg: string | null | undefined = eq < 0 ? null : a.slice(eq + 1);
      if (def.arg === 0 && arg !== null) return [...out, { t: 'err', text: a, why: POPT_UNWANTEDARG }];
      if (def.arg !== 0 && arg === null) arg = next(def);
      if (arg === undefined) return [...out, { t: 'err', text: a, why: POPT_NOARG }];
      out.push({ t: 'opt', tag: def.tag, arg, text: a });
      continue;
    }
    for (let k = 1; k < a.length; k++) {
      const def = OPTIONS.find((o) => o.short === a[k]);
      if (!def) return [...out, { t: 'err', text: a, why: POPT_BADOPT }];
      if (def.arg === 0) {
        out.push({ t: 'opt', tag: def.tag, arg: null, text: a });
        continue;
      }
      let arg: string | null | undefined;
      if (k + 1 < a.length) arg = a.slice(k + 1 + (a[k + 1] === '=' ? 1 : 0));
      else arg = next(def);
      if (arg === undefined) return [...out, { t: 'err', text: a, why: POPT_NOARG }];
      out.push({ t: 'opt', tag: def.tag, arg, text: a });
      break;
    }
  }
  return out;
}

const COMMAND_TAGS: Record<string, Cmd> = {
  A: CMD.ADD,
  E: CMD.EDIT,
  D: CMD.DEL,
  a: CMD.ADDDEST,
  e: CMD.EDITDEST,
  d: CMD.DELDEST,
  C: CMD.FLUSH,
  L: CMD.LIST,
  l: CMD.LIST,
  Z: CMD.ZERO,
  set: CMD.TIMEOUT,
  R: CMD.RESTORE,
  S: CMD.SAVE,
  'start-daemon': CMD.STARTDAEMON,
  'stop-daemon': CMD.STOPDAEMON,
  reload: CMD.RELOAD,
  'kill-worker': CMD.KILLWORKER,
  maintenance: CMD.MAINTENANCE,
};

// ── results ──────────────────────────────────────────────────────────────────────────────────
export interface ListFormat {
  numeric: boolean;
  stats: boolean;
  rate: boolean;
  thresholds: boolean;
  persistentConn: boolean;
  tunInfo: boolean;
  exact: boolean;
  nosort: boolean;
}

export type Command =
  | { kind: 'help'; text: string }
  | { kind: 'version'; text: string }
  | { kind: 'list'; what: 'services' | 'connections' | 'timeout' | 'daemon' | 'drain' | 'health' | 'defense' | 'workers'; service?: ServiceRef; format: ListFormat }
  /** -S; without -n names are printed (as the listings). */
  | { kind: 'save'; numeric: boolean }
  | { kind: 'restore' }
  /** -A -E -D -C -a -e -d --set: one batch. */
  | { kind: 'edit'; command: string; ops: EditOp[] }
  | { kind: 'zero'; service?: ServiceRef }
  | { kind: 'reload' }
  | { kind: 'killWorker'; worker: string }
  /** uvs: node maintenance (withdraw the announcement, keep forwarding), its status, or a wait until idle. */
  | { kind: 'maintenance'; action: 'on' | 'off' | 'status' | 'wait' };

export type ParseResult = { ok: true; command: Command } | { ok: false; stderr: string; exit: number };

export interface ParseEnv {
  /** Program name in messages (argv[0] of ipvsadm). */
  program?: string;
  /** Host name → dotted IPv4 (ipvsadm's gethostbyname); uvsadm reads /etc/hosts. */
  lookupHost?: (name: string) => string | null;
  /** Service name → port for tcp/udp/sctp (getservbyname); uvsadm reads /etc/services. */
  lookupService?: (name: string, protocol: string) => number | null;
  /** Parsing a line of -R input (a -R there is a usage error, as in ipvsadm). */
  readingStdin?: boolean;
}

class Fail {
  constructor(
    readonly stderr: string,
    readonly exit: number,
  ) {}
}
/** ipvsadm's fail(2, …). */
function fail(msg: string): never {
  throw new Fail(`${msg}\n`, 2);
}
function tryHelp(program: string): never {
  throw new Fail(`Try \`${program} -h' or '${program} --help' for more information.\n`, 255);
}
/** What uvs cannot do: said plainly, exit 2. */
function unsupported(msg: string): never {
  throw new Fail(`${PROGRAM}: ${msg}\n`, 2);
}

// ── value parsers (ipvsadm.c's, on strings) ──────────────────────────────────────────────────
/** string_to_number(): strtol base 10, all of the string, within [min, max]; else -1. */
export function stringToNumber(s: string, min: number, max: number): number {
  if (!/^[ \t\n\v\f\r]*[+-]?\d+$/.test(s)) return -1;
  const n = Number(s.trim());
  return Number.isSafeInteger(n) && n >= min && n <= max ? n + 0 : -1;
}

function parseTimeout(buf: string | null, min: number, max: number): number {
  if (buf === null) return DEFAULT_PERSISTENT_TIMEOUT;
  const i = stringToNumber(buf, min, max);
  if (i === -1) fail(`invalid timeout value \`${buf}' specified`);
  return i;
}

/**
 * glibc inet_aton(): 1–4 parts separated by dots, each decimal, octal (leading 0) or hex (0x);
 * the last part fills the remaining bytes ("10.1" = 10.0.0.1). Returns the address as a number.
 */
export function inetAton(s: string): number | null {
  const parts: number[] = [];
  let i = 0;
  let val = 0;
  let digit = false;
  const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';
  for (;;) {
    let c = s[i];
    if (!isDigit(c)) return null;
    val = 0;
    digit = false;
    let base = 10;
    if (c === '0') {
      c = s[++i];
      if (c === 'x' || c === 'X') {
        base = 16;
        c = s[++i];
      } else {
        base = 8;
        digit = true;
      }
    }
    for (;;) {
      if (isDigit(c)) {
        if (base === 8 && (c === '8' || c === '9')) return null;
        val = val * base + Number(c);
      } else if (base === 16 && c !== undefined && /^[0-9a-fA-F]$/.test(c)) val = val * 16 + parseInt(c, 16);
      else break;
      if (val > 0xffffffff) return null;
      digit = true;
      c = s[++i];
    }
    if (c === '.') {
      if (parts.length > 2 || val > 0xff) return null;
      parts.push(val);
      i++;
      continue;
    }
    if (c !== undefined && !/^\s$/.test(c)) return null;
    break;
  }
  if (!digit) return null;
  if (val > [0xffffffff, 0xffffff, 0xffff, 0xff][parts.length]!) return null;
  return parts.reduce((a, p, k) => a + p * 2 ** (24 - 8 * k), val);
}

function dotted(a: number): string {
  return [a >>> 24, (a >>> 16) & 255, (a >>> 8) & 255, a & 255].join('.');
}

interface Endpoint {
  af: 4 | 6;
  address: string;
  port: number;
}
const SERVICE_ADDR = 1;
const SERVICE_PORT = 2;

/** parse_service(): host[:port] or [IPv6]:port; a string of digits only is no address. */
function parseService(buf: string, protocol: string, env: ParseEnv): { bits: number; ep: Endpoint } {
  const none = { bits: 0, ep: { af: 4 as const, address: '', port: 0 } };
  if (/^\d*$/.test(buf)) return none;
  let host = buf;
  let portStr: string | null = null;
  if (host[0] === '[') {
    const close = host.indexOf(']');
    if (close < 0 || host[close + 1] !== ':') return none;
    portStr = host.slice(close + 2);
    host = host.slice(1, close);
  }
  let ep: Endpoint;
  // One spelling per IPv6 address (RFC 5952, as uvsd stores it): every lookup — -L, -Z, -D, -a
  // — then finds "[FD00:200:0::10]" as the service "[fd00:200::10]" (inet_pton compares bytes).
  if (isIPv6(host)) ep = { af: 6, address: formatIPv6(parseIPv6(host)!), port: 0 };
  else {
    // As in ipvsadm, the port of "[1.2.3.4]:80" is looked for inside the brackets (and not found).
    const c = host.lastIndexOf(':');
    portStr = c < 0 ? null : host.slice(c + 1);
    if (c >= 0) host = host.slice(0, c);
    const a = inetAton(host);
    const addr = a !== null ? dotted(a) : (env.lookupHost?.(host) ?? null);
    if (addr === null) return none;
    ep = { af: 4, address: addr, port: 0 };
  }
  let bits = SERVICE_ADDR;
  if (portStr !== null) {
    bits |= SERVICE_PORT;
    const n = stringToNumber(portStr, 0, 65535);
    const p = n !== -1 ? n : (env.lookupService?.(portStr, protocol) ?? null);
    if (p === null) return none;
    ep.port = p;
  }
  return { bits, ep };
}

/** parse_netmask(): inet_aton or a host name. */
function parseNetmask(buf: string, env: ParseEnv): string | null {
  const a = inetAton(buf);
  if (a !== null) return dotted(a);
  return env.lookupHost?.(buf) ?? null;
}

/** parse_sched_flags(): sh-* need -s sh and mh-* need -s mh, in the same command (default wlc). */
function parseSchedFlags(sched: string, arg: string): string[] {
  const s = sched || DEFAULT_SCHEDULER;
  const out: string[] = [];
  for (const flag of arg.split(',').filter((f) => f !== '')) {
    if (!SCHED_FLAG_NAMES.includes(flag)) fail(`invalid scheduler flag \`${flag}'`);
    const needs = flagScheduler(flag);
    if (needs !== null && s !== needs) fail(`incompatible scheduler flag \`${flag}'`);
    if (!out.includes(flag)) out.push(flag);
  }
  return out;
}

// ── the command line ─────────────────────────────────────────────────────────────────────────
interface Entry {
  cmd: Cmd;
  options: Set<number>;
  svc: { protocol: 'tcp' | 'udp' | 'sctp'; af: 4 | 6; address: string; port: number; fwmark: number; persistent: boolean; timeout: number; netmask: string | number; sched: string; pe: string; ops: boolean; schedFlags: string[] };
  dest: { af: 4 | 6; address: string; port: number; portGiven: boolean; fwd: 'masq' | 'route' | 'tunnel' | 'fullnat' | null; weight: number; uThreshold: number; lThreshold: number; tunType: number; pp: 'v1' | 'v2' | 'none' | null };
  timeouts: { tcp: number; tcpFin: number; udp: number };
  daemon: boolean;
  worker: string;
  maintenance: 'on' | 'off' | 'status' | 'wait';
  list: ListFormat;
}

/** Splits uvs's `--socket PATH` (or `--socket=PATH`) out of the arguments, wherever it is. */
export function splitSocket(argv: string[]): { socket: string | null; rest: string[] } | { error: string } {
  let socket: string | null = null;
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--') {
      rest.push(...argv.slice(i));
      break;
    }
    if (a === '--socket') {
      if (i + 1 >= argv.length) return { error: `${a}: ${POPT_NOARG}\n` };
      socket = argv[++i]!;
    } else if (a.startsWith('--socket=')) socket = a.slice('--socket='.length);
    else rest.push(a);
  }
  return { socket, rest };
}

/** Parses one ipvsadm command line (without the program name). */
export function parseArgs(argv: string[], env: ParseEnv = {}): ParseResult {
  const program = env.program ?? PROGRAM;
  try {
    return { ok: true, command: parse(argv, env, program) };
  } catch (e) {
    if (e instanceof Fail) return { ok: false, stderr: e.stderr, exit: e.exit };
    throw e;
  }
}

function parse(argv: string[], env: ParseEnv, program: string): Command {
  const noFormat: ListFormat = { numeric: false, stats: false, rate: false, thresholds: false, persistentConn: false, tunInfo: false, exact: false, nosort: false };
  // No argument at all: list the table, without -n (names).
  if (argv.length === 0) return { kind: 'list', what: 'services', format: noFormat };
  const ce: Entry = {
    cmd: CMD.NONE,
    options: new Set(),
    svc: { protocol: 'tcp', af: 4, address: '', port: 0, fwmark: 0, persistent: false, timeout: 0, netmask: '255.255.255.255', sched: '', pe: '', ops: false, schedFlags: [] },
    dest: { af: 4, address: '', port: 0, portGiven: false, fwd: null, weight: 1, uThreshold: 0, lThreshold: 0, tunType: 0, pp: null },
    timeouts: { tcp: 0, tcpFin: 0, udp: 0 },
    daemon: false,
    worker: '',
    maintenance: 'status',
    list: { ...noFormat },
  };
  const tokens = tokenize(argv);
  const leftovers: string[] = [];
  let schedFlagsArg = '';
  let first = true;

  const setOption = (name: OptName) => {
    const o = OPT[name];
    if (ce.options.has(o)) fail(`multiple '${name}' options specified`);
    ce.options.add(o);
  };

  for (const tok of tokens) {
    if (tok.t === 'arg') {
      leftovers.push(tok.v);
      continue;
    }
    if (first) {
      // The first option must be the command (ipvsadm's first poptGetNextOpt).
      first = false;
      if (tok.t === 'err') tryHelp(program);
      if (tok.tag === 'h') return { kind: 'help', text: usage(program) };
      if (tok.tag === 'v') return { kind: 'version', text: versionLine() };
      const cmd = COMMAND_TAGS[tok.tag];
      if (cmd !== undefined) {
        ce.cmd = cmd;
        if (cmd === CMD.STARTDAEMON && tok.arg !== 'master' && tok.arg !== 'backup') fail('illegal start-daemon parameter specified');
        if (cmd === CMD.STOPDAEMON && tok.arg !== 'master' && tok.arg !== 'backup') fail('illegal start_daemon specified');
        if (cmd === CMD.KILLWORKER) ce.worker = tok.arg ?? '';
        if (cmd === CMD.MAINTENANCE) {
          if (!['on', 'off', 'status', 'wait'].includes(tok.arg ?? '')) fail(`illegal maintenance parameter \`${tok.arg ?? ''}' specified (on, off, status or wait)`);
          ce.maintenance = tok.arg as Entry['maintenance'];
        }
        continue;
      }
      // uvs: `uvsadm --timeout`, `--drain`, `--health`, `--defense`, `--workers` list without -L.
      if (tok.tag !== 'timeout' && tok.tag !== 'drain' && tok.tag !== 'health' && tok.tag !== 'defense' && tok.tag !== 'workers') tryHelp(program);
      ce.cmd = CMD.LIST;
    }
    if (tok.t === 'err') throw new Fail(`${tok.text}: ${tok.why}\n`, 255);
    const arg = tok.arg ?? '';
    switch (tok.tag) {
      case 't':
      case 'u':
      case 'sctp-service': {
        setOption('service-address');
        ce.svc.protocol = tok.tag === 't' ? 'tcp' : tok.tag === 'u' ? 'udp' : 'sctp';
        const p = parseService(arg, ce.svc.protocol, env);
        if (!(p.bits & SERVICE_ADDR)) fail('illegal virtual server address[:port] specified');
        ce.svc.af = p.ep.af;
        ce.svc.address = p.ep.address;
        if (p.bits & SERVICE_PORT) ce.svc.port = p.ep.port;
        if (p.ep.af === 6) ce.svc.netmask = 128;
        break;
      }
      case 'f': {
        setOption('service-address');
        const n = /^[ \t\n\v\f\r]*[+-]?\d+$/.test(arg) ? Number(arg.trim()) : NaN;
        if (!(n > 0 && n <= 0xffffffff)) fail(`invalid fwmark value \`${arg}' specified`);
        ce.svc.fwmark = n;
        ce.svc.protocol = 'tcp';
        ce.svc.af = 4;
        break;
      }
      case 's':
        setOption('scheduler');
        ce.svc.sched = arg.slice(0, 15); // IP_VS_SCHEDNAME_MAXLEN - 1
        break;
      case 'p':
        setOption('persistent');
        ce.svc.persistent = true;
        ce.svc.timeout = parseTimeout(tok.arg, 1, MAX_TIMEOUT);
        break;
      case 'M':
        setOption('netmask');
        if (ce.svc.af !== 6) {
          const m = parseNetmask(arg, env);
          if (m === null) fail('illegal virtual server persistent mask specified');
          ce.svc.netmask = m;
        } else {
          const n = parseInt(arg, 10) || 0; // atoi
          if (n < 1 || n > 128) fail('illegal ipv6 netmask specified');
          ce.svc.netmask = n;
        }
        break;
      case 'r': {
        setOption('real-server');
        const p = parseService(arg, ce.svc.protocol, env);
        if (!(p.bits & SERVICE_ADDR)) fail('illegal real server address[:port] specified');
        ce.dest.af = p.ep.af;
        ce.dest.address = p.ep.address;
        ce.dest.port = p.ep.port;
        ce.dest.portGiven = (p.bits & SERVICE_PORT) !== 0;
        break;
      }
      case 'i':
      case 'g':
      case 'm':
      case 'fullnat':
        setOption('forwarding-method');
        ce.dest.fwd = tok.tag === 'i' ? 'tunnel' : tok.tag === 'g' ? 'route' : tok.tag === 'fullnat' ? 'fullnat' : 'masq';
        break;
      case 'w':
        setOption('weight');
        if ((ce.dest.weight = stringToNumber(arg, 0, 65535)) === -1) fail('illegal weight specified');
        break;
      case 'x':
        setOption('u-threshold');
        if ((ce.dest.uThreshold = stringToNumber(arg, 0, INT_MAX)) === -1) fail('illegal u_threshold specified');
        break;
      case 'y':
        setOption('l-threshold');
        if ((ce.dest.lThreshold = stringToNumber(arg, 0, INT_MAX)) === -1) fail('illegal l_threshold specified');
        break;
      case 'c':
        setOption('connection');
        break;
      case 'n':
        setOption('numeric');
        ce.list.numeric = true;
        break;
      case 'mcast-interface':
        setOption('mcast-interface');
        break;
      case 'syncid':
        setOption('syncid');
        if (stringToNumber(arg, 0, 255) === -1) fail('illegal syncid specified');
        break;
      case 'timeout':
        setOption('timeout');
        break;
      case 'daemon':
        setOption('daemon');
        break;
      case 'stats':
        setOption('stats');
        ce.list.stats = true;
        break;
      case 'rate':
        setOption('rate');
        ce.list.rate = true;
        break;
      case 'thresholds':
        setOption('thresholds');
        ce.list.thresholds = true;
        break;
      case 'persistent-conn':
        setOption('persistent-conn');
        ce.list.persistentConn = true;
        break;
      case 'nosort':
        setOption('nosort');
        ce.list.nosort = true;
        break;
      case 'sort':
        break; // the default; a no-op for compatibility
      case 'X':
        setOption('exact');
        ce.list.exact = true;
        break;
      case '6':
        if (!ce.svc.fwmark) fail('-6 used before -f\n');
        ce.svc.af = 6;
        ce.svc.netmask = 128;
        break;
      case 'o':
        setOption('ops');
        ce.svc.ops = true;
        break;
      case 'pe':
        setOption('pe');
        ce.svc.pe = arg;
        break;
      case 'b':
        setOption('sched-flags');
        schedFlagsArg = arg;
        break;
      case 'mcast-group': {
        setOption('mcast-group');
        if (arg.includes(':')) {
          if (!isIPv6(arg) || !/^ff/i.test(arg)) fail(`invalid IPv6 mcast-group \`${arg}'`);
        } else {
          const a = /^\d+\.\d+\.\d+\.\d+$/.test(arg) ? inetAton(arg) : null;
          if (a === null || a >>> 28 !== 0xe) fail(`invalid IPv4 mcast-group \`${arg}'`);
        }
        break;
      }
      case 'mcast-port':
        setOption('mcast-port');
        if (stringToNumber(arg, 1, 65535) === -1) fail('illegal mcast-port specified');
        break;
      case 'mcast-ttl':
        setOption('mcast-ttl');
        if (stringToNumber(arg, 1, 255) === -1) fail('illegal mcast-ttl specified');
        break;
      case 'sync-maxlen':
        setOption('sync-maxlen');
        if (stringToNumber(arg, 1, 65535 - 20 - 8) === -1) fail('illegal sync-maxlen specified');
        break;
      case 'tun-info':
        setOption('tun-info');
        ce.list.tunInfo = true;
        break;
      case 'proxy-protocol':
        setOption('proxy-protocol');
        if (arg !== 'v1' && arg !== 'v2' && arg !== 'none') fail('illegal proxy protocol specified (v1, v2 or none)');
        ce.dest.pp = arg;
        break;
      case 'tun-type': {
        setOption('tun-type');
        const t = TUN_NAMES.indexOf(arg);
        if (t < 0) fail('illegal tunnel type specified');
        ce.dest.tunType = t;
        break;
      }
      case 'tun-port':
        setOption('tun-port');
        if (stringToNumber(arg, 1, 65535) === -1) fail('illegal tunnel port specified');
        break;
      case 'tun-nocsum':
        setOption('tun-nocsum');
        break;
      case 'tun-csum':
        setOption('tun-csum');
        break;
      case 'tun-remcsum':
        setOption('tun-remcsum');
        break;
      case 'drain':
        setOption('drain');
        break;
      case 'health':
        setOption('health');
        break;
      case 'defense':
        setOption('defense');
        break;
      case 'workers':
        setOption('workers');
        break;
      default:
        // A second command (ipvsadm's set_command).
        fail('multiple commands specified');
    }
  }
  if (first) tryHelp(program); // only arguments, no option

  if (ce.cmd === CMD.TIMEOUT) {
    if (leftovers.length < 3) fail('--set option requires 3 timeout values');
    const [tcp, fin, udp] = leftovers.splice(0, 3) as [string, string, string];
    ce.timeouts = { tcp: parseTimeout(tcp, 0, MAX_TIMEOUT), tcpFin: parseTimeout(fin, 0, MAX_TIMEOUT), udp: parseTimeout(udp, 0, MAX_TIMEOUT) };
  }
  if (leftovers.length) fail(`unexpected argument ${leftovers[0]}`);
  if (schedFlagsArg) ce.svc.schedFlags = parseSchedFlags(ce.svc.sched, schedFlagsArg);

  genericOptCheck(ce.cmd, ce.options);

  const svc = ce.svc;
  if (ce.cmd === CMD.ADD || ce.cmd === CMD.EDIT) {
    if (!svc.fwmark && !svc.port && !svc.persistent) fail('Zero port specified for non-persistent service');
    if (svc.ops && !svc.fwmark && svc.protocol !== 'udp') fail('One-Packet Scheduling is only for UDP virtual services');
    if (!svc.sched) svc.sched = DEFAULT_SCHEDULER;
  }
  // uvs's default method is masq (ipvsadm's is -g, which uvs cannot do).
  const fwd = ce.dest.fwd ?? DEFAULT_FORWARDING;
  if (ce.cmd === CMD.ADDDEST || ce.cmd === CMD.EDITDEST || ce.cmd === CMD.DELDEST) {
    if (!ce.dest.portGiven) ce.dest.port = svc.port;
  }
  if (ce.cmd === CMD.ADDDEST || ce.cmd === CMD.EDITDEST) {
    if (!svc.fwmark && (fwd === 'tunnel' || fwd === 'route')) ce.dest.port = svc.port;
    if (ce.dest.af !== svc.af && fwd !== 'tunnel') fail('Different address family is allowed only for tunneling servers');
    const tunOpts = (['tun-type', 'tun-port', 'tun-nocsum', 'tun-csum', 'tun-remcsum'] as const).some((n) => ce.options.has(OPT[n]));
    if (tunOpts && fwd !== 'tunnel') fail('Tunnel options conflict with forward method');
    tunnelOptCheck(ce.dest.tunType, ce.options);
  }
  if (ce.cmd === CMD.LIST) {
    const has = (...n: OptName[]) => n.some((x) => ce.options.has(OPT[x]));
    if ((has('connection', 'timeout', 'daemon', 'drain', 'health', 'defense', 'workers') && has('stats', 'rate', 'thresholds')) || (has('timeout', 'daemon', 'drain', 'health', 'defense', 'workers') && has('persistent-conn'))) {
      fail('options conflicts in the list command');
    }
  }
  if (ce.cmd === CMD.RESTORE && env.readingStdin) tryHelp(program);

  // What uvs cannot do (the daemon refuses -g, a tunnel without tunnelSource and IPv6 itself, with its reasons).
  if (svc.fwmark) unsupported('fwmark services (-f) are not supported: packets reach uvs through a TUN device, which does not carry netfilter marks');
  if (svc.pe) unsupported('persistence engines (--pe) are not supported');
  if (svc.ops) unsupported('one-packet scheduling (-o/--ops) is not supported yet');
  // -L --daemon lists the sync daemons that run: none, so nothing (ipvsadm's list_daemon prints a
  // line per running one, and monitoring scripts call it). Starting or stopping one is refused.
  if (ce.cmd === CMD.STARTDAEMON || ce.cmd === CMD.STOPDAEMON) {
    unsupported('uvs has no IPVS connection-sync daemon: uvs instances share connection state through Redis instead');
  }
  // Accepted-then-ignored would make a GUE/GRE server an IPIP one behind the operator's back.
  if ((ce.cmd === CMD.ADDDEST || ce.cmd === CMD.EDITDEST) && ce.dest.tunType !== 0) {
    unsupported(`${TUN_NAMES[ce.dest.tunType]} tunnels (--tun-type ${TUN_NAMES[ce.dest.tunType]}) are not supported: uvs encapsulates in IPIP (IPv6: ip6ip6) only, --tun-type ipip`);
  }
  return build(ce, fwd);
}

/** generic_opt_check(): the commands_v_options table, option by option in ipvsadm's order. */
function genericOptCheck(cmd: Cmd, options: Set<number>): void {
  const rowText = COMMANDS_V_OPTIONS[cmd]!;
  const cmdName = CMD_NAMES[cmd - 1]!;
  let last = -1;
  for (let j = 0; j < OPT_NAMES.length; j++) {
    const rule = rowText[j];
    if (!options.has(j)) {
      if (rule === '+') fail(`You need to supply the '${OPT_NAMES[j]}' option for the '${cmdName}' command`);
    } else {
      if (rule === 'x') fail(`Illegal '${OPT_NAMES[j]}' option with the '${cmdName}' command`);
      if (rule === '1') {
        if (last < 0) {
          last = j;
          continue;
        }
        fail(`The option '${OPT_NAMES[j]}' conflicts with the '${OPT_NAMES[last]}' option in the '${cmdName}' command`);
      }
    }
  }
}

/** tunnel_opt_check(). */
function tunnelOptCheck(tunType: number, options: Set<number>): void {
  let last: OptName | null = null;
  TUN_OPTS.forEach((name, j) => {
    const rule = TUNNEL_V_OPTIONS[tunType]![j];
    if (!options.has(OPT[name])) {
      if (rule === '+') fail(`You need to supply the '${name}' option for the '${TUN_NAMES[tunType]}' tunnel type`);
      return;
    }
    if (rule === 'x') fail(`Illegal '${name}' option with the '${TUN_NAMES[tunType]}' tunnel type`);
    if (rule === '1') {
      if (last === null) last = name;
      else fail(`The option '${name}' conflicts with the '${last}' option in the '${TUN_NAMES[tunType]}' tunnel type`);
    }
  });
}

/** The command as API operations or a listing. */
function build(ce: Entry, fwd: 'masq' | 'route' | 'tunnel' | 'fullnat'): Command {
  const svc = ce.svc;
  const ref: ServiceRef = { protocol: svc.protocol, address: svc.address, port: svc.port };
  const hasService = ce.options.has(OPT['service-address']);
  switch (ce.cmd) {
    case CMD.LIST: {
      const has = (n: OptName) => ce.options.has(OPT[n]);
      const what = has('connection') ? 'connections' : has('timeout') ? 'timeout' : has('daemon') ? 'daemon' : has('drain') ? 'drain' : has('health') ? 'health' : has('defense') ? 'defense' : has('workers') ? 'workers' : 'services';
      return { kind: 'list', what, format: ce.list, ...(what === 'services' && hasService ? { service: ref } : {}) };
    }
    case CMD.SAVE:
      return { kind: 'save', numeric: ce.options.has(OPT.numeric) };
    case CMD.RESTORE:
      return { kind: 'restore' };
    case CMD.ZERO:
      return hasService ? { kind: 'zero', service: ref } : { kind: 'zero' };
    case CMD.RELOAD:
      return { kind: 'reload' };
    case CMD.KILLWORKER:
      return { kind: 'killWorker', worker: ce.worker };
    case CMD.MAINTENANCE:
      return { kind: 'maintenance', action: ce.maintenance };
    case CMD.FLUSH:
      return { kind: 'edit', command: 'flush', ops: [{ op: 'clear' }] };
    case CMD.TIMEOUT:
      return { kind: 'edit', command: 'set', ops: [{ op: 'setTimeouts', ...ce.timeouts }] };
    case CMD.DEL:
      return { kind: 'edit', command: 'delete-service', ops: [{ op: 'deleteService', ref }] };
    case CMD.ADD:
    case CMD.EDIT: {
      // -E replaces the settings like the kernel: scheduler (wlc unless -s), flags, persistence.
      const service: Record<string, unknown> = { protocol: svc.protocol, address: svc.address, port: svc.port, scheduler: svc.sched };
      if (svc.schedFlags.length) service.schedFlags = svc.schedFlags;
      if (svc.persistent) service.persistence = svc.timeout;
      // The kernel keeps -M with or without -p (only persistence uses it); -E without -M resets it.
      if (svc.netmask !== (svc.af === 6 ? 128 : '255.255.255.255')) service.netmask = svc.netmask;
      return ce.cmd === CMD.ADD ? { kind: 'edit', command: 'add-service', ops: [{ op: 'addService', service }] } : { kind: 'edit', command: 'edit-service', ops: [{ op: 'editService', service }] };
    }
    case CMD.ADDDEST:
    case CMD.EDITDEST: {
      const dest = ce.dest;
      const realServer: Record<string, unknown> = { address: dest.address, port: dest.port, weight: dest.weight };
      if (ce.cmd === CMD.EDITDEST) {
        // -e replaces every setting of the server, defaults included (weight 1, thresholds 0).
        Object.assign(realServer, { forwarding: fwd, upperThreshold: dest.uThreshold, lowerThreshold: dest.lThreshold });
        // uvs's own setting: kept unless given (it may come from the service's proxyProtocol).
        if (dest.pp !== null) realServer.proxyProtocol = dest.pp;
        return { kind: 'edit', command: 'edit-server', ops: [{ op: 'editRealServer', ref, realServer }] };
      }
      if (fwd !== 'masq') realServer.forwarding = fwd;
      if (dest.uThreshold) realServer.upperThreshold = dest.uThreshold;
      if (dest.lThreshold) realServer.lowerThreshold = dest.lThreshold;
      if (dest.pp !== null) realServer.proxyProtocol = dest.pp;
      return { kind: 'edit', command: 'add-server', ops: [{ op: 'addRealServer', ref, realServer }] };
    }
    case CMD.DELDEST:
      return { kind: 'edit', command: 'delete-server', ops: [{ op: 'deleteRealServer', ref, address: ce.dest.address, port: ce.dest.port }] };
    default:
      throw new Error(`unhandled command ${ce.cmd}`); // start/stop-daemon were refused above
  }
}

// ── -R ───────────────────────────────────────────────────────────────────────────────────────
export interface RestoreLine {
  /** 1-based line number in the input. */
  line: number;
  text: string;
}
export type RestoreResult = { ok: true; ops: EditOp[]; lines: RestoreLine[] } | { ok: false; stderr: string; exit: number; line: number };

/**
 * -R: each line is split on blanks into a command line (config_stream.c), a leading
 * ipvsadm/uvsadm word is dropped, and the editing commands become ONE list of operations — sent
 * as one batch, so a restore is applied whole or not at all (ipvsadm applies line by line and
 * stops at the first failure). `lines[i]` is the line of `ops[i]`.
 */
export function parseRestore(input: string, env: ParseEnv = {}): RestoreResult {
  const ops: EditOp[] = [];
  const lines: RestoreLine[] = [];
  const text = input.split('\n');
  for (let n = 0; n < text.length; n++) {
    const raw = text[n]!;
    const words = raw.split(/[ \t\r]+/).filter((w) => w !== '');
    if (words[0] === 'ipvsadm' || words[0] === PROGRAM) words.shift();
    if (words.length === 0 || words[0]!.startsWith('#')) continue;
    const r = parseArgs(words, { ...env, readingStdin: true });
    if (!r.ok) return { ok: false, stderr: r.stderr, exit: r.exit, line: n + 1 };
    if (r.command.kind !== 'edit') {
      return { ok: false, stderr: `${PROGRAM}: -R: line ${n + 1}: only -A -E -D -C -a -e -d and --set can be restored (in one atomic batch): ${raw.trim()}\n`, exit: 2, line: n + 1 };
    }
    for (const op of r.command.ops) {
      ops.push(op);
      lines.push({ line: n + 1, text: raw.trim() });
    }
  }
  return { ok: true, ops, lines };
}

// ── after the daemon answers ─────────────────────────────────────────────────────────────────
/** Service settings ipvsadm controls; -E replaces them and keeps every other (uvs's own) setting. */
const IPVSADM_SERVICE_KEYS = new Set(['protocol', 'address', 'port', 'scheduler', 'schedFlags', 'persistence', 'netmask', 'realServers', 'mhTableSize']);

/**
 * The API's editService replaces a service's whole entry; uvsadm -E must only replace what ipvsadm
 * sets. So the uvs-only settings of the running document (name, healthCheck, maxDrainTime, …) are
 * carried into each -E operation; mhTableSize only while the scheduler stays mh.
 */
export function keepUvsSettings(ops: EditOp[], doc: unknown): void {
  const list = (doc as { services?: unknown } | null)?.services;
  if (!Array.isArray(list)) return;
  for (const o of ops) {
    if (o.op !== 'editService') continue;
    const cur = list.find(
      (s: Record<string, unknown>) => (s?.protocol ?? DEFAULT_PROTOCOL) === o.service.protocol && s?.address === o.service.address && Number(s?.port) === o.service.port,
    ) as Record<string, unknown> | undefined;
    if (!cur) continue;
    for (const [k, v] of Object.entries(cur)) if (!IPVSADM_SERVICE_KEYS.has(k) && o.service[k] === undefined) o.service[k] = v;
    if (cur.mhTableSize !== undefined && o.service.scheduler === 'mh') o.service.mhTableSize = cur.mhTableSize;
  }
}

/**
 * ipvs_strerror()'s message for a refused operation (what ipvsadm prints), from the daemon's
 * error; undefined when ipvsadm would have nothing better than the daemon's own words.
 */
export function classicError(op: EditOp['op'] | 'zero', err: { code?: string; message?: string; path?: string }): string | undefined {
  const msg = err.message ?? '';
  const noService = /no service /.test(msg);
  if (err.code === 'UVS_ERR_API_CONFLICT') return op === 'addService' ? 'Service already exists' : op === 'addRealServer' ? 'Destination already exists' : undefined;
  if (err.code === 'UVS_ERR_API_NOT_FOUND') {
    if (op === 'editService' || op === 'deleteService' || op === 'zero') return 'No such service';
    if (op === 'addRealServer' || op === 'editRealServer' || op === 'deleteRealServer') return noService ? 'Service not defined' : 'No such destination';
  }
  if (err.code === 'UVS_ERR_CONFIG_INVALID' && /\.scheduler$/.test(err.path ?? '') && /unknown scheduler/.test(msg)) return 'Scheduler or persistence engine not found';
  return undefined;
}

/**
 * The daemon's refusal as uvsadm prints it after ipvsadm's own line: "uvsadm: CODE: reason". The
 * batch's "ops[3]." or "ops[3]: " prefix goes (the operation is the command itself), so
 * "ops[0].realServer.weight: …" reads "realServer.weight: …" and "ops[0]: no real server …"
 * reads "no real server …" (not ": no real server").
 */
export function daemonError(err: { code?: string; message?: string; path?: string }, status: number): string {
  return `${PROGRAM}: ${err.code ?? status}: ${(err.message ?? 'request failed').replace(/^ops\[\d+\](?:\.|: )/, '')}\n`;
}

// ── help ─────────────────────────────────────────────────────────────────────────────────────
export function versionLine(): string {
  return `${PROGRAM} ${VERSION} (ipvsadm v1.31 command line, IPVS v1.2.1 semantics, uvsd over its API socket)\n`;
}

/** usage_exit(): ipvsadm's text, with uvs's differences said where they apply. */
export function usage(p: string = PROGRAM): string {
  return `${versionLine()}Usage:
  ${p} -A|E virtual-service [-s scheduler] [-p [timeout]] [-M netmask] [--pe persistence_engine] [-b sched-flags]
  ${p} -D virtual-service
  ${p} -C
  ${p} -R
  ${p} -S [-n]
  ${p} -a|e virtual-service -r server-address [options]
  ${p} -d virtual-service -r server-address
  ${p} -L|l [virtual-service] [options]
  ${p} -Z [virtual-service]
  ${p} --set tcp tcpfin udp
  ${p} --start-daemon {master|backup} [daemon-options]
  ${p} --stop-daemon {master|backup}
  ${p} -h

Commands:
Either long or short options are allowed.
  --add-service     -A        add virtual service with options
  --edit-service    -E        edit virtual service with options
  --delete-service  -D        delete virtual service
  --clear           -C        clear the whole table
  --restore         -R        restore rules from stdin (uvs: all lines as one atomic change)
  --save            -S        save rules to stdout
  --add-server      -a        add real server with options
  --edit-server     -e        edit real server with options
  --delete-server   -d        delete real server
  --list            -L|-l     list the table
  --zero            -Z        zero counters in a service or all services
  --set tcp tcpfin udp        set connection timeout values
  --start-daemon              start connection sync daemon (uvs: not supported, see below)
  --stop-daemon               stop connection sync daemon (uvs: not supported)
  --help            -h        display this help message

virtual-service:
  --tcp-service|-t  service-address   service-address is host[:port]
  --udp-service|-u  service-address   service-address is host[:port]
  --sctp-service    service-address   service-address is host[:port]
  --fwmark-service|-f fwmark          fwmark is an integer greater than zero (uvs: not supported)

Options:
  --ipv6         -6                   fwmark entry uses IPv6
  --scheduler    -s scheduler         one of rr|wrr|lc|wlc|lblc|lblcr|dh|sh|sed|nq|fo|ovf|mh|twos,
                                      the default scheduler is ${DEFAULT_SCHEDULER}.
  --pe            engine              alternate persistence engine (uvs: not supported)
  --persistent   -p [timeout]         persistent service (default timeout ${DEFAULT_PERSISTENT_TIMEOUT})
  --netmask      -M netmask           persistent granularity mask
  --real-server  -r server-address    server-address is host (and port); no port = the service's
  --gatewaying   -g                   gatewaying (direct routing) (uvs: refused, a TUN device
                                      carries no layer-2 frames)
  --ipip         -i                   ipip encapsulation (tunneling) (uvs: needs dataplane.tunnelSource)
  --masquerading -m                   masquerading (NAT) (the default in uvs; ipvsadm's is -g)
  --fullnat                           (uvs) full-NAT: the source becomes uvsd's pool address and port
  --proxy-protocol v1|v2|none         (uvs) full-NAT TCP: send the real server a PROXY protocol
                                      header with the client's address (-a, -e; -e without it
                                      keeps the server's setting)
  --tun-type      type                one of ipip|gue|gre,
                                      the default tunnel type is ipip (uvs: ipip only)
  --tun-port      port                tunnel destination port (uvs: gue only, not supported)
  --tun-nocsum                        tunnel encapsulation without checksum (uvs: not supported)
  --tun-csum                          tunnel encapsulation with checksum (uvs: not supported)
  --tun-remcsum                       tunnel encapsulation with remote checksum (uvs: not supported)
  --weight       -w weight            capacity of real server
  --u-threshold  -x uthreshold        upper threshold of connections
  --l-threshold  -y lthreshold        lower threshold of connections
  --connection   -c                   output of current IPVS connections
  --timeout                           output of timeout (tcp tcpfin udp)
  --daemon                            output of daemon information (uvs: none runs, so nothing)
  --stats                             output of statistics information
  --rate                              output of rate information (uvsd's estimator: the
                                      kernel's, every 2 s, EWMA weight 1/4)
  --exact                             expand numbers (display exact values)
  --thresholds                        output of thresholds information
  --persistent-conn                   output of persistent connection info
  --tun-info                          output of tunnel information
  --nosort                            disable sorting output of service/server entries
  --sort                              does nothing, for backwards compatibility
  --ops          -o                   one-packet scheduling (uvs: not supported yet)
  --numeric      -n                   numeric output of addresses and ports
  --sched-flags  -b flags             scheduler flags (comma-separated)
Daemon Options:
  --syncid sid                        syncid for connection sync (default=255)
  --sync-maxlen length                Max sync message length (default=1472)
  --mcast-interface interface         multicast interface for connection sync
  --mcast-group address               IPv4/IPv6 group (default=224.0.0.81)
  --mcast-port port                   UDP port (default=8848)
  --mcast-ttl ttl                     Multicast TTL (default=1)
  (uvs has no multicast sync daemon: uvs instances share connection state through Redis.)

uvs additions:
  --socket PATH                       uvsd API socket (default $UVS_SOCKET or /run/uvs/uvsd.sock)
  --reload                            re-read uvsd's configuration file (like SIGHUP)
  --kill-worker N                     terminate dataplane worker N (it is restarted; for testing)
  --maintenance on|off|status|wait    node maintenance: on withdraws this node's announcement
                                      (dataplane.announceTable) while it keeps forwarding what
                                      arrives; off announces again; status exits 1 in maintenance;
                                      wait returns once no packet arrived for 2 s (at most 300 s)
  -L --drain                          real servers being drained: since when, connections left
  -L --health                         health-check verdicts per real server
  -L --defense                        overload defenses (drop_entry, drop_packet, secure_tcp,
                                      half-open limit per source): levels, trigger, counts
  --capture (--sample N | --flow K=V,…) [--seconds S] [--max-packets M] [--format pcap|jsonl]
            [-w FILE]                 capture 1 in N packets, or one flow's (keys protocol,
                                      address, port, peer, peerPort; either direction), for S
                                      seconds (10) or M packets (1000): a pcap file for tcpdump
                                      -r (default) or a JSON line per packet with the decision
  -L --workers                        dataplane workers: state, restarts, I/O path, packets

Differences from ipvsadm: the default forwarding method is masquerading (-m): uvs cannot route
directly. Host names given here are read from /etc/hosts only; without -n, listings look names
up in /etc/hosts, /etc/services and reverse DNS (300 ms for the whole listing, then numbers).
Changes made here live in uvsd until its configuration file is reloaded.
`;
}
