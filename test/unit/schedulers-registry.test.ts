/**
 * What the schedulers declare about themselves (schedulers/types.ts Scheduler), which the control
 * plane asks instead of branching on scheduler names: the flag names each gives the
 * IP_VS_SVC_F_SCHED bits (ipvsadm.c parse_sched_flags / print_sched_flags), the lookup table of
 * the hashing schedulers, and the seed of twos's random stream.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dhBucket } from '../../schedulers/dh';
import { mhHash1 } from '../../schedulers/mh';
import {
  flagScheduler,
  getScheduler,
  registerScheduler,
  SCHED_FLAG_NAMES,
  schedFlagNames,
  schedulerNames,
} from '../../schedulers/registry';
import { shBucket } from '../../schedulers/sh';
import { SCHED_FLAG_BITS } from '../../schedulers/types';
import { input, service } from '../helpers/sched';

const ABC = [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }];

test('sh-* flags need sh, mh-* need mh, flag-1..3 suit every scheduler, and nothing else is a flag', () => {
  assert.deepEqual(
    SCHED_FLAG_NAMES.map((f) => [f, flagScheduler(f)]),
    [
      ['flag-1', null],
      ['flag-2', null],
      ['flag-3', null],
      ['sh-fallback', 'sh'],
      ['sh-port', 'sh'],
      ['mh-fallback', 'mh'],
      ['mh-port', 'mh'],
    ],
  );
  assert.equal(flagScheduler('sh'), null);
  assert.equal(flagScheduler('flag-4'), null);
});

test('the flag names printed for a scheduler: its own in bit order, else flag-1..3 (print_sched_flags)', () => {
  assert.deepEqual(schedFlagNames('sh'), ['sh-fallback', 'sh-port']);
  assert.deepEqual(schedFlagNames('mh'), ['mh-fallback', 'mh-port']);
  for (const s of ['rr', 'wlc', 'dh', 'twos']) assert.deepEqual(schedFlagNames(s), ['flag-1', 'flag-2', 'flag-3'], s);
  // Bit order: the first name is SCHED1 (fallback), the second SCHED2 (port).
  for (const s of ['sh', 'mh'])
    assert.deepEqual(
      schedFlagNames(s).map((f) => SCHED_FLAG_BITS[f]),
      [1, 2],
      s,
    );
});

test('registration refuses a flag with no IP_VS_SVC_F_SCHED bit and a flag another scheduler owns', () => {
  const schedule = () => -1;
  assert.throws(() => registerScheduler({ name: 'x1', flags: ['x1-port'], schedule }), /x1-port has no IP_VS_SVC_F_SCHED bit/);
  assert.throws(() => registerScheduler({ name: 'x2', flags: ['sh-port'], schedule }), /sh-port is already scheduler sh's/);
  assert.ok(!schedulerNames().includes('x1') && !schedulerNames().includes('x2'), 'a refused scheduler is not registered');
  assert.equal(flagScheduler('sh-port'), 'sh');
});

test('a scheduler name registers once, and a name no scheduler has prints the generic flags', () => {
  assert.throws(() => registerScheduler({ name: 'rr', schedule: () => -1 }), /scheduler rr is already registered/);
  assert.deepEqual(schedFlagNames('no-such-scheduler'), ['flag-1', 'flag-2', 'flag-3']);
});

test('exactly sh, dh and mh have a lookup table, and their decision is the lookup in it', () => {
  assert.deepEqual(
    schedulerNames()
      .filter((n) => getScheduler(n)!.lookupTable !== undefined)
      .sort(),
    ['dh', 'mh', 'sh'],
  );
  const clients = Array.from({ length: 40 }, (_, i) => input(`192.168.${i}.${(i * 37) & 255}`, 1000 + i));
  const slotOf: Record<string, (inp: ReturnType<typeof input>, size: number) => number> = {
    sh: (inp) => shBucket(inp.caddr, 0, 0),
    dh: (inp) => dhBucket(inp.vaddr),
    mh: (inp, size) => mhHash1(inp.caddr, 0, 0) % size,
  };
  for (const name of ['sh', 'dh', 'mh']) {
    const m = service(name, ABC);
    const table = m.scheduler.lookupTable!(m.svc.data!);
    assert.equal(table.length, name === 'mh' ? 4093 : 256, name);
    assert.ok(
      table.every((p) => p >= 0 && p < 3),
      `${name}: every slot holds a list position`,
    );
    for (const inp of clients) {
      const s = m.schedule(inp);
      assert.equal(s?.key, m.listed()[table[slotOf[name]!(inp, table.length)]!]!.key, name);
    }
  }
});

test('twos alone takes a seed, and the same seed gives the same decisions', () => {
  assert.deepEqual(
    schedulerNames().filter((n) => getScheduler(n)!.seed !== undefined),
    ['twos'],
  );
  const run = (seed: number) => {
    const m = service('twos', ABC);
    m.scheduler.seed!(m.state, m.base, seed);
    return Array.from({ length: 30 }, () => m.schedule(input())!.key);
  };
  assert.deepEqual(run(7), run(7));
  assert.notDeepEqual(run(7), run(8));
});
