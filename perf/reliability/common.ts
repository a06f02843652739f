/**
 * What the reliability scenarios share: the lab's uvsd configuration, starting and reading uvsd,
 * the packet generator (relgen.c, built at run time), the clients of client.ts (streamed, stopped
 * with SIGTERM), and samplers of uvsd's CPU and memory. Every child process is remembered until
 * it exits, so that Ctrl-C stops exactly the ones this run started (killAll).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiCall } from '../../control/client';
import { LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, type Lab } from '../../lab/lab';
import { run, runOk, sleep } from '../exec';
import { processMemKb, processTicks } from '../probe';
import type { SyncStats } from '../../conntrack/redis-sync';
import { parseJsonLines, type ApiSample, type Attempt, type StatsLike } from './report';

const ROOT = join(__dirname, '..', '..', '..');
export const CLIENT = join(ROOT, 'dist', 'perf', 'reliability', 'client.js');
export const RELGEN_SRC = join(ROOT, 'perf', 'reliability', 'relgen.c');

/** Where spoofed sources come from (RFC 2544 / RFC 3849): blackholed in the LB node. */
export const SPOOF4 = '198.18.0.0/15';
export const SPOOF6 = '2001:db8::/32';

export interface Ctx {
  lab: Lab;
  quick: boolean;
  /** The relgen binary. */
  relgen: string;
  workers: number;
  hz: number;
  log: (s: string) => void;
  /** --capture: a directory for packet captures of the real clients' traffic (Redis, SYN flood and table-full scenarios). */
  capture?: string;
}

// ── services ──────────────────────────────────────────────────────────────────────────────
/** The lab's services: HTTP, TCP echo, UDP echo, SCTP (nothing listens: packets only), IPv4 and IPv6. */
export function labServices(lab: Lab, opts: { scheduler?: string; weights?: number[]; extra?: unknown[] } = {}): unknown[] {
  const rs = (addrs: string[], port: number) => addrs.map((address, i) => ({ address, port, weight: opts.weights?.[i] ?? 1 }));
  const sched = opts.scheduler ?? 'rr';
  return [
    { name: 'http', protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: sched, realServers: rs(lab.rsAddrs, 8080) },
    { name: 'echo', protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'rr', realServers: rs(lab.rsAddrs, 9007) },
    { name: 'dns', protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs(lab.rsAddrs, 5353) },
    { name: 'sctp', protocol: 'sctp', address: LAB_VIP, port: 5000, scheduler: 'rr', realServers: rs(lab.rsAddrs, 5000) },
    { name: 'http6', protocol: 'tcp', address: LAB_VIP6, port: 80, scheduler: sched, realServers: rs(lab.rsAddrs6, 8080) },
    { name: 'echo6', protocol: 'tcp', address: LAB_VIP6, port: 7, scheduler: 'rr', realServers: rs(lab.rsAddrs6, 9007) },
    ...(opts.extra ?? []),
  ];
}

export function labConfig(ctx: Ctx, services: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { dataplane, ...rest } = extra as { dataplane?: Record<string, unknown> };
  return ctx.lab.config(services, {
    log: { level: 'warn' },
    ...rest,
    dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR], workers: ctx.workers, ...(dataplane ?? {}) },
  });
}

/** Writes the configuration, starts uvsd in the LB node and waits for its workers. Returns its pid. */
export async function startUvsd(ctx: Ctx, cfg: Record<string, unknown>, file = 'uvs-rel.yaml'): Promise<number> {
  const f = ctx.lab.writeConfig(cfg, file);
  const child = await ctx.lab.startUvsd(f).catch((e: Error) => {
    // The lab (and its log) is removed at the end: keep uvsd's last words in the error.
    let tail = '';
    try {
      tail = readFileSync(join(ctx.lab.dir, 'uvsd.log'), 'utf8').trim().split('\n').slice(-3).join(' | ').slice(0, 600);
    } catch {
      /* no log */
    }
    throw new Error(`${e.message}${tail ? `: ${tail}` : ''}`);
  });
  await waitWorkers(ctx.lab.socket, ctx.workers);
  return child.pid!;
}

