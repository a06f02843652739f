/**
 * `npm run perf` / `uvs perf`: the benchmark harness. Builds a namespace lab (prefix `uvperf`),
 * and in every round, targets interleaved (the order rotates from round to round), runs the
 * same third-party generators against
 *
 *   direct    the client talking to a real server, routed by the LB node's kernel (the limit)
 *   uvs       uvsd in the LB namespace, masq, rr over the three real servers
 *   ctun      perf/peers/ctun.c, the minimal C TUN forwarder (stateless NAT, one packet per
 *             read()/write()), compiled with cc at run time and set up like uvsd's device
 *   nftables  `dnat to numgen inc mod 3 map {…}` in the LB namespace (kernel fast path)
 *   haproxy   mode tcp in the LB namespace
 *   nginx     stream (TCP and UDP) in the LB namespace
 *
 * then uvs alone with 1 and 2 workers, 1 → 100k concurrent flows, several table sizes, and with
 * --failures the failure figures of failures.ts (drain, real-server kill, LB-node kill). Writes
 * REPORT.md, report.json and report.svg; progress goes to stderr. Everything it starts runs in
 * the lab's namespaces and is removed at the end, on Ctrl-C and on failure. Measurement only.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, release, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { Lab } from '../lab/lab';
import { FailoverLab } from '../lab/failover-lab';
import { ensureTools, toolVersion } from './deps';
import { failoverPrefix, runFailures, type FailureFigures } from './failures';
import { killLive, run, sleep, spawnTracked, waitLive } from './exec';
import { measure, udpFlows, udpPps, warmUp, WRK_THREADS, type MeasureEnv, type Metrics } from './measure';
import { Anchor, Probe, processMemKb, syscallCountingUnavailable } from './probe';
import { foldPerf, PerfRecord, SyscallGaps, syscallGaps, writeFolded, writeProfileDir } from './profile';
import { computeRatios, renderMarkdown, renderSvg, type MemoryRow, type ReportData, type ScalingRun } from './report';
import { summarize, type Summary } from './summary';
import {
  ALL_MEASUREMENTS,
  ALL_TARGETS,
  CLIENT_SOURCE,
  HTTP_PORT,
  LAB_SYSCTLS,
  lbRssMb,
  makeTarget,
  routeClientSources,
  setForwarding,
  setLabSysctls,
  SP_PORT,
  UvsTarget,
  type MeasurementName,
  type Target,
  type TargetName,
} from './targets';

const ROOT = join(__dirname, '..', '..');

type ScalingGroup = 'workers' | 'flows' | 'table';

interface Options {
  rounds: number;
  duration: number;
  targets: TargetName[];
  measurements: MeasurementName[];
  scaling: ScalingGroup[];
  scaleWorkers: number[];
  flows: number[];
  tables: number[];
  workers: number;
  conns: number;
  out: string;
  prefix: string;
  install: boolean;
  failures: boolean;
  /** uvsd's dataplane.io for the uvs target and the scaling series (undefined: uvsd's default). */
  uvsIo: 'auto' | 'io_uring' | 'poll' | undefined;
  uvsSteering: 'auto' | 'ebpf' | 'automq' | undefined;
  uvsForwarding: 'masq' | 'fullnat' | undefined;
  /** Count the LB processes' syscalls with perf stat. */
  syscalls: boolean;
  /** --profile: where uvsd's CPU profiles go (perf/profile.ts), or null. */
  profile: string | null;
  /** --profile-v8: node --cpu-prof as well (its sampler thread and signals cost uvsd CPU and wake-ups). */
  profileV8: boolean;
  mode: 'default' | 'quick' | 'custom';
}

const HELP = `Usage: uvs perf [options]        (or: npm run perf -- [options])
       uvs perf scale [--only=SHAPE]    (or: npm run perf -- scale)

\`scale\` measures 10, 1,000 and 10,000 services × 10 real servers and one service × 10,000
(start, RSS, edits, reloads, churn, connect p99, UDP packets/s, forwarded ping, /healthz) beside
kube-proxy's nftables model; writes perf/SCALE.md and perf/scale.json (perf/scale.ts).

Benchmarks uvs against direct routing, a minimal C TUN forwarder (perf/peers/ctun.c, built with
cc at run time), nftables DNAT, HAProxy (mode tcp) and nginx stream in a namespace lab, with
sockperf, wrk, iperf3 and trafgen; writes REPORT.md, report.json, report.svg. Needs root. Missing
Debian packages are installed with apt-get unless --no-install.

Options:
  --quick                 1 round, 2 s per run (a fast check; about 2½ minutes)
  --rounds N              rounds, targets interleaved in each (default 3)
  --duration S            seconds per generator run, integer (default 3)
  --targets LIST          of direct,uvs,ctun,nftables,haproxy,nginx (default: all)
  --measurements LIST     of udp_pps,udp_rr,tcp_rr,tcp_cps,tcp_bulk (default: all)
  --scaling LIST          uvs-alone series: workers,flows,table (default: all); --no-scaling: none
  --scale-workers LIST    worker counts for the workers series (default 1,2)
  --flows LIST            concurrent flows for the flows series (default 1,100,1000,10000,100000;
                          above 30000 the run uses a 1048576-entry table, above 45000 two client addresses)
  --tables LIST           table sizes for the table series (default 4096,65536,1048576)
  --workers N             worker threads/processes (ctun: TUN queues) of every LB (default: CPUs)
  --conns N               wrk connections, a multiple of 3 (wrk's 3 threads; default 33)
  --out DIR               where the report goes (default: perf/ of the repository)
  --prefix P              lab prefix (default uvperf; --failures' two-node lab: P + "f", ≤ 8 chars)
  --failures              also the failure figures (off by default: they add about 1 minute per
                          round, which would take the default run past 10 minutes): requests
                          broken by a drain and by a real-server kill (with health checks), and
                          an LB-node kill in the two-node Redis lab — downloads broken out of 6
                          and the takeover blackout seen by UDP and TCP probes; needs redis-server
  --no-failures           without them (the default)
  --failures-only         only the failure figures: no comparison targets, no scaling series
  --uvs-io MODE           uvsd's worker I/O path: auto, io_uring or poll (dataplane.io; default auto)
  --uvs-steering MODE     uvsd's queue steering: auto, ebpf or automq (dataplane.steering; default auto)
  --uvs-forwarding F      uvsd's forwarding for every service: masq (the default) or fullnat (a pool
                          address of the LB node, 10.200.99.1, is the servers' client)
  --no-syscalls           do not count the LB processes' syscalls (perf stat on the syscall
                          tracepoints costs a little per syscall); wake-ups and context switches
                          come from /proc and are always counted
  --profile DIR           profile uvsd (perf/profile.ts): perf record -g of all its threads over
                          each uvs measurement (needs perf), JS frames named from node's
                          --perf-basic-prof map, and --trace-gc; writes DIR/PROFILE.md: per
                          thread, CPU by kernel (per syscall, softirq), JS, GC, runtime, and the
                          top functions; folded stacks in DIR/r<round>-<measurement>.folded.
                          Sampling costs uvs a little CPU: compare its figures with care
  --profile-v8            with --profile: also node --cpu-prof (a .cpuprofile per thread over
                          uvsd's life, wall time). Its sampler wakes every thread each ms:
                          uvs's syscalls, wake-ups and latency in such a run are not its own
  --no-install            do not apt-get missing tools; what needs them is reported as not measured
  -h, --help              this text`;

