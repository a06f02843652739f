/**
 * The control thread answers /healthz, the admin API, metrics and the drain and health timers on
 * one event loop, so no request may hold it for long (docs/control-plane.md, "The control
 * thread never stalls"). Work whose size a request chooses is therefore either done off the
 * thread (control/offload.ts: parsing, validation, table walks) or cut into slices: a generator
 * does one small step per `next()` (one real server added, one batch of captured packets
 * formatted) and `runSliced` runs steps until SLICE_MS has passed, then yields to the event loop
 * (setImmediate: pending I/O — a /healthz request — runs before the next slice). A slice is then
 * at most SLICE_MS plus one step, whatever the request's size.
 *
 * Measured here, read by GET /v1/stats `controlThread` and the metrics:
 *  - every sliced job's slices (count, longest), by kind;
 *  - a timer every LOOP_RESOLUTION_MS, in each one-second window of the last LOOP_WINDOWS: the
 *    event loop's longest delay (how late the timer ran: whatever held the thread, sliced or not
 *    — and also the time the thread waited for a CPU, which on a loaded machine is most of it),
 *    and the most CPU time the thread ran between two of its turns (the thread's own on-CPU time,
 *    /proc/thread-self/schedstat field 1 in ns: show_schedstat via proc_pid_schedstat,
 *    fs/proc/base.c). Whatever the machine's load, the latter is what the thread itself spent:
 *    the longest piece of work plus at most one period of slices — the figure the design bounds.
 *    The timer and its pread of a descriptor kept open cost about 0.35 % of a CPU (an idle uvsd's
 *    control thread: 0.85 % against 0.50 % without, over 20 s on the shared machine; reading the
 *    file by name every 10 ms, with perf_hooks.monitorEventLoopDelay beside it, cost 1 %).
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * A slice ends once it has run this long. 5 ms of work, then the loop turns: a /healthz that
 * arrives meanwhile waits at most this plus one step (tens of µs, one mh table of 131071 slots
 * about 3 ms) plus what else is queued; 20 times less than the 100 ms the health and API probes
 * allow, so the bound holds on a loaded machine too.
 */
export const SLICE_MS = 5;

/** The sampling timer's period (ms): a stall is seen within this much. */
export const LOOP_RESOLUTION_MS = 20;
/** One-second windows of loop delay kept for GET /v1/stats. */
export const LOOP_WINDOWS = 60;

export interface SliceStats {
  /** Jobs run in slices. */
  jobs: number;
  slices: number;
  /** The longest slice, ms (wall time: a busy machine may stretch it). */
  longestSliceMs: number;
}

export interface LoopDelayWindow {
  /** When the window ended, ms since the epoch. */
  end: number;
  /** The longest event-loop delay seen in it, ms (wall time: waits for a CPU included). */
  maxMs: number;
  /** The longest CPU time the thread ran between two turns of its loop, ms; null where /proc has no schedstat. */
  maxCpuMs: number | null;
}

export interface ControlThreadView {
  /**
   * Event-loop delay (wall) and the longest CPU run between loop turns: the longest since uvsd
   * started, the open window's, and the last windows'.
   */
  loopDelay: { maxMs: number; currentMs: number; maxCpuMs: number | null; currentCpuMs: number | null; windows: LoopDelayWindow[] };
  /** Sliced work by kind (apply, publish, capture, …). */
  slices: Record<string, SliceStats>;
}

const byKind = new Map<string, SliceStats>();

function statsOf(kind: string): SliceStats {
  let s = byKind.get(kind);
  if (!s) byKind.set(kind, (s = { jobs: 0, slices: 0, longestSliceMs: 0 }));
  return s;
}

function note(s: SliceStats, ms: number): void {
  s.slices++;
  if (ms > s.longestSliceMs) s.longestSliceMs = ms;
}

/** Runs `steps` to its end in slices of SLICE_MS, yielding to the event loop between them. */
export async function runSliced<T>(kind: string, steps: Iterator<unknown, T>): Promise<T> {
  const st = statsOf(kind);
  st.jobs++;
  for (;;) {
    const t0 = performance.now();
    let r: IteratorResult<unknown, T>;
    do r = steps.next();
    while (!r.done && performance.now() - t0 < SLICE_MS);
    note(st, performance.now() - t0);
    if (r.done) return r.value;
    await nextTurn();
  }
}

