/**
 * Where uvsd's time goes, per thread (issue 16 §1): `uvs perf --profile DIR` records
 *
 *   - with perf (linux-perf): `perf record -g` of every uvsd thread over each uvs measurement's
 *     generator run — on-CPU samples only, kernel and user stacks, JS frames named through
 *     node's --perf-basic-prof-only-functions map — folded into `DIR/r<round>-<measurement>.folded`
 *     (one line per distinct stack, `thread;root;…;leaf count`: flamegraph.pl's input);
 *   - `node --cpu-prof`: one .cpuprofile per thread (control thread and each worker) over uvsd's
 *     whole life, in `DIR/uvsd-<n>/` (V8's sampler: wall time, so a worker blocked in its
 *     io_uring wait shows as self time of the native `uringWait`), with `--trace-gc`'s lines in
 *     `DIR/uvsd-<n>/uvsd.log`;
 *
 * and this file turns them into tables: `node dist/perf/profile.js DIR` writes `DIR/PROFILE.md`
 * (and prints it): per thread, on-CPU time and its share of the window, the split into kernel
 * (by syscall, and the softirq run inside it), JS, V8 builtins, GC, V8/Node C++, the addon and
 * libc, and the top functions by self time; then the same from the .cpuprofile files (wall time:
 * idle, GC, native calls, JS) and the GC pauses. No dependency.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';

// ── perf record ──────────────────────────────────────────────────────────────────────────────
/** uvs's compiled files, left out of JS frame names (`lb/worker.js:238`, not the full path). */
const DIST = `${join(__dirname, '..')}/`;

/** Sampling frequency of perf record (Hz per thread on CPU): odd, so it does not beat with 1 ms timers. */
export const PERF_HZ = 997;

/** perf record of every thread of the given processes, with call stacks, until stop(). */
export class PerfRecord {
  private constructor(
    private readonly child: ChildProcess,
    readonly out: string,
    readonly pids: number[],
    /** The processes are one uvsd: name its threads control / worker (else by command). */
    readonly uvsd: boolean,
    readonly startedAt: number,
  ) {}

  static start(pids: number[], out: string, uvsd: boolean): PerfRecord {
    const child = spawn('perf', ['record', '-q', '-F', String(PERF_HZ), '-g', '-p', pids.join(','), '-o', out], { stdio: 'ignore' });
    return new PerfRecord(child, out, pids, uvsd, Date.now());
  }

  /** Stops the recording (SIGINT: perf writes its file) and returns the window in ms. */
  async stop(): Promise<number> {
    const ms = Date.now() - this.startedAt;
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const done = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGINT');
      const t = setTimeout(() => this.child.kill('SIGKILL'), 10000);
      await done;
      clearTimeout(t);
    }
    return ms;
  }
}

/**
 * Folds a recording into stacks: `thread;root;…;leaf` → samples. uvsd's threads: `control` (the
 * main thread, tid = pid), `worker <tid>` (a stack through node::worker::Worker::Run), else
 * `<comm> <tid>` (V8's platform threads — concurrent GC —, libuv's pool, io_uring's iou-wrk).
 * Other processes' threads by command alone (`haproxy`, `nginx`: all their threads together).
 */
