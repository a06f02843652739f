/**
 * Graceful termination with real clients in the namespace lab: rolling removal under load,
 * long-lived connections holding a drain, UDP removal, resurrection, restart mid-drain, maximum
 * drain time. Short state timeouts (TIME_WAIT 2 s) and a 1 s drain check keep it quick; the
 * semantics are the same as with the defaults.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { AppliedResponse, ConnectionsResponse, DrainsResponse, ServicesResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';
import { needTool, waitFor as waitUntil } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;

describe('graceful termination', { skip: needTool(isRoot, 'root (network namespaces, TUN)'), timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvg${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  const fast = {
    timeouts: { tcpFin: 2, tcpStates: { TIME_WAIT: 2, CLOSE: 2, CLOSE_WAIT: 2, LAST_ACK: 2 } },
    gracefulTermination: { checkInterval: 1 },
  };
  const svc = (web: string[], extra: Record<string, unknown> = {}, udp: string[] = rs) => [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: web.map((a) => ({ address: a, port: 8080 })), ...extra },
    { protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'rr', realServers: web.map((a) => ({ address: a, port: 9007 })), ...extra },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: udp.map((a) => ({ address: a, port: 5353 })) },
  ];
  let configFile = '';
  const api = <T>(method: string, path: string) => apiCall<T>(lab.socket, method, path);
  /** Reloads with `services`; when the reload was asked for and when it answered. */
  const reload = async (services: unknown[], extra: Record<string, unknown> = fast) => {
    writeFileSync(configFile, stringify(lab.config(services, extra)));
    const sent = Date.now();
    const r = await api<AppliedResponse>('POST', '/v1/reload');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return { sent, answered: Date.now() };
  };
  const apply = async (services: unknown[], extra: Record<string, unknown> = fast) => (await reload(services, extra)).answered;
  const drains = async () => (await api<DrainsResponse>('GET', '/v1/drains')).body.draining;
  const webServers = async (port = 80) =>
    (await api<ServicesResponse>('GET', '/v1/services')).body.services.find((s) => s.port === port && s.protocol === 'tcp')?.realServers ??
    [];
  const holdEcho = (seconds: number) => {
    const p = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, TOOLS, 'hold-echo', LAB_VIP, '7', String(seconds), '100'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    p.stdout.on('data', (d: Buffer) => (text += d.toString()));
    return {
      done: new Promise<{ code: number | null; r: { server: string; sent: number; echoed: number; error: string | null } }>((res) =>
        p.on('exit', (code) => res({ code, r: JSON.parse(text || '{}') })),
      ),
    };
  };
  /** The real server of the held echo connection, once uvs tracks it as ESTABLISHED. */
  const echoServer = async (): Promise<string> => {
    let server = '';
    await waitUntil('the echo connection to be tracked as ESTABLISHED', async () => {
      const conns = (await api<ConnectionsResponse>('GET', '/v1/connections')).body.connections;
      const c = conns.find((x) => x.virtual.endsWith(':7') && x.state === 'ESTABLISHED');
      server = c ? c.realServer.split(':')[0]! : '';
      return c !== undefined;
    });
    return server;
  };
  const waitFor = async (what: string, fn: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await fn())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(100);
    }
    return Date.now();
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
    configFile = lab.writeConfig(lab.config(svc(rs), fast));
    await lab.startUvsd(configFile);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('a rolling removal of each real server under load resets and stalls no connection, and no new connection reaches a draining server', async () => {
    const loadProc = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, TOOLS, 'load', LAB_VIP, '80', '13', '6', '4', '1500'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    loadProc.stdout.on('data', (d: Buffer) => (text += d.toString()));
    // A server drains from the moment its removal's reload answered (the snapshot is published
    // before the answer) until the next reload, which adds it back, was asked for: that reload
    // applies before it answers, so connections made while it runs may go to the server legitimately.
    const windows: { server: string; from: number; to: number; toAnswered: number }[] = [];
    const sawDraining = new Set<string>();
    const t0 = Date.now();
    await sleep(2000);
    let current = [...rs];
    for (let i = 0; i < rs.length; i++) {
      const out = rs[i]!;
      const back = i > 0 ? rs[i - 1]! : null;
      current = rs.filter((a) => a !== out);
      const { sent, answered: from } = await reload(svc(current));
      if (back) Object.assign(windows[windows.length - 1]!, { to: sent, toAnswered: from });
      windows.push({ server: out, from, to: Infinity, toAnswered: Infinity });
      await sleep(600);
      for (const d of await drains()) sawDraining.add(d.realServer.split(':')[0]!);
      await sleep(2400);
    }
    const last = await reload(svc(rs));
    Object.assign(windows[windows.length - 1]!, { to: last.sent, toAnswered: last.answered });
    const code = await new Promise<number | null>((r) => loadProc.on('exit', r));
    assert.equal(code, 0);
    const result = JSON.parse(text) as {
      requests: number;
      errors: number;
      records: { start: number; end: number; server: string | null; error: string | null; hold: boolean }[];
    };
    const errors = result.records.filter((r) => r.error);
    assert.equal(errors.length, 0, `connections reset or stalled: ${JSON.stringify(errors.slice(0, 5))}`);
    assert.ok(result.requests > 120, `enough load (${result.requests} requests)`);
    // Publishing is synchronous with the reload answer; 20 ms covers the request's own connect.
    // Connections to the server made while the reload that added it back was running are legitimate;
    // they are counted and shown (the window 32 saw fail: 3 and 5 such connections, on a busy machine).
    const during = windows.flatMap((w) =>
      result.records.filter((r) => r.server === `rs${rs.indexOf(w.server) + 1}` && r.start >= w.to && r.start < w.toAnswered),
    );
    console.log(
      `# graceful: ${during.length} new connections reached a server while the reload adding it back ran (legitimate); those reloads took ${windows.map((w) => w.toAnswered - w.to).join(', ')} ms`,
    );
    for (const w of windows) {
      const bad = result.records.filter((r) => r.server === `rs${rs.indexOf(w.server) + 1}` && r.start > w.from + 20 && r.start < w.to);
      assert.equal(
        bad.length,
        0,
        `new connections reached draining ${w.server}: ${JSON.stringify(bad.slice(0, 3))} (window ${w.from - t0}..${w.to - t0} ms)`,
      );
    }
    assert.ok(sawDraining.size >= 2, `long-lived connections kept servers draining: ${[...sawDraining].join(', ')}`);
    const holds = result.records.filter((r) => r.hold).length;
    assert.ok(holds > 10, `long-lived requests were part of the load (${holds})`);
    const back = await webServers();
    assert.deepEqual(back.map((r) => r.address).sort(), [...rs].sort(), 'every server is back (resurrected or re-added)');
    assert.ok(back.every((r) => r.weight === 1 && !r.draining));
  });

  test('a long-lived connection keeps its server on the drain list until it closes, then it is deleted', async () => {
    await apply(svc(rs));
    const hold = holdEcho(6);
    let holding = true;
    void hold.done.then(() => (holding = false));
    const server = await echoServer();
    await apply(svc(rs.filter((a) => a !== server)));
    const d = (await drains()).find((x) => x.service === `tcp ${LAB_VIP}:7`);
    assert.ok(d, 'the echo server is draining');
    assert.equal(d.realServer, `${server}:9007`);
    assert.equal(d.activeConns, 1);
    await sleep(1500);
    const still = (await drains()).some((x) => x.realServer === `${server}:9007`);
    assert.ok(holding, 'the held connection was still open when the drain list was read (else this proves nothing)');
    assert.ok(still, 'still draining while the connection is open');
    const { code, r } = await hold.done;
    assert.equal(code, 0, JSON.stringify(r));
    assert.equal(r.echoed, r.sent);
    // After close: TIME_WAIT (2 s) → swept within 1 s → next drain check within 1 s. No time
    // bound is asserted (speed belongs in perf/); the deadline only stops a hung run.
    await waitFor('the drained server to be deleted', async () => !(await webServers(7)).some((x) => x.address === server), 30000);
    await apply(svc(rs));
  });

  test('removing a UDP real server deletes it at once and its flow moves to another server on the next datagram', async () => {
    await apply(svc(rs));
    // 40 datagrams 200 ms apart: the removal below lands well inside the session even when
    // this machine is slow, and the check below makes sure it did.
    const p = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, TOOLS, 'udp-session', LAB_VIP, '53', '40', '200'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    let running = true;
    p.stdout.on('data', (d: Buffer) => (text += d.toString()));
    p.on('exit', () => (running = false));
    let first = '';
    await waitUntil('the UDP flow to be tracked', async () => {
      const conns = (await api<ConnectionsResponse>('GET', '/v1/connections')).body.connections;
      first = conns.find((c) => c.virtual.endsWith(':53'))?.realServer.split(':')[0] ?? '';
      return first !== '';
    });
    await apply(
      svc(
        rs,
        {},
        rs.filter((a) => a !== first),
      ),
    );
    assert.ok(running, 'the removal happened while the session was still sending');
    const udpList = (await api<ServicesResponse>('GET', '/v1/services')).body.services.find((s) => s.port === 53)!.realServers;
    assert.ok(!udpList.some((r) => r.address === first), 'deleted from the list at once');
    assert.ok(!(await drains()).some((d) => d.service.startsWith('udp')), 'UDP never drains');
    await new Promise((r) => p.on('exit', r));
    const answers = JSON.parse(text).answers as (string | null)[];
    const firstName = `rs${rs.indexOf(first) + 1}`;
    assert.equal(answers[0], firstName);
    assert.ok(
      answers.slice(-5).every((a) => a !== null && a !== firstName),
      `the flow moved: ${answers.join(' ')}`,
    );
    assert.ok(
      answers.every((a) => a !== null),
      `no datagram lost: ${answers.join(' ')}`,
    );
    await apply(svc(rs));
  });

  test('a restart in the middle of a drain resumes it: the server stays at weight 0 until deleted, the others keep their weights', async () => {
    await apply(svc(rs));
    const hold = holdEcho(3);
    const server = await echoServer();
    await apply(svc(rs.filter((a) => a !== server)));
    const before = (await drains()).find((d) => d.realServer === `${server}:9007`)!;
    await lab.stopUvsd();
    await hold.done; // cut by the restart: no table survives a restart without Redis
    const state = JSON.parse(readFileSync(join(lab.dir, 'state.json'), 'utf8'));
    assert.ok(
      state.draining.some((d: { realServer: string }) => d.realServer === `${server}:9007`),
      'the drain list was saved',
    );
    writeFileSync(
      configFile,
      stringify(lab.config(svc(rs.filter((a) => a !== server)), { ...fast, gracefulTermination: { checkInterval: 3 } })),
    );
    await lab.startUvsd(configFile);
    const resumed = (await drains()).find((d) => d.realServer === `${server}:9007`);
    assert.ok(resumed, 'the drain resumed after the restart');
    assert.equal(resumed.since, before.since);
    const echo = await webServers(7);
    assert.equal(echo.find((r) => r.address === server)!.weight, 0);
    assert.ok(
      echo.filter((r) => r.address !== server).every((r) => r.weight === 1),
      'configured servers have their configured weight',
    );
    await waitFor('the resumed drain to finish', async () => !(await webServers(7)).some((x) => x.address === server), 10000);
    await apply(svc(rs));
  });

  test('the maximum drain time deletes a server with connections left, and says how many', async () => {
    await apply(svc(rs, { maxDrainTime: 2 }));
    const hold = holdEcho(8);
    const server = await echoServer();
    const removed = await apply(
      svc(
        rs.filter((a) => a !== server),
        { maxDrainTime: 2 },
      ),
    );
    const d = (await drains()).find((x) => x.realServer === `${server}:9007`)!;
    assert.ok(d.deadline, 'the drain has a deadline');
    const gone = await waitFor(
      'the deadline to delete the server',
      async () => !(await webServers(7)).some((x) => x.address === server),
      8000,
    );
    assert.ok(gone - removed >= 2000, `not before the deadline (${gone - removed} ms)`);
    const { r } = await hold.done;
    assert.notEqual(r.error, null, 'the connection left on it was cut');
    const log = readFileSync(join(lab.dir, 'uvsd.log'), 'utf8');
    assert.match(
      log,
      /"activeConnection":1,"inactiveConnection":0,"msg":"maximum drain time reached: deleted real server with connections left"/,
    );
    assert.match(log, /"msg":"skip deleting real server till all connections have expired"/);
    await apply(svc(rs));
  });
});