/** Runs `steps` to its end at once (start-up, tests, callers that must not yield). */
export function runAll<T>(steps: Iterator<unknown, T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * For loops that are not generators: `if (s.due()) await s.pause();` between items, `s.end()`
 * after the last.
 */
export class Slicer {
  private readonly st: SliceStats;
  private t0 = performance.now();

  constructor(kind: string) {
    this.st = statsOf(kind);
    this.st.jobs++;
  }

  due(): boolean {
    return performance.now() - this.t0 >= SLICE_MS;
  }

  async pause(): Promise<void> {
    note(this.st, performance.now() - this.t0);
    await nextTurn();
    this.t0 = performance.now();
  }

  /** Records the slice in progress: the job's last, or the one before an await of other work. */
  end(): void {
    note(this.st, performance.now() - this.t0);
  }

  /** After an await of something else (a timer, a worker's answer): a new slice starts. */
  resume(): void {
    this.t0 = performance.now();
  }
}

let tick: NodeJS.Timeout | null = null;
const windows: LoopDelayWindow[] = [];
let allTimeMaxMs = 0;
let allTimeCpuMs = 0;
let delayMs = 0;
let cpuMs = 0;
let schedFd = -1;
const schedBuf = Buffer.alloc(64);
let lastCpuNs = Number.NaN;
let lastAt = 0;
let windowEnd = 0;

/** The control thread's on-CPU time in ns (schedstat's first field), NaN without schedstat. */
function threadCpuNs(): number {
  if (schedFd < 0) return Number.NaN;
  try {
    // pread at 0 regenerates a seq_file: fresh figures on the descriptor opened once.
    const n = readSync(schedFd, schedBuf, 0, schedBuf.length, 0);
    return Number(schedBuf.toString('latin1', 0, n).split(' ', 1)[0]);
  } catch {
    return Number.NaN;
  }
}

/** Starts measuring the event loop's delay and CPU runs (idempotent; from the thread measured). */
export function watchLoopDelay(): void {
  if (tick) return;
  try {
    schedFd = openSync('/proc/thread-self/schedstat', 'r'); // this thread's, whoever reads it later
  } catch {
    schedFd = -1; // no schedstat (CONFIG_SCHED_INFO off): delays only
  }
  lastCpuNs = threadCpuNs();
  lastAt = performance.now();
  windowEnd = Date.now() + 1000;
  tick = setInterval(() => {
    const at = performance.now();
    delayMs = Math.max(delayMs, at - lastAt - LOOP_RESOLUTION_MS);
    lastAt = at;
    const ns = threadCpuNs();
    cpuMs = Math.max(cpuMs, (ns - lastCpuNs) / 1e6 || 0);
    lastCpuNs = ns;
    const now = Date.now();
    if (now < windowEnd) return;
    windowEnd = now + 1000;
    allTimeMaxMs = Math.max(allTimeMaxMs, delayMs);
    allTimeCpuMs = Math.max(allTimeCpuMs, cpuMs);
    windows.push({ end: now, maxMs: delayMs, maxCpuMs: schedFd < 0 ? null : cpuMs });
    delayMs = cpuMs = 0;
    if (windows.length > LOOP_WINDOWS) windows.shift();
  }, LOOP_RESOLUTION_MS);
  tick.unref();
}

export function stopWatchingLoopDelay(): void {
  if (tick) clearInterval(tick);
  tick = null;
  if (schedFd >= 0) closeSync(schedFd);
  schedFd = -1;
}

export function controlThreadView(): ControlThreadView {
  const cpu = schedFd >= 0;
  return {
    loopDelay: {
      maxMs: Math.max(allTimeMaxMs, delayMs),
      currentMs: delayMs,
      maxCpuMs: cpu ? Math.max(allTimeCpuMs, cpuMs) : null,
      currentCpuMs: cpu ? cpuMs : null,
      windows: windows.slice(),
    },
    slices: Object.fromEntries([...byKind].map(([k, v]) => [k, { ...v }])),
  };
}
