/**
 * The connections/s method of the perf harness (issue 16): wrk's threads and direct's spread over
 * the real servers, each target's own client address, the conntrack check's counters.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spreadScript, wrkArgs, WRK_THREADS } from '../../perf/measure';
import { parseConntrackStat } from '../../perf/probe';
import { parseOptions } from '../../perf/run';
import { ALL_TARGETS, CLIENT_SOURCE } from '../../perf/targets';

test('wrkArgs: the same threads for every target; a spread endpoint gets a script that sets each thread its host', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uvs-perf-method-'));
  try {
    const plain = wrkArgs(dir, { host: '10.200.0.20', port: 80 }, 33, '3s', '2s');
    assert.deepEqual(plain, [
      '-t',
      String(WRK_THREADS),
      '-c',
      '33',
      '-d',
      '3s',
      '--timeout',
      '2s',
      '-H',
      'Connection: close',
      'http://10.200.0.20:80/',
    ]);

    const hosts = ['10.200.11.2', '10.200.12.2', '10.200.13.2'];
    const spread = wrkArgs(dir, { host: hosts[0]!, port: 8080, spread: hosts }, 33, '3s', '2s');
    const s = spread.indexOf('-s');
    assert.ok(s > 0, 'a script is passed');
    assert.equal(spread[spread.length - 1], 'http://10.200.11.2:8080/');
    assert.deepEqual(spread.slice(0, 2), ['-t', String(WRK_THREADS)]);
    const lua = readFileSync(spread[s + 1]!, 'utf8');
    assert.equal(lua, spreadScript(hosts, 8080));
    assert.match(lua, /local hosts = \{ "10\.200\.11\.2", "10\.200\.12\.2", "10\.200\.13\.2" \}/);
    assert.match(lua, /wrk\.lookup\(hosts\[n % #hosts \+ 1\], "8080"\)/);
    // Only setup(): no request/response function, so wrk's per-request path is the one without a script.
    assert.doesNotMatch(lua, /function (request|response|done)/);

    assert.throws(() => wrkArgs(dir, { host: 'a', port: 1, spread: ['a', 'b'] }, 33, '3s', '2s'), /cannot be divided evenly over 2 hosts/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--conns: a multiple of wrk threads, 33 by default', () => {
  const d = parseOptions([]);
  assert.ok(d !== 'help');
  assert.equal(d.conns, 33);
  assert.equal(d.conns % WRK_THREADS, 0);
  const o = parseOptions(['--conns', '12']);
  assert.ok(o !== 'help');
  assert.equal(o.conns, 12);
  assert.throws(() => parseOptions(['--conns', '32']), /--conns: a multiple of 3/);
  assert.throws(() => parseOptions(['--conns', '1']), /--conns/);
});

test('--uvs-steering and --uvs-forwarding are custom runs, and say what they set', () => {
  assert.equal((parseOptions([]) as Exclude<ReturnType<typeof parseOptions>, 'help'>).mode, 'default');
  const s = parseOptions(['--uvs-steering', 'automq']);
  assert.ok(s !== 'help');
  assert.deepEqual([s.mode, s.uvsSteering], ['custom', 'automq']);
  const f = parseOptions(['--uvs-forwarding', 'fullnat']);
  assert.ok(f !== 'help');
  assert.deepEqual([f.mode, f.uvsForwarding], ['custom', 'fullnat']);
  assert.throws(() => parseOptions(['--uvs-forwarding', 'tunnel']), /forwarding/);
});

test('every target has a client address of its own, beside the lab client and trafgen addresses', () => {
  const addrs = ALL_TARGETS.map((t) => CLIENT_SOURCE[t]);
  assert.equal(new Set(addrs).size, ALL_TARGETS.length);
  for (const a of addrs) {
    assert.match(a, /^10\.200\.1\.\d+$/);
    // 10.200.1.1 is the LB node, .2 the lab's client address, .3 trafgen's second source.
    assert.ok(!['10.200.1.1', '10.200.1.2', '10.200.1.3'].includes(a), a);
  }
});

test('parseConntrackStat: hex counters summed over the CPUs', () => {
  const text = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
0000002a  00000000 00000000 00000000 00000003 00000000 00000000 00000000 00000000 00000001 00000000 00000010 00000000  00000000 00000000 00000000 00000000
0000002a  00000000 00000000 00000000 00000001 00000000 00000000 00000000 00000000 00000000 0000000a 00000000 00000000  00000000 00000000 00000000 00000002
`;
  const s = parseConntrackStat(text);
  assert.equal(s.entries, 84);
  assert.equal(s.invalid, 4);
  assert.equal(s.insert_failed, 1);
  assert.equal(s.drop, 10);
  assert.equal(s.early_drop, 16);
  assert.equal(s.search_restart, 2);
  assert.deepEqual(parseConntrackStat(''), {});
});