export function foldPerf(rec: Pick<PerfRecord, 'out' | 'pids' | 'uvsd'>): Map<string, number> {
  const r = spawnSync('perf', ['script', '-i', rec.out, '-F', 'comm,tid,ip,sym,dso'], { encoding: 'utf8', maxBuffer: 1 << 30 });
  if (r.status !== 0) throw new Error(`perf script: ${r.stderr.trim().split('\n').slice(-1)[0] ?? r.status}`);
  const pid = rec.uvsd ? rec.pids[0]! : -1;
  const jsMap = rec.uvsd ? JitMap.read(`/tmp/perf-${pid}.map`) : undefined;
  const samples: { comm: string; tid: number; frames: string[] }[] = [];
  let head: { comm: string; tid: number } | null = null;
  let frames: string[] = [];
  const flush = (): void => {
    if (head) samples.push({ ...head, frames: frames.reverse() });
    head = null;
    frames = [];
  };
  for (const line of r.stdout.split('\n')) {
    if (line === '') {
      flush();
      continue;
    }
    if (!/^\s/.test(line)) {
      flush();
      const m = /^(.*?)\s+(\d+)\s*$/.exec(line);
      head = m ? { comm: m[1]!.trim(), tid: Number(m[2]) } : { comm: line.trim(), tid: 0 };
      continue;
    }
    // "\t    addr sym (dso)"
    const m = /^\s*([0-9a-f]+)\s+(.*?)\s+\(([^)]*)\)\s*$/.exec(line);
    if (!m) continue;
    const js = /\/tmp\/perf-\d+\.map$/.test(m[3]!) ? jsMap?.find(parseInt(m[1]!, 16)) : undefined;
    frames.push(js ?? frameName(m[2]!, m[3]!));
  }
  flush();
  // A thread is a worker if any of its stacks runs through Worker::Run (some stacks are cut short).
  const workers = new Set(samples.filter((x) => x.frames.some((f) => f.startsWith('node::worker::Worker::Run'))).map((x) => x.tid));
  const folded = new Map<string, number>();
  for (const x of samples) {
    const thread = !rec.uvsd ? x.comm : x.tid === pid ? 'control' : workers.has(x.tid) ? `worker ${x.tid}` : `${x.comm} ${x.tid}`;
    const key = [thread, ...x.frames].join(';');
    folded.set(key, (folded.get(key) ?? 0) + 1);
  }
  return folded;
}

/**
 * node's --perf-basic-prof map (`start size name` per line, appended as code is made). V8 reuses
 * code space, so one address can have several entries: the latest is the live one. perf itself
 * takes the first (a worker's io_uring loop came out as the table's link()), so JS frames are
 * named here instead.
 */
class JitMap {
  private constructor(
    private readonly starts: number[],
    private readonly ends: number[],
    private readonly names: string[],
  ) {}
  static read(file: string): JitMap | undefined {
    if (!existsSync(file)) return undefined;
    const starts: number[] = [];
    const ends: number[] = [];
    const names: string[] = [];
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line);
      if (!m) continue;
      const a = parseInt(m[1]!, 16);
      starts.push(a);
      ends.push(a + parseInt(m[2]!, 16));
      names.push(m[3]!.replace(/;/g, ':').split(DIST).join(''));
    }
    return new JitMap(starts, ends, names);
  }
  /** The latest entry covering addr. */
  find(addr: number): string | undefined {
    for (let i = this.starts.length - 1; i >= 0; i--) if (addr >= this.starts[i]! && addr < this.ends[i]!) return this.names[i];
    return undefined;
  }
}

/** A frame as `sym [dso kind]`: JS frames keep V8's name, native ones get their library. */
function frameName(sym: string, dso: string): string {
  const s = sym.replace(/;/g, ':');
  if (dso.includes('kernel.kallsyms') || dso === '[kernel]') return `${s} [k]`;
  if (/\/tmp\/perf-\d+\.map$/.test(dso)) return s === '[unknown]' ? 'JS:[unknown]' : s;
  const lib = basename(dso);
  return `${s} [${lib}]`;
}

// ── worker stalls: the time a worker spends outside its io_uring wait ───────────────────────
/** x86_64's io_uring_enter: the tracepoint filter of SyscallGaps. */
const NR_IO_URING_ENTER = 426;

/**
 * perf record of io_uring_enter's entries and exits (raw_syscalls tracepoints, filtered on the
 * syscall number, no stacks) of every thread of a uvsd. A worker on the io_uring path makes one
 * io_uring_enter per loop turn, so the time from one's exit to the next one's entry is the turn's
 * work: its batch, and whatever else held the thread — GC, a yield to the event loop, a snapshot,
 * being preempted. A gap ≥ 0.5 ms is a stall a packet that arrived meanwhile waited for.
 * sched:sched_switch of the same threads says which gaps were (partly) spent preempted: the
 * thread was switched out while runnable (prev_state R), i.e. another thread had its CPU.
 */
