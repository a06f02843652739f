/**
 * One node, real traffic: a namespace lab (client, uvsd's node, three real servers), uvsd with a
 * multi-queue TUN device and two workers, and real clients (curl, nc, node sockets).
 * Needs root; skipped (and said so) otherwise.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { ApiError, AppliedResponse, ConnectionsResponse, ServicesResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { blobSha256 } from '../../lab/blob';
import { Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR } from '../../lab/lab';
import { needTool, waitFor, waitForLine } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;

describe('one node forwards real traffic', { skip: needTool(isRoot, 'root (network namespaces, TUN)'), timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvt${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  const rs6 = lab.rsAddrs6;
  const services = (weights: { web?: number[]; echo?: number[] } = {}) => [
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      scheduler: 'rr',
      realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: weights.web?.[i] ?? 1 })),
    },
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 81,
      scheduler: 'wrr',
      realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: 3 - i })),
    },
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 7,
      scheduler: 'rr',
      realServers: rs.map((a, i) => ({ address: a, port: 9007, weight: weights.echo?.[i] ?? 1 })),
    },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 5353 })) },
    { protocol: 'tcp', address: LAB_VIP, port: 90, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 8080, weight: 0 })) },
    { protocol: 'udp', address: LAB_VIP, port: 54, scheduler: 'rr', realServers: [] },
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 82,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: rs.map((a) => ({ address: a, port: 8080 })),
    },
    { protocol: 'tcp', address: LAB_VIP, port: 8080, scheduler: 'rr', forwarding: 'tunnel', realServers: rs.map((a) => ({ address: a })) },
    // Path MTU: rs1's echo service behind a 1400-byte link (see the test).
    { protocol: 'tcp', address: LAB_VIP, port: 84, scheduler: 'rr', realServers: [{ address: rs[0], port: 9007 }] },
    // A real server port nobody listens on: the server's ICMP port unreachable must reach the client.
    { protocol: 'udp', address: LAB_VIP, port: 55, scheduler: 'rr', realServers: [{ address: rs[0], port: 5999 }] },
    // IPv6, the same services beside them (dual stack).
    { protocol: 'tcp', address: LAB_VIP6, port: 80, scheduler: 'rr', realServers: rs6.map((a) => ({ address: a, port: 8080 })) },
    { protocol: 'udp', address: LAB_VIP6, port: 53, scheduler: 'rr', realServers: rs6.map((a) => ({ address: a, port: 5353 })) },
    {
      protocol: 'tcp',
      address: LAB_VIP6,
      port: 82,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: rs6.map((a) => ({ address: a, port: 8080 })),
    },
    { protocol: 'udp', address: LAB_VIP6, port: 55, scheduler: 'rr', realServers: [{ address: rs6[0], port: 5999 }] },
    {
      protocol: 'tcp',
      address: LAB_VIP6,
      port: 8080,
      scheduler: 'rr',
      forwarding: 'tunnel',
      realServers: rs6.map((a) => ({ address: a })),
    },
    // Uploads through the tunnel (the echo service): GSO super-packets cut into segments by uvs.
    { protocol: 'tcp', address: LAB_VIP, port: 9007, scheduler: 'rr', forwarding: 'tunnel', realServers: rs.map((a) => ({ address: a })) },
    {
      protocol: 'tcp',
      address: LAB_VIP6,
      port: 9007,
      scheduler: 'rr',
      forwarding: 'tunnel',
      realServers: rs6.map((a) => ({ address: a })),
    },
    { protocol: 'tcp', address: LAB_VIP6, port: 84, scheduler: 'rr', realServers: [{ address: rs6[0], port: 9007 }] },
    // UDP through full-NAT and the tunnel, both families.
    {
      protocol: 'udp',
      address: LAB_VIP,
      port: 57,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: rs.map((a) => ({ address: a, port: 5353 })),
    },
    {
      protocol: 'udp',
      address: LAB_VIP6,
      port: 57,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: rs6.map((a) => ({ address: a, port: 5353 })),
    },
    { protocol: 'udp', address: LAB_VIP, port: 5454, scheduler: 'rr', forwarding: 'tunnel', realServers: rs.map((a) => ({ address: a })) },
    {
      protocol: 'udp',
      address: LAB_VIP6,
      port: 5454,
      scheduler: 'rr',
      forwarding: 'tunnel',
      realServers: rs6.map((a) => ({ address: a })),
    },
  ];
  const labConfig = (svcs: unknown[], ports: [number, number] = [30000, 30999]) =>
    lab.config(svcs, {
      dataplane: {
        vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR],
        fullnat: { addresses: ['10.200.99.1', 'fd00:200:99::1'], portMin: ports[0], portMax: ports[1] },
        tunnelSource: '10.200.1.1',
        tunnelSource6: 'fd00:200:1::1',
      },
    });
  let configFile = '';

  const client = (cmd: string, args: string[], timeoutMs = 60000) => lab.exec(lab.clientNs, cmd, args, timeoutMs);
  const tool = (args: string[], timeoutMs = 30000) => {
    try {
      return JSON.parse(client(process.execPath, [TOOLS, ...args], timeoutMs));
    } catch (e) {
      const out = (e as { stdout?: string }).stdout;
      if (out) return JSON.parse(out);
      throw e;
    }
  };
  const curlMany = (n: number, url: string): Record<string, number> => {
    const text = client('sh', ['-c', `for i in $(seq ${n}); do curl -s -m 5 ${url} || echo FAIL; done`], 120000);
    const counts: Record<string, number> = {};
    for (const l of text.split('\n').filter(Boolean)) counts[l] = (counts[l] ?? 0) + 1;
    return counts;
  };
  const api = <T>(method: string, path: string) => apiCall<T>(lab.socket, method, path);
  const reloadWith = async (svcs: unknown[]) => {
    writeFileSync(configFile, stringify(labConfig(svcs)));
    const r = await api<AppliedResponse>('POST', '/v1/reload');
    assert.equal(r.status, 200, `reload failed: ${JSON.stringify(r.body)}`);
  };
  const nameOf = (addr: string) => `rs${rs.indexOf(addr) + 1}`;
  /** `uvs decap` in every real server, each seen ready (it prints one line once its devices are open). */
  const startDecap = async (args: string[]) => {
    await Promise.all(
      lab.rsNs.map((ns) => {
        const p = lab.spawn(ns, process.execPath, [join(ROOT, 'dist', 'control', 'uvs.js'), 'decap', ...args], {
          detached: true,
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        p.unref();
        (p.stdout as unknown as { unref?: () => void }).unref?.();
        return waitForLine(p, /^uvs decap: /, `uvs decap in ${ns}`);
      }),
    );
  };
  const activeOn = async (port: number) =>
    (await api<ServicesResponse>('GET', '/v1/services')).body.services
      .filter((x) => x.port === port)
      .reduce((n, x) => n + x.realServers.reduce((a, r) => a + r.activeConns, 0), 0);
  /** The real server of the ESTABLISHED connection to VIP port 7 (hold-echo), once uvs tracks it. */
  const echoConnection = async () => {
    let found: { virtual: string; realServer: string; state: string } | undefined;
    await waitFor('the echo connection to be tracked as ESTABLISHED', async () => {
      const conns = (await api<ConnectionsResponse>('GET', '/v1/connections')).body.connections;
      found = conns.find((c) => c.virtual.endsWith(':7') && c.state === 'ESTABLISHED');
      return found !== undefined;
    });
    return found!;
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
    configFile = lab.writeConfig(labConfig(services()));
    await lab.startUvsd(configFile);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('300 HTTP requests with curl are spread 100/100/100 by rr', () => {
    const counts = curlMany(300, `http://${LAB_VIP}/`);
    assert.deepEqual(counts, { rs1: 100, rs2: 100, rs3: 100 });
  });

  test('wrr with weights 3/2/1 spreads 60 requests 30/20/10', () => {
    assert.deepEqual(curlMany(60, `http://${LAB_VIP}:81/`), { rs1: 30, rs2: 20, rs3: 10 });
  });

  test('masq maps VIP:80 to RIP:8080 and the real server sees the real client address', () => {
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://${LAB_VIP}/whoami`]));
    assert.match(who.server, /^10\.200\.1[123]\.2:8080$/);
    assert.match(who.client, /^10\.200\.1\.2:\d+$/);
  });

  test('full-NAT: the real server sees a pool address and port and answers to it; a 50 MB transfer arrives intact', () => {
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://${LAB_VIP}:82/whoami`]));
    assert.match(who.client, /^10\.200\.99\.1:30\d\d\d$/);
    assert.match(who.server, /^10\.200\.1[123]\.2:8080$/);
    const bytes = 50 * 1024 * 1024;
    const sum = client('sh', ['-c', `curl -s -m 60 "http://${LAB_VIP}:82/blob?bytes=${bytes}&seed=9" | sha256sum`], 90000).split(' ')[0];
    assert.equal(sum, blobSha256(9, bytes));
  });

  test('IPIP tunnel: the real server gets the packet for the VIP unchanged and answers the client directly; 20 MB arrive intact', async () => {
    // This kernel has no ipip driver: each real server decapsulates with `uvs decap`.
    await startDecap(['--vips', LAB_VIP, '--directors', '10.200.1.1']);
    const seen = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://${LAB_VIP}:8080/whoami`]));
      assert.equal(who.server, `${LAB_VIP}:8080`, 'the server saw the VIP as its own address');
      assert.match(who.client, /^10\.200\.1\.2:\d+$/, 'and the real client');
      seen.add(who.name);
    }
    assert.equal(seen.size, 3, 'rr over the three tunnelled servers');
    const bytes = 20 * 1024 * 1024;
    const sum = client('sh', ['-c', `curl -s -m 60 "http://${LAB_VIP}:8080/blob?bytes=${bytes}&seed=11" | sha256sum`], 90000).split(' ')[0];
    assert.equal(sum, blobSha256(11, bytes));
    const conns = (await api<ConnectionsResponse>('GET', '/v1/connections')).body.connections.filter((c) => c.virtual.endsWith(':8080'));
    assert.ok(conns.length >= 4 && conns.every((c) => c.realServer.endsWith(':8080')), 'tracked, no port mapping');
  });

  test('IPv6 masq: 30 requests to [VIP]:80 spread 10/10/10, the server sees the real client; 50 MB arrive intact', () => {
    assert.deepEqual(curlMany(30, `http://[${LAB_VIP6}]/`), { rs1: 10, rs2: 10, rs3: 10 });
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://[${LAB_VIP6}]/whoami`]));
    assert.match(who.client, /^fd00:200:1::2:\d+$/);
    assert.match(who.server, /^fd00:200:1[123]::2:8080$/);
    const bytes = 50 * 1024 * 1024;
    const sum = client('sh', ['-c', `curl -s -m 60 "http://[${LAB_VIP6}]/blob?bytes=${bytes}&seed=13" | sha256sum`], 90000).split(' ')[0];
    assert.equal(sum, blobSha256(13, bytes));
  });

  test('IPv6 full-NAT: the server sees a pool address and port; 20 MB arrive intact', () => {
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://[${LAB_VIP6}]:82/whoami`]));
    assert.match(who.client, /^fd00:200:99::1:30\d\d\d$/);
    const bytes = 20 * 1024 * 1024;
    const sum = client('sh', ['-c', `curl -s -m 60 "http://[${LAB_VIP6}]:82/blob?bytes=${bytes}&seed=14" | sha256sum`], 90000).split(
      ' ',
    )[0];
    assert.equal(sum, blobSha256(14, bytes));
  });

  test('IPv6 tunnel (ip6ip6): the real server gets the packet for [VIP] unchanged and answers directly; 20 MB arrive intact', async () => {
    await startDecap(['--device', 'uvsdec6', '--vips', LAB_VIP6, '--directors', 'fd00:200:1::1']);
    const seen = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://[${LAB_VIP6}]:8080/whoami`]));
      assert.equal(who.server, `${LAB_VIP6}:8080`, 'the server saw the VIP as its own address');
      assert.match(who.client, /^fd00:200:1::2:\d+$/, 'and the real client');
      seen.add(who.name);
    }
    assert.equal(seen.size, 3, 'rr over the three tunnelled servers');
    const bytes = 20 * 1024 * 1024;
    const sum = client('sh', ['-c', `curl -s -m 60 "http://[${LAB_VIP6}]:8080/blob?bytes=${bytes}&seed=15" | sha256sum`], 90000).split(
      ' ',
    )[0];
    assert.equal(sum, blobSha256(15, bytes));
  });

  test('uploads through the tunnel, IPv4 and IPv6: 8 MB each way arrive intact (super-packets segmented by uvs)', () => {
    for (const vip of [LAB_VIP, LAB_VIP6]) {
      const p = lab.prefix;
      const out = client(
        'sh',
        [
          '-c',
          `head -c 8000000 /dev/urandom > /tmp/${p}-tu && sha256sum < /tmp/${p}-tu && timeout 40 nc -N ${vip} 9007 < /tmp/${p}-tu | tail -c +5 | sha256sum; rm -f /tmp/${p}-tu`,
        ],
        60000,
      );
      const [sent, echoed] = out
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]);
      assert.equal(echoed, sent, `${vip}: the echo of 8 MB sent through the tunnel is identical`);
    }
  });

  test('UDP through full-NAT and the tunnel, IPv4 and IPv6: answered, and rotated over the servers', async () => {
    // Direct return over UDP: the server must answer from the VIP, so it binds the VIP (on lo,
    // put there by uvs decap) — a socket on 0.0.0.0 would answer from its own address.
    lab.rsNs.forEach((ns, i) => {
      for (const [fam, vip] of [
        ['AF_INET', LAB_VIP],
        ['AF_INET6', LAB_VIP6],
      ]) {
        const py = `import socket\ns=socket.socket(socket.${fam},socket.SOCK_DGRAM)\ns.bind(('${vip}',5454))\nwhile True:\n d,a=s.recvfrom(2048)\n s.sendto(b'rs${i + 1} '+d,a)`;
        lab.spawn(ns, 'python3', ['-c', py], { detached: true, stdio: 'ignore' }).unref();
      }
    });
    for (const ns of lab.rsNs) {
      await waitFor(
        `the two UDP servers on port 5454 in ${ns}`,
        () => lab.exec(ns, 'ss', ['-Hlun', 'sport = :5454']).trim().split('\n').filter(Boolean).length === 2,
      );
    }
    for (const [vip, port] of [
      [LAB_VIP, '57'],
      [LAB_VIP6, '57'],
      [LAB_VIP, '5454'],
      [LAB_VIP6, '5454'],
    ] as const) {
      const answers = new Set<string>();
      for (let i = 0; i < 3; i++) {
        const r = tool(['udp-ask', vip, port, `q${i}`]);
        assert.equal(r.error, null, `${vip}:${port}`);
        assert.match(r.answer, new RegExp(`^rs[123] q${i}$`));
        answers.add(r.answer.split(' ')[0]);
      }
      assert.equal(answers.size, 3, `${vip}:${port} rr`);
    }
  });

  /**
   * A full-NAT service on VIP:83 to `servers` with its own pool range, which cannot change on
   * reload: uvsd restarted for it (SYN proxy off), then the suite's uvsd back, whatever happens.
   */
  const withPool = async (servers: string[], ports: [number, number], body: () => Promise<void>) => {
    const only = [
      {
        protocol: 'tcp',
        address: LAB_VIP,
        port: 83,
        scheduler: 'rr',
        forwarding: 'fullnat',
        realServers: servers.map((a) => ({ address: a, port: 8080 })),
      },
    ];
    await lab.stopUvsd();
    await lab.startUvsd(lab.writeConfig({ ...labConfig(only, ports), defense: { synProxy: 0 } }, 'uvs-pool.yaml'));
    try {
      await body();
    } finally {
      await lab.stopUvsd();
      await lab.startUvsd(configFile);
    }
  };

  test('full-NAT port pool exhaustion: with 2 ports per server, the third open connection to it is refused and counted', async () => {
    // One real server, a pool of two ports. The SYN proxy is off (withPool): a full pool is a
    // shortage that turns it on (docs/defense.md), and a client would then connect to uvs and be
    // refused after; this is about the refusal at connect time.
    await withPool([rs[0]!], [31000, 31001], async () => {
      const holds = [0, 1].map(() =>
        spawn('ip', ['netns', 'exec', lab.clientNs, 'curl', '-s', '-m', '30', `http://${LAB_VIP}:83/hold?ms=8000`], { stdio: 'ignore' }),
      );
      await waitFor('both held connections to be active', async () => (await activeOn(83)) === 2);
      const third = tool(['tcp-connect', LAB_VIP, '83', '1500']);
      assert.equal(third.connected, false, 'no port left for a third connection');
      const drops = (await api<StatsResponse>('GET', '/v1/stats')).body.drops;
      assert.ok((drops.fullnat_ports_exhausted ?? 0) >= 1, 'counted as fullnat_ports_exhausted');
      const codes = await Promise.all(holds.map((h) => new Promise<number | null>((r) => h.on('exit', r))));
      assert.deepEqual(codes, [0, 0], 'the two connections that had ports completed');
    });
  });

  // A client that reuses its ports at once (it holds no TIME_WAIT: the server closes first) meets
  // its full-NAT entries in TIME_WAIT; each reuse is a new connection (conn_reuse_mode=1). The
  // servers hold TIME_WAIT for every (pool address:port, server:port) they served. The new
  // connection keeps the old server and pool port (lb/core.ts keptDest, docs/ipvs-semantics.md
  // §3.8), whose TIME_WAIT takes the same client port's SYN; before, it drew another port, which a
  // small pool has most likely served too — for another client port, with unrelated timestamps —
  // and about half such SYNs were refused (PAWS) and had to be sent again (with the fix taken out
  // of the compiled code: 14 of 150 here).
  test('full-NAT: a client reusing 30 ports for 150 connections is never refused by a server in TIME_WAIT (PAWS)', async () => {
    const counters = () => {
      let paws = 0;
      for (const ns of lab.rsNs)
        paws += Number(/TcpExtPAWSTimewait\s+(\d+)/.exec(lab.exec(ns, 'nstat', ['-asz', 'TcpExtPAWSTimewait']))?.[1] ?? 0);
      const syn = Number(/TcpExtTCPSynRetrans\s+(\d+)/.exec(lab.exec(lab.clientNs, 'nstat', ['-asz', 'TcpExtTCPSynRetrans']))?.[1] ?? 0);
      return { paws, syn };
    };
    await withPool(rs, [31000, 31099], async () => {
      const before = counters();
      const py = [
        'import socket, time, json',
        'slow, bad = 0, 0',
        'for i in range(150):',
        '    s = socket.socket()',
        '    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)',
        '    s.settimeout(5)',
        '    s.bind(("", 45000 + i % 30))',
        '    t = time.monotonic()',
        '    try:',
        `        s.connect(("${LAB_VIP}", 83))`,
        '        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")',
        '        body = b""',
        '        while True:',
        '            d = s.recv(4096)',
        '            if not d: break',
        '            body += d',
        '        if not body.startswith(b"HTTP/1.1 200"): bad += 1',
        '    except OSError:',
        '        bad += 1',
        '    if time.monotonic() - t > 0.5: slow += 1',
        '    s.close()',
        'print(json.dumps({"slow": slow, "bad": bad}))',
      ].join('\n');
      const r = JSON.parse(lab.exec(lab.clientNs, 'python3', ['-c', py], 120000)) as { slow: number; bad: number };
      const after = counters();
      const seen = `${JSON.stringify(r)}; PAWS rejects at the servers ${after.paws - before.paws}, client SYN retransmits ${after.syn - before.syn}`;
      assert.equal(r.bad, 0, seen);
      assert.equal(after.paws - before.paws, 0, seen);
      assert.equal(after.syn - before.syn, 0, seen);
      assert.equal(r.slow, 0, seen);
    });
  });

  test("IPv6 UDP: answers rotate over the servers; a server's ICMPv6 port unreachable reaches the client; no service is refused", () => {
    const answers = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = tool(['udp-ask', LAB_VIP6, '53', `six ${i}`]);
      assert.equal(r.error, null);
      answers.add(r.answer.split(' ')[0]);
    }
    assert.equal(answers.size, 3);
    assert.deepEqual(tool(['udp-ask', LAB_VIP6, '55', 'anyone?', '3000']), { answer: null, error: 'ECONNREFUSED' });
    assert.deepEqual(
      tool(['udp-ask', LAB_VIP6, '56', 'x']),
      { answer: null, error: 'ECONNREFUSED' },
      'no service: ICMPv6 port unreachable',
    );
    assert.deepEqual(tool(['tcp-connect', LAB_VIP6, '22']), { connected: false, error: 'ECONNREFUSED' }, 'no service: TCP RST');
  });

  test('UDP request/response works and new flows rotate over the real servers', () => {
    const answers = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = tool(['udp-ask', LAB_VIP, '53', `hello ${i}`]);
      assert.equal(r.error, null);
      assert.match(r.answer, new RegExp(`^rs[123] hello ${i}$`));
      answers.add(r.answer.split(' ')[0]);
    }
    assert.equal(answers.size, 3);
    const nc = client('sh', ['-c', `echo via-nc | nc -u -w1 ${LAB_VIP} 53`]);
    assert.match(nc, /^rs[123] via-nc/);
  });

  test('a 200 MB transfer arrives byte-identical', () => {
    const bytes = 200 * 1024 * 1024;
    const sum = client('sh', ['-c', `curl -s -m 120 "http://${LAB_VIP}/blob?bytes=${bytes}&seed=7" | sha256sum`], 150000).split(' ')[0];
    assert.equal(sum, blobSha256(7, bytes));
  });

  test('50 concurrent connections are all carried and counted as active at once', async () => {
    // Each is held 15 s: the 50 are open together long enough to be seen even on a slow machine.
    const urls = Array.from({ length: 50 }, () => `http://${LAB_VIP}/hold?ms=15000`);
    const child = spawn(
      'ip',
      ['netns', 'exec', lab.clientNs, 'curl', '-s', '-m', '60', '-Z', '--parallel-immediate', '--parallel-max', '50', ...urls],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let outText = '';
    child.stdout.on('data', (d: Buffer) => (outText += d.toString()));
    let active = 0;
    await waitFor('50 connections counted active at once', async () => (active = await activeOn(80)) >= 50, 15000).catch(() => undefined);
    const code = await new Promise<number | null>((r) => child.on('exit', r));
    assert.equal(code, 0);
    assert.equal(outText.split('\n').filter((l) => l === 'done').length, 50, 'all 50 responses completed');
    assert.ok(active >= 50, `ActiveConn summed ${active} while 50 connections were open`);
  });

  test('weight 0 keeps an open connection alive while new connections avoid the server', async () => {
    const hold = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, TOOLS, 'hold-echo', LAB_VIP, '7', '6', '100'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    hold.stdout.on('data', (d: Buffer) => (text += d.toString()));
    const echoConn = await echoConnection();
    const quiesced = echoConn.realServer.split(':')[0]!;
    const i = rs.indexOf(quiesced);
    const w = [1, 1, 1];
    w[i] = 0;
    await reloadWith(services({ web: w, echo: w }));
    const counts = curlMany(30, `http://${LAB_VIP}/`);
    assert.equal(counts[nameOf(quiesced)], undefined, `no new connection to the weight-0 server ${quiesced}: ${JSON.stringify(counts)}`);
    assert.equal((counts.rs1 ?? 0) + (counts.rs2 ?? 0) + (counts.rs3 ?? 0), 30);
    const code = await new Promise<number | null>((r) => hold.on('exit', r));
    const r = JSON.parse(text);
    assert.equal(code, 0, `hold-echo: ${text}`);
    assert.equal(r.server, nameOf(quiesced));
    assert.ok(r.sent > 40 && r.echoed === r.sent, `every line echoed: ${text}`);
    const svcs = (await api<ServicesResponse>('GET', '/v1/services')).body.services;
    assert.equal(svcs.find((s) => s.port === 7)!.realServers.find((x) => x.address === quiesced)!.weight, 0);
    await reloadWith(services());
  });

  test('no usable real server answers ICMP port unreachable (TCP connect refused, UDP ECONNREFUSED)', () => {
    assert.deepEqual(tool(['tcp-connect', LAB_VIP, '90']), { connected: false, error: 'ECONNREFUSED' });
    assert.deepEqual(tool(['udp-ask', LAB_VIP, '54', 'x']), { answer: null, error: 'ECONNREFUSED' });
  });

  test("a real server's ICMP port unreachable is translated: the client's UDP socket gets ECONNREFUSED", () => {
    // Untranslated, the error would quote RIP:5999 and the client's socket (connected to the VIP)
    // would never hear of it: the ask would time out instead.
    assert.deepEqual(tool(['udp-ask', LAB_VIP, '55', 'anyone?', '3000']), { answer: null, error: 'ECONNREFUSED' });
  });

  test('path MTU: uploads through a 1400-byte link to the real server complete (fragmentation needed from the VIP)', async () => {
    // The LB↔rs1 link gets MTU 1400 on both ends, while rs1 still advertises MSS 1460 (advmss),
    // so the client sends full 1500-byte segments with DF. The LB's kernel would drop them
    // after uvs rewrote them and tell the client about RIP:9007 — which the client ignores: a black
    // hole. uvs answers from the VIP instead, and the client's path-MTU discovery shrinks it.
    const p = lab.prefix;
    lab.ip(lab.lbNs, ['link', 'set', `${p}r1a`, 'mtu', '1400']);
    lab.ip(lab.rsNs[0]!, ['link', 'set', `${p}r1b`, 'mtu', '1400']);
    lab.ip(lab.rsNs[0]!, ['route', 'replace', 'default', 'via', '10.200.11.1', 'advmss', '1460']);
    lab.ip(lab.rsNs[0]!, ['-6', 'route', 'replace', 'default', 'via', 'fd00:200:11::1', 'advmss', '1440']);
    try {
      // uvsd re-reads the route MTUs on every configuration change (and every 5 s): a reload
      // applies the narrow link now instead of waiting for the timer.
      assert.equal((await api('POST', '/v1/reload')).status, 200);
      for (const vip of [LAB_VIP, LAB_VIP6]) {
        const before = (await api<StatsResponse>('GET', '/v1/stats')).body.drops;
        const bytes = 8 * 1024 * 1024;
        const out = client(
          'sh',
          [
            '-c',
            `head -c ${bytes} /dev/urandom > /tmp/${p}-up && sha256sum < /tmp/${p}-up && timeout 40 nc -N ${vip} 84 < /tmp/${p}-up | tail -c +5 | sha256sum; rm -f /tmp/${p}-up`,
          ],
          60000,
        );
        // The echo server greets with "rs1\n" (4 bytes) before echoing.
        const [sent, echoed] = out
          .trim()
          .split('\n')
          .map((l) => l.split(' ')[0]);
        assert.equal(echoed, sent, `${vip}: 8 MB went up through the narrow link and came back intact`);
        const after = (await api<StatsResponse>('GET', '/v1/stats')).body.drops;
        assert.ok(
          (after.too_big ?? 0) > (before.too_big ?? 0),
          `${vip}: uvs answered oversize segments with fragmentation needed / Packet Too Big`,
        );
      }
    } finally {
      lab.ip(lab.rsNs[0]!, ['route', 'replace', 'default', 'via', '10.200.11.1']);
      lab.ip(lab.rsNs[0]!, ['-6', 'route', 'replace', 'default', 'via', 'fd00:200:11::1']);
      lab.ip(lab.rsNs[0]!, ['link', 'set', `${p}r1b`, 'mtu', '1500']);
      lab.ip(lab.lbNs, ['link', 'set', `${p}r1a`, 'mtu', '1500']);
    }
  });

  test('a VIP port without a service is refused and never reaches a local socket', () => {
    assert.deepEqual(tool(['tcp-connect', LAB_VIP, '22']), { connected: false, error: 'ECONNREFUSED' });
    assert.deepEqual(tool(['tcp-connect', '10.200.0.99', '80']), { connected: false, error: 'ECONNREFUSED' });
  });

  test('random and malformed packets written into the device leave the daemon running and are counted', async () => {
    const before = (await api<StatsResponse>('GET', '/v1/stats')).body;
    const r = JSON.parse(lab.exec(lab.lbNs, process.execPath, [TOOLS, 'inject', 'uvs0', '1600', '42', LAB_VIP, lab.clientAddr]));
    assert.equal(r.sent, 1600);
    let afterStats = before;
    await waitFor('the 1600 injected packets to be read', async () => {
      afterStats = (await api<StatsResponse>('GET', '/v1/stats')).body;
      return afterStats.packets.rxPackets - before.packets.rxPackets >= 1600;
    });
    const d = (k: string) => afterStats.drops[k]! - before.drops[k]!;
    assert.ok(d('bad_checksum') >= 200, `bad_checksum +${d('bad_checksum')}`);
    assert.ok(d('truncated') >= 400, `truncated +${d('truncated')}`);
    assert.ok(d('fragment') >= 200, `fragment +${d('fragment')}`);
    assert.ok(d('bad_header_length') >= 200, `bad_header_length +${d('bad_header_length')}`);
    assert.ok(d('bad_version') >= 200, `bad_version +${d('bad_version')}`);
    assert.ok(d('unsupported_protocol') >= 200, `unsupported_protocol +${d('unsupported_protocol')}`);
    assert.ok(afterStats.packets.rxPackets - before.packets.rxPackets >= 1600);
    assert.equal(lab.uvsdProcess?.exitCode, null, 'uvsd is still running');
    assert.deepEqual(curlMany(3, `http://${LAB_VIP}/`), { rs1: 1, rs2: 1, rs3: 1 });
  });

  test('a killed worker thread is restarted and the flows it carried continue', async () => {
    const hold = spawn('ip', ['netns', 'exec', lab.clientNs, process.execPath, TOOLS, 'hold-echo', LAB_VIP, '7', '5', '50'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    hold.stdout.on('data', (d: Buffer) => (text += d.toString()));
    await echoConnection();
    const beforeW = (await api<StatsResponse>('GET', '/v1/stats')).body.workers;
    for (const w of beforeW) {
      const k = await api('POST', `/v1/workers/${w.id}/kill`);
      assert.equal(k.status, 202);
    }
    const code = await new Promise<number | null>((r) => hold.on('exit', r));
    assert.equal(code, 0, `hold-echo survived the worker kills: ${text}`);
    const afterW = (await api<StatsResponse>('GET', '/v1/stats')).body.workers;
    for (const w of afterW) {
      assert.equal(w.restarts, beforeW.find((b) => b.id === w.id)!.restarts + 1);
      assert.ok(w.ready);
    }
    assert.equal(
      Object.values(curlMany(3, `http://${LAB_VIP}/`)).reduce((a, b) => a + b, 0),
      3,
    );
  });

  test('an invalid configuration is rejected with the field and the old one keeps running', async () => {
    const good = labConfig(services());
    const bad = structuredClone(good) as { services: { realServers: { weight: number }[] }[] };
    bad.services[0]!.realServers[0]!.weight = -1;
    writeFileSync(configFile, stringify(bad));
    const r = await api<ApiError>('POST', '/v1/reload');
    assert.equal(r.status, 400);
    assert.equal(r.body.code, 'UVS_ERR_CONFIG_INVALID');
    assert.equal(r.body.path, 'services[0].realServers[0].weight');
    const failedBefore = (await api<StatsResponse>('GET', '/v1/stats')).body.reloads.failed;
    writeFileSync(configFile, 'services: [ {');
    execFileSync('kill', ['-HUP', String(lab.uvsdProcess!.pid)]);
    await waitFor(
      'the broken file to be refused',
      async () => (await api<StatsResponse>('GET', '/v1/stats')).body.reloads.failed > failedBefore,
    );
    assert.equal(lab.uvsdProcess?.exitCode, null);
    assert.deepEqual(curlMany(3, `http://${LAB_VIP}/`), { rs1: 1, rs2: 1, rs3: 1 });
    writeFileSync(configFile, stringify(good));
  });

  test('uvsadm -Ln shows the services in ipvsadm layout with live counts', () => {
    const text = execFileSync(process.execPath, [join(ROOT, 'dist', 'control', 'uvsadm.js'), '--socket', lab.socket, '-Ln'], {
      encoding: 'utf8',
    });
    const lines = text.split('\n');
    assert.equal(lines[0], 'IP Virtual Server version 1.2.1 (size=65536)');
    assert.ok(lines.includes(`TCP  ${LAB_VIP}:80 rr`));
    assert.ok(
      lines.some((l) => /^ {2}-> 10\.200\.11\.2:8080 {13}Masq {4}1 {6}\d+ +\d+ +$/.test(l)),
      text,
    );
    assert.ok(lines.includes(`TCP  [${LAB_VIP6}]:80 rr`), text);
    assert.ok(
      lines.some((l) => /^ {2}-> \[fd00:200:11::2\]:8080 +Masq +1 +\d+ +\d+ +$/.test(l)),
      text,
    );
  });

  test('/metrics parses as Prometheus text with node_exporter IPVS names, types and labels; /healthz is up', () => {
    const text = lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);
    const types = new Map<string, string>();
    const samples: { name: string; labels: Record<string, string>; value: number }[] = [];
    for (const line of text.split('\n')) {
      if (!line) continue;
      const t = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line);
      if (t) {
        types.set(t[1]!, t[2]!);
        continue;
      }
      if (line.startsWith('#')) continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (-?[0-9.e+]+|NaN|[+-]Inf)$/.exec(line);
      assert.ok(m, `not Prometheus text format: ${line}`);
      const labels: Record<string, string> = {};
      for (const kv of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]!] = kv[2]!;
      samples.push({ name: m[1]!, labels, value: Number(m[3]) });
    }
    for (const n of [
      'node_ipvs_connections_total',
      'node_ipvs_incoming_packets_total',
      'node_ipvs_outgoing_packets_total',
      'node_ipvs_incoming_bytes_total',
      'node_ipvs_outgoing_bytes_total',
    ]) {
      assert.equal(types.get(n), 'counter', n);
      assert.ok(samples.find((x) => x.name === n)!.value > 0, `${n} counts`);
    }
    for (const n of ['node_ipvs_backend_connections_active', 'node_ipvs_backend_connections_inactive', 'node_ipvs_backend_weight'])
      assert.equal(types.get(n), 'gauge', n);
    const w = samples.find(
      (x) => x.name === 'node_ipvs_backend_weight' && x.labels.local_port === '81' && x.labels.remote_address === rs[0],
    );
    assert.deepEqual(w?.labels, {
      local_address: LAB_VIP,
      local_port: '81',
      remote_address: rs[0],
      remote_port: '8080',
      proto: 'TCP',
      local_mark: '',
    });
    assert.equal(w?.value, 3);
    const inact = samples
      .filter((x) => x.name === 'node_ipvs_backend_connections_inactive' && x.labels.local_port === '80')
      .reduce((a, x) => a + x.value, 0);
    assert.ok(inact > 0, 'TIME_WAIT entries of the curl requests are InActConn');
    assert.ok(samples.some((x) => x.name === 'uvs_drops_total' && x.labels.reason === 'bad_checksum' && x.value > 0));
    assert.equal(samples.find((x) => x.name === 'uvs_connection_table_capacity')!.value, 65536);
    assert.equal(samples.filter((x) => x.name === 'uvs_worker_up' && x.value === 1).length, 2);
    const health = JSON.parse(lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10256/healthz']));
    assert.equal(health.healthy, true);
  });

  test('the device is opened with offloads, super-packets capped at what a worker may segment', () => {
    const link = lab.ip(lab.lbNs, ['-d', 'link', 'show', 'uvs0']);
    assert.match(link, /gso_max_segs 128\b/, link);
    const flags = Number(lab.exec(lab.lbNs, 'sh', ['-c', 'cat /sys/class/net/uvs0/tun_flags']).trim());
    assert.ok(flags & 0x4000, `IFF_VNET_HDR is set (tun_flags ${flags.toString(16)})`);
  });

  test('stopping uvsd removes the device, routes and rules', async () => {
    await lab.stopUvsd();
    assert.throws(() => lab.ip(lab.lbNs, ['link', 'show', 'uvs0']));
    assert.equal(lab.ip(lab.lbNs, ['rule', 'show', 'pref', '4711']).trim(), '');
    assert.equal(lab.ip(lab.lbNs, ['rule', 'show', 'pref', '4710']).trim(), '', 'the iif rule for packets leaving the device is gone');
    assert.equal(lab.ip(lab.lbNs, ['-6', 'rule', 'show', 'pref', '4711']).trim(), '', 'IPv6 reply rules are gone');
    assert.equal(lab.ip(lab.lbNs, ['-6', 'rule', 'show', 'pref', '4710']).trim(), '');
    assert.equal(lab.ip(lab.lbNs, ['-6', 'route', 'show', 'table', '4711']).trim(), '');
    assert.equal(lab.ip(lab.lbNs, ['route', 'show', 'table', '4711']).trim(), '');
    assert.equal(lab.ip(lab.lbNs, ['route', 'show', '10.200.0.0/24']).trim(), '');
    assert.equal(lab.ip(lab.lbNs, ['route', 'show', '10.200.99.1']).trim(), '', 'the full-NAT pool route is gone');
  });
});