function list<T extends string>(v: string, allowed: readonly T[], what: string): T[] {
  const xs = v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const x of xs) if (!allowed.includes(x as T)) throw new Error(`unknown ${what} ${JSON.stringify(x)} (one of ${allowed.join(', ')})`);
  return xs as T[];
}

function numbers(v: string, what: string, min: number, max: number): number[] {
  const xs = v.split(',').map((s) => Number(s.trim()));
  for (const x of xs) if (!Number.isInteger(x) || x < min || x > max) throw new Error(`${what}: integers from ${min} to ${max}, got ${v}`);
  return xs;
}

export function parseOptions(argv: string[]): Options | 'help' {
  const nproc = availableParallelism();
  const o: Options = {
    rounds: 3,
    duration: 3,
    targets: [...ALL_TARGETS],
    measurements: [...ALL_MEASUREMENTS],
    scaling: ['workers', 'flows', 'table'],
    scaleWorkers: [1, 2],
    flows: [1, 100, 1000, 10000, 100000],
    tables: [4096, 65536, 1048576],
    workers: nproc,
    conns: 33,
    out: join(ROOT, 'perf'),
    prefix: 'uvperf',
    install: true,
    failures: false,
    uvsIo: undefined,
    uvsSteering: undefined,
    uvsForwarding: undefined,
    syscalls: true,
    profile: null,
    profileV8: false,
    mode: 'default',
  };
  let custom = false;
  let quick = false;
  let rounds: number | undefined;
  let duration: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const val = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    switch (a) {
      case '-h':
      case '--help':
        return 'help';
      case '--quick':
        quick = true;
        break;
      case '--rounds':
        rounds = numbers(val(), a, 1, 20)[0]!;
        break;
      case '--duration':
        duration = numbers(val(), a, 1, 30)[0]!;
        break;
      case '--targets':
        o.targets = list(val(), ALL_TARGETS, 'target');
        custom = true;
        break;
      case '--measurements':
        o.measurements = list(val(), ALL_MEASUREMENTS, 'measurement');
        custom = true;
        break;
      case '--scaling':
        o.scaling = list(val(), ['workers', 'flows', 'table'] as const, 'scaling series');
        custom = true;
        break;
      case '--no-scaling':
        o.scaling = [];
        custom = true;
        break;
      case '--scale-workers':
        o.scaleWorkers = numbers(val(), a, 1, 64);
        custom = true;
        break;
      case '--flows':
        o.flows = numbers(val(), a, 1, 120000);
        custom = true;
        break;
      case '--tables':
        o.tables = numbers(val(), a, 16, 1 << 22);
        for (const t of o.tables) if ((t & (t - 1)) !== 0) throw new Error(`--tables: ${t} is not a power of two`);
        custom = true;
        break;
      case '--workers':
        o.workers = numbers(val(), a, 1, 64)[0]!;
        custom = true;
        break;
      case '--conns':
        o.conns = numbers(val(), a, WRK_THREADS, 5000)[0]!;
        if (o.conns % WRK_THREADS !== 0)
          throw new Error(`--conns: a multiple of ${WRK_THREADS} (wrk's threads, one per real server), got ${o.conns}`);
        custom = true;
        break;
      case '--out':
        o.out = val();
        break;
      case '--prefix':
        o.prefix = val();
        break;
      case '--no-install':
        o.install = false;
        break;
      case '--uvs-io':
        o.uvsIo = list(val(), ['auto', 'io_uring', 'poll'] as const, 'I/O path')[0];
        break;
      case '--uvs-steering':
        o.uvsSteering = list(val(), ['auto', 'ebpf', 'automq'] as const, 'steering')[0];
        custom = true;
        break;
      case '--uvs-forwarding':
        o.uvsForwarding = list(val(), ['masq', 'fullnat'] as const, 'forwarding')[0];
        custom = true;
        break;
      case '--no-syscalls':
        o.syscalls = false;
        break;
      case '--profile':
        o.profile = resolve(val());
        custom = true;
        break;
      case '--profile-v8':
        o.profileV8 = true;
        custom = true;
        break;
      case '--failures':
        o.failures = true;
        custom = true;
        break;
      case '--no-failures':
        o.failures = false;
        break;
      case '--failures-only':
        o.failures = true;
        o.targets = [];
        o.measurements = [];
        o.scaling = [];
        custom = true;
        break;
      default:
        throw new Error(`unknown option ${a}`);
    }
  }
  if (o.profileV8 && !o.profile) throw new Error('--profile-v8 needs --profile DIR');
  if (quick) {
    o.rounds = 1;
    o.duration = 2;
  }
  if (rounds !== undefined) o.rounds = rounds;
  if (duration !== undefined) o.duration = duration;
  o.mode = custom || rounds !== undefined || duration !== undefined ? 'custom' : quick ? 'quick' : 'default';
  return o;
}