export class SyscallGaps {
  private constructor(
    private readonly child: ChildProcess,
    readonly out: string,
  ) {}
  static start(pid: number, out: string): SyscallGaps {
    const f = `id == ${NR_IO_URING_ENTER}`;
    const child = spawn(
      'perf',
      [
        'record',
        '-q',
        '-e',
        'raw_syscalls:sys_enter',
        '--filter',
        f,
        '-e',
        'raw_syscalls:sys_exit',
        '--filter',
        f,
        '-e',
        'sched:sched_switch',
        '-p',
        String(pid),
        '-o',
        out,
      ],
      { stdio: 'ignore' },
    );
    return new SyscallGaps(child, out);
  }
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const done = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGINT');
    const t = setTimeout(() => this.child.kill('SIGKILL'), 10000);
    await done;
    clearTimeout(t);
  }
}

/** Gap histogram bounds (ms): [0, 0.1), [0.1, 0.5), [0.5, 1), [1, 5), [5, ∞). */
export const GAP_BOUNDS_MS = [0.1, 0.5, 1, 5] as const;

export interface GapStats {
  /**
   * Per worker thread: loop turns, histogram of the time outside the wait, the longest (ms), the
   * sum (ms); preempted: of the gaps ≥ 0.5 ms, those in which the thread was switched out runnable.
   */
  threads: { tid: number; turns: number; hist: number[]; maxMs: number; outsideMs: number; preempted: number }[];
}

/** Reads a SyscallGaps recording: per thread, the gaps between an io_uring_enter's exit and the next entry. */
export function syscallGaps(data: string): GapStats {
  const r = spawnSync('perf', ['script', '-i', data, '-F', 'tid,time,event,trace'], { encoding: 'utf8', maxBuffer: 1 << 30 });
  if (r.status !== 0) throw new Error(`perf script: ${r.stderr.trim().split('\n').slice(-1)[0] ?? r.status}`);
  const lastExit = new Map<number, number>();
  /** Threads switched out runnable since their last io_uring_enter exit. */
  const preemptedSinceExit = new Set<number>();
  const by = new Map<number, GapStats['threads'][number]>();
  for (const line of r.stdout.split('\n')) {
    const sw = /^\s*(\d+)\s+[\d.]+:\s+sched:sched_switch:.*prev_state=(\S+)/.exec(line);
    if (sw) {
      if (sw[2]!.startsWith('R')) preemptedSinceExit.add(Number(sw[1]));
      continue;
    }
    const m = /^\s*(\d+)\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit)/.exec(line);
    if (!m) continue;
    const tid = Number(m[1]);
    const t = Number(m[2]) * 1000;
    if (m[3] === 'exit') {
      lastExit.set(tid, t);
      preemptedSinceExit.delete(tid);
      continue;
    }
    const e = lastExit.get(tid);
    if (e === undefined) continue;
    const gap = t - e;
    let x = by.get(tid);
    if (!x) by.set(tid, (x = { tid, turns: 0, hist: [0, 0, 0, 0, 0], maxMs: 0, outsideMs: 0, preempted: 0 }));
    x.turns++;
    x.outsideMs += gap;
    if (gap > x.maxMs) x.maxMs = gap;
    if (gap >= GAP_BOUNDS_MS[1] && preemptedSinceExit.has(tid)) x.preempted++;
    let b = 0;
    while (b < GAP_BOUNDS_MS.length && gap >= GAP_BOUNDS_MS[b]!) b++;
    x.hist[b]!++;
  }
  return { threads: [...by.values()].sort((a, b) => a.tid - b.tid) };
}

