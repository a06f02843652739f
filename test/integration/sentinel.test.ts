/**
 * Redis Sentinel (`redis: { sentinels: [...], name }`): a real master, a real replica and a real
 * redis-sentinel on loopback; two in-process nodes (test/helpers/sync-node.ts) open flows all
 * along while the master is killed with SIGKILL. Sentinel promotes the replica; the nodes must
 * keep forwarding from local state meanwhile, find the new master through Sentinel by themselves,
 * write there every flow opened since the kill (the queue kept them), and a flow of one node must
 * still be adopted by the other, to the same real server.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD } from '../../lb/verdict';
import { field, tcp } from '../helpers/packets';
import { freePorts } from '../helpers/ports';
import { hasCommand, sleep, startRedis, startServer, syncNode, VIP, waitFor } from '../helpers/sync-node';

const missing = ['redis-server', 'redis-sentinel'].filter((c) => !hasCommand(c));
const skip = missing.length ? `${missing.join(', ')} missing` : false;
const [MASTER, REPLICA, SENTINEL] = freePorts(3) as [number, number, number];
const NAME = 'uvsm';
const procs: ChildProcess[] = [];
const dir = mkdtempSync(join(tmpdir(), 'uvs-sentinel-'));

after(() => {
  for (const p of procs) p.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

async function info(port: number, section: string): Promise<string> {
  const c = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  try {
    return await c.info(section);
  } finally {
    c.disconnect();
  }
}
async function sentinel(...args: string[]): Promise<unknown> {
  const c = new Redis(SENTINEL, '127.0.0.1', { maxRetriesPerRequest: 1 });
  try {
    return await c.call('SENTINEL', ...args);
  } finally {
    c.disconnect();
  }
}
/** Client source ports of the flow records stored in one Redis (client→server keys). */
async function storedPorts(port: number, prefix: string): Promise<Set<number>> {
  const c = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  try {
    const keys = await c.keys(`${prefix}c:*`);
    const recs = keys.length ? await c.mget(keys) : [];
    return new Set(recs.map((r) => Number(r!.split('|')[2]) >>> 16));
  } finally {
    c.disconnect();
  }
}

test('Sentinel failover during traffic: forwarding goes on, the nodes follow the new master, flows opened since the kill are written there and adopted', {
  skip,
  timeout: 120_000,
}, async (t) => {
  const master = await startRedis(MASTER, ['--dir', dir]); // a replica's full sync writes an RDB there
  procs.push(master);
  procs.push(await startRedis(REPLICA, ['--dir', dir, '--replicaof', '127.0.0.1', String(MASTER)]));
  await waitFor('the replica in sync', async () => /master_link_status:up/.test(await info(REPLICA, 'replication')));
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(
    conf,
    [
      `port ${SENTINEL}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${NAME} 127.0.0.1 ${MASTER} 1`,
      `sentinel down-after-milliseconds ${NAME} 500`,
      `sentinel failover-timeout ${NAME} 10000`,
      '',
    ].join('\n'),
  );
  procs.push(await startServer('redis-sentinel', [conf], SENTINEL));
  await waitFor('the sentinel to know the replica', async () => ((await sentinel('replicas', NAME)) as unknown[]).length === 1);

  const P = 's:';
  const redis = { sentinels: [{ host: '127.0.0.1', port: SENTINEL }], name: NAME, keyPrefix: P };
  const a = syncNode('a', { redis, tableSize: 16384 });
  const b = syncNode('b', { redis, tableSize: 16384 });
  a.sync.start();
  b.sync.start();
  let traffic: NodeJS.Timeout | null = null;
  try {
    await waitFor('both nodes connected through the sentinel', () => a.sync.stats.connected && b.sync.stats.connected);

    // Traffic on a: a new connection every 10 ms (SYN + 2 ACKs: its 3rd packet queues it for
    // Redis) and a data segment on an earlier one; every packet must be forwarded.
    const opened: { sport: number; at: number; rip: string }[] = [];
    let refused = 0;
    const client = '198.51.100.20';
    const tick = () => {
      if (opened.length >= 3000) return; // bounded
      const sport = 20000 + opened.length;
      const syn = tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_SYN });
      if (a.run(syn) !== FORWARD) refused++;
      for (let i = 0; i < 2; i++) if (a.run(tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_ACK })) !== FORWARD) refused++;
      opened.push({ sport, at: Date.now(), rip: field(syn).dst });
      const old = opened[Math.floor(Math.random() * opened.length)]!;
      if (a.run(tcp({ src: client, dst: VIP, sport: old.sport, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(100) })) !== FORWARD)
        refused++;
    };
    traffic = setInterval(tick, 10);
    await waitFor('flows written to the master', async () => (await storedPorts(MASTER, P)).size >= 20);

    const killedAt = Date.now();
    master.kill('SIGKILL');
    await waitFor(
      'Sentinel to promote the replica',
      async () => ((await sentinel('get-master-addr-by-name', NAME)) as string[])[1] === String(REPLICA),
      60_000,
    );
    const promotedAt = Date.now();
    await waitFor('a to reconnect to the new master', () => a.sync.stats.connected, 60_000);
    const reconnectedAt = Date.now();
    // Traffic goes on a while after the reconnect, then stops; the queue is flushed.
    await sleep(500);
    clearInterval(traffic);
    traffic = null;
    await waitFor("a's queue flushed", () => a.allWritten(), 30_000);
    t.diagnostic(
      `promoted ${promotedAt - killedAt} ms after the kill, a reconnected after ${reconnectedAt - killedAt} ms; ${opened.length} connections opened, ${a.sync.stats.errors} Redis errors seen`,
    );

    assert.equal(refused, 0, 'every packet was forwarded from local state, during the failover too');
    const since = opened.filter((f) => f.at >= killedAt);
    assert.ok(since.length >= 10, `traffic during the failover: ${since.length} connections`);
    const stored = await storedPorts(REPLICA, P);
    const lost = since.filter((f) => !stored.has(f.sport)).map((f) => f.sport);
    assert.deepEqual(lost, [], 'every connection opened since the kill is in the new master');
    assert.equal(a.sync.stats.dropped, 0);

    // b follows too: a connection a opened after the promotion is adopted by b, to a's server.
    await waitFor('b to reconnect', () => b.sync.stats.connected, 60_000);
    const late = opened[opened.length - 1]!;
    const mid = tcp({ src: client, dst: VIP, sport: late.sport, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) });
    const v = b.run(mid);
    t.diagnostic(v === DROP ? 'b adopted it through a lookup' : 'b adopted it from the stream');
    if (v === DROP) {
      // Not pre-loaded from the stream: parked and looked up in the new master.
      await waitFor('the lookup', () => b.replayed.length === 1);
      assert.deepEqual(b.replayed[0], { verdict: FORWARD, dst: late.rip });
    } else {
      assert.equal(v, FORWARD);
      assert.equal(field(mid).dst, late.rip, 'adopted from the shadow the stream installed');
    }
  } finally {
    if (traffic) clearInterval(traffic);
    await a.stop();
    await b.stop();
  }
});