export async function waitWorkers(socket: string, workers: number, timeoutMs = 15000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const st = await apiCall<{ workers: { ready: boolean }[] }>(socket, 'GET', '/v1/stats').catch(() => null);
    if (st?.status === 200 && st.body.workers.length === workers && st.body.workers.every((w) => w.ready)) return;
    if (Date.now() > deadline) throw new Error(`uvsd workers not ready after ${timeoutMs} ms`);
    await sleep(50);
  }
}

export interface Stats extends StatsLike {
  table: { entries: number; capacity: number };
  workers: { id: number; ready: boolean; restarts: number; rxPackets: number }[];
  shadows: number;
  redis: null | (SyncStats & { nodes: string[] });
  [k: string]: unknown;
}

export async function getStats(socket: string): Promise<Stats> {
  const r = await apiCall<Stats>(socket, 'GET', '/v1/stats');
  if (r.status !== 200) throw new Error(`GET /v1/stats: HTTP ${r.status}`);
  return r.body;
}

/**
 * GET /v1/stats at a moment when no packet is on its way through uvsd: two reads `gapMs` apart with
 * the same packets read, written and failed (a worker counts a batch's drops as it goes and its
 * reads and writes at the batch's end — on io_uring its writes when their completions come, within
 * one idle poll, 50 ms), so the second one's counters all belong to the same packets. Retried
 * until timeoutMs; `settled` false when no such moment came.
 */
export async function settledStats(socket: string, timeoutMs: number, gapMs = 150): Promise<{ stats: Stats; settled: boolean }> {
  const deadline = Date.now() + timeoutMs;
  let a = await getStats(socket);
  for (;;) {
    await sleep(gapMs);
    const b = await getStats(socket);
    const same = (k: string) => a.packets[k] === b.packets[k];
    if (same('rxPackets') && same('txPackets') && same('txErrors')) return { stats: b, settled: true };
    if (Date.now() > deadline) return { stats: b, settled: false };
    a = b;
  }
}

/** uvsd is alive: its process runs and its API answers. */
export async function uvsdAlive(lab: Lab): Promise<boolean> {
  const p = lab.uvsdProcess;
  if (!p || p.exitCode !== null || p.signalCode !== null) return false;
  return (await apiCall(lab.socket, 'GET', '/v1/info').catch(() => null))?.status === 200;
}

// ── the lab's network ─────────────────────────────────────────────────────────────────────
/**
 * Routes the spoofed source ranges to a blackhole in a namespace: uvsd's answers to them (SYN-ACKs
 * of the real servers, RSTs) vanish as they would on the Internet — no ICMP back into the lab.
 */
export async function blackholeSpoofed(ns: string): Promise<void> {
  await run('ip', ['-n', ns, 'route', 'replace', 'blackhole', SPOOF4], { timeoutMs: 5000 });
  await run('ip', ['-n', ns, '-6', 'route', 'replace', 'blackhole', SPOOF6], { timeoutMs: 5000 });
}

export async function linkMac(ns: string, dev: string): Promise<string> {
  const j = JSON.parse(await runOk('ip', ['-j', '-n', ns, 'link', 'show', dev], { timeoutMs: 5000 })) as { address: string }[];
  return j[0]!.address;
}

/** A device's counters in a namespace (ip -s): rx/tx packets and drops. */
export async function devStats(
  ns: string,
  dev: string,
): Promise<{ rxPackets: number; rxDropped: number; txPackets: number; txDropped: number } | null> {
  const r = await run('ip', ['-j', '-s', '-n', ns, 'link', 'show', dev], { timeoutMs: 5000 });
  try {
    const s = (
      JSON.parse(r.stdout) as { stats64: { rx: { packets: number; dropped: number }; tx: { packets: number; dropped: number } } }[]
    )[0]!.stats64;
    return { rxPackets: s.rx.packets, rxDropped: s.rx.dropped, txPackets: s.tx.packets, txDropped: s.tx.dropped };
  } catch {
    return null;
  }
}

// ── the generator ─────────────────────────────────────────────────────────────────────────
export interface GenResult {
  sent: number;
  refused: number;
  ms: number;
  vnet?: boolean;
  kinds: Record<string, number>;
}

export async function buildRelgen(out: string): Promise<void> {
  await runOk('cc', ['-O2', '-Wall', '-o', out, RELGEN_SRC], { timeoutMs: 60000 });
}

