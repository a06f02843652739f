import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfigFile, validateConfig } from '../../control/config';
import { UvsError } from '../../control/errors';

const base = { dataplane: { vipCidrs: ['10.96.0.0/24'] } };
const svc = (extra: Record<string, unknown> = {}) => ({
  protocol: 'tcp',
  address: '10.96.0.10',
  port: 80,
  scheduler: 'rr',
  realServers: [{ address: '10.0.0.1', port: 8080 }],
  ...extra,
});

function rejects(doc: unknown, path: string, reason: RegExp, code = 'UVS_ERR_CONFIG_INVALID') {
  assert.throws(
    () => validateConfig(doc),
    (e: unknown) => {
      assert.ok(e instanceof UvsError);
      assert.equal(e.code, code);
      assert.equal(e.path, path);
      assert.match(e.message, reason);
      return true;
    },
  );
}

test('the example configuration in the repository is valid', () => {
  const cfg = loadConfigFile(join(__dirname, '..', '..', '..', 'uvs.example.yaml'));
  assert.equal(cfg.services.length, 2);
  assert.equal(cfg.timeouts.tcp.ESTABLISHED, 900);
});

test('defaults are filled: ipvsadm weight 1, wlc scheduler, service port for real servers, IPVS timeouts', () => {
  const cfg = validateConfig({ ...base, services: [{ address: '10.96.0.10', port: 80, realServers: [{ address: '10.0.0.1' }] }] });
  const s = cfg.services[0]!;
  assert.equal(s.scheduler, 'wlc');
  assert.equal(s.protocol, 'tcp');
  assert.deepEqual([s.realServers[0]!.port, s.realServers[0]!.weight], [80, 1]);
  assert.deepEqual([cfg.timeouts.tcp.ESTABLISHED, cfg.timeouts.tcp.FIN_WAIT, cfg.timeouts.udp], [900, 120, 300]);
  assert.equal(cfg.dataplane.tableSize, 65536);
});

test('durations accept units', () => {
  const cfg = validateConfig({ ...base, timeouts: { tcp: '15m', tcpFin: 30, udp: '2h', tcpStates: { TIME_WAIT: '500ms' } } });
  assert.deepEqual(
    [cfg.timeouts.tcp.ESTABLISHED, cfg.timeouts.tcp.FIN_WAIT, cfg.timeouts.udp, cfg.timeouts.tcp.TIME_WAIT],
    [900, 30, 7200, 0.5],
  );
});

test('unknown fields are rejected with their path', () => {
  rejects({ ...base, bogus: 1 }, 'bogus', /unknown field/);
  rejects({ ...base, services: [svc({ colour: 'red' })] }, 'services[0].colour', /unknown field/);
  rejects(
    { ...base, services: [svc({ realServers: [{ address: '10.0.0.1', wieght: 2 }] })] },
    'services[0].realServers[0].wieght',
    /unknown field/,
  );
});

