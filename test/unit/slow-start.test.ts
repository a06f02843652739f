/**
 * Slow start (control/services.ts): a returning real server's weight ramps over `slowStart`, the
 * schedulers see the ramp, and steps (mh/sh table rebuilds) are rate-limited per service.
 * Deterministic time: the model's clock is a variable the tests advance.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { createRealServerRegion } from '../../conntrack/table';
import { validateConfig } from '../../control/config';
import { ServiceModel, slowStartWeight, SLOW_START_MIN_STEP_MS } from '../../control/services';
import { getScheduler } from '../../schedulers/registry';
import type { SchedInput } from '../../schedulers/types';

const VIP = '10.96.0.10';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];
const KEY = `tcp ${VIP}:80`;

type RsOpt = { address: string; weight?: number; slowStart?: number };

function cfg(rs: RsOpt[], scheduler = 'wrr', slowStart: number | null = 30) {
  return validateConfig({
    dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: 16, maxServices: 4 },
    services: [
      {
        protocol: 'tcp',
        address: VIP,
        port: 80,
        scheduler,
        ...(slowStart !== null ? { slowStart } : {}),
        realServers: rs.map((r) => ({ port: 8080, weight: 100, ...r })),
      },
    ],
  });
}

function model() {
  const rsSab = createRealServerRegion(16);
  const m = new ServiceModel(rsSab, new SharedArrayBuffer(4 * L.SCHED_WORDS * 4), 16, 4);
  let now = 5_000_000;
  m.clock = () => now;
  const rs = new Int32Array(rsSab);
  const view = (addr: string) => m.list()[0]!.realServers.find((r) => r.address === addr)!;
  const snapWeight = (addr: string) => {
    const snap = m.snapshot();
    return snap.services[0]!.dests.find((d) => d.rs === view(addr).slot)!.weight;
  };
  return { m, rs, view, snapWeight, advance: (ms: number) => (now += ms), now: () => now };
}

const all = RS.map((address) => ({ address }));

test('the ramp is linear, rounded up, at least 1 and the whole weight at the end of the window', () => {
  assert.equal(slowStartWeight(100, 0, 30_000), 1);
  assert.equal(slowStartWeight(100, 1_500, 30_000), 5);
  assert.equal(slowStartWeight(100, 15_000, 30_000), 50);
  assert.equal(slowStartWeight(100, 29_999, 30_000), 100);
  assert.equal(slowStartWeight(100, 30_000, 30_000), 100);
  assert.equal(slowStartWeight(3, 1, 30_000), 1);
  assert.equal(slowStartWeight(0, 10, 30_000), 0, 'weight 0 stays 0');
});

test('a server whose health check comes back ramps over slowStart in steps at most every max(1 s, window/20), then leaves slow start', () => {
  const { m, view, snapWeight, advance, rs } = model();
  m.apply(cfg(all));
  assert.equal(view(RS[2]!).weight, 100, 'servers present at start-up do not ramp');
  assert.equal(m.rampTick(), false);
  m.setHealthy(KEY, `${RS[2]}:8080`, false);
  assert.equal(view(RS[2]!).weight, 0);
  advance(60_000);
  m.setHealthy(KEY, `${RS[2]}:8080`, true);
  assert.equal(view(RS[2]!).weight, 1, 'back with weight 1, not 100');
  assert.equal(snapWeight(RS[2]!), 1, 'the snapshot the schedulers get has the ramp weight');
  assert.equal(rs[view(RS[2]!).slot * L.RS_WORDS + L.RS_WEIGHT], 1, 'RS_WEIGHT (ipvsadm -Ln) too');
  assert.ok(view(RS[2]!).slowStartUntil !== null);
  const steps: [number, number][] = [];
  for (let t = 250; t <= 32_000; t += 250) {
    advance(250);
    if (m.rampTick()) steps.push([t, view(RS[2]!).weight]);
  }
  // 30 s / 20 = 1.5 s a step: 5, 10, … 100 (20 steps).
  assert.equal(steps.length, 20);
  assert.deepEqual(steps.slice(0, 3), [
    [1500, 5],
    [3000, 10],
    [4500, 15],
  ]);
  assert.deepEqual(steps.at(-1), [30_000, 100]);
  for (let i = 1; i < steps.length; i++) {
    assert.ok(steps[i]![0] - steps[i - 1]![0] >= 1500, 'steps at least window/20 apart');
    assert.ok(steps[i]![1] > steps[i - 1]![1], 'the weight only rises');
  }
  assert.equal(view(RS[2]!).slowStartUntil, null, 'out of slow start');
  assert.equal(m.rampTick(), false);
  assert.equal(view(RS[0]!).weight, 100, 'the other servers are untouched');
});

test('failing again during the ramp drops to 0 and a later return starts the ramp over', () => {
  const { m, view, advance } = model();
  m.apply(cfg(all));
  m.setHealthy(KEY, `${RS[1]}:8080`, false);
  m.setHealthy(KEY, `${RS[1]}:8080`, true);
  advance(15_000);
  m.rampTick();
  assert.equal(view(RS[1]!).weight, 50);
  m.setHealthy(KEY, `${RS[1]}:8080`, false);
  assert.equal(view(RS[1]!).weight, 0);
  advance(1_000);
  m.setHealthy(KEY, `${RS[1]}:8080`, true);
  assert.equal(view(RS[1]!).weight, 1);
});

test('a server added to a running service and a weight raised from 0 ramp; a new service and other edits do not', () => {
  const { m, view, advance } = model();
  m.apply(cfg([{ address: RS[0]! }, { address: RS[1]!, weight: 0 }]));
  assert.equal(view(RS[0]!).weight, 100, 'a new service starts at full weight');
  m.apply(cfg([{ address: RS[0]! }, { address: RS[1]!, weight: 40 }, { address: RS[2]! }]));
  assert.equal(view(RS[1]!).weight, 1, 'weight raised from 0');
  assert.equal(view(RS[2]!).weight, 1, 're-added');
  m.apply(cfg([{ address: RS[0]!, weight: 80 }, { address: RS[1]!, weight: 40 }, { address: RS[2]! }]));
  assert.equal(view(RS[0]!).weight, 80, 'a change between non-zero weights applies at once');
  advance(15_000);
  m.rampTick();
  assert.deepEqual([view(RS[1]!).weight, view(RS[2]!).weight], [20, 50], 'both ramp in one step');
});

test("a real server's slowStart overrides its service's; 0 turns it off", () => {
  const { m, view, advance } = model();
  m.apply(cfg([{ address: RS[0]! }]));
  m.apply(cfg([{ address: RS[0]! }, { address: RS[1]!, slowStart: 10 }, { address: RS[2]!, slowStart: 0 }]));
  assert.deepEqual([view(RS[1]!).weight, view(RS[2]!).weight], [1, 100]);
  advance(5_000);
  m.rampTick();
  assert.equal(view(RS[1]!).weight, 50, 'half of its own 10 s window');
  const { m: m2, view: v2 } = model();
  m2.apply(cfg([{ address: RS[0]! }], 'wrr', null));
  m2.apply(cfg([{ address: RS[0]! }, { address: RS[1]! }], 'wrr', null));
  assert.equal(v2(RS[1]!).weight, 100, 'no slowStart: at once, as IPVS');
});

test('mh rebuilds its table at most once a second per service however many servers ramp', () => {
  const { m, view, advance, now } = model();
  const mh = getScheduler('mh')!;
  const prepare = mh.prepare!;
  const rebuilds: number[] = [];
  mh.prepare = (svc) => {
    rebuilds.push(now());
    return prepare(svc);
  };
  try {
    // A 10 s window steps every max(1 s, 0.5 s) = 1 s; two servers returning 300 ms apart.
    m.apply(cfg(all, 'mh', 10));
    m.setHealthy(KEY, `${RS[1]}:8080`, false);
    m.setHealthy(KEY, `${RS[2]}:8080`, false);
    m.setHealthy(KEY, `${RS[1]}:8080`, true);
    advance(300);
    m.setHealthy(KEY, `${RS[2]}:8080`, true);
    rebuilds.length = 0;
    const slots: number[] = [];
    for (let t = 0; t < 12_000; t += 100) {
      advance(100);
      if (m.rampTick()) {
        const snap = m.snapshot();
        const s = snap.services[0]!;
        const pos = s.dests.findIndex((d) => d.rs === view(RS[1]!).slot);
        slots.push(Array.from(s.data!.subarray(2, 2 + s.data![0]!)).filter((x) => x === pos).length);
      }
    }
    assert.ok(rebuilds.length >= 9, `the ramp rebuilt the table (${rebuilds.length} times)`);
    for (let i = 1; i < rebuilds.length; i++)
      assert.ok(
        rebuilds[i]! - rebuilds[i - 1]! >= SLOW_START_MIN_STEP_MS,
        `rebuilds ${rebuilds[i - 1]} and ${rebuilds[i]} less than 1 s apart`,
      );
    assert.ok(slots[0]! < slots.at(-1)!, `the returning server owns more slots as it ramps (${slots.join(' ')})`);
    assert.equal(view(RS[1]!).weight, 100);
    assert.equal(view(RS[2]!).weight, 100);
  } finally {
    mh.prepare = prepare;
  }
});

function input(i: number): SchedInput {
  return { caddr: (0x0a010000 + i) | 0, cport: 1024 + (i % 60000), vaddr: 0x0a60000a, vport: 80, now: 0 };
}

test("wrr gives a ramping server its ramp weight's share of new connections", () => {
  const { m, view, advance, rs } = model();
  m.apply(cfg(all));
  m.setHealthy(KEY, `${RS[2]}:8080`, false);
  m.setHealthy(KEY, `${RS[2]}:8080`, true);
  const share = () => {
    const snap = m.snapshot();
    const svc = snap.services[0]!;
    const wrr = getScheduler('wrr')!;
    let hit = 0;
    for (let i = 0; i < 2010; i++) {
      const d = wrr.schedule(svc, m.sched, svc.slot * L.SCHED_WORDS + L.SCHED_STATE, rs, input(i));
      if (svc.dests[d]!.rs === view(RS[2]!).slot) hit++;
    }
    return hit / 2010;
  };
  assert.ok(Math.abs(share() - 1 / 201) < 0.002, 'weight 1 against 100 + 100');
  advance(15_000);
  m.rampTick();
  assert.ok(Math.abs(share() - 50 / 250) < 0.01, 'weight 50 against 100 + 100');
});

test("wlc sends a returning server (no connections) only its ramp weight's share of load, not every new connection", () => {
  const run = (slowStart: number | null) => {
    const { m, view, rs } = model();
    m.apply(cfg(all, 'wlc', slowStart));
    m.setHealthy(KEY, `${RS[2]}:8080`, false);
    // The others carry 100 active connections each when the server returns.
    for (const a of [RS[0]!, RS[1]!]) rs[view(a).slot * L.RS_WORDS + L.RS_ACTIVE] = 100;
    m.setHealthy(KEY, `${RS[2]}:8080`, true);
    const snap = m.snapshot();
    const svc = snap.services[0]!;
    const wlc = getScheduler('wlc')!;
    let hit = 0;
    // 50 new connections, each counted as active on the server chosen.
    for (let i = 0; i < 50; i++) {
      const d = svc.dests[wlc.schedule(svc, m.sched, 0, rs, input(i))]!;
      rs[d.rs * L.RS_WORDS + L.RS_ACTIVE]!++;
      if (d.rs === view(RS[2]!).slot) hit++;
    }
    return hit;
  };
  assert.equal(run(null), 50, 'without slow start the empty server takes every new connection');
  // Weight 1 against 100: it is least loaded until it has 1 connection per 100 of the others'.
  assert.ok(run(30) <= 2, "with slow start it takes about its weight's share");
});