/** Runs relgen in ns with key=value arguments; bounded (hard kill) at its own limit + 30 s. */
export async function relgen(ctx: Ctx, ns: string, args: Record<string, string | number>, limitMs: number): Promise<GenResult> {
  const argv = Object.entries(args).map(([k, v]) => `${k}=${v}`);
  const out = await runOk(ctx.relgen, argv, { ns, timeoutMs: limitMs + 30000 });
  const r = parseJsonLines<GenResult>(out)[0];
  if (!r) throw new Error(`relgen printed nothing: ${out.slice(0, 200)}`);
  return r;
}

// ── clients ───────────────────────────────────────────────────────────────────────────────
const live = new Set<ChildProcess>();

export interface ClientRun<T> {
  child: ChildProcess;
  /** Every JSON line so far (streamed). */
  lines: T[];
  /** Resolves when it exited: every line. */
  done: Promise<T[]>;
  /** SIGTERM: the client finishes, prints and exits. */
  stop(): Promise<T[]>;
}

/** Runs `node client.js ARGS` in ns, bounded: SIGKILL after limitMs. */
export function client<T>(ns: string, args: string[], limitMs: number): ClientRun<T> {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, CLIENT, ...args], {
    stdio: ['ignore', 'pipe', 'ignore'],
    detached: true,
  });
  live.add(child);
  const lines: T[] = [];
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    const nl = buf.lastIndexOf('\n');
    if (nl < 0) return;
    lines.push(...parseJsonLines<T>(buf.slice(0, nl)));
    buf = buf.slice(nl + 1);
  });
  const hard = setTimeout(() => child.kill('SIGKILL'), limitMs);
  const done = new Promise<T[]>((resolve) =>
    child.on('close', () => {
      clearTimeout(hard);
      live.delete(child);
      lines.push(...parseJsonLines<T>(buf));
      buf = '';
      resolve(lines);
    }),
  );
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    return done;
  };
  return { child, lines, done, stop };
}

/** Stops every client still running (Ctrl-C, failures). */
export function killClients(sig: NodeJS.Signals = 'SIGKILL'): void {
  for (const c of live) {
    try {
      c.kill(sig);
    } catch {
      /* gone */
    }
  }
}

export interface EchoResult {
  server: string;
  /** The client's local port (null when it never connected). */
  port: number | null;
  sent: number;
  echoed: number;
  bad: number;
  error: string | null;
  maxGapMs: number;
  /** From the last echo (or the connect) to the end: a stream that stalled for good shows here, not in maxGapMs. */
  endGapMs: number;
}

/** n TCP echo streams to host:port (a line every intervalMs), each waited for until it is connected. */
export async function startEchoes(
  ns: string,
  host: string,
  port: number,
  n: number,
  seconds: number,
  intervalMs = 200,
): Promise<ClientRun<EchoResult>[]> {
  const runs = Array.from({ length: n }, () =>
    client<EchoResult>(ns, ['echo', host, String(port), String(seconds), String(intervalMs)], (seconds + 90) * 1000),
  );
  await sleep(Math.max(500, intervalMs * 2));
  return runs;
}

const echoOk = (r: EchoResult) => r.error === null && r.bad === 0 && r.echoed === r.sent && r.sent > 0;

/**
 * Stops echo streams; how many were broken (error, missing or wrong echoes, no output), and what
 * each broken one printed (null: it printed nothing).
 */
export async function stopEchoes(
  runs: ClientRun<EchoResult>[],
): Promise<{ results: EchoResult[]; broken: number; failed: (EchoResult | null)[]; maxGapMs: number }> {
  const outs = await Promise.all(runs.map((r) => r.stop()));
  const last = outs.map((o) => o[o.length - 1] ?? null);
  const results = last.filter((x): x is EchoResult => !!x);
  const failed = last.filter((x) => x === null || !echoOk(x));
  return { results, broken: failed.length, failed, maxGapMs: Math.max(0, ...results.map((r) => r.maxGapMs)) };
}

