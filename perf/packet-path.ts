/**
 * Micro-benchmark of the per-packet path without syscalls: PacketProcessor.process() on packets
 * already in memory, with the real table, service model and schedulers. Reports ns per packet for
 * the cases that make up real traffic. Not a test (it is never part of `npm test`); as a
 * regression guard it compares with a saved run and exits 1 when a case got slower than allowed.
 *
 *   node dist/perf/packet-path.js [--flows N] [--rounds N] [--ms M] [--json FILE] [--check FILE [--tolerance X]]
 *   node dist/perf/packet-path.js --against DIR [--rounds N] [--ms M] [--only I,…] [--json FILE]
 *     --json FILE    also write the results ({case: ns}) to FILE
 *     --check FILE   compare with FILE (perf/packet-path.json is the committed run): a case more
 *                    than X times slower (default 1.5: machines and neighbours differ) fails
 *     --against DIR  A/B every case against another build's dist/ directory (an older commit or an
 *                    experiment compiled elsewhere), processes of either build taking turns; below
 *     --rounds N     processes (default 5; with --against: rounds of one process per build, default 8)
 *     --ms M         each case runs for at least M ms per process (default 600)
 *     --only I,…     (with --against) only the cases with these indexes (0-based, in print order)
 *
 * Method: each case prepares its packets once (fixtures as in test/helpers/packets.ts); the packet
 * bytes are restored from a pristine copy before each pass (untimed) so every pass does the same
 * work. --rounds child processes, one after another, each run every case for at least --ms in
 * timed slices (below); a case's figure is the median over the processes of each one's fastest
 * slice. (Until 2026-12-02: one process, best of 5 loops of 300 ms; on this kind of VM two runs of
 * one build differed by up to 1.7× in a case, and the check failed the build it was recorded
 * from — perf/LOG.md.)
 *
 * A/B (--against): on a loaded machine two separate runs do not compare (a neighbour's burst
 * moves a case by 10–60 %). A round runs one child process per build, one right after the other
 * (A then B, then B then A in the next round, …); a child loads that build's dist/ (its own test
 * helpers build the processor, so DIR may predate the flow API of issue 14) and runs each case
 * for at least --ms in passes of timed slices (250–500 packets, 50 super-packets: tens of µs to a
 * few ms); its figure for a case is its fastest slice (short slices mostly run unpreempted). The
 * printed figure is the median over --rounds processes, the difference the median of the
 * per-round differences (where a table lands in memory moves a whole process by up to ±20 %).
 * Not two builds in one process, as perf/new-conn.ts --against does: with two builds whose code
 * differs, the build whose modules load second runs its whole packet path about 2× slower, in
 * every case and whichever build it is (three sides A, B, A: 260, 516, 257 ns; two copies of
 * one build, same source, are even) — a V8 effect this harness cannot undo, so a build gets a
 * process of its own.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { H_SYNPROXY } from '../conntrack/layout';
import { TCPF_ACK, TCPF_SYN } from '../conntrack/state';
import type * as PacketsMod from '../test/helpers/packets';

const argv = process.argv;
const strArg = (name: string): string | null => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? (argv[i + 1] ?? null) : null;
};
const arg = (name: string, def: number) => Number(strArg(name) ?? def);
const FLOWS = arg('flows', 10000);
const results: Record<string, number> = {};
const VIP = '10.96.0.10';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

const VIP6 = 'fd00:96::10';
const RS6 = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];
const DIST = path.join(__dirname, '..');

/** What the cases need of a build's dist/: its test helpers, loaded from that directory. */
interface Build {
  /** test/helpers/processor.ts's makeProcessor, of whichever version the build has. */
  makeProcessor: (doc: Record<string, unknown>, o: { capacity: number; offload: boolean; outBytes: number }) => BuiltProcessor;
  Pk: typeof PacketsMod;
  VNET_HLEN: number;
}
/** The parts of makeProcessor's answer used here, in both versions (with an OutRegion or without). */
interface BuiltProcessor {
  proc: object;
  table: { i32: Int32Array; forEach(f: (e: number) => void): void; remove(e: number, expired: boolean, now: number): void };
  out: Uint8Array;
  region?: object;
}

