/**
 * The TCP listeners' shared parts (control/listen.ts): the bearer-token check, and the plain HTTP
 * listener of metrics and healthz, which answers a request naming another host with 403 before
 * its handler runs and leaves every other request to it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { listenHttp, tokenOk } from '../../control/listen';

const withAuth = (authorization?: string) => ({ headers: authorization === undefined ? {} : { authorization } }) as IncomingMessage;

test('the bearer token must be given whole, after "Bearer "; no token configured lets every request in', () => {
  const token = 'uvs-token-0123456789';
  assert.equal(tokenOk(withAuth(`Bearer ${token}`), token), true);
  for (const h of [undefined, '', token, `Bearer ${token}x`, `Bearer ${token.slice(0, -1)}`, `Basic ${token}`]) {
    assert.equal(tokenOk(withAuth(h), token), false, String(h));
  }
  assert.equal(tokenOk(withAuth(), undefined), true);
  assert.equal(tokenOk(withAuth('Bearer anything'), ''), true, "'' is no token");
});

/** GET / on the listener with the Host header given: status and body. */
function get(port: number, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', agent: false, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('the HTTP listener refuses a Host naming something else (403 UVS_ERR_API_HOST) before its handler, and hands over the rest', async () => {
  let handled = 0;
  const ep = await listenHttp('127.0.0.1:0', (_req, res) => {
    handled++;
    res.writeHead(200).end('handled');
  });
  try {
    const port = (ep.server.address() as AddressInfo).port;
    const evil = await get(port, `rebind.attacker.test:${port}`);
    assert.equal(evil.status, 403);
    assert.equal((JSON.parse(evil.body) as { code: string }).code, 'UVS_ERR_API_HOST');
    assert.equal(handled, 0, 'the handler never saw it');
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`])
      assert.deepEqual(await get(port, host), { status: 200, body: 'handled' }, host);
    assert.equal(handled, 2);
  } finally {
    await ep.close();
  }
  assert.equal(ep.server.listening, false, 'close() stops listening');
});
