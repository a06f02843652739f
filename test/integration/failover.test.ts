/**
 * Two LB nodes, one Redis: established flows survive the death (SIGKILL) of the node carrying
 * them. Real Redis (redis-server in its own namespace), real curl streams checked end to end.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { apiCall } from '../../control/client';
import { blobDownload } from '../../lab/clients';
import { FailoverLab, REDIS_ADDR, type LbNode } from '../../lab/failover-lab';
import { LAB_VIP, LAB_VIP6, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;
const hasRedis = (() => {
  try {
    return require('node:child_process').execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() !== '';
  } catch {
    return false;
  }
})();

interface Stats {
  adopted: number;
  shadows: number;
  redis: { connected: boolean; written: number; received: number; lookups: { hit: number; miss: number }; queueDepth: number } | null;
}

describe('two nodes, one Redis: flows survive the death of a node', { skip: !isRoot ? 'integration tests need root' : !hasRedis ? 'redis-server missing' : false, timeout: 900_000 }, () => {
  const lab = new FailoverLab(`uvf${process.pid % 10000}`);
  const rs = lab.rsAddrs;
  const web = (weights = [1, 1, 1]) => [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: weights[i] })) },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 5353 })) },
    { protocol: 'tcp', address: LAB_VIP6, port: 80, scheduler: 'rr', realServers: lab.rsAddrs6.map((a) => ({ address: a, port: 8080 })) },
  ];
  const stats = async (n: LbNode) => (await apiCall<Stats>(lab.socket(n), 'GET', '/v1/stats')).body;

  /** N curl downloads of `mb` MB at `rate` each, started now; each resolves true when byte-identical. */
  const streams = (n: number, mb: number, rate: string) => Array.from({ length: n }, (_, i) => blobDownload(lab.ns.cl, LAB_VIP, 80, mb << 20, 100 + i, rate));

  const startBoth = async (weights?: number[], extra: Record<string, unknown> = {}) => {
    await lab.startUvsd('lb1', lab.config('lb1', web(weights), extra));
    await lab.startUvsd('lb2', lab.config('lb2', web(weights), extra));
    for (const n of ['lb1', 'lb2'] as const) {
      const deadline = Date.now() + 5000;
      while (!(await stats(n)).redis?.connected) {
        if (Date.now() > deadline) throw new Error(`${n} did not connect to Redis`);
        await sleep(100);
      }
    }
  };

  const checkStreams = async (ss: ReturnType<typeof streams>) => {
    const ok = (await Promise.all(ss.map((s) => s.done))).filter(Boolean).length;
    return { started: ss.length, completed: ok, broken: ss.length - ok };
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
  });

  beforeEach(async () => {
    await lab.stopUvsd('lb1');
    await lab.stopUvsd('lb2');
    lab.switchTo('lb1');
  });

  after(async () => {
    await lab.stopUvsd('lb1').catch(() => undefined);
    await lab.stopUvsd('lb2').catch(() => undefined);
    lab.down();
  });

  test('six long TCP streams through lb1 complete byte-identical through lb2 after lb1 is SIGKILLed', async () => {
    await startBoth();
    const ss = streams(6, 24, '1M'); // 24 s each: far more than a socket buffer holds, so lb2 must carry them
    await sleep(2000);
    const before = await stats('lb1');
    assert.ok(before.redis!.written >= 6, `lb1 wrote its flows to Redis (${before.redis!.written})`);
    const t0 = Date.now();
    await lab.failover();
    let takeover = -1;
    for (let i = 0; i < 200; i++) {
      if ((await stats('lb2')).adopted >= 6) {
        takeover = Date.now() - t0;
        break;
      }
      await sleep(50);
    }
    const r = await checkStreams(ss);
    console.log(`# failover: streams ${r.started} started, ${r.completed} completed, ${r.broken} broken; all adopted ${takeover} ms after the kill`);
    assert.deepEqual(r, { started: 6, completed: 6, broken: 0 });
    assert.ok(takeover >= 0, 'lb2 adopted all six flows');
  });

  test('IPv6: three long TCP streams through lb1 complete byte-identical through lb2 after lb1 is SIGKILLed', async () => {
    await startBoth();
    const ss = Array.from({ length: 3 }, (_, i) => blobDownload(lab.ns.cl, LAB_VIP6, 80, 24 << 20, 200 + i, '1M'));
    await sleep(2000);
    const before = await stats('lb1');
    assert.ok(before.redis!.written >= 3, `lb1 wrote its IPv6 flows to Redis (${before.redis!.written})`);
    await lab.failover();
    let adopted = 0;
    for (let i = 0; i < 200 && adopted < 3; i++) {
      adopted = (await stats('lb2')).adopted;
      if (adopted < 3) await sleep(50);
    }
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
    assert.ok(adopted >= 3, `lb2 adopted the three IPv6 flows (${adopted})`);
  });

  test('a stream to a real server drained to weight 0 before the kill survives it too', async () => {
    await startBoth();
    const ss = streams(3, 20, '2M'); // rr: one stream per real server; longer than a socket buffer holds
    await sleep(1000);
    // rs1 is being drained on both nodes: weight 0, its flow must go on, new flows avoid it.
    for (const n of ['lb1', 'lb2'] as const) {
      const r = await apiCall(lab.socket(n), 'PUT', `/v1/services/tcp/${LAB_VIP}/80/realservers/${rs[0]}/8080`, { weight: 0 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    await sleep(1000);
    await lab.failover();
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
    assert.ok((await stats('lb2')).adopted >= 3, 'lb2 carried all three, the one to the weight-0 server too');
    const svc = (await apiCall<{ services: { port: number; realServers: { address: string; weight: number }[] }[] }>(lab.socket('lb2'), 'GET', '/v1/services')).body.services.find((s) => s.port === 80)!;
    assert.equal(svc.realServers.find((r) => r.address === rs[0])!.weight, 0);
  });

  test('a UDP flow keeps its real server across the failover', async () => {
    await startBoth();
    const p = spawn('ip', ['netns', 'exec', lab.ns.cl, process.execPath, TOOLS, 'udp-session', LAB_VIP, '53', '20', '150'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    p.stdout.on('data', (d: Buffer) => (text += d.toString()));
    const exited = new Promise((r) => p.on('exit', r));
    await sleep(1200);
    await lab.failover();
    await exited;
    const answers = (JSON.parse(text).answers as (string | null)[]).filter((a): a is string => a !== null);
    assert.ok(answers.length >= 16, `most datagrams answered: ${JSON.stringify(answers)}`);
    assert.equal(new Set(answers).size, 1, `one real server before and after: ${answers.join(' ')}`);
  });

  test('Redis killed and restarted mid-run: forwarding goes on, records are written after the reconnect, and a later failover keeps the flows', async () => {
    await startBoth();
    lab.killRedis();
    await sleep(300);
    const ss = streams(3, 30, '2M'); // started while Redis is down; long enough to span the failover
    await sleep(1000);
    const down = await stats('lb1');
    assert.equal(down.redis!.connected, false);
    assert.ok(down.redis!.queueDepth >= 3, `flows queued while Redis is down (${down.redis!.queueDepth})`);
    lab.startRedis();
    await lab.waitRedis();
    const deadline = Date.now() + 8000;
    while ((await stats('lb1')).redis!.queueDepth > 0 || !(await stats('lb2')).redis!.connected) {
      if (Date.now() > deadline) throw new Error('the queue was not flushed after the reconnect');
      await sleep(100);
    }
    await lab.failover();
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
    assert.ok((await stats('lb2')).adopted >= 3, 'lb2 carried the flows written after the reconnect');
  });

  test('tunnel (IPIP) flows fail over too: each node encapsulates from its own address, the servers answer directly', async () => {
    for (const ns of lab.ns.rs) lab.spawn(ns, process.execPath, [join(ROOT, 'dist', 'control', 'uvs.js'), 'decap', '--vips', LAB_VIP, '--directors', '10.201.10.11,10.201.10.12'], { detached: true }).unref();
    const tunnel = [{ protocol: 'tcp', address: LAB_VIP, port: 8080, scheduler: 'rr', forwarding: 'tunnel', realServers: rs.map((a) => ({ address: a })) }];
    await lab.startUvsd('lb1', lab.config('lb1', tunnel, { dataplane: { vipCidrs: ['10.200.0.0/24'], workers: 2, tableSize: 65536, tunnelSource: '10.201.10.11' } }));
    await lab.startUvsd('lb2', lab.config('lb2', tunnel, { dataplane: { vipCidrs: ['10.200.0.0/24'], workers: 2, tableSize: 65536, tunnelSource: '10.201.10.12' } }));
    await sleep(1000);
    const ss = Array.from({ length: 3 }, (_, i) => blobDownload(lab.ns.cl, LAB_VIP, 8080, 24 << 20, 400 + i, '2M').done);
    await sleep(2000);
    await lab.failover();
    assert.deepEqual(await Promise.all(ss), [true, true, true]);
    // 24 MB at 2 MB/s outlasts the client's socket buffer (≤ 6 MB), so every flow still needs the
    // LB after the switch: lb2 must have adopted all three (a shorter stream can finish at the TCP
    // level before the kill while curl still drains its buffer, and then proves nothing).
    const st2 = await stats('lb2');
    assert.ok(st2.adopted >= 3, `lb2 adopted the tunnelled flows: ${JSON.stringify({ adopted: st2.adopted, shadows: st2.shadows })}`);
  });

  test('a node that returns after a failure carries flows again without operator action', async () => {
    await startBoth();
    await lab.failover(); // lb1 dies; lb2 active
    lab.revive('lb1');
    await lab.startUvsd('lb1', lab.config('lb1', web()));
    const ss = streams(3, 16, '2M'); // through lb2, 8 s each, more than a socket buffer holds: they span the switch back
    await sleep(1500);
    await lab.failover(); // now lb2 dies: back to the returned lb1
    assert.deepEqual(await checkStreams(ss), { started: 3, completed: 3, broken: 0 });
    const st = await stats('lb1');
    assert.ok(st.adopted >= 3, `the returned lb1 adopted the flows: ${JSON.stringify(st)}`);
  });
});

describe('Redis Cluster as the store', { skip: !isRoot ? 'integration tests need root' : !hasRedis ? 'redis-server missing' : false, timeout: 600_000 }, () => {
  const lab = new FailoverLab(`uvk${process.pid % 10000}`);
  const ports = [7000, 7001, 7002];

  before(async () => {
    lab.up();
    await lab.waitServers();
    for (const port of ports) {
      lab.spawn(lab.ns.rd, 'redis-server', ['--port', String(port), '--bind', REDIS_ADDR, '--cluster-enabled', 'yes', '--cluster-config-file', join(lab.dir, `nodes-${port}.conf`), '--save', '', '--appendonly', 'no', '--protected-mode', 'no'], { detached: true }).unref();
    }
    await sleep(500);
    lab.exec(lab.ns.rd, 'redis-cli', ['--cluster', 'create', ...ports.map((p) => `${REDIS_ADDR}:${p}`), '--cluster-yes'], 30000);
    const deadline = Date.now() + 15000;
    while (!lab.exec(lab.ns.rd, 'redis-cli', ['-h', REDIS_ADDR, '-p', '7000', 'cluster', 'info']).includes('cluster_state:ok')) {
      if (Date.now() > deadline) throw new Error('the Redis cluster did not form');
      await sleep(200);
    }
  });

  after(async () => {
    await lab.stopUvsd('lb1').catch(() => undefined);
    await lab.stopUvsd('lb2').catch(() => undefined);
    lab.down();
  });

  test('three masters: streams survive a failover with flow keys spread over the cluster', async () => {
    const cluster = { cluster: ports.map((port) => ({ host: REDIS_ADDR, port })), nodeId: 'x', countsInterval: 0.5, parkTimeout: 1 };
    const svc = [{ protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) }];
    for (const n of ['lb1', 'lb2'] as const) await lab.startUvsd(n, { ...lab.config(n, svc), redis: { ...cluster, nodeId: n } });
    for (const n of ['lb1', 'lb2'] as const) {
      const deadline = Date.now() + 8000;
      while (!(await apiCall<Stats>(lab.socket(n), 'GET', '/v1/stats')).body.redis?.connected) {
        if (Date.now() > deadline) throw new Error(`${n} did not connect to the cluster`);
        await sleep(100);
      }
    }
    const ss = Array.from({ length: 4 }, (_, i) => blobDownload(lab.ns.cl, LAB_VIP, 80, 8 << 20, 200 + i, '2M').done);
    await sleep(1500);
    const keys = ports.map((port) => Number(lab.exec(lab.ns.rd, 'redis-cli', ['-h', REDIS_ADDR, '-p', String(port), 'dbsize']).trim()));
    assert.ok(keys.filter((k) => k > 0).length >= 2, `flow keys on several masters: ${keys.join(', ')}`);
    await lab.failover();
    assert.deepEqual(await Promise.all(ss), [true, true, true, true]);
  });
});
