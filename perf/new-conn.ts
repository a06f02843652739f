/**
 * Where a new connection's time goes: a breakdown of the first packet of a TCP flow (the SYN that
 * creates its entry) through PacketProcessor.process(), in ns, on packets already in memory — the
 * setup of perf/packet-path.ts's "TCP new flow" cases, so the figures compare with them.
 * A benchmark, never part of `npm test`.
 *
 *   node dist/perf/new-conn.js [--rounds N] [--ms M] [--table-bits B] [--cold] [--only V,…]
 *                              [--against DIR] [--json FILE]
 *     --rounds N     child processes per comparison, one after another (default 8)
 *     --ms M         each child times for at least M ms (default 400)
 *     --table-bits B a table of 2^B entries (default 18, as packet-path.ts; 14 keeps it in cache)
 *     --cold         empty the table between passes by scanning it (as packet-path.ts does), which
 *                    leaves the pass's cache lines cold; default: remove the 2000 flows by key
 *     --only V,…     run only these comparisons: path, steps, against, or a stub's name
 *     --against DIR  also compare the whole SYN path with another build's dist/ directory (a copy
 *                    of the tree with a change, compiled elsewhere): the A/B of an experiment
 *                    (caution: two builds whose code differs, in one process, were seen to run
 *                    the second-loaded one up to 2× slower — perf/PACKET-PATH.md; packet-path.ts
 *                    --against gives each build a process of its own)
 *
 * Method. A comparison loads the dataplane modules twice or more in one process (each copy its
 * own classes, so V8 optimises each alone, as in a process of its own), gives each copy its own
 * table and processor, and takes turns: copy A empties its table and handles the 2000 SYNs, then
 * copy B, and so on for at least --ms, so both sides of a difference run under the same load.
 * The 2000 flows go in slices of 250 (0.1–0.3 ms), each timed on its own; a process's figure is
 * its fastest slice — on a loaded machine many short slices run unpreempted. The printed figure
 * is the median over --rounds processes (the fastest process in brackets): with a table of 2^18
 * entries (36 MB) the path is bound by cache misses, and where each table lands in memory makes
 * one process faster or slower than another by up to ±20 % throughout, the same code against
 * itself included; the median over processes evens that out, 2^14 mostly avoids it. Figures:
 *  - the path cut short at known points by the packet itself (nothing stubbed): a TCP header that
 *    fails its length check (parse only), an RST to the service port without an entry (+ inbound
 *    hash, lookup miss, service lookup), a SYN refused by drop_packet at rate 1 (+ the checks);
 *  - the whole SYN path with rr, wlc and mh, with the per-source limit on, with Redis sync on,
 *    full-NAT, and full-NAT with pool ports chosen by queue (queue steering, 2 queues);
 *  - the whole rr SYN path against itself with one step stubbed (a prototype patch on one copy):
 *    the difference is that step's cost in place, inlining and cache misses included;
 *  - each step alone, in a loop over the 2000 flows' keys (its cost out of context).
 * Each timed pass handles the same 2000 SYNs (distinct clients, one VIP:80 service of three masq
 * servers) into an emptied table; emptying and restoring the packet bytes are not timed.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type * as FlowMod from '../conntrack/flow';
import type * as LayoutMod from '../conntrack/layout';
import type * as TableMod from '../conntrack/table';
import type * as StateMod from '../conntrack/state';
import type * as ConfigMod from '../control/config';
import type * as ServicesMod from '../control/services';
import type * as ContextMod from '../lb/context';
import type * as CoreMod from '../lb/core';
import type * as SnapshotMod from '../lb/snapshot';
import type * as VerdictMod from '../lb/verdict';
import type * as XmitMod from '../lb/xmit';
import type * as HashMod from '../net/siphash';
import type * as PacketsMod from '../test/helpers/packets';

const argv = process.argv;
const opt = (name: string): string | null => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? (argv[i + 1] ?? null) : null;
};
const ROUNDS = Number(opt('rounds') ?? 8);
const MS = Number(opt('ms') ?? 400);
const COLD = argv.includes('--cold');
const AGAINST = opt('against');
const TABLE = 1 << Number(opt('table-bits') ?? 18);
const FLOWS = 2000;
/** Flows per timed slice. */
const SLICE = 250;
const VIP = '10.96.0.10';
const VIP_WORD = (10 << 24) | (96 << 16) | 10;
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];
const DIST = path.join(__dirname, '..');

