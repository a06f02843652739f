/**
 * rr, wrr, wlc, nq, ovf, twos, sh and dh against transcriptions of their kernel files, on seeded random
 * scenarios: every decision must be the kernel's. The references below are read off
 * net/netfilter/ipvs/ip_vs_{rr,wrr,wlc,nq,ovf,twos}.c (docs/ipvs-semantics.md §2) with the kernel's
 * list order (newest first), its list-head cursor and its hooks (rr: del_dest; wrr: add/del/upd
 * all run ip_vs_wrr_dest_changed; init_service on (re)binding the scheduler), not off uvs's code.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { SchedModel } from '../../control/sched-model';
import { parseInet } from '../../net/addr';
import { seedTwos, twosNext } from '../../schedulers/twos';
import { rngBelow } from '../helpers/rng';

const rng = rngBelow;

interface Dest {
  key: string;
  weight: number;
  overload: boolean;
  active: number;
  inactive: number;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** ip_vs_rr.c: sched_data is a list_head pointer, the head itself at first. */
class KernelRr {
  cur: Dest | null = null;
  constructor(readonly list: Dest[]) {}
  init(): void {
    this.cur = null;
  }
  /** ip_vs_rr_del_dest, after the unlink: p->next->prev is the entry before the deleted one. */
  delDest(d: Dest, before: Dest[]): void {
    if (this.cur === d) {
      const i = before.indexOf(d);
      this.cur = i > 0 ? before[i - 1]! : null;
    }
  }
  schedule(): Dest | null {
    const p = this.cur === null ? -1 : this.list.indexOf(this.cur);
    const last = p;
    let dest = p;
    let pass = 0;
    do {
      for (dest = dest + 1; dest < this.list.length; dest++) {
        const d = this.list[dest]!;
        if (!d.overload && d.weight > 0) {
          this.cur = d;
          return d;
        }
        if (dest === last) return null;
      }
      dest = -1;
      pass++;
    } while (pass < 2 && p !== -1);
    return null;
  }
}

/** ip_vs_wrr.c (with the last-pass guard): mark {cl, cw, mw, di}; cl = -1 is the list head. */
class KernelWrr {
  cl = -1;
  cw = 0;
  mw = 0;
  di = 1;
  constructor(readonly list: Dest[]) {}
  private weights(): void {
    let g = 0;
    let max = 0;
    for (const d of this.list) {
      if (d.weight > 0) g = g > 0 ? gcd(d.weight, g) : d.weight;
      if (d.weight > max) max = d.weight;
    }
    this.di = g ? g : 1;
    this.mw = max - (this.di - 1);
  }
  init(): void {
    this.cl = -1;
    this.weights();
    this.cw = this.mw;
  }
  destChanged(): void {
    this.cl = -1;
    this.weights();
    if (this.cw > this.mw || !this.cw) this.cw = this.mw;
    else if (this.di > 1) this.cw = Math.floor(this.cw / this.di) * this.di + 1;
  }
  schedule(): Dest | null {
    let dest = this.cl;
    if (this.mw === 0) return null;
    const last = dest;
    let stop: number | null = null;
    let lastPass = false;
    let restarted = false;
    for (;;) {
      for (dest = dest + 1; dest < this.list.length; dest++) {
        const d = this.list[dest]!;
        if (!d.overload && d.weight >= this.cw) {
          this.cl = dest;
          return d;
        }
        if (dest === stop) {
          this.cl = dest;
          return null;
        }
      }
      dest = -1;
      this.cw -= this.di;
      if (this.cw <= 0) {
        this.cw = this.mw;
        if (lastPass || last === -1) {
          this.cl = -1;
          return null;
        }
        restarted = true;
      }
      lastPass = this.cw <= this.di;
      if (lastPass && restarted && last !== -1) stop = last;
    }
  }
}

const overhead = (d: Dest) => d.active * 256 + d.inactive;

/** ip_vs_wlc.c */
function kernelWlc(list: Dest[]): Dest | null {
  let least: Dest | null = null;
  let i = 0;
  for (; i < list.length; i++) {
    const d = list[i]!;
    if (!d.overload && d.weight > 0) {
      least = d;
      break;
    }
  }
  if (!least) return null;
  let loh = overhead(least);
  for (i++; i < list.length; i++) {
    const d = list[i]!;
    if (d.overload) continue;
    const doh = overhead(d);
    if (loh * d.weight > doh * least.weight) {
      least = d;
      loh = doh;
    }
  }
  return least;
}

