/**
 * The arithmetic of the reliability run (perf/reliability/report.ts): what the clients printed →
 * figures (percentiles, success rates, recovery, the packet balance), the defense settings found
 * in a configuration, the options, and the report's Markdown. No timing, no I/O.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  anchor,
  attemptStats,
  balance,
  defenseSettings,
  fmtValue,
  GEN_REFUSES_BY_NAME,
  inFlightAt,
  numericDiff,
  parseJsonLines,
  percentile,
  recovered,
  recoveryMs,
  renderMarkdown,
  type Attempt,
  type ReliabilityReport,
} from '../../perf/reliability/report';
import { parseOptions, SCENARIOS } from '../../perf/reliability/run';

const ok = (t: number, c = 5): Attempt => ({ t, c, d: c + 2, e: null });
const slow = (t: number): Attempt => ({ t, c: 1010, d: 1012, e: null });
const bad = (t: number, e = 'timeout'): Attempt => ({ t, c: null, d: null, e });

test('percentile is nearest-rank over the finite values', () => {
  const v = Array.from({ length: 100 }, (_, i) => 100 - i); // 1..100, unsorted
  assert.equal(percentile(v, 50), 50);
  assert.equal(percentile(v, 99), 99);
  assert.equal(percentile(v, 100), 100);
  assert.equal(percentile([7], 99), 7);
  assert.equal(percentile([3, NaN, Infinity, 1], 100), 3);
  assert.equal(percentile([], 50), null);
});

test('attemptStats counts attempts that started in the window; connect times of the answered ones', () => {
  const a = [ok(0, 1), ok(10, 3), bad(20), bad(30, 'ECONNRESET'), ok(40, 9), ok(100, 50)];
  const s = attemptStats(a, 0, 50);
  assert.equal(s.attempts, 5);
  assert.equal(s.ok, 3);
  assert.equal(s.okRate, 0.6);
  assert.equal(s.connectP50, 3);
  assert.equal(s.connectP99, 9);
  assert.deepEqual(s.errors, { timeout: 1, ECONNRESET: 1 });
  assert.equal(attemptStats(a, 1000, 2000).okRate, null);
  // An answer that is not a 200 is not a success even with a connect time.
  assert.equal(attemptStats([{ t: 0, c: 1, d: 2, e: 'status' }], 0, 1).ok, 0);
});

test('recovery: from the stop to the first attempt after which every one was good', () => {
  const stop = 1000;
  assert.equal(recoveryMs([bad(900), ok(1000), ok(1100)], stop, 1000), 0, 'nothing bad after the stop');
  assert.equal(recoveryMs([bad(1000), slow(1500), ok(2500), ok(2600)], stop, 1000), 1500, 'a slow connect is not served');
  assert.equal(recoveryMs([ok(1100), bad(2000), ok(3000)], stop, 1000), 2000, 'a bad one after good ones moves it');
  assert.equal(recoveryMs([ok(1100), bad(2000)], stop, 1000), null, 'still bad at the end');
  assert.equal(recoveryMs([ok(500)], stop, 1000), null, 'no attempt after the stop');
});

test('recovered: the last n attempts since a time were all good', () => {
  const a = [bad(0), ok(100), ok(200), ok(300)];
  assert.equal(recovered(a, 0, 1000, 3), true);
  assert.equal(recovered(a, 0, 1000, 4), false);
  assert.equal(recovered([...a, slow(400)], 0, 1000, 3), false);
  assert.equal(recovered(a, 250, 1000, 3), false, 'fewer than n since then');
});

test('balance: both sides give the packets forwarded, and they agree when every packet is counted once', () => {
  const before = {
    packets: { rxPackets: 100, txPackets: 50, txErrors: 0, txExtra: 0 },
    drops: { truncated: 10, no_service: 5 },
    generated: { reset: { sent: 5, rate_limited: 3 }, echo: { sent: 0 } },
    parked: 0,
    parkFull: 0,
  };
  // 1000 read: 600 dropped (200 of them answered with a RST: also written), 100 parked, 20 echo
  // requests answered in place, 280 forwarded — 10 of them GSO packets written as 3 segments each.
  const after = {
    packets: { rxPackets: 1100, txPackets: 50 + 200 + 20 + 280 + 20 - 5, txErrors: 5, txExtra: 20 },
    drops: { truncated: 410, no_service: 205, new_reason: 0 },
    generated: { reset: { sent: 205, rate_limited: 9 }, echo: { sent: 20 } },
    parked: 90,
    parkFull: 10,
  };
  const b = balance(before, after);
  assert.equal(b.received, 1000);
  assert.equal(b.counted_drops, 600);
  assert.deepEqual(b.generated, { reset: 200, echo: 20 });
  assert.equal(b.generated_total, 220);
  assert.equal(b.answered_in_place, 20, 'an echo request is no drop: answered in place');
  assert.equal(b.extra, 20);
  assert.equal(b.forwarded_read, 280);
  assert.equal(b.forwarded_written, 280, 'a write error counts as written');
  assert.equal(b.difference, 0);
  // 50 packets read and never counted: the read side has 50 more forwarded than were written.
  assert.equal(balance(before, { ...after, drops: { truncated: 360, no_service: 205 } }).difference, 50);
  // A packet loop, or segments without their counter: more written than the read side accounts for.
  assert.equal(balance(before, { ...after, packets: { ...after.packets, txPackets: after.packets.txPackets + 300 } }).difference, -300);
  // An answer counted as generated but never written (or a drop counted twice) shows too.
  assert.equal(balance(before, { ...after, generated: { ...after.generated, reset: { sent: 215 } } }).difference, 10);
  // A reason that appears only after (a counter added by a newer uvsd) is summed too.
  assert.equal(balance({ ...before, drops: {} }, { ...after, drops: { a: 1, b: 2 } }).counted_drops, 3);
  // Which kinds answer a packet that is no drop comes from conntrack/layout.ts.
  assert.deepEqual(GEN_REFUSES_BY_NAME, { reset: true, unreachable: true, echo: false, too_big: true, syn_ack: false });
  // The SYN proxy: 30 SYNs answered with cookies (in place), 4 packets held and replayed behind
  // the server's ACK (written as extra), the ACK itself forwarded for the server's SYN-ACK.
  const sp = balance(before, {
    ...after,
    packets: {
      ...after.packets,
      rxPackets: after.packets.rxPackets + 30 + 4 + 1,
      txPackets: after.packets.txPackets + 30 + 5,
      txExtra: 24,
    },
    generated: { ...after.generated, syn_ack: { sent: 30 } },
    synProxyHeld: 4,
  });
  assert.deepEqual([sp.held, sp.answered_in_place, sp.difference], [4, 50, 0]);
  assert.equal(balance(before, { ...after, synProxyHeld: 4 }).difference, -4, 'held but never counted as read');
});

test('inFlightAt: a request waiting when a node dies that moved just before belongs to the death', () => {
  const kill = 10_000;
  const r = (start: number, end: number, connected: number | null, answered: number | null = null) => ({ start, end, connected, answered });
  assert.equal(inFlightAt(r(9_999, 20_000, 10_000), kill), true, 'connected at the kill, then stuck');
  assert.equal(inFlightAt(r(9_000, 19_900, 9_850, 9_950), kill), true, 'answered 50 ms before, its body still coming');
  assert.equal(inFlightAt(r(9_700, 19_700, 9_701), kill), false, 'quiet for 299 ms before: it had lost a packet before the kill');
  assert.equal(inFlightAt(r(9_990, 9_995, 9_991, 9_993), kill), false, 'finished before the kill');
  assert.equal(inFlightAt(r(10_000, 20_000, null), kill), false, 'started at the kill: after it');
  assert.equal(inFlightAt(r(9_900, 19_900, null), kill), true, 'its SYN 100 ms before, never connected');
});

test('numericDiff lists the numeric leaves that moved, nested and new ones included', () => {
  const a = { uptime: 1, drops: { x: 1, y: 2 }, redis: { connected: false, lookups: { hit: 1 } }, name: 'u' };
  const b = { uptime: 2, drops: { x: 1, y: 5, z: 1 }, redis: { connected: true, lookups: { hit: 1 } }, name: 'v' };
  assert.deepEqual(numericDiff(a, b), { uptime: 1, 'drops.y': 3, 'drops.z': 1, 'redis.connected': 1 });
});

test('defenseSettings finds the SYN-flood defense knobs by name, wherever they are', () => {
  const cfg = {
    dataplane: { tableSize: 65536, defense: { dropEntry: 1, secureTcp: 0, amemthresh: 1024 } },
    timeouts: { tcp: { SYN_RECV: 60 } },
    synFlood: { perSourceHalfOpen: 64 },
    services: [{ name: 'defense', port: 80 }],
  };
  assert.deepEqual(defenseSettings(cfg), [
    'dataplane.defense.dropEntry = 1',
    'dataplane.defense.secureTcp = 0',
    'dataplane.defense.amemthresh = 1024',
    'synFlood.perSourceHalfOpen = 64',
  ]);
  assert.deepEqual(defenseSettings({ dataplane: { tableSize: 1 } }), []);
  assert.deepEqual(defenseSettings(null), []);
});

test('parseJsonLines keeps the objects and skips cut or foreign lines', () => {
  assert.deepEqual(parseJsonLines('{"a":1}\nnoise\n{"b":\n  {"c":2}  \n'), [{ a: 1 }, { c: 2 }]);
});

test('the options: --quick, --only in the run order, bad names and prefixes refused', () => {
  const o = parseOptions(['--quick', '--only', 'abuse,fuzz']);
  assert.ok(o !== 'help');
  assert.equal(o.quick, true);
  assert.deepEqual(o.only, ['fuzz', 'abuse']);
  const d = parseOptions([]);
  assert.ok(d !== 'help');
  assert.deepEqual(d.only, [...SCENARIOS]);
  assert.equal(d.quick, false);
  assert.equal(d.capture, null, 'no packet capture unless asked');
  const c = parseOptions(['--capture', '/tmp/x', '--only', 'redis']);
  assert.ok(c !== 'help');
  assert.equal(c.capture, '/tmp/x');
  assert.throws(() => parseOptions(['--capture']), /--capture needs a value/);
  assert.throws(() => parseOptions(['--only', 'fuzz,nope']), /unknown scenario "nope"/);
  assert.throws(() => parseOptions(['--prefix', 'Bad-Prefix']), /--prefix/);
  assert.throws(() => parseOptions(['--workers', '0']), /--workers/);
  assert.equal(parseOptions(['-h']), 'help');
});

test('RELIABILITY.md: summary with links, what was not met, figures, tables, machine and method', () => {
  const r: ReliabilityReport = {
    tool: 't',
    generatedAt: '2025-01-01T00:00:00.000Z',
    mode: 'full',
    command: 'npm run reliability',
    wallSeconds: 600,
    machine: { cpus: 2 },
    method: ['one', 'two'],
    leftBehind: [],
    scenarios: [
      {
        key: 'fuzz',
        title: 'Fuzz: frames',
        how: 'How it ran.',
        seconds: 61.4,
        figures: [
          { label: 'frames read', value: 10_000_123, expect: '≥ 10,000,000', ok: true },
          { label: 'worker restarts', value: 1, expect: '0', ok: false },
          { label: 'rate', value: 51.46, unit: 'k frames/s' },
        ],
        tables: [{ title: 'By kind', columns: ['kind', 'n'], rows: [['a|b', 3]] }],
        notes: ['A note.'],
      },
      { key: 'abuse', title: 'Abuse', how: 'h', seconds: 1, figures: [], tables: [], notes: [], error: 'lab did not come up' },
    ],
  };
  const md = renderMarkdown(r);
  assert.match(md, /\| \[Fuzz: frames\]\(#fuzz-frames\) \| 1 of 2 \| 61 s \|/);
  assert.match(md, /- Fuzz: frames: worker restarts — 1 \(expected 0\)/);
  assert.match(md, /\| frames read \| 10,000,123 \| ≥ 10,000,000 \| yes \|/);
  assert.match(md, /\| worker restarts \| 1 \| 0 \| \*\*NO\*\* \|/);
  assert.match(md, /\| rate \| 51\.5 k frames\/s \| {2}\| {2}\|/);
  assert.match(md, /\| a\\\|b \| 3 \|/);
  assert.match(md, /did not finish: lab did not come up/);
  assert.match(md, /## Machine[\s\S]*\| cpus \| 2 \|/);
  assert.match(md, /## Method\n\n- one\n- two/);
});

test('fmtValue and anchor', () => {
  assert.equal(fmtValue(null), '—');
  assert.equal(fmtValue(true), 'yes');
  assert.equal(fmtValue(0.5, '%'), '0.50 %');
  assert.equal(fmtValue(12345), '12,345');
  assert.equal(anchor('IPv6 hash flood: one /64 against random addresses'), 'ipv6-hash-flood-one-64-against-random-addresses');
});