function loadBuild(root: string): Build {
  const r = (m: string) => require(path.join(root, m)) as Record<string, unknown>;
  let packet: Record<string, unknown>;
  try {
    packet = r('net/packet');
  } catch {
    packet = r('lb/packet'); // before the restructure of issue 14
  }
  return {
    makeProcessor: r('test/helpers/processor').makeProcessor as Build['makeProcessor'],
    Pk: r('test/helpers/packets') as unknown as typeof PacketsMod,
    VNET_HLEN: packet.VNET_HLEN as number,
  };
}

/**
 * Runs a packed set's n packets through one processor, as a worker hands them over (the output
 * region at the start of the output buffer), in slices of `slice` packets each timed on its own;
 * returns the fastest slice's ns per packet. Compiled afresh for every processor (new Function,
 * with a source of its own so V8's eval cache does not share it): no case's call sites see another
 * case's processor. A build without OutRegion (before issue 14) is driven through its outOff/outEnd
 * fields.
 */
type Runner = (buf: Uint8Array, offs: Int32Array, lens: Int32Array, n: number, at: number, slice: number) => number;
let runners = 0;
function runner(x: BuiltProcessor, V: number): Runner {
  const body =
    x.region !== undefined
      ? 'region.off = V; region.end = region.buf.length; proc.process(buf, offs[i] + at, lens[i] - at, region);'
      : 'proc.outOff = V; proc.outEnd = out.length; proc.process(buf, offs[i] + at, lens[i] - at);';
  const make = new Function(
    'proc',
    'region',
    'out',
    'V',
    'clock',
    `// runner ${++runners}
    return function run(buf, offs, lens, n, at, slice) {
      let best = Infinity;
      for (let lo = 0; lo < n; lo += slice) {
        const hi = Math.min(n, lo + slice);
        const t = clock();
        for (let i = lo; i < hi; i++) { ${body} }
        const ns = Number(clock() - t) / (hi - lo);
        if (ns < best) best = ns;
      }
      return best;
    };`,
  ) as (p: object, r: object | undefined, o: Uint8Array, v: number, clock: () => bigint) => Runner;
  return make(x.proc, x.region, x.out, V, process.hrtime.bigint);
}

/** The processor as a worker wires it (the build's test/helpers/processor.ts), with 2^18 table entries. */
function setup(b: Build, scheduler: string, offload = false) {
  const x = b.makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'] },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, scheduler, realServers: RS.map((a) => ({ address: a, port: 8080 })) },
        { protocol: 'udp', address: VIP, port: 53, scheduler, realServers: RS.map((a) => ({ address: a, port: 5353 })) },
        { protocol: 'tcp', address: VIP6, port: 80, scheduler, realServers: RS6.map((a) => ({ address: a, port: 8080 })) },
      ],
    },
    { capacity: 1 << 18, offload, outBytes: 4096 },
  );
  const run = runner(x, offload ? b.VNET_HLEN : 0);
  /** Sends each of these packets once (the flows' first packets, untimed). */
  const warm = (pkts: Uint8Array[], at = 0) => {
    const p = pack(pkts);
    run(p.buf, p.offs, p.lens, pkts.length, at, pkts.length);
  };
  return { run, warm, table: x.table };
}

function client(i: number): string {
  return `192.168.${(i >> 8) & 255}.${i & 255}`;
}

/** Packs packets into one buffer: returns buffer, offsets, lengths. */
function pack(pkts: Uint8Array[]) {
  const total = pkts.reduce((a, p) => a + p.length, 0);
  const buf = new Uint8Array(total);
  const offs = new Int32Array(pkts.length);
  const lens = new Int32Array(pkts.length);
  let o = 0;
  pkts.forEach((p, i) => {
    buf.set(p, o);
    offs[i] = o;
    lens[i] = p.length;
    o += p.length;
  });
  return { buf, offs, lens, pristine: buf.slice() };
}