// ── module copies ─────────────────────────────────────────────────────────────────────────────
interface Mods {
  F: typeof FlowMod;
  L: typeof LayoutMod;
  T: typeof TableMod;
  S: typeof StateMod;
  C: typeof ConfigMod;
  Svc: typeof ServicesMod;
  Pr: typeof CoreMod;
  Ctx: typeof ContextMod;
  X: typeof XmitMod;
  V: typeof VerdictMod;
  Snap: typeof SnapshotMod;
  H: typeof HashMod;
  Pk: typeof PacketsMod;
}

/** A fresh copy of the dataplane modules from the dist/ directory `root` (own classes, own JIT state). */
function load(root = DIST): Mods {
  for (const k of Object.keys(require.cache)) if (k.startsWith(root + path.sep)) delete require.cache[k];
  const r = (m: string) => require(path.join(root, m)) as unknown;
  return {
    F: r('conntrack/flow') as typeof FlowMod,
    L: r('conntrack/layout') as typeof LayoutMod,
    T: r('conntrack/table') as typeof TableMod,
    S: r('conntrack/state') as typeof StateMod,
    C: r('control/config') as typeof ConfigMod,
    Svc: r('control/services') as typeof ServicesMod,
    Pr: r('lb/core') as typeof CoreMod,
    Ctx: r('lb/context') as typeof ContextMod,
    X: r('lb/xmit') as typeof XmitMod,
    V: r('lb/verdict') as typeof VerdictMod,
    Snap: r('lb/snapshot') as typeof SnapshotMod,
    H: r('net/siphash') as typeof HashMod,
    Pk: r('test/helpers/packets') as typeof PacketsMod,
  };
}

/** One copy's world: table, processor, the 2000 SYNs (as perf/packet-path.ts sets it up). */
function setup(m: Mods, scheduler: string, forwarding: 'masq' | 'fullnat' = 'masq') {
  const { L, T } = m;
  const cfg = m.C.validateConfig({
    dataplane: {
      vipCidrs: ['10.96.0.0/24'],
      workers: 1,
      tableSize: TABLE,
      maxRealServers: 16,
      maxServices: 8,
      ...(forwarding === 'fullnat' ? { fullnat: { addresses: ['10.99.0.1'] } } : {}),
    },
    services: [
      { protocol: 'tcp', address: VIP, port: 80, scheduler, forwarding, realServers: RS.map((a) => ({ address: a, port: 8080 })) },
    ],
  });
  const rsSab = T.createRealServerRegion(16);
  const schedSab = new SharedArrayBuffer(8 * L.SCHED_WORDS * 4);
  const model = new m.Svc.ServiceModel(rsSab, schedSab, 16, 8);
  const table = new T.ConnTable(T.ConnTable.create(TABLE, { tcp: m.S.TCP_DEFAULT_TIMEOUTS, udp: 300 }), rsSab, 1);
  const snapshot = model.apply(cfg);
  const proc = new m.Pr.PacketProcessor(table, new Float64Array(L.counterWords(16, 8)), new Int32Array(schedSab), 16, snapshot);
  const now = table.now();
  proc.setTime(now);
  // The output region a worker hands process() (lb/verdict.ts), at the start of its own buffer.
  const region = new m.V.OutRegion(new Uint8Array(4096));
  return { m, proc, region, table, snapshot, now, pkts: packets(m, m.S.TCPF_SYN) };
}
type World = ReturnType<typeof setup>;

const client = (i: number) => `192.168.${(i >> 8) & 255}.${i & 255}`;

/** The 2000 flows' first packets with these TCP flags, packed in one buffer. */
function packets(m: Mods, flags: number, mangle?: (b: Uint8Array) => void) {
  const pkts = Array.from({ length: FLOWS }, (_, i) => {
    const b = m.Pk.tcp({ src: client(i), dst: VIP, sport: 2000 + i, flags });
    mangle?.(b);
    return b;
  });
  const buf = new Uint8Array(pkts.reduce((a, p) => a + p.length, 0));
  const offs = new Int32Array(FLOWS);
  const lens = new Int32Array(FLOWS);
  let o = 0;
  pkts.forEach((p, i) => {
    buf.set(p, o);
    offs[i] = o;
    lens[i] = p.length;
    o += p.length;
  });
  return { buf, offs, lens, pristine: buf.slice() };
}