export function renderGaps(title: string, g: GapStats): string {
  let out = `### ${title}: worker loop turns (time outside io_uring_enter)

`;
  out += `| worker | turns | < 0.1 ms | 0.1–0.5 ms | 0.5–1 ms | 1–5 ms | ≥ 5 ms | of those ≥ 0.5 ms: preempted | longest ms | outside the wait, ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n`;
  for (const t of g.threads)
    out += `| ${t.tid} | ${t.turns} | ${t.hist.join(' | ')} | ${t.preempted ?? '?'} | ${t.maxMs.toFixed(2)} | ${t.outsideMs.toFixed(0)} |\n`;
  if (!g.threads.length) out += '| (no io_uring_enter: poll path?) | | | | | | | | | |\n';
  return out + '\n';
}

export function writeFolded(file: string, folded: Map<string, number>): void {
  const lines = [...folded].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`);
  writeFileSync(file, lines.join('\n') + '\n');
}

export function readFolded(file: string): Map<string, number> {
  const m = new Map<string, number>();
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const i = line.lastIndexOf(' ');
    if (i > 0) m.set(line.slice(0, i), (m.get(line.slice(0, i)) ?? 0) + Number(line.slice(i + 1)));
  }
  return m;
}

// ── categories ───────────────────────────────────────────────────────────────────────────────
const GC_FRAME =
  /(Heap::CollectGarbage|Heap::PerformGarbageCollection|ScavengerCollector|Scavenger::|MarkCompactCollector|ConcurrentMarking|MinorMarkCompact|Sweeper::|IncrementalMarking|Heap::MarkCompact|Heap::Scavenge|GCTracer|MemoryAllocator::Unmapper)/;
/** A syscall's own frame; ksys_* and __sys_* where the kernel inlined the __x64_sys_ wrapper (ctun's read/write). */
const SYSCALL_FRAME = /^(?:__x64_sys_|__do_sys_|__se_sys_|__ia32_sys_|ksys_|__sys_)(\w+) \[k\]$/;

/** What a sample's CPU was spent on, from its stack (leaf last). */
export function category(frames: string[]): string {
  if (frames.some((f) => GC_FRAME.test(f))) return 'GC';
  const leaf = frames[frames.length - 1] ?? '';
  if (leaf.endsWith(' [k]')) {
    let sys = '';
    for (let i = frames.length - 1; i >= 0; i--) {
      const m = SYSCALL_FRAME.exec(frames[i]!);
      if (m) {
        sys = m[1]!;
        break;
      }
    }
    const softirq = frames.some((f) => f.startsWith('net_rx_action ') || f.startsWith('__do_softirq ') || f.startsWith('handle_softirqs '));
    if (sys) return `kernel: ${sys}${softirq ? ' → softirq (network stack)' : ''}`;
    return softirq ? 'kernel: softirq (network stack)' : 'kernel: other (interrupts, scheduler, page faults)';
  }
  if (leaf.startsWith('JS:') || leaf.startsWith('LazyCompile:') || leaf.startsWith('Function:')) return 'JS (uvs and Node.js code)';
  if (leaf.startsWith('Builtins_') || leaf.startsWith('BytecodeHandler')) return 'V8 builtins and interpreter';
  if (/\[[^\]]*\.node\]$/.test(leaf)) return 'addon (lb/native, C)';
  if (/\[node\]$/.test(leaf)) return 'V8 / Node.js runtime (C++)';
  return 'libc and other libraries';
}

interface ThreadSummary {
  thread: string;
  samples: number;
  cats: Map<string, number>;
  self: Map<string, number>;
  /** JS functions, counted once per sample they are on the stack of. */
  incl: Map<string, number>;
}

export function summarizeFolded(folded: Map<string, number>): ThreadSummary[] {
  const by = new Map<string, ThreadSummary>();
  for (const [key, n] of folded) {
    const [thread, ...frames] = key.split(';');
    let t = by.get(thread!);
    if (!t) by.set(thread!, (t = { thread: thread!, samples: 0, cats: new Map(), self: new Map(), incl: new Map() }));
    t.samples += n;
    const c = category(frames);
    t.cats.set(c, (t.cats.get(c) ?? 0) + n);
    const leaf = frames[frames.length - 1] ?? '?';
    t.self.set(leaf, (t.self.get(leaf) ?? 0) + n);
    for (const f of new Set(frames)) if (f.startsWith('JS:')) t.incl.set(f, (t.incl.get(f) ?? 0) + n);
  }
  // Control first, then workers, then the rest by samples.
  const rank = (t: ThreadSummary) => (t.thread === 'control' ? 0 : t.thread.startsWith('worker') ? 1 : 2);
  return [...by.values()].sort((a, b) => rank(a) - rank(b) || b.samples - a.samples);
}

const pct = (n: number, d: number): string => (d > 0 ? `${((100 * n) / d).toFixed(1)} %` : '—');
const short = (s: string, w = 90): string => (s.length > w ? `${s.slice(0, w - 1)}…` : s);
const cell = (s: string): string => short(s).replace(/\|/g, '\\|');

/** Markdown for one folded file: per thread, CPU and its categories, the top functions. */
export function renderFolded(
  title: string,
  folded: Map<string, number>,
  windowMs: number | null,
  per: { n: number; unit: string } | null = null,
  top = 12,
): string {
  const threads = summarizeFolded(folded);
  const all = threads.reduce((s, t) => s + t.samples, 0);
  const ms = (n: number) => ((1000 * n) / PERF_HZ).toFixed(0);
  // CPU per unit of work (µs), when the run's units are known.
  const us = (n: number) => (per ? ((1e6 * n) / PERF_HZ / per.n).toFixed(1) : '');
  let out = `### ${title}\n\n`;
  out += `perf record -F ${PERF_HZ} -g, on-CPU samples of every thread of the LB${windowMs ? ` over ${(windowMs / 1000).toFixed(1)} s` : ''}: ${all} samples ≈ ${ms(all)} ms CPU${per ? `; ≈ ${Math.round(per.n)} ${per.unit}s (the generator's rate × its duration): ${us(all)} µs per ${per.unit}` : ''}.\n\n`;
  const perCol = per ? ` µs per ${per.unit} |` : '';
  out += `| thread | CPU ms | ${windowMs ? 'of the window | ' : ''}share of the LB's CPU |${perCol}\n|---|---:|${windowMs ? '---:|' : ''}---:|${per ? '---:|' : ''}\n`;
  for (const t of threads)
    out += `| ${t.thread} | ${ms(t.samples)} | ${windowMs ? `${pct((1000 * t.samples) / PERF_HZ, windowMs)} | ` : ''}${pct(t.samples, all)} |${per ? ` ${us(t.samples)} |` : ''}\n`;
  // Categories: one column per main thread group.
  const groups: [string, ThreadSummary[]][] = [
    ['control', threads.filter((t) => t.thread === 'control')],
    ['workers', threads.filter((t) => t.thread.startsWith('worker'))],
    ['other threads', threads.filter((t) => t.thread !== 'control' && !t.thread.startsWith('worker'))],
  ];
  const cats = new Map<string, number>();
  for (const t of threads) for (const [c, n] of t.cats) cats.set(c, (cats.get(c) ?? 0) + n);
  out += `\n| where the CPU went | all threads |${perCol} ${groups.map((g) => g[0]).join(' | ')} |\n|---|---:|${per ? '---:|' : ''}${groups.map(() => '---:|').join('')}\n`;
  for (const [c, n] of [...cats].sort((a, b) => b[1] - a[1])) {
    const cols = groups.map(([, ts]) => {
      const tot = ts.reduce((s, t) => s + t.samples, 0);
      const v = ts.reduce((s, t) => s + (t.cats.get(c) ?? 0), 0);
      return tot ? pct(v, tot) : '—';
    });
    out += `| ${c} | ${pct(n, all)} |${per ? ` ${us(n)} |` : ''} ${cols.join(' | ')} |\n`;
  }
  for (const [g, ts] of groups) {
    if (!ts.length) continue;
    const tot = ts.reduce((s, t) => s + t.samples, 0);
    const self = new Map<string, number>();
    const incl = new Map<string, number>();
    for (const t of ts) {
      for (const [f, n] of t.self) self.set(f, (self.get(f) ?? 0) + n);
      for (const [f, n] of t.incl) incl.set(f, (incl.get(f) ?? 0) + n);
    }
    out += `\n${g}: top functions by self time (of ${ms(tot)} ms)\n\n| function | self |\n|---|---:|\n`;
    for (const [f, n] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) out += `| ${cell(f)} | ${pct(n, tot)} |\n`;
    if (incl.size) {
      out += `\n${g}: JS functions by inclusive time (on the stack)\n\n| function | inclusive |\n|---|---:|\n`;
      for (const [f, n] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, top)) out += `| ${cell(f)} | ${pct(n, tot)} |\n`;
    }
  }
  return out;
}