/** A case set up for one build: its processor's runner, the timed packets, what precedes a pass. */
interface Bench {
  run: Runner;
  p: ReturnType<typeof pack>;
  /** Before each pass, untimed (after the packet bytes are restored). */
  prepare?: () => void;
  /** Bytes before each packet that are not given to process() (the virtio header's place). */
  at: number;
  /** Packets per timed slice in an A/B. */
  slice: number;
}
interface Case {
  name: string;
  make: (b: Build) => Bench;
}

/** A 64 KB GSO super-packet frame: virtio header (partial checksum, TCPv4 GSO) + packet. */
function frame(V: number, pkt: Uint8Array, gso: number): Uint8Array {
  const f = new Uint8Array(V + pkt.length);
  f.set(pkt, V);
  f[0] = 1; // NEEDS_CSUM
  f[1] = gso ? 1 : 0; // TCPV4
  f[4] = gso & 255;
  f[5] = gso >> 8;
  f[6] = 20; // csum_start: the TCP header
  f[8] = 16; // csum_offset: its checksum
  return f;
}

const c6 = (i: number) => `2001:db8::${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}`;

const CASES: Case[] = [
  // Established TCP flows: SYN once, then time the ACK/data packets (client → server).
  {
    name: 'TCP established, client → server (lookup + state + rewrite)',
    make: (b) => {
      const { run, warm } = setup(b, 'rr');
      warm(Array.from({ length: FLOWS }, (_, i) => b.Pk.tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_SYN })));
      const p = pack(
        Array.from({ length: FLOWS }, (_, i) =>
          b.Pk.tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) }),
        ),
      );
      return { run, p, at: 0, slice: 500 };
    },
  },
  {
    name: 'TCP established, server → client (reply rewrite)',
    make: (b) => {
      const { run, warm } = setup(b, 'rr');
      warm(Array.from({ length: FLOWS }, (_, i) => b.Pk.tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_SYN })));
      const p = pack(
        Array.from({ length: FLOWS }, (_, i) => {
          // rr over 3 servers: flow i went to RS[(2 - i % 3)] (newest first); replies from it.
          return b.Pk.tcp({
            src: RS[2 - (i % 3)]!,
            dst: client(i),
            sport: 8080,
            dport: 40000 + (i % 20000),
            flags: TCPF_ACK,
            payload: new Uint8Array(64),
          });
        }),
      );
      return { run, p, at: 0, slice: 500 };
    },
  },
  // New flows: the same 2000 SYNs each pass into an emptied table (the emptying is not timed).
  ...['rr', 'wlc', 'mh'].map(
    (s): Case => ({
      name: `TCP new flow (SYN: schedule ${s} + insert)`,
      make: (b) => {
        const { run, table } = setup(b, s);
        const p = pack(Array.from({ length: 2000 }, (_, i) => b.Pk.tcp({ src: client(i), dst: VIP, sport: 2000 + i, flags: TCPF_SYN })));
        return { run, p, at: 0, slice: 250, prepare: () => table.forEach((e) => table.remove(e, false, 0)) };
      },
    }),
  ),
  // SYN proxy on (lb/synproxy.ts): the same SYNs answered with a cookie SYN-ACK, no entry. A build
  // without the proxy ignores the header word and makes a flow (so --against compares the two).
  {
    name: 'TCP SYN answered with a cookie (SYN proxy on)',
    make: (b) => {
      const { run, table } = setup(b, 'rr');
      Atomics.store(table.i32, H_SYNPROXY, 1);
      const p = pack(Array.from({ length: 2000 }, (_, i) => b.Pk.tcp({ src: client(i), dst: VIP, sport: 2000 + i, flags: TCPF_SYN })));
      return { run, p, at: 0, slice: 250, prepare: () => table.forEach((e) => table.remove(e, false, 0)) };
    },
  },
  {
    name: 'UDP established, client → server',
    make: (b) => {
      const { run, warm } = setup(b, 'rr');
      warm(Array.from({ length: FLOWS }, (_, i) => b.Pk.udp({ src: client(i), dst: VIP, sport: 5000 + (i % 20000), dport: 53 })));
      const p = pack(
        Array.from({ length: FLOWS }, (_, i) =>
          b.Pk.udp({ src: client(i), dst: VIP, sport: 5000 + (i % 20000), dport: 53, payload: new Uint8Array(64) }),
        ),
      );
      return { run, p, at: 0, slice: 500 };
    },
  },
  {
    name: 'TCP SYN to a port without a service (RST built)',
    make: (b) => {
      const { run } = setup(b, 'rr');
      const p = pack(
        Array.from({ length: 1000 }, (_, i) => b.Pk.tcp({ src: client(i), dst: VIP, sport: 3000 + i, dport: 81, flags: TCPF_SYN })),
      );
      return { run, p, at: 0, slice: 250 };
    },
  },
  {
    name: 'IPv6 TCP established, client → server',
    make: (b) => {
      const { run, warm } = setup(b, 'rr');
      warm(Array.from({ length: FLOWS }, (_, i) => b.Pk.tcp6({ src: c6(i), dst: VIP6, sport: 40000 + (i % 20000), flags: TCPF_SYN })));
      const p = pack(
        Array.from({ length: FLOWS }, (_, i) =>
          b.Pk.tcp6({ src: c6(i), dst: VIP6, sport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) }),
        ),
      );
      return { run, p, at: 0, slice: 500 };
    },
  },
  {
    // With device offloads: a 64 KB GSO super-packet (partial checksum) is one lookup and rewrite.
    name: 'TCP 64 KB GSO super-packet (offloads on), per super-packet',
    make: (b) => {
      const V = b.VNET_HLEN;
      const { run, warm } = setup(b, 'rr', true);
      const n = 1000;
      warm(
        Array.from({ length: n }, (_, i) => frame(V, b.Pk.tcp({ src: client(i), dst: VIP, sport: 40000 + i, flags: TCPF_SYN }), 0)),
        V,
      );
      const p = pack(
        Array.from({ length: n }, (_, i) =>
          frame(V, b.Pk.tcp({ src: client(i), dst: VIP, sport: 40000 + i, flags: TCPF_ACK, payload: new Uint8Array(65000) }), 1448),
        ),
      );
      return { run, p, at: V, slice: 50 };
    },
  },
];

