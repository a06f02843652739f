/**
 * uvsd's life as the README tells it, against a real uvsd in the namespace lab (a real
 * redis-server on the LB namespace's own loopback, curl and node sockets as clients):
 * every metric name the README lists is exported; `uvsadm --reload` applies a changed file and
 * rejects a bad one (while a file change alone, with the watch off, changes nothing); `/livez`
 * answers 503 while a killed worker is restarted, then 200; TCP health checks quiesce and restore
 * a TCP and an SCTP service's servers; kube-proxy's `syncPeriod` reloads the file by itself and
 * `excludeCIDRs` keeps runtime services in its ranges across those reloads; `uvsadm --maintenance
 * wait` waits for 2 s without a packet; a SIGTERM stop removes every route, the blackholes of both
 * families included; a SIGKILLed uvsd leaves its blackholes (IPv4 and IPv6) to drop the traffic
 * its rules and VIP ranges still catch, `uvsd --cleanup` removes them with the rest, and a new
 * uvsd cleans up by itself.
 * The tests run in order and share the lab (one file: one lab, ~1 minute).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { HealthResponse, MaintenanceResponse, ServicesResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { hasCommand, Lab, LAB_VIP, LAB_VIP_CIDR, LAB_VIP6_CIDR, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const UVSADM = join(ROOT, 'dist', 'control', 'uvsadm.js');
const UVSD = join(ROOT, 'dist', 'control', 'uvsd.js');
const isRoot = process.getuid?.() === 0;
const skip = !isRoot
  ? 'integration tests need root (network namespaces, TUN)'
  : !hasCommand('redis-server')
    ? 'redis-server missing'
    : false;

/** The metric names the README's "Metrics and health" section lists (labels in braces dropped). */
function readmeMetricNames(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('### Metrics and health');
  const end = readme.indexOf('\n### ', start + 1);
  assert.ok(start > 0 && end > start, 'the README has a Metrics and health section');
  const names = new Set<string>();
  for (const m of readme.slice(start, end).matchAll(/`((?:uvs|node_ipvs)_[a-z0-9_]+)(?:\{[^`]*\})?`/g)) names.add(m[1]!);
  return [...names];
}

describe('uvsd from start to cleanup', { skip, timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvl${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  const hc = { type: 'tcp', interval: 0.3, timeout: 0.3, rise: 2, fall: 2 };
  const baseServices = [
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      scheduler: 'rr',
      healthCheck: hc,
      realServers: rs.map((a) => ({ address: a, port: 8080 })),
    },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 5353 })) },
    // No SCTP client exists here; the check is TCP, on the servers' TCP echo port.
    {
      protocol: 'sctp',
      address: LAB_VIP,
      port: 3868,
      scheduler: 'rr',
      healthCheck: { ...hc, port: 9007 },
      realServers: rs.map((a) => ({ address: a, port: 3868 })),
    },
  ];
  const redis = { url: 'redis://127.0.0.1:6379', nodeId: 'life' };
  let configFile = '';
  const write = (services: unknown[], extra: Record<string, unknown> = {}) =>
    writeFileSync(configFile, stringify(lab.config(services, { redis, reload: { watch: false }, ...extra })));

  const api = <T>(method: string, path: string, body?: unknown) => apiCall<T>(lab.socket, method, path, body);
  const services = async () => (await api<ServicesResponse>('GET', '/v1/services')).body.services;
  const hasService = async (address: string, port: number) => (await services()).some((s) => s.address === address && s.port === port);
  const uvsadm = (...args: string[]) =>
    spawnSync(process.execPath, [UVSADM, '--socket', lab.socket, ...args], { encoding: 'utf8', timeout: 30_000 });
  const scrape = () => lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);
  const sample = (text: string, re: string) => Number(new RegExp(`^${re} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  const waitFor = async (what: string, fn: () => boolean | Promise<boolean>, timeoutMs = 20_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await fn())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(100);
    }
  };
  const curl = () => lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}/`]).split('\n')[0];
  const rules = (pref: number) =>
    lab
      .ip(lab.lbNs, ['rule', 'show', 'pref', String(pref)])
      .split('\n')
      .filter(Boolean);
  /** uvs's nftables table as `nft -j` lists it, or null when there is none. */
  const nftTable = (): { set?: { name: string; elem?: unknown[] } }[] | null => {
    const r = spawnSync('ip', ['netns', 'exec', lab.lbNs, 'nft', '-j', 'list', 'table', 'inet', 'uvs_uvs0'], { encoding: 'utf8' });
    if (r.status !== 0) return null;
    return (JSON.parse(r.stdout) as { nftables: { set?: { name: string; elem?: unknown[] } }[] }).nftables;
  };
  /** Elements of the reply and ICMP sets (one per masq server address:port, one per server address). */
  const replyElements = () => (nftTable() ?? []).reduce((n, o) => n + (o.set?.elem?.length ?? 0), 0);
  /** Routes of one family in a table (main by default), one line each. */
  const routes = (family: 4 | 6, ...sel: string[]) =>
    lab
      .ip(lab.lbNs, [`-${family}`, 'route', 'show', ...sel])
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  /** Both VIP ranges, so that uvsd installs its routes and blackholes for IPv6 too. */
  const dualStack = { dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR] } };
  /**
   * uvsd's blackholes (lb/dataplane.ts, docs/failover.md): each VIP range in the main table and a
   * default in the reply table 4711 (dataplane.routeTable), both families, metric 4294967295.
   */
  const blackholes = () => ({
    main4: routes(4, 'type', 'blackhole'),
    main6: routes(6, 'type', 'blackhole'),
    reply4: routes(4, 'table', '4711', 'type', 'blackhole'),
    reply6: routes(6, 'table', '4711', 'type', 'blackhole'),
  });
  const allBlackholes = {
    main4: ['blackhole 10.200.0.0/24 metric 4294967295'],
    main6: ['blackhole fd00:200::/64 dev lo metric 4294967295 pref medium'],
    reply4: ['blackhole default metric 4294967295'],
    reply6: ['blackhole default dev lo metric 4294967295 pref medium'],
  };
  const noBlackholes = { main4: [], main6: [], reply4: [], reply6: [] };

  before(async () => {
    lab.up();
    await lab.waitServers();
    // Redis on the LB namespace's own loopback: private to this lab, gone with it.
    lab.spawn(lab.lbNs, 'redis-server', ['--port', '6379', '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']).unref();
    configFile = join(lab.dir, 'uvs.yaml');
    write(baseServices);
    await lab.startUvsd(configFile);
    await waitFor('uvsd connected to Redis', () => /^uvs_redis_connected 1$/m.test(scrape()), 60_000);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('every metric the README lists is exported by a live uvsd (with Redis), and every uvs_ metric exported is listed', () => {
    const listed = readmeMetricNames();
    assert.ok(listed.length >= 60, `${listed.length} names found in the README`);
    const text = scrape();
    const exported = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
    assert.deepEqual(
      listed.filter((n) => !exported.has(n)),
      [],
      'listed in the README but not exported',
    );
    const ours = [...exported].filter((n) => n.startsWith('uvs_') || n.startsWith('node_ipvs_'));
    assert.deepEqual(
      ours.filter((n) => !listed.includes(n)),
      [],
      'exported but not in the README',
    );
  });

  test('uvsadm --reload applies a changed file (a file change alone does nothing with the watch off) and refuses a bad one', async () => {
    const before = scrape();
    const ok0 = sample(before, 'uvs_config_reloads_total\\{result="ok"\\}');
    const failed0 = sample(before, 'uvs_config_reloads_total\\{result="failed"\\}');
    const extra = { protocol: 'tcp', address: LAB_VIP, port: 81, scheduler: 'wrr', realServers: [{ address: rs[0], port: 8080 }] };
    write([...baseServices, extra]);
    await sleep(1500);
    assert.equal(await hasService(LAB_VIP, 81), false, 'reload.watch: false — the file is not read by itself');
    const r = uvsadm('--reload');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /configuration reloaded/);
    assert.equal(await hasService(LAB_VIP, 81), true);
    assert.match(uvsadm('-Ln').stdout, /TCP {2}10\.200\.0\.10:81 wrr/);
    assert.equal(
      lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}:81/`]).split('\n')[0],
      'rs1',
      'the new service carries traffic',
    );

    // A bad file: refused with the field and the reason; the running configuration stays.
    const bad = structuredClone(baseServices) as { realServers: { weight?: number }[] }[];
    bad[0]!.realServers[1]!.weight = -1;
    write(bad);
    const b = uvsadm('--reload');
    assert.notEqual(b.status, 0);
    assert.match(b.stderr, /services\[0\]\.realServers\[1\]\.weight/);
    assert.match(b.stderr, /between 0 and 65535, got -1/);
    assert.equal(await hasService(LAB_VIP, 81), true, 'the running configuration is kept');
    const after = scrape();
    assert.equal(sample(after, 'uvs_config_reloads_total\\{result="ok"\\}'), ok0 + 1);
    assert.equal(sample(after, 'uvs_config_reloads_total\\{result="failed"\\}'), failed0 + 1);
    // Back to the base file: :81's server had a connection, so it drains (weight 0) before it goes.
    write(baseServices);
    assert.equal(uvsadm('--reload').status, 0);
    const gone = (await services()).find((s) => s.port === 81);
    assert.ok(gone === undefined || gone.realServers.every((r) => r.weight === 0), 'removed, or draining');
  });

  test('/livez answers 503 while a killed worker is down and 200 once it is restarted; traffic goes on', async () => {
    assert.equal(lab.exec(lab.lbNs, 'curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', 'http://127.0.0.1:10256/livez']), '200');
    // A poller in the LB namespace asks /livez back to back (one kept-alive connection) and
    // records every change of answer; uvsadm kills worker 0 while it runs.
    const poller = `
      const http = require('http');
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      const seen = []; let last = 0; const end = Date.now() + Number(process.argv[1]);
      const one = () => {
        if (Date.now() > end) { console.log(JSON.stringify(seen)); process.exit(0); }
        http.get({ host: '127.0.0.1', port: 10256, path: '/livez', agent }, (res) => {
          let b = ''; res.on('data', (d) => (b += d));
          res.on('end', () => { if (res.statusCode !== last) { last = res.statusCode; seen.push([res.statusCode, JSON.parse(b)]); } one(); });
        }).on('error', (e) => { seen.push([e.code, null]); setTimeout(one, 5); });
      };
      one();`;
    const p = spawn('ip', ['netns', 'exec', lab.lbNs, process.execPath, '-e', poller, '6000'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise<void>((r) => p.once('exit', () => r()));
    await sleep(1500);
    const k = uvsadm('--kill-worker', '0');
    assert.equal(k.status, 0, k.stderr);
    await done;
    const seen = JSON.parse(out) as [number, { healthy: boolean; workers: { id: number; up: boolean; restarts: number }[] }][];
    assert.deepEqual(
      seen.map(([s]) => s),
      [200, 503, 200],
      `answers seen: ${JSON.stringify(seen.map(([s, b]) => [s, b?.workers]))}`,
    );
    const down = seen[1]![1];
    assert.equal(down.healthy, false);
    assert.deepEqual(down.workers.find((w) => w.id === 0)!.up, false);
    const up = seen[2]![1];
    assert.deepEqual(
      up.workers.map((w) => [w.id, w.up, w.restarts]),
      [
        [0, true, 1],
        [1, true, 0],
      ],
    );
    assert.equal(sample(scrape(), 'uvs_worker_restarts_total\\{worker="0"\\}'), 1);
    for (let i = 0; i < 4; i++) assert.match(curl() ?? '', /^rs\d$/, 'traffic after the restart');
  });

  test('TCP health checks quiesce a dead server in a TCP service and an SCTP service, and restore it', async () => {
    const view = async (port: number) => (await services()).find((s) => s.port === port)!.realServers.find((r) => r.address === rs[0])!;
    await waitFor('first checks', async () => (await api<HealthResponse>('GET', '/v1/health')).body.checks.every((c) => c.checks > 0));
    assert.deepEqual([(await view(80)).weight, (await view(3868)).weight], [1, 1]);
    lab.stopServer(0); // rs1's HTTP (8080) and TCP echo (9007) refuse from now on
    await waitFor('rs1 quiesced in both services', async () => !(await view(80)).healthy && !(await view(3868)).healthy);
    assert.deepEqual([(await view(80)).weight, (await view(3868)).weight], [0, 0]);
    assert.equal(
      (await services()).find((s) => s.port === 53)!.realServers.find((r) => r.address === rs[0])!.weight,
      1,
      'a service without checks is untouched',
    );
    for (let i = 0; i < 6; i++) assert.notEqual(curl(), 'rs1');
    lab.startServer(0);
    await waitFor('rs1 restored', async () => (await view(80)).healthy && (await view(3868)).healthy);
    assert.deepEqual([(await view(80)).weight, (await view(3868)).weight], [1, 1]);
  });

  test('kube-proxy syncPeriod: the file is re-applied every period by itself; excludeCIDRs keep runtime services in their ranges', async () => {
    await lab.stopUvsd();
    const kube = { ipvs: { syncPeriod: '2s', minSyncPeriod: '0s', excludeCIDRs: ['10.200.0.128/25'] } };
    write(baseServices, kube);
    await lab.startUvsd(configFile);
    const reloads = () => sample(scrape(), 'uvs_config_reloads_total\\{result="ok"\\}');
    // Counts file reloads and API edits alike (uvs_config_reloads_total{result="ok"}).
    const applied = async () => (await api<StatsResponse>('GET', '/v1/stats')).body.reloads.ok;
    // Runtime services, as kube-proxy's peers or an operator add them: one in the excluded range.
    // A periodic reload can come between an add and the look (removing 10.200.0.20 is the point
    // of this test), and on a loaded machine two uvsadm runs can take longer than the 2 s period.
    // So: add what is missing and look, until one round has no periodic reload in it (only our
    // own edits counted); in that round both must be there.
    const runtime = ['10.200.0.200', '10.200.0.20'];
    await waitFor(
      'a round of uvsadm -A with no periodic reload in it',
      async () => {
        const before = await applied();
        let edits = 0;
        for (const vip of runtime) {
          if (await hasService(vip, 80)) continue; // a reload only removes; what is missing stays missing
          const r = uvsadm('-A', '-t', `${vip}:80`, '-s', 'rr');
          assert.equal(r.status, 0, r.stderr);
          edits++;
        }
        const seen = await Promise.all(runtime.map((vip) => hasService(vip, 80)));
        if ((await applied()) !== before + edits) return false; // a periodic reload came in between: again
        assert.deepEqual(seen, [true, true], 'both runtime services are there right after uvsadm -A');
        return true;
      },
      60_000,
    );
    // The file changes with no signal, no watch, no API call.
    const extra = { protocol: 'tcp', address: LAB_VIP, port: 82, scheduler: 'rr', realServers: [{ address: rs[1], port: 8080 }] };
    write([...baseServices, extra], kube);
    await waitFor('the syncPeriod reload', () => hasService(LAB_VIP, 82), 30_000);
    const n = reloads();
    await waitFor('another period', () => reloads() >= n + 1, 30_000);
    assert.equal(await hasService('10.200.0.20', 80), false, 'outside excludeCIDRs: removed, as the file does not have it');
    assert.equal(await hasService('10.200.0.200', 80), true, 'inside excludeCIDRs: kept across reloads');
  });

  test('uvsadm --maintenance wait returns only after 2 s without a packet, however long the traffic goes on', async () => {
    await lab.stopUvsd();
    write(baseServices, { dataplane: { announceTable: 4712 } }); // maintenance needs an announcement to withdraw
    await lab.startUvsd(configFile);
    const on = uvsadm('--maintenance', 'on');
    assert.equal(on.status, 0, on.stderr);
    // A client keeps sending datagrams to the UDP service (every 50 ms for 1.5 s) and prints the
    // time of its last one: nothing reaches uvsd after that, so wait may not return before + 2 s.
    const sender = `
      const d = require('dgram').createSocket('udp4');
      const end = Date.now() + 1500; let last = 0;
      const t = setInterval(() => {
        if (Date.now() > end) { clearInterval(t); d.close(); console.log('last ' + last); return; }
        d.send('x', 53, '${LAB_VIP}');
        if (last === 0) console.log('started');
        last = Date.now();
      }, 50);`;
    const p = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, '-e', sender], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    try {
      await waitFor('packets reaching uvsd', async () => {
        const m = (await api<MaintenanceResponse>('GET', '/v1/maintenance')).body;
        return out.includes('started') && m.idleSeconds < 0.5;
      });
      const w = await new Promise<{ code: number | null; stdout: string; at: number }>((resolve) => {
        const c = spawn(process.execPath, [UVSADM, '--socket', lab.socket, '--maintenance', 'wait'], {
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        let o = '';
        c.stdout.on('data', (d: Buffer) => (o += d.toString()));
        c.once('exit', (code) => resolve({ code, stdout: o, at: Date.now() }));
      });
      await exited;
      const last = Number(/^last (\d+)$/m.exec(out)?.[1]);
      assert.ok(last > 0, `the sender's output: ${out}`);
      assert.equal(w.code, 0, w.stdout);
      assert.ok(w.at - last >= 2000, `wait returned ${w.at - last} ms after the last datagram was sent`);
      const idle = Number(/last packet (\d+\.\d) s ago/.exec(w.stdout)?.[1]);
      assert.ok(idle >= 2, `uvsadm said: ${w.stdout}`);
    } finally {
      p.kill();
      const off = uvsadm('--maintenance', 'off');
      assert.equal(off.status, 0, off.stderr);
    }
  });

  test('a SIGTERM stop removes the blackholes of both families, the VIP ranges in the main table included', async () => {
    await lab.stopUvsd();
    write(baseServices, dualStack);
    await lab.startUvsd(configFile);
    assert.deepEqual(blackholes(), allBlackholes, 'a running uvsd has its blackholes behind its routes');
    assert.equal(await lab.stopUvsd(), 0, 'SIGTERM: a clean exit');
    assert.deepEqual(blackholes(), noBlackholes, 'nothing left in the main table or table 4711');
    assert.deepEqual([routes(4, 'table', '4711'), routes(6, 'table', '4711')], [[], []]);
    assert.deepEqual(
      [...routes(4), ...routes(6)].filter((l) => /10\.200\.0\.|fd00:200::\/|uvs0/.test(l)),
      [],
      'no VIP range route left',
    );
  });

  test('uvsd --cleanup removes what a SIGKILLed uvsd left; a new uvsd cleans up by itself and starts', async () => {
    await lab.stopUvsd();
    write(baseServices, dualStack);
    const child = await lab.startUvsd(configFile);
    assert.deepEqual(rules(4711), [], 'no rule per real server: nftables sets hold them');
    const fresh = replyElements();
    assert.ok(fresh >= 6, `reply elements installed: ${fresh}`);
    assert.equal(rules(4710).length, 1, 'the device rule');
    assert.match(rules(4709).join('\n'), /fwmark 0x2\/0x2 lookup 4711/, 'the into-device rule (replies and replays)');
    // Someone else's rules at the same priorities: cleanup removes uvsd's rules, not these.
    lab.ip(lab.lbNs, ['rule', 'add', 'pref', '4709', 'fwmark', '0x1234', 'lookup', 'main']);
    lab.ip(lab.lbNs, ['rule', 'add', 'pref', '4710', 'from', '192.0.2.77', 'lookup', 'main']);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    assert.equal(replyElements(), fresh, 'a killed uvsd leaves its nftables table behind');
    assert.equal(rules(4709).length, 2, 'and its rule');
    // …and its blackholes, which now drop what those rules and the VIP ranges still catch (the
    // device and its routes went with the process), IPv6 as IPv4.
    assert.deepEqual(blackholes(), allBlackholes, 'a killed uvsd leaves its blackholes behind, both families');

    const c = spawnSync('ip', ['netns', 'exec', lab.lbNs, process.execPath, UVSD, '--cleanup', '--config', configFile], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(c.status, 0, c.stderr);
    assert.match(c.stdout, /removed uvs0/);
    assert.deepEqual(rules(4711), []);
    assert.equal(nftTable(), null, 'the nftables table is gone');
    assert.equal(rules(4710).length, 1, `only the foreign rule is left at 4710: ${rules(4710).join('; ')}`);
    assert.match(rules(4710)[0]!, /from 192\.0\.2\.77 lookup main/);
    assert.equal(rules(4709).length, 1, `only the foreign rule is left at 4709: ${rules(4709).join('; ')}`);
    assert.match(rules(4709)[0]!, /fwmark 0x1234 lookup main/);
    lab.ip(lab.lbNs, ['rule', 'del', 'pref', '4709', 'fwmark', '0x1234', 'lookup', 'main']);
    lab.ip(lab.lbNs, ['rule', 'del', 'pref', '4710', 'from', '192.0.2.77', 'lookup', 'main']);
    assert.deepEqual([routes(4, 'table', '4711'), routes(6, 'table', '4711')], [[], []]);
    assert.deepEqual(blackholes(), noBlackholes, '--cleanup removes the blackholes, the main table ones too');
    assert.equal(spawnSync('ip', ['-n', lab.lbNs, 'link', 'show', 'uvs0']).status, 1, 'no device');

    // Killed again, and started again without --cleanup: it removes the leftovers itself.
    const again = await lab.startUvsd(configFile);
    again.kill('SIGKILL');
    await new Promise((r) => again.once('exit', r));
    assert.equal(replyElements(), fresh);
    await lab.startUvsd(configFile);
    assert.equal(replyElements(), fresh, 'the same elements, once each');
    assert.equal(rules(4710).length, 1);
    assert.equal(rules(4709).length, 1);
    assert.match(readFileSync(join(lab.dir, 'uvsd.log'), 'utf8'), /removing rules and routes a previous uvsd left behind/);
    await waitFor('traffic', () => /^rs\d$/.test(curl() ?? ''), 10_000);
  });

  test('what another tool removes — nft flush ruleset, ip rules, the reply and VIP routes — uvsd restores and counts', async () => {
    await lab.stopUvsd();
    write(baseServices, { dataplane: { ...dualStack.dataplane, resyncInterval: 0.5 } });
    await lab.startUvsd(configFile);
    await waitFor('traffic', () => /^rs\d$/.test(curl() ?? ''), 10_000);
    const fresh = replyElements();
    const before = { rules4709: rules(4709), table4: routes(4, 'table', '4711'), main4: routes(4).filter((l) => l.includes('uvs0')) };
    const stats = async () => (await api<StatsResponse>('GET', '/v1/stats')).body.node;
    assert.deepEqual(await stats(), { replies: { path: 'nftables', reason: null }, repairs: { nftables: 0, rules: 0, routes: 0 } });

    lab.exec(lab.lbNs, 'nft', ['flush', 'ruleset']);
    lab.ip(lab.lbNs, ['rule', 'del', 'pref', '4709', 'lookup', '4711']);
    lab.ip(lab.lbNs, ['-6', 'rule', 'del', 'pref', '4710', 'iif', 'uvs0']);
    lab.ip(lab.lbNs, ['route', 'del', 'default', 'dev', 'uvs0', 'table', '4711']);
    lab.ip(lab.lbNs, ['route', 'del', LAB_VIP_CIDR, 'dev', 'uvs0']);
    assert.equal(nftTable(), null);
    await waitFor(
      'every repair counted',
      async () => {
        const r = (await stats()).repairs;
        return r.nftables >= 1 && r.rules >= 1 && r.routes >= 1;
      },
      15_000,
    );
    assert.equal(replyElements(), fresh, 'the table comes back with every element');
    assert.deepEqual(rules(4709), before.rules4709);
    assert.equal(lab.ip(lab.lbNs, ['-6', 'rule', 'show', 'pref', '4710']).trim().split('\n').length, 1);
    assert.deepEqual(routes(4, 'table', '4711'), before.table4);
    assert.deepEqual(
      routes(4).filter((l) => l.includes('uvs0')),
      before.main4,
    );
    await waitFor('traffic after the repair', () => /^rs\d$/.test(curl() ?? ''), 10_000);
    const m = scrape();
    assert.ok(sample(m, 'uvs_node_repairs_total\\{what="nftables"\\}') >= 1, 'uvs_node_repairs_total{what="nftables"}');
    assert.equal(sample(m, 'uvs_node_replies\\{path="nftables"\\}'), 1);
    assert.match(readFileSync(join(lab.dir, 'uvsd.log'), 'utf8'), /restored the nftables table someone removed or changed/);
    // Nothing more to repair: the counts stay.
    const settled = (await stats()).repairs;
    await sleep(1500);
    assert.deepEqual((await stats()).repairs, settled, 'a check that finds everything in place repairs nothing');
  });
  test('without nftables (one policy rule per masq server): rules someone removed are restored and counted', async () => {
    await lab.stopUvsd();
    // An `nft` that is not there: uvsd falls back to a rule per server (logged, shown in stats).
    const shim = mkdtempSync(join(tmpdir(), 'uvs-no-nft-'));
    writeFileSync(join(shim, 'nft'), '#!/bin/sh\necho "nft: not on this node (test)" >&2\nexit 1\n', { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${shim}:${path ?? ''}`;
    try {
      write(baseServices, { dataplane: { resyncInterval: 0.5 } });
      await lab.startUvsd(configFile);
    } finally {
      process.env.PATH = path;
    }
    try {
      await waitFor('traffic', () => /^rs\d$/.test(curl() ?? ''), 10_000);
      const stats = async () => (await api<StatsResponse>('GET', '/v1/stats')).body.node;
      assert.equal((await stats()).replies.path, 'rules');
      const perServer = rules(4711);
      assert.ok(perServer.length >= 2 * lab.rsAddrs.length, `a reply rule and an ICMP rule per masq server: ${perServer.join(' | ')}`);
      const repairs = (await stats()).repairs.rules;
      // Someone deletes them all (a hand, a script that cleans policy rules).
      while (spawnSync('ip', ['-n', lab.lbNs, 'rule', 'del', 'pref', '4711']).status === 0);
      assert.deepEqual(rules(4711), []);
      await waitFor('the rules back', () => rules(4711).length === perServer.length, 15_000);
      assert.deepEqual(rules(4711).sort(), [...perServer].sort(), 'the same rules, once each');
      assert.ok((await stats()).repairs.rules > repairs, 'the repair counted');
      await waitFor('traffic after the repair', () => /^rs\d$/.test(curl() ?? ''), 10_000);
      // Everything in place: nothing more is repaired.
      const settled = (await stats()).repairs;
      await sleep(1500);
      assert.deepEqual((await stats()).repairs, settled, 'a check that finds every rule repairs nothing');
    } finally {
      await lab.stopUvsd();
      rmSync(shim, { recursive: true, force: true });
    }
  });
});