/** One broken echo stream in words: its error, lines sent and echoed, and its longest waits. */
export function echoFailure(r: EchoResult | null): string {
  if (!r) return 'no output (the client was killed)';
  const n = (x: number) => x.toLocaleString('en-US');
  return (
    `${r.error ?? (r.bad ? 'wrong echoes' : 'nothing sent')} — client port ${r.port ?? '—'}, server ${r.server || '—'}, ` +
    `${n(r.sent)} lines sent, ${n(r.echoed)} echoed, ${n(r.bad)} wrong; longest wait between echoes ${n(r.maxGapMs)} ms, ` +
    `from the last echo to the end ${n(r.endGapMs)} ms`
  );
}

export interface DownloadResult {
  ok: boolean;
  bytes: number;
  error: string | null;
  ms: number;
}

/** A download of `bytes` read at bytesPerS (client.ts download): open for bytes / bytesPerS seconds. */
export function download(
  ns: string,
  host: string,
  port: number,
  bytes: number,
  seed: number,
  bytesPerS: number,
  maxSeconds: number,
): { result: Promise<DownloadResult> } {
  const c = client<DownloadResult>(
    ns,
    ['download', host, String(port), String(bytes), String(seed), String(bytesPerS), String(maxSeconds)],
    (maxSeconds + 10) * 1000,
  );
  return { result: c.done.then((l) => l[l.length - 1] ?? { ok: false, bytes: 0, error: 'no output', ms: 0 }) };
}

export function connectProbe(
  ns: string,
  host: string,
  port: number,
  seconds: number,
  intervalMs: number,
  timeoutMs = 5000,
): ClientRun<Attempt> {
  return client<Attempt>(
    ns,
    ['connect-probe', host, String(port), String(seconds), String(intervalMs), String(timeoutMs)],
    (seconds + 30) * 1000,
  );
}

export function apiProbe(socket: string, ns: string, seconds: number, intervalMs = 20): ClientRun<ApiSample> {
  return client<ApiSample>(ns, ['api-probe', socket, String(seconds), String(intervalMs)], (seconds + 60) * 1000);
}

// ── samplers ──────────────────────────────────────────────────────────────────────────────
/** CPU of a process between two reads, in % of one CPU. */
export class CpuWatch {
  private t0 = Date.now();
  private ticks0: number;
  constructor(
    private readonly pid: number,
    private readonly hz: number,
  ) {
    this.ticks0 = processTicks(pid) ?? NaN;
  }
  read(): number | null {
    const t = processTicks(this.pid);
    if (t === null || !Number.isFinite(this.ticks0)) return null;
    const s = (Date.now() - this.t0) / 1000;
    return s > 0 ? ((t - this.ticks0) / this.hz / s) * 100 : null;
  }
}

/** Samples a process's RSS every 200 ms: the peak and the last value (MB). */
export class RssWatch {
  peakMb = 0;
  lastMb = 0;
  firstMb: number | null = null;
  /** Highest sample since the last phasePeak() call. */
  private sincePeak = 0;
  private timer: NodeJS.Timeout;
  constructor(private readonly pid: number) {
    this.sample();
    this.timer = setInterval(() => this.sample(), 200);
  }
  private sample(): void {
    const m = processMemKb(this.pid);
    if (!m || !Number.isFinite(m.rss)) return;
    this.lastMb = m.rss / 1024;
    this.firstMb ??= this.lastMb;
    this.peakMb = Math.max(this.peakMb, this.lastMb);
    this.sincePeak = Math.max(this.sincePeak, this.lastMb);
  }
  /** The highest sample since the previous call (or the start): one phase's peak. */
  phasePeak(): number {
    this.sample();
    const p = this.sincePeak;
    this.sincePeak = 0;
    return p;
  }
  stop(): void {
    clearInterval(this.timer);
    this.sample();
  }
}

/** Polls cond every intervalMs until it is true or timeoutMs passed; the ms it took, or null. */
export async function waitFor(cond: () => Promise<boolean> | boolean, timeoutMs: number, intervalMs = 100): Promise<number | null> {
  const t0 = Date.now();
  for (;;) {
    if (await cond()) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) return null;
    await sleep(intervalMs);
  }
}

export const round = (v: number | null, d = 0): number | null =>
  v === null || !Number.isFinite(v) ? null : Math.round(v * 10 ** d) / 10 ** d;