// ── A/B against another build ─────────────────────────────────────────────────────────────────
const AGAINST = strArg('against');
const ROUNDS = arg('rounds', 8);
const MS = arg('ms', 600);
const ONLY = strArg('only');
const picked = (i: number) => ONLY === null || ONLY.split(',').map(Number).includes(i);

function median(xs: number[]): number {
  const y = [...xs].sort((p, q) => p - q);
  return y.length % 2 === 1 ? y[y.length >> 1]! : (y[y.length / 2 - 1]! + y[y.length / 2]!) / 2;
}

/** One child: every picked case of one build (DIR), for at least MS ms each; {case: fastest slice} on stdout. */
function abChild(dir: string): void {
  const B = loadBuild(path.resolve(dir));
  const out: Record<string, number> = {};
  CASES.forEach((c, ci) => {
    if (!picked(ci)) return;
    const s = c.make(B);
    let best = Infinity;
    const t0 = Date.now();
    for (let pass = 0; Date.now() - t0 < MS || pass < 6; pass++) {
      s.p.buf.set(s.p.pristine);
      s.prepare?.();
      const ns = s.run(s.p.buf, s.p.offs, s.p.lens, s.p.offs.length, s.at, s.slice);
      if (ns < best) best = ns;
    }
    out[c.name] = best;
  });
  process.stdout.write(JSON.stringify(out));
}

/** abChild in a process of its own for the build in DIR: {case: fastest slice}. */
function runChild(dir: string): Record<string, number> {
  const pass = ['--ms', String(MS), '--flows', String(FLOWS), ...(ONLY !== null ? ['--only', ONLY] : [])];
  return JSON.parse(execFileSync(process.execPath, [__filename, '--ab-child', dir, ...pass], { encoding: 'utf8', maxBuffer: 1 << 20 }));
}

