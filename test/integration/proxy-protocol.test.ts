/**
 * PROXY protocol through full-NAT with a real PROXY-aware server: nginx from Debian (`listen …
 * proxy_protocol`) in a real-server namespace logs `$proxy_protocol_addr` — the client's address
 * uvs put in the header — while it sees only uvs's pool address as the peer. curl is the client.
 * Uploads and downloads of 24 MB each way (sha256 on both ends) prove that the sequence shift
 * holds for the whole flow: one byte off anywhere and nginx reads garbage or the transfer stalls.
 * Needs root and nginx (scripts/ensure-deps.sh installs it); skipped, and says why, otherwise.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { hasCommand, Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sleep } from '../../lab/lab';

const isRoot = process.getuid?.() === 0;
const skip = !isRoot
  ? 'integration tests need root (network namespaces, TUN)'
  : !hasCommand('nginx')
    ? 'nginx is not installed (scripts/ensure-deps.sh installs it)'
    : false;
const POOL = '10.200.99.1';
const POOL6 = 'fd00:200:99::1';
const MB = 1 << 20;

describe('PROXY protocol to nginx through full-NAT', { skip, timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvtp${process.pid % 100000}`, realServers: 1 });
  const rs = lab.rsAddrs[0]!;
  const rs6 = lab.rsAddrs6[0]!;
  const www = join(lab.dir, 'www');
  const accessLog = join(lab.dir, 'nginx-access.log');
  let nginx: ChildProcess | null = null;

  const services = [
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      scheduler: 'rr',
      forwarding: 'fullnat',
      proxyProtocol: 'v2',
      realServers: [{ address: rs, port: 8081 }],
    },
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 81,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: [{ address: rs, port: 8081, proxyProtocol: 'v1' }],
    },
    {
      protocol: 'tcp',
      address: LAB_VIP6,
      port: 80,
      scheduler: 'rr',
      forwarding: 'fullnat',
      proxyProtocol: 'v2',
      realServers: [{ address: rs6, port: 8081 }],
    },
    {
      protocol: 'tcp',
      address: LAB_VIP6,
      port: 81,
      scheduler: 'rr',
      forwarding: 'fullnat',
      proxyProtocol: 'v1',
      realServers: [{ address: rs6, port: 8081 }],
    },
  ];

  // One line per request: what the header said, who nginx's peer was, and what moved.
  const nginxConf = () => `
user root;
worker_processes 1;
pid ${join(lab.dir, 'nginx.pid')};
error_log ${join(lab.dir, 'nginx-error.log')} info;
events { worker_connections 256; }
http {
  log_format pp '$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port $remote_addr $request_method $request_uri $status $request_length $bytes_sent';
  access_log ${accessLog} pp;
  client_body_temp_path ${join(lab.dir, 'nginx-body')};
  proxy_temp_path ${join(lab.dir, 'nginx-proxy')};
  fastcgi_temp_path ${join(lab.dir, 'nginx-fastcgi')};
  uwsgi_temp_path ${join(lab.dir, 'nginx-uwsgi')};
  scgi_temp_path ${join(lab.dir, 'nginx-scgi')};
  client_max_body_size 0;
  server {
    listen ${rs}:8081 proxy_protocol fastopen=64;
    listen [${rs6}]:8081 proxy_protocol fastopen=64;
    root ${www};
    location /up/ { dav_methods PUT; create_full_put_path on; }
  }
}
`;

  const client = (cmd: string, args: string[], timeoutMs = 120_000) => lab.exec(lab.clientNs, cmd, args, timeoutMs);
  const url = (addr: string, port: number, path: string) => `http://${addr.includes(':') ? `[${addr}]` : addr}:${port}${path}`;
  /** curl from the client namespace; its own local port (what the header must name) and the HTTP status. */
  const curl = (args: string[], output = '/dev/null') => {
    const out = client('curl', ['-sS', '-m', '120', '-o', output, '-w', '%{local_port} %{http_code}', ...args]);
    const [port, code] = out.trim().split(' ');
    return { port: Number(port), code: Number(code) };
  };
  const logLines = () =>
    readFileSync(accessLog, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' '));
  const sha256 = (file: string) => lab.exec(lab.clientNs, 'sha256sum', [file]).split(' ')[0]!;
  const headers = async () => (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
  let configFile = '';

  before(async () => {
    lab.up();
    await lab.waitServers();
    mkdirSync(join(www, 'up'), { recursive: true });
    writeFileSync(join(www, 'index.html'), 'hello through PROXY protocol\n');
    const conf = join(lab.dir, 'nginx.conf');
    writeFileSync(conf, nginxConf());
    // TCP Fast Open on the server, without cookies (0x200): SYN data reaches nginx's stream, so a
    // header forged in a SYN's data would be read if uvs passed it on.
    lab.exec(lab.rsNs[0]!, 'sysctl', ['-qw', 'net.ipv4.tcp_fastopen=515']);
    nginx = lab.spawn(lab.rsNs[0]!, 'nginx', ['-c', conf, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'ignore'], detached: true });
    nginx.unref();
    const deadline = Date.now() + 15_000;
    while (!lab.exec(lab.rsNs[0]!, 'ss', ['-ltnH', 'sport = :8081']).includes('8081')) {
      if (Date.now() > deadline) throw new Error(`nginx did not listen; see ${join(lab.dir, 'nginx-error.log')}`);
      await sleep(100);
    }
    const cfg = lab.config(services, {
      dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR], fullnat: { addresses: [POOL, POOL6], portMin: 30000, portMax: 30999 } },
      reload: { watch: false },
    });
    configFile = lab.writeConfig(cfg);
    await lab.startUvsd(configFile);
    // The forging client's port range: its kernel, which owns no socket there, must not reset the server.
    const nft = join(lab.dir, 'forge.nft');
    writeFileSync(
      nft,
      'table inet forge {\n  chain out {\n    type filter hook output priority 0;\n    tcp sport 61000-61999 tcp flags & rst == rst drop\n  }\n}\n',
    );
    lab.exec(lab.clientNs, 'nft', ['-f', nft]);
    // The API socket is up before the first snapshot reaches the workers: wait for a first answer.
    const until = Date.now() + 15_000;
    for (;;) {
      try {
        if (curl([url(LAB_VIP, 80, '/')]).code === 200) break;
      } catch {
        /* not yet */
      }
      if (Date.now() > until) throw new Error(`no answer through uvsd; see ${join(lab.dir, 'uvsd.log')}`);
      await sleep(200);
    }
  });

  after(async () => {
    await lab.stopUvsd();
    nginx = null;
    lab.down(); // ends nginx with everything else in the namespaces
  });

  test('nginx logs the client address and port from the header, v1 and v2, IPv4 and IPv6; its peer is the pool address', () => {
    const cases: [string, number, string, string][] = [
      [LAB_VIP, 80, lab.clientAddr, POOL],
      [LAB_VIP, 81, lab.clientAddr, POOL],
      [LAB_VIP6, 80, lab.clientAddr6, POOL6],
      [LAB_VIP6, 81, lab.clientAddr6, POOL6],
    ];
    for (const [vip, port, want, pool] of cases) {
      const path = `/?case=${port}-${vip.includes(':') ? 6 : 4}`;
      const r = curl([url(vip, port, path)]);
      assert.equal(r.code, 200, `${vip}:${port}`);
      const line = logLines().find((l) => l[6] === path);
      assert.ok(line, `a log line for ${path}`);
      // $proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port $remote_addr …
      assert.deepEqual(line.slice(0, 5), [want, String(r.port), vip, String(port), pool], `${vip}:${port}: ${line.join(' ')}`);
    }
    const errors = readFileSync(join(lab.dir, 'nginx-error.log'), 'utf8');
    assert.doesNotMatch(errors, /broken header/, 'nginx read every header');
  });

  test('24 MB up and 24 MB down through one PROXY v2 flow each are sha256-identical (the shift holds for the whole flow)', async () => {
    const src = join(lab.dir, 'upload.bin');
    client('sh', ['-c', `head -c ${24 * MB} /dev/urandom > ${src}`]);
    const want = sha256(src);
    const before = (await headers()).proxyProtocolHeaders;
    const up = curl(['-T', src, url(LAB_VIP, 80, '/up/blob.bin')]);
    assert.equal(up.code, 201, 'PUT stored');
    assert.equal(sha256(join(www, 'up', 'blob.bin')), want, 'what nginx stored is what curl sent');
    const dst = join(lab.dir, 'download.bin');
    const down = curl([url(LAB_VIP, 80, '/up/blob.bin')], dst);
    assert.equal(down.code, 200);
    assert.equal(sha256(dst), want, 'what curl received is what nginx sent');
    client('rm', ['-f', dst]);
    // The same over IPv6 with PROXY v1 (a 50-byte text header: an odd shift).
    const up6 = curl(['-T', src, url(LAB_VIP6, 81, '/up/blob6.bin')]);
    assert.equal(up6.code, 201);
    assert.equal(sha256(join(www, 'up', 'blob6.bin')), want);
    const down6 = curl([url(LAB_VIP6, 81, '/up/blob6.bin')], dst);
    assert.equal(down6.code, 200);
    assert.equal(sha256(dst), want);
    client('rm', ['-f', dst]);
    const puts = logLines().filter((l) => l[5] === 'PUT');
    assert.deepEqual(
      puts.map((l) => [l[0], l[1], l[7]]),
      [
        [lab.clientAddr, String(up.port), '201'],
        [lab.clientAddr6, String(up6.port), '201'],
      ],
    );
    const st = await headers();
    assert.ok(
      st.proxyProtocolHeaders - before >= 4,
      `a header for each of the 4 connections (${st.proxyProtocolHeaders - before}; more only if one was resent)`,
    );
  });

  /**
   * A client with a raw socket (test/helpers/tcp-forge.py) sends its own PROXY header, built the
   * length of uvs's so that the old shift put it exactly on the header's place: ending at the
   * stream start, overlapping it, as SYN data (nginx takes Fast Open data here), or after uvs's
   * header went. Whatever it sends, nginx must log the client's real address for its request.
   */
  test('a client with a raw socket cannot forge the header: v1 and v2, IPv4 and IPv6, with and without the SYN proxy', async () => {
    const forge = join(__dirname, '..', '..', '..', 'test', 'helpers', 'tcp-forge.py');
    let sport = 61000;
    const tried: string[] = [];
    const run = (phase: string) => {
      for (const [vip, port, ver, src] of [
        [LAB_VIP, 80, 'v2', lab.clientAddr],
        [LAB_VIP, 81, 'v1', lab.clientAddr],
        [LAB_VIP6, 80, 'v2', lab.clientAddr6],
        [LAB_VIP6, 81, 'v1', lab.clientAddr6],
      ] as const) {
        for (const kind of ['end', 'overlap', 'syndata', 'after']) {
          const tag = `${phase}-${kind}-${ver}-${vip.includes(':') ? 6 : 4}`;
          const out = lab.exec(lab.clientNs, 'python3', [forge, src, vip, String(port), String(sport++), ver, kind, tag], 30_000);
          const r = JSON.parse(out.trim().split('\n').pop()!) as { status: string | null; synack: boolean };
          assert.ok(r.synack, `${tag}: the server answered the SYN`);
          tried.push(`${tag}: ${r.status}`);
          const line = logLines().find((l) => l[6] === `/index.html?forge=${tag}`);
          // The request either reached nginx behind uvs's header (logged with the real client) or
          // did not reach it at all; a forged address in the log is the failure.
          const forged = logLines().filter((l) => l[0] === '6.6.6.6' || l[0] === '66.66.6.66' || l[0] === '2001:db8::666');
          assert.deepEqual(forged, [], `${tag}: nginx read a forged header`);
          assert.ok(line, `${tag}: the request was served (${r.status}); tried: ${tried.join(', ')}`);
          assert.equal(line[0], src, `${tag}: ${line.join(' ')}`);
          assert.equal(r.status?.split(' ')[1], '200', `${tag}: ${r.status}`);
        }
      }
    };
    const before = await headers();
    run('plain');
    // The same with the SYN proxy on (services with PROXY protocol are not proxied: docs/defense.md).
    const cfg = lab.config(services, {
      dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR], fullnat: { addresses: [POOL, POOL6], portMin: 30000, portMax: 30999 } },
      defense: { synProxy: 3 },
      reload: { watch: false },
    });
    lab.writeConfig(cfg);
    const rl = await apiCall(lab.socket, 'POST', '/v1/reload', {});
    assert.equal(rl.status, 200, JSON.stringify(rl.body));
    run('synproxy');
    const st = await headers();
    const forgedDrops = (s: StatsResponse) => s.drops.proxy_protocol_forged ?? 0;
    assert.ok(forgedDrops(st) - forgedDrops(before) >= 16, `forged segments dropped and counted: ${forgedDrops(st) - forgedDrops(before)}`);
    assert.ok(st.proxyProtocolSynData - before.proxyProtocolSynData >= 8, 'SYN data held back and counted');
    const errors = readFileSync(join(lab.dir, 'nginx-error.log'), 'utf8');
    assert.doesNotMatch(errors, /broken header/, 'nginx read every header');
  });
});
