/**
 * The Redis sync's promises (README "Several nodes and Redis") against a real redis-server on
 * loopback, with in-process nodes (test/helpers/sync-node.ts): the write queue is bounded while
 * Redis is down — the oldest records are dropped and counted, the rest written after the
 * reconnect, and the dropped ones by the walk of the table that follows; a mid-flow packet that
 * finds nothing is parked while Redis is asked, replayed on a hit and dropped on a miss, and the
 * first packet of a new flow never waits; a drain waits for the connections every node reports,
 * not only this node's.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import Redis from 'ioredis';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import { field, tcp } from '../helpers/packets';
import { freePorts } from '../helpers/ports';
import { hasCommand, RS, sleep, startRedis, syncNode, VIP, waitFor, openFlow, storedPorts, type SyncNode } from '../helpers/sync-node';

const skip = hasCommand('redis-server') ? false : 'redis-server missing';
const [PORT, LATE_PORT] = freePorts(2) as [number, number];
const servers: ChildProcess[] = [];
let w: Redis;

before(async () => {
  if (skip) return;
  servers.push(await startRedis(PORT));
  w = new Redis(PORT, '127.0.0.1', { maxRetriesPerRequest: 1 });
});
after(() => {
  w?.disconnect();
  for (const p of servers) p.kill('SIGKILL');
});

const url = (port = PORT) => `redis://127.0.0.1:${port}`;

test('Redis down: the write queue keeps the newest maxQueue records, drops the oldest (counted), writes them after the reconnect, then the dropped ones from the table', {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 'q:';
  // Nothing listens on LATE_PORT yet: the node starts with Redis down.
  const a = syncNode('a', { redis: { url: url(LATE_PORT), keyPrefix: P, maxQueue: 100 } });
  a.sync.start();
  try {
    assert.equal(a.sync.stats.connected, false);
    for (let i = 0; i < 150; i++) openFlow(a, '198.51.100.7', 20000 + i); // oldest first
    await waitFor('the queue to be collected', () => a.sync.stats.dropped + a.sync.stats.queueDepth === 150);
    assert.equal(a.sync.stats.queueDepth, 100, 'bounded at maxQueue');
    assert.equal(a.sync.stats.dropped, 50, 'the rest dropped and counted');
    assert.equal(a.sync.stats.written, 0);
    assert.equal(a.table.count(), 150, 'forwarding state is untouched');

    servers.push(await startRedis(LATE_PORT));
    // The queued records first; then, records having been dropped, a walk of the table queues every
    // live flow again (redis-outage.test.ts), the 50 dropped ones included.
    await waitFor('every live flow in Redis', async () => (await storedPorts(LATE_PORT, P)).length === 150, 30_000);
    await waitFor('the walk to end', () => a.allWritten() && !a.sync.stats.resyncing);
    assert.deepEqual(
      await storedPorts(LATE_PORT, P),
      Array.from({ length: 150 }, (_, i) => 20000 + i),
      'every live flow is in Redis, the 50 dropped from the queue too',
    );
    assert.equal(a.sync.stats.resyncs, 1);
    assert.equal(a.sync.stats.resynced, 150);
    assert.ok(a.sync.stats.written >= 150);
    assert.equal(a.sync.stats.dropped, 50, 'the walk dropped nothing');
  } finally {
    await a.stop();
  }
});

test('writes Redis refuses (out of memory) stay queued and are written once it accepts them again', { skip, timeout: 60_000 }, async () => {
  const P = 'm:';
  const a = syncNode('a', { redis: { url: url(), keyPrefix: P } });
  a.sync.start();
  try {
    await waitFor('a connected', () => a.sync.stats.connected);
    // noeviction and a 1-byte limit: every SET is refused with an OOM error, the connection stays up.
    await w.config('SET', 'maxmemory-policy', 'noeviction');
    await w.config('SET', 'maxmemory', '1');
    for (let i = 0; i < 20; i++) openFlow(a, '198.51.100.8', 21000 + i);
    await waitFor('refused writes', () => a.sync.stats.errors >= 2);
    assert.equal(a.sync.stats.connected, true, 'still connected: Redis answers, with errors');
    assert.equal(a.sync.stats.written, 0);
    assert.equal(a.sync.stats.queueDepth, 20, 'the refused records are kept');
    await w.config('SET', 'maxmemory', '0');
    await waitFor('written', () => a.allWritten());
    assert.equal(a.sync.stats.written, 20);
    assert.deepEqual(
      await storedPorts(PORT, P),
      Array.from({ length: 20 }, (_, i) => 21000 + i),
    );
  } finally {
    await w.config('SET', 'maxmemory', '0');
    await a.stop();
  }
});

test('parked packets: a hit is installed and the packet replayed to the recorded server, a miss dropped (counted); a SYN never waits', {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 'p:';
  const a = syncNode('a', { redis: { url: url(), keyPrefix: P } });
  a.sync.start();
  let b: SyncNode | null = null;
  try {
    await waitFor('a connected', () => a.sync.stats.connected);
    const rip = openFlow(a, '192.0.2.10', 43000);
    const rip2 = openFlow(a, '192.0.2.12', 43002);
    await waitFor('a to write its flows', async () => {
      const ports = await storedPorts(PORT, P);
      return ports.includes(43000) && ports.includes(43002);
    });
    // b starts after the write: it missed the change stream and must ask Redis.
    b = syncNode('b', { redis: { url: url(), keyPrefix: P } });
    b.sync.start();
    await waitFor('b connected', () => b!.sync.stats.connected);
    assert.equal(b.table.count(), 0);

    // The first packet of a new flow is scheduled at once, never parked.
    assert.equal(b.run(tcp({ src: '192.0.2.99', dst: VIP, sport: 44000, dport: 80, flags: TCPF_SYN })), FORWARD);
    assert.equal(b.counter(L.C_PARKED), 0);

    // A mid-flow packet of a's flow: parked (not answered with a RST), looked up, replayed.
    const mid = tcp({ src: '192.0.2.10', dst: VIP, sport: 43000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(20) });
    assert.equal(b.run(mid), DROP, 'parked: nothing goes out yet');
    assert.equal(b.counter(L.C_PARKED), 1);
    await waitFor('the replay', () => b!.replayed.length === 1);
    assert.deepEqual(b.replayed[0], { verdict: FORWARD, dst: rip }, 'replayed to the server a chose');
    assert.equal(b.sync.stats.lookups.hit, 1);
    assert.equal(b.counter(L.C_ADOPTED), 1, 'the replayed packet adopted the installed entry');
    // Later packets find the entry: no more parking.
    assert.equal(b.run(tcp({ src: '192.0.2.10', dst: VIP, sport: 43000, dport: 80, flags: TCPF_ACK })), FORWARD);
    assert.equal(b.counter(L.C_PARKED), 1);

    // The server's side of another flow b never saw (a failover moves the servers' gateway too): its
    // packet is parked, looked up under the out-key, replayed, and leaves from the VIP.
    const fromServer = tcp({ src: rip2, dst: '192.0.2.12', sport: 8080, dport: 43002, flags: TCPF_ACK, payload: new Uint8Array(20) });
    assert.equal(b.run(fromServer), DROP, 'parked: nothing goes out yet');
    assert.equal(b.counter(L.C_PARKED), 2);
    await waitFor('the replay of the server packet', () => b!.replayed.length === 2);
    assert.deepEqual(b.replayed[1], { verdict: FORWARD, dst: '192.0.2.12' }, 'replayed to the client');
    assert.equal(b.sync.stats.lookups.hit, 2);
    assert.equal(b.counter(L.C_ADOPTED), 2, 'the replayed server packet adopted the installed entry');

    // A flow Redis does not know: parked, missed, dropped — no replay, no entry.
    const before = b.table.count();
    assert.equal(b.run(tcp({ src: '192.0.2.11', dst: VIP, sport: 43001, dport: 80, flags: TCPF_ACK })), DROP);
    await waitFor('the miss', () => b!.sync.stats.lookups.miss === 1);
    assert.equal(b.replayed.length, 2, 'nothing replayed');
    assert.equal(b.table.count(), before, 'no entry installed');
    assert.equal(b.sync.stats.parkedWaiting, 0, 'nothing left waiting');
  } finally {
    await a.stop();
    await b?.stop();
  }
});

test('a drain waits for the connections other nodes report: the server is deleted only once the cluster-wide count is 0', {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 'd:';
  const a = syncNode('a', { redis: { url: url(), keyPrefix: P, countsInterval: 0.2 } });
  const b = syncNode('b', { redis: { url: url(), keyPrefix: P, countsInterval: 0.2 } });
  a.sync.start();
  b.sync.start();
  try {
    await waitFor('connected', () => a.sync.stats.connected && b.sync.stats.connected);
    // a carries one established connection to X; b carries none.
    const x = openFlow(a, '192.0.2.20', 45000);
    const service = a.model.list()[0]!.key;
    await waitFor("b to see a's count", () => b.sync.remoteCounts(service, `${x}:8080`)[0] === 1);
    assert.equal(b.model.list()[0]!.realServers.find((r) => r.address === x)!.activeConns, 0, 'b has no connection of its own to X');

    // X is removed from b's configuration: kept at weight 0 and drained, because a still uses it.
    b.apply(RS.filter((r) => r !== x));
    assert.deepEqual(
      b.model.drains().map((d) => d.realServer),
      [`${x}:8080`],
    );
    assert.equal(b.model.list()[0]!.realServers.find((r) => r.address === x)!.weight, 0);
    assert.equal(b.model.checkDrains(), false, 'still a connection on another node');
    assert.equal(b.model.drains().length, 1);

    // a's connection ends (its entry expires): once a reports 0, b's next check deletes X.
    a.table.expire((a.table.now() + 3600_000) | 0);
    await waitFor("b to see a's count drop", () => b.sync.remoteCounts(service, `${x}:8080`)[0] === 0);
    assert.equal(b.model.checkDrains(), true);
    assert.equal(b.model.drains().length, 0);
    assert.equal(
      b.model.list()[0]!.realServers.some((r) => r.address === x),
      false,
      'X deleted',
    );
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("a drain holds a node's counts after it dies, until its flows could have expired: its idle flow to the drained server is still adopted", {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 'h:';
  // ESTABLISHED lasts 6 s here, so the hold ends within the test; counts every 0.2 s (TTL 0.6 s).
  const o = { redis: { url: url(), keyPrefix: P, countsInterval: 0.2 }, timeouts: { tcp: 6 } };
  const a = syncNode('a', o);
  const b = syncNode('b', o);
  a.sync.start();
  b.sync.start();
  try {
    await waitFor('connected', () => a.sync.stats.connected && b.sync.stats.connected);
    const x = openFlow(a, '192.0.2.30', 46000);
    const service = a.model.list()[0]!.key;
    await waitFor("b to see a's count", () => b.sync.remoteCounts(service, `${x}:8080`)[0] === 1);
    b.apply(RS.filter((r) => r !== x));
    assert.equal(b.model.drains().length, 1, 'X drains on b: a still uses it');
    // a dies (no last word): its counts key expires after three intervals.
    await a.stop();
    await waitFor("a's counts to expire in Redis", async () => (await w.exists(`${P}counts:a`)) === 0);
    await waitFor('an exchange after that', () => b.sync.remoteNodes.length === 0);
    assert.deepEqual(b.sync.heldNodes, ['a'], "b holds a's last report");
    assert.deepEqual(b.sync.remoteCounts(service, `${x}:8080`), [1, 0]);
    assert.equal(b.model.checkDrains(), false, "the drain waits for a's flow");
    // The idle flow's next packet reaches b (the router moved it): adopted, to X.
    const mid = tcp({ src: '192.0.2.30', dst: VIP, sport: 46000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) });
    const v = b.run(mid);
    if (v === DROP) await waitFor('the replay', () => b.replayed.length === 1);
    assert.equal(v === FORWARD ? field(mid).dst : b.replayed[0]!.dst, x, 'to the server a chose');
    // Once a's flows could all have expired, its report is let go; b's own adopted entry (idle)
    // expires too, and the drain ends.
    await waitFor(
      'the hold to end and the drain to finish',
      () => {
        b.table.expire(b.table.now()); // uvsd's sweeper
        return b.model.checkDrains();
      },
      30_000,
    );
    assert.deepEqual(
      b.sync.remoteCounts(service, `${x}:8080`),
      [0, 0],
      "a's active count let go (its inactive ones are held for the longest other timeout)",
    );
    assert.equal(
      b.model.list()[0]!.realServers.some((r) => r.address === x),
      false,
      'X deleted',
    );
  } finally {
    await a.stop();
    await b.stop();
  }
});

test('a server a drain deleted is served to flows no count saw (a node started after another died): their records still adopt to it', {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 't:';
  const o = { redis: { url: url(), keyPrefix: P, countsInterval: 0.2 }, timeouts: { tcp: 30 } };
  const a = syncNode('a', o);
  a.sync.start();
  let c: SyncNode | null = null;
  try {
    await waitFor('a connected', () => a.sync.stats.connected);
    const x = openFlow(a, '192.0.2.40', 47000);
    await waitFor('a to write its flow', async () => (await storedPorts(PORT, P)).includes(47000));
    await a.stop();
    await waitFor("a's counts to expire in Redis", async () => (await w.exists(`${P}counts:a`)) === 0);
    // c never saw a's report: removing X finds no connection anywhere and deletes it at once.
    c = syncNode('c', o);
    c.sync.start();
    await waitFor('c connected', () => c!.sync.stats.connected);
    c.apply(RS.filter((r) => r !== x));
    assert.equal(c.model.drains().length, 0, 'deleted, not drained');
    assert.equal(
      c.model.list()[0]!.realServers.some((r) => r.address === x),
      false,
    );
    // a's idle flow arrives at c: looked up, and adopted to X from the drained servers' trash.
    const mid = tcp({ src: '192.0.2.40', dst: VIP, sport: 47000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) });
    assert.equal(c.run(mid), DROP, 'parked');
    await waitFor('the lookup', () => c!.sync.stats.lookups.hit + c!.sync.stats.lookups.miss + c!.sync.stats.lookups.refused > 0);
    assert.equal(c.sync.stats.lookups.hit, 1, JSON.stringify(c.sync.stats.lookups));
    await waitFor('the replay', () => c!.replayed.length === 1);
    assert.deepEqual(c.replayed[0], { verdict: FORWARD, dst: x });
    const next = tcp({ src: '192.0.2.40', dst: VIP, sport: 47000, dport: 80, flags: TCPF_ACK });
    assert.equal(c.run(next), FORWARD, 'later packets find the entry');
    assert.equal(field(next).dst, x);
    // Nothing new is scheduled to X.
    for (let i = 0; i < 6; i++) {
      const syn = tcp({ src: '192.0.2.41', dst: VIP, sport: 48000 + i, dport: 80, flags: TCPF_SYN });
      assert.equal(c.run(syn), FORWARD);
      assert.notEqual(field(syn).dst, x);
    }
  } finally {
    await a.stop();
    await c?.stop();
  }
});

test('a mid-flow packet Redis knows nothing of gets a second chance on its next miss: scheduled (sloppy mh), or refused with a RST (rr)', {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 's:';
  const mh = syncNode('m', { redis: { url: url(), keyPrefix: P }, scheduler: 'mh' });
  const rr = syncNode('r', { redis: { url: url(), keyPrefix: P } });
  mh.sync.start();
  rr.sync.start();
  try {
    await waitFor('connected', () => mh.sync.stats.connected && rr.sync.stats.connected);
    const ack = (sport: number) => tcp({ src: '192.0.2.60', dst: VIP, sport, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(8) });
    // Each node its own flow: the flow mh starts is written to Redis, where rr would find it.
    for (const [n, name, sport] of [
      [mh, 'mh', 49000],
      [rr, 'rr', 49010],
    ] as const) {
      // The first miss drops (a live node's record may be on its way); so does one too soon after.
      assert.equal(n.run(ack(sport)), DROP, `${name}: parked`);
      await waitFor(`${name}: the first miss`, () => n.sync.stats.lookups.miss === 1);
      assert.equal(n.run(ack(sport)), DROP);
      await waitFor(`${name}: the second miss`, () => n.sync.stats.lookups.miss === 2);
      assert.equal(n.sync.stats.secondChances, 0, `${name}: no second chance within ${L.PERMIT_MIN_MS} ms`);
      assert.equal(n.replayed.length, 0);
      // The client's next retransmission, later: its second chance.
      await sleep(L.PERMIT_MIN_MS + 50);
      assert.equal(n.run(ack(sport)), DROP, `${name}: parked again`);
      await waitFor(`${name}: the second chance`, () => n.replayed.length === 1);
      assert.equal(n.sync.stats.secondChances, 1);
      assert.equal(n.counter(L.C_SECOND_CHANCE), 1, `${name}: the worker took the permit`);
    }
    // mh is consistent: sloppy (auto) schedules the packet; rr is not: a RST answers it.
    assert.equal(mh.replayed[0]!.verdict, FORWARD);
    assert.ok(RS.includes(mh.replayed[0]!.dst));
    assert.equal(mh.counter(L.C_SLOPPY), 1);
    assert.equal(mh.run(ack(49000)), FORWARD, 'later packets find the entry');
    assert.equal(rr.replayed[0]!.verdict, REPLY, 'a RST to the client');
    assert.equal(rr.counter(L.C_SLOPPY), 0);
    // A flow whose record arrives between its misses is adopted, never given a second chance.
    const a = syncNode('a', { redis: { url: url(), keyPrefix: P }, scheduler: 'mh' });
    a.sync.start();
    await waitFor('a connected', () => a.sync.stats.connected);
    assert.equal(mh.run(ack(49100)), DROP);
    await waitFor('the first miss', () => mh.sync.stats.lookups.miss === 3);
    const x = openFlow(a, '192.0.2.60', 49100);
    await waitFor('its record', async () => (await storedPorts(PORT, P)).includes(49100));
    await sleep(L.PERMIT_MIN_MS + 50);
    const pkt = ack(49100);
    if (mh.run(pkt) === FORWARD) assert.equal(field(pkt).dst, x, 'adopted from the shadow the change stream brought');
    else {
      await waitFor('the adoption', () => mh.replayed.length === 2);
      assert.deepEqual(mh.replayed[1], { verdict: FORWARD, dst: x }, 'adopted from the record a lookup found');
    }
    assert.equal(mh.sync.stats.secondChances, 1, 'no second chance for a flow Redis knew');
    await a.stop();
  } finally {
    await mh.stop();
    await rr.stop();
  }
});

test('Redis unreachable: a mid-flow packet still gets its second chance (no silent black hole)', { skip, timeout: 30_000 }, async () => {
  const n = syncNode('u', { redis: { url: 'redis://127.0.0.1:1', keyPrefix: 'u:' }, scheduler: 'mh' });
  n.sync.start();
  try {
    const ack = () => tcp({ src: '192.0.2.61', dst: VIP, sport: 49200, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(8) });
    assert.equal(n.run(ack()), DROP);
    await waitFor('the first packet read', () => n.sync.stats.lookups.error === 1);
    await sleep(L.PERMIT_MIN_MS + 50);
    assert.equal(n.run(ack()), DROP);
    await waitFor('the second chance', () => n.replayed.length === 1);
    assert.equal(n.replayed[0]!.verdict, FORWARD, 'scheduled (sloppy mh)');
  } finally {
    await n.stop();
  }
});

test("a client reuses its port for a new flow to another server: the other node replaces the old flow's shadow and carries the new one there", {
  skip,
  timeout: 60_000,
}, async () => {
  const P = 'u:';
  const a = syncNode('a', { redis: { url: url(), keyPrefix: P } });
  const b = syncNode('b', { redis: { url: url(), keyPrefix: P } });
  a.sync.start();
  b.sync.start();
  try {
    await waitFor('connected', () => a.sync.stats.connected && b.sync.stats.connected);
    // Flow 1 from 192.0.2.50:40000; b holds it as a shadow.
    const rip1 = openFlow(a, '192.0.2.50', 40000);
    await waitFor('b to hold flow 1', () => b.table.shadows() === 1);
    // Flow 1 ends on a (its entry goes); b's shadow of it lives on until its own expiry, as a
    // closed flow's shadow lives its TIME_WAIT. The client opens flow 2 from the same port.
    a.table.expire((a.table.now() + 3600_000) | 0);
    const rip2 = openFlow(a, '192.0.2.50', 40000);
    assert.notEqual(rip2, rip1, 'round robin: flow 2 goes to another server');
    await waitFor('a to write flow 2', () => a.allWritten() && a.sync.stats.written === 2);
    await waitFor("b to take flow 2's record", () => b.sync.stats.received + b.sync.stats.refused.not_installed === 2);
    assert.equal(b.sync.stats.refused.not_installed, 0, "flow 2's record replaced flow 1's shadow");
    assert.equal(b.sync.stats.superseded, 1);
    assert.equal(b.table.shadows(), 1);

    // a fails. The server's next packet reaches b (the return path moved first): flow 2's entry.
    const fromServer = tcp({ src: rip2, dst: '192.0.2.50', sport: 8080, dport: 40000, flags: TCPF_ACK });
    assert.equal(b.run(fromServer), FORWARD, 'no lookup needed: b holds flow 2');
    assert.deepEqual([field(fromServer).src, field(fromServer).dst], [VIP, '192.0.2.50']);
    // And the client's packets go to flow 2's server, not flow 1's.
    const fromClient = tcp({ src: '192.0.2.50', dst: VIP, sport: 40000, dport: 80, flags: TCPF_ACK });
    assert.equal(b.run(fromClient), FORWARD);
    assert.equal(field(fromClient).dst, rip2);
  } finally {
    await a.stop();
    await b.stop();
  }
});
