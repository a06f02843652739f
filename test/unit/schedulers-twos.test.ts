/** twos: the seeded mulberry32 stream, two draws per decision, and the kernel's comparison. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { seedTwos, twosNext } from '../../schedulers/twos';
import { load, pick, service } from '../helpers/sched';

test('the stream is mulberry32: seed 1 draws 2693262067, 11749833, 2265367787, 4213581821', () => {
  const st = new Int32Array(2);
  seedTwos(st, 1, 1);
  assert.deepEqual([twosNext(st, 1), twosNext(st, 1), twosNext(st, 1), twosNext(st, 1)], [2693262067, 11749833, 2265367787, 4213581821]);
  seedTwos(st, 1, 2 ** 32 + 1); // seed mod 2^32
  assert.equal(twosNext(st, 1), 2693262067);
});

test('each decision draws exactly two numbers, and none when no server is eligible', () => {
  const m = service('twos', [{ address: '10.0.0.1' }, { address: '10.0.0.2' }]);
  seedTwos(m.state, m.base, 7);
  pick(m);
  const ref = new Int32Array(1);
  seedTwos(ref, 0, 7);
  twosNext(ref, 0);
  twosNext(ref, 0);
  assert.equal(m.state[m.base], ref[0]);
  const none = service('twos', [{ address: '10.0.0.1', weight: 0 }]);
  seedTwos(none.state, none.base, 7);
  assert.equal(pick(none), null);
  assert.equal(none.state[none.base], 7);
});

test('with equal loads choice 1 wins: the first of weights 3, 1 in list order is chosen (3+1)/(4+1) of the time', () => {
  const m = service('twos', [
    { address: '10.0.0.1', weight: 1 },
    { address: '10.0.0.2', weight: 3 },
  ]);
  seedTwos(m.state, m.base, 42);
  let first = 0;
  const n = 20000;
  for (let i = 0; i < n; i++) if (pick(m) === '10.0.0.2') first++;
  assert.ok(Math.abs(first / n - 0.8) < 0.015, `${first / n}`);
});

test('choice 2 wins when weight2·overhead1 > weight1·overhead2', () => {
  const m = service('twos', [
    { address: '10.0.0.1', weight: 1 },
    { address: '10.0.0.2', weight: 1 },
  ]);
  seedTwos(m.state, m.base, 3);
  load(m, '10.0.0.2', 10, 0); // the list's first server is loaded
  let loaded = 0;
  for (let i = 0; i < 3000; i++) if (pick(m) === '10.0.0.2') loaded++;
  // only when both draws fall on it (r1, r2 ≤ 1 of 0..2: 4/9) is the loaded server chosen
  assert.ok(Math.abs(loaded / 3000 - 4 / 9) < 0.03, `${loaded / 3000}`);
});

test('the same seed gives the same decisions', () => {
  const run = () => {
    const m = service('twos', [
      { address: '10.0.0.1', weight: 2 },
      { address: '10.0.0.2', weight: 5 },
      { address: '10.0.0.3', weight: 1 },
    ]);
    seedTwos(m.state, m.base, 99);
    return Array.from({ length: 50 }, () => pick(m));
  };
  assert.deepEqual(run(), run());
});

test('without a seed each service draws its own random stream (the kernel draws get_random_u32)', () => {
  const servers = Array.from({ length: 10 }, (_, i) => ({ address: `10.0.0.${i + 1}` }));
  const run = () => {
    const m = service('twos', servers);
    return Array.from({ length: 30 }, () => pick(m)).join(' ');
  };
  // Idle servers: each pick is the first draw's server (draws 0 and 1 the first server, 2..10 one
  // each): two services agree on one pick with probability 13/121, on 30 below 10^-28.
  assert.notEqual(run(), run());
});