// ── flame graph ──────────────────────────────────────────────────────────────────────────────
interface FlameNode {
  name: string;
  n: number;
  kids: Map<string, FlameNode>;
}

const esc = (x: string): string => x.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A frame's colour by what it is: kernel, JS, V8 builtins, the addon, the runtime and libraries. */
function frameColour(f: string): string {
  if (f.endsWith(' [k]')) return '#e8a05a';
  if (f.startsWith('JS:')) return '#7cc47c';
  if (f.startsWith('Builtins_')) return '#b5d86a';
  if (/\[[^\]]*\.node\]$/.test(f)) return '#6fa8dc';
  if (GC_FRAME.test(f)) return '#c27ba0';
  return '#e8d25a';
}

/**
 * An SVG flame graph (root at the bottom) of folded stacks, without a dependency: one rectangle per
 * frame that holds at least minFrac of the samples, its name and share in a tooltip. Colours:
 * kernel orange, JS green, V8 builtins light green, the addon blue, GC purple, the rest yellow.
 */
export function renderFlameSvg(title: string, folded: Map<string, number>, minFrac = 0.002): string {
  const root: FlameNode = { name: 'all', n: 0, kids: new Map() };
  let depth = 0;
  for (const [k, n] of folded) {
    const frames = k.split(';');
    root.n += n;
    let node = root;
    for (const f of frames) {
      let c = node.kids.get(f);
      if (!c) node.kids.set(f, (c = { name: f, n: 0, kids: new Map() }));
      c.n += n;
      node = c;
    }
    if (frames.length > depth) depth = frames.length;
  }
  const W = 1200;
  const H = 16;
  const min = root.n * minFrac;
  const rects: string[] = [];
  let maxLevel = 0;
  const walk = (node: FlameNode, x: number, level: number): void => {
    if (level > maxLevel) maxLevel = level;
    const w = (node.n / root.n) * W;
    rects.push(
      `<g><title>${esc(node.name)} — ${node.n} samples, ${((100 * node.n) / root.n).toFixed(2)} %</title><rect x="${x.toFixed(1)}" y="LEVEL${level}" width="${Math.max(w - 0.5, 0.5).toFixed(1)}" height="${H - 1}" fill="${node === root ? '#cccccc' : frameColour(node.name)}"/>` +
        (w > 40 ? `<text x="${(x + 3).toFixed(1)}" y="LEVEL${level}T">${esc(short(node.name, Math.floor(w / 7)))}</text>` : '') +
        '</g>',
    );
    let cx = x;
    for (const c of [...node.kids.values()].sort((a, b) => a.name.localeCompare(b.name))) {
      if (c.n >= min) walk(c, cx, level + 1);
      cx += (c.n / root.n) * W;
    }
  };
  walk(root, 0, 0);
  const top = 30;
  const height = top + (maxLevel + 1) * H + 10;
  const y = (l: number) => top + (maxLevel - l) * H;
  const body = rects.join('\n').replace(/LEVEL(\d+)(T?)/g, (_m, l: string, t: string) => String(t ? y(Number(l)) + H - 4 : y(Number(l))));
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" font-family="monospace" font-size="11">
<text x="4" y="18" font-size="13">${esc(title)} — ${root.n} samples (frames under ${(minFrac * 100).toFixed(1)} % left out; hover for names)</text>
${body}
</svg>
`;
}

// ── V8 .cpuprofile ───────────────────────────────────────────────────────────────────────────
interface CpuNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: CpuNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Wall time per category and per function (self) of one thread's .cpuprofile, in µs. */
export function summarizeCpuProfile(p: CpuProfile): { totalUs: number; cats: Map<string, number>; self: Map<string, number> } {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const selfById = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const dt = p.timeDeltas[i + 1] ?? 0; // a sample's time runs until the next one
    selfById.set(p.samples[i]!, (selfById.get(p.samples[i]!) ?? 0) + dt);
  }
  const cats = new Map<string, number>();
  const self = new Map<string, number>();
  let totalUs = 0;
  for (const [id, us] of selfById) {
    const n = byId.get(id);
    if (!n || us <= 0) continue;
    totalUs += us;
    const { functionName: fn, url, lineNumber } = n.callFrame;
    const c =
      fn === '(idle)'
        ? 'idle (event loop waiting)'
        : fn === '(garbage collector)'
          ? 'GC'
          : fn === '(program)' || fn === '(root)'
            ? 'V8/Node native, not in a JS call'
            : url === ''
              ? 'native calls from JS (addon, Node C++; a worker blocked in its wait shows here)'
              : 'JS';
    cats.set(c, (cats.get(c) ?? 0) + us);
    const name = url ? `${fn || '(anonymous)'} ${basename(url)}:${lineNumber + 1}` : fn;
    self.set(name, (self.get(name) ?? 0) + us);
  }
  return { totalUs, cats, self };
}

/** GC pauses from --trace-gc lines: `[pid:0x…] 1234 ms: Scavenge 5.1 (6.0) -> 4.2 (7.0) MB, 0.52 / 0.00 ms …`. */
export function gcPauses(log: string): { isolate: string; atMs: number; kind: string; ms: number }[] {
  const out: { isolate: string; atMs: number; kind: string; ms: number }[] = [];
  for (const line of log.split('\n')) {
    const m = /^\[\d+:(0x[0-9a-f]+)\]\s+(\d+) ms: ([\w-]+(?: \([^)]*\))?)[^,]*, ([\d.]+) \/ [\d.]+ ms/.exec(line);
    if (m) out.push({ isolate: m[1]!, atMs: Number(m[2]), kind: m[3]!, ms: Number(m[4]) });
  }
  return out;
}

/** GC pauses of an isolate's first STARTUP_MS (module loading, compilation) are left out of the "running" columns. */
const STARTUP_MS = 2000;

/** Markdown for one uvsd start's .cpuprofile files and GC log. */
export function renderCpuProfiles(dir: string, top = 10): string {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort();
  let out = `### ${basename(dir)}: ${files.length ? "node --cpu-prof (wall time over uvsd's life) and " : ''}GC\n\n`;
  for (const f of files) {
    // CPU.<date>.<time>.<pid>.<threadId>.<seq>.cpuprofile: thread 0 is the main (control) thread.
    const tid = Number(f.split('.')[4]);
    const s = summarizeCpuProfile(JSON.parse(readFileSync(join(dir, f), 'utf8')) as CpuProfile);
    out += `${tid === 0 ? 'control thread' : `worker thread ${tid}`} (${(s.totalUs / 1e6).toFixed(1)} s sampled)\n\n| where the time went | share |\n|---|---:|\n`;
    for (const [c, us] of [...s.cats].sort((a, b) => b[1] - a[1])) out += `| ${c} | ${pct(us, s.totalUs)} |\n`;
    out += `\n| top by self time | share |\n|---|---:|\n`;
    for (const [fn, us] of [...s.self].sort((a, b) => b[1] - a[1]).slice(0, top)) out += `| ${cell(fn)} | ${pct(us, s.totalUs)} |\n`;
    out += '\n';
  }
  const log = join(dir, 'uvsd.log');
  if (existsSync(log)) {
    const gcs = gcPauses(readFileSync(log, 'utf8'));
    const isolates = [...new Set(gcs.map((g) => g.isolate))];
    out += `GC pauses (--trace-gc), per isolate (the control thread's heap, then the workers'), after each isolate's first ${STARTUP_MS / 1000} s (start-up):\n\n| isolate | GCs at start-up | GCs after | kinds after | pause ms after, total | longest | ≥ 0.5 ms | ≥ 1 ms |\n|---|---:|---:|---|---:|---:|---:|---:|\n`;
    for (const iso of isolates) {
      const all = gcs.filter((x) => x.isolate === iso);
      const g = all.filter((x) => x.atMs >= STARTUP_MS);
      const kinds = [...new Set(g.map((x) => x.kind))].map((k) => `${k} ${g.filter((x) => x.kind === k).length}`).join(', ');
      out += `| ${iso} | ${all.length - g.length} | ${g.length} | ${kinds} | ${g.reduce((s, x) => s + x.ms, 0).toFixed(1)} | ${g.length ? Math.max(...g.map((x) => x.ms)).toFixed(2) : '—'} | ${g.filter((x) => x.ms >= 0.5).length} | ${g.filter((x) => x.ms >= 1).length} |\n`;
    }
    if (!isolates.length) out += '| (none) | 0 | 0 | | | | | |\n';
    out += '\n';
  }
  return out;
}

