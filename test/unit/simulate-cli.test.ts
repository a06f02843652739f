/** `uvs simulate` as a program: the compiled CLI with a scenario on stdin, and its import graph. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const UVS = join(__dirname, '../../control/uvs.js');

function simulate(stdin: string, args: string[] = []) {
  return spawnSync(process.execPath, [UVS, 'simulate', ...args], { input: stdin, encoding: 'utf8', timeout: 20_000 });
}

test('uvs simulate reads the scenario on stdin and prints one JSON line per connect', () => {
  const scenario = {
    scheduler: 'mh',
    flags: ['mh-port'],
    protocol: 'tcp',
    service: { address: '10.96.0.10', port: 80 },
    persistence: 0,
    netmask: '255.255.255.255',
    mhTableSize: 4093,
    seed: 1,
    realServers: [
      { address: '10.0.0.1', port: 80, weight: 1 },
      { address: '10.0.0.2', port: 80, weight: 1 },
      { address: '10.0.0.3', port: 80, weight: 1 },
    ],
    events: [
      { connect: { client: '192.168.1.100', clientPort: 40000 } },
      { setWeight: { realServer: '10.0.0.3:80', weight: 0 } },
      { connect: { client: '192.168.1.100', clientPort: 40001 } },
      { finish: 0 },
      { advance: 30 },
      { expire: 0 },
    ],
  };
  const r = simulate(JSON.stringify(scenario));
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { event: number; realServer: string | null });
  assert.equal(lines.length, 2);
  assert.deepEqual(lines[0], { event: 0, realServer: '10.0.0.3:80', connect: 0 });
  assert.equal(lines[1]!.event, 2);
});

test('a bad scenario exits 2, prints nothing on stdout and names the field on stderr', () => {
  const r = simulate(
    JSON.stringify({ service: { address: '10.96.0.10', port: 80 }, realServers: [{ address: '10.0.0.1', weight: 70000 }], events: [] }),
  );
  assert.equal(r.status, 2);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /realServers\[0\]\.weight: must be between 0 and 65535, got 70000/);
  const bad = simulate('{ not json');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /not valid JSON/);
});

test('uvs simulate loads no daemon, fastify, pino, yaml or ioredis module', () => {
  const probe = `require(${JSON.stringify(join(__dirname, '../../control/simulate.js'))});
    console.log(JSON.stringify(Object.keys(require.cache)));`;
  const r = spawnSync(process.execPath, ['-e', probe], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const loaded = JSON.parse(r.stdout) as string[];
  const heavy = loaded.filter((f) => /node_modules|[/\\](daemon|api|config|services|log)\.js$/.test(f));
  assert.deepEqual(heavy, []);
});
