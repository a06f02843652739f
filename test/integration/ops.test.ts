/**
 * Operator features against a running uvsd in the namespace lab: ICMP echo health checks
 * (raw-socket), slow start of a returning real server, flow sampling read back with tcpdump.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ApiError, HealthResponse, ServicesResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { hasCommand, Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const UVSADM = join(ROOT, 'dist', 'control', 'uvsadm.js');
const isRoot = process.getuid?.() === 0;
const run = promisify(execFile);

describe('operator features: ping checks, slow start, flow sampling', {
  skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)',
  timeout: 600_000,
}, () => {
  const lab = new Lab({ prefix: `uvo${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  const rs6 = lab.rsAddrs6;
  // An address on rs1's link that nobody owns: no neighbour answers, so no echo reply.
  const silent = '10.200.11.99';
  const silent6 = 'fd00:200:11::99';
  const ping = { type: 'ping', interval: 0.3, timeout: 0.25, rise: 2, fall: 2 };
  const api = <T>(method: string, path: string, body?: unknown) => apiCall<T>(lab.socket, method, path, body);
  const servers = async (port: number, v6 = false) =>
    (await api<ServicesResponse>('GET', '/v1/services')).body.services.find((s) => s.port === port && s.address.includes(':') === v6)!
      .realServers;
  const checks = async () => (await api<HealthResponse>('GET', '/v1/health')).body.checks;
  const waitFor = async (what: string, fn: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await fn())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(100);
    }
  };
  const curlMany = (n: number, url = `http://${LAB_VIP}/`): Record<string, number> => {
    const text = lab.exec(lab.clientNs, 'sh', ['-c', `for i in $(seq ${n}); do curl -s -m 5 ${url} || echo FAIL; done`], 60000);
    const counts: Record<string, number> = {};
    for (const l of text.split('\n').filter(Boolean)) counts[l] = (counts[l] ?? 0) + 1;
    return counts;
  };
  const echoIgnore = (i: number, on: boolean) => {
    lab.exec(lab.rsNs[i]!, 'sysctl', ['-qw', `net.ipv4.icmp_echo_ignore_all=${on ? 1 : 0}`]);
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
    const cfg = lab.config(
      [
        {
          protocol: 'tcp',
          address: LAB_VIP,
          port: 80,
          scheduler: 'wrr',
          slowStart: 6,
          healthCheck: ping,
          realServers: rs.map((a) => ({ address: a, port: 8080, weight: 20 })),
        },
        {
          protocol: 'tcp',
          address: LAB_VIP,
          port: 81,
          scheduler: 'rr',
          healthCheck: ping,
          realServers: [
            { address: rs[0], port: 8080 },
            { address: silent, port: 8080 },
          ],
        },
        {
          protocol: 'tcp',
          address: LAB_VIP6,
          port: 80,
          scheduler: 'rr',
          healthCheck: ping,
          realServers: [
            { address: rs6[0], port: 8080 },
            { address: silent6, port: 8080 },
          ],
        },
      ],
      { dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR] } },
    );
    await lab.startUvsd(lab.writeConfig(cfg));
  });

  after(async () => {
    for (let i = 0; i < rs.length; i++) {
      try {
        echoIgnore(i, false);
      } catch {
        /* namespace gone */
      }
    }
    await lab.stopUvsd();
    lab.down();
  });

  test('ping checks: real servers that answer echo (IPv4 and IPv6) stay up, addresses that do not are quiesced', async () => {
    await waitFor('the silent addresses to be marked down', async () => (await checks()).filter((c) => !c.healthy).length === 2, 10_000);
    const all = await checks();
    const down = all
      .filter((c) => !c.healthy)
      .map((c) => c.realServer)
      .sort();
    assert.deepEqual(down, [`${silent}:8080`, `${silent6}:8080`].sort());
    for (const c of all.filter((x) => !x.healthy)) assert.equal(c.lastError, 'no echo reply within 250 ms');
    for (const c of all.filter((x) => x.healthy)) assert.equal(c.lastError, null, `${c.realServer} answers`);
    assert.equal(all.filter((c) => c.healthy).length, 5, 'rs1–rs3 on port 80, rs1 on 81, rs1 over IPv6');
    assert.equal((await servers(81)).find((r) => r.address === silent)!.weight, 0);
    assert.equal((await servers(80, true)).find((r) => r.address === silent6)!.weight, 0);
    assert.deepEqual(curlMany(4, `http://${LAB_VIP}:81/`), { rs1: 4 }, 'no request to the silent address');
  });

  test('a real server whose echo stops is quiesced; when it answers again its weight ramps over slowStart and so does its share', async () => {
    await waitFor(
      'port 80 checks',
      async () => (await checks()).filter((c) => c.realServer.endsWith(':8080') && c.checks > 2).length >= 3,
      10_000,
    );
    echoIgnore(2, true);
    await waitFor('rs3 down', async () => (await servers(80)).find((r) => r.address === rs[2])!.weight === 0, 10_000);
    assert.deepEqual(Object.keys(curlMany(6)).sort(), ['rs1', 'rs2']);
    echoIgnore(2, false);
    await waitFor('rs3 back', async () => (await servers(80)).find((r) => r.address === rs[2])!.healthy, 10_000);
    const first = (await servers(80)).find((r) => r.address === rs[2])!;
    assert.ok(first.weight < 20 && first.weight >= 1, `back with a ramp weight, got ${first.weight}`);
    assert.ok(first.slowStartUntil !== null);
    const listing = execFileSync(process.execPath, [UVSADM, '--socket', lab.socket, '-Ln'], { encoding: 'utf8' });
    const line = listing.split('\n').find((l) => l.includes(`${rs[2]}:8080`) && l.includes('Masq'))!;
    assert.ok(Number(line.trim().split(/\s+/)[3]) < 20, `-Ln shows the ramp weight: ${line}`);
    // Early share (weights about 1–8 of 48) against the share once the ramp is over (20 of 60).
    const early = curlMany(24);
    const seen = new Set<number>();
    await waitFor(
      'the end of the ramp',
      async () => {
        const w = (await servers(80)).find((r) => r.address === rs[2])!;
        seen.add(w.weight);
        return w.slowStartUntil === null && w.weight === 20;
      },
      20_000,
    );
    assert.ok(seen.size >= 3, `the weight went up in steps: ${[...seen].join(' ')}`);
    const late = curlMany(24);
    assert.ok((early.rs3 ?? 0) < (late.rs3 ?? 0), `ramping share ${JSON.stringify(early)} below the full one ${JSON.stringify(late)}`);
    assert.ok((early.rs3 ?? 0) <= 5, `early: ${JSON.stringify(early)}`);
    assert.equal(late.rs3, 8, `full weight: a third (${JSON.stringify(late)})`);
    const metrics = lab.exec(lab.lbNs, 'curl', ['-s', 'http://127.0.0.1:10249/metrics']);
    assert.match(
      metrics,
      new RegExp(
        `uvs_realserver_configured_weight\\{local_address="${LAB_VIP}",local_port="80",remote_address="${rs[2]}",remote_port="8080",proto="TCP",local_mark=""\\} 20`,
      ),
    );
  });

  test('a flow capture of a curl reads back with tcpdump: both directions, nothing else', {
    skip: hasCommand('tcpdump') ? false : 'tcpdump is not installed (scripts/ensure-deps.sh)',
  }, async () => {
    const file = join(lab.dir, 'flow.pcap');
    const cap = run(process.execPath, [
      UVSADM,
      '--socket',
      lab.socket,
      '--capture',
      '--flow',
      `protocol=tcp,address=${lab.clientAddr},port=41234`,
      '--seconds',
      '4',
      '-w',
      file,
    ]);
    await sleep(700);
    assert.match(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', '--local-port', '41234', `http://${LAB_VIP}/`]), /^rs\d/);
    curlMany(3); // other flows: not captured
    const { stderr } = await cap;
    assert.match(stderr, /captured \d+ packets \(0 lost to full rings\)/);
    const text = execFileSync('tcpdump', ['-nn', '-r', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const lines = text.trim().split('\n');
    assert.match(
      lines[0]!,
      new RegExp(`IP ${lab.clientAddr.replace(/\./g, '\\.')}\\.41234 > ${LAB_VIP.replace(/\./g, '\\.')}\\.80: Flags \\[S\\]`),
      text,
    );
    assert.ok(
      lines.some((l) => / IP 10\.200\.1\d\.2\.8080 > 10\.200\.1\.2\.41234: Flags \[S\.\]/.test(l)),
      `the server's SYN-ACK as it came back: ${text}`,
    );
    assert.ok(
      lines.some((l) => /HTTP: GET \/ HTTP\/1\.1/.test(l) || /Flags \[P\.\]/.test(l)),
      text,
    );
    assert.ok(
      lines.every((l) => l.includes('.41234')),
      `only the one flow: ${text}`,
    );
  });

  test('a 1-in-1 sample as JSON lines carries the decision: service, real server, state; a VIP port without service is answered', async () => {
    const cap = run(process.execPath, [
      UVSADM,
      '--socket',
      lab.socket,
      '--capture',
      '--sample',
      '1',
      '--format',
      'jsonl',
      '--seconds',
      '3',
      '--max-packets',
      '200',
    ]);
    await sleep(700);
    curlMany(1);
    lab.exec(lab.clientNs, 'sh', ['-c', `curl -s -m 2 http://${LAB_VIP}:82/ || true`]);
    const { stdout } = await cap;
    const recs = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const syn = recs.find((r) => r.dport === 80 && r.tcpFlags === 'SYN' && r.src === lab.clientAddr)!;
    assert.ok(syn, stdout);
    assert.equal(syn.verdict, 'forward');
    assert.equal(syn.service, `tcp ${LAB_VIP}:80`);
    assert.match(String(syn.realServer), /^10\.200\.1[123]\.2:8080$/);
    assert.equal(syn.state, 'SYN_RECV');
    assert.ok(
      recs.some((r) => r.state === 'ESTABLISHED' && r.verdict === 'forward'),
      'later packets of the flow',
    );
    const noSvc = recs.find((r) => r.dport === 82)!;
    assert.deepEqual([noSvc.verdict, noSvc.reason], ['reply', 'no_service'], JSON.stringify(noSvc));
    const busy = await Promise.all([
      api('POST', '/v1/capture', { sample: 1, seconds: 1 }),
      api<ApiError>('POST', '/v1/capture', { sample: 1, seconds: 1 }),
    ]);
    assert.deepEqual(busy.map((b) => b.status).sort(), [200, 409], 'one capture at a time');
    const bad = await api<ApiError>('POST', '/v1/capture', { sample: 1, seconds: 0 });
    assert.deepEqual([bad.status, bad.body.code], [400, 'UVS_ERR_API_BAD_REQUEST']);
  });
});
