/** lblc and lblcr: the destination cache, lblc's overload rule, set replication and the collector. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RS_ACTIVE, RS_WORDS, SCHED_LOCK, SCHED_STATE, SCHED_WORDS } from '../../conntrack/layout';
import { fold, parseInet } from '../../net/addr';
import { LBLC_CACHE_ENTRIES, lblc } from '../../schedulers/lblc';
import { lblcrSet } from '../../schedulers/lblcr';
import type { SchedService } from '../../schedulers/types';
import { input, load, pick, server, service } from '../helpers/sched';
import type { SchedModel } from '../../control/sched-model';

const ABC = [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }];
const A = '10.0.0.1';
const B = '10.0.0.2';
const C = '10.0.0.3';
const DAY = 86_400_000;

const at = (ms: number, vaddr?: string) => input('192.168.1.100', 0, ms, vaddr);

/** Runs the 60-s collector from t = 60 s through `runs` runs. */
function collect(m: SchedModel, runs: number): void {
  for (let k = 1; k <= runs; k++) m.scheduler.tick!(m.svc, m.state, m.base, m.rs, k * 60_000);
}

test('lblc keeps sending a destination to its cached server while it is not overloaded in lblc terms', () => {
  const m = service('lblc', ABC);
  assert.equal(pick(m, at(0)), C); // miss: wlc (all idle, first in list)
  load(m, C, 1, 100);
  assert.equal(pick(m, at(1)), C); // wlc would say B; the cache wins (1 active ≤ weight 1)
  load(m, C, 2, 0);
  assert.equal(pick(m, at(2)), B); // 2 > 1 and B has 2·0 < 1: re-scheduled, cache replaced
  load(m, C, 0, 0);
  assert.equal(pick(m, at(3)), B);
});

test('lblc: a busy cached server stays when no other server is under half its weight', () => {
  const m = service('lblc', [
    { address: A, weight: 2 },
    { address: B, weight: 2 },
  ]);
  assert.equal(pick(m, at(0)), B);
  load(m, B, 5, 0);
  load(m, A, 1, 0); // 2·1 < 2 is false
  assert.equal(pick(m, at(1)), B);
  load(m, A, 0, 0);
  assert.equal(pick(m, at(2)), A);
});

test('lblc re-schedules when the cached server gets weight 0 or is deleted, and finds it again when revived from the trash', () => {
  const m = service('lblc', ABC);
  assert.equal(pick(m, at(0)), C);
  m.edit(server(m, C), 0, 0, 0);
  assert.equal(pick(m, at(1)), B);
  m.edit(server(m, C), 1, 0, 0);
  load(m, C, 0, 0);
  load(m, B, 1, 0); // B cached and not overloaded
  assert.equal(pick(m, at(2)), B);
  m.del(server(m, B));
  m.add(parseInet(B)!, 80, 1); // revived before any lookup: the cache still points to it
  load(m, A, 0, 0);
  assert.equal(pick(m, at(3)), B);
});

test('lblc ignores the OVERLOAD flag of the cached server, as the kernel does', () => {
  const m = service('lblc', ABC);
  assert.equal(pick(m, at(0)), C);
  load(m, C, 0, 0, true);
  assert.equal(pick(m, at(1)), C);
});

test('the lblc collector drops an entry at the first 30th run at least 24 h after its last use', () => {
  // Last use at t=0; full checks at runs 30, 60, …: run 1410 (23.5 h) keeps it, run 1440 (24 h) drops it.
  const keep = service('lblc', ABC);
  const drop = service('lblc', ABC);
  for (const m of [keep, drop]) {
    assert.equal(pick(m, at(0)), C);
    load(m, C, 1, 0); // cached C is fine, a miss would choose B
  }
  collect(keep, 1439);
  collect(drop, 1440);
  assert.equal(pick(keep, at(DAY)), C);
  assert.equal(pick(drop, at(DAY)), B);
});

