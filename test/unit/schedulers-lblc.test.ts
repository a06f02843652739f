/** lblc and lblcr: the destination cache, lblc's overload rule, set replication and the collector. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseInet } from '../../net/addr';
import { lblcrSet } from '../../schedulers/lblcr';
import { input, load, pick, server, service } from '../helpers/sched';
import type { SchedModel } from '../../control/sched-model';

const ABC = [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }];
const A = '10.0.0.1';
const B = '10.0.0.2';
const C = '10.0.0.3';
const DAY = 86_400_000;

const at = (ms: number) => input('192.168.1.100', 0, ms);

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
