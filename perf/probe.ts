/**
 * Counters read around each measurement, without spawning anything per read where possible:
 *
 * - /proc/stat (machine-wide: busy and softirq time, in clock ticks);
 * - /proc/<pid>/stat utime+stime of every process in the LB namespace (uvsd with all its worker
 *   threads, haproxy, nginx master and workers);
 * - a namespace's own /proc/net/{dev,snmp,netstat}, read through /proc/<anchor>/net/… where the
 *   anchor is a `sleep` process we keep in that namespace (a process's /proc/<pid>/net shows its
 *   netns): the client's SYN retransmits and the real servers' SYNs rejected in TIME_WAIT come
 *   from netstat's TcpExt line;
 * - /proc/<pid>/status VmRSS / VmHWM;
 * - /proc/<pid>/task/<tid>/status voluntary_ctxt_switches / nonvoluntary_ctxt_switches, summed
 *   over every thread of the LB processes (a voluntary switch is a thread going to sleep — in
 *   poll, io_uring_enter, epoll_wait, a futex — so each one is one wake-up later);
 * - syscalls of the LB processes, counted by `perf stat` on the syscall tracepoints for the whole
 *   generator run (SyscallCount; the one counter that needs a process of its own).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { run, signalGroup, sleep, spawnTracked, type RunResult } from './exec';

export interface CpuTimes {
  busy: number;
  softirq: number;
  total: number;
}

/** The aggregate "cpu" line of /proc/stat, in ticks. busy = total − idle − iowait. */
export function readCpu(text = readFileSync('/proc/stat', 'utf8')): CpuTimes {
  const line = text.split('\n').find((l) => l.startsWith('cpu '))!;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already inside user/nice)
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - f[3]! - f[4]!, softirq: f[6]!, total };
}

/** utime + stime (ticks) of a process, all threads included; null when it is gone. */
export function processTicks(pid: number): number | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // after "pid (comm) ": state=0 … utime=11 stime=12 (fields 14 and 15 of the whole line)
    return Number(f[11]) + Number(f[12]);
  } catch {
    return null;
  }
}

export function processMemKb(pid: number): { rss: number; hwm: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const get = (k: string) => Number(/\s(\d+) kB/.exec(s.split('\n').find((l) => l.startsWith(k + ':')) ?? '')?.[1] ?? NaN);
    return { rss: get('VmRSS'), hwm: get('VmHWM') };
  } catch {
    return null;
  }
}

/** Context switches summed over every thread of a process; null when it is gone. */
export function processSwitches(pid: number): { voluntary: number; involuntary: number } | null {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return null;
  }
  let voluntary = 0;
  let involuntary = 0;
  for (const t of tids) {
    try {
      const s = readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8');
      voluntary += Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(s)?.[1] ?? 0);
      involuntary += Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(s)?.[1] ?? 0);
    } catch {
      /* the thread ended */
    }
  }
  return { voluntary, involuntary };
}

export function processComm(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '?';
  }
}

/** Parses /proc/net/snmp into { Udp: {InDatagrams: …}, Tcp: {…}, … }. */
export function parseSnmp(text: string): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  const lines = text.split('\n');
  for (let i = 0; i + 1 < lines.length; i += 2) {
    const h = lines[i]!.split(/\s+/);
    const v = lines[i + 1]!.split(/\s+/);
    const name = h[0]!.replace(/:$/, '');
    if (!name || v[0] !== h[0]) continue;
    out[name] = {};
    for (let k = 1; k < h.length; k++) if (h[k]) out[name]![h[k]!] = Number(v[k]);
  }
  return out;
}

/** /proc/net/stat/nf_conntrack: a header of names, then one line of hex counters per CPU; summed. */
export function parseConntrackStat(text: string): Record<string, number> {
  const lines = text.trim().split('\n');
  const names = (lines[0] ?? '').trim().split(/\s+/);
  const out: Record<string, number> = {};
  for (const l of lines.slice(1)) {
    const v = l.trim().split(/\s+/);
    if (v.length !== names.length) continue;
    names.forEach((n, i) => (out[n] = (out[n] ?? 0) + parseInt(v[i]!, 16)));
  }
  return out;
}

