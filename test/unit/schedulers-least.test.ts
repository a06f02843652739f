/** lc, wlc, sed, nq, fo, ovf: the kernel's overhead formulas, list order and tie-breaking. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load, pick, service } from '../helpers/sched';

// Added A then B: the kernel list is B, A (newest first).
const AB = (wa: number, wb: number) => [
  { address: '10.0.0.1', weight: wa },
  { address: '10.0.0.2', weight: wb },
];
const A = '10.0.0.1';
const B = '10.0.0.2';

test('lc picks the least 256·active + inactive, ignoring weights, the first in list order on ties', () => {
  const m = service('lc', AB(1, 100));
  assert.equal(pick(m), B); // tie: B is first in the list
  load(m, B, 1, 0);
  load(m, A, 0, 255);
  assert.equal(pick(m), A); // 255 < 256
  load(m, A, 0, 256);
  assert.equal(pick(m), B); // 256 = 256: B first
});

test('wlc weighs overhead by weight with cross-multiplication: B (w=2, 1 active, 200 inactive) beats A (w=1, 1 active)', () => {
  const m = service('wlc', AB(1, 2));
  load(m, A, 1, 0);
  load(m, B, 1, 200);
  assert.equal(pick(m), B); // 456/2 = 228 < 256/1
  load(m, B, 1, 256);
  assert.equal(pick(m), B); // 512/2 = 256/1: tie, B first in list
  load(m, B, 1, 257);
  assert.equal(pick(m), A);
});

test('sed uses (active + 1)/weight and ignores inactive connections', () => {
  const m = service('sed', AB(1, 3));
  load(m, B, 2, 1000);
  assert.equal(pick(m), B); // 3/3 = 1/1: tie, B first
  load(m, B, 3, 0);
  assert.equal(pick(m), A); // 4/3 > 1/1
});

test('nq sends to the first idle server even when a busier one has a larger weight', () => {
  const m = service('nq', AB(1, 100));
  load(m, B, 1, 0);
  assert.equal(pick(m), A);
  load(m, A, 1, 0);
  assert.equal(pick(m), B); // nobody idle: sed rule, 2/100 < 2/1
  load(m, A, 0, 5000);
  assert.equal(pick(m), A); // inactive connections do not make a server busy
});

test('fo sends everything to the highest weight, the first in list order on ties, skipping OVERLOAD', () => {
  const m = service('fo', [
    { address: A, weight: 5 },
    { address: B, weight: 5 },
    { address: '10.0.0.3', weight: 2 },
  ]);
  assert.equal(pick(m), B);
  load(m, B, 1000, 0);
  assert.equal(pick(m), B); // connection counts do not matter
  load(m, B, 0, 0, true);
  assert.equal(pick(m), A);
});

test('ovf fills the highest weight until its active connections exceed its weight, then overflows', () => {
  const m = service('ovf', AB(2, 1));
  assert.equal(pick(m), A);
  load(m, A, 2, 0);
  assert.equal(pick(m), A); // 2 ≤ 2
  load(m, A, 3, 0);
  assert.equal(pick(m), B);
  load(m, B, 2, 0);
  assert.equal(pick(m), null);
});

test('OVERLOAD excludes a server from every least-connection scheduler', () => {
  for (const s of ['lc', 'wlc', 'sed', 'nq', 'fo', 'ovf']) {
    const m = service(s, AB(1, 1));
    load(m, B, 0, 0, true);
    load(m, A, 0, 50); // B would win every rule but is excluded
    assert.equal(pick(m), A, s);
  }
});