// ── progress ────────────────────────────────────────────────────────────────────────────────
const t0 = Date.now();
function log(s: string): void {
  const e = Math.round((Date.now() - t0) / 1000);
  process.stderr.write(`[${String(Math.floor(e / 60)).padStart(2)}:${String(e % 60).padStart(2, '0')}] ${s}\n`);
}

function headline(m: MeasurementName, x: Metrics): string {
  const f = (v: number | undefined, d = 1) => (v === undefined ? '?' : v >= 1e4 ? `${(v / 1e3).toFixed(d)} k` : v.toFixed(d));
  switch (m) {
    case 'udp_pps':
      return `${f(x.pps)} pkt/s at real servers (sent ${f(x.sentPps)}/s)`;
    case 'udp_rr':
    case 'tcp_rr':
      return `p50 ${f(x.p50Us)} µs, p99 ${f(x.p99Us)} µs, p99.9 ${f(x.p999Us)} µs`;
    case 'tcp_cps':
      return `${f(x.cps)} connections/s${x.errors ? `, ${x.errors} errors` : ''}${x.synRetransPerK || x.pawsRejectsPerK ? `, ${f(x.synRetransPerK ?? 0)} SYN retransmits and ${f(x.pawsRejectsPerK ?? 0)} PAWS rejects at the servers per 1000` : ''}`;
    case 'tcp_bulk':
      return `${f(x.gbps, 2)} Gb/s`;
  }
}

// ── machine ─────────────────────────────────────────────────────────────────────────────────
function machineInfo(prefix: string): Record<string, string | number> {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1]?.trim() ?? cpus()[0]?.model ?? '?';
  let os = '?';
  try {
    os = /^PRETTY_NAME="?([^"\n]*)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? '?';
  } catch {
    /* none */
  }
  return {
    nproc: availableParallelism(),
    cpuModel: model,
    kernel: release(),
    node: process.version,
    os,
    memGiB: Math.round(totalmem() / 2 ** 30),
    loadavgAtStart: loadavg()
      .map((x) => x.toFixed(2))
      .join(' '),
    otherLabsAtStart: describeNetns(otherNetns(prefix)),
  };
}

/** Network namespaces that are not this run's (its lab and its two-node lab): other programs sharing the CPUs. */
function otherNetns(prefix: string): string[] {
  const mine = [`${prefix}-`, `${failoverPrefix(prefix)}-`];
  try {
    return execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter((n) => n && !mine.some((m) => n.startsWith(m)));
  } catch {
    return [];
  }
}

function describeNetns(names: Iterable<string>): string {
  const all = [...new Set(names)];
  const groups = [...new Set(all.map((n) => n.replace(/-[^-]*$/, '')))];
  return groups.length ? `${groups.join(', ')} (${all.length} network namespaces of other programs, sharing the CPUs)` : 'none';
}

function clockTicks(): number {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
}

const CLIENT_SOURCES = Object.entries(CLIENT_SOURCE)
  .map(([t, a]) => `${t} ${a}`)
  .join(', ');
const SYSCTLS = LAB_SYSCTLS.map((x) => `\`${x}\``).join(', ');