function abMain(dir: string): void {
  const all: Record<string, [number, number][]> = {};
  const started = Date.now();
  for (let r = 0; r < ROUNDS; r++) {
    // A then B, B then A, …: neither side always runs second, after the other warmed the machine.
    let a: Record<string, number>;
    let b: Record<string, number>;
    if (r % 2 === 0) {
      a = runChild(DIST);
      b = runChild(dir);
    } else {
      b = runChild(dir);
      a = runChild(DIST);
    }
    for (const k of Object.keys(a)) (all[k] ??= []).push([a[k]!, b[k]!]);
    process.stderr.write(`round ${r + 1}/${ROUNDS} done\n`);
  }
  console.log(`per-packet path, this build (A) against ${dir} (B), a process each taking turns, ${FLOWS} flows, Node ${process.version}`);
  console.log(
    `ns per packet: median over ${ROUNDS} processes of each one's fastest slice in ≥ ${MS} ms a case; B − A: median of the per-round differences; ${((Date.now() - started) / 1000).toFixed(0)} s`,
  );
  const f = (x: number) => x.toFixed(0).padStart(6);
  for (const [name, xs] of Object.entries(all)) {
    const a = median(xs.map((x) => x[0]));
    const b = median(xs.map((x) => x[1]));
    const d = median(xs.map((x) => x[1] - x[0]));
    results[`${name} (A)`] = Math.round(a);
    results[`${name} (B)`] = Math.round(b);
    console.log(
      `  ${name.padEnd(58)} A ${f(a)}  B ${f(b)} ns   B − A ${(d >= 0 ? '+' : '') + d.toFixed(0)} ns (${((d / a) * 100).toFixed(1)} %)`,
    );
  }
}

function main(): void {
  const rounds = arg('rounds', 5);
  const runs: Record<string, number>[] = [];
  for (let r = 0; r < rounds; r++) {
    runs.push(runChild(DIST));
    process.stderr.write(`process ${r + 1}/${rounds} done\n`);
  }
  console.log(
    `per-packet path, ${FLOWS} flows, Node ${process.version}: median over ${rounds} processes of each one's fastest slice in ≥ ${MS} ms a case`,
  );
  for (const name of Object.keys(runs[0]!)) {
    const ns = median(runs.map((x) => x[name]!));
    console.log(`${name.padEnd(58)} ${ns.toFixed(0).padStart(6)} ns/packet  (${(1e3 / ns).toFixed(2)} Mpps on one core)`);
    results[name] = Math.round(ns);
  }
  const json = strArg('json');
  if (json) writeFileSync(json, JSON.stringify(results, null, 2) + '\n');
  const check = strArg('check');
  if (check) {
    const tolerance = Number(strArg('tolerance') ?? 1.5);
    const base = JSON.parse(readFileSync(check, 'utf8')) as Record<string, number>;
    let slower = 0;
    console.log(`\ncompared with ${check} (a case more than ${tolerance}× slower fails):`);
    for (const [name, ns] of Object.entries(results)) {
      const b = base[name];
      if (b === undefined) {
        console.log(`  ${name.padEnd(58)} new case, no baseline`);
        continue;
      }
      const r = ns / b;
      if (r > tolerance) slower++;
      console.log(`  ${name.padEnd(58)} ${b} → ${ns} ns  ${r.toFixed(2)}×${r > tolerance ? '  SLOWER' : ''}`);
    }
    if (slower > 0) {
      console.log(`${slower} case(s) regressed beyond ${tolerance}×`);
      process.exitCode = 1;
    }
  }
}

const abDir = strArg('ab-child');
if (abDir !== null) abChild(abDir);
else if (AGAINST !== null) {
  abMain(AGAINST);
  const json = strArg('json');
  if (json) writeFileSync(json, JSON.stringify(results, null, 2) + '\n');
} else main();
