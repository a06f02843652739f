/**
 * Health checks (control/health.ts) against real servers on loopback, no mocks: a TCP connect or
 * an HTTP GET with an expected status, a timeout, `fall` consecutive failures to quiesce and
 * `rise` consecutive successes to restore, keepalived-style; an SCTP service is checked by TCP.
 * The checker is wired to the service model as uvsd wires it, so the verdict is read where it
 * matters: the real server's weight (0 while failing, its configured weight again once healthy).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer as createHttp, type Server as HttpServer } from 'node:http';
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import * as L from '../../conntrack/layout';
import { createRealServerRegion } from '../../conntrack/table';
import { validateConfig } from '../../control/config';
import { HealthChecker } from '../../control/health';
import { ServiceModel } from '../../control/services';

const VIP = '10.96.0.10';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what: string, ok: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function listenTcp(port = 0): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer((c) => c.destroy());
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}
function listenHttp(handler: Parameters<typeof createHttp>[1]): Promise<HttpServer> {
  return new Promise((resolve) => {
    const s = createHttp(handler);
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
}
const portOf = (s: Server | HttpServer) => (s.address() as AddressInfo).port;
const close = (s: Server | HttpServer) =>
  new Promise<void>((r) => {
    (s as HttpServer).closeAllConnections?.();
    s.close(() => r());
  });

/**
 * A checker for one service whose real servers are on loopback, wired to the service model as
 * uvsd's daemon wires it. `events` lists every verdict change with the consecutive counts at that
 * moment; `weight(port)` is what the dataplane sees.
 */
function checker(service: Record<string, unknown>) {
  const cfg = validateConfig({ dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: 16, maxServices: 8 }, services: [service] });
  const rsSab = createRealServerRegion(16);
  const model = new ServiceModel(rsSab, new SharedArrayBuffer(8 * L.SCHED_WORDS * 4), 16, 8);
  model.apply(cfg);
  const events: { realServer: string; healthy: boolean; ok: number; fail: number; checks: number }[] = [];
  const h: HealthChecker = new HealthChecker(pino({ level: 'silent' }), (svc, realServer, healthy) => {
    const st = h.states().find((s) => s.realServer === realServer)!;
    events.push({ realServer, healthy, ok: st.consecutiveOk, fail: st.consecutiveFail, checks: st.checks });
    model.setHealthy(svc, realServer, healthy);
  });
  h.sync(cfg.services);
  const state = (port: number) => h.states().find((s) => s.realServer === `127.0.0.1:${port}`)!;
  const weight = (port: number) => model.list()[0]!.realServers.find((r) => r.port === port)!.weight;
  return { h, events, state, weight, key: model.list()[0]!.key };
}

const svc = (realPorts: number[], healthCheck: Record<string, unknown>, protocol = 'tcp') => ({
  protocol,
  address: VIP,
  port: 80,
  scheduler: 'rr',
  healthCheck: { interval: 0.2, timeout: 0.2, ...healthCheck },
  realServers: realPorts.map((port) => ({ address: '127.0.0.1', port, weight: 5 })),
});

test('TCP check: quiesced on exactly the fall-th consecutive failure, restored on exactly the rise-th success', async () => {
  let srv = await listenTcp();
  const port = portOf(srv);
  const c = checker(svc([port], { type: 'tcp', fall: 2, rise: 3 }));
  try {
    await waitFor('a few good checks', () => c.state(port).checks >= 3);
    assert.equal(c.weight(port), 5);
    assert.equal(c.events.length, 0, 'servers start healthy and a passing check changes nothing');
    await close(srv); // connection refused from now on
    await waitFor('the verdict', () => c.events.length === 1);
    assert.deepEqual([c.events[0]!.healthy, c.events[0]!.fail], [false, 2], 'down after 2 failures, not before');
    assert.equal(c.weight(port), 0, 'quiesced: weight 0');
    assert.ok(c.state(port).lastError, 'the reason is kept');
    srv = await listenTcp(port);
    await waitFor('the recovery', () => c.events.length === 2);
    assert.deepEqual([c.events[1]!.healthy, c.events[1]!.ok], [true, 3], 'up after 3 successes, not before');
    assert.equal(c.weight(port), 5, 'the configured weight is back');
    assert.equal(c.state(port).lastError, null);
    assert.equal(c.state(port).healthy, true);
    const n = c.state(port).checks;
    await waitFor('two more good checks', () => c.state(port).checks >= n + 2);
    assert.equal(c.events.length, 2, 'restored once: later successes change nothing');
  } finally {
    c.h.stop();
    await close(srv);
  }
});

test('failures must be consecutive: a server failing every other check is never quiesced', async () => {
  let n = 0;
  const http = await listenHttp((_req, res) => {
    res.statusCode = n++ % 2 === 0 ? 500 : 200;
    res.end();
  });
  const port = portOf(http);
  const c = checker(svc([port], { type: 'http', fall: 2, rise: 1 }));
  try {
    await waitFor('eight checks', () => c.state(port).checks >= 8);
    assert.equal(c.events.length, 0);
    assert.equal(c.weight(port), 5);
  } finally {
    c.h.stop();
    await close(http);
  }
});

