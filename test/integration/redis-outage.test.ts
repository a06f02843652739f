/**
 * After a Redis outage every live local flow is in Redis again within a bounded time, and the
 * catch-up holds a bounded number of commands. Real redis-server on loopback, in-process nodes
 * (test/helpers/sync-node.ts):
 *   - a hang (SIGSTOP: the connection stays up, nothing answers) long enough for the write queue
 *     to drop records: after SIGCONT every flow is in Redis and another node, which lived
 *     through the hang too, carries each one;
 *   - a restart that lost every key (no persistence): quiet flows — no packet after their 3rd, so
 *     no sync rule writes them again for 7.5 minutes — are in Redis again, and the walk that wrote
 *     them never pushed the queue past redis.maxQueue;
 *   - a catch-up of 20,000 queued records: the commands waiting for Redis stay within one write
 *     round's (WRITE_BATCH records, two SETs each, and a PUBLISH), not the queue's.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { TCPF_ACK } from '../../conntrack/state';
import { FORWARD } from '../../lb/verdict';
import { field, tcp } from '../helpers/packets';
import { freePorts } from '../helpers/ports';
import { hasCommand, sleep, startRedis, syncNode, VIP, waitFor, openFlow, storedPorts, type SyncNode } from '../helpers/sync-node';

const skip = hasCommand('redis-server') ? false : 'redis-server missing';
// PORT + 1 is the restarted server's; nothing listens on LATE_PORT until the catch-up test starts it.
const [PORT, , LATE_PORT] = freePorts(3) as [number, number, number];
const servers: ChildProcess[] = [];
after(() => {
  for (const p of servers) p.kill('SIGKILL');
});
const url = (port = PORT) => `redis://127.0.0.1:${port}`;

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

/**
 * b carries a's flow after a failover: a mid-flow packet goes to the server a chose — at once if
 * b holds the flow as a shadow (a published it), else after a lookup in Redis (parked, replayed).
 */
async function carries(b: SyncNode, client: string, sport: number, rip: string): Promise<void> {
  const n = b.replayed.length;
  const pkt = tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_ACK });
  if (b.run(pkt) === FORWARD) {
    assert.equal(field(pkt).dst, rip, `${client}:${sport} adopted from a shadow, to the server a chose`);
    return;
  }
  await waitFor(`b to adopt ${client}:${sport} by a lookup`, () => b.replayed.length === n + 1);
  assert.deepEqual(b.replayed[n], { verdict: FORWARD, dst: rip }, `${client}:${sport} adopted by a lookup, to the server a chose`);
}

test('Redis hung (SIGSTOP) while flows start and the write queue drops records: after SIGCONT every live flow is in Redis, and another node carries each', {
  skip,
  timeout: 90_000,
}, async (t) => {
  const P = 'h:';
  const redis = await startRedis(PORT);
  servers.push(redis);
  const opts = { url: url(), keyPrefix: P, commandTimeout: 0.3, maxQueue: 100 };
  const a = syncNode('a', { redis: opts });
  // b lives through the hang as a's peer does (its connection times out and is re-made too).
  const b = syncNode('b', { redis: opts });
  a.sync.start();
  b.sync.start();
  let stopped = false;
  try {
    await waitFor('connected', () => a.sync.stats.connected && b.sync.stats.connected);
    const rip0 = openFlow(a, '192.0.2.30', 46000);
    await waitFor('the first flow written', () => a.allWritten() && a.sync.stats.written === 1);
    redis.kill('SIGSTOP');
    stopped = true;
    // 150 flows start while Redis answers nothing: the first records go into the hung
    // connection, the rest wait in a queue of 100 that drops the oldest.
    const rips = new Map<number, string>();
    for (const sport of range(47000, 150)) {
      rips.set(sport, openFlow(a, '192.0.2.31', sport));
      if (sport % 10 === 0) await sleep(20);
    }
    await waitFor('records dropped from the queue', () => a.sync.stats.dropped >= 50);
    await waitFor('a command timeout', () => a.sync.stats.commandTimeouts >= 1);
    await sleep(1000);
    redis.kill('SIGCONT');
    stopped = false;
    const tCont = Date.now();
    await waitFor('every live flow in Redis', async () => (await storedPorts(PORT, P)).length === 151, 15_000).catch(async (e: Error) => {
      throw new Error(
        `${e.message}: ${(await storedPorts(PORT, P)).length} of 151 stored; ${JSON.stringify({ dropped: a.sync.stats.dropped, resyncs: a.sync.stats.resyncs, resynced: a.sync.stats.resynced })}`,
      );
    });
    t.diagnostic(
      `every flow in Redis ${Date.now() - tCont} ms after SIGCONT; dropped ${a.sync.stats.dropped}, walks ${a.sync.stats.resyncs}, records they queued ${a.sync.stats.resynced}`,
    );
    assert.deepEqual(await storedPorts(PORT, P), [46000, ...range(47000, 150)]);
    assert.ok(a.sync.stats.resyncs >= 1);
    await waitFor('a caught up', () => a.allWritten() && !a.sync.stats.resyncing);

    // a fails: b carries every flow — the one from before the hang, the first and the last of those
    // that started during it (the first ones' records were dropped from a's queue).
    await carries(b, '192.0.2.30', 46000, rip0);
    for (const sport of [47000, 47001, 47049, 47050, 47149]) await carries(b, '192.0.2.31', sport, rips.get(sport)!);
  } finally {
    if (stopped) redis.kill('SIGCONT');
    await a.stop();
    await b.stop();
  }
});