/** ip_vs_nq.c */
function kernelNq(list: Dest[]): Dest | null {
  let least: Dest | null = null;
  let loh = 0;
  for (const d of list) {
    if (d.overload || !d.weight) continue;
    const doh = d.active + 1;
    if (d.active === 0) return d;
    if (!least || loh * d.weight > doh * least.weight) {
      least = d;
      loh = doh;
    }
  }
  return least;
}

/** ip_vs_ovf.c */
function kernelOvf(list: Dest[]): Dest | null {
  let h: Dest | null = null;
  let hw = 0;
  for (const d of list) {
    const w = d.weight;
    if (d.overload || d.active > w || w === 0) continue;
    if (!h || w > hw) {
      h = d;
      hw = w;
    }
  }
  return h;
}

/** ip_vs_twos.c, its get_random_u32_below(total) being uvs's draw (twosNext % total) from `stream`. */
function kernelTwos(list: Dest[], stream: Int32Array): Dest | null {
  let choice1: Dest | null = null;
  let choice2: Dest | null = null;
  let total = 0;
  for (const d of list) {
    if (!d.overload && d.weight > 0) {
      total += d.weight;
      choice1 = d;
    }
  }
  if (!choice1) return null;
  total += 1;
  let r1 = twosNext(stream, 0) % total;
  let r2 = twosNext(stream, 0) % total;
  let w1 = -1;
  let w2 = -1;
  let oh1 = 0;
  let oh2 = 0;
  for (const d of list) {
    if (d.overload || d.weight <= 0) continue;
    r1 -= d.weight;
    r2 -= d.weight;
    if (r1 <= 0 && w1 === -1) {
      choice1 = d;
      w1 = d.weight;
      oh1 = overhead(d);
    }
    if (r2 <= 0 && w2 === -1) {
      choice2 = d;
      w2 = d.weight;
      oh2 = overhead(d);
    }
    if (w1 !== -1 && w2 !== -1) break;
  }
  if (choice2 && w2 * oh1 > w1 * oh2) choice1 = choice2;
  return choice1;
}

const ADDRS = Array.from({ length: 7 }, (_, i) => `10.0.0.${i + 1}`);

/** A model service and the kernel's view of the same list, changed together. */
class Twin {
  readonly m: SchedModel;
  readonly list: Dest[] = [];
  readonly byKey = new Map<string, Dest>();
  constructor(scheduler: string, flags = 0) {
    this.m = new SchedModel(scheduler, flags);
  }
  dest(key: string): Dest {
    let d = this.byKey.get(key);
    if (!d) {
      d = { key, weight: 0, overload: false, active: 0, inactive: 0 };
      this.byKey.set(key, d);
    }
    return d;
  }
  /** Writes a dest's counters and OVERLOAD into the model's real-server words. */
  sync(d: Dest): void {
    const o = this.m.servers.get(d.key)!.rs * L.RS_WORDS;
    this.m.rs[o + L.RS_ACTIVE] = d.active;
    this.m.rs[o + L.RS_INACTIVE] = d.inactive;
    if (d.overload) this.m.rs[o + L.RS_FLAGS]! |= L.RSF_OVERLOAD;
    else this.m.rs[o + L.RS_FLAGS]! &= ~L.RSF_OVERLOAD;
  }
  add(addr: string, weight: number): Dest {
    const key = `${addr}:80`;
    const d = this.dest(key);
    d.weight = weight;
    d.overload = false; // __ip_vs_update_dest: an upper threshold of 0 clears OVERLOAD
    this.m.add(parseInet(addr)!, 80, weight);
    this.list.unshift(d);
    this.sync(d);
    return d;
  }
  del(d: Dest): Dest[] {
    const before = this.list.slice();
    this.list.splice(this.list.indexOf(d), 1);
    this.m.del(this.m.servers.get(d.key)!);
    return before;
  }
  edit(d: Dest, weight: number): void {
    d.weight = weight;
    d.overload = false; // as on add
    this.m.edit(this.m.servers.get(d.key)!, weight, 0, 0);
  }
  /** ip_vs_bind_scheduler again on the current list (a scheduler change, -E): fresh words, init_service. */
  rebind(): void {
    this.m.state.fill(0, this.m.base);
    this.m.scheduler.init?.(this.m.svc, this.m.state, this.m.base);
  }
  pick(caddr = 0, cport = 0, vaddr = 0): string | null {
    return this.m.schedule({ caddr, cport, vaddr, vport: 80, now: 0 })?.key ?? null;
  }
}

