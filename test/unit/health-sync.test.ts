/**
 * The health checker's life cycle (control/health.ts) against real listeners on loopback, no
 * mocks: what `sync` keeps, restarts and stops when the configuration is applied again (uvsd calls
 * it on every reload and API edit), `stop`, the cadence (one check per interval, counted from the
 * end of the previous one, never two at once even when a check outlasts the interval), the spread of the first checks, a check still in flight when its
 * server is removed, the reason kept for a refused connection, the request an HTTP check sends,
 * the log line of each verdict change (README "Logs": pino JSON, component `health`), and the
 * ICMP echo check (README "Health checks": `type: ping`, keepalived's PING_CHECK).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer as createHttp, type IncomingHttpHeaders, type Server as HttpServer } from 'node:http';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { validateConfig, type ServiceConfig } from '../../control/config';
import { HealthChecker } from '../../control/health';
import { needTool, waitFor } from '../helpers/wait';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A TCP listener on loopback that counts the connections it accepts (each check is one). */
async function counting(port = 0): Promise<{ server: Server; port: number; accepted: () => number }> {
  let n = 0;
  const server = createServer((c) => {
    n++;
    c.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return { server, port: (server.address() as AddressInfo).port, accepted: () => n };
}
const close = (s: Server | HttpServer) =>
  new Promise<void>((r) => {
    (s as HttpServer).closeAllConnections?.();
    s.close(() => r());
  });
/** A loopback port nothing listens on (connections to it are refused). */
async function refusedPort(): Promise<number> {
  const c = await counting();
  await close(c.server);
  return c.port;
}

/** Services as uvsd has them after validation. */
function services(...svcs: Record<string, unknown>[]): ServiceConfig[] {
  return validateConfig({
    dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: 32, maxServices: 8 },
    services: svcs,
  }).services;
}
const svc = (port: number, realPorts: number[], healthCheck?: Record<string, unknown>, address = '10.96.0.10') => ({
  protocol: 'tcp',
  address,
  port,
  scheduler: 'rr',
  ...(healthCheck ? { healthCheck } : {}),
  realServers: realPorts.map((p) => ({ address: '127.0.0.1', port: p })),
});

interface Change {
  service: string;
  realServer: string;
  healthy: boolean;
}
function checker(log = pino({ level: 'silent' })) {
  const changes: Change[] = [];
  const h = new HealthChecker(log, (service, realServer, healthy) => changes.push({ service, realServer, healthy }));
  const state = (port: number) => h.states().find((s) => s.realServer === `127.0.0.1:${port}`);
  return { h, changes, state };
}

test('sync checks exactly the real servers of services with a healthCheck', async () => {
  const a = await counting();
  const b = await counting();
  const c = checker();
  try {
    c.h.sync(services(svc(80, [a.port], { type: 'tcp', interval: 0.2, timeout: 0.2 }), svc(81, [b.port])));
    assert.deepEqual(
      c.h.states().map((s) => [s.service, s.realServer, s.healthy, s.checks]),
      [['tcp 10.96.0.10:80', `127.0.0.1:${a.port}`, true, 0]],
      'one target, healthy before its first check',
    );
    await waitFor('three checks', () => c.state(a.port)!.checks >= 3);
    assert.equal(b.accepted(), 0, 'the service without healthCheck is never checked');
    assert.ok(a.accepted() >= 3);
  } finally {
    c.h.stop();
    await close(a.server);
    await close(b.server);
  }
});

test('sync with the same checks keeps each target and its counts; a quiesced server stays quiesced', async () => {
  const port = await refusedPort();
  const cfg = services(svc(80, [port], { type: 'tcp', interval: 0.2, timeout: 0.2, fall: 1, rise: 1 }));
  const c = checker();
  try {
    c.h.sync(cfg);
    await waitFor('the quiesce', () => c.changes.length === 1);
    const before = c.state(port)!;
    assert.equal(before.healthy, false);
    c.h.sync(services(svc(80, [port], { type: 'tcp', interval: 0.2, timeout: 0.2, fall: 1, rise: 1 }))); // a reload, same file
    const after = c.state(port)!;
    assert.equal(after.healthy, false, 'not reset to healthy by a reload that changes nothing');
    assert.ok(after.checks >= before.checks && after.consecutiveFail >= before.consecutiveFail, JSON.stringify({ before, after }));
    await waitFor('more checks', () => c.state(port)!.checks >= before.checks + 2);
    assert.equal(c.changes.length, 1, 'no second verdict change');
  } finally {
    c.h.stop();
  }
});

test('sync with a changed check starts that target over; a new healthCheck.port is checked from then on', async () => {
  const a = await counting();
  const b = await counting();
  const hc = { type: 'tcp', interval: 0.2, timeout: 0.2, fall: 2, rise: 2 };
  const c = checker();
  try {
    c.h.sync(services(svc(80, [a.port], hc), svc(81, [a.port], hc)));
    await waitFor('checks on both', () => c.h.states().every((s) => s.checks >= 2));
    // Service 80: another fall count. Service 81: the same check on another port.
    c.h.sync(services(svc(80, [a.port], { ...hc, fall: 3 }), svc(81, [a.port], { ...hc, port: b.port })));
    assert.deepEqual(
      c.h.states().map((s) => [s.service, s.checks, s.consecutiveOk]),
      [
        ['tcp 10.96.0.10:80', 0, 0],
        ['tcp 10.96.0.10:81', 0, 0],
      ],
      'both start over',
    );
    const onA = a.accepted();
    await waitFor('checks of the new port', () => b.accepted() >= 2);
    await waitFor('checks of service 80 again', () => c.h.states()[0]!.checks >= 2);
    // a keeps being checked by service 80 only: at most one connection per check of it.
    assert.ok(a.accepted() - onA <= c.h.states()[0]!.checks + 2, `${a.accepted() - onA} connections to the old port`);
    // The same check on the same port again: kept.
    const checks = c.h.states().map((s) => s.checks);
    c.h.sync(services(svc(80, [a.port], { ...hc, fall: 3 }), svc(81, [a.port], { ...hc, port: b.port })));
    assert.deepEqual(
      c.h.states().map((s, i) => s.checks >= checks[i]!),
      [true, true],
    );
  } finally {
    c.h.stop();
    await close(a.server);
    await close(b.server);
  }
});

test('sync without a service (or its check) stops checking it', async () => {
  const a = await counting();
  const c = checker();
  try {
    const hc = { type: 'tcp', interval: 0.1, timeout: 0.1 };
    c.h.sync(services(svc(80, [a.port], hc), svc(81, [a.port], hc)));
    await waitFor('checks', () => c.h.states().every((s) => s.checks >= 2));
    c.h.sync(services(svc(80, [a.port]), svc(81, [a.port], hc))); // 80 loses its healthCheck
    assert.deepEqual(
      c.h.states().map((s) => s.service),
      ['tcp 10.96.0.10:81'],
    );
    c.h.sync([]);
    assert.deepEqual(c.h.states(), []);
    await sleep(150); // a check that had started ends
    const n = a.accepted();
    await sleep(600); // six intervals
    assert.equal(a.accepted(), n, 'no check after the services are gone');
  } finally {
    c.h.stop();
    await close(a.server);
  }
});

test('stop ends every check', async () => {
  const a = await counting();
  const c = checker();
  try {
    c.h.sync(services(svc(80, [a.port], { type: 'tcp', interval: 0.1, timeout: 0.1 })));
    await waitFor('checks', () => c.state(a.port)!.checks >= 2);
    c.h.stop();
    assert.deepEqual(c.h.states(), []);
    await sleep(150);
    const n = a.accepted();
    await sleep(600);
    assert.equal(a.accepted(), n, 'no check after stop');
  } finally {
    c.h.stop();
    await close(a.server);
  }
});

test('a check still in flight when its server is removed changes nothing and is not repeated', async () => {
  const seen: number[] = [];
  const http = createHttp((_req, res) => {
    seen.push(Date.now());
    setTimeout(() => {
      res.statusCode = 500;
      res.end();
    }, 400);
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const port = (http.address() as AddressInfo).port;
  const c = checker();
  try {
    c.h.sync(services(svc(80, [port], { type: 'http', interval: 0.5, timeout: 0.5, fall: 1 })));
    await waitFor('the first request', () => seen.length === 1);
    c.h.sync([]); // removed while its check waits for the answer (a failing one: fall 1 would quiesce)
    await sleep(1500);
    assert.deepEqual(c.changes, [], 'no verdict for a server no longer checked');
    assert.equal(seen.length, 1, 'and no next check');
  } finally {
    c.h.stop();
    await close(http);
  }
});

test('one check per interval, the next one an interval after the previous one ended', async () => {
  const a = await counting();
  const c = checker();
  try {
    c.h.sync(services(svc(80, [a.port], { type: 'tcp', interval: 0.25, timeout: 0.25 })));
    await waitFor('the first check', () => c.state(a.port)!.checks === 1);
    const t0 = Date.now();
    const n0 = a.accepted();
    await sleep(1500);
    const checks = a.accepted() - n0;
    const most = Math.floor((Date.now() - t0) / 250) + 1;
    assert.ok(checks <= most, `${checks} checks in ${Date.now() - t0} ms with a 250 ms interval`);
    assert.ok(checks >= 2, `${checks} checks in 1.5 s with a 250 ms interval`);
  } finally {
    c.h.stop();
    await close(a.server);
  }
});

test('a check slower than the interval is never overlapped: the next one starts an interval after it ended', async () => {
  // The server answers each check a byte at a time (the header takes 25 × 30 ms): the request
  // timeout is an idle timeout, so the check succeeds after ~750 ms, 2.5 intervals. A checker at
  // a fixed rate would have the next check connect while this one is still open, or start it as
  // soon as this one ends. Times are the server's: a check ends after the server's last write,
  // and the next can only connect an interval after the checker saw that write, so load can only
  // widen the gaps measured here.
  const INTERVAL_MS = 300;
  const checks: { start: number; end: number }[] = [];
  let open = 0;
  let mostOpen = 0;
  const server = createServer((s) => {
    const c = { start: performance.now(), end: -1 };
    checks.push(c);
    mostOpen = Math.max(mostOpen, ++open);
    s.once('close', () => open--);
    s.on('error', () => {});
    s.on('data', () => {}); // the request: not needed
    s.write('HTTP/1.1 200 OK\r\nX-Slow: ');
    let n = 0;
    const tick = setInterval(() => {
      if (s.destroyed) return clearInterval(tick);
      if (++n < 25) {
        s.write('.');
        return;
      }
      clearInterval(tick);
      c.end = performance.now();
      s.end('\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    }, 30); // a stall of the process under 270 ms does not reach the 300 ms idle timeout
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const c = checker();
  try {
    c.h.sync(services(svc(80, [port], { type: 'http', interval: INTERVAL_MS / 1000, timeout: INTERVAL_MS / 1000, fall: 1 })));
    await waitFor('three finished checks and a fourth started', () => checks.length >= 4 && c.state(port)!.checks >= 3, 20_000);
    c.h.stop();
    const done = checks.filter((k) => k.end >= 0);
    assert.ok(done.length >= 3, `${done.length} checks answered in full`);
    for (const k of done) assert.ok(k.end - k.start > 2 * INTERVAL_MS, `a check took ${Math.round(k.end - k.start)} ms`);
    assert.deepEqual(c.changes, [], 'every slow check passed (fall 1: one failure would have quiesced it)');
    assert.equal(mostOpen, 1, 'never two checks of one server at once');
    for (let i = 1; i < checks.length; i++) {
      const prev = checks[i - 1]!;
      assert.ok(prev.end >= 0, `check ${i + 1} started before check ${i} was answered`);
      // setTimeout may fire up to 1 ms early (ms rounding): 5 ms of slack.
      const gap = checks[i]!.start - prev.end;
      assert.ok(gap >= INTERVAL_MS - 5, `check ${i + 1} started ${Math.round(gap)} ms after check ${i} ended (interval ${INTERVAL_MS} ms)`);
    }
  } finally {
    c.h.stop();
    await close(server);
  }
});

test('the first checks are spread over the interval, not sent at once (10,000 at once held the control thread)', async () => {
  // 20 servers, refused (a refused connect ends at once, so each verdict time is its start time).
  // Distinct ports: the kernel may hand a just-closed port out again.
  const ports: number[] = [];
  for (let i = 0; ports.length < 20 && i < 1000; i++) {
    const p = await refusedPort();
    if (!ports.includes(p)) ports.push(p);
  }
  assert.equal(ports.length, 20, '20 distinct refused ports');
  const c = checker();
  try {
    const t0 = Date.now();
    c.h.sync(services(svc(80, ports, { type: 'tcp', interval: 2, timeout: 1, fall: 1 })));
    await waitFor('every first check', () => c.h.states().every((s) => s.checks === 1), 10_000);
    const at = c.h.states().map((s) => s.lastCheck! - t0);
    // Uniform over [0, 2000) ms: 20 draws all within 800 ms of each other has probability ~5e-7.
    assert.ok(Math.max(...at) < 4000, `first checks at ${at.join(', ')} ms (within the 2 s interval, slack for load)`);
    assert.ok(Math.max(...at) - Math.min(...at) > 800, `first checks at ${at.join(', ')} ms: spread`);
  } finally {
    c.h.stop();
  }
});

test('a refused connection fails at once with its error code, TCP and HTTP alike', async () => {
  const port = await refusedPort();
  const c = checker();
  try {
    const t0 = Date.now();
    // A 5 s timeout: the first check starts within the 5 s interval (spread), and a refusal ends
    // it at once with ECONNREFUSED, where the timeout would end it 5 s later with another error.
    c.h.sync(
      services(
        svc(80, [port], { type: 'tcp', interval: 5, timeout: 5, fall: 1 }),
        svc(81, [port], { type: 'http', interval: 5, timeout: 5, fall: 1 }),
      ),
    );
    await waitFor('both verdicts', () => c.changes.length === 2, 15_000);
    assert.ok(Date.now() - t0 < 7000, `failed after ${Date.now() - t0} ms`);
    assert.deepEqual(
      c.h.states().map((s) => [s.service, s.healthy, s.lastError]),
      [
        ['tcp 10.96.0.10:80', false, 'ECONNREFUSED'],
        ['tcp 10.96.0.10:81', false, 'ECONNREFUSED'],
      ],
    );
  } finally {
    c.h.stop();
  }
});

test('an HTTP check is a GET of the path with User-Agent uvs-healthcheck and Connection: close', async () => {
  const reqs: { method?: string; url?: string; headers: IncomingHttpHeaders }[] = [];
  const http = createHttp((req, res) => {
    reqs.push({ method: req.method, url: req.url, headers: req.headers });
    res.end();
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const port = (http.address() as AddressInfo).port;
  const c = checker();
  try {
    c.h.sync(services(svc(80, [port], { type: 'http', path: '/ready', interval: 0.2, timeout: 0.2 })));
    await waitFor('two checks', () => c.state(port)!.checks >= 2);
    assert.equal(c.state(port)!.lastError, null);
    const r = reqs[0]!;
    assert.deepEqual(
      [r.method, r.url, r.headers['user-agent'], r.headers.connection, r.headers.host],
      ['GET', '/ready', 'uvs-healthcheck', 'close', `127.0.0.1:${port}`],
    );
  } finally {
    c.h.stop();
    await close(http);
  }
});

test('each verdict change is logged (component health): a warning with the error when quiesced, info when restored', async () => {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  let srv: Server | null = null;
  const port = await refusedPort();
  const c = checker(log);
  try {
    c.h.sync(services(svc(80, [port], { type: 'tcp', interval: 0.1, timeout: 0.1, fall: 2, rise: 3 })));
    await waitFor('the quiesce', () => c.changes.length === 1);
    srv = (await counting(port)).server;
    await waitFor('the restore', () => c.changes.length === 2);
    const pick = (l: Record<string, unknown>) => {
      const { time: _t, pid: _p, hostname: _h, ...rest } = l;
      return rest;
    };
    assert.deepEqual(lines.map(pick), [
      {
        level: 40,
        service: 'tcp 10.96.0.10:80',
        realServer: `127.0.0.1:${port}`,
        error: 'ECONNREFUSED',
        failures: 2,
        msg: 'real server failed its health check: quiesced (weight 0)',
      },
      {
        level: 30,
        service: 'tcp 10.96.0.10:80',
        realServer: `127.0.0.1:${port}`,
        checks: 3,
        msg: 'real server healthy again: configured weight restored',
      },
    ]);
    assert.deepEqual(
      c.changes.map((x) => x.healthy),
      [false, true],
    );
  } finally {
    c.h.stop();
    if (srv) await close(srv);
  }
});

const isRoot = process.getuid?.() === 0;

test('ping check: healthy while the address answers ICMP echo, whatever listens on the port', {
  skip: needTool(isRoot, 'root (raw ICMP socket)'),
}, async () => {
  const port = await refusedPort(); // a TCP check of this port would fail
  const c = checker();
  try {
    c.h.sync(services(svc(80, [port], { type: 'ping', interval: 0.2, timeout: 0.2, fall: 1 })));
    await waitFor('three checks', () => c.state(port)!.checks >= 3);
    assert.deepEqual([c.state(port)!.healthy, c.state(port)!.lastError, c.changes], [true, null, []]);
  } finally {
    c.h.stop();
  }
});