test('lblcr adds a server to the set when its least loaded member is overloaded, then uses the set', () => {
  const m = service('lblcr', ABC);
  const vip = input().vaddr;
  const slots = (...ks: string[]) => ks.map((k) => server(m, k).rs);
  assert.equal(pick(m, at(0)), C);
  assert.deepEqual(lblcrSet(m.state, m.base, vip), slots(C));
  load(m, C, 2, 0); // 2 > 1 while A and B are idle
  assert.equal(pick(m, at(1)), B);
  assert.deepEqual(lblcrSet(m.state, m.base, vip), slots(B, C)); // newest first
  load(m, B, 1, 0);
  load(m, C, 0, 0);
  assert.equal(pick(m, at(2)), C); // least loaded member; A (idle, not a member) is not considered
});

test('lblcr drops the most loaded member on a hit more than 24 h after the set last changed', () => {
  const m = service('lblcr', ABC);
  const vip = input().vaddr;
  assert.equal(pick(m, at(0)), C);
  load(m, C, 2, 0);
  assert.equal(pick(m, at(1)), B); // set {B, C} changed at t=1
  load(m, C, 3, 0);
  load(m, B, 0, 0);
  assert.equal(pick(m, at(1 + DAY)), B); // exactly 24 h: not yet
  assert.equal(lblcrSet(m.state, m.base, vip).length, 2);
  assert.equal(pick(m, at(2 + DAY)), B); // more than 24 h: C (most loaded) dropped
  assert.deepEqual(lblcrSet(m.state, m.base, vip), [server(m, B).rs]);
});

test('the lblcr collector keeps an entry through the full check before 24 h and drops it at the one at 24 h, like lblc', () => {
  // Last use at t=0; full checks at runs 30, 60, …: run 1410 (23.5 h) keeps it, run 1440 (24 h) drops it.
  const keep = service('lblcr', ABC);
  const drop = service('lblcr', ABC);
  for (const m of [keep, drop]) assert.equal(pick(m, at(0)), C);
  collect(keep, 1439);
  collect(drop, 1440);
  assert.deepEqual(lblcrSet(keep.state, keep.base, input().vaddr), [server(keep, C).rs]);
  assert.deepEqual(lblcrSet(drop.state, drop.base, input().vaddr), []);
});

/** lblc with A, B, C whose cached server is C: C carries one connection (fine for the cache), so a miss picks B. */
function cachedC(t: number, vaddr?: string): SchedModel {
  const m = service('lblc', ABC);
  assert.equal(pick(m, input('192.168.1.100', 0, t, vaddr)), C);
  load(m, C, 1, 0);
  return m;
}

test('the lblc collector checks only every 30th run: used at 10 min, an entry is kept at 24 h 10 min and dropped at the check after', () => {
  // Full checks at runs 1440 (age 23 h 50) and 1470 (24 h 20); run 1450 (exactly 24 h) is not one.
  const keep = cachedC(10 * 60_000);
  const drop = cachedC(10 * 60_000);
  collect(keep, 1450);
  collect(drop, 1470);
  assert.equal(pick(keep, at(1470 * 60_000)), C);
  assert.equal(pick(drop, at(1470 * 60_000)), B);
});

test('an lblc entry counts from its last use: a hit at 12 h, or a first use at 12 h, outlives the full check at 24 h', () => {
  const hit = cachedC(0);
  assert.equal(pick(hit, at(DAY / 2)), C);
  const late = cachedC(DAY / 2);
  for (const m of [hit, late]) {
    collect(m, 1440);
    assert.equal(pick(m, at(DAY)), C);
  }
});

test('lblc re-schedules when its cached server was deleted and is not back', () => {
  const m = cachedC(0);
  m.del(server(m, C));
  assert.equal(pick(m, at(1)), B);
});

