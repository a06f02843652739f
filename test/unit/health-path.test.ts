/**
 * Health-check paths (issue 12, defect 8): a path node's HTTP client refuses (a space, a
 * character beyond Latin-1) used to throw inside the check, which then was never rescheduled: the
 * server stayed "healthy" with 0 checks. The configuration now encodes such paths (or refuses
 * control characters), and any error during a check counts as a failure and the next check runs.
 * Real HTTP server on loopback; no mocks.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { validateConfig, type HealthCheckConfig, type ServiceConfig } from '../../control/config';
import { UvsError } from '../../control/errors';
import { HealthChecker } from '../../control/health';

const base = { dataplane: { vipCidrs: ['10.96.0.0/24'] } };
const withPath = (path: string) =>
  validateConfig({
    ...base,
    services: [{ address: '10.96.0.10', port: 80, realServers: [{ address: '127.0.0.1' }], healthCheck: { type: 'http', path } }],
  }).services[0]!.healthCheck!.path;

test('a health-check path with a space or non-ASCII characters is percent-encoded as UTF-8; %XX is kept', () => {
  assert.equal(withPath('/health check'), '/health%20check');
  assert.equal(withPath('/état/ü?x=ü'), '/%C3%A9tat/%C3%BC?x=%C3%BC');
  assert.equal(withPath('/健康'), '/%E5%81%A5%E5%BA%B7');
  assert.equal(withPath('/already%20encoded?a=b&c=d'), '/already%20encoded?a=b&c=d');
});

test('a health-check path with control characters or broken Unicode is refused, naming the field', () => {
  for (const bad of ['/a\r\nHost: evil', '/tab\there', '/\ud800']) {
    assert.throws(
      () => withPath(bad),
      (e: unknown) => e instanceof UvsError && e.path === 'services[0].healthCheck.path' && /control characters|Unicode/.test(e.message),
      JSON.stringify(bad),
    );
  }
});

async function until(what: string, fn: () => boolean, ms = 10000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function withServer(fn: (port: number, seen: string[]) => Promise<void>): Promise<void> {
  const seen: string[] = [];
  const server: Server = createServer((req, res) => {
    seen.push(req.url ?? '');
    res.writeHead(200).end('ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    await fn((server.address() as AddressInfo).port, seen);
  } finally {
    await new Promise((r) => server.close(r));
  }
}

function service(port: number, hc: HealthCheckConfig): ServiceConfig {
  return {
    name: 'web',
    protocol: 'tcp',
    address: '10.96.0.10',
    port: 80,
    scheduler: 'rr',
    schedFlags: [],
    forwarding: 'masq',
    persistence: 0,
    netmask: '255.255.255.255',
    realServers: [{ address: '127.0.0.1', port, weight: 1, forwarding: 'masq', upperThreshold: 0, lowerThreshold: 0 }],
    healthCheck: hc,
  };
}

test('a check that throws (a path the HTTP client refuses) counts as a failure, quiesces the server after fall, and keeps being rescheduled', async () => {
  await withServer(async (port) => {
    const changes: boolean[] = [];
    const h = new HealthChecker(pino({ level: 'silent' }), (_s, _r, healthy) => changes.push(healthy));
    // Not through validateConfig: what a check does with a path it cannot send.
    h.sync([service(port, { type: 'http', path: '/a b', expectStatus: 200, interval: 0.05, timeout: 0.05, rise: 1, fall: 2 })]);
    try {
      await until('three failed checks', () => (h.states()[0]?.checks ?? 0) >= 3);
      const st = h.states()[0]!;
      assert.equal(st.healthy, false, 'failing checks quiesce the server');
      assert.ok(st.consecutiveFail >= 3);
      assert.equal(st.lastError, 'ERR_UNESCAPED_CHARACTERS', 'the error code, as for a failed connect');
      assert.deepEqual(changes, [false]);
    } finally {
      h.stop();
    }
  });
});

test('an encoded path reaches the server as encoded and the server stays healthy', async () => {
  await withServer(async (port, seen) => {
    const h = new HealthChecker(pino({ level: 'silent' }), () => {});
    h.sync([
      service(port, {
        type: 'http',
        path: withPath('/health check/ü'),
        expectStatus: 200,
        interval: 0.05,
        timeout: 0.05,
        rise: 1,
        fall: 1,
      }),
    ]);
    try {
      await until('two checks', () => (h.states()[0]?.checks ?? 0) >= 2);
      assert.equal(h.states()[0]!.healthy, true);
      assert.equal(h.states()[0]!.lastError, null);
      assert.equal(seen[0], '/health%20check/%C3%BC');
    } finally {
      h.stop();
    }
  });
});