test('HTTP check: a status other than expectStatus fails; the expected one passes, even if it is not 200', async () => {
  const hits: string[] = [];
  const http = await listenHttp((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.statusCode = 204;
    res.end();
  });
  const port = portOf(http);
  const ok = checker(svc([port], { type: 'http', path: '/healthz', expectStatus: 204, fall: 1 }));
  const bad = checker(svc([port], { type: 'http', path: '/healthz', fall: 1 })); // expects 200
  try {
    await waitFor('both checked a few times', () => ok.state(port).checks >= 3 && bad.state(port).checks >= 1);
    assert.equal(ok.events.length, 0, '204 expected, 204 answered: healthy');
    assert.equal(ok.weight(port), 5);
    await waitFor('the 200-expecting check to fail', () => bad.events.length === 1);
    assert.equal(bad.events[0]!.healthy, false);
    assert.equal(bad.weight(port), 0);
    assert.match(bad.state(port).lastError ?? '', /204/, 'the answered status is in the reason');
    assert.ok(
      hits.every((h) => h === 'GET /healthz'),
      `requests: ${[...new Set(hits)].join(', ')}`,
    );
  } finally {
    ok.h.stop();
    bad.h.stop();
    await close(http);
  }
});

test('timeout: an HTTP answer slower than the timeout fails, the same answer within it passes', async () => {
  const http = await listenHttp((_req, res) => {
    setTimeout(() => res.end('late'), 250);
  });
  const port = portOf(http);
  const slow = checker(svc([port], { type: 'http', interval: 0.5, timeout: 0.1, fall: 1 }));
  const patient = checker(svc([port], { type: 'http', interval: 1, timeout: 0.9, fall: 1 }));
  try {
    await waitFor('the impatient check to fail', () => slow.events.length === 1);
    assert.equal(slow.weight(port), 0);
    assert.match(slow.state(port).lastError ?? '', /time/i);
    await waitFor('the patient check to pass twice', () => patient.state(port).checks >= 2, 15_000);
    assert.equal(patient.events.length, 0);
    assert.equal(patient.weight(port), 5);
  } finally {
    slow.h.stop();
    patient.h.stop();
    await close(http);
  }
});

/**
 * A TCP listener that accepts nothing: a python3 socket with backlog 0 whose accept queue is
 * filled, so the kernel drops further SYNs (tcp_conn_request: accept queue full) and a connect
 * hangs until the checker's timeout.
 */
async function blackHole(): Promise<{ port: number; close: () => void }> {
  const py = spawn(
    'python3',
    [
      '-c',
      'import socket,sys,time\ns=socket.socket()\ns.bind(("127.0.0.1",0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(60)',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<number>((resolve, reject) => {
    py.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
    py.once('error', reject);
  });
  const fillers: Socket[] = [];
  // Fill the queue: connects that complete (queued) until one hangs.
  for (let i = 0; i < 4; i++) {
    const s = connect({ host: '127.0.0.1', port });
    s.on('error', () => undefined);
    fillers.push(s);
  }
  await sleep(300);
  return {
    port,
    close: () => {
      for (const s of fillers) s.destroy();
      py.kill('SIGKILL');
    },
  };
}

test('timeout: a TCP connect that gets no answer fails after the timeout, not at the next interval', async () => {
  const hole = await blackHole();
  const c = checker(svc([hole.port], { type: 'tcp', interval: 2, timeout: 0.2, fall: 1 }));
  const t0 = Date.now();
  try {
    await waitFor('the verdict', () => c.events.length === 1, 5000);
    // The first check starts within the 2 s interval (spread) and ends at its 0.2 s timeout, with
    // a timeout's error: the verdict of the first check, not of a later one.
    assert.ok(Date.now() - t0 < 3000, `failed after ${Date.now() - t0} ms`);
    assert.equal(c.state(hole.port).checks, 1, 'the first check’s verdict');
    assert.equal(c.weight(hole.port), 0);
    assert.match(c.state(hole.port).lastError ?? '', /time/i);
  } finally {
    c.h.stop();
    hole.close();
  }
});

test('an SCTP service is health-checked over TCP (healthCheck.port), and quiesced and restored like any other', async () => {
  let tcp = await listenTcp();
  const hport = portOf(tcp);
  // The SCTP real server's own port (5000) has nothing on TCP: the check must use healthCheck.port.
  const c = checker({ ...svc([5000], { type: 'tcp', port: hport, fall: 2, rise: 2 }, 'sctp') });
  try {
    assert.match(c.key, /^sctp /);
    await waitFor('checks', () => c.state(5000).checks >= 3);
    assert.equal(c.events.length, 0, 'healthy: the TCP port answers');
    await close(tcp);
    await waitFor('quiesced', () => c.events.length === 1);
    assert.equal(c.weight(5000), 0);
    tcp = await listenTcp(hport);
    await waitFor('restored', () => c.events.length === 2);
    assert.equal(c.weight(5000), 5);
  } finally {
    c.h.stop();
    await close(tcp);
  }
});
