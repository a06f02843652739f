/**
 * The SYN proxy against real TCP stacks (lb/synproxy.ts, docs/defense.md "SYN proxy"): uvsd with
 * `defense.synProxy: 3` answers every SYN with a cookie, makes the flow only when the client's
 * ACK carries a valid one, and opens the real server's side itself. Real curl clients through
 * masq and full-NAT, IPv4 and IPv6; large downloads checked by sha256 (every segment's
 * sequence, acknowledgement, window, timestamp and SACK adjusted); a client with timestamps,
 * SACK and window scaling off; a closed port; SYNs never acknowledged take no entry; a spoofed
 * SYN flood against a tiny table. Needs root; skipped (and said so) otherwise.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import type { ConnectionsResponse, DefenseResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { blobSha256 } from '../../lab/blob';
import { Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sleep } from '../../lab/lab';
import { balance, type StatsLike } from '../../perf/reliability/report';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const UVSADM = join(ROOT, 'dist', 'control', 'uvsadm.js');
const isRoot = process.getuid?.() === 0;
const TABLE = 1024;

describe('the SYN proxy (defense.synProxy: 3) with real clients and servers', {
  skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)',
  timeout: 600_000,
}, () => {
  const lab = new Lab({ prefix: `uvsp${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  const rs6 = lab.rsAddrs6;
  const services = [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 8080 })) },
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 82,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: rs.map((a) => ({ address: a, port: 8080 })),
    },
    // A real server port nobody listens on: the server's RST must reach the client.
    { protocol: 'tcp', address: LAB_VIP, port: 83, scheduler: 'rr', realServers: [{ address: rs[0], port: 8999 }] },
    { protocol: 'tcp', address: LAB_VIP6, port: 80, scheduler: 'rr', realServers: rs6.map((a) => ({ address: a, port: 8080 })) },
    {
      protocol: 'tcp',
      address: LAB_VIP6,
      port: 82,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: rs6.map((a) => ({ address: a, port: 8080 })),
    },
  ];
  const api = async <T>(path: string) => (await apiCall<T>(lab.socket, 'GET', path)).body;
  const client = (cmd: string, args: string[], timeoutMs = 60000) => lab.exec(lab.clientNs, cmd, args, timeoutMs);
  const sysctl = (kv: string) => lab.exec(lab.clientNs, 'sysctl', ['-q', '-w', kv]);
  const counts = async () => (await api<DefenseResponse>('/v1/defense')).synProxyCounts;
  const download = (url: string, bytes: number, seed: number) =>
    client('sh', ['-c', `curl -s -m 60 "${url}/blob?bytes=${bytes}&seed=${seed}" | sha256sum`], 90000).split(' ')[0];

  before(async () => {
    lab.up();
    await lab.waitServers();
    const cfg = lab.config(services, {
      dataplane: {
        tableSize: TABLE,
        vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR],
        fullnat: { addresses: ['10.200.99.1', 'fd00:200:99::1'], portMin: 30000, portMax: 30999 },
      },
      // Another window scale than the servers' (Linux: 7): every server segment's window is rescaled.
      defense: { synProxy: 3, synProxyWscale: 5 },
    });
    await lab.startUvsd(lab.writeConfig(cfg));
    // The flood's spoofed sources are answered into nowhere, silently (no ICMP back into uvs0).
    lab.ip(lab.lbNs, ['route', 'replace', 'blackhole', '10.77.0.0/16']);
  });
  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('masq IPv4: curl gets its answer, the server sees the real client, every handshake went through a cookie', async () => {
    const before = await counts();
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://${LAB_VIP}/whoami`]));
    assert.match(who.server, /^10\.200\.1[123]\.2:8080$/);
    assert.match(who.client, /^10\.200\.1\.2:\d+$/);
    const text = client('sh', ['-c', `for i in $(seq 9); do curl -s -m 5 http://${LAB_VIP}/ || echo FAIL; done`]);
    assert.deepEqual(text.trim().split('\n').sort(), ['rs1', 'rs1', 'rs1', 'rs2', 'rs2', 'rs2', 'rs3', 'rs3', 'rs3']);
    const c = await counts();
    assert.ok(c.cookies - before.cookies >= 10, JSON.stringify(c));
    assert.ok(c.accepted - before.accepted >= 10, JSON.stringify(c));
    assert.equal(c.badCookies, 0);
    const d = await api<DefenseResponse>('/v1/defense');
    assert.deepEqual(
      d.defenses.find((x) => x.name === 'synProxy'),
      { name: 'synProxy', configured: 3, mode: 3, active: true },
    );
  });

  test('masq and full-NAT IPv4: 30 MB downloads arrive intact (sequence, window, timestamp and SACK adjustment)', () => {
    const bytes = 30 * 1024 * 1024;
    assert.equal(download(`http://${LAB_VIP}`, bytes, 21), blobSha256(21, bytes), 'masq');
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://${LAB_VIP}:82/whoami`]));
    assert.match(who.client, /^10\.200\.99\.1:30\d\d\d$/, 'full-NAT: the server sees the pool');
    assert.equal(download(`http://${LAB_VIP}:82`, bytes, 22), blobSha256(22, bytes), 'full-NAT');
  });

  test("with 2 % of the servers' packets lost: downloads intact, the servers recover through the client's SACK blocks and discard none", () => {
    // netem is not in every kernel: nftables in the balancer's namespace drops 2 in 100 of the
    // servers' packets on their way in (not SYN-ACKs) — a loss on the wire for the server (a drop
    // on the server's own output would only be a local error it sends again at once). They may
    // be GSO super-packets (~130 for 8 MB): at 1 % a download could lose none.
    const nstat = () => {
      const n = { recovery: 0, discard: 0 };
      for (const ns of lab.rsNs) {
        const out = lab.exec(ns, 'nstat', ['-asz', 'TcpExtTCPSackRecovery', 'TcpExtTCPSACKDiscard']);
        n.recovery += Number(/TcpExtTCPSackRecovery\s+(\d+)/.exec(out)?.[1] ?? 0);
        n.discard += Number(/TcpExtTCPSACKDiscard\s+(\d+)/.exec(out)?.[1] ?? 0);
      }
      return n;
    };
    const nft = (...args: string[]) => lab.exec(lab.lbNs, 'nft', args);
    nft('add', 'table', 'inet', 'uvsloss');
    nft('add', 'chain', 'inet', 'uvsloss', 'p', '{ type filter hook prerouting priority 0; }');
    nft('add', 'rule', 'inet', 'uvsloss', 'p', 'tcp sport 8080', 'tcp flags & syn == 0', 'numgen random mod 100 < 2', 'counter', 'drop');
    try {
      const before = nstat();
      const bytes = 8 * 1024 * 1024;
      assert.equal(download(`http://${LAB_VIP}`, bytes, 31), blobSha256(31, bytes), 'masq');
      assert.equal(download(`http://${LAB_VIP}:82`, bytes, 32), blobSha256(32, bytes), 'full-NAT');
      const after = nstat();
      const dropped = /packets (\d+)/.exec(nft('list', 'table', 'inet', 'uvsloss'))?.[1];
      assert.ok(after.recovery > before.recovery, `the servers recovered with SACK: ${JSON.stringify({ before, after, dropped })}`);
      assert.equal(after.discard, before.discard, 'no SACK block discarded as invalid (edges in the server’s numbers)');
    } finally {
      nft('delete', 'table', 'inet', 'uvsloss');
    }
  });

  test('masq and full-NAT IPv6: curl and 20 MB downloads', () => {
    const bytes = 20 * 1024 * 1024;
    const who = JSON.parse(client('curl', ['-s', '-m', '5', `http://[${LAB_VIP6}]/whoami`]));
    assert.match(who.client, /^\[?fd00:200:1::2\]?:\d+$/);
    assert.equal(download(`http://[${LAB_VIP6}]`, bytes, 23), blobSha256(23, bytes), 'masq');
    assert.equal(download(`http://[${LAB_VIP6}]:82`, bytes, 24), blobSha256(24, bytes), 'full-NAT');
  });

  test('a client without timestamps, SACK and window scaling still connects and downloads', () => {
    sysctl('net.ipv4.tcp_timestamps=0');
    sysctl('net.ipv4.tcp_sack=0');
    sysctl('net.ipv4.tcp_window_scaling=0');
    try {
      const bytes = 10 * 1024 * 1024;
      assert.equal(download(`http://${LAB_VIP}`, bytes, 25), blobSha256(25, bytes), 'masq');
      assert.equal(download(`http://${LAB_VIP}:82`, bytes, 26), blobSha256(26, bytes), 'full-NAT');
    } finally {
      sysctl('net.ipv4.tcp_timestamps=1');
      sysctl('net.ipv4.tcp_sack=1');
      sysctl('net.ipv4.tcp_window_scaling=1');
    }
  });

  test("a closed port on the real server: the server's RST reaches the client at once", async (t) => {
    const before = await counts();
    const t0 = Date.now();
    const r = spawnSync('ip', ['netns', 'exec', lab.clientNs, 'curl', '-sS', '-m', '5', `http://${LAB_VIP}:83/`], { encoding: 'utf8' });
    const ms = Date.now() - t0;
    const after = await counts();
    const ctx = JSON.stringify({ status: r.status, stderr: r.stderr, ms, before, after });
    t.diagnostic(ctx);
    // The client's handshake is done with the proxy before the server is asked: it sees its
    // connection reset (curl 56), or, when the RST comes before curl saw the connect complete,
    // a failed connect (curl 7) — at once either way, never a timeout (curl 28).
    assert.ok(r.status === 56 || r.status === 7, ctx);
    assert.ok(ms < 3000, `reset at once, not timed out: ${ctx}`);
    // Once or twice: curl's request may reach uvs after the flow is gone, and it is a valid cookie
    // ACK again (seq = ISN + 1): a second SYN, a second RST.
    assert.ok(after.serverFailures > before.serverFailures, ctx);
  });

  test('SYNs never acknowledged take no table entry', async () => {
    // No handshake of the tests before still under way (a client's SYN retransmitted now would
    // make an entry and look like one the flood made): wait for the table to hold none.
    const until = Date.now() + 20_000;
    for (;;) {
      const conns = (await api<ConnectionsResponse>('/v1/connections?limit=100000')).connections;
      if (!conns.some((c) => c.state === 'SYN_RECV' || c.state === 'SYN_SENT' || c.state === 'SYNACK')) break;
      if (Date.now() > until) throw new Error(`handshakes still under way: ${JSON.stringify(conns.slice(0, 5))}`);
      await sleep(100);
    }
    const before = await counts();
    const entries0 = (await api<StatsResponse>('/v1/stats')).table.entries;
    const out = lab.exec(lab.lbNs, process.execPath, [TOOLS, 'syn-flood', 'uvs0', LAB_VIP, '80', '500', '10', '300', '5']);
    assert.equal(JSON.parse(out).sent, 300);
    await sleep(300);
    const c = await counts();
    assert.ok(c.cookies - before.cookies >= 300, JSON.stringify(c));
    assert.ok((await api<StatsResponse>('/v1/stats')).table.entries <= entries0, 'no entry for an unanswered cookie');
  });

  test('a spoofed SYN flood against a 1024-entry table: real clients keep connecting, the table stays empty of it', async (t) => {
    const flood = lab.spawn(lab.lbNs, process.execPath, [TOOLS, 'syn-flood', 'uvs0', LAB_VIP, '80', '2000', '20', '30000', '7'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    flood.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise<void>((r) => flood.once('exit', () => r()));
    try {
      const failed: number[] = [];
      let tries = 0;
      let peak = 0;
      const entries0 = (await api<StatsResponse>('/v1/stats')).table.entries;
      const started = Date.now();
      while (Date.now() - started < 15_000) {
        tries++;
        const r = spawnSync('ip', ['netns', 'exec', lab.clientNs, 'curl', '-s', '-m', '5', `http://${LAB_VIP}/`], { encoding: 'utf8' });
        if (!/^rs\d$/.test(r.stdout.trim())) failed.push(tries);
        peak = Math.max(peak, (await api<StatsResponse>('/v1/stats')).table.entries);
        await sleep(200);
      }
      await done;
      const c = await counts();
      const ctx = JSON.stringify({ tries, failed, entries0, peak, flood: out, counts: c });
      t.diagnostic(ctx);
      assert.ok(JSON.parse(out).sent > 10_000, ctx);
      assert.deepEqual(failed, [], `every client connected: ${ctx}`);
      // Each client's flow holds an entry (TIME_WAIT after it): the flood's 30 000 SYNs none.
      assert.ok(peak <= entries0 + tries, `the flood took no entries: ${ctx}`);
      assert.equal((await api<StatsResponse>('/v1/stats')).drops.table_full ?? 0, 0);
    } finally {
      if (flood.exitCode === null) flood.kill('SIGTERM');
    }
    // The state where the other defenses show: uvsadm and the metrics.
    const l = spawnSync(process.execPath, [UVSADM, '--socket', lab.socket, '-L', '--defense'], { encoding: 'utf8', timeout: 30000 });
    assert.equal(l.status, 0, l.stderr);
    assert.match(l.stdout, /^syn_proxy\s+3\s+3\s+yes$/m);
    const metrics = lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);
    assert.match(metrics, /^uvs_synproxy_cookies_total [1-9]\d*$/m);
  });

  test('every packet of all the above is counted once on each side: cookies answered in place, our ACK and window update and held packets as extra', async () => {
    // Counters read while nothing moves through uvsd (as test/integration/io-path.test.ts does).
    const stats = () => api<StatsResponse>('/v1/stats');
    let st = await stats();
    for (let settled = false, tries = 0; !settled; tries++) {
      assert.ok(tries < 100, 'no moment without a packet through uvsd in 15 s');
      await sleep(150);
      const next = await stats();
      settled = (['rxPackets', 'txPackets', 'txErrors'] as const).every((k) => next.packets[k] === st.packets[k]);
      st = next;
    }
    const b = balance({ packets: {}, drops: {} }, st as unknown as StatsLike);
    assert.equal(b.difference, 0, JSON.stringify(b));
    assert.ok(b.generated.syn_ack! > 30_000, JSON.stringify(b));
    // Each completed handshake: the server's SYN-ACK answered with our ACK, the held packets (the
    // zero window leaves few or none) and the client's window update — at least one write beyond it.
    const c = await counts();
    assert.ok(c.accepted > 30, JSON.stringify(c));
    assert.ok(b.extra >= c.accepted - c.serverFailures + b.held - c.heldRefused, JSON.stringify({ b, c }));
  });
});