/** The flows' keys as the table sees them: client address, ports (sport << 16 | 80). */
const KEYS = new Int32Array(FLOWS * 2);
for (let i = 0; i < FLOWS; i++) {
  KEYS[2 * i] = (192 << 24) | (168 << 16) | (((i >> 8) & 255) << 8) | (i & 255);
  KEYS[2 * i + 1] = ((2000 + i) << 16) | 80;
}

/**
 * Removes every live entry (not timed). By default it looks the 2000 flows up and removes them,
 * which leaves the lines a pass touches in the cache; --cold scans the whole table as
 * packet-path.ts does (36 MB, which evicts them).
 */
function empty(table: TableMod.ConnTable): void {
  if (COLD || table.count() > FLOWS) {
    table.forEach((e) => table.remove(e, false, 0));
    return;
  }
  for (let i = 0; i < FLOWS && table.count() > 0; i++) {
    const b = table.bucketIn(6, KEYS[2 * i]!, KEYS[2 * i + 1]!, VIP_WORD, null);
    table.lockBucket(b);
    const e = table.findIn(b, 6, KEYS[2 * i]!, KEYS[2 * i + 1]!, VIP_WORD, null);
    table.unlockBucket(b);
    if (e >= 0) table.remove(e, false, 0);
  }
}

// ── timing ────────────────────────────────────────────────────────────────────────────────────
const results: Record<string, number> = {};

interface Side {
  name: string;
  /** Handles flows [lo, hi). */
  pass: (lo: number, hi: number) => void;
  /** Before each round of 2000 flows, untimed. */
  prepare?: () => void;
}

/**
 * Times the sides in turn for at least MS ms: side A prepares and runs the 2000 flows in timed
 * slices, then side B, and so on, round after round — each side in its own cache state (what it
 * touched preparing), both under the same load. Fastest and median slice per side.
 */
function race(sides: Side[]): void {
  const samples = sides.map(() => [] as number[]);
  const t0 = Date.now();
  while (Date.now() - t0 < MS || samples[0]!.length < 40) {
    sides.forEach((s, k) => {
      s.prepare?.();
      for (let lo = 0; lo < FLOWS; lo += SLICE) {
        const c0 = process.hrtime.bigint();
        s.pass(lo, lo + SLICE);
        samples[k]!.push(Number(process.hrtime.bigint() - c0) / SLICE);
      }
    });
  }
  sides.forEach((s, k) => {
    const x = samples[k]!.sort((a, b) => a - b);
    results[s.name] = x[0]!;
    results[`${s.name} (median)`] = x[x.length >> 1]!;
  });
}

function processRange(w: World, p: World['pkts'], lo: number, hi: number): void {
  const { proc, region } = w;
  for (let i = lo; i < hi; i++) {
    region.off = 0;
    proc.process(p.buf, p.offs[i]!, p.lens[i]!, region);
  }
}

/** The whole SYN path of a world: 2000 SYNs into its emptied table. */
function synSide(name: string, w: World, prepare?: () => void): Side {
  return {
    name,
    pass: (lo, hi) => processRange(w, w.pkts, lo, hi),
    prepare: () => {
      w.pkts.buf.set(w.pkts.pristine);
      empty(w.table);
      prepare?.();
    },
  };
}

// ── stubs ─────────────────────────────────────────────────────────────────────────────────────
/** The private fields and methods the stubs and steps reach (perf code only, never the product). */
interface TableInternals {
  k0: number;
  mask: number;
  lastWalk: number;
}
interface ProcessorInternals {
  /** The packet context (lb/context.ts): schedule() reads the client's key from it. */
  c: ContextMod.PacketContext;
  schedule(svc: unknown, si: number): number;
  benchNext?: number;
}
/** An object's properties, to patch a prototype's method. */
const props = (o: object) => o as Record<string, unknown>;
const tableProto = (m: Mods) => props(m.T.ConnTable.prototype);
const procProto = (m: Mods) => props(m.Pr.PacketProcessor.prototype);
/** The path's plain functions are called through their module's exports: patching those stubs them. */
const moduleOf = (m: Mods, name: 'Ctx' | 'X') => props(m[name]);