/** Random list changes and OVERLOAD flips between picks; rr and wrr must pick as the kernel does. */
function cursorScenarios(name: 'rr' | 'wrr', seeds: number): void {
  for (let seed = 1; seed <= seeds; seed++) {
    const r = rng(seed);
    const t = new Twin(name);
    const k = name === 'rr' ? new KernelRr(t.list) : new KernelWrr(t.list);
    k.init();
    const weight = () => (r(5) === 0 ? 0 : 1 + r(name === 'rr' ? 2 : 6));
    const log: string[] = [];
    for (let step = 0; step < 60; step++) {
      const op = r(10);
      const unlisted = ADDRS.filter((a) => !t.list.some((d) => d.key === `${a}:80`));
      if ((op === 0 || t.list.length === 0) && unlisted.length > 0) {
        const addr = unlisted[r(unlisted.length)]!;
        const w = weight();
        t.add(addr, w);
        log.push(`add ${addr} ${w}`);
        if (k instanceof KernelWrr) k.destChanged();
      } else if (op === 1 && t.list.length > 0) {
        const d = t.list[r(t.list.length)]!;
        const before = t.del(d);
        log.push(`del ${d.key}`);
        if (k instanceof KernelRr) k.delDest(d, before);
        else k.destChanged();
      } else if (op === 2 && t.list.length > 0) {
        const d = t.list[r(t.list.length)]!;
        const w = weight();
        t.edit(d, w);
        log.push(`edit ${d.key} ${w}`);
        if (k instanceof KernelWrr) k.destChanged();
      } else if (op === 3 && t.list.length > 0) {
        const d = t.list[r(t.list.length)]!;
        d.overload = !d.overload;
        t.sync(d);
        log.push(`overload ${d.key} ${d.overload}`);
      } else if (op === 4 && r(4) === 0) {
        t.rebind();
        k.init();
        log.push('rebind');
      } else {
        const want = k.schedule()?.key ?? null;
        log.push(`pick ${want}`);
        assert.equal(t.pick(), want, `${name} seed ${seed}: ${log.join(', ')}`);
      }
    }
  }
}

test('rr picks as ip_vs_rr.c through adds, deletes, edits, OVERLOAD and a re-bind', () => {
  cursorScenarios('rr', 300);
});

test('wrr picks as ip_vs_wrr.c through adds, deletes, edits, OVERLOAD and a re-bind', () => {
  cursorScenarios('wrr', 400);
});

test('wrr from init_service on a given list: A=4, B=3, C=2 give A A B A B C A B C', () => {
  const t = new Twin('wrr');
  for (const [a, w] of [
    ['10.0.0.3', 2],
    ['10.0.0.2', 3],
    ['10.0.0.1', 4],
  ] as const)
    t.add(a, w);
  t.rebind();
  const seq = Array.from({ length: 9 }, () => t.pick()!.replace(/^10\.0\.0\.(\d):80$/, (_, n) => 'ABC'[Number(n) - 1]!));
  assert.equal(seq.join(''), 'AABABCABC');
});