test("lblc does not take a new server in the cached server's slot for it", () => {
  // The control plane reuses a freed real-server slot; the cache names the server by slot, address
  // and port. C (slot 1) is cached; then slot 1 holds another server, which lblc must not use.
  const C80 = { rs: 1, addr: fold(parseInet(C)!), port: 80, weight: 1 };
  const B80 = { rs: 0, addr: fold(parseInet(B)!), port: 80, weight: 1 };
  const others = [
    { rs: 1, addr: fold(parseInet('10.0.0.9')!), port: 80, weight: 1 },
    { rs: 1, addr: fold(parseInet(C)!), port: 8080, weight: 1 },
  ];
  for (const other of others) {
    const svc: SchedService = { dests: [C80, B80], schedFlags: 0, data: null };
    const state = new Int32Array(SCHED_WORDS);
    const rs = new Int32Array(2 * RS_WORDS);
    lblc.init!(svc, state, SCHED_STATE);
    assert.equal(lblc.schedule(svc, state, SCHED_STATE, rs, at(0)), 0);
    svc.dests = [other, B80];
    rs[1 * RS_WORDS + RS_ACTIVE] = 1; // 1 ≤ weight 1: would be kept if it were the cached server
    assert.equal(lblc.schedule(svc, state, SCHED_STATE, rs, at(1)), 1, `${other.port}`);
  }
});

test('lblc keeps one entry per destination address, and the collector expires each', () => {
  const V2 = '10.96.0.20';
  const V3 = '10.96.0.30';
  const m = cachedC(100); // VIP → C
  assert.equal(pick(m, at(200, V2)), B); // V2 → B
  load(m, B, 1, 0); // a miss now picks A
  assert.equal(pick(m, at(300)), C);
  assert.equal(pick(m, at(400, V2)), B);
  assert.equal(pick(m, at(500, V3)), A);
  m.state[SCHED_LOCK] = 0x51ed; // the slot's lock word: never a scheduler's to write
  collect(m, 1470); // all three last used less than 1 s after 0: all dropped at the check of 24 h 30 min
  load(m, A, 1, 0);
  load(m, C, 1, 0);
  load(m, B, 0, 0); // a miss picks B
  assert.deepEqual([pick(m, at(DAY)), pick(m, at(DAY, V2)), pick(m, at(DAY, V3))], [B, B, B]);
  assert.equal(m.state[SCHED_LOCK], 0x51ed);
});

test(`lblc with more than ${LBLC_CACHE_ENTRIES} destination addresses replaces the least recently used entry`, () => {
  const vips = Array.from({ length: LBLC_CACHE_ENTRIES + 1 }, (_, k) => `10.96.1.${k + 1}`);
  const m = service('lblc', ABC);
  for (let k = 0; k < LBLC_CACHE_ENTRIES; k++) assert.equal(pick(m, at(1000 + k, vips[k])), C);
  load(m, C, 1, 0); // cached C is fine, a miss picks B
  assert.equal(pick(m, at(2000, vips[0])), C); // the first two addresses are used again:
  assert.equal(pick(m, at(2000, vips[1])), C); // the third is now the oldest
  assert.equal(pick(m, at(2001, vips[LBLC_CACHE_ENTRIES])), B); // replaces the third's entry
  for (let k = 3; k < LBLC_CACHE_ENTRIES; k++) assert.equal(pick(m, at(2002, vips[k])), C, vips[k]);
  assert.equal(pick(m, at(2003, vips[0])), C);
  assert.equal(pick(m, at(2003, vips[1])), C);
  assert.equal(pick(m, at(2004, vips[2])), B); // a miss
});

test(`lblc gives a ${LBLC_CACHE_ENTRIES + 1}th address an entry when all were used at the same time`, () => {
  const vips = Array.from({ length: LBLC_CACHE_ENTRIES + 1 }, (_, k) => `10.96.1.${k + 1}`);
  const m = service('lblc', ABC);
  for (let k = 0; k < LBLC_CACHE_ENTRIES; k++) assert.equal(pick(m, at(5000, vips[k])), C);
  load(m, C, 1, 0);
  const last = vips[LBLC_CACHE_ENTRIES];
  assert.equal(pick(m, input('192.168.1.100', 0, 5000, last)), B);
  load(m, B, 1, 0); // B cached for the new address and fine; a miss would pick A
  assert.equal(pick(m, input('192.168.1.100', 0, 5000, last)), B);
});