test('Redis restarted without its data: quiet flows are written again once it answers (those queued meanwhile once), and the walk never overflows the queue', {
  skip,
  timeout: 90_000,
}, async (t) => {
  const P = 'r:';
  const port = PORT + 1;
  let redis = await startRedis(port);
  servers.push(redis);
  const a = syncNode('a', { redis: { url: url(port), keyPrefix: P, maxQueue: 100 }, tableSize: 4096 });
  a.sync.start();
  try {
    await waitFor('a connected', () => a.sync.stats.connected);
    // 300 quiet flows: three packets each, then nothing (no sync rule writes them again soon).
    for (const sport of range(50000, 300)) {
      openFlow(a, '198.51.100.40', sport);
      if (sport % 50 === 0) await waitFor('written', () => a.allWritten());
    }
    await waitFor('all written', () => a.allWritten() && a.sync.stats.written === 300);
    assert.equal((await storedPorts(port, P)).length, 300);

    redis.kill('SIGKILL');
    await waitFor('a disconnected', () => !a.sync.stats.connected);
    // 50 flows start while Redis is down: their records wait in the queue, the walk skips them.
    for (const sport of range(51000, 50)) openFlow(a, '198.51.100.40', sport);
    await waitFor('queued', () => a.sync.stats.queueDepth === 50);
    const catchUps = a.sync.stats.catchUps;
    redis = await startRedis(port); // empty: no persistence
    servers.push(redis);
    const tBack = Date.now();
    // "Caught up" (GET /v1/stats, uvs_redis_catching_up) means written: at the moment uvsd says
    // so, the queued records and every record of the walk are in Redis — not a moment later.
    await waitFor('a caught up', () => a.sync.stats.catchUps > catchUps && !a.sync.stats.catchingUp, 15_000);
    assert.equal((await storedPorts(port, P)).length, 350, 'every owed record is written when the catch-up ends');
    const took = a.sync.stats.lastCatchUpSeconds;
    assert.ok(took !== null && took > 0 && took * 1000 <= Date.now() - tBack, `catch-up ${took} s, within the time since Redis came back`);
    await waitFor('every flow in Redis again', async () => (await storedPorts(port, P)).length === 350, 15_000).catch(async (e: Error) => {
      throw new Error(
        `${e.message}: ${(await storedPorts(port, P)).length} of 350 stored; ${JSON.stringify({ resyncs: a.sync.stats.resyncs, resynced: a.sync.stats.resynced })}`,
      );
    });
    await waitFor('the walk to end', () => a.allWritten() && !a.sync.stats.resyncing);
    t.diagnostic(
      `every flow in Redis ${Date.now() - tBack} ms after the restart; walks ${a.sync.stats.resyncs}, records queued ${a.sync.stats.resynced}`,
    );
    assert.deepEqual(await storedPorts(port, P), [...range(50000, 300), ...range(51000, 50)]);
    assert.equal(a.sync.stats.resyncs, 1);
    assert.equal(a.sync.stats.resynced, 300, 'the walk queued the quiet flows, not those queued since the connection was lost');
    assert.equal(a.sync.stats.dropped, 0, 'the walk queued no more than the queue had room for');
  } finally {
    await a.stop();
  }
});

test('a catch-up of 20,000 queued records holds one write round of commands at a time, not the queue', {
  skip,
  timeout: 120_000,
}, async (t) => {
  const P = 'c:';
  const port = LATE_PORT; // down until the flows are queued
  const a = syncNode('a', { redis: { url: url(port), keyPrefix: P }, tableSize: 32768 });
  a.sync.start();
  const N = 20_000;
  try {
    assert.equal(a.sync.stats.connected, false);
    for (let i = 0; i < N; i++) {
      openFlow(a, `198.51.${100 + (i >> 8)}.${i & 255}`, 30000 + (i % 7));
      if (i % 2000 === 1999) await sleep(60); // the worker's sync ring (2 events a flow) drained into the queue
    }
    await waitFor('the queue to be collected', () => a.sync.stats.queueDepth === N);
    const redis = await startRedis(port);
    servers.push(redis);
    let most = 0;
    let samples = 0;
    while (!(a.sync.stats.connected && a.allWritten())) {
      most = Math.max(most, a.sync.pendingCommands());
      samples++;
      await new Promise((r) => setImmediate(r));
    }
    t.diagnostic(
      `most commands waiting for Redis: ${most} (${samples} samples), records written ${a.sync.stats.written}, catch-up ${a.sync.stats.lastCatchUpSeconds} s`,
    );
    assert.ok(a.sync.stats.written >= N);
    assert.equal((await storedPorts(port, P)).length, N);
    // One round: 1000 records × 2 SETs + 1 PUBLISH, and the odd counts exchange (a few commands).
    assert.ok(most <= 2 * 1000 + 1 + 16, `commands waiting for Redis stayed within one round: ${most}`);
    assert.ok(most >= 1000, `the catch-up was sampled while it ran: ${most}`);
  } finally {
    await a.stop();
  }
});