export interface DevCounters {
  rxPackets: number;
  rxBytes: number;
  txPackets: number;
  txBytes: number;
}

/** One interface's line of /proc/net/dev. */
export function parseNetDev(text: string, ifname: string): DevCounters | null {
  for (const l of text.split('\n')) {
    const m = /^\s*([^:\s]+):\s*(.*)$/.exec(l);
    if (!m || m[1] !== ifname) continue;
    const f = m[2]!.trim().split(/\s+/).map(Number);
    return { rxBytes: f[0]!, rxPackets: f[1]!, txBytes: f[8]!, txPackets: f[9]! };
  }
  return null;
}

/** A `sleep` process kept in a namespace so that its /proc/<pid>/net shows that namespace. */
export class Anchor {
  private constructor(
    readonly ns: string,
    readonly pid: number,
  ) {}

  static async start(ns: string): Promise<Anchor> {
    const want = statSync(`/run/netns/${ns}`).ino;
    const c = spawnTracked('sleep', ['100000'], ns);
    c.unref();
    const pid = c.pid;
    if (!pid) throw new Error(`could not start an anchor process in ${ns}`);
    for (let i = 0; i < 100; i++) {
      try {
        if (statSync(`/proc/${pid}/ns/net`).ino === want && processComm(pid) === 'sleep') return new Anchor(ns, pid);
      } catch {
        /* not yet */
      }
      await sleep(20);
    }
    throw new Error(`anchor process in ${ns} did not enter the namespace`);
  }

  snmp(): Record<string, Record<string, number>> {
    return parseSnmp(readFileSync(`/proc/${this.pid}/net/snmp`, 'utf8'));
  }

  /** /proc/net/netstat (TcpExt, IpExt, …): the same two-line format as snmp. */
  netstat(): Record<string, Record<string, number>> {
    return parseSnmp(readFileSync(`/proc/${this.pid}/net/netstat`, 'utf8'));
  }

  dev(ifname: string): DevCounters {
    const d = parseNetDev(readFileSync(`/proc/${this.pid}/net/dev`, 'utf8'), ifname);
    if (!d) throw new Error(`no interface ${ifname} in ${this.ns}`);
    return d;
  }
}

/** Pids of the processes in a namespace (`ip netns pids`), less the ones given. */
export async function nsPids(ns: string, except: number[] = []): Promise<number[]> {
  const r = await run('ip', ['netns', 'pids', ns], { timeoutMs: 5000 });
  return r.stdout
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((p) => p > 0 && !except.includes(p));
}

export interface Snapshot {
  t: number;
  cpu: CpuTimes;
  /** pid → utime+stime ticks, processes in the LB namespace. */
  lb: Map<number, number>;
  /** pid → context switches summed over its threads. */
  lbSwitches: Map<number, { voluntary: number; involuntary: number }>;
  /** UDP datagrams that reached the real servers' UDP layer (InDatagrams + InErrors + NoPorts), summed. */
  rsUdp: number;
  client: DevCounters;
  clientActiveOpens: number;
  /** The client's SYN retransmits (TcpExt TCPSynRetrans): a connection that waited 1 s or more. */
  clientSynRetrans: number;
  /**
   * Packets the real servers rejected because they met a TIME_WAIT socket of the same 4-tuple
   * with a newer TCP timestamp (TcpExt PAWSTimewait), summed. For a SYN the server answers with
   * an ACK, the client resets and retransmits its SYN a second later.
   */
  rsPawsTw: number;
}