/** PROFILE.md for a --profile directory: every folded file, then every uvsd start's .cpuprofiles. */
export function renderProfileDir(dir: string, windows: Record<string, number> = {}): string {
  let out = `# uvsd profile (${dir})\n\nWritten by \`uvs perf --profile\` (perf/profile.ts). perf record: on-CPU samples; .cpuprofile: V8's wall-time sampler.\n\n`;
  const winFile = join(dir, 'windows.json');
  const win = { ...(existsSync(winFile) ? (JSON.parse(readFileSync(winFile, 'utf8')) as Record<string, number>) : {}), ...windows };
  const unitFile = join(dir, 'units.json');
  const units = existsSync(unitFile) ? (JSON.parse(readFileSync(unitFile, 'utf8')) as Record<string, { n: number; unit: string }>) : {};
  for (const f of readdirSync(dir)
    .filter((x) => x.endsWith('.folded'))
    .sort())
    out += renderFolded(f.replace(/\.folded$/, ''), readFolded(join(dir, f)), win[f] ?? null, units[f] ?? null) + '\n';
  for (const f of readdirSync(dir)
    .filter((x) => x.endsWith('.gaps.json'))
    .sort())
    out += renderGaps(f.replace(/\.gaps\.json$/, ''), JSON.parse(readFileSync(join(dir, f), 'utf8')) as GapStats);
  for (const d of readdirSync(dir, { withFileTypes: true })
    .filter((x) => x.isDirectory() && x.name.startsWith('uvsd-'))
    .map((x) => x.name)
    .sort())
    out += renderCpuProfiles(join(dir, d));
  return out;
}

/** Writes DIR/PROFILE.md and a flame graph per recording (DIR/<recording>.svg); returns the markdown. */
export function writeProfileDir(dir: string): string {
  const md = renderProfileDir(dir);
  writeFileSync(join(dir, 'PROFILE.md'), md);
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.folded'))) {
    const name = f.replace(/\.folded$/, '');
    writeFileSync(join(dir, `${name}.svg`), renderFlameSvg(name, readFolded(join(dir, f))));
  }
  return md;
}

if (require.main === module) {
  const dir = process.argv[2];
  if (!dir || dir === '-h' || dir === '--help') {
    process.stdout.write(
      'Usage: node dist/perf/profile.js DIR   (a directory written by uvs perf --profile DIR): writes DIR/PROFILE.md and a flame graph DIR/<recording>.svg per recording\n',
    );
    process.exit(dir ? 0 : 2);
  }
  process.stdout.write(writeProfileDir(dir));
}
