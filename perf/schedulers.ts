/**
 * Scheduler benchmarks (not a test): scheduling decisions per second for every scheduler with 3,
 * 100 and 1000 real servers, and the mh table rebuild time. Run: `npx tsc -p . && node
 * dist/perf/schedulers.js [--quick]`. Method and figures: perf/SCHEDULERS.md.
 *
 * Decisions run exactly as the dataplane runs them — schedule() on the shared state and
 * real-server words — without the scheduler lock (uncontended, it is one compare-exchange and one
 * store) and without binding the chosen connection, so connection counts stay as generated:
 * ActiveConn 0–63 and InActConn 0–255 per server, weights 1–4. Inputs cycle through 4096
 * pre-built client address/port pairs, so hash schedulers see varied clients and the loop
 * allocates nothing.
 */
import { cpus } from 'node:os';
import * as L from '../conntrack/layout';
import { fold, parseInet } from '../net/addr';
import { SchedModel } from '../control/sched-model';
import { mhBuild } from '../schedulers/mh';
import { schedulerNames } from '../schedulers/registry';
import type { SchedInput } from '../schedulers/types';

const quick = process.argv.includes('--quick');
const RUN_MS = quick ? 60 : 300;
const REPEATS = quick ? 1 : 3;

/** A deterministic generator for the fixtures (mulberry32). */
function rng(seed: number): () => number {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

function build(scheduler: string, n: number, flags = 0, mhTableSize?: number): SchedModel {
  const m = new SchedModel(scheduler, flags, mhTableSize, n + 1);
  const r = rng(n);
  const list = [];
  for (let i = 0; i < n; i++) {
    const w = 1 + (i % 4);
    list.push({ addr: parseInet(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`)!, port: 8080, weight: w, lastWeight: w });
  }
  m.load(list.reverse());
  for (const s of m.listed()) {
    m.rs[s.rs * L.RS_WORDS + L.RS_ACTIVE] = r() % 64;
    m.rs[s.rs * L.RS_WORDS + L.RS_INACTIVE] = r() % 256;
  }
  return m;
}

function inputs(): SchedInput[] {
  const r = rng(7);
  const vaddr = fold(parseInet('10.96.0.10')!);
  return Array.from({ length: 4096 }, () => ({ caddr: r() | 0, cport: 1024 + (r() % 60000), vaddr, vport: 80, now: 0 }));
}

function decisionsPerSecond(m: SchedModel, ins: SchedInput[]): number {
  const { scheduler: s, svc, state, base, rs } = m;
  let best = 0;
  for (let rep = 0; rep < REPEATS; rep++) {
    let n = 0;
    let sink = 0;
    const t0 = process.hrtime.bigint();
    const end = t0 + BigInt(RUN_MS * 1e6);
    let now = t0;
    while (now < end) {
      for (let i = 0; i < 4096; i++) sink += s.schedule(svc, state, base, rs, ins[i]!);
      n += 4096;
      now = process.hrtime.bigint();
    }
    if (sink === 0.5) console.log(sink); // keep the results alive
    const rate = n / (Number(now - t0) / 1e9);
    if (rate > best) best = rate;
  }
  return best;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

function rebuildMs(n: number, M: number): { median: number; min: number } {
  const m = build('mh', n, 0, M);
  const times: number[] = [];
  const runs = quick ? 3 : M > 100_000 ? 15 : 25;
  for (let i = 0; i < runs + 2; i++) {
    m.svc.data = null;
    const t0 = process.hrtime.bigint();
    mhBuild(m.svc);
    const dt = Number(process.hrtime.bigint() - t0) / 1e6;
    if (i >= 2) times.push(dt); // the first two warm the JIT
  }
  return { median: median(times), min: Math.min(...times) };
}

function main(): void {
  console.log(`# uvs scheduler benchmark — node ${process.version}, ${cpus()[0]?.model ?? 'unknown CPU'} (${cpus().length} CPUs)`);
  console.log(`# best of ${REPEATS} runs of ${RUN_MS} ms each; decisions per second in millions`);
  const sizes = [3, 100, 1000];
  const ins = inputs();
  console.log(`\n| scheduler | ${sizes.map((n) => `${n} servers`).join(' | ')} |`);
  console.log(`|---|${sizes.map(() => '---:').join('|')}|`);
  const names = schedulerNames();
  const variants: [string, string, number][] = [
    ...names.map((n): [string, string, number] => [n, n, 0]),
    ['sh-fallback', 'sh', 1],
    ['mh-port', 'mh', 2],
  ];
  for (const [label, name, flags] of variants) {
    const cells = sizes.map((n) => (decisionsPerSecond(build(name, n, flags), ins) / 1e6).toFixed(2));
    console.log(`| ${label} | ${cells.join(' | ')} |`);
  }
  console.log('\n| mh rebuild | servers | median ms | min ms |');
  console.log('|---|---:|---:|---:|');
  for (const [M, n] of [
    [4093, 1000],
    [65521, 1000],
    [131071, 1000],
    [65521, 100],
  ] as const) {
    const r = rebuildMs(n, M);
    console.log(`| M = ${M} | ${n} | ${r.median.toFixed(2)} | ${r.min.toFixed(2)} |`);
  }
}

main();