/** The pre-issue-12 bucket hash (salted murmur3-style mix, commit 6086905^), for comparison. */
function murmurBucket(this: TableInternals, proto: number, a1: number, ports: number, a2: number): number {
  let h = this.k0 ^ proto;
  h = Math.imul(h ^ a1, 0xcc9e2d51);
  h = (h << 15) | (h >>> 17);
  h = Math.imul(h ^ ports, 0x1b873593);
  h = (h << 13) | (h >>> 19);
  h = Math.imul(h ^ a2, 0xe6546b64);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h & this.mask;
}
function justLastWalk(this: TableInternals, n: number): void {
  this.lastWalk = n;
}

/** Prototype patches, each removing one step from the whole rr SYN path of one module copy. */
const STUBS: Record<string, { what: string; apply: (m: Mods) => void }> = {
  'hash-murmur': {
    what: 'keyed bucket hash (3 a SYN) → the pre-issue-12 murmur mix',
    apply: (m) => (tableProto(m).bucket = murmurBucket),
  },
  'no-source-count': {
    what: 'per-source half-open count in insert (hsiphash4 + atomic add)',
    apply: (m) => (tableProto(m).sourceAdd = () => {}),
  },
  'no-chain-cap': {
    what: 'out-chain length walk in insert (the chain cap)',
    apply: (m) => (tableProto(m).chainLength = () => 0),
  },
  'no-walk-stats': {
    what: 'walk statistics in findIn ×2 (chainPeak, longChains)',
    apply: (m) => (tableProto(m).walked = justLastWalk),
  },
  'no-bind': {
    what: 'binding to the real server in insert (InActConn atomic, threshold)',
    apply: (m) => (tableProto(m).bindRealServer = () => {}),
  },
  'no-sched': { what: 'scheduling (service lock + rr pick)', apply: (m) => (procProto(m).schedule = () => 0) },
  'sched-counter': {
    what: 'scheduling → a plain counter over the 3 servers (no lock, no Atomics, same spread)',
    apply: (m) =>
      (procProto(m).schedule = function (this: ProcessorInternals) {
        this.benchNext = (((this.benchNext ?? 0) | 0) + 1) % 3;
        return this.benchNext;
      }),
  },
  'no-touch': {
    what: 'first touch (NONE → SYN_RECV, timer; the bucket re-lock stays)',
    apply: (m) => (tableProto(m).touch = () => false),
  },
  'no-countIn': { what: 'per-packet in counters (countIn)', apply: (m) => (moduleOf(m, 'Ctx').countIn = () => {}) },
  'no-forward': {
    what: 'forwardIn: MTU check, rewrite of address, port and checksums',
    apply: (m) => (moduleOf(m, 'X').forwardIn = () => 1),
  },
  'issue12-off': {
    what: 'issue 12 on this path: murmur hash, no source count, no chain cap, no walk stats',
    apply: (m) => {
      const p = tableProto(m);
      p.bucket = murmurBucket;
      p.sourceAdd = () => {};
      p.chainLength = () => 0;
      p.walked = justLastWalk;
    },
  },
};

// ── children ──────────────────────────────────────────────────────────────────────────────────
/** The path cut short by the packet itself, and the whole SYN path for rr, wlc and mh. */
function runPath(): void {
  const w = setup(load(), 'rr');
  const bad = packets(w.m, w.m.S.TCPF_SYN, (b) => (b[20 + 12] = 0xf0)); // 60-byte TCP header in 20 bytes
  const rst = packets(w.m, w.m.S.TCPF_RST);
  const d = setup(load(), 'rr');
  d.table.i32[d.m.L.H_DROP_RATE] = 1;
  race([
    { name: 'cut: parse only (TCP header check fails)', pass: (lo, hi) => processRange(w, bad, lo, hi) },
    { name: 'cut: + hash, lookup miss, service (RST, no entry)', pass: (lo, hi) => processRange(w, rst, lo, hi) },
    { name: 'cut: + defense checks (SYN, drop_packet rate 1)', pass: (lo, hi) => processRange(d, d.pkts, lo, hi) },
  ]);
  const src = setup(load(), 'rr');
  src.table.i32[src.m.L.H_SRC_LIMIT] = 1 << 30;
  const sync = setup(load(), 'rr');
  const ring = new SharedArrayBuffer(sync.m.L.ringBytes());
  const r = new Int32Array(ring);
  sync.proc.setRing(ring);
  sync.table.setSync(true);
  const L = sync.m.L;
  race([
    synSide('SYN rr: whole path', setup(load(), 'rr')),
    synSide('SYN wlc: whole path', setup(load(), 'wlc')),
    synSide('SYN mh: whole path', setup(load(), 'mh')),
    synSide('SYN rr, per-source limit on (not reached)', src),
    synSide('SYN rr, sync on (ring event per SYN)', sync, () => Atomics.store(r, L.RG_SYNC_HEAD, r[L.RG_SYNC_TAIL]!)),
  ]);
  // Full-NAT: a pool port per flow; with queue steering, one whose replies the program steers to
  // this worker (lb/xmit.ts steeredPort; worker 0 of 2 queues).
  const steered = setup(load(), 'rr', 'fullnat');
  steered.proc.setSteering(0x5eed1234, 0x0badcafe, 0, 2);
  race([synSide('SYN rr, full-NAT', setup(load(), 'rr', 'fullnat')), synSide('SYN rr, full-NAT, ports by queue (2 queues)', steered)]);
}

