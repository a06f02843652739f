/**
 * The admin API's request bodies come from the schema (control/api-bodies.ts, control/config.ts):
 * GET /v1/openapi.json shows them as uvsd checks them, and every POST and PUT route refuses a
 * field it does not know, naming it. In-process (fastify's inject) against a daemon stand-in that
 * has only what the routes reach before their body is refused.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { buildApi } from '../../control/api';
import type { Daemon } from '../../control/daemon';
import { editDocument, type EditOp } from '../../control/edits';
import type { UvsError } from '../../control/errors';
import { batchOps, fromJobError, runJob } from '../../control/offload-jobs';

interface Op {
  requestBody?: { required: boolean; content: { 'application/json': { schema: Schema } } };
}
interface Schema {
  type?: string;
  additionalProperties?: boolean;
  required?: string[];
  properties?: Record<string, Schema>;
  items?: Schema;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  default?: unknown;
  oneOf?: Schema[];
  nullable?: boolean;
}

/**
 * The daemon's edits, batches and previews run the control worker's own code (runJob's steps)
 * in-process, up to the validation of the whole configuration (this stand-in has none).
 */
function standIn() {
  const edits: Record<string, unknown>[] = [];
  const limits = { maxServices: 1024, maxRealServers: 4096 };
  const doc = { services: [] };
  const applied = (f: () => Record<string, unknown>) => {
    try {
      edits.push(f());
      return Promise.resolve({ ok: true, version: edits.length });
    } catch (e) {
      return Promise.resolve({ ok: false, error: e as UvsError });
    }
  };
  const d = {
    doc,
    cfg: { dataplane: limits },
    model: { list: () => [] },
    capture: { run: async () => assert.fail('a refused capture must not run') },
    edit: (ops: EditOp[]) => applied(() => editDocument(structuredClone(doc), ops, limits)),
    batch: (body: Buffer) => applied(() => editDocument(structuredClone(doc), batchOps(body, doc, limits), limits)),
    preview: async (_ref: unknown, body: Buffer) => {
      const r = runJob({ kind: 'preview', body, service: null, serviceName: 'tcp 10.96.0.10:80', svcSlot: -1, maxRealServers: 4096 }, null);
      if (!r.ok) throw fromJobError(r.error);
      return assert.fail('no service here: the body must be refused or the service not found');
    },
  };
  const app = buildApi(d as unknown as Daemon, pino({ level: 'silent' }));
  return { app, edits };
}

async function openapi(): Promise<Record<string, Record<string, Op>>> {
  const { app } = standIn();
  const r = await app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(r.statusCode, 200);
  return (r.json() as { paths: Record<string, Record<string, Op>> }).paths;
}

const bodyOf = (paths: Record<string, Record<string, Op>>, method: string, path: string): Schema => {
  const b = paths[path]?.[method]?.requestBody?.content['application/json'].schema;
  assert.ok(b, `${method} ${path} has a request body`);
  return b;
};

