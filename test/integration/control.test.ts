/**
 * The control plane against a running uvsd in the namespace lab: health checks quiescing and
 * restoring a killed real server, the admin API's socket permissions and errors, hot reload under
 * traffic.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { ApiError, AppliedResponse, HealthResponse, PreviewResponse, ServicesResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';
import { needTool } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;
const TOKEN = 'uvs-test-token-0123456789';
const HEALTHZ_TOKEN = 'uvs-healthz-token-0123456789';

/** One request over the unix socket with the headers given (apiCall always sends JSON). */
function rawCall(
  socketPath: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string,
): Promise<{ status: number; body: { code?: string } }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? (JSON.parse(text) as { code?: string }) : {} }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('control plane', { skip: needTool(isRoot, 'root (network namespaces, TUN)'), timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvc${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  // A 1 s timeout: a check must not fail because this shared machine is busy (a stopped server
  // is refused at once, so detection does not wait for it).
  const hc = { type: 'http', path: '/', interval: 1, timeout: 1, rise: 2, fall: 2 };
  const services = (web: string[] = rs, extra: Record<string, unknown> = {}) => [
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      scheduler: 'rr',
      healthCheck: hc,
      realServers: web.map((a) => ({ address: a, port: 8080 })),
      ...extra,
    },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 5353 })) },
  ];
  let configFile = '';
  const listeners = () => ({
    // Limits the requests below go over (the defaults are ten times larger: issue 37).
    dataplane: { maxServices: 1024, maxRealServers: 4096 },
    api: { socket: lab.socket, listen: '10.200.1.1:8443', token: TOKEN },
    healthz: { address: '127.0.0.1:10256', token: HEALTHZ_TOKEN },
  });
  const api = <T>(method: string, path: string, body?: unknown) => apiCall<T>(lab.socket, method, path, body);
  const web = async () => (await api<ServicesResponse>('GET', '/v1/services')).body.services.find((s) => s.port === 80)!.realServers;
  const curlMany = (n: number): Record<string, number> => {
    const text = lab.exec(lab.clientNs, 'sh', ['-c', `for i in $(seq ${n}); do curl -s -m 5 http://${LAB_VIP}/ || echo FAIL; done`], 60000);
    const counts: Record<string, number> = {};
    for (const l of text.split('\n').filter(Boolean)) counts[l] = (counts[l] ?? 0) + 1;
    return counts;
  };
  const waitFor = async (what: string, fn: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await fn())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(100);
    }
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
    configFile = lab.writeConfig(lab.config(services(), listeners()));
    await lab.startUvsd(configFile);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('a killed real server is quiesced by its health check and restored when it comes back', async () => {
    await waitFor(
      'first health checks',
      async () => (await api<HealthResponse>('GET', '/v1/health')).body.checks.every((c) => c.checks > 0),
      20000,
    );
    lab.stopServer(1);
    await waitFor('rs2 to be marked down', async () => (await web()).find((r) => r.address === rs[1])!.healthy === false, 20000);
    const down = (await web()).find((r) => r.address === rs[1])!;
    assert.deepEqual([down.weight, down.configuredWeight], [0, 1]);
    const during = curlMany(12);
    assert.deepEqual(during, { rs1: 6, rs3: 6 }, 'no request reached the dead server and none failed');
    const metrics = lab.exec(lab.lbNs, 'curl', ['-s', 'http://127.0.0.1:10249/metrics']);
    assert.match(
      metrics,
      new RegExp(
        `uvs_realserver_healthy\\{local_address="${LAB_VIP}",local_port="80",remote_address="${rs[1]}",remote_port="8080",proto="TCP",local_mark=""\\} 0`,
      ),
    );
    const listing = lab.exec(lab.lbNs, process.execPath, [join(ROOT, 'dist', 'control', 'uvsadm.js'), '--socket', lab.socket, '--health']);
    assert.match(listing, new RegExp(`-> ${rs[1]!.replace(/\./g, '\\.')}:8080 +DOWN`));
    lab.startServer(1);
    await waitFor('rs2 to be healthy again', async () => (await web()).find((r) => r.address === rs[1])!.healthy, 20000);
    assert.equal((await web()).find((r) => r.address === rs[1])!.weight, 1);
    const afterRestore = curlMany(9);
    assert.equal(afterRestore.rs2, 3, `traffic back on rs2: ${JSON.stringify(afterRestore)}`);
  });

  test('the API socket is root-only: directory 0700, socket 0600', () => {
    assert.equal(statSync(lab.socket).mode & 0o777, 0o600);
    assert.equal(statSync(join(lab.socket, '..')).mode & 0o777, 0o700);
  });

  test('API errors carry stable codes: unknown route 404, bad query 400', async () => {
    const nf = await api<ApiError>('GET', '/v1/nothing');
    assert.deepEqual([nf.status, nf.body.code], [404, 'UVS_ERR_API_NOT_FOUND']);
    const bad = await api<ApiError>('GET', '/v1/connections?limit=0');
    assert.deepEqual([bad.status, bad.body.code], [400, 'UVS_ERR_API_BAD_REQUEST']);
    const kill = await api<ApiError>('POST', '/v1/workers/99/kill');
    assert.deepEqual([kill.status, kill.body.code], [404, 'UVS_ERR_API_NOT_FOUND']);
  });

  test('the daemon serves a valid OpenAPI 3 document that lists every route it answers, and only those', async () => {
    // Written here from the README's "Admin API" section and uvsadm's calls, not from api.ts.
    const ROUTES = [
      'get /v1/openapi.json',
      'get /v1/info',
      'get /v1/services',
      'post /v1/services',
      'delete /v1/services',
      'put /v1/services/{protocol}/{address}/{port}',
      'delete /v1/services/{protocol}/{address}/{port}',
      'post /v1/services/{protocol}/{address}/{port}/preview',
      'post /v1/services/{protocol}/{address}/{port}/realservers',
      'put /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}',
      'delete /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}',
      'post /v1/batch',
      'get /v1/connections',
      'get /v1/stats',
      'get /v1/drains',
      'get /v1/health',
      'get /v1/defense',
      'get /v1/maintenance',
      'put /v1/maintenance',
      'post /v1/capture',
      'get /v1/timeouts',
      'put /v1/timeouts',
      'post /v1/zero',
      'get /v1/config',
      'post /v1/reload',
      'post /v1/workers/{id}/kill',
      'get /healthz',
      'get /livez',
    ];
    type Body = { content: { 'application/json': { schema: { properties?: Record<string, { items?: { required?: string[] } }> } } } };
    const r = await api<{
      openapi: string;
      info: { title: string };
      paths: Record<string, Record<string, { responses: Record<string, unknown>; operationId: string; requestBody?: Body }>>;
    }>('GET', '/v1/openapi.json');
    assert.equal(r.status, 200);
    assert.match(r.body.openapi, /^3\.0\.\d$/);
    assert.ok(r.body.info.title);
    // Request bodies are the schema uvsd checks them with (control/api-bodies.ts, control/config.ts).
    const svcBody = r.body.paths['/v1/services']!.post!.requestBody!.content['application/json'].schema;
    assert.deepEqual(svcBody.properties!.realServers!.items!.required, ['address']);
    assert.deepEqual(Object.keys(r.body.paths['/v1/timeouts']!.put!.requestBody!.content['application/json'].schema.properties!), [
      'tcp',
      'tcpFin',
      'udp',
    ]);
    const ops = Object.entries(r.body.paths).flatMap(([p, m]) => Object.entries(m).map(([method, op]) => ({ p, method, op })));
    assert.deepEqual(ops.map((o) => `${o.method} ${o.p}`).sort(), [...ROUTES].sort(), 'the document lists exactly the routes uvsd has');
    const ids = new Set<string>();
    for (const { p, method, op } of ops) {
      assert.ok(op.responses['200'] && op.responses['4XX'], `${method} ${p} documents its answers`);
      assert.ok(op.operationId && !ids.has(op.operationId), `operationId ${op.operationId} is present and unique`);
      ids.add(op.operationId);
    }
    // Every listed route is answered, none with a 5xx. A route uvsd does not have gets fastify's
    // 404 "no route …"; each probe below is one that changes nothing (an unknown service, a body
    // the schema refuses) and so must get the route's own answer instead.
    const raw = (method: string, path: string, body?: unknown) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const data = body === undefined ? undefined : JSON.stringify(body);
        const req = request(
          {
            socketPath: lab.socket,
            method,
            path,
            headers: data === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
          },
          (res) => {
            let text = '';
            res.on('data', (d: Buffer) => (text += d.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
        req.on('error', reject);
        req.end(data);
      });
    const none = `tcp/${LAB_VIP}/9999`; // no such service
    const probes: [string, string, string, unknown, number][] = [
      ['get /v1/openapi.json', 'GET', '/v1/openapi.json', undefined, 200],
      ['get /v1/info', 'GET', '/v1/info', undefined, 200],
      ['get /v1/services', 'GET', '/v1/services', undefined, 200],
      ['post /v1/services', 'POST', '/v1/services', { protocol: 'tcp' }, 400],
      ['put /v1/services/{protocol}/{address}/{port}', 'PUT', `/v1/services/${none}`, { scheduler: 'rr' }, 404],
      ['delete /v1/services/{protocol}/{address}/{port}', 'DELETE', `/v1/services/${none}`, undefined, 404],
      ['post /v1/services/{protocol}/{address}/{port}/preview', 'POST', `/v1/services/${none}/preview`, { delete: [] }, 404],
      [
        'post /v1/services/{protocol}/{address}/{port}/realservers',
        'POST',
        `/v1/services/${none}/realservers`,
        { address: rs[0], port: 8080 },
        404,
      ],
      [
        'put /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}',
        'PUT',
        `/v1/services/${none}/realservers/${rs[0]}/8080`,
        { weight: 1 },
        404,
      ],
      [
        'delete /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}',
        'DELETE',
        `/v1/services/${none}/realservers/${rs[0]}/8080`,
        undefined,
        404,
      ],
      ['post /v1/batch', 'POST', '/v1/batch', { ops: [{ op: 'noSuchOp' }] }, 400],
      ['get /v1/connections', 'GET', '/v1/connections', undefined, 200],
      ['get /v1/stats', 'GET', '/v1/stats', undefined, 200],
      ['get /v1/drains', 'GET', '/v1/drains', undefined, 200],
      ['get /v1/health', 'GET', '/v1/health', undefined, 200],
      ['get /v1/defense', 'GET', '/v1/defense', undefined, 200],
      ['get /v1/maintenance', 'GET', '/v1/maintenance', undefined, 200],
      ['put /v1/maintenance', 'PUT', '/v1/maintenance', { enabled: 'yes' }, 400],
      ['post /v1/capture', 'POST', '/v1/capture', { sample: 0 }, 400],
      ['get /v1/timeouts', 'GET', '/v1/timeouts', undefined, 200],
      ['put /v1/timeouts', 'PUT', '/v1/timeouts', { tcp: -5 }, 400],
      ['post /v1/zero', 'POST', '/v1/zero', undefined, 200],
      ['get /v1/config', 'GET', '/v1/config', undefined, 200],
      ['post /v1/reload', 'POST', '/v1/reload', undefined, 200],
      ['post /v1/workers/{id}/kill', 'POST', '/v1/workers/99/kill', undefined, 404],
      ['get /healthz', 'GET', '/healthz', undefined, 200],
      ['get /livez', 'GET', '/livez', undefined, 200],
    ];
    assert.deepEqual(
      probes.map((x) => x[0]).sort(),
      ROUTES.filter((x) => x !== 'delete /v1/services').sort(),
      'one probe per route (DELETE /v1/services below)',
    );
    for (const [route, m, p, body, want] of probes) {
      const a = await raw(m, p, body);
      assert.equal(a.status, want, `${route}: ${a.status} ${a.text.slice(0, 200)}`);
      if (want === 404) assert.doesNotMatch(a.text, /no route/, `${route} is a route`);
    }
    const unknown = await raw('PUT', '/v1/timeouts', { tcp: 900, colour: 'red' });
    assert.equal(unknown.status, 400, 'an unknown field is refused, not ignored');
    assert.match(unknown.text, /timeouts\.colour: unknown field \(allowed: tcp, tcpFin, udp\)/);
    // DELETE /v1/services clears the table for real; the file puts it back.
    assert.equal((await raw('DELETE', '/v1/services')).status, 200);
    // Services whose servers still have connections stay listed while they drain (weight 0).
    const cleared = (await api<ServicesResponse>('GET', '/v1/services')).body.services;
    assert.ok(
      cleared.every((x) => x.realServers.every((r) => r.weight === 0)),
      `nothing takes new connections: ${JSON.stringify(cleared)}`,
    );
    assert.equal((await api('POST', '/v1/reload')).status, 200);
    for (const [m, p] of [
      ['PATCH', '/v1/services'],
      ['POST', '/v1/info'],
      ['GET', '/v1/nothing'],
      ['DELETE', '/v1/stats'],
      ['PUT', '/v1/zero'],
    ] as const) {
      const a = await raw(m, p);
      assert.equal(a.status, 404, `${m} ${p} is not a route: ${a.text}`);
      assert.match(a.text, /no route/);
    }
    assert.equal((await web()).length, 3, 'the table is back as the file has it');
  });

  test('the TCP API listener needs the bearer token: none 401, wrong 401, right 200', () => {
    const code = (args: string[]) =>
      lab.exec(lab.clientNs, 'curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '-m', '5', ...args, 'http://10.200.1.1:8443/v1/info']);
    assert.equal(code([]), '401');
    assert.equal(code(['-H', 'Authorization: Bearer wrong-token-wrong-token']), '401');
    assert.equal(code(['-H', `Authorization: Bearer ${TOKEN}x`]), '401');
    assert.equal(code(['-H', `Authorization: Bearer ${TOKEN}`]), '200');
  });

  test('GET /v1/config shows the configuration without its secrets (API and healthz tokens)', async () => {
    const r = await api<{
      document: { api: { token: string }; healthz: { token: string } };
      effective: { api: { token: string }; healthz: { token: string } };
    }>('GET', '/v1/config');
    assert.equal(r.status, 200);
    const text = JSON.stringify(r.body);
    assert.ok(!text.includes(TOKEN) && !text.includes(HEALTHZ_TOKEN), 'no token in the answer');
    assert.deepEqual(
      [r.body.document.api.token, r.body.effective.api.token, r.body.document.healthz.token, r.body.effective.healthz.token],
      ['<redacted>', '<redacted>', '<redacted>', '<redacted>'],
    );
  });

  test('TCP listeners refuse a Host header naming something else (DNS rebinding): API 403 even with the token, metrics 403', () => {
    const call = (host: string | null, url: string, ns = lab.clientNs, auth = true) =>
      lab.exec(ns, 'curl', [
        '-s',
        '-m',
        '5',
        '-w',
        ' %{http_code}',
        ...(auth ? ['-H', `Authorization: Bearer ${TOKEN}`] : []),
        ...(host ? ['-H', `Host: ${host}`] : []),
        url,
      ]);
    const rebound = call('rebind.attacker.test:8443', 'http://10.200.1.1:8443/v1/info');
    assert.match(rebound, / 403$/);
    assert.equal(JSON.parse(rebound.slice(0, -4)).code, 'UVS_ERR_API_HOST');
    assert.match(call(null, 'http://10.200.1.1:8443/v1/info'), / 200$/, 'its own address is fine');
    assert.match(call('rebind.attacker.test:10249', 'http://127.0.0.1:10249/metrics', lab.lbNs, false), / 403$/);
    assert.match(
      call('localhost:10249', 'http://127.0.0.1:10249/metrics', lab.lbNs, false),
      / 200$/,
      'loopback metrics stay open for Prometheus, as kube-proxy',
    );
  });

  test('request bodies must be application/json: a text/plain POST is refused with 415 and changes nothing', async () => {
    const body = JSON.stringify({ protocol: 'tcp', address: LAB_VIP, port: 8082, realServers: [{ address: rs[0], port: 8080 }] });
    const plain = await rawCall(lab.socket, 'POST', '/v1/services', { 'content-type': 'text/plain' }, body);
    assert.deepEqual([plain.status, plain.body.code], [415, 'UVS_ERR_API_CONTENT_TYPE']);
    const none = await rawCall(lab.socket, 'POST', '/v1/services', {}, body);
    assert.deepEqual([none.status, none.body.code], [415, 'UVS_ERR_API_CONTENT_TYPE'], 'a body without a content type too');
    const tcp = lab.exec(lab.clientNs, 'curl', [
      '-s',
      '-m',
      '5',
      '-w',
      ' %{http_code}',
      '-H',
      `Authorization: Bearer ${TOKEN}`,
      '-H',
      'Content-Type: text/plain',
      '--data',
      body,
      'http://10.200.1.1:8443/v1/services',
    ]);
    assert.match(tcp, / 415$/);
    const list = (await api<ServicesResponse>('GET', '/v1/services')).body.services;
    assert.ok(!list.some((s) => s.port === 8082), 'nothing was added');
    const json = await rawCall(lab.socket, 'POST', '/v1/services', { 'content-type': 'application/json; charset=utf-8' }, body);
    assert.equal(json.status, 200, JSON.stringify(json.body));
    assert.equal((await api('DELETE', `/v1/services/tcp/${LAB_VIP}/8082`)).status, 200);
  });

  test('a batch over the limits is refused before any work (413), a malformed operation is a 400, and nothing changes', async () => {
    const before = (await api<ServicesResponse>('GET', '/v1/services')).body.services.length;
    const ops = Array.from({ length: 5000 }, (_, i) => ({
      op: 'addService',
      service: { protocol: 'tcp', address: LAB_VIP, port: 10000 + i },
    }));
    const big = await api<ApiError>('POST', '/v1/batch', { ops });
    assert.deepEqual([big.status, big.body.code, big.body.path], [413, 'UVS_ERR_API_TOO_LARGE', 'ops'], JSON.stringify(big.body));
    assert.match(big.body.message, /more than dataplane\.maxServices \(1024\)/);
    const rsOps = Array.from({ length: 4097 }, (_, i) => ({
      op: 'addRealServer',
      ref: { protocol: 'tcp', address: LAB_VIP, port: 80 },
      realServer: { address: `10.201.${i >> 8}.${i & 255}`, port: 8080 },
    }));
    const rsBig = await api<ApiError>('POST', '/v1/batch', { ops: rsOps });
    assert.deepEqual([rsBig.status, rsBig.body.code], [413, 'UVS_ERR_API_TOO_LARGE'], JSON.stringify(rsBig.body));
    assert.match(rsBig.body.message, /maxRealServers \(4096\)/);
    const noRef = await api<ApiError>('POST', '/v1/batch', { ops: [{ op: 'addRealServer', realServer: { address: rs[0], port: 8080 } }] });
    assert.deepEqual([noRef.status, noRef.body.code, noRef.body.path], [400, 'UVS_ERR_API_BAD_REQUEST', 'ops[0].ref']);
    assert.equal((await api<ServicesResponse>('GET', '/v1/services')).body.services.length, before, 'nothing was added');
  });

  test('preview bodies are validated: malformed ones are a 400 naming the field, more additions than maxRealServers a 413', async () => {
    const url = `/v1/services/tcp/${LAB_VIP}/80/preview`;
    for (const [body, path] of [
      [{ delete: 'x' }, 'change.delete'],
      [{ add: [{ address: 1, port: 80, weight: 1 }] }, 'change.add[0].address'],
      [{ setWeight: [null] }, 'change.setWeight[0]'],
      [{ scheduler: 'nope' }, 'change.scheduler'],
      [{ add: [{ address: '10.9.9.9', port: 'x', weight: 1 }] }, 'change.add[0].port'],
    ] as const) {
      const r = await api<ApiError>('POST', url, body);
      assert.deepEqual([r.status, r.body.code, r.body.path], [400, 'UVS_ERR_API_BAD_REQUEST', path], JSON.stringify(body));
    }
    const add = Array.from({ length: 4097 }, (_, i) => ({ address: `10.201.${i >> 8}.${i & 255}`, port: 8080, weight: 1 }));
    const big = await api<ApiError>('POST', url, { add });
    assert.deepEqual([big.status, big.body.code, big.body.path], [413, 'UVS_ERR_API_TOO_LARGE', 'add']);
    const ok = await api<PreviewResponse>('POST', url, { add: add.slice(0, 2000) });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
  });

  test('runtime edits through the API: add, conflict, schema errors naming the field, delete', async () => {
    const add = await api<AppliedResponse>('POST', '/v1/services', {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 8081,
      scheduler: 'wrr',
      realServers: [{ address: rs[0], port: 8080, weight: 2 }],
    });
    assert.equal(add.status, 200, JSON.stringify(add.body));
    assert.equal(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}:8081/`]).trim(), 'rs1');
    const dup = await api<ApiError>('POST', '/v1/services', { protocol: 'tcp', address: LAB_VIP, port: 8081 });
    assert.deepEqual([dup.status, dup.body.code], [409, 'UVS_ERR_API_CONFLICT']);
    const bad = await api<ApiError>('POST', `/v1/services/tcp/${LAB_VIP}/8081/realservers`, { address: rs[1], port: 8080, weight: 70000 });
    assert.deepEqual([bad.status, bad.body.code, bad.body.path], [400, 'UVS_ERR_CONFIG_INVALID', 'ops[0].realServer.weight']);
    const nf = await api<ApiError>('DELETE', `/v1/services/tcp/${LAB_VIP}/9999`);
    assert.deepEqual([nf.status, nf.body.code], [404, 'UVS_ERR_API_NOT_FOUND']);
    const del = await api('DELETE', `/v1/services/tcp/${LAB_VIP}/8081`);
    assert.equal(del.status, 200);
    let out = '';
    try {
      out = lab.exec(lab.clientNs, process.execPath, [TOOLS, 'tcp-connect', LAB_VIP, '8081']);
    } catch (e) {
      out = (e as { stdout: string }).stdout;
    }
    assert.deepEqual(
      JSON.parse(out),
      { connected: false, error: 'ECONNREFUSED' },
      'new connections are refused once the service is removed (its servers drain)',
    );
  });

  test('editing the configuration file reloads it without a signal', async () => {
    writeFileSync(configFile, stringify(lab.config(services([rs[0]!]), listeners())));
    // rs2 and rs3 still have TIME_WAIT entries from earlier requests, so they drain (weight 0).
    await waitFor('the file change to be applied', async () => (await web()).filter((r) => r.weight > 0).length === 1, 20000);
    assert.deepEqual(curlMany(3), { rs1: 3 });
    writeFileSync(configFile, stringify(lab.config(services(), listeners())));
    await waitFor('the file change to be applied', async () => (await web()).filter((r) => r.weight > 0).length === 3, 20000);
  });

  test('the disruption preview reports moved slots and flows for a proposed change without making it', async () => {
    const svcs = services().map((s) => (s.port === 80 ? { ...s, scheduler: 'mh', healthCheck: undefined } : s));
    writeFileSync(configFile, stringify(lab.config(svcs, listeners())));
    assert.equal((await api('POST', '/v1/reload')).status, 200);
    const p = await api<PreviewResponse>('POST', `/v1/services/tcp/${LAB_VIP}/80/preview`, { delete: [`${rs[0]}:8080`] });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.scheduler, 'mh');
    assert.equal(p.body.slots, 4093);
    const moved = p.body.slotsMoved ?? -1; // null: a scheduler without a slot table
    assert.ok(moved > 0.2 && moved < 0.45, `removing one of three moves about a third of the slots: ${p.body.slotsMoved}`);
    assert.equal((await web()).length, 3, 'nothing was changed');
    const bad = await api<ApiError>('POST', `/v1/services/tcp/${LAB_VIP}/80/preview`, { delete: ['10.9.9.9:1'] });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'UVS_ERR_API_BAD_REQUEST');
  });

  test('a state file of the wrong shape or with foreign entries does not stop uvsd: bad entries are skipped, logged and counted', async () => {
    const stateFile = join(lab.dir, 'state.json');
    const entry = (vip: string, port: number) => ({
      service: `tcp ${vip}:${port}`,
      realServer: `${rs[0]}:8080`,
      protocol: 'tcp',
      since: Date.now(),
      deadline: null,
      serviceConfig: { protocol: 'tcp', address: vip, port, scheduler: 'rr' },
      realServerConfig: { address: rs[0], port: 8080, weight: 1 },
    });
    await lab.stopUvsd();
    writeFileSync(stateFile, JSON.stringify({ version: 1, draining: { not: 'a list' } }));
    await lab.startUvsd(configFile);
    let st = await api<StatsResponse>('GET', '/v1/stats');
    assert.equal(st.status, 200, 'uvsd started despite the state file');
    assert.equal(st.body.stateFileSkipped, 1);
    await lab.stopUvsd();
    // One entry outside vipCidrs (would have added a service for 192.0.2.10), one good one.
    writeFileSync(stateFile, JSON.stringify({ version: 1, draining: [entry('192.0.2.10', 80), entry(LAB_VIP, 8090)] }));
    await lab.startUvsd(configFile);
    st = await api<StatsResponse>('GET', '/v1/stats');
    assert.equal(st.body.stateFileSkipped, 1);
    const svcs = (await api<ServicesResponse>('GET', '/v1/services')).body.services;
    assert.ok(!svcs.some((x) => x.address === '192.0.2.10'), 'no service outside vipCidrs');
    assert.ok(
      svcs.some((x) => x.address === LAB_VIP && x.port === 8090),
      'the valid drain entry was restored',
    );
    assert.match(
      readFileSync(join(lab.dir, 'uvsd.log'), 'utf8'),
      /state file entry skipped.*not inside dataplane\.vipCidrs|not inside dataplane\.vipCidrs.*state file entry skipped/,
    );
  });

  test('hot reload under traffic breaks no connection: servers added, reweighted and removed while long requests run', async () => {
    const load = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, TOOLS, 'load', LAB_VIP, '80', '6', '6', '3', '800'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    load.stdout.on('data', (d: Buffer) => (text += d.toString()));
    const steps = [
      services([rs[0]!, rs[1]!]),
      services(rs, { scheduler: 'wrr' }),
      services(rs).map((s) => (s.port === 80 ? { ...s, realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: i + 1 })) } : s)),
      services([rs[2]!]),
      services(),
    ];
    for (const st of steps) {
      await sleep(1000);
      writeFileSync(configFile, stringify(lab.config(st, listeners())));
      const r = await api('POST', '/v1/reload');
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    await new Promise((r) => load.on('exit', r));
    const res = JSON.parse(text) as { requests: number; errors: number; records: { error: string | null }[] };
    assert.equal(res.errors, 0, `broken: ${JSON.stringify(res.records.filter((r) => r.error).slice(0, 5))}`);
    assert.ok(res.requests > 50, `requests: ${res.requests}`);
  });
});