/** The rr SYN path against itself with one step stubbed. */
function runStub(name: string): void {
  const base = setup(load(), 'rr');
  const m = load();
  STUBS[name]!.apply(m);
  race([synSide(`${name}: SYN rr`, base), synSide(`${name}: SYN rr, stubbed`, setup(m, 'rr'))]);
}

/** This build against another build's dist/ (--against), rr, wlc and mh. */
function runAgainst(dir: string): void {
  for (const s of ['rr', 'wlc', 'mh'])
    race([synSide(`SYN ${s}: this build`, setup(load(), s)), synSide(`SYN ${s}: ${dir}`, setup(load(path.resolve(dir)), s))]);
}

let sink = 0;

/** Each step alone, over the 2000 flows' keys (a loop of its own per step: no shared call site). */
function runSteps(): void {
  const w = setup(load(), 'rr');
  const { m, proc, table, now } = w;
  const L = m.L;
  const keys = KEYS;
  const vip = VIP_WORD;
  const rs0 = (10 << 24) | 1;
  const sk = m.H.sipInit([1, 2, 3, 4]);
  const t = table as unknown as TableInternals;
  const snap = w.snapshot;
  race([
    {
      name: 'step: bucket() HalfSipHash-1-3, 3 words',
      pass: (lo, hi) => {
        let s = 0;
        for (let i = lo; i < hi; i++) s ^= table.bucket(6, keys[2 * i]!, keys[2 * i + 1]!, vip);
        sink ^= s;
      },
    },
    {
      name: 'step: murmur mix (pre-issue-12 bucket)',
      pass: (lo, hi) => {
        let s = 0;
        for (let i = lo; i < hi; i++) s ^= murmurBucket.call(t, 6, keys[2 * i]!, keys[2 * i + 1]!, vip);
        sink ^= s;
      },
    },
    {
      name: 'step: hsiphash4 (source slot, mh)',
      pass: (lo, hi) => {
        let s = 0;
        for (let i = lo; i < hi; i++) s ^= m.H.hsiphash4(sk, keys[2 * i]!);
        sink ^= s;
      },
    },
    {
      name: 'step: findService',
      pass: (lo, hi) => {
        let s = 0;
        for (let i = lo; i < hi; i++) s ^= m.Snap.findService(snap, 6, vip, 80, null, 3);
        sink ^= s;
      },
    },
  ]);
  // A lookup miss in a table holding 2000 other flows (as mid-pass).
  const other = setup(load(), 'rr').table;
  for (let i = 0; i < FLOWS; i++) {
    const caddr = keys[2 * i]! ^ 0x10000;
    other.insert(
      m.F.newFlow({
        proto: 6,
        caddr,
        cports: keys[2 * i + 1]!,
        vaddr: vip,
        daddr: rs0,
        dports: (8080 << 16) | (2000 + i),
        laddr: caddr,
        flags: L.FWD_MASQ,
        now,
      }),
    );
  }
  const sched = (s: string): Side => {
    const x = setup(load(), s);
    const svc = x.snapshot.services[0]!;
    const ps = x.proc as unknown as ProcessorInternals;
    const pc = ps.c;
    pc.daddr = vip;
    pc.dport = 80;
    return {
      name: `step: schedule ${s} (lock + pick)`,
      pass: (lo, hi) => {
        let r = 0;
        for (let i = lo; i < hi; i++) {
          pc.saddr = keys[2 * i]!;
          pc.sport = 2000 + i;
          r ^= ps.schedule(svc, 0);
        }
        sink ^= r;
      },
    };
  };
  const pc = (proc as unknown as ProcessorInternals).c;
  const c = pc.counters;
  race([
    {
      name: 'step: hash + lock + findIn miss + unlock',
      pass: (lo, hi) => {
        let s = 0;
        for (let i = lo; i < hi; i++) {
          const b = other.bucketIn(6, keys[2 * i]!, keys[2 * i + 1]!, vip, null);
          other.lockBucket(b);
          s ^= other.findIn(b, 6, keys[2 * i]!, keys[2 * i + 1]!, vip, null);
          other.unlockBucket(b);
        }
        sink ^= s;
      },
    },
    sched('rr'),
    sched('wlc'),
    sched('mh'),
    {
      name: 'step: new-connection counters (3) + countIn',
      pass: (lo, hi) => {
        for (let i = lo; i < hi; i++) {
          c[L.C_CONNS_NEW]!++;
          c[L.rsCounterBase(0) + L.RSC_CONNS]!++;
          c[L.svcCounterBase(16, 0) + L.RSC_CONNS]!++;
          m.Ctx.countIn(pc, 0, 0, 40);
        }
      },
    },
  ]);
  const t2 = setup(load(), 'rr').table;
  // Flow i's insert record, filled in place as the packet path fills its one record.
  const rec = new m.F.NewFlow();
  const record = (i: number) => {
    rec.proto = 6;
    rec.caddr = keys[2 * i]!;
    rec.cports = keys[2 * i + 1]!;
    rec.vaddr = vip;
    rec.daddr = rs0;
    rec.dports = (8080 << 16) | (2000 + i);
    rec.laddr = keys[2 * i]!;
    rec.flags = L.FWD_MASQ;
    rec.now = now;
    return rec;
  };
  race([
    {
      name: 'step: insert (3 hashes, alloc, links, counts)',
      prepare: () => empty(table),
      pass: (lo, hi) => {
        let s = 0;
        for (let i = lo; i < hi; i++) s ^= table.insert(record(i));
        sink ^= s;
      },
    },
    {
      name: 'step: insert + lock + touch(SYN) + unlock',
      prepare: () => empty(t2),
      pass: (lo, hi) => {
        for (let i = lo; i < hi; i++) {
          const e = t2.insert(record(i));
          const b = t2.bucketIn(6, keys[2 * i]!, keys[2 * i + 1]!, vip, null);
          t2.lockBucket(b);
          t2.touch(e, 0, m.S.TCPF_SYN, now);
          t2.unlockBucket(b);
        }
      },
    },
  ]);
}