export interface Window {
  seconds: number;
  /** CPU seconds of the LB namespace's processes. */
  lbProc: number;
  /** Machine-wide softirq CPU seconds. */
  softirq: number;
  /** Machine-wide non-idle CPU seconds. */
  busy: number;
  rsUdp: number;
  clientRxPackets: number;
  clientTxPackets: number;
  clientRxBytes: number;
  clientTxBytes: number;
  clientActiveOpens: number;
  clientSynRetrans: number;
  rsPawsTw: number;
  /** Voluntary context switches of the LB processes' threads: each is a sleep, so a wake-up. */
  lbWakeups: number;
  /** Voluntary + involuntary context switches of the LB processes' threads. */
  lbSwitches: number;
}

export class Probe {
  constructor(
    private readonly lbNs: string,
    private readonly client: Anchor,
    private readonly clientIf: string,
    private readonly rs: Anchor[],
    private readonly hz: number,
    private readonly exceptPids: number[],
  ) {}

  /** The processes in the LB namespace now (read once per run: they do not change during one). */
  lbPids(): Promise<number[]> {
    return nsPids(this.lbNs, this.exceptPids);
  }

  /** Reads every counter; no process is spawned. */
  snap(pids: number[]): Snapshot {
    const t = performance.now();
    const lb = new Map<number, number>();
    const lbSwitches = new Map<number, { voluntary: number; involuntary: number }>();
    for (const p of pids) {
      const v = processTicks(p);
      if (v !== null) lb.set(p, v);
      const c = processSwitches(p);
      if (c !== null) lbSwitches.set(p, c);
    }
    let rsUdp = 0;
    let rsPawsTw = 0;
    for (const a of this.rs) {
      const u = a.snmp().Udp ?? {};
      rsUdp += (u.InDatagrams ?? 0) + (u.InErrors ?? 0) + (u.NoPorts ?? 0);
      rsPawsTw += a.netstat().TcpExt?.PAWSTimewait ?? 0;
    }
    return {
      t,
      cpu: readCpu(),
      lb,
      lbSwitches,
      rsUdp,
      client: this.client.dev(this.clientIf),
      clientActiveOpens: this.client.snmp().Tcp?.ActiveOpens ?? 0,
      clientSynRetrans: this.client.netstat().TcpExt?.TCPSynRetrans ?? 0,
      rsPawsTw,
    };
  }

  diff(a: Snapshot, b: Snapshot): Window {
    let lbTicks = 0;
    for (const [pid, v] of b.lb) {
      const before = a.lb.get(pid);
      lbTicks += v - (before ?? 0); // a process that appeared in between counts from zero
    }
    let lbWakeups = 0;
    let lbSwitches = 0;
    for (const [pid, v] of b.lbSwitches) {
      const before = a.lbSwitches.get(pid) ?? { voluntary: 0, involuntary: 0 };
      // A thread that ended in between takes its count with it: never below zero.
      lbWakeups += Math.max(0, v.voluntary - before.voluntary);
      lbSwitches += Math.max(0, v.voluntary + v.involuntary - before.voluntary - before.involuntary);
    }
    return {
      seconds: (b.t - a.t) / 1000,
      lbProc: lbTicks / this.hz,
      softirq: (b.cpu.softirq - a.cpu.softirq) / this.hz,
      busy: (b.cpu.busy - a.cpu.busy) / this.hz,
      rsUdp: b.rsUdp - a.rsUdp,
      clientRxPackets: b.client.rxPackets - a.client.rxPackets,
      clientTxPackets: b.client.txPackets - a.client.txPackets,
      clientRxBytes: b.client.rxBytes - a.client.rxBytes,
      clientTxBytes: b.client.txBytes - a.client.txBytes,
      clientActiveOpens: b.clientActiveOpens - a.clientActiveOpens,
      clientSynRetrans: b.clientSynRetrans - a.clientSynRetrans,
      rsPawsTw: b.rsPawsTw - a.rsPawsTw,
      lbWakeups,
      lbSwitches,
    };
  }
}

/**
 * The part of a run where the work happened: from the first to the last sampling interval in
 * which the counter grew by more than `frac` of its largest growth in one interval (this skips
 * sockperf's warm-up messages and its 2 s pause before the test). Returns snapshot indexes [a, b].
 */