const METHOD = [
  'Lab: network namespaces client ↔ LB node ↔ three real servers, veth pairs, addresses 10.200.x (lab/lab.ts). The real servers route back via the LB node. Generators run in the client namespace; every load is bounded by its duration and a hard kill.',
  "Targets: `direct` = the client addresses the real servers itself, the LB node only routes (ip_forward, no conntrack, no rules) — the physical limit of the path (short connections go to all three real servers, like through an LB; the other measurements to rs1); `uvs` = uvsd, masq, rr over the three real servers (VIP 10.200.0.10 routed into its multi-queue TUN device, whose queues uvs's eBPF program steers by the client's endpoint: `dataplane.steering` auto); `ctun` = perf/peers/ctun.c, the minimal C TUN forwarder a TUN-based LB is measured against: stateless NAT (the real server chosen by a hash of the client's address and port, so a flow sticks; replies rewritten back), incremental checksums, one packet per 1500-byte read() and write(), one thread per queue, compiled with `cc -O2` at run time and set up as uvsd sets up its device but for the queue steering, which it leaves to the device (automq) (multi-queue TUN, one queue per worker, rp_filter 0, ip_forward 1, VIP 10.200.0.50 routed into it, a `from RIP ipproto P sport PORT` policy rule per real server into a table that routes to it); `nftables` = `dnat to numgen inc mod 3 map {…}` in prerouting of the LB namespace (VIP 10.200.0.20); `haproxy` = HAProxy `mode tcp`, roundrobin (VIP 10.200.0.30 on lo of the LB node); `nginx` = nginx `stream`, TCP and UDP (`reuseport`), round robin (VIP 10.200.0.40 on lo). Every LB gets the same number of worker threads/processes. Bulk TCP always goes to rs1 only (iperf3 needs its two connections on one server).",
  'Interleaving: in every round each target is set up, measured with every generator, and torn down, in an order that rotates from round to round; the figure is the median over rounds, with min–max.',
  "UDP packets/s: `sockperf throughput --mps=max -m 64` (one socket, one flow, 64-byte payload, 92-byte IP packets) for the run's duration. Counted at the real servers: the growth of InDatagrams + InErrors + NoPorts in each real server namespace's /proc/net/snmp (what reached their UDP layer, including what their sockets had no room for), divided by sockperf's own send time.",
  'Latency: `sockperf ping-pong --full-rtt -m 64` (UDP, and `--tcp` over one connection): one message in flight, round trip measured by sockperf, p50/p99/p99.9 over all messages of the run after its warm-up.',
  `Connections/s: \`wrk -H "Connection: close"\` against the lab's HTTP servers (:8080; VIP :80), ${WRK_THREADS} threads, \`--conns\` connections (default 33: 11 per thread): every request is a new TCP connection, so requests/s = connections/s. For \`direct\` wrk's thread i connects to real server i (a wrk script that only sets each thread's address), so direct reaches the same three single-threaded HTTP servers as every LB — with rs1 alone, that one server's share of the 2 CPUs was the limit. Also counted, per 1000 connections: the client's SYN retransmits (TcpExt TCPSynRetrans; each such connection waited at least 1 s) and the packets the real servers rejected in TIME_WAIT for an old timestamp (TcpExt PAWSTimewait; a rejected SYN is what makes a SYN retransmit here) — SYN retransmits are 0 when the method is right.`,
  `Client addresses and TCP settings: every target's connections leave the client from an address of its own (${CLIENT_SOURCES}; a /32 route per VIP, for direct per real server, with that source). Linux starts a connection's TCP timestamps at a keyed offset — per (source, destination) address pair since 4.13, per 4-tuple on the 6.18 kernel of 2026-12-02 (four connections from one address to one port had unrelated TSvals) — and direct, uvs, ctun and nftables reach the real servers with the client's own address and port: with one client address, a client port reused within TIME_WAIT's 60 s of another target's connection on the same 4-tuple carried older timestamps whenever that target's offset was lower, and the server rejected the SYN (PAWS) — 10–21 % of those targets' connections waited a 1 s SYN retransmit, depending on the order of the targets. With its own address, a target only meets its own TIME_WAIT sockets, whose timestamps are older, and the server takes the new SYN (port reuse at thousands of connections/s is then the same for every target). Every namespace of the lab gets the same settings, written out: ${SYSCTLS}. TIME_WAIT reuse is on for outgoing connections (1, not the kernel's 2 = loopback only): through a proxy wrk closes first and the client holds a TIME_WAIT socket per connection; with reuse off for non-loopback addresses they filled the even ports connect() tries first, and a proxy target that had made ~14 k connections within 60 s fell to 330–4 000 connections/s while every connect() scanned them. nftables' conntrack table is the kernel's (nf_conntrack_max, global, cannot be set from a namespace): after nftables' runs the harness checks that it held every connection (its entries stay 120 s in TIME_WAIT) and that nothing was dropped (drop, early_drop, insert_failed of /proc/net/stat/nf_conntrack), and lists a failure under errors otherwise.`,
  'Bulk: `iperf3 -c … -t D -J`, one TCP stream, Gb/s received by the server (end.sum_received).',
  "CPU per unit of work. While a generator runs, every counter is sampled every 200 ms (no process is spawned to read them); CPU is taken over the *active window* — the sampling intervals in which the unit of work grew by more than 10 % of its largest growth in one interval — so that sockperf's 2 s pause after its warm-up and the tools' start-up do not add other programs' background CPU. Three figures: (a) LB processes = utime+stime from /proc/<pid>/stat of every process in the LB namespace (uvsd with all its worker threads; haproxy; nginx master and workers) — zero for direct and nftables, which have no process; (b) softirq = the machine-wide softirq time from /proc/stat (the kernel's packet processing: routing, conntrack/DNAT, TUN, veth, TCP receive) — it also contains the client's and the real servers' share, which is why direct's softirq serves as the baseline; (c) busy = all non-idle CPU time of the machine, generator and servers included. The headline **LB CPU = (a) + max(0, (b) − (b) of direct in the same round)**: the LB's own processes plus the kernel work it adds over plain routing; for nftables that is all softirq. Units: packets reaching the real servers (UDP flood), packets on the client's veth in both directions (request/response), TCP connections the client opened (/proc/net/snmp ActiveOpens; connections/s), GB the client sent (bulk). Clock ticks are 1/CLK_TCK s (10 ms), a small error on runs of seconds.",
  `Warm-up: after a target is set up, 1 s of wrk short connections (${WRK_THREADS} threads, ${3 * WRK_THREADS} connections) goes through it and is not counted, the same for every target (uvsd's JavaScript is otherwise measured before the JIT has compiled its packet path).`,
  "uvs alone: trafgen (netsniff-ng) writing UDP frames with N source ports (N concurrent flows, 64-byte payload) from the client's veth to the LB node, as fast as one CPU allows, to a uvs UDP service whose real servers have no listener (the datagrams are counted as NoPorts). Counted over a window of the run's duration that starts 0.4 s after trafgen; trafgen is stopped with SIGINT and bounded to 50 M packets. uvsd is restarted for every (workers, tableSize) pair and warmed up with 1 s of one flow (the first flow of every run, so the table holds exactly the flows of the runs); table entries from GET /v1/stats; memory = VmRSS / VmHWM of uvsd from /proc/<pid>/status (idle right after start, and after its runs).",
  'Everything shares one machine: generator, LB and real servers compete for the same CPUs (with 2 CPUs, a generator sending as fast as it can takes one of them), and other programs running at the same time (see otherLabsAtStart, otherLabsDuringRun and loadavg under Machine) add noise — the min–max shows how much.',
];