test('a field named after an Object.prototype member is as unknown as any other (toString, constructor, __proto__…)', () => {
  // JSON.parse and the YAML loader make own properties of these keys, "__proto__" included; a key
  // check with `in` would find them on the prototype of the schema's field table and let them pass.
  const keyed = (k: string, v: unknown) => JSON.parse(`{${JSON.stringify(k)}: ${JSON.stringify(v)}}`) as Record<string, unknown>;
  for (const k of ['toString', 'constructor', '__proto__', 'hasOwnProperty', 'valueOf', 'isPrototypeOf']) {
    rejects({ ...base, ...keyed(k, 1) }, k, /unknown field \(allowed: ipvs, dataplane/);
    rejects({ ...base, services: [svc(keyed(k, 'x'))] }, `services[0].${k}`, /unknown field/);
    rejects(
      { ...base, services: [svc({ realServers: [{ address: '10.0.0.1', ...keyed(k, {}) }] })] },
      `services[0].realServers[0].${k}`,
      /unknown field/,
    );
    rejects({ dataplane: { ...base.dataplane, generatedLimit: keyed(k, 2) } }, `dataplane.generatedLimit.${k}`, /unknown field/);
  }
  const dir = mkdtempSync(join(tmpdir(), 'uvs-cfg-'));
  try {
    for (const k of ['__proto__', 'constructor', 'toString']) {
      const f = join(dir, 'uvs.yaml');
      writeFileSync(f, `dataplane:\n  vipCidrs: [10.96.0.0/24]\n  ${k}: { polluted: true }\n`);
      assert.throws(
        () => loadConfigFile(f),
        (e: unknown) => e instanceof UvsError && e.path === `dataplane.${k}` && /unknown field/.test(e.message),
        `a YAML file with dataplane.${k}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.equal(({} as Record<string, unknown>).polluted, undefined, 'nothing reached Object.prototype');
});

test('invalid values name the field and the reason', () => {
  rejects({ dataplane: {} }, 'dataplane.vipCidrs', /non-empty list/);
  rejects({ dataplane: { vipCidrs: ['10.0.0.0/33'] } }, 'dataplane.vipCidrs[0]', /CIDR/);
  rejects({ dataplane: { ...base.dataplane, tableSize: 1000 } }, 'dataplane.tableSize', /power of two/);
  rejects({ ...base, services: [svc({ port: 0 })] }, 'services[0].port', /between 1 and 65535/);
  rejects({ ...base, services: [svc({ protocol: 'icmp' })] }, 'services[0].protocol', /tcp, udp or sctp/);
  rejects({ ...base, services: [svc({ scheduler: 'nope' })] }, 'services[0].scheduler', /unknown scheduler "nope"/);
  rejects({ ...base, services: [svc({ address: '10.1.0.1' })] }, 'services[0].address', /not inside dataplane.vipCidrs/);
  rejects(
    { ...base, services: [svc({ address: '10.96.0.300' })] },
    'services[0].address',
    /must be an IPv4 or IPv6 address, got "10.96.0.300"/,
  );
  rejects(
    { ...base, services: [svc({ realServers: [{ address: '10.0.0.1', weight: 70000 }] })] },
    'services[0].realServers[0].weight',
    /between 0 and 65535/,
  );
  rejects(
    { ...base, services: [svc({ realServers: [{ address: '10.0.0.1', upperThreshold: 1, lowerThreshold: 2 }] })] },
    'services[0].realServers[0].lowerThreshold',
    /must not exceed/,
  );
  rejects({ ...base, services: [svc(), svc()] }, 'services[1]', /duplicates services\[0\]/);
  rejects(
    { ...base, services: [svc({ realServers: [{ address: '10.0.0.1' }, { address: '10.0.0.1' }] })] },
    'services[0].realServers[1]',
    /listed twice/,
  );
  rejects({ ...base, services: [svc({ schedFlags: ['sh-port'] })] }, 'services[0].schedFlags[0]', /needs scheduler sh/);
  rejects({ ...base, timeouts: { tcp: 'soon' } }, 'timeouts.tcp', /duration/);
});

test('direct routing is refused with an explanation; unknown methods are named', () => {
  rejects({ ...base, services: [svc({ forwarding: 'route' })] }, 'services[0].forwarding', /layer-2/, 'UVS_ERR_CONFIG_UNSUPPORTED');
  rejects({ ...base, services: [svc({ forwarding: 'gre' })] }, 'services[0].forwarding', /must be "masq", "fullnat" or "tunnel"/);
});

test('a file that is not YAML is reported as unreadable', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uvs-cfg-'));
  const f = join(dir, 'bad.yaml');
  writeFileSync(f, 'services: [ {');
  assert.throws(
    () => loadConfigFile(f),
    (e: unknown) => e instanceof UvsError && e.code === 'UVS_ERR_CONFIG_READ',
  );
  assert.throws(
    () => loadConfigFile(join(dir, 'missing.yaml')),
    (e: unknown) => e instanceof UvsError && e.code === 'UVS_ERR_CONFIG_READ',
  );
});

test('metrics and health listeners beyond loopback need a token; loopback ones do not', () => {
  assert.equal(validateConfig(base).metrics.address, '127.0.0.1:10249');
  assert.equal(validateConfig(base).healthz.address, '127.0.0.1:10256');
  rejects({ ...base, metrics: { address: '0.0.0.0:10249' } }, 'metrics.token', /required when listening beyond loopback/);
  rejects({ ...base, healthz: { address: '10.0.0.1:10256', token: 'short' } }, 'healthz.token', /at least 16/);
  assert.equal(
    validateConfig({ ...base, metrics: { address: '0.0.0.0:9100', token: 'a-long-enough-token' } }).metrics.token,
    'a-long-enough-token',
  );
  assert.equal(validateConfig({ ...base, metrics: { address: '' } }).metrics.address, '');
  rejects({ ...base, metrics: { address: 'nowhere' } }, 'metrics.address', /host:port/);
});

test('durations also take the compound Go form kube-proxy files use', () => {
  const cfg = validateConfig({ ...base, timeouts: { tcp: '1m30s', tcpFin: '1h0m0s', udp: '500ms' } });
  assert.deepEqual([cfg.timeouts.tcp.ESTABLISHED, cfg.timeouts.tcp.FIN_WAIT, cfg.timeouts.udp], [90, 3600, 0.5]);
  rejects({ ...base, timeouts: { tcp: '1m30' } }, 'timeouts.tcp', /duration/);
});

test('a kube-proxy ipvs: section sets the default scheduler (rr), timeouts (0 keeps), sync periods and excludeCIDRs', () => {
  const cfg = validateConfig({
    ...base,
    ipvs: {
      scheduler: '',
      syncPeriod: '30s',
      minSyncPeriod: '2s',
      tcpTimeout: '0s',
      tcpFinTimeout: '30s',
      udpTimeout: '60s',
      excludeCIDRs: ['10.96.0.128/25'],
      strictARP: true,
    },
    services: [{ address: '10.96.0.10', port: 80 }],
  });
  assert.equal(cfg.services[0]!.scheduler, 'rr');
  assert.deepEqual([cfg.timeouts.tcp.ESTABLISHED, cfg.timeouts.tcp.FIN_WAIT, cfg.timeouts.udp], [900, 30, 60]);
  assert.deepEqual(cfg.reload, { watch: true, syncPeriod: 30, minInterval: 2 });
  assert.deepEqual(cfg.kubeProxy, { excludeCIDRs: ['10.96.0.128/25'], strictARP: true });
  assert.equal(
    validateConfig({ ...base, ipvs: { scheduler: 'wrr' }, services: [{ address: '10.96.0.10', port: 80 }] }).services[0]!.scheduler,
    'wrr',
  );
  rejects({ ...base, ipvs: { scheduler: 'nope' } }, 'ipvs.scheduler', /unknown scheduler/);
  rejects({ ...base, ipvs: { tcpTimeout: '10s' }, timeouts: { tcp: 5 } }, 'ipvs.tcpTimeout', /conflicts with timeouts.tcp/);
  rejects({ ...base, ipvs: { masqueradeAll: true } }, 'ipvs.masqueradeAll', /unknown field/);
  const doc = { ...base, ipvs: { tcpTimeout: '10s' } };
  validateConfig(doc);
  assert.deepEqual(validateConfig(doc).timeouts.tcp.ESTABLISHED, 10, 'validation does not change the document');
});

test('kubeProxyConfigFile takes the ipvs: section of a KubeProxyConfiguration file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uvs-kp-'));
  writeFileSync(
    join(dir, 'kube-proxy.yaml'),
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  scheduler: wrr\n  udpTimeout: 2m0s\n',
  );
  writeFileSync(
    join(dir, 'uvs.yaml'),
    'kubeProxyConfigFile: kube-proxy.yaml\ndataplane:\n  vipCidrs: [10.96.0.0/24]\nservices:\n  - { address: 10.96.0.10, port: 80 }\n',
  );
  const cfg = loadConfigFile(join(dir, 'uvs.yaml'));
  assert.equal(cfg.services[0]!.scheduler, 'wrr');
  assert.equal(cfg.timeouts.udp, 120);
  writeFileSync(join(dir, 'bad.yaml'), 'kind: Deployment\n');
  writeFileSync(join(dir, 'uvs2.yaml'), 'kubeProxyConfigFile: bad.yaml\ndataplane:\n  vipCidrs: [10.96.0.0/24]\n');
  assert.throws(() => loadConfigFile(join(dir, 'uvs2.yaml')), /not a KubeProxyConfiguration/);
});

test("SCTP services are accepted; timeouts.sctp defaults to the kernel's per-state timeouts and takes any state by name", () => {
  const cfg = validateConfig({ ...base, services: [svc({ protocol: 'sctp', port: 3868 })] });
  assert.equal(cfg.services[0]!.protocol, 'sctp');
  assert.equal(cfg.services[0]!.name, 'sctp/10.96.0.10:3868');
  assert.deepEqual(
    [
      cfg.timeouts.sctp.ESTABLISHED,
      cfg.timeouts.sctp.INIT1,
      cfg.timeouts.sctp.COOKIE_ECHOED,
      cfg.timeouts.sctp.REJECTED,
      cfg.timeouts.sctp.NONE,
    ],
    [900, 4, 61, 4, 2],
  );
  const t = validateConfig({ ...base, timeouts: { sctp: { ESTABLISHED: '1h', SHUTDOWN_ACK_SENT: 5 } } }).timeouts.sctp;
  assert.deepEqual([t.ESTABLISHED, t.SHUTDOWN_ACK_SENT, t.CLOSED], [3600, 5, 61]);
  rejects(
    { ...base, timeouts: { sctp: { 'C-SENT': 10 } } },
    'timeouts.sctp.C-SENT',
    /unknown field \(allowed: NONE, INIT1, INIT, COOKIE_SENT/,
  );
  rejects({ ...base, timeouts: { sctp: { ESTABLISHED: -1 } } }, 'timeouts.sctp.ESTABLISHED', /between 0 and/);
  // One protocol's service does not collide with another's on the same address and port.
  assert.equal(validateConfig({ ...base, services: [svc({ port: 3868 }), svc({ protocol: 'sctp', port: 3868 })] }).services.length, 2);
});

for (const { field, values, bad, msg, what } of [
  { field: 'io', values: ['auto', 'io_uring', 'poll'], bad: 'epoll', msg: 'must be auto, io_uring or poll', what: 'the worker I/O path' },
  { field: 'steering', values: ['auto', 'ebpf', 'automq'], bad: 'rss', msg: 'must be auto, ebpf or automq', what: 'the queue steering' },
] as const) {
  test(`dataplane.${field} picks ${what}: auto by default, ${values.slice(1).join(' or ')}; anything else is named`, () => {
    assert.equal(validateConfig({ ...base, services: [svc()] }).dataplane[field], 'auto');
    for (const v of values)
      assert.equal(validateConfig({ dataplane: { ...base.dataplane, [field]: v }, services: [svc()] }).dataplane[field], v);
    rejects(
      { dataplane: { ...base.dataplane, [field]: bad }, services: [svc()] },
      `dataplane.${field}`,
      new RegExp(`${msg}, got "${bad}"`),
    );
    rejects({ dataplane: { ...base.dataplane, [field]: true }, services: [svc()] }, `dataplane.${field}`, new RegExp(msg));
  });
}

test('proxyProtocol: per service (the default of its servers) or per real server, full-NAT TCP only, refused elsewhere with the reason', () => {
  const fb = { dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] } } };
  const cfg = validateConfig({
    ...fb,
    services: [
      svc({
        forwarding: 'fullnat',
        proxyProtocol: 'v2',
        realServers: [
          { address: '10.0.0.1' },
          { address: '10.0.0.2', proxyProtocol: 'v1' },
          { address: '10.0.0.3', proxyProtocol: 'none' },
        ],
      }),
    ],
  });
  assert.deepEqual(
    cfg.services[0]!.realServers.map((r) => r.proxyProtocol),
    ['v2', 'v1', undefined],
  );
  assert.equal(cfg.services[0]!.proxyProtocol, 'v2');
  assert.equal(
    validateConfig({ ...fb, services: [svc({ forwarding: 'fullnat' })] }).services[0]!.realServers[0]!.proxyProtocol,
    undefined,
    'absent: none',
  );
  rejects(
    { ...fb, services: [svc({ forwarding: 'fullnat', proxyProtocol: 'v3' })] },
    'services[0].proxyProtocol',
    /must be "v1", "v2" or "none", got "v3"/,
  );
  rejects(
    { ...fb, services: [svc({ proxyProtocol: 'v2' })] },
    'services[0].proxyProtocol',
    /needs forwarding fullnat, real server 10.0.0.1:8080 uses masq: it already sees the client's address \(give it proxyProtocol: none\)/,
  );
  rejects(
    { ...fb, services: [svc({ forwarding: 'fullnat', realServers: [{ address: '10.0.0.1', forwarding: 'masq', proxyProtocol: 'v1' }] })] },
    'services[0].realServers[0].proxyProtocol',
    /needs forwarding fullnat.*uses masq/,
  );
  rejects(
    {
      ...fb,
      dataplane: { ...fb.dataplane, tunnelSource: '10.1.1.1' },
      services: [svc({ forwarding: 'tunnel', port: 80, realServers: [{ address: '10.0.0.1', proxyProtocol: 'v2' }] })],
    },
    'services[0].realServers[0].proxyProtocol',
    /uses tunnel: its replies do not pass uvs/,
  );
  rejects(
    { ...fb, services: [svc({ protocol: 'udp', forwarding: 'fullnat', proxyProtocol: 'v2' })] },
    'services[0].proxyProtocol',
    /for TCP services \(this one is udp\)/,
  );
  // A masq server of a full-NAT service with a default version can opt out.
  assert.equal(
    validateConfig({
      ...fb,
      services: [
        svc({
          forwarding: 'fullnat',
          proxyProtocol: 'v2',
          realServers: [{ address: '10.0.0.1', forwarding: 'masq', proxyProtocol: 'none' }],
        }),
      ],
    }).services[0]!.realServers[0]!.proxyProtocol,
    undefined,
  );
});

test('a default obeys the rules a given value does, and errors name the field the document has', () => {
  // healthCheck.timeout defaults to 1 s, which does not fit an interval of 0.5 s.
  rejects(
    { ...base, services: [svc({ healthCheck: { interval: 0.5 } })] },
    'services[0].healthCheck.timeout',
    /at most the interval \(0.5 s\)/,
  );
  assert.equal(
    validateConfig({ ...base, services: [svc({ healthCheck: { interval: 0.5, timeout: 0.2 } })] }).services[0]!.healthCheck!.timeout,
    0.2,
  );
  rejects({ ...base, api: { listen: 'nowhere', token: 'x'.repeat(16) } }, 'api.listen', /must be host:port/);
  rejects(
    { ...base, redis: { url: 'redis://r:6379', sentinels: [{ host: 'r' }] } },
    'redis',
    /exactly one of url, sentinels \(with name\) or cluster; got url, sentinels/,
  );
  rejects({ ...base, redis: { sentinels: [{ host: 'r' }] } }, 'redis.name', /is required/);
});