export function activeWindow(values: number[], frac = 0.1): [number, number] | null {
  const d = values.slice(1).map((v, i) => v - values[i]!);
  const max = Math.max(0, ...d);
  if (!(max > 0)) return null;
  const thr = max * frac;
  const first = d.findIndex((x) => x > thr);
  let last = d.length - 1;
  while (last > first && !(d[last]! > thr)) last--;
  return [first, last + 1];
}

/**
 * Syscalls the LB processes make, by `perf stat` on the syscall tracepoints (linux-perf; needs
 * tracefs, as root): all of them (raw_syscalls:sys_enter) and the few an I/O loop is made of.
 * Counted over the whole generator run, not the active window (a tracepoint count cannot be
 * sampled without a process per read); an idle uvs worker adds about 20 wake-ups a second, a
 * small part of a run of thousands of packets a second. Counting costs a little per syscall
 * (the tracepoint fires), so it is on only where it is asked for.
 */
export const SYSCALL_NAMES = [
  'io_uring_enter',
  'read',
  'write',
  'readv',
  'writev',
  'poll',
  'ppoll',
  'epoll_wait',
  'epoll_pwait',
  'recvfrom',
  'sendto',
  'recvmsg',
  'sendmsg',
  'recvmmsg',
  'sendmmsg',
  'accept4',
  'connect',
  'futex',
] as const;

export interface SyscallCounts {
  /** Every syscall of the processes' threads. */
  total: number;
  /** By name, for the names in SYSCALL_NAMES the kernel has a tracepoint for. */
  byName: Record<string, number>;
}

/** Whether perf can count syscall tracepoints here: '' if so, else why not. */
export function syscallCountingUnavailable(): string {
  if (
    !existsSync('/sys/kernel/tracing/events/raw_syscalls/sys_enter') &&
    !existsSync('/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter')
  ) {
    return 'no syscall tracepoints (tracefs not mounted)';
  }
  return '';
}

function tracepointExists(name: string): boolean {
  return (
    existsSync(`/sys/kernel/tracing/events/syscalls/sys_enter_${name}`) ||
    existsSync(`/sys/kernel/debug/tracing/events/syscalls/sys_enter_${name}`)
  );
}

/** Parses `perf stat -x,` output: "count,unit,event,…" lines; "<not counted>" is 0. */
export function parsePerfStat(text: string): SyscallCounts | null {
  let total: number | null = null;
  const byName: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const f = line.split(',');
    if (f.length < 3) continue;
    const n = Number(f[0]);
    const v = Number.isFinite(n) ? n : 0;
    if (f[2] === 'raw_syscalls:sys_enter') total = v;
    const m = /^syscalls:sys_enter_(\w+)$/.exec(f[2] ?? '');
    if (m) byName[m[1]!] = v;
  }
  return total === null ? null : { total, byName };
}

export class SyscallCount {
  private child: ChildProcess | null = null;
  private constructor(private readonly done: Promise<RunResult>) {}

  /** Starts counting for these processes (all their threads); null when there are none. */
  static start(pids: number[], limitMs: number): SyscallCount | null {
    if (pids.length === 0) return null;
    const events = ['raw_syscalls:sys_enter', ...SYSCALL_NAMES.filter(tracepointExists).map((n) => `syscalls:sys_enter_${n}`)];
    let child: ChildProcess | null = null;
    const done = run('perf', ['stat', '-x', ',', '--no-big-num', '-e', events.join(','), '-p', pids.join(',')], {
      timeoutMs: limitMs,
      onSpawn: (c) => (child = c),
    });
    const sc = new SyscallCount(done);
    sc.child = child;
    return sc;
  }

  /** Stops perf (SIGINT makes it print its counts) and returns them; null if it failed. */
  async stop(): Promise<SyscallCounts | null> {
    if (this.child) signalGroup(this.child, 'SIGINT');
    const r = await this.done;
    return parsePerfStat(r.stderr);
  }
}
