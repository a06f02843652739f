/**
 * The TCP listeners' guards (issue 12, defect 9): Host checks against DNS rebinding, a token on
 * every admin API TCP listener, and secrets kept out of GET /v1/config.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { validateConfig } from '../../control/config';
import { UvsError } from '../../control/errors';
import { hostGuard, hostOfHeader, redactSecrets, REDACTED, SECRET_FIELDS } from '../../control/http-guard';

const base = { dataplane: { vipCidrs: ['10.96.0.0/24'] } };

test('Host headers are read without port, brackets, case or a final dot', () => {
  assert.equal(hostOfHeader('LocalHost:8443'), 'localhost');
  assert.equal(hostOfHeader('[::1]:10249'), '::1');
  assert.equal(hostOfHeader('example.com.'), 'example.com');
  assert.equal(hostOfHeader('10.0.0.1'), '10.0.0.1');
});

test('a loopback listener accepts its own address and localhost, and refuses any other name (DNS rebinding)', () => {
  const ok = hostGuard('127.0.0.1');
  for (const h of ['127.0.0.1:10249', 'localhost:10249', 'localhost', '127.0.0.1', undefined]) assert.equal(ok(h), true, String(h));
  for (const h of ['evil.example:10249', 'evil.example', '10.0.0.1:10249', 'localhost.evil.example', '']) assert.equal(ok(h), false, h);
  const ok6 = hostGuard('::1');
  assert.equal(ok6('[::1]:8443'), true);
  assert.equal(ok6('[0:0:0:0:0:0:0:1]:8443'), true, 'IPv6 compared in one spelling');
  assert.equal(ok6('attacker.test:8443'), false);
});

test('an address listener accepts only that address; a wildcard one any IP literal, localhost and the hostname', () => {
  const one = hostGuard('10.200.1.1');
  assert.equal(one('10.200.1.1:8443'), true);
  assert.equal(one('10.200.1.2:8443'), false);
  assert.equal(one('localhost:8443'), false);
  assert.equal(one('rebind.attacker.test:8443'), false);
  const any = hostGuard('0.0.0.0');
  for (const h of ['10.1.2.3:10249', '[fd00::1]:10249', 'localhost', `${hostname()}:10249`]) assert.equal(any(h), true, h);
  assert.equal(any('rebind.attacker.test:10249'), false);
  const named = hostGuard('lb1.example.net');
  assert.equal(named('LB1.example.net:8443'), true);
  assert.equal(named('other.example.net:8443'), false);
});

test('every admin API TCP listener needs a token, loopback included; metrics and healthz on loopback do not', () => {
  assert.throws(
    () => validateConfig({ ...base, api: { listen: '127.0.0.1:8443' } }),
    (e: unknown) => e instanceof UvsError && e.path === 'api.token' && /required with a TCP listener/.test(e.message),
  );
  assert.equal(validateConfig({ ...base, api: { listen: '127.0.0.1:8443', token: 'x'.repeat(16) } }).api.listen, '127.0.0.1:8443');
  assert.equal(
    validateConfig({ ...base, metrics: { address: '127.0.0.1:10249' } }).metrics.token,
    undefined,
    "kube-proxy's open loopback metrics port",
  );
  assert.throws(
    () => validateConfig({ ...base, metrics: { address: '0.0.0.0:10249' } }),
    (e: unknown) => e instanceof UvsError && e.path === 'metrics.token',
  );
});

test('redaction replaces every listed secret in the document and the effective configuration, and a password in a redis URL', () => {
  const doc = {
    ...base,
    api: { listen: '127.0.0.1:8443', token: 'api-secret-0123456789' },
    metrics: { address: '0.0.0.0:10249', token: 'metrics-secret-0123456789' },
    healthz: { address: '127.0.0.1:10256', token: 'healthz-secret-0123456789' },
    redis: {
      url: 'redis://user:url-secret-0123@10.0.0.5:6379/0',
      password: 'redis-secret-0123456789',
      recordKey: 'record-secret-0123456789',
    },
  };
  const cfg = validateConfig(doc);
  for (const v of [redactSecrets(doc), redactSecrets(cfg)]) {
    const text = JSON.stringify(v);
    assert.doesNotMatch(text, /secret/, text);
    const o = v as unknown as {
      api: { token: string };
      metrics: { token: string };
      healthz: { token: string };
      redis: { password: string; url: string };
    };
    assert.deepEqual([o.api.token, o.metrics.token, o.healthz.token, o.redis.password], [REDACTED, REDACTED, REDACTED, REDACTED]);
    assert.equal(o.redis.url, `redis://${REDACTED}@10.0.0.5:6379/0`);
  }
  assert.equal(doc.api.token, 'api-secret-0123456789', 'the running configuration is not changed');
  assert.deepEqual(redactSecrets({ ...base }), { ...base }, 'absent secrets are not invented');
  assert.ok(SECRET_FIELDS.includes('redis.password'));
});