test('rr and wrr start at the head of the list after init_service, whatever the real-server slots', () => {
  // The list [slot 0, slot 1, slot 2] in that order (a model adds newest first, so this needs a
  // direct list): the first pick is slot 0 — no stale cursor on slot 0 or 1.
  for (const name of ['rr', 'wrr']) {
    const m = new SchedModel(name, 0);
    m.load(ADDRS.slice(0, 3).map((a) => ({ addr: parseInet(a)!, port: 80, weight: 1, lastWeight: 1 })));
    m.state.fill(0, m.base);
    m.scheduler.init?.(m.svc, m.state, m.base);
    const keys = Array.from({ length: 4 }, () => m.schedule({ caddr: 0, cport: 0, vaddr: 0, vport: 80, now: 0 })!.key);
    assert.deepEqual(keys, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.1:80'], name);
    assert.equal(m.servers.get('10.0.0.1:80')!.rs, 0);
  }
});

/** Random weights, counters and OVERLOAD on a list of 1–6 servers; one decision each. */
function loadScenarios(name: string, kernel: (list: Dest[], stream: Int32Array) => Dest | null, seeds: number): void {
  for (let seed = 1; seed <= seeds; seed++) {
    const r = rng(seed * 7919);
    const t = new Twin(name);
    const n = 1 + r(6);
    for (let i = 0; i < n; i++) t.add(ADDRS[i]!, r(4) === 0 ? 0 : 1 + r(4));
    const stream = new Int32Array(1);
    seedTwos(stream, 0, seed);
    if (t.m.scheduler.seed) t.m.scheduler.seed(t.m.state, t.m.base, seed);
    for (let round = 0; round < 8; round++) {
      for (const d of t.list) {
        d.active = r(3) === 0 ? 0 : r(6);
        d.inactive = r(2) === 0 ? 0 : r(300);
        d.overload = r(6) === 0;
        t.sync(d);
      }
      const want = kernel(t.list, stream)?.key ?? null;
      const state = t.list.map((d) => `${d.key} w${d.weight} a${d.active} i${d.inactive}${d.overload ? ' O' : ''}`);
      assert.equal(t.pick(), want, `${name} seed ${seed} round ${round}: ${state.join('; ')}`);
    }
  }
}

test('wlc picks as ip_vs_wlc.c over random weights, counters and OVERLOAD', () => {
  loadScenarios('wlc', kernelWlc, 300);
});

test('nq picks as ip_vs_nq.c over random weights, counters and OVERLOAD', () => {
  loadScenarios('nq', kernelNq, 300);
});

test('ovf picks as ip_vs_ovf.c over random weights, counters and OVERLOAD', () => {
  loadScenarios('ovf', kernelOvf, 300);
});

test('twos picks as ip_vs_twos.c (with the same draws) over random weights, counters and OVERLOAD', () => {
  loadScenarios('twos', kernelTwos, 400);
});

/** include/linux/hash.h hash_32 with GOLDEN_RATIO_32. */
const hash32 = (v: number, bits: number) => Math.imul(v, 0x61c88647) >>> (32 - bits);
const TAB = 256;

/** ip_vs_sh_reassign: each dest takes `weight` consecutive buckets (at least one), in list order; none when empty. */
function kernelShTable(list: Dest[]): (Dest | null)[] {
  const table: (Dest | null)[] = [];
  let p = 0;
  let count = 0;
  for (let b = 0; b < TAB; b++) {
    if (list.length === 0) {
      table.push(null);
      continue;
    }
    const d = list[p]!;
    table.push(d);
    if (++count >= d.weight) {
      p = (p + 1) % list.length;
      count = 0;
    }
  }
  return table;
}

const unavailable = (d: Dest) => d.weight <= 0 || d.overload;

/** ip_vs_sh_schedule with ip_vs_sh_get / ip_vs_sh_get_fallback. */
function kernelSh(list: Dest[], flags: number, caddr: number, cport: number): Dest | null {
  const table = kernelShTable(list);
  const port = flags & 2 ? cport : 0;
  const hashkey = (offset: number) => (offset + hash32((port + caddr) >>> 0, 8)) & (TAB - 1);
  const ihash = hashkey(0);
  const dest = table[ihash]!;
  if (!(flags & 1)) return !dest || unavailable(dest) ? null : dest;
  if (!dest) return null;
  if (!unavailable(dest)) return dest;
  for (let offset = 0; offset < TAB; offset++) {
    const d = table[hashkey((offset + ihash) % TAB)]!;
    if (!d) break;
    if (!unavailable(d)) return d;
  }
  return null;
}

/** ip_vs_dh_reassign (one bucket per dest in turn) and ip_vs_dh_schedule. */
function kernelDh(list: Dest[], vaddr: number): Dest | null {
  if (list.length === 0) return null;
  const d = list[hash32(vaddr >>> 0, 8) % list.length]!;
  return unavailable(d) ? null : d;
}

test('sh and dh pick as ip_vs_sh.c and ip_vs_dh.c, with no server, OVERLOAD, weight 0 and the sh flags', () => {
  for (const name of ['sh', 'dh']) {
    for (let seed = 1; seed <= 150; seed++) {
      const r = rng(seed * 104729);
      const flags = name === 'sh' ? r(4) : 0;
      const t = new Twin(name, flags);
      const n = r(6);
      for (let i = 0; i < n; i++) t.add(ADDRS[i]!, r(3) === 0 ? 0 : 1 + r(4));
      for (let round = 0; round < 6; round++) {
        for (const d of t.list) {
          d.overload = r(3) === 0;
          t.sync(d);
        }
        for (let c = 0; c < 8; c++) {
          const addr = r(0xffffffff) | 0;
          const port = r(65536);
          const want = (name === 'sh' ? kernelSh(t.list, flags, addr, port) : kernelDh(t.list, addr))?.key ?? null;
          const got = name === 'sh' ? t.pick(addr, port) : t.pick(0, 0, addr);
          const state = t.list.map((d) => `${d.key} w${d.weight}${d.overload ? ' O' : ''}`);
          assert.equal(got, want, `${name} flags ${flags} seed ${seed} round ${round} addr ${addr} port ${port}: ${state.join('; ')}`);
        }
      }
    }
  }
});
