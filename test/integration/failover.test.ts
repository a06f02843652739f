/**
 * Two LB nodes, one Redis, real keepalived: established flows survive the death of the node
 * carrying them. keepalived (VRRPv3, both families, a track script on uvsd's /healthz) moves the
 * router's next hop and the servers' gateway; the lab only kills — uvsd alone (SIGKILL, the node
 * lives: the track script faults it) or the whole node (links down, every process SIGKILLed: VRRP
 * timeout). Real Redis (redis-server in its own namespace), real curl streams checked end to end.
 *
 * What makes each case prove what it names: the streams outlast a socket buffer and are checked
 * to be running at the kill, so the surviving node must carry them; and the surviving node's own
 * counters (adoptions, per-real-server connections) must show it took them over from Redis.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ConnectionsResponse, ServicesResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { blobDownload, echoStreams, runTool, type Download } from '../../lab/clients';
import { FailoverLab, LAB_VRRP, REDIS_ADDR, trackScriptCommand, waitFor, type LbNode } from '../../lab/failover-lab';
import { LAB_VIP, LAB_VIP6, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;
const has = (cmd: string) => {
  try {
    return execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).trim() !== '';
  } catch {
    return false;
  }
};
// A missing tool skips these tests on a developer's machine; in CI they run and fail.
const missing = ['redis-server', 'keepalived', 'curl'].filter((c) => !has(c));
const skip = !isRoot ? 'integration tests need root' : missing.length && !process.env.CI ? `missing: ${missing.join(', ')}` : false;

/** A download whose settling is visible synchronously (a stream that ended before the kill proves nothing). */
function track(d: Download): Download & { running: () => boolean } {
  let settled = false;
  void d.done.then(() => (settled = true));
  return { ...d, running: () => !settled };
}

