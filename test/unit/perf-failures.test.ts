/**
 * The arithmetic of the perf harness's failure figures (perf/failures.ts): the client-side
 * takeover blackout and what the load records count around an event, and their report section.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { blackout, classifyLoad, failoverPrefix, type LoadRecord } from '../../perf/failures';
import { renderMarkdown, type ReportData } from '../../perf/report';

test('blackout: kill to the end of the largest gap that spans the kill', () => {
  const arrivals = [0, 10, 20, 30, 40, 330, 340, 350];
  assert.deepEqual(blackout(arrivals, 45), { blackoutMs: 285, gapMs: 290 });
  // An answer already in flight at the kill lands just after it: the gap after it is the blackout.
  assert.deepEqual(blackout([0, 10, 20, 46, 400, 410], 45), { blackoutMs: 355, gapMs: 354 });
  // A gap that ended before the kill does not count, nor one that starts more than 50 ms after it.
  assert.deepEqual(blackout([0, 500, 510, 520, 900], 515), { blackoutMs: 385, gapMs: 380 });
  assert.deepEqual(blackout([0, 10, 20, 30, 100, 500], 25), { blackoutMs: 75, gapMs: 70 });
  assert.equal(blackout([0, 10, 20], 45), null, 'nothing arrived after the kill');
  assert.equal(blackout([], 45), null);
});

test('classifyLoad: in flight at the event, completed or broken; new ones after it', () => {
  const r = (start: number, end: number, server: string | null, error: string | null): LoadRecord => ({
    start,
    end,
    server,
    error,
    hold: end - start > 100,
  });
  const records = [
    r(0, 5, 'rs1', null),
    r(100, 1600, 'rs1', null), // open across the event, completed
    r(200, 1700, 'rs1', 'aborted'), // open across it, broken after the server wrote its name
    r(300, 1001, null, 'ECONNRESET'), // open across it, broken before any byte
    r(400, 1900, 'rs2', null), // another server: not counted as in flight
    r(1005, 1010, null, 'ECONNREFUSED'), // within the 20 ms of the event: neither before nor after
    r(1100, 1101, null, 'ECONNREFUSED'),
    r(1200, 1205, 'rs1', null),
    r(1300, 1305, 'rs3', null),
  ];
  const c = classifyLoad(records, 'rs1', 990, 1000);
  assert.equal(c.requests, 9);
  assert.equal(c.failed, 4);
  assert.equal(c.inFlight, 3);
  assert.equal(c.inFlightCompleted, 1);
  assert.equal(c.brokenInFlight, 2);
  assert.equal(c.newToName, 1);
  assert.deepEqual(
    c.failedNew.map((x) => x.start),
    [1100],
  );
});

test("failoverPrefix: the two-node lab never shares the run's prefix, within FailoverLab's 8 characters", () => {
  assert.equal(failoverPrefix('uvph'), 'uvphf');
  assert.equal(failoverPrefix('uvperf'), 'uvperff');
  assert.equal(failoverPrefix('abcdefghi'), 'abcdefgf');
});

test('the report has a failure table when measured, and says how to get one when not', () => {
  const base = {
    tool: 't',
    generatedAt: '2026-01-01T00:00:00.000Z',
    mode: 'custom',
    command: 'x',
    wallSeconds: 1,
    options: { rounds: 1, duration: 1, targets: [], measurements: [], workers: 2, conns: 1, scaling: [], flows: [], tables: [] },
    machine: { cpuModel: 'c', nproc: 2, memGiB: 1, kernel: 'k', node: 'n' },
    tools: {},
    method: [],
    results: {},
    notMeasured: [],
    ratios: { vsDirect: {}, uvsVs: {} },
    lbRssMb: {},
    scaling: { runs: [], memory: [] },
    errors: [],
  } as unknown as ReportData;
  const off = renderMarkdown({ ...base, failures: { measured: false, note: 'Not selected: --failures.' } });
  assert.match(off, /## Failure figures — not measured in this run\n\n> Not selected: --failures\./);
  const s = { median: 285, min: 280, max: 300, n: 3, values: [280, 285, 300] };
  const on = renderMarkdown({
    ...base,
    failures: {
      measured: true,
      note: 'n',
      rounds: 3,
      scenarios: [
        {
          key: 'lbKill',
          title: 'LB-node kill',
          how: 'how',
          figures: [
            { key: 'blackoutUdpMs', label: 'blackout, UDP', unit: 'ms', better: 'lower', value: s },
            { key: 'x', label: 'not there', unit: '', better: null, value: null },
          ],
          notes: ['round 2 failed: x'],
        },
      ],
    },
  });
  assert.match(on, /\| \*\*LB-node kill\*\* \| blackout, UDP \(ms\) ↓ \| 285 \(280–300\) \|/);
  assert.match(on, /\|  \| not there \| — \|/);
  assert.match(on, /- \*\*LB-node kill\.\*\* how\n {2}- round 2 failed: x/);
});