// ── main ────────────────────────────────────────────────────────────────────────────────────
export async function perfCommand(argv: string[]): Promise<number> {
  // `npm run perf -- scale`: the ten-thousand-services benchmark (perf/scale.ts, perf/SCALE.md).
  if (argv[0] === 'scale') return (await import('./scale')).scaleCommand(argv.slice(1));
  let o: Options;
  try {
    const p = parseOptions(argv);
    if (p === 'help') {
      console.log(HELP);
      return 0;
    }
    o = p;
  } catch (e) {
    console.error(`uvs perf: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (process.getuid?.() !== 0) {
    console.error('uvs perf needs root: it creates network namespaces, a TUN device, nftables rules');
    return 1;
  }
  if (!existsSync(join(ROOT, 'dist', 'control', 'uvsd.js')) || !existsSync(join(ROOT, 'build', 'Release', 'uvs_tun.node'))) {
    console.error('uvs perf: uvs is not built (npm run build)');
    return 1;
  }

  log(
    `uvs perf, mode ${o.mode}: ${o.rounds} round(s) × ${o.duration} s per run; targets ${o.targets.join(',') || 'none'}; measurements ${o.measurements.join(',') || 'none'}; uvs scaling ${o.scaling.join(',') || 'none'}; failures ${o.failures ? 'yes' : 'no'}`,
  );

  // Tools.
  const need = new Set<string>(['curl', 'wrk']); // wrk also warms every target up
  if (o.measurements.some((m) => m === 'udp_pps' || m === 'udp_rr' || m === 'tcp_rr')) need.add('sockperf');
  if (o.measurements.includes('tcp_cps')) need.add('wrk');
  if (o.measurements.includes('tcp_bulk')) need.add('iperf3');
  if (o.scaling.length) need.add('trafgen');
  if (o.targets.includes('ctun')) need.add('cc');
  if (o.targets.includes('nftables')) need.add('nft');
  if (o.targets.includes('haproxy')) need.add('haproxy');
  if (o.targets.includes('nginx')) need.add('nginx').add('nginxStream');
  if (o.failures) need.add('redis').add('keepalived');
  if (o.syscalls) need.add('perf');
  const missing = new Set(ensureTools([...need], o.install, log));
  const toolFor: Record<MeasurementName, string> = {
    udp_pps: 'sockperf',
    udp_rr: 'sockperf',
    tcp_rr: 'sockperf',
    tcp_cps: 'wrk',
    tcp_bulk: 'iperf3',
  };
  const targetTool: Partial<Record<TargetName, string[]>> = {
    ctun: ['cc'],
    nftables: ['nft'],
    haproxy: ['haproxy'],
    nginx: ['nginx', 'nginxStream'],
  };

  const machine = machineInfo(o.prefix);
  const hz = clockTicks();
  machine.clockTicksPerSecond = hz;
  const tools: Record<string, string> = {
    sockperf: toolVersion('sockperf', ['--version']),
    wrk: toolVersion('wrk', ['-v']),
    iperf3: toolVersion('iperf3', ['--version']),
    trafgen: toolVersion('trafgen', ['--version']),
    cc: toolVersion('cc', ['--version']),
    nftables: toolVersion('nft', ['--version']),
    haproxy: toolVersion('haproxy', ['-v']),
    nginx: toolVersion('nginx', ['-v']),
  };

  const lab = new Lab({ prefix: o.prefix });
  const flab = o.failures && !missing.has('redis') && !missing.has('keepalived') ? new FailoverLab(failoverPrefix(o.prefix)) : null;
  let cleaning: Promise<void> | null = null;
  const cleanup = (): Promise<void> =>
    (cleaning ??= (async () => {
      killLive('SIGTERM');
      await lab.stopUvsd(5000).catch(() => undefined);
      killLive('SIGKILL');
      await waitLive(3000);
      lab.down();
      flab?.down();
    })());
  const onSignal = (sig: NodeJS.Signals) => {
    log(`${sig}: stopping the generators and removing the lab ${o.prefix}`);
    void cleanup().then(() => process.exit(130));
  };
  const sigs: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of sigs) process.on(s, onSignal);
  const onFatal = (e: unknown) => {
    log(`fatal: ${(e as Error)?.stack ?? String(e)}`);
    void cleanup().then(() => process.exit(1));
  };
  process.on('uncaughtException', onFatal);
  process.on('unhandledRejection', onFatal);

  const raw: Partial<Record<MeasurementName, Partial<Record<TargetName, Record<string, number[]>>>>> = {};
  const rss: Partial<Record<TargetName, number[]>> = {};
  const otherSeen = new Set<string>(otherNetns(o.prefix));
  /** --profile: each folded file's recording window in ms. */
  const profileWindows: Record<string, number> = {};
  /** --profile: each folded file's units of work (connections, transactions, packets). */
  const profileUnits: Record<string, { n: number; unit: string }> = {};
  const notMeasured: ReportData['notMeasured'] = [];
  const errors: ReportData['errors'] = [];
  interface Point {
    groups: Set<ScalingGroup>;
    workers: number;
    tableSize: number;
    flows: number;
    generator: 'sockperf' | 'trafgen';
    values: Record<string, number[]>;
  }
  const points: Point[] = [];
  const mem = new Map<string, { workers: number; tableSize: number; idle: number[]; after: number[]; hwm: number[] }>();
  let failures: FailureFigures = {
    measured: false,
    note: o.failures
      ? 'Selected (--failures), but the run ended before they were measured: see the errors below.'
      : 'Not selected: `npm run perf -- --failures` (or `--failures-only`) measures requests broken by a drain and by a real-server kill, and downloads broken and the takeover blackout of an LB-node kill with Redis-shared flows (perf/failures.ts). Off by default: they would take the default run past 10 minutes.',
  };

  try {
    // What can run.
    const targets: Target[] = [];
    const env = {
      lab,
      workers: o.workers,
      log,
      uvsIo: o.uvsIo,
      uvsSteering: o.uvsSteering,
      uvsForwarding: o.uvsForwarding,
      ...(o.profile ? { profileDir: o.profile, profileV8: o.profileV8 } : {}),
    };
    if (o.profile) {
      mkdirSync(o.profile, { recursive: true });
      log(`profiling uvsd into ${o.profile}${missing.has('perf') ? ' (.cpuprofile only: perf is not installed)' : ''}`);
    }
    for (const name of o.targets) {
      const miss = (targetTool[name] ?? []).filter((t) => missing.has(t));
      if (miss.length) {
        notMeasured.push({ target: name, measurement: 'all', reason: `${miss.join(', ')} not installed` });
        continue;
      }
      targets.push(makeTarget(name, env));
    }
    const measurements = o.measurements.filter((m) => {
      if (!missing.has(toolFor[m])) return true;
      notMeasured.push({ target: 'all', measurement: m, reason: `${toolFor[m]} not installed` });
      return false;
    });
    for (const t of targets)
      for (const m of measurements) {
        const why = (t.unsupported as Partial<Record<MeasurementName, string>>)[m];
        if (why) notMeasured.push({ target: t.name, measurement: m, reason: why });
      }
    let scaling = o.scaling;
    if (scaling.length && missing.has('trafgen')) {
      notMeasured.push({ target: 'uvs', measurement: 'scaling', reason: 'trafgen (netsniff-ng) not installed' });
      scaling = [];
    }

    // Scaling points, grouped by uvsd configuration.
    const mainFlows = o.flows.includes(1000) ? 1000 : o.flows[o.flows.length - 1]!;
    const addPoint = (g: ScalingGroup, workers: number, tableSize: number, flows: number, generator: 'sockperf' | 'trafgen') => {
      let p = points.find((x) => x.workers === workers && x.tableSize === tableSize && x.flows === flows && x.generator === generator);
      if (!p) points.push((p = { groups: new Set(), workers, tableSize, flows, generator, values: {} }));
      p.groups.add(g);
    };
    if (scaling.includes('workers')) {
      for (const w of o.scaleWorkers) addPoint('workers', w, 65536, mainFlows, 'trafgen');
    }
    // A table holds its flows with room to spare (the kernel's table has no size limit; ours does).
    if (scaling.includes('flows')) for (const f of o.flows) addPoint('flows', o.workers, f > 30000 ? 1048576 : 65536, f, 'trafgen');
    if (scaling.includes('table')) for (const t of o.tables) addPoint('table', o.workers, t, mainFlows, 'trafgen');
    const configs = [...new Set(points.map((p) => `${p.workers}/${p.tableSize}`))].map((k) => {
      const [w, t] = k.split('/').map(Number) as [number, number];
      return {
        workers: w,
        tableSize: t,
        points: points
          .filter((p) => p.workers === w && p.tableSize === t)
          .sort((a, b) => (a.generator === b.generator ? a.flows - b.flows : a.generator === 'sockperf' ? -1 : 1)),
      };
    });

    const perRound =
      targets.reduce((n, t) => n + measurements.filter((m) => !(t.unsupported as Record<string, string>)[m]).length, 0) + points.length;
    const total = perRound * o.rounds;
    const failureSeconds = o.failures ? 10 + o.rounds * (flab ? 60 : 35) : 0;
    log(
      `plan: ${total} generator runs (${perRound} per round)${o.failures ? ' and the failure figures' : ''}, about ${Math.round((total * (o.duration + 0.8) + o.rounds * (targets.length * 1.5 + configs.length * 2.5) + 10 + failureSeconds) / 60)} min`,
    );

    // Lab.
    log(`lab ${o.prefix}: client, LB node, three real servers`);
    lab.up();
    await lab.waitServers();
    await setLabSysctls(lab);
    await routeClientSources(lab);
    const rsAnchors: Anchor[] = [];
    for (const ns of lab.rsNs) {
      if (!missing.has('sockperf')) {
        spawnTracked('sockperf', ['server', '-i', '0.0.0.0', '-p', String(SP_PORT)], ns);
        spawnTracked('sockperf', ['server', '--tcp', '-i', '0.0.0.0', '-p', String(SP_PORT)], ns);
      }
      rsAnchors.push(await Anchor.start(ns));
    }
    const clientAnchor = await Anchor.start(lab.clientNs);
    const clientIf = `${lab.prefix}c0`;
    const probe = new Probe(lab.lbNs, clientAnchor, clientIf, rsAnchors, hz, []);
    const lbMac = (
      JSON.parse((await run('ip', ['-j', '-n', lab.lbNs, 'link', 'show', `${lab.prefix}c1`])).stdout) as { address: string }[]
    )[0]!.address;
    if (!missing.has('sockperf')) {
      // Both sockperf servers listening in every real server.
      for (const ns of lab.rsNs) {
        const deadline = Date.now() + 5000;
        while (!(await run('ss', ['-Hln', `sport = :${SP_PORT}`], { ns })).stdout.trim().includes('\n')) {
          if (Date.now() > deadline) throw new Error(`sockperf servers did not start in ${ns}`);
          await sleep(100);
        }
      }
    }
    const noSyscalls = !o.syscalls ? '--no-syscalls' : missing.has('perf') ? 'perf is not installed' : syscallCountingUnavailable();
    if (noSyscalls) log(`syscalls per packet/connection not measured: ${noSyscalls}`);
    const menv: MeasureEnv = { lab, probe, duration: o.duration, conns: o.conns, syscalls: !noSyscalls };
    await setForwarding(lab); // the first warm-up goes straight to the real servers
    await warmUp(menv, [{ host: lab.rsAddrs[0]!, port: HTTP_PORT, spread: lab.rsAddrs }]);

    let done = 0;
    const tag = () => `(${++done}/${total})`;
    for (let round = 1; round <= o.rounds; round++) {
      const order = targets.map((_t, i) => targets[(i + round - 1) % targets.length]!);
      if (order.length || configs.length) log(`── round ${round}/${o.rounds}: ${order.map((t) => t.name).join(' → ') || 'uvs alone'}`);
      for (const n of otherNetns(o.prefix)) otherSeen.add(n);
      const roundVals: Partial<Record<MeasurementName, Partial<Record<TargetName, Metrics>>>> = {};
      for (const t of order) {
        const todo = measurements.filter((m) => !(t.unsupported as Record<string, string>)[m]);
        if (!todo.length) continue;
        try {
          await t.setup();
        } catch (e) {
          const msg = (e as Error).message;
          log(`${t.name}: setup failed: ${msg}`);
          for (const m of todo) {
            errors.push({ round, target: t.name, measurement: m, error: `setup: ${msg}` });
            done++;
          }
          await t.teardown().catch(() => undefined);
          continue;
        }
        try {
          await warmUp(menv, [t.endpoints().http]);
          for (const m of todo) {
            const label = `round ${round}/${o.rounds} · ${t.name.padEnd(8)} · ${m.padEnd(8)} ${tag()}`;
            // --profile: perf record of every thread of the LB processes over this measurement
            // (uvsd; HAProxy's and nginx's for comparison).
            const pids =
              o.profile && !missing.has('perf') ? (t instanceof UvsTarget ? (t.pid ? [t.pid] : []) : await menv.probe.lbPids()) : [];
            const rec = pids.length
              ? PerfRecord.start(pids, join(o.profile!, `r${round}-${t.name}-${m}.perf.data`), t.name === 'uvs')
              : null;
            const gaps =
              pids.length && t instanceof UvsTarget
                ? SyscallGaps.start(pids[0]!, join(o.profile!, `r${round}-${t.name}-${m}.gaps.data`))
                : null;
            try {
              const x = await measure(menv, m, t.endpoints());
              if (gaps) {
                await gaps.stop();
                try {
                  writeFileSync(join(o.profile!, `r${round}-${t.name}-${m}.gaps.json`), JSON.stringify(syscallGaps(gaps.out)) + '\n');
                } catch (e) {
                  log(`profile gaps: ${(e as Error).message}`);
                }
                rmSync(gaps.out, { force: true });
              }
              if (rec) {
                const ms = await rec.stop();
                const name = `r${round}-${t.name}-${m}.folded`;
                try {
                  writeFolded(join(o.profile!, name), foldPerf(rec));
                  profileWindows[name] = ms;
                  // The unit of work, for CPU per unit (≈: the generator's rate × its duration).
                  const per =
                    m === 'tcp_cps'
                      ? { rate: x.cps, unit: 'connection' }
                      : m === 'tcp_rr' || m === 'udp_rr'
                        ? { rate: x.tps, unit: 'transaction' }
                        : m === 'udp_pps'
                          ? { rate: x.pps, unit: 'packet' }
                          : undefined;
                  if (per?.rate) profileUnits[name] = { n: per.rate * o.duration, unit: per.unit };
                } catch (e) {
                  log(`profile ${name}: ${(e as Error).message}`);
                }
                rmSync(rec.out, { force: true });
              }
              (roundVals[m] ??= {})[t.name] = x;
              log(`${label}  ${headline(m, x)}`);
            } catch (e) {
              const msg = (e as Error).message;
              errors.push({ round, target: t.name, measurement: m, error: msg });
              log(`${label}  FAILED: ${msg}`);
              if (rec) await rec.stop();
              if (gaps) await gaps.stop();
            }
            await sleep(150); // let queues drain between generators
          }
          const bad = t.check ? await t.check().catch((e: Error) => `check failed: ${e.message}`) : null;
          if (bad) {
            errors.push({ round, target: t.name, measurement: 'method', error: bad });
            log(`${t.name}: ${bad}`);
          }
          const r = await lbRssMb(lab, []);
          if (r !== null) (rss[t.name] ??= []).push(r);
        } finally {
          await t.teardown().catch((e) => log(`${t.name}: teardown: ${(e as Error).message}`));
        }
      }
      // Derived LB CPU (own processes + softirq above direct in this round), then keep the values.
      for (const [m, byT] of Object.entries(roundVals) as [MeasurementName, Partial<Record<TargetName, Metrics>>][]) {
        const d = byT.direct;
        for (const [t, x] of Object.entries(byT) as [TargetName, Metrics][]) {
          for (const k of Object.keys(x).filter((k) => k.startsWith('lbProc'))) {
            const suffix = k.slice('lbProc'.length);
            const base = d?.[`softirq${suffix}`];
            if (base === undefined) continue;
            x[`lbCpu${suffix}`] = t === 'direct' ? 0 : x[k]! + Math.max(0, (x[`softirq${suffix}`] ?? 0) - base);
          }
          const dst = ((raw[m] ??= {})[t] ??= {});
          for (const [k, v] of Object.entries(x)) (dst[k] ??= []).push(v);
        }
      }

      // uvs alone.
      for (const c of configs) {
        const uvs = new UvsTarget(env);
        uvs.workers = c.workers;
        uvs.tableSize = c.tableSize;
        const key = `${c.workers}/${c.tableSize}`;
        const mrow = mem.get(key) ?? { workers: c.workers, tableSize: c.tableSize, idle: [], after: [], hwm: [] };
        mem.set(key, mrow);
        try {
          await uvs.setup();
        } catch (e) {
          const msg = (e as Error).message;
          log(`uvs workers=${c.workers} tableSize=${c.tableSize}: setup failed: ${msg}`);
          for (const p of c.points) {
            errors.push({
              round,
              target: 'uvs',
              measurement: `scaling ${p.flows} flows, ${c.workers} workers, table ${c.tableSize}`,
              error: msg,
            });
            done++;
          }
          await uvs.teardown().catch(() => undefined);
          continue;
        }
        try {
          await sleep(300);
          const idle = uvs.pid ? processMemKb(uvs.pid) : null;
          if (idle) mrow.idle.push(idle.rss / 1024);
          // Warm-up: 1 s of one UDP flow (its entry is the first flow of every trafgen run).
          await udpFlows({ ...menv, duration: 1 }, uvs.discard(), 1, lbMac, clientIf).catch(() => undefined);
          for (const p of c.points) {
            const label = `round ${round}/${o.rounds} · uvs alone · ${c.workers} worker(s), table ${c.tableSize}, ${p.flows} flow(s) ${p.generator} ${tag()}`;
            try {
              const x =
                p.generator === 'sockperf'
                  ? await udpPps(menv, { host: UvsTarget.vip, port: SP_PORT })
                  : await udpFlows(menv, uvs.discard(), p.flows, lbMac, clientIf);
              const st = await uvs.stats();
              if (st) x.tableEntries = st.table.entries;
              const m = uvs.pid ? processMemKb(uvs.pid) : null;
              if (m) x.rssMb = m.rss / 1024;
              for (const [k, v] of Object.entries(x)) (p.values[k] ??= []).push(v);
              log(`${label}  ${headline('udp_pps', x)}, ${x.tableEntries ?? '?'} entries`);
            } catch (e) {
              const msg = (e as Error).message;
              errors.push({
                round,
                target: 'uvs',
                measurement: `scaling: ${p.flows} flows ${p.generator}, ${c.workers} workers, table ${c.tableSize}`,
                error: msg,
              });
              log(`${label}  FAILED: ${msg}`);
            }
            await sleep(200);
          }
          const after = uvs.pid ? processMemKb(uvs.pid) : null;
          if (after) {
            mrow.after.push(after.rss / 1024);
            mrow.hwm.push(after.hwm / 1024);
          }
        } finally {
          await uvs.teardown().catch((e) => log(`uvs teardown: ${(e as Error).message}`));
        }
      }
    }
    if (o.failures) {
      log(`── failure figures: ${o.rounds} round(s) of drain, real-server kill${flab ? ', LB-node kill' : ''}`);
      failures = await runFailures({
        lab,
        flab: flab ?? { missing: missing.has('redis') ? 'redis-server is not installed' : 'keepalived is not installed' },
        rounds: o.rounds,
        workers: o.workers,
        log,
      });
    }
  } catch (e) {
    log(`run failed: ${(e as Error).message}`);
    errors.push({ round: 0, target: 'harness', measurement: 'setup', error: (e as Error).message });
  } finally {
    log(`removing the lab ${o.prefix}`);
    await cleanup();
    for (const s of sigs) process.off(s, onSignal);
    process.off('uncaughtException', onFatal);
    process.off('unhandledRejection', onFatal);
  }
  if (o.profile) {
    writeFileSync(join(o.profile, 'windows.json'), JSON.stringify(profileWindows, null, 2) + '\n');
    writeFileSync(join(o.profile, 'units.json'), JSON.stringify(profileUnits, null, 2) + '\n');
    try {
      writeProfileDir(o.profile);
      log(`wrote ${join(o.profile, 'PROFILE.md')} and a flame graph (.svg) per recording`);
    } catch (e) {
      log(`profile summary failed: ${(e as Error).message}`);
    }
  }
  const left = [...Lab.existing(o.prefix), ...(flab ? Lab.existing(flab.prefix) : [])];
  if (left.length) log(`WARNING: namespaces left behind: ${left.join(' ')}`);

  // Aggregate and write.
  const results: ReportData['results'] = {};
  for (const [m, byT] of Object.entries(raw) as [MeasurementName, Partial<Record<TargetName, Record<string, number[]>>>][]) {
    for (const [t, byK] of Object.entries(byT) as [TargetName, Record<string, number[]>][]) {
      for (const [k, vs] of Object.entries(byK)) {
        const s = summarize(vs);
        if (s) ((results[m] ??= {})[t] ??= {})[k] = s;
      }
    }
  }
  const sumRec = (r: Record<string, number[]>): Record<string, Summary> =>
    Object.fromEntries(Object.entries(r).flatMap(([k, v]) => (summarize(v) ? [[k, summarize(v)!]] : [])));
  const runs: ScalingRun[] = [];
  for (const g of ['workers', 'flows', 'table'] as const) {
    const order = (a: Point, b: Point) =>
      g === 'table'
        ? a.tableSize - b.tableSize
        : g === 'flows'
          ? a.flows - b.flows
          : a.generator.localeCompare(b.generator) || a.flows - b.flows || a.workers - b.workers;
    for (const p of points.filter((x) => x.groups.has(g)).sort(order)) {
      runs.push({
        group: g,
        label: `${p.workers} worker(s), table ${p.tableSize}, ${p.flows} flow(s), ${p.generator}`,
        workers: p.workers,
        tableSize: p.tableSize,
        flows: p.flows,
        generator: p.generator,
        metrics: sumRec(p.values),
      });
    }
  }
  const memory: MemoryRow[] = [...mem.values()].map((x) => ({
    workers: x.workers,
    tableSize: x.tableSize,
    rssIdleMb: summarize(x.idle),
    rssAfterMb: summarize(x.after),
    hwmMb: summarize(x.hwm),
  }));
  for (const n of otherNetns(o.prefix)) otherSeen.add(n);
  machine.otherLabsDuringRun = describeNetns(otherSeen);
  machine.loadavgAtEnd = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  const report: ReportData = {
    tool: 'uvs perf (perf/run.ts)',
    generatedAt: new Date().toISOString(),
    mode: o.mode,
    command: o.mode === 'default' ? 'npm run perf' : `npm run perf -- ${argv.join(' ')}`,
    wallSeconds: (Date.now() - t0) / 1000,
    options: {
      rounds: o.rounds,
      duration: o.duration,
      targets: o.targets,
      measurements: o.measurements,
      workers: o.workers,
      conns: o.conns,
      scaling: o.scaling,
      flows: o.flows,
      tables: o.tables,
      ...(o.uvsIo ? { uvsIo: o.uvsIo } : {}),
      ...(o.uvsSteering ? { uvsSteering: o.uvsSteering } : {}),
      ...(o.uvsForwarding ? { uvsForwarding: o.uvsForwarding } : {}),
    },
    machine,
    tools,
    method: METHOD,
    results,
    notMeasured,
    ratios: computeRatios(results, o.targets),
    lbRssMb: Object.fromEntries(Object.entries(rss).flatMap(([t, v]) => (summarize(v) ? [[t, summarize(v)!]] : []))),
    scaling: { runs, memory },
    failures,
    errors,
  };
  mkdirSync(o.out, { recursive: true });
  const md = renderMarkdown(report);
  writeFileSync(join(o.out, 'REPORT.md'), md);
  writeFileSync(join(o.out, 'report.json'), JSON.stringify(report, null, 2) + '\n');
  writeFileSync(join(o.out, 'report.svg'), renderSvg(report));
  log(`wrote ${join(o.out, 'REPORT.md')}, report.json, report.svg (${Math.round((Date.now() - t0) / 1000)} s in all)`);
  // The main table on stdout.
  const start = md.indexOf('## Results');
  const end = md.indexOf('\n## ', start + 5);
  if (o.targets.length) process.stdout.write(md.slice(start, end > 0 ? end : undefined) + '\n');
  if (failures.scenarios) {
    const fs = md.indexOf('## Failure figures');
    const fe = md.indexOf('\n## ', fs + 5);
    process.stdout.write(md.slice(fs, fe > 0 ? fe : undefined) + '\n');
  }
  const measuredAny = Object.keys(results).length > 0 || runs.some((x) => Object.keys(x.metrics).length) || failures.measured;
  return left.length || !measuredAny ? 1 : 0;
}

if (require.main === module) {
  perfCommand(process.argv.slice(2)).then((c) => process.exit(c));
}