describe('two nodes, keepalived, one Redis: flows survive the death of a node', { skip, timeout: 900_000 }, () => {
  const lab = new FailoverLab(`uvf${process.pid % 10000}`);
  const rs = lab.rsAddrs;
  const web = (weights = [1, 1, 1]) => [
    {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      scheduler: 'rr',
      realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: weights[i] })),
    },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 5353 })) },
    { protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 9007 })) },
    { protocol: 'tcp', address: LAB_VIP6, port: 80, scheduler: 'rr', realServers: lab.rsAddrs6.map((a) => ({ address: a, port: 8080 })) },
  ];
  const stats = async (n: LbNode) => (await apiCall<StatsResponse>(lab.socket(n), 'GET', '/v1/stats')).body;
  const realServers = async (n: LbNode, port: number) =>
    (await apiCall<ServicesResponse>(lab.socket(n), 'GET', '/v1/services')).body.services.find(
      (s) => s.address === LAB_VIP && s.port === port,
    )!.realServers;
  const connections = async (n: LbNode) => (await apiCall<ConnectionsResponse>(lab.socket(n), 'GET', '/v1/connections')).body.connections;
  /** Waits for a condition on a node's /v1/stats; a failure shows the stats it last saw. */
  const waitStat = async (n: LbNode, what: string, cond: (s: StatsResponse) => boolean, timeoutMs = 20000) => {
    let last: StatsResponse | undefined;
    try {
      await waitFor(async () => cond((last = await stats(n))), timeoutMs, `${n}: ${what}`);
    } catch (e) {
      const seen = last ? { adopted: last.adopted, shadows: last.shadows, redis: last.redis, drops: last.drops } : null;
      throw new Error(`${(e as Error).message}; last stats: ${JSON.stringify(seen)}`);
    }
  };

  /** N curl downloads of `mb` MB at `rate` each, started now; each resolves true when byte-identical. */
  const streams = (n: number, mb: number, rate: string, host = LAB_VIP) =>
    Array.from({ length: n }, (_, i) => track(blobDownload(lab.ns.cl, host, 80, mb << 20, 100 + i, rate, 120)));

  /** uvsd on both nodes (connected to Redis), then keepalived with lb1 the master. */
  const startBoth = async (weights?: number[], extra: Record<string, unknown> = {}) => {
    await lab.startUvsd('lb1', lab.config('lb1', web(weights), extra));
    await lab.startUvsd('lb2', lab.config('lb2', web(weights), extra));
    for (const n of ['lb1', 'lb2'] as const) await waitStat(n, 'did not connect to Redis', (s) => s.redis?.connected === true, 10000);
    await lab.startVrrp('lb1');
  };

  const checkStreams = async (ss: Download[]) => {
    const ok = (await Promise.all(ss.map((s) => s.done))).filter(Boolean).length;
    return { started: ss.length, completed: ok, broken: ss.length - ok };
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
  });

  beforeEach(async () => {
    await lab.reset();
  });

  after(async () => {
    await lab.reset().catch(() => undefined);
    lab.down();
  });

  test('six long TCP streams and an echo session through lb1 go on through lb2 after uvsd on lb1 is SIGKILLed (track script)', async () => {
    await startBoth();
    const ss = streams(6, 24, '1M'); // 24 s each: far more than a socket buffer holds, so lb2 must carry them
    // An echo line every 20 ms: the server keeps answering while lb1, alive without uvsd, still
    // holds the gateway for up to a second; none of those answers may reach the client un-NATed.
    const echo = runTool<{ error: string | null; sent: number; echoed: number }>(
      lab.ns.cl,
      ['echo-probe', LAB_VIP, '7', '12', '20'],
      60000,
    ).result;
    await waitFor(
      async () => (await realServers('lb1', 7)).some((r) => r.activeConns === 1),
      20000,
      'the echo session did not start through lb1',
    );
    await waitStat('lb2', 'did not pre-load the seven flows from Redis', (s) => s.shadows >= 7);
    assert.ok(
      ss.every((s) => s.running()),
      'all six still running at the kill',
    );
    const f = await lab.failover('uvsd');
    assert.equal(f.node, 'lb2');
    let adoptedMs = -1;
    await waitStat('lb2', 'did not adopt the six flows', (s) => s.adopted >= 6 && (adoptedMs = Date.now() - f.killedAt) > 0);
    assert.deepEqual(lab.heldAddresses('lb1'), [], 'the node whose uvsd died let the addresses go');
    const r = await checkStreams(ss);
    console.log(
      `# failover (uvsd SIGKILL): streams ${r.started} started, ${r.completed} completed, ${r.broken} broken; lb2 MASTER ${f.vrrpMs} ms, all adopted ${adoptedMs} ms after the kill`,
    );
    assert.deepEqual(r, { started: 6, completed: 6, broken: 0 });
    const e = (await echo).out;
    assert.equal(e?.error, null, `the echo session went on through lb2: ${JSON.stringify(e)}`);
  });

  test('SYN-proxied streams (defense.synProxy: 3) go on through lb2: their records carry the sequence and timestamp deltas', async () => {
    // A shared cookie key, as ECMP'd nodes have; here it is the deltas in Redis that matter.
    await startBoth(undefined, { defense: { synProxy: 3, synProxyKey: 'failover-test-shared-key' } });
    const ss = streams(3, 24, '1M');
    await waitFor(async () => (await stats('lb1')).defense.synProxyCounts.accepted >= 3, 20000, 'the streams went through the SYN proxy');
    await waitStat('lb2', 'did not pre-load the three proxied flows from Redis', (s) => s.shadows >= 3);
    assert.ok(
      ss.every((s) => s.running()),
      'all three still running at the kill',
    );
    const f = await lab.failover('uvsd');
    assert.equal(f.node, 'lb2');
    await waitStat('lb2', 'did not adopt the three flows', (s) => s.adopted >= 3);
    const r = await checkStreams(ss);
    assert.deepEqual(r, { started: 3, completed: 3, broken: 0 });
  });

  test("a node whose uvsd died drops its flows' packets, never forwards them un-NATed, while it still holds the gateway", async () => {
    // A slow track script (3 failures: 2–3 s) keeps the addresses on lb1 well past the servers'
    // first retransmission timeouts. Forwarded un-NATed, those retransmissions would reach the
    // client from the real servers' own addresses, and the client's RSTs would kill the flows on
    // the servers before lb2 could adopt them.
    await lab.startUvsd('lb1', lab.config('lb1', web()));
    await lab.startUvsd('lb2', lab.config('lb2', web()));
    for (const n of ['lb1', 'lb2'] as const) await waitStat(n, 'did not connect to Redis', (s) => s.redis?.connected === true, 10000);
    await lab.startVrrp('lb1', { ...LAB_VRRP, scriptFall: 3 });
    const ss = streams(3, 24, '1M');
    await waitStat('lb2', 'did not pre-load the three flows', (s) => s.shadows >= 3);
    assert.ok(
      ss.every((s) => s.running()),
      'all three still running at the kill',
    );
    const rsts = lab.clientSnmp('Tcp', 'OutRsts');
    const f = await lab.failover('uvsd');
    assert.ok(f.vrrpMs >= 1000, `lb1 held the addresses ${f.vrrpMs} ms after its uvsd died`);
    await waitStat('lb2', 'did not adopt the three flows', (s) => s.adopted >= 3);
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
    assert.equal(
      lab.clientSnmp('Tcp', 'OutRsts') - rsts,
      0,
      "the client never saw a segment from a real server's own address (it would have answered with a RST)",
    );
    // (`ip route get` answers a blackhole with EINVAL: read the routes themselves.)
    assert.equal(
      lab.exec(lab.nodeNs('lb1'), 'ip', ['route', 'show', '10.200.0.0/24']).trim(),
      'blackhole 10.200.0.0/24 metric 4294967295',
      'VIP traffic reaching lb1 is dropped, not looped back to the router',
    );
    assert.equal(
      lab.exec(lab.nodeNs('lb1'), 'ip', ['route', 'show', 'table', '4711']).trim(),
      'blackhole default metric 4294967295',
      'masq replies reaching lb1 are dropped',
    );
  });

  test('IPv6: three long TCP streams through lb1 complete byte-identical through lb2 after lb1 dies whole (VRRP timeout)', async () => {
    await startBoth();
    const ss = streams(3, 24, '1M', LAB_VIP6);
    await waitStat('lb2', 'did not pre-load the three IPv6 flows', (s) => s.shadows >= 3);
    assert.ok(
      ss.every((s) => s.running()),
      'all three still running at the kill',
    );
    const f = await lab.failover('node');
    assert.equal(f.node, 'lb2');
    await waitStat('lb2', 'did not adopt the three IPv6 flows', (s) => s.adopted >= 3);
    const r = await checkStreams(ss);
    console.log(
      `# failover (node dies, IPv6): streams ${r.started} started, ${r.completed} completed; lb2 MASTER ${f.vrrpMs} ms after the kill`,
    );
    assert.deepEqual(r, { started: 3, completed: 3, broken: 0 });
  });

  test('a stream to a real server drained to weight 0 before the kill survives it too', async () => {
    await startBoth();
    const ss = streams(3, 20, '2M'); // rr: one stream per real server; longer than a socket buffer holds
    await waitFor(
      async () => (await realServers('lb1', 80)).every((r) => r.activeConns === 1),
      20000,
      'lb1 did not put one stream on each real server',
    );
    // rs1 is being drained on both nodes: weight 0, its flow must go on, new flows avoid it.
    for (const n of ['lb1', 'lb2'] as const) {
      const r = await apiCall(lab.socket(n), 'PUT', `/v1/services/tcp/${LAB_VIP}/80/realservers/${rs[0]}/8080`, { weight: 0 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const rs1 = (await realServers('lb1', 80)).find((r) => r.address === rs[0])!;
    assert.deepEqual([rs1.weight, rs1.activeConns], [0, 1], 'one stream runs on the weight-0 server at the kill');
    await waitStat('lb2', 'did not pre-load the three flows', (s) => s.shadows >= 3);
    assert.ok(
      ss.every((s) => s.running()),
      'all three still running at the kill',
    );
    await lab.failover('uvsd');
    await waitFor(
      async () => (await realServers('lb2', 80)).find((r) => r.address === rs[0])!.activeConns === 1,
      20000,
      'lb2 did not adopt the stream on the weight-0 server',
    );
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
    assert.ok((await stats('lb2')).adopted >= 3, 'lb2 carried all three');
    assert.equal((await realServers('lb2', 80)).find((r) => r.address === rs[0])!.weight, 0);
  });

  test('without Redis, masq with mh and sloppy_tcp (auto): streams through lb1 go on through lb2 after its uvsd is killed', async () => {
    // Issue 33: lb2 has no record and no shadow; sloppy starts each moved flow on its first packet
    // and mh sends it to the server lb1 had chosen; the servers' replies come back through the
    // gateway, which moved to lb2 with the VIP.
    const mhEcho = [
      { protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'mh', realServers: rs.map((a) => ({ address: a, port: 9007 })) },
    ];
    for (const n of ['lb1', 'lb2'] as const) await lab.startUvsd(n, lab.config(n, mhEcho, { redis: null }));
    await lab.startVrrp('lb1');
    const st = echoStreams(lab.ns.cl, LAB_VIP, 7, 20, 10);
    const ready = await st.ready;
    assert.equal(ready.ready, 20);
    await sleep(1000);
    const f = await lab.failover('uvsd');
    assert.equal(f.node, 'lb2');
    const ss = await st.done;
    const lost = ss.filter((s) => s.error !== null || s.bad !== 0 || s.echoed !== s.sent);
    const s2 = await stats('lb2');
    console.log(`# failover without Redis (mh, sloppy): 20 streams, lost ${lost.length}, started sloppily on lb2 ${s2.sloppyConnections}`);
    assert.deepEqual(
      lost.map((s) => ({ port: s.port, server: s.server, error: s.error })),
      [],
      'no stream lost',
    );
    assert.ok(s2.sloppyConnections >= 20, `lb2 started every stream from a mid-flow packet (${s2.sloppyConnections})`);
  });

  test('a UDP flow keeps its real server across the failover: lb2 adopts it instead of scheduling it anew', async () => {
    await startBoth();
    // One datagram from another socket first takes lb1's rr's first pick, so the session gets the
    // next server. A fresh lb2 that did not adopt the session would schedule it anew, to its rr's
    // first pick: the server of that first datagram (rr is deterministic).
    const ask = JSON.parse(lab.exec(lab.ns.cl, process.execPath, [TOOLS, 'udp-ask', LAB_VIP, '53', 'x'])) as { answer: string | null };
    const firstPick = (ask.answer ?? '').split(' ')[0]!;
    assert.match(firstPick, /^rs[123]$/);
    const p = spawn('ip', ['netns', 'exec', lab.ns.cl, process.execPath, TOOLS, 'udp-session', LAB_VIP, '53', '60', '100'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let text = '';
    p.stdout.on('data', (d: Buffer) => (text += d.toString()));
    const exited = new Promise((r) => p.on('exit', r));
    await waitStat('lb2', 'did not pre-load the UDP flow', (s) => s.shadows >= 1);
    await lab.failover('node');
    await waitStat('lb2', 'did not adopt the UDP flow', (s) => s.adopted >= 1);
    await exited;
    const all = JSON.parse(text).answers as (string | null)[];
    const answers = all.filter((a): a is string => a !== null);
    assert.ok(
      all.slice(-10).every((a) => a !== null),
      `the session's last datagrams were answered, through lb2: ${JSON.stringify(all)}`,
    );
    assert.ok(answers.length >= 45, `most of the 60 datagrams answered: ${JSON.stringify(all)}`);
    assert.equal(new Set(answers).size, 1, `one real server before and after: ${answers.join(' ')}`);
    assert.notEqual(answers[0], firstPick, 'the session went to the server after the first pick');
  });

  test('Redis killed and restarted mid-run: forwarding goes on, queued records are written after the reconnect, and a failover keeps those flows, looked up by a node that missed them', async () => {
    await startBoth();
    lab.killRedis();
    await waitStat('lb1', 'did not notice Redis was down', (s) => s.redis?.connected === false);
    // Connections opened while Redis is down and then idle: one request each (three IPv4, one
    // IPv6), the answer held 20 s. Idle flows are never queued again (no 50th packet, no state
    // change, half of 900 s far off), so only the queue kept across the outage can bring them to Redis.
    const t0 = Date.now();
    const urls = [...Array<string>(3).fill(`http://${LAB_VIP}/hold?ms=20000`), `http://[${LAB_VIP6}]/hold?ms=20000`];
    const held = urls.map((url) => {
      const c = spawn('ip', ['netns', 'exec', lab.ns.cl, 'curl', '-s', '-g', '-m', '90', url], { stdio: ['ignore', 'pipe', 'ignore'] });
      let body = '';
      c.stdout.on('data', (d: Buffer) => (body += d.toString()));
      let running = true;
      const done = new Promise<{ code: number | null; body: string; ms: number }>((r) =>
        c.on('close', (code) => {
          running = false;
          r({ code, body, ms: Date.now() - t0 });
        }),
      );
      return { done, running: () => running };
    });
    await waitStat('lb1', 'did not queue the four held flows', (s) => s.redis!.queueDepth >= 4 && !s.redis!.connected);
    const writtenBefore = (await stats('lb1')).redis!.written;
    const ports = (await connections('lb1'))
      .filter((c) => c.protocol === 'TCP' && c.client.startsWith(`${lab.clientAddr}:`))
      .map((c) => Number(c.client.split(':')[1]));
    assert.equal(ports.length, 3, 'lb1 carries the three held IPv4 connections');
    // lb2 misses lb1's writes and their change stream: it reaches Redis again only after them, so
    // it holds no shadow of these flows and must look each one up when its first packet comes —
    // the server's answer, since the clients are idle: a reply parked, found under its out-key
    // and replayed into the device (a node that reconnects late, or starts after the writes).
    lab.cutRedis('lb2', true);
    try {
      lab.startRedis();
      await lab.waitRedis();
      await waitStat(
        'lb1',
        'did not write its queue after the reconnect',
        (s) => s.redis!.connected && s.redis!.queueDepth === 0 && s.redis!.written >= writtenBefore + 4,
      );
    } finally {
      lab.cutRedis('lb2', false);
    }
    await waitStat('lb2', 'did not reconnect', (s) => s.redis?.connected === true);
    assert.equal((await stats('lb2')).shadows, 0, 'lb2 holds no shadow: it missed the change stream');
    // Read the records back: the in-key of each held flow, whose value names the flow.
    const keys = lab.redisCli(['--scan', '--pattern', 'uvs:c:*']).split('\n').filter(Boolean);
    const recs = keys.map((k) => lab.redisCli(['get', k]).split('|'));
    for (const port of ports) {
      // record: proto|caddr|cports|vaddr|daddr|dports|laddr|fwd|service|realServer|… (redis-sync.ts)
      const rec = recs.find((r) => r[0] === '6' && Number(r[2]) >>> 16 === port);
      assert.ok(rec, `Redis holds the record of the flow from port ${port} (${keys.length} keys)`);
      assert.match(rec[9] ?? '', /^10\.201\.10\.2[123]:8080$/, `its real server: ${rec.join('|')}`);
    }
    assert.ok(
      held.every((h) => h.running()),
      'the held connections still wait for their answers at the kill',
    );
    const killAt = Date.now() - t0;
    const f = await lab.failover('uvsd');
    const bodies = await Promise.all(held.map((h) => h.done));
    const s2 = await stats('lb2');
    console.log(
      `# Redis outage then failover: lb1 killed ${killAt} ms after the held requests, lb2 MASTER ${f.vrrpMs} ms later; ` +
        `answers ended at ${bodies.map((b) => `${b.ms} ms (exit ${b.code})`).join(', ')}; lb2 lookups ${JSON.stringify(s2.redis!.lookups)}`,
    );
    if (!bodies.every((b) => /^rs[123]\ndone\n$/.test(b.body))) {
      // What lb2 saw, for a failure that does not reproduce at will.
      const nonzero = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== 0));
      const mine = (await connections('lb2')).filter((c) => c.protocol === 'TCP' && !c.shadow);
      console.log(
        `# lb2 after the failover: adopted ${s2.adopted}, parked ${s2.parked}, shadows ${s2.shadows}, drops ${JSON.stringify(nonzero(s2.drops))}, ` +
          `redis ${JSON.stringify(s2.redis)}; held IPv4 ports ${ports.join(',')}; lb2's flows ${JSON.stringify(mine)}`,
      );
    }
    for (const b of bodies)
      assert.match(b.body, /^rs[123]\ndone\n$/, `a held answer completed through lb2 (curl exit ${b.code}): ${JSON.stringify(b.body)}`);
    assert.ok(s2.redis!.lookups.hit >= 4, 'lb2 found each held flow by a lookup');
    assert.ok(s2.adopted >= 4, 'lb2 carried the flows written after the reconnect');
  });

  test('tunnel (IPIP) flows fail over too: each node encapsulates from its own address, the servers answer directly', async () => {
    const tunnel = [
      {
        protocol: 'tcp',
        address: LAB_VIP,
        port: 8080,
        scheduler: 'rr',
        forwarding: 'tunnel',
        realServers: rs.map((a) => ({ address: a })),
      },
    ];
    for (const n of ['lb1', 'lb2'] as const) {
      await lab.startUvsd(
        n,
        lab.config(n, tunnel, { dataplane: { vipCidrs: ['10.200.0.0/24'], workers: 2, tableSize: 65536, tunnelSource: lab.backAddr(n) } }),
      );
      await waitStat(n, 'did not connect to Redis', (s) => s.redis?.connected === true, 10000);
    }
    await lab.startVrrp('lb1');
    // Three attempts before the servers decapsulate go unanswered, but lb1 synced their half-open
    // entries: lb2 holds three shadows that are not the streams'. (Readiness probes did the same
    // by chance; a precondition that counted lb2's shadows then let the kill come before the
    // streams' records existed, and lb2 "did not adopt the tunnelled flows".)
    const url = `http://${LAB_VIP}:8080/`;
    for (let i = 0; i < 3; i++)
      assert.throws(() => lab.exec(lab.ns.cl, 'curl', ['-s', '-m', '1', url]), 'no answer before the decapsulators run');
    await waitStat('lb2', 'did not pre-load the three unanswered attempts', (s) => s.shadows >= 3);
    for (const ns of lab.ns.rs)
      lab
        .spawn(
          ns,
          process.execPath,
          [join(ROOT, 'dist', 'control', 'uvs.js'), 'decap', '--vips', LAB_VIP, '--directors', '10.201.10.11,10.201.10.12'],
          { detached: true },
        )
        .unref();
    // The decapsulators start in the background: wait until a request through the tunnel works.
    await waitFor(
      () => {
        try {
          return /^rs/.test(lab.exec(lab.ns.cl, 'curl', ['-s', '-m', '1', url]));
        } catch {
          return false;
        }
      },
      20000,
      'no answer through the tunnel',
    );
    const before = new Set(await lab.flows('lb1'));
    const ss = Array.from({ length: 3 }, (_, i) => track(blobDownload(lab.ns.cl, LAB_VIP, 8080, 24 << 20, 400 + i, '2M', 120)));
    // lb2 holds each stream's own flow, whatever else it holds.
    await lab.waitCarried('lb1', 'lb2', { 'tcp/8080': 3 }, before);
    // 24 MB at 2 MB/s outlasts the client's socket buffer (≤ 6 MB), so every flow still needs the
    // LB after the switch: lb2 must adopt all three.
    assert.ok(
      ss.every((s) => s.running()),
      'all three still running at the kill',
    );
    await lab.failover('node');
    await waitStat('lb2', 'did not adopt the tunnelled flows', (s) => s.adopted >= 3);
    assert.deepEqual(await Promise.all(ss.map((s) => s.done)), [true, true, true]);
  });

  test('a node that returns after a failure stays backup (nopreempt), then carries the flows when the other dies', async () => {
    await startBoth();
    await lab.failover('node'); // lb1 dies; lb2 active
    lab.revive('lb1');
    await lab.startUvsd('lb1', lab.config('lb1', web()));
    await waitStat('lb1', 'did not connect to Redis', (s) => s.redis?.connected === true, 10000);
    lab.startKeepalived('lb1');
    await lab.waitState('lb1', 'BACKUP', 30000); // init_fail: FAULT until the track script's rise
    assert.equal(lab.state('lb2'), 'MASTER', 'the returned node did not take the addresses back');
    const ss = streams(3, 16, '2M'); // through lb2, 8 s each, more than a socket buffer holds: they span the switch back
    await waitStat('lb1', 'did not pre-load the flows lb2 carries', (s) => s.shadows >= 3);
    assert.ok(
      ss.every((s) => s.running()),
      'all three still running at the kill',
    );
    const f = await lab.failover('node'); // now lb2 dies: back to the returned lb1
    assert.equal(f.node, 'lb1');
    await waitStat('lb1', 'the returned lb1 did not adopt the flows', (s) => s.adopted >= 3);
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
  });
});

describe('Redis Cluster as the store', { skip, timeout: 600_000 }, () => {
  const lab = new FailoverLab(`uvk${process.pid % 10000}`);
  const ports = [7000, 7001, 7002];
  const stats = async (n: LbNode) => (await apiCall<StatsResponse>(lab.socket(n), 'GET', '/v1/stats')).body;

  before(async () => {
    lab.up();
    await lab.waitServers();
    for (const port of ports) {
      lab
        .spawn(
          lab.ns.rd,
          'redis-server',
          [
            '--port',
            String(port),
            '--bind',
            REDIS_ADDR,
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            join(lab.dir, `nodes-${port}.conf`),
            '--save',
            '',
            '--appendonly',
            'no',
            '--protected-mode',
            'no',
          ],
          { detached: true },
        )
        .unref();
    }
    for (const port of ports) {
      await waitFor(
        () => {
          try {
            return lab.redisCli(['ping'], port) === 'PONG';
          } catch {
            return false;
          }
        },
        10000,
        `cluster node ${port} did not come up`,
      );
    }
    lab.exec(lab.ns.rd, 'redis-cli', ['--cluster', 'create', ...ports.map((p) => `${REDIS_ADDR}:${p}`), '--cluster-yes'], 30000);
    await waitFor(() => lab.redisCli(['cluster', 'info'], 7000).includes('cluster_state:ok'), 15000, 'the Redis cluster did not form');
  });

  after(async () => {
    await lab.reset().catch(() => undefined);
    lab.down();
  });

  test('three masters: streams running at the kill survive a failover, adopted from flow keys spread over the cluster', async () => {
    const cluster = { cluster: ports.map((port) => ({ host: REDIS_ADDR, port })), nodeId: 'x', countsInterval: 0.5, parkTimeout: 1 };
    const svc = [
      { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
    ];
    for (const n of ['lb1', 'lb2'] as const) {
      await lab.startUvsd(n, { ...lab.config(n, svc), redis: { ...cluster, nodeId: n } });
      await waitFor(async () => (await stats(n)).redis?.connected === true, 10000, `${n} did not connect to the cluster`);
    }
    await lab.startVrrp('lb1');
    const ss = Array.from({ length: 4 }, (_, i) => track(blobDownload(lab.ns.cl, LAB_VIP, 80, 24 << 20, 200 + i, '2M', 120)));
    await waitFor(async () => (await stats('lb2')).shadows >= 4, 20000, 'lb2 did not pre-load the four flows');
    const keys = ports.map((port) => Number(lab.redisCli(['dbsize'], port)));
    assert.ok(keys.filter((k) => k > 0).length >= 2, `flow keys on several masters: ${keys.join(', ')}`);
    assert.ok(
      ss.every((s) => s.running()),
      'all four still running at the kill',
    );
    await lab.failover('uvsd');
    await waitFor(async () => (await stats('lb2')).adopted >= 4, 20000, 'lb2 did not adopt the four flows');
    assert.deepEqual(await Promise.all(ss.map((s) => s.done)), [true, true, true, true]);
  });
});

describe('keepalived configuration', { skip, timeout: 60_000 }, () => {
  // keepalived -t resolves interface names: check in a namespace that has them.
  const ns = `uvkc${process.pid % 100000}`;
  before(() => {
    execFileSync('ip', ['netns', 'add', ns]);
    execFileSync('ip', ['-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1']);
  });
  after(() => {
    execFileSync('ip', ['netns', 'del', ns]);
  });
  const check = (file: string) =>
    execFileSync('ip', ['netns', 'exec', ns, 'keepalived', '-t', '-f', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

  test("the shipped example keepalived.conf passes keepalived's own check", () => {
    check(join(ROOT, 'examples', 'keepalived', 'keepalived.conf'));
  });

  test("the example and the lab's generated configuration agree on timing, tracking and preemption", () => {
    const example = readFileSync(join(ROOT, 'examples', 'keepalived', 'keepalived.conf'), 'utf8');
    const lab = new FailoverLab('x').keepalivedConfig('lb1');
    const lines = (t: string) =>
      t
        .split('\n')
        .map((l) => l.replace(/#.*/, '').trim())
        .filter((l) =>
          /^(state|nopreempt|version|advert_int|interval|timeout|fall|rise|init_fail|enable_script_security|script_user|vrrp_garp_master_\w+)\b/.test(
            l,
          ),
        )
        .sort();
    assert.deepEqual(lines(example), lines(lab));
    // The same track script, over each one's API socket (only uvsd can answer there).
    assert.ok(example.includes(`script "${trackScriptCommand('/run/uvs/uvsd.sock')}"`), 'the example asks the default API socket');
    assert.ok(lab.includes(`script "${trackScriptCommand(new FailoverLab('x').socket('lb1'))}"`), "the lab asks its node's API socket");
  });
});