test('the OpenAPI document shows each kind of request body as the schema checks it', async () => {
  const paths = await openapi();
  // A service: the configuration's own schema, real servers and health check inside.
  const svc = bodyOf(paths, 'post', '/v1/services');
  assert.equal(svc.additionalProperties, false);
  assert.deepEqual(svc.required, ['address', 'port']);
  assert.deepEqual(svc.properties!.protocol!.enum, ['tcp', 'udp', 'sctp']);
  assert.equal(svc.properties!.protocol!.default, 'tcp');
  assert.ok(svc.properties!.scheduler!.enum!.includes('mh'));
  assert.deepEqual([svc.properties!.port!.minimum, svc.properties!.port!.maximum], [1, 65535]);
  const rs = svc.properties!.realServers!.items!;
  assert.deepEqual([rs.properties!.weight!.minimum, rs.properties!.weight!.maximum, rs.properties!.weight!.default], [0, 65535, 1]);
  assert.deepEqual(rs.required, ['address']);
  assert.equal(svc.properties!.healthCheck!.properties!.interval!.default, 2);
  assert.equal(paths['/v1/services']!.post!.requestBody!.required, true);
  // An edit: the path names the service, so the body has no key fields.
  const edit = bodyOf(paths, 'put', '/v1/services/{protocol}/{address}/{port}');
  assert.ok(edit.properties!.scheduler && !edit.properties!.address && !edit.properties!.port && !edit.required);
  // A real server.
  const add = bodyOf(paths, 'post', '/v1/services/{protocol}/{address}/{port}/realservers');
  assert.deepEqual(add.required, ['address']);
  assert.deepEqual(add.properties!.forwarding!.enum, ['masq', 'fullnat', 'tunnel']);
  assert.ok(!bodyOf(paths, 'put', '/v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}').properties!.address);
  // A batch: the operations and their fields, a service inside as above.
  const batch = bodyOf(paths, 'post', '/v1/batch');
  assert.deepEqual(batch.required, ['ops']);
  const op = batch.properties!.ops!.items!;
  assert.equal(op.additionalProperties, false);
  assert.ok(op.properties!.op!.enum!.includes('setTimeouts'));
  assert.deepEqual(op.properties!.service!.required, ['address', 'port']);
  // Timeouts: durations with the table's bound.
  const t = bodyOf(paths, 'put', '/v1/timeouts');
  assert.deepEqual(Object.keys(t.properties!), ['tcp', 'tcpFin', 'udp']);
  assert.equal(t.additionalProperties, false);
  assert.equal(t.properties!.tcp!.oneOf![0]!.maximum, 2147483);
  // Small bodies: maintenance, zero, the preview, and a route that takes none.
  assert.deepEqual(bodyOf(paths, 'put', '/v1/maintenance').required, ['enabled']);
  assert.deepEqual(Object.keys(bodyOf(paths, 'post', '/v1/zero').properties!.service!.properties!), ['protocol', 'address', 'port']);
  assert.equal(bodyOf(paths, 'post', '/v1/services/{protocol}/{address}/{port}/preview').properties!.delete!.type, 'array');
  assert.deepEqual(bodyOf(paths, 'post', '/v1/reload').properties, {});
  // A capture: sample or a flow filter, bounded, with its defaults.
  const cap = bodyOf(paths, 'post', '/v1/capture');
  assert.deepEqual(Object.keys(cap.properties!), ['sample', 'flow', 'seconds', 'maxPackets', 'format']);
  assert.equal(cap.additionalProperties, false);
  assert.deepEqual([cap.properties!.seconds!.maximum, cap.properties!.seconds!.default], [300, 10]);
  assert.deepEqual(cap.properties!.format!.enum, ['pcap', 'jsonl']);
  assert.deepEqual(Object.keys(cap.properties!.flow!.properties!), ['protocol', 'address', 'port', 'peer', 'peerPort']);
  assert.equal(cap.properties!.flow!.additionalProperties, false);
});

