/**
 * The rate estimator behind `uvsadm -L --rate` (control/stats.ts): the kernel's ip_vs_est.c —
 * a tick every 2 s, rates scaled by 2^10 (packets, connections) and 2^5 (bytes), EWMA with weight
 * 1/4, read-out rounded as the kernel rounds; -Z starts the rates again from zero.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { StatsReader } from '../../control/stats';

function setup() {
  const maxRs = 4;
  const regions = [0, 1].map(() => new SharedArrayBuffer(L.counterWords(maxRs, 2) * 8));
  const stats = new StatsReader(regions, maxRs);
  const w0 = new Float64Array(regions[0]!);
  const w1 = new Float64Array(regions[1]!);
  const base = stats.realServerBase(1);
  /** Two workers each count half of a 2-s period's traffic. */
  const period = (conns: number, pkts: number, bytes: number) => {
    for (const w of [w0, w1]) {
      w[base + L.RSC_CONNS]! += conns / 2;
      w[base + L.RSC_INPKTS]! += pkts / 2;
      w[base + L.RSC_OUTPKTS]! += pkts / 4;
      w[base + L.RSC_INBYTES]! += bytes / 2;
      w[base + L.RSC_OUTBYTES]! += bytes;
    }
  };
  return { stats, base, period };
}

test('a steady 50 conn/s, 1000 pkt/s, 500000 B/s converges to exactly those rates', () => {
  const { stats, base, period } = setup();
  stats.estimate([base]); // first sight: the starting point
  assert.deepEqual(stats.rates(base), { cps: 0, inPps: 0, outPps: 0, inBps: 0, outBps: 0 });
  period(100, 2000, 1_000_000);
  stats.estimate([base]);
  // cps = 0 + (100·2^9 − 0) >> 2 = 12800 → (12800 + 0x1FF) >> 10 = 12 (12.5 rounds down: 0x1FF is just under half)
  assert.equal(stats.rates(base).cps, 12);
  period(100, 2000, 1_000_000);
  stats.estimate([base]);
  // 12800 + (51200 − 12800) >> 2 = 22400 → 22
  assert.equal(stats.rates(base).cps, 22);
  for (let i = 0; i < 60; i++) {
    period(100, 2000, 1_000_000);
    stats.estimate([base]);
  }
  assert.deepEqual(stats.rates(base), { cps: 50, inPps: 1000, outPps: 500, inBps: 500_000, outBps: 1_000_000 });
});

test('rates decay by a quarter per tick once traffic stops', () => {
  const { stats, base, period } = setup();
  stats.estimate([base]);
  for (let i = 0; i < 60; i++) {
    period(100, 0, 0);
    stats.estimate([base]);
  }
  assert.equal(stats.rates(base).cps, 50);
  stats.estimate([base]);
  // 51200 + (0 − 51200) >> 2 = 38400 → (38400 + 0x1FF) >> 10 = 37
  assert.equal(stats.rates(base).cps, 37);
  for (let i = 0; i < 60; i++) stats.estimate([base]);
  assert.equal(stats.rates(base).cps, 0);
});

test('-Z (a new zero point) restarts the estimate from zero; blocks not listed are forgotten', () => {
  const { stats, base, period } = setup();
  stats.estimate([base]);
  for (let i = 0; i < 20; i++) {
    period(100, 100, 100);
    stats.estimate([base]);
  }
  assert.ok(stats.rates(base).cps > 40);
  stats.zeroRealServer(1);
  assert.equal(stats.rates(base).cps, 0);
  stats.estimate([base]); // new starting point at the zeroed counters: no negative delta
  period(100, 100, 100);
  stats.estimate([base]);
  assert.equal(stats.rates(base).cps, 12);
  stats.estimate([]);
  assert.equal(stats.rates(base).cps, 0);
});
