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
 * The folder follows ipvsadm.c: tables.ts (CMD_*, OPTC_*, commands_v_options), popt.ts
 * (options_table, poptGetNextOpt), values.ts (parse_service and the other value parsers),
 * command.ts (what a parse gives, fail/tryhelp_exit), this file (parse_options and
 * process_options' checks), restore.ts (-R), help.ts (usage_exit), format.ts (the listings),
 * names.ts (names for listings without -n) and answers.ts (the daemon's refusals as ipvsadm
 * prints the kernel's). uvsadm.ts drives them.
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
import { DEFAULT_SCHEDULER } from '../../schedulers/registry';
import { DEFAULT_FORWARDING } from '../config';
import type { ServiceRef } from '../edits';
import { Fail, fail, tryHelp, unsupported, type Command, type ListFormat, type ParseEnv, type ParseResult } from './command';
import { usage, versionLine } from './help';
import { COMMAND_TAGS, POPT_NOARG, tokenize } from './popt';
import {
  CMD,
  CMD_NAMES,
  COMMANDS_V_OPTIONS,
  INT_MAX,
  MAX_TIMEOUT,
  OPT,
  OPT_NAMES,
  PROGRAM,
  TUN_NAMES,
  TUN_OPTS,
  TUNNEL_V_OPTIONS,
  type Cmd,
  type OptName,
} from './tables';
import { inetAton, parseNetmask, parseSchedFlags, parseService, parseTimeout, SERVICE_ADDR, SERVICE_PORT, stringToNumber } from './values';

interface Entry {
  cmd: Cmd;
  options: Set<number>;
  svc: {
    protocol: 'tcp' | 'udp' | 'sctp';
    af: 4 | 6;
    address: string;
    port: number;
    fwmark: number;
    persistent: boolean;
    timeout: number;
    netmask: string | number;
    sched: string;
    pe: string;
    ops: boolean;
    schedFlags: string[];
  };
  dest: {
    af: 4 | 6;
    address: string;
    port: number;
    portGiven: boolean;
    fwd: 'masq' | 'route' | 'tunnel' | 'fullnat' | null;
    weight: number;
    uThreshold: number;
    lThreshold: number;
    tunType: number;
    pp: 'v1' | 'v2' | 'none' | null;
  };
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

/**
 * ipvsadm.c's parse_options() and then process_options()'s checks, in their order. As there, the
 * first option must be the command (parse_options' first switch; uvs lets a listing option come
 * first and imply -L), and every later option is one case of ONE switch, in the order of
 * parse_options' second switch: each records the option (set_option: a repeat fails) and parses
 * its value (uvs's own options among them). Then --set's three values, leftover arguments, the scheduler flags,
 * generic_opt_check() and the per-command checks.
 */
function parse(argv: string[], env: ParseEnv, program: string): Command {
  const noFormat: ListFormat = {
    numeric: false,
    stats: false,
    rate: false,
    thresholds: false,
    persistentConn: false,
    tunInfo: false,
    exact: false,
    nosort: false,
  };
  // No argument at all: list the table, without -n (names).
  if (argv.length === 0) return { kind: 'list', what: 'services', format: noFormat };
  const ce: Entry = {
    cmd: CMD.NONE,
    options: new Set(),
    svc: {
      protocol: 'tcp',
      af: 4,
      address: '',
      port: 0,
      fwmark: 0,
      persistent: false,
      timeout: 0,
      netmask: '255.255.255.255',
      sched: '',
      pe: '',
      ops: false,
      schedFlags: [],
    },
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
          if (!['on', 'off', 'status', 'wait'].includes(tok.arg ?? ''))
            fail(`illegal maintenance parameter \`${tok.arg ?? ''}' specified (on, off, status or wait)`);
          ce.maintenance = tok.arg as Entry['maintenance'];
        }
        continue;
      }
      // uvs: `uvsadm --timeout`, `--drain`, `--health`, `--defense`, `--workers` list without -L.
      if (tok.tag !== 'timeout' && tok.tag !== 'drain' && tok.tag !== 'health' && tok.tag !== 'defense' && tok.tag !== 'workers')
        tryHelp(program);
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
    ce.timeouts = {
      tcp: parseTimeout(tcp, 0, MAX_TIMEOUT),
      tcpFin: parseTimeout(fin, 0, MAX_TIMEOUT),
      udp: parseTimeout(udp, 0, MAX_TIMEOUT),
    };
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
    if (
      (has('connection', 'timeout', 'daemon', 'drain', 'health', 'defense', 'workers') && has('stats', 'rate', 'thresholds')) ||
      (has('timeout', 'daemon', 'drain', 'health', 'defense', 'workers') && has('persistent-conn'))
    ) {
      fail('options conflicts in the list command');
    }
  }
  if (ce.cmd === CMD.RESTORE && env.readingStdin) tryHelp(program);

  // What uvs cannot do (the daemon refuses -g, a tunnel without tunnelSource and IPv6 itself, with its reasons).
  if (svc.fwmark)
    unsupported('fwmark services (-f) are not supported: packets reach uvs through a TUN device, which does not carry netfilter marks');
  if (svc.pe) unsupported('persistence engines (--pe) are not supported');
  if (svc.ops) unsupported('one-packet scheduling (-o/--ops) is not supported yet');
  // -L --daemon lists the sync daemons that run: none, so nothing (ipvsadm's list_daemon prints a
  // line per running one, and monitoring scripts call it). Starting or stopping one is refused.
  if (ce.cmd === CMD.STARTDAEMON || ce.cmd === CMD.STOPDAEMON) {
    unsupported('uvs has no IPVS connection-sync daemon: uvs instances share connection state through Redis instead');
  }
  // Accepted-then-ignored would make a GUE/GRE server an IPIP one behind the operator's back.
  if ((ce.cmd === CMD.ADDDEST || ce.cmd === CMD.EDITDEST) && ce.dest.tunType !== 0) {
    unsupported(
      `${TUN_NAMES[ce.dest.tunType]} tunnels (--tun-type ${TUN_NAMES[ce.dest.tunType]}) are not supported: uvs encapsulates in IPIP (IPv6: ip6ip6) only, --tun-type ipip`,
    );
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
      const what = has('connection')
        ? 'connections'
        : has('timeout')
          ? 'timeout'
          : has('daemon')
            ? 'daemon'
            : has('drain')
              ? 'drain'
              : has('health')
                ? 'health'
                : has('defense')
                  ? 'defense'
                  : has('workers')
                    ? 'workers'
                    : 'services';
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
      return ce.cmd === CMD.ADD
        ? { kind: 'edit', command: 'add-service', ops: [{ op: 'addService', service }] }
        : { kind: 'edit', command: 'edit-service', ops: [{ op: 'editService', service }] };
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
      return {
        kind: 'edit',
        command: 'delete-server',
        ops: [{ op: 'deleteRealServer', ref, address: ce.dest.address, port: ce.dest.port }],
      };
    default:
      throw new Error(`unhandled command ${ce.cmd}`); // start/stop-daemon were refused above
  }
}
