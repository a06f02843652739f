/**
 * The health path keepalived follows cannot be answered by anyone but uvsd (issue 25, item 5). An
 * unprivileged process (uid nobody, in the LB namespace) listens on 127.0.0.1:10256 and :10249
 * before uvsd starts and answers 200 to everything: the shipped track script
 * (examples/keepalived/keepalived.conf, run as written with the lab's socket path) still reports
 * failure while uvsd is not running or was killed; uvsd starts anyway, says who holds each port
 * (pid, command, uid) in its log and in GET /v1/stats, and takes the port once it is free.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HealthzResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { hasCommand, Lab, LAB_VIP } from '../../lab/lab';
import { waitFor, waitForLine } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const isRoot = process.getuid?.() === 0;
const skip = !isRoot ? 'integration tests need root (network namespaces, TUN)' : !hasCommand('setpriv') ? 'setpriv missing' : false;
const NOBODY = 65534;

/** A squatter: 200 and a healthy-looking body for any request, on each port given. */
const SQUATTER = `
const http = require('http');
let n = 0;
for (const port of process.argv.slice(1).map(Number)) {
  http.createServer((req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"healthy":true}'))
    .listen(port, '127.0.0.1', () => { if (++n === process.argv.length - 1) console.log('squatting'); });
}`;

/** The example's track script command, with the lab's API socket in place of /run/uvs/uvsd.sock. */
function exampleTrackScript(socket: string): string {
  const conf = readFileSync(join(ROOT, 'examples', 'keepalived', 'keepalived.conf'), 'utf8');
  const block = /vrrp_script uvsd_healthz \{([\s\S]*?)\n\}/.exec(conf)?.[1] ?? '';
  const script = /^\s*script "([^"]+)"/m.exec(block)?.[1];
  assert.ok(script, 'the example has a uvsd_healthz track script');
  return script.split('/run/uvs/uvsd.sock').join(socket);
}

describe('a squatter on the healthz port', { skip, timeout: 180_000 }, () => {
  const lab = new Lab({ prefix: `uvq${process.pid % 100000}` });
  let squatter: ChildProcess | null = null;
  let configFile = '';
  let script = '';
  /** The track script's exit status, run in the LB namespace as keepalived would (sh -c). */
  const track = () => spawnSync('ip', ['netns', 'exec', lab.lbNs, 'sh', '-c', script], { timeout: 10_000 }).status;
  const tcpHealthz = () =>
    spawnSync('ip', ['netns', 'exec', lab.lbNs, 'curl', '-s', '-m', '2', '-w', '\n%{http_code}', 'http://127.0.0.1:10256/healthz'], {
      encoding: 'utf8',
      timeout: 10_000,
    }).stdout;
  const uvsdLog = () => readFileSync(join(lab.dir, 'uvsd.log'), 'utf8');

  before(async () => {
    lab.up();
    configFile = lab.writeConfig(
      lab.config([
        { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
      ]),
    );
    script = exampleTrackScript(lab.socket);
    squatter = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.lbNs,
        'setpriv',
        `--reuid=${NOBODY}`,
        `--regid=${NOBODY}`,
        '--clear-groups',
        process.execPath,
        '-e',
        SQUATTER,
        '10256',
        '10249',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await waitForLine(squatter, /squatting/, 'the squatter listening');
  });

  after(async () => {
    squatter?.kill('SIGKILL');
    await lab.stopUvsd();
    lab.down();
  });

  test('the shipped track script fails while uvsd has never run, though the healthz port answers 200', () => {
    assert.match(tcpHealthz(), /\n200$/, 'the squatter answers 200 on 127.0.0.1:10256');
    assert.notEqual(track(), 0, `the track script (${script}) must fail with no uvsd`);
  });

  test('uvsd starts anyway, names the holder of each port, and the track script then succeeds', async () => {
    await lab.startUvsd(configFile);
    await waitFor(
      'workers ready',
      async () => (await apiCall<HealthzResponse>(lab.socket, 'GET', '/healthz').catch(() => null))?.status === 200,
    );
    const pid = squatter!.pid!;
    for (const port of [10256, 10249]) {
      const line = uvsdLog()
        .split('\n')
        .find((l) => l.includes(`127.0.0.1:${port} is held by another process`));
      assert.ok(line, `uvsd logs that 127.0.0.1:${port} is held`);
      assert.match(line, new RegExp(`pid ${pid} \\(`), 'the log names the holder’s pid');
      assert.match(line, new RegExp(`uid ${NOBODY} \\(nobody\\)`), 'and its uid');
      assert.match(line, /-e /, 'and its command line');
    }
    const st = (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
    const hz = st.listeners.find((l) => l.name === 'healthz');
    assert.equal(hz?.listening, false);
    assert.match(hz?.heldBy ?? '', new RegExp(`pid ${pid} .*uid ${NOBODY}`));
    assert.equal(track(), 0, 'the track script succeeds while uvsd runs');
  });

  test('uvsd killed: the track script fails again while the squatter still answers 200', async () => {
    lab.uvsdProcess!.kill('SIGKILL');
    await waitFor('uvsd gone', () => lab.uvsdProcess!.exitCode !== null || lab.uvsdProcess!.signalCode !== null);
    assert.match(tcpHealthz(), /\n200$/, 'the squatter still answers 200');
    assert.notEqual(track(), 0, 'the track script fails: nothing accepts on the dead uvsd’s socket');
  });

  test('once the squatter is gone, a running uvsd takes the healthz port', async () => {
    await lab.startUvsd(configFile);
    await waitFor('workers ready', async () => (await apiCall(lab.socket, 'GET', '/healthz').catch(() => null))?.status === 200);
    squatter!.kill('SIGKILL');
    await waitFor('uvsd listening on 10256', () => /"workers":\[/.test(tcpHealthz()), 15_000);
    const st = (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
    assert.deepEqual(
      st.listeners.map((l) => [l.name, l.listening, l.heldBy]),
      [
        ['metrics', true, null],
        ['healthz', true, null],
      ],
    );
    assert.equal(track(), 0);
  });
});