// ── driver ────────────────────────────────────────────────────────────────────────────────────
const ONLY = opt('only');
const VARIANTS = ['path', ...Object.keys(STUBS), 'steps', ...(AGAINST !== null ? ['against'] : [])].filter(
  (v) => ONLY === null || ONLY.split(',').includes(v),
);

function child(variant: string): void {
  if (variant === 'path') runPath();
  else if (variant === 'steps') runSteps();
  else if (variant === 'against') runAgainst(AGAINST!);
  else runStub(variant);
  if (sink === 0.5) console.error('(unreachable)');
  process.stdout.write(JSON.stringify(results));
}

function main(): void {
  const all: Record<string, number[]> = {};
  const started = Date.now();
  const extra = [
    ...(COLD ? ['--cold'] : []),
    ...(AGAINST !== null ? ['--against', AGAINST] : []),
    '--table-bits',
    String(Math.log2(TABLE)),
  ];
  for (let r = 0; r < ROUNDS; r++) {
    for (const v of VARIANTS) {
      const out = execFileSync(process.execPath, [__filename, '--variant', v, '--ms', String(MS), ...extra], {
        encoding: 'utf8',
        maxBuffer: 1 << 20,
      });
      for (const [k, ns] of Object.entries(JSON.parse(out) as Record<string, number>)) (all[k] ??= []).push(ns);
    }
    process.stderr.write(`round ${r + 1}/${ROUNDS} done\n`);
  }
  // A figure: the median over the processes of each one's fastest slice (a table's place in
  // memory changes its cache conflicts, so one process can be lucky or not throughout); in
  // brackets the fastest process. A difference: the median of the per-process differences.
  const median = (xs: number[]) => {
    const y = [...xs].sort((p, q) => p - q);
    return y.length % 2 === 1 ? y[y.length >> 1]! : (y[y.length / 2 - 1]! + y[y.length / 2]!) / 2;
  };
  const best: Record<string, number> = {};
  for (const [k, xs] of Object.entries(all)) best[k] = median(xs);
  const has = (k: string) => all[k] !== undefined;
  const ns = (k: string) => best[k]!;
  const diff = (a: string, b: string) => median(all[a]!.map((x, i) => all[b]![i]! - x));
  const f = (x: number) => x.toFixed(0).padStart(6);
  const line = (k: string, extra = '') =>
    console.log(`  ${k.padEnd(58)} ${f(ns(k))} ns ${`(${Math.min(...all[k]!).toFixed(0)})`.padStart(8)}${extra}`);
  console.log(
    `new-connection path, ${FLOWS} SYNs a pass, table 2^${Math.log2(TABLE)}, ${COLD ? 'cold (table scanned between passes)' : 'warm'}, Node ${process.version}`,
  );
  console.log(
    `ns per flow: median over ${ROUNDS} processes of each one's fastest ${SLICE}-flow slice in ≥ ${MS} ms (fastest process in brackets); ${((Date.now() - started) / 1000).toFixed(0)} s`,
  );
  if (has('SYN rr: whole path')) {
    console.log('\nthe path cut short by the packet (real code; + what the step adds, same process):');
    const cuts = [
      'cut: parse only (TCP header check fails)',
      'cut: + hash, lookup miss, service (RST, no entry)',
      'cut: + defense checks (SYN, drop_packet rate 1)',
      'SYN rr: whole path',
    ];
    cuts.forEach((k, i) => line(k, i === 0 ? '' : `   +${diff(cuts[i - 1]!, k).toFixed(0)}`));
    for (const s of ['wlc', 'mh']) line(`SYN ${s}: whole path`);
    line(
      'SYN rr, per-source limit on (not reached)',
      `   +${diff('SYN rr: whole path', 'SYN rr, per-source limit on (not reached)').toFixed(0)}`,
    );
    line('SYN rr, sync on (ring event per SYN)', `   +${diff('SYN rr: whole path', 'SYN rr, sync on (ring event per SYN)').toFixed(0)}`);
    line('SYN rr, full-NAT', `   +${diff('SYN rr: whole path', 'SYN rr, full-NAT').toFixed(0)}`);
    line(
      'SYN rr, full-NAT, ports by queue (2 queues)',
      `   +${diff('SYN rr, full-NAT', 'SYN rr, full-NAT, ports by queue (2 queues)').toFixed(0)}`,
    );
  }
  const stubs = Object.entries(STUBS).filter(([n]) => has(`${n}: SYN rr`));
  if (stubs.length > 0) console.log('\nthe rr SYN path against itself with one step stubbed, in one process (step = the difference):');
  for (const [name, s] of stubs) {
    const a = `${name}: SYN rr`;
    const b = `${name}: SYN rr, stubbed`;
    console.log(`  ${name.padEnd(16)} ${f(ns(a))} → ${f(ns(b))} ns   step ${(-diff(a, b)).toFixed(0).padStart(4)} ns  ${s.what}`);
  }
  const steps = Object.keys(best).filter((x) => x.startsWith('step: ') && !x.endsWith('(median)'));
  if (steps.length > 0) console.log('\neach step alone, per flow:');
  for (const k of steps) line(k);
  if (AGAINST !== null && has('SYN rr: this build')) {
    console.log(`\nthis build against ${AGAINST}, taking turns in one process:`);
    for (const s of ['rr', 'wlc', 'mh']) {
      const a = `SYN ${s}: this build`;
      const b = `SYN ${s}: ${AGAINST}`;
      const d = diff(a, b);
      console.log(
        `  SYN ${s.padEnd(4)} ${f(ns(a))} → ${f(ns(b))} ns  ${(d >= 0 ? '+' : '') + d.toFixed(0)} ns (${((d / ns(a)) * 100).toFixed(1)} %)`,
      );
    }
  }
  const json = opt('json');
  if (json) writeFileSync(json, JSON.stringify(best, null, 2) + '\n');
}

const variant = opt('variant');
if (variant !== null) child(variant);
else main();