test("a preview body is checked by its schema, with the preview's messages, before the service is looked up", async () => {
  const { app } = standIn(); // it has no service: a body that passes would get a 404
  const url = '/v1/services/tcp/10.96.0.10/80/preview';
  const cases: [unknown, string, RegExp][] = [
    [{ delete: 'x' }, 'change.delete', /must be a list/],
    [{ delete: ['nope'] }, 'change.delete[0]', /must be "address:port"/],
    [{ setWeight: [null] }, 'change.setWeight[0]', /must be a mapping/],
    [{ setWeight: [{ realServer: '10.0.0.1:80', weight: 1e6 }] }, 'change.setWeight[0].weight', /integer between 0 and 65535, got 1000000/],
    [{ add: [{ address: 1, port: 80, weight: 1 }] }, 'change.add[0].address', /must be an IPv4 or IPv6 address, got 1/],
    [{ add: [{ address: '10.0.0.9', port: 'x', weight: 1 }] }, 'change.add[0].port', /integer between 0 and 65535/],
    [{ scheduler: 'nope' }, 'change.scheduler', /unknown scheduler "nope" \(available: .*mh/],
    [{ flags: ['mh-port', 'x'] }, 'change.flags[1]', /must be one of flag-1, .*mh-port, got "x"/],
    [{ mhTableSize: 7 }, 'change.mhTableSize', /kernel's sizes 251, /],
  ];
  for (const [payload, path, message] of cases) {
    const r = await app.inject({ method: 'POST', url, payload: payload as object });
    const b = r.json() as { code: string; path: string; message: string };
    assert.deepEqual([r.statusCode, b.code, b.path], [400, 'UVS_ERR_API_BAD_REQUEST', path], JSON.stringify(payload));
    assert.match(b.message, message);
  }
  const ok = await app.inject({ method: 'POST', url, payload: { delete: ['10.0.0.1:80'], scheduler: 'mh', mhTableSize: 251 } });
  assert.equal(ok.statusCode, 404, ok.body);
});

test('POST /v1/capture refuses a malformed request before any capture runs', async () => {
  const { app } = standIn(); // its capture.run fails the test if reached
  const cases: [unknown, string, RegExp][] = [
    [undefined, 'capture', /give either sample/],
    [{ sample: 2, flow: { port: 1 } }, 'capture', /give either sample/],
    [{ sample: 0 }, 'capture.sample', /must be an integer from 1 to/],
    [{ flow: { colour: 'red' } }, 'capture.flow.colour', /unknown field/],
    [{ flow: { address: '10.0.0.1', peer: 'fd00::1' } }, 'capture.flow.peer', /one family/],
    [{ flow: {} }, 'capture.flow', /needs at least one of/],
  ];
  for (const [payload, path, message] of cases) {
    const r = await app.inject({ method: 'POST', url: '/v1/capture', ...(payload === undefined ? {} : { payload: payload as object }) });
    const b = r.json() as { code: string; path: string; message: string };
    assert.deepEqual([r.statusCode, b.code, b.path], [400, 'UVS_ERR_API_BAD_REQUEST', path], JSON.stringify(payload));
    assert.match(b.message, message);
  }
});

test('every POST and PUT route refuses a body with an unknown field, naming it', async () => {
  const paths = await openapi();
  const { app, edits } = standIn();
  // Where each route's body sits in the field path of its errors.
  const where: Record<string, string> = {
    'post /v1/services': 'ops[0].service.',
    'put /v1/services/{protocol}/{address}/{port}': 'ops[0].service.',
    'post /v1/services/{protocol}/{address}/{port}/realservers': 'ops[0].realServer.',
    'put /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}': 'ops[0].realServer.',
    'post /v1/services/{protocol}/{address}/{port}/preview': 'change.',
    'post /v1/capture': 'capture.',
    'put /v1/timeouts': 'timeouts.',
  };
  const writes = Object.entries(paths).flatMap(([p, ms]) =>
    Object.keys(ms)
      .filter((m) => m === 'post' || m === 'put')
      .map((m) => `${m} ${p}`),
  );
  assert.ok(writes.length >= 12, writes.join(', '));
  for (const route of writes) {
    const [method, path] = route.split(' ') as [string, string];
    const url = path
      .replace('{protocol}', 'tcp')
      .replace('{address}', '10.96.0.10')
      .replace('{port}', '80')
      .replace('{raddr}', '10.0.0.1')
      .replace('{rport}', '8080')
      .replace('{id}', '0');
    // Object.prototype's member names too: a key check with `in` would let them through.
    for (const field of ['colour', 'toString', 'constructor', 'hasOwnProperty']) {
      const r = await app.inject({ method: method.toUpperCase() as 'POST' | 'PUT', url, payload: { [field]: 'red' } });
      const b = r.json() as { code: string; path: string; message: string };
      assert.equal(r.statusCode, 400, `${route} ${field}: ${r.body}`);
      assert.equal(b.path, `${where[route] ?? ''}${field}`, route);
      assert.match(b.message, /unknown field/, route);
    }
    // "__proto__" never reaches the schema: fastify's JSON parser refuses it (onProtoPoisoning).
    const proto = await app.inject({
      method: method.toUpperCase() as 'POST' | 'PUT',
      url,
      headers: { 'content-type': 'application/json' },
      payload: '{"__proto__": {"polluted": true}}',
    });
    assert.deepEqual([proto.statusCode, proto.json().code], [400, 'UVS_ERR_API_BAD_REQUEST'], `${route} __proto__: ${proto.body}`);
  }
  assert.equal(({} as Record<string, unknown>).polluted, undefined, 'nothing reached Object.prototype');
  // Inside a batch, an operation's own fields too.
  const r = await app.inject({ method: 'POST', url: '/v1/batch', payload: { ops: [{ op: 'clear' }, { op: 'clear', colour: 'red' }] } });
  assert.deepEqual([r.statusCode, r.json().path], [400, 'ops[1].colour']);
  const c = await app.inject({ method: 'POST', url: '/v1/batch', payload: { ops: [{ op: 'clear', constructor: 'red' }] } });
  assert.deepEqual([c.statusCode, c.json().path], [400, 'ops[0].constructor']);
  assert.equal(edits.length, 0, 'nothing was applied');
});

test('PUT /v1/timeouts takes durations, keeps 0 as "unchanged", and refuses what the table cannot hold', async () => {
  const { app, edits } = standIn();
  const ok = await app.inject({ method: 'PUT', url: '/v1/timeouts', payload: { tcp: '15m', udp: 30 } });
  assert.equal(ok.statusCode, 200, ok.body);
  assert.deepEqual(
    edits.map((doc) => doc.timeouts),
    [{ tcp: 900, udp: 30 }],
  );
  const big = await app.inject({ method: 'PUT', url: '/v1/timeouts', payload: { tcpFin: '30d' } });
  assert.equal(big.statusCode, 400);
  assert.deepEqual([big.json().code, big.json().path], ['UVS_ERR_CONFIG_INVALID', 'timeouts.tcpFin']);
  assert.match(big.json().message, /between 0 and 2147483 seconds/);
  const neg = await app.inject({ method: 'PUT', url: '/v1/timeouts', payload: { tcp: -5 } });
  assert.deepEqual([neg.statusCode, neg.json().path], [400, 'timeouts.tcp']);
  assert.equal(edits.length, 1);
});

test('batch operations are checked for the fields they need before anything is applied', async () => {
  const { app, edits } = standIn();
  const cases: [unknown, string, RegExp][] = [
    [{}, 'ops', /is required/],
    [{ ops: [{ op: 'nope' }] }, 'ops[0].op', /must be one of addService, /],
    [{ ops: [{ op: 'addRealServer', realServer: { address: '10.0.0.1' } }] }, 'ops[0].ref', /is required for addRealServer \(a mapping\)/],
    [{ ops: [{ op: 'addService', service: [] }] }, 'ops[0].service', /is required for addService \(a mapping\)/],
    [{ ops: [{ op: 'deleteService', ref: { protocol: 'tcp', address: '10.96.0.10' } }] }, 'ops[0].ref.port', /is required/],
    [
      { ops: [{ op: 'deleteRealServer', ref: { protocol: 'tcp', address: '10.96.0.10', port: 80 }, address: '10.0.0.1' }] },
      'ops[0].port',
      /is required for deleteRealServer \(a number\)/,
    ],
    [{ ops: [{ op: 'setTimeouts', tcp: 'soon' }] }, 'ops[0].tcp', /duration/],
  ];
  for (const [payload, path, message] of cases) {
    const r = await app.inject({ method: 'POST', url: '/v1/batch', payload: payload as Record<string, unknown> });
    const b = r.json() as { code: string; path: string; message: string };
    assert.deepEqual([r.statusCode, b.code, b.path], [400, 'UVS_ERR_API_BAD_REQUEST', path], JSON.stringify(payload));
    assert.match(b.message, message);
  }
  assert.equal(edits.length, 0);
});

test('PUT /v1/maintenance needs enabled as true or false', async () => {
  const { app } = standIn();
  for (const payload of [{}, { enabled: 'yes' }]) {
    const r = await app.inject({ method: 'PUT', url: '/v1/maintenance', payload });
    assert.deepEqual([r.statusCode, r.json().code, r.json().path], [400, 'UVS_ERR_API_BAD_REQUEST', 'enabled']);
  }
});

test('a batch over the limits is refused (413) before its operations are checked one by one', async () => {
  const { app, edits } = standIn();
  // 1025 additions over maxServices 1024, the last one malformed: the size decides, not the shape.
  const ops: unknown[] = Array.from({ length: 1025 }, (_, i) => ({
    op: 'addService',
    service: { protocol: 'tcp', address: '10.96.0.1', port: 1000 + i },
  }));
  ops.push({ op: 'addService', service: { protocol: 'tcp', address: '10.96.0.1', port: 'x', colour: 1 } }, null, 7);
  const r = await app.inject({ method: 'POST', url: '/v1/batch', payload: { ops } });
  assert.equal(r.statusCode, 413, r.body);
  assert.match((r.json() as { message: string }).message, /more than dataplane\.maxServices \(1024\)/);
  // Under the limits the same malformed operation is the answer, a 400 naming it.
  const small = await app.inject({ method: 'POST', url: '/v1/batch', payload: { ops: ops.slice(1024) } });
  assert.equal(small.statusCode, 400, small.body);
  assert.equal(edits.length, 0, 'nothing was applied');
});