test('lblc caches after the ms clock wrapped (int32 times, 24.8 days of uptime)', () => {
  const t = -(2 ** 31) + 1000;
  const m = cachedC(t);
  assert.equal(pick(m, at(t + 1)), C);
  const V2 = '10.96.0.20';
  assert.equal(pick(m, input('192.168.1.100', 0, t + 2, V2)), B);
  assert.equal(pick(m, at(t + 3)), C); // the first entry was not taken for the second address
});

test('lblc caches an IPv6 destination whose folded address is 0, and expires entries after an IPv6 server folding to 0', () => {
  // uvs folds an IPv6 address to the XOR of its four 32-bit words (schedulers/types.ts): these fold to 0.
  const vip0 = 'fd00:1::fd00:1:0:0';
  const vip1 = 'fd00:1::10';
  const z = 'fd00::fd00:0:0:0';
  const y = 'fd00::2';
  const m = service('lblc', [{ address: y }, { address: z }]); // list [z, y]
  const v6 = (t: number, vaddr: string) => input('2001:db8::1', 0, t, vaddr);
  const name = (k: string | null) => k?.replace(/^\[(.*)\]$/, '$1') ?? null;
  assert.equal(name(pick(m, v6(0, vip1))), z); // vip1's entry (the first) holds z
  load(m, `[${z}]:80`, 1, 0); // z stays fine for its entry; a miss picks y
  assert.equal(name(pick(m, v6(1, vip0))), y); // vip0's entry (the second) holds y
  load(m, `[${y}]:80`, 1, 0);
  load(m, `[${z}]:80`, 0, 0); // now a miss picks z
  assert.equal(name(pick(m, v6(2, vip0))), y); // cached
  collect(m, 1470); // both last used within 2 ms of 0: both dropped at the check of 24 h 30 min
  load(m, `[${z}]:80`, 0, 0);
  assert.equal(name(pick(m, v6(DAY + 30 * 60_000, vip0))), z);
});

/** The slots `holds` names among A, B, C (and slot 15, which no server uses): what keeps a deleted one in the trash. */
function held(m: SchedModel): string[] {
  const h = (slot: number) => m.scheduler.holds!(m.state, m.base, slot);
  return [...[A, B, C].filter((k) => h(server(m, k).rs)), ...(h(15) ? ['slot 15'] : [])];
}

test('lblc holds exactly the servers its live entries name, in any entry, and none once the collector expired them', () => {
  const V2 = '10.96.0.20';
  const m = cachedC(0); // VIP → C (first entry)
  assert.deepEqual(held(m), [C]);
  assert.equal(pick(m, at(10, V2)), B); // V2 → B (second entry)
  assert.deepEqual(held(m), [B, C]);
  collect(m, 1470); // last used at 0 and 10 ms: dropped at the check of 24 h 30 min
  assert.deepEqual(held(m), [], 'an expired entry still names its server, but holds it no longer');
});

test('lblcr holds exactly the members of a live set, and none once the collector dropped the set', () => {
  const m = service('lblcr', ABC);
  assert.equal(pick(m, at(0)), C);
  assert.deepEqual(held(m), [C]);
  load(m, C, 2, 0);
  assert.equal(pick(m, at(1)), B); // set {B, C}
  assert.deepEqual(held(m), [B, C]);
  load(m, B, 2, 0); // both members overloaded: A joins
  assert.equal(pick(m, at(2)), A);
  assert.deepEqual(held(m), [A, B, C], 'a set of three: no member sits where the set size does');
  collect(m, 1470); // changed at 1 ms: dropped at the check of 24 h 30 min
  assert.deepEqual(held(m), [], 'a dropped set still lists its members in memory, but holds them no longer');
});

test('lblcr no longer holds the member it dropped from a set after 24 h', () => {
  const m = service('lblcr', ABC);
  assert.equal(pick(m, at(0)), C);
  load(m, C, 2, 0);
  assert.equal(pick(m, at(1)), B); // set {B, C}, changed at t=1
  load(m, C, 3, 0);
  load(m, B, 0, 0);
  assert.equal(pick(m, at(2 + DAY)), B); // C, the most loaded, dropped
  assert.deepEqual(held(m), [B], 'the dropped member may still be in memory past the set, but is not held');
});
