/**
 * Redis as an attacker would use it: whoever can write to it publishes forged flow records,
 * counts and heartbeats, or stops it (SIGSTOP) under load. Real redis-server on loopback (one per
 * test file, plus one for the hung test), real ioredis client writing the forgeries, in-process
 * nodes (table, processor, RedisSync) as in redis-ipv6.test.ts. Each forgery must be refused and
 * counted by reason, a legitimate flow still adopted, and a hung Redis must not grow anything.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import Redis from 'ioredis';
import pino from 'pino';
import * as L from '../../conntrack/layout';
import { RedisSync } from '../../conntrack/redis-sync';
import { signHeartbeat, signRecord, macKey } from '../../conntrack/redis-record';
import { TCP_ESTABLISHED, TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { parseIPv4 } from '../../net/addr';
import { FORWARD } from '../../lb/verdict';
import { field, tcp } from '../helpers/packets';
import { startRedis as startSharedRedis } from '../helpers/sync-node';
import { freePorts } from '../helpers/ports';
import { makeProcessor } from '../helpers/processor';

const hasRedis = (() => {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() !== '';
  } catch {
    return false;
  }
})();
const skip = hasRedis ? false : 'redis-server missing';
const [PORT, HUNG_PORT] = freePorts(2) as [number, number];
const VIP = '10.96.0.10';
const RS = ['10.1.0.1', '10.1.0.2', '10.1.0.3'];
const SERVICE = `tcp ${VIP}:80`;
const KEY = 'test-record-key-0123456789';
const servers: ChildProcess[] = [];
const ip = (s: string) => parseIPv4(s)! | 0;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const waitFor = async (what: string, ok: () => boolean | Promise<boolean>, ms = 10_000) => {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
};

async function startRedis(port: number): Promise<ChildProcess> {
  const p = await startSharedRedis(port);
  servers.push(p);
  return p;
}

interface NodeOpts {
  prefix: string;
  port?: number;
  tableSize?: number;
  redis?: Record<string, unknown>;
}

function node(id: string, o: NodeOpts) {
  const tableSize = o.tableSize ?? 1024;
  const doc = {
    dataplane: { vipCidrs: ['10.96.0.0/24'], workers: 1, tableSize, maxRealServers: 16, maxServices: 8 },
    services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: RS.map((a) => ({ address: a, port: 8080 })) }],
    redis: { url: `redis://127.0.0.1:${o.port ?? PORT}`, nodeId: id, keyPrefix: o.prefix, ...o.redis },
  };
  const p = makeProcessor(doc, { capacity: tableSize, ring: true, liveClock: true });
  const { cfg, table, model } = p;
  const ring = p.ring!;
  const run = (pkt: Uint8Array) => p.run(pkt).v;
  /** Packets the sync replayed after a lookup hit, with what the processor then did with them. */
  const replayed: { verdict: number; dst: string }[] = [];
  const local: Record<string, [number, number]> = {};
  const sync = new RedisSync(
    cfg.redis!,
    table,
    [ring],
    {
      names: (_svc, rs) => model.namesOfSlot(rs),
      target: (service, realServer) => model.flowTarget(service, realServer),
      counts: () => ({ ...local }),
    },
    (pkt) => replayed.push({ verdict: run(pkt), dst: field(pkt).dst }) > 0,
    pino({ level: 'silent' }),
  );
  const r = new Int32Array(ring);
  /** Every flow the worker queued has been written: its ring is drained and the write queue empty. */
  const allWritten = () => Atomics.load(r, L.RG_SYNC_HEAD) === Atomics.load(r, L.RG_SYNC_TAIL) && sync.stats.queueDepth === 0;
  return { sync, table, run, replayed, local, allWritten, stop: () => sync.stop() };
}
type Node = ReturnType<typeof node>;

/** A record as nodes write it; every field overridable (numbers are int32 words, as in the table). */
function record(
  o: {
    caddr?: number;
    cport?: number;
    vaddr?: number;
    vport?: number;
    daddr?: number;
    dport?: number;
    laddr?: number;
    lport?: number;
    fwd?: number;
    rs?: string;
    state?: number;
    inactive?: number;
    expiresIn?: number;
  } = {},
): string {
  const cport = o.cport ?? 41000;
  return [
    6,
    o.caddr ?? ip('192.0.2.7'),
    (cport << 16) | (o.vport ?? 80) | 0,
    o.vaddr ?? ip(VIP),
    o.daddr ?? ip(RS[0]!),
    ((o.dport ?? 8080) << 16) | (o.lport ?? cport) | 0,
    o.laddr ?? o.caddr ?? ip('192.0.2.7'),
    o.fwd ?? L.FWD_MASQ,
    SERVICE,
    o.rs ?? `${RS[0]}:8080`,
    o.state ?? TCP_ESTABLISHED,
    o.inactive ?? 0,
    Date.now() + (o.expiresIn ?? 600_000),
    '',
  ].join('|');
}

async function connected(...ns: Node[]) {
  await waitFor('nodes connected', () => ns.every((n) => n.sync.stats.connected));
}
/** Waits until `n` subscribers listen on the prefix's channel (`nodes`: the signed heartbeats' channel). */
async function subscribed(w: Redis, prefix: string, n: number, channel = 'flows') {
  await waitFor('subscriptions', async () => ((await w.pubsub('NUMSUB', `${prefix}${channel}`)) as [string, number])[1] >= n);
}
/** A TCP connection's opening through a node: SYN, then two ACKs (its 3rd packet queues it for Redis). Its real server. */
function open(n: Node, client: string, sport: number): string {
  const syn = tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_SYN });
  assert.equal(n.run(syn), FORWARD);
  for (let i = 0; i < 2; i++) assert.equal(n.run(tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_ACK })), FORWARD);
  return field(syn).dst;
}
/** A client's mid-flow packet through a node: its verdict and where it went. */
function mid(n: Node, client: string, sport: number): { verdict: number; dst: string } {
  const p = tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) });
  const verdict = n.run(p);
  return { verdict, dst: field(p).dst };
}
const exchange = (n: Node) => (n.sync as unknown as { exchangeCounts(): Promise<void> }).exchangeCounts();
const sum = (o: Record<string, number>) => Object.values(o).reduce((a, b) => a + b, 0);

let w: Redis;
before(async () => {
  if (!hasRedis) return;
  await startRedis(PORT);
  w = new Redis(PORT, '127.0.0.1', { maxRetriesPerRequest: 1 });
});
after(() => {
  w?.disconnect();
  for (const p of servers) {
    p.kill('SIGCONT');
    p.kill('SIGKILL');
  }
});

test('forged records, published or stored, are refused and counted by reason; a legitimate flow is still adopted', { skip }, async () => {
  const P = 't1:';
  const a = node('a', { prefix: P });
  const b = node('b', { prefix: P });
  a.sync.start();
  b.sync.start();
  try {
    await connected(a, b);
    await subscribed(w, P, 2);
    const forged: [string, string][] = [
      [record({ daddr: ip(RS[1]!) }), 'address'], // names RS[0], points the flow at RS[1]
      [record({ daddr: ip('203.0.113.66') }), 'address'], // …or at any address
      [record({ laddr: ip('203.0.113.66') }), 'address'], // replies sent elsewhere
      [record({ vport: 81 }), 'port'], // a port with no service
      [record({ dport: 22 }), 'port'],
      [record({ fwd: L.FWD_MASQ | L.F_TEMPLATE }), 'forwarding'], // would pin new persistent clients
      [record({ expiresIn: 23 * 86400_000 }), 'expiry'], // 23 days
      [record({ state: 99 }), 'state'],
      [record({ rs: '10.1.0.99:8080' }), 'unknown_server'],
      ['6|1|2|3|garbage', 'malformed'],
      [`${record()}|deadbeef|extra`, 'malformed'],
    ];
    await w.publish(`${P}flows`, `evil\n${forged.map(([r]) => r).join('\n')}`);
    await waitFor('the forgeries counted', () => sum(b.sync.stats.refused) >= forged.length);
    const want: Record<string, number> = {};
    for (const [, why] of forged) want[why] = (want[why] ?? 0) + 1;
    for (const [why, n] of Object.entries(want)) assert.equal(b.sync.stats.refused[why as keyof typeof b.sync.stats.refused], n, why);
    assert.equal(b.table.shadows(), 0, 'no forged shadow installed');
    assert.equal(b.sync.stats.received, 0);

    // The lookup path: a record stored under a flow's key that describes another flow.
    const cport = 42000;
    const inKey = `${P}c:{6.${ip('192.0.2.8')}.${(cport << 16) | 80 | 0}.${ip(VIP)}}`;
    await w.set(inKey, record({ caddr: ip('192.0.2.9'), cport }), 'PX', 60_000);
    b.run(tcp({ src: '192.0.2.8', dst: VIP, sport: cport, dport: 80, flags: TCPF_ACK }));
    await waitFor('the lookup answered', () => b.sync.stats.lookups.refused === 1);
    assert.equal(b.sync.stats.refused.key_mismatch, 1);
    assert.equal(b.replayed.length, 0, 'the parked packet is not replayed');
    assert.equal(b.table.shadows(), 0);

    // A stored forgery of the packet's own flow, pointing at an address that is no real server.
    await w.set(inKey, record({ caddr: ip('192.0.2.8'), cport, daddr: ip('203.0.113.66') }), 'PX', 60_000);
    b.run(tcp({ src: '192.0.2.8', dst: VIP, sport: cport, dport: 80, flags: TCPF_ACK }));
    await waitFor('the second lookup answered', () => b.sync.stats.lookups.refused === 2);
    assert.equal(b.sync.stats.refused.address, want.address! + 1);
    assert.equal(b.replayed.length, 0);

    // The real thing: a's flow reaches b through the stream and is adopted to a's real server.
    const syn = tcp({ src: '192.0.2.50', dst: VIP, sport: 43000, dport: 80, flags: TCPF_SYN });
    assert.equal(a.run(syn), FORWARD);
    const rip = field(syn).dst;
    for (let i = 0; i < 3; i++) a.run(tcp({ src: '192.0.2.50', dst: VIP, sport: 43000, dport: 80, flags: TCPF_ACK }));
    await waitFor('b to learn the flow', () => b.table.shadows() === 1);
    const mid = tcp({ src: '192.0.2.50', dst: VIP, sport: 43000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) });
    assert.equal(b.run(mid), FORWARD);
    assert.equal(field(mid).dst, rip, 'to the real server a chose');

    // …and through a lookup, by a node that missed the stream. (b, having adopted the flow, writes
    // it too: c must start after that write, or it learns the flow from the stream and never looks
    // it up — on a loaded machine c used to subscribe first.)
    await waitFor('a and b to write the flow', () => a.allWritten() && b.allWritten() && b.sync.stats.written === 1);
    const c = node('c', { prefix: P });
    c.sync.start();
    try {
      await connected(c);
      c.run(tcp({ src: '192.0.2.50', dst: VIP, sport: 43000, dport: 80, flags: TCPF_ACK }));
      await waitFor('c to look the flow up', () => c.replayed.length === 1);
      assert.deepEqual(c.replayed[0], { verdict: FORWARD, dst: rip });
      assert.equal(c.sync.stats.lookups.hit, 1);
    } finally {
      await c.stop();
    }
  } finally {
    await a.stop();
    await b.stop();
  }
});

test('shadow entries take at most redis.maxShadowShare of the table: local flows keep the rest', { skip }, async () => {
  const P = 't2:';
  const b = node('b', { prefix: P, tableSize: 1024, redis: { maxShadowShare: 0.25 } });
  b.sync.start();
  try {
    await connected(b);
    await subscribed(w, P, 1);
    // 900 believable records (a compromised node can write those): only 256 become shadows.
    const recs = Array.from({ length: 900 }, (_, i) => record({ caddr: ip(`198.51.100.${1 + (i % 200)}`), cport: 20000 + i }));
    await w.publish(`${P}flows`, `evil\n${recs.join('\n')}`);
    await waitFor('all records handled', () => b.sync.stats.received + sum(b.sync.stats.refused) >= 900);
    assert.equal(b.table.shadows(), 256);
    assert.equal(b.sync.stats.received, 256);
    assert.equal(b.sync.stats.refused.shadow_cap, 644);
    // A shadow already there is still refreshed at the cap.
    await w.publish(`${P}flows`, `evil\n${recs[0]}`);
    await waitFor('the refresh', () => b.sync.stats.received === 257);
    // The other 768 slots are local flows'.
    let ok = 0;
    for (let i = 0; i < 760; i++)
      if (b.run(tcp({ src: `203.0.113.${1 + (i % 250)}`, dst: VIP, sport: 30000 + i, dport: 80, flags: TCPF_SYN })) === FORWARD) ok++;
    assert.equal(ok, 760, 'every new local flow got a slot');
  } finally {
    await b.stop();
  }
});

test('record authentication: with a shared key, signed records are adopted and unsigned or wrongly signed ones refused', {
  skip,
}, async () => {
  const P = 't3:';
  const a = node('a', { prefix: P, redis: { recordKey: KEY } });
  const b = node('b', { prefix: P, redis: { recordKey: KEY } });
  const x = node('x', { prefix: P, redis: { recordKey: 'another-key-0123456789' } });
  a.sync.start();
  b.sync.start();
  x.sync.start();
  try {
    await connected(a, b, x);
    await subscribed(w, P, 3);
    // Unsigned, and signed with a wrong key: refused by b.
    await w.publish(`${P}flows`, `evil\n${record()}\n${signRecord(macKey('not-the-shared-key-123'), record({ cport: 41001 }))}`);
    await waitFor('b refuses both', () => b.sync.stats.refused.auth === 2);
    assert.equal(b.table.shadows(), 0);
    // a's flow: b (same key) adopts it; x (another key) refuses it.
    const syn = tcp({ src: '192.0.2.60', dst: VIP, sport: 44000, dport: 80, flags: TCPF_SYN });
    a.run(syn);
    for (let i = 0; i < 3; i++) a.run(tcp({ src: '192.0.2.60', dst: VIP, sport: 44000, dport: 80, flags: TCPF_ACK }));
    await waitFor('b learns it', () => b.table.shadows() === 1);
    await waitFor('x refuses it', () => x.sync.stats.refused.auth >= 3);
    assert.equal(x.table.shadows(), 0);
    // Lookups verify too: x misses the stream's flow and its lookup finds a record it cannot believe.
    x.run(tcp({ src: '192.0.2.60', dst: VIP, sport: 44000, dport: 80, flags: TCPF_ACK }));
    await waitFor('x looks it up', () => x.sync.stats.lookups.refused === 1);
    assert.equal(x.replayed.length, 0);
    const c = node('c', { prefix: P, redis: { recordKey: KEY } });
    c.sync.start();
    try {
      await connected(c);
      c.run(tcp({ src: '192.0.2.60', dst: VIP, sport: 44000, dport: 80, flags: TCPF_ACK }));
      await waitFor('c adopts it by lookup', () => c.replayed.length === 1);
      assert.deepEqual(c.replayed[0], { verdict: FORWARD, dst: field(syn).dst });
    } finally {
      await c.stop();
    }
    // Counts: a's signed counts are believed by b; a forged unsigned report is not.
    a.local[`${SERVICE}|${RS[0]}:8080`] = [4, 2];
    b.local[`${SERVICE}|${RS[0]}:8080`] = [0, 0];
    await w.set(`${P}counts:evil`, JSON.stringify({ [`${SERVICE}|${RS[0]}:8080`]: [1000, 0] }));
    await w.zadd(`${P}nodes`, Date.now(), 'evil');
    await (a.sync as unknown as { exchangeCounts(): Promise<void> }).exchangeCounts();
    await (b.sync as unknown as { exchangeCounts(): Promise<void> }).exchangeCounts();
    assert.deepEqual(b.sync.remoteCounts(SERVICE, `${RS[0]}:8080`), [4, 2]);
    assert.equal(b.sync.stats.countsRefused.auth, 1);
  } finally {
    await a.stop();
    await b.stop();
    await x.stop();
  }
});

test('forged counts and node lists: bad values refuse their node alone, future heartbeats are removed, the node count is capped and read in batches', {
  skip,
}, async (t) => {
  const P = 't4:';
  const b = node('b', { prefix: P, redis: { countsInterval: 3600, maxNodes: 5 } });
  const k = `${SERVICE}|${RS[0]}:8080`;
  b.local[k] = [1, 0];
  b.sync.start();
  const exchange = () => (b.sync as unknown as { exchangeCounts(): Promise<void> }).exchangeCounts();
  try {
    await connected(b);
    const now = Date.now();
    const put = async (id: string, v: string, at = now) => {
      await w.set(`${P}counts:${id}`, v);
      await w.zadd(`${P}nodes`, at, id);
    };
    await put('huge', JSON.stringify({ [k]: [1e12, 0] })); // would keep RS[0] draining for ever
    await put('negative', JSON.stringify({ [k]: [-5, 0] })); // would delete it with connections left
    await put('garbage', '{"not json');
    await put('good1', JSON.stringify({ [k]: [2, 1] }));
    await put('good2', JSON.stringify({ [k]: [3, 0], 'tcp 10.96.0.99:80|10.1.0.1:8080': [7, 7] }));
    await put('future', JSON.stringify({ [k]: [50, 0] }), now + 3600_000);
    await exchange();
    assert.deepEqual(b.sync.remoteCounts(SERVICE, `${RS[0]}:8080`), [5, 1], 'good1 + good2 only');
    assert.equal(b.sync.stats.countsRefused.value, 2);
    assert.equal(b.sync.stats.countsRefused.malformed, 1);
    assert.equal(b.sync.stats.nodesRefused.future, 1);
    assert.equal(await w.zscore(`${P}nodes`, 'future'), null, 'a heartbeat from the future is removed, not kept for ever');
    assert.deepEqual(new Set(b.sync.remoteNodes), new Set(['huge', 'negative', 'garbage', 'good1', 'good2']));

    // 20 000 fake nodes with fresh heartbeats: at most maxNodes are read, in one MGET, not 20 000 GETs.
    const fake: (string | number)[] = [];
    for (let i = 0; i < 20_000; i++) fake.push(Date.now(), `fake${i}`);
    await w.zadd(`${P}nodes`, ...fake);
    const calls = async () => {
      const info = await w.info('commandstats');
      const n = (cmd: string) => Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
      return n('get') + n('mget');
    };
    const before = await calls();
    const t0 = Date.now();
    await exchange();
    const took = Date.now() - t0;
    const reads = (await calls()) - before;
    t.diagnostic(`20 000 fake nodes: ${reads} GET/MGET calls, ${took} ms, ${b.sync.remoteNodes.length} nodes read`);
    assert.ok(b.sync.remoteNodes.length <= 5, `${b.sync.remoteNodes.length} nodes read`);
    assert.ok(reads <= 2, `${reads} GET/MGET calls for one exchange`);
    assert.ok(b.sync.stats.nodesRefused.cap >= 20_000, `cap counted: ${b.sync.stats.nodesRefused.cap}`);
    assert.ok(took < 5000, `one exchange took ${took} ms`);
  } finally {
    await b.stop();
  }
});

test('a hung Redis (SIGSTOP) under a flood of mid-flow packets: lookups capped and deduplicated, commands time out, nothing grows; adoption works after SIGCONT', {
  skip,
  timeout: 120_000,
}, async (t) => {
  const P = 't5:';
  const hung = await startRedis(HUNG_PORT);
  const MAX = 32;
  const b = node('b', { prefix: P, port: HUNG_PORT, redis: { maxLookups: MAX, commandTimeout: 0.3, parkTimeout: 1 } });
  b.sync.start();
  // Unanswered commands: sent, or queued in an auto-pipeline behind one in flight (ioredis).
  const queue = () => {
    const c = (b.sync as unknown as { client: Redis }).client;
    return c.commandQueue.length + c.autoPipelineQueueSize;
  };
  let stopped = false;
  try {
    await connected(b);
    hung.kill('SIGSTOP');
    stopped = true;
    let maxInFlight = 0;
    let maxQueue = 0;
    let maxWaiting = 0;
    // ~3 s of mid-flow ACKs: 6 000 flows, each packet sent twice (dedup), bounded in count.
    for (let round = 0; round < 60; round++) {
      for (let i = 0; i < 50; i++) {
        const n = round * 100 + i;
        const pkt = tcp({ src: `198.51.100.${1 + (n % 250)}`, dst: VIP, sport: 10000 + n, dport: 80, flags: TCPF_ACK });
        b.run(pkt);
        b.run(pkt.slice());
      }
      await sleep(50);
      maxInFlight = Math.max(maxInFlight, b.sync.stats.lookupsInFlight);
      maxQueue = Math.max(maxQueue, queue());
      maxWaiting = Math.max(maxWaiting, b.sync.stats.parkedWaiting);
    }
    const st = b.sync.stats;
    t.diagnostic(
      `in flight ≤ ${maxInFlight}, unanswered commands ≤ ${maxQueue}, waiting packets ≤ ${maxWaiting}, timeouts ${st.commandTimeouts}, lookups ${JSON.stringify(st.lookups)}`,
    );
    assert.ok(maxInFlight <= MAX, `lookups in flight stayed ≤ ${MAX}: ${maxInFlight}`);
    // One MGET per lookup (both keys), and the odd counts exchange or write round.
    assert.ok(maxQueue <= MAX + 16, `unanswered commands stayed bounded: ${maxQueue}`);
    assert.ok(maxWaiting <= L.PARK_SLOTS, `parked packets waiting stayed ≤ ${L.PARK_SLOTS}: ${maxWaiting}`);
    assert.ok(st.commandTimeouts >= 1, `command timeouts counted: ${st.commandTimeouts}`);
    assert.ok(st.lookups.busy > 0, `packets beyond the cap dropped and counted: ${st.lookups.busy}`);
    assert.ok(st.lookups.joined > 0, `a flow's second packet waited on its first's lookup: ${st.lookups.joined}`);
    assert.equal(st.lookups.hit, 0);
    assert.equal(b.replayed.length, 0);

    hung.kill('SIGCONT');
    stopped = false;
    await waitFor('reconnected after SIGCONT', () => b.sync.stats.connected, 30_000);
    await waitFor('everything answered', () => b.sync.stats.lookupsInFlight === 0 && b.sync.stats.parkedWaiting === 0, 10_000);
    // A flow written by another node is adopted again through a lookup.
    const wr = new Redis(HUNG_PORT, '127.0.0.1');
    try {
      const cport = 45000;
      await wr.set(
        `${P}c:{6.${ip('192.0.2.70')}.${(cport << 16) | 80 | 0}.${ip(VIP)}}`,
        record({ caddr: ip('192.0.2.70'), cport, daddr: ip(RS[2]!), rs: `${RS[2]}:8080` }),
        'PX',
        60_000,
      );
    } finally {
      wr.disconnect();
    }
    b.run(tcp({ src: '192.0.2.70', dst: VIP, sport: 45000, dport: 80, flags: TCPF_ACK }));
    await waitFor('adopted after the hang', () => b.replayed.length === 1);
    assert.deepEqual(b.replayed[0], { verdict: FORWARD, dst: RS[2] });
  } finally {
    if (stopped) hung.kill('SIGCONT');
    await b.stop();
  }
});

test('with a record key, records captured earlier and published again are refused (stale): a reused client port stays with its new server, a moved flow with the node that adopted it', {
  skip,
}, async () => {
  const P = 't6:';
  const red = { recordKey: KEY };
  const [a, b, c] = ['a', 'b', 'c'].map((id) => node(id, { prefix: P, redis: red })) as [Node, Node, Node];
  for (const n of [a, b, c]) n.sync.start();
  try {
    await connected(a, b, c);
    await subscribed(w, P, 3);
    const CL = '192.0.2.80';
    const CPORT = 46000;
    const inKey = `${P}c:{6.${ip(CL)}.${(CPORT << 16) | 80 | 0}.${ip(VIP)}}`;
    // Flow 1 from CL:CPORT through a; b and c hold it. The attacker, who can read Redis, keeps its record.
    const rip1 = open(a, CL, CPORT);
    await waitFor('b and c to hold flow 1', () => b.table.shadows() === 1 && c.table.shadows() === 1);
    const flow1 = await w.get(inKey);
    assert.ok(flow1?.includes(`|${rip1}:8080|`));
    // Flow 1 ends; the client opens flow 2 from the same port, to the next server.
    a.table.expire((a.table.now() + 3600_000) | 0);
    const rip2 = open(a, CL, CPORT);
    assert.notEqual(rip2, rip1);
    await waitFor('b and c to take flow 2', () => b.sync.stats.superseded === 1 && c.sync.stats.superseded === 1);
    const flow2ByA = await w.get(inKey);
    // The flow moves to b (its packets reach b now): b adopts it and, on its 3rd packet, writes its own record.
    for (let i = 0; i < 3; i++) assert.deepEqual(mid(b, CL, CPORT), { verdict: FORWARD, dst: rip2 });
    await waitFor("c to take b's record", () => c.sync.stats.received + sum(c.sync.stats.refused) === 3);
    assert.equal(c.sync.stats.received, 3, "b's record is newer than a's: b had read a's before it wrote");
    // The attacker publishes what it kept, as if from a: a's record of flow 2, then flow 1's.
    await w.publish(`${P}flows`, `a\n${flow2ByA}\n${flow1}`);
    await waitFor('c to handle them', () => c.sync.stats.received + sum(c.sync.stats.refused) === 5);
    assert.deepEqual(mid(c, CL, CPORT), { verdict: FORWARD, dst: rip2 }, "not rolled back to flow 1's server");
    assert.equal(c.sync.stats.received, 3);
    assert.equal(c.sync.stats.refused.stale, 2, 'both refused and counted');
    assert.equal(c.sync.stats.superseded, 1);
  } finally {
    for (const n of [a, b, c]) await n.stop();
  }
});

test("with a record key, a restarted node's new records are newer than those it wrote before the restart, which cannot be replayed", {
  skip,
}, async () => {
  const P = 't7:';
  const red = { recordKey: KEY };
  const a1 = node('a', { prefix: P, redis: red });
  const b = node('b', { prefix: P, redis: red });
  a1.sync.start();
  b.sync.start();
  let a2: Node | null = null;
  try {
    await connected(a1, b);
    await subscribed(w, P, 2);
    const CL = '192.0.2.81';
    const CPORT = 47000;
    open(a1, '192.0.2.82', 47001); // round robin: flow 1 goes to the second server
    const rip1 = open(a1, CL, CPORT);
    await waitFor('b to hold both', () => b.table.shadows() === 2);
    const flow1 = await w.get(`${P}c:{6.${ip(CL)}.${(CPORT << 16) | 80 | 0}.${ip(VIP)}}`);
    assert.ok(flow1 !== null);
    // a restarts (its table gone: flow 1 with it); the client reuses its port for flow 2.
    await a1.stop();
    a2 = node('a', { prefix: P, redis: red });
    a2.sync.start();
    await connected(a2);
    await subscribed(w, P, 2);
    const rip2 = open(a2, CL, CPORT);
    assert.notEqual(rip2, rip1);
    await waitFor('b to take flow 2', () => b.sync.stats.received + sum(b.sync.stats.refused) === 3);
    assert.equal(b.sync.stats.received, 3, "the restarted writer's record is not taken for an old one");
    assert.equal(b.sync.stats.superseded, 1);
    // Flow 1's record, replayed.
    await w.publish(`${P}flows`, `a\n${flow1}`);
    await waitFor('b to handle it', () => b.sync.stats.received + sum(b.sync.stats.refused) === 4);
    assert.deepEqual(mid(b, CL, CPORT), { verdict: FORWARD, dst: rip2 }, "not rolled back to flow 1's server");
    assert.equal(b.sync.stats.received, 3);
    assert.equal(b.sync.stats.refused.stale, 1);
  } finally {
    await b.stop();
    await a2?.stop();
  }
});

test('with a record key, node-list members and heartbeats nobody signed are refused: 100 fresher fake members do not push a real node out of the count exchange', {
  skip,
}, async () => {
  const P = 't8:';
  const red = { recordKey: KEY, countsInterval: 3600 };
  const a = node('a', { prefix: P, redis: red });
  const b = node('b', { prefix: P, redis: red });
  const k = `${SERVICE}|${RS[0]}:8080`;
  a.local[k] = [4, 2];
  b.local[k] = [0, 0];
  a.sync.start();
  b.sync.start();
  try {
    await connected(a, b);
    // 100 members fresher than any node's own heartbeat (within the 5 s of clock skew allowed),
    // each with unsigned counts claiming 1000 connections: by the list alone they take all 64 places.
    const now = Date.now();
    for (let i = 0; i < 100; i++) {
      await w.zadd(`${P}nodes`, now + 4000, `fake${i}`);
      await w.set(`${P}counts:fake${i}`, JSON.stringify({ [k]: [1000, 0] }));
    }
    await waitFor("b to read a's counts", async () => {
      await exchange(a); // a's counts (and, with this release, its signed heartbeat)
      await exchange(b);
      return b.sync.remoteNodes.includes('a');
    });
    assert.deepEqual(b.sync.remoteCounts(SERVICE, `${RS[0]}:8080`), [4, 2], "a's, and none of the fakes'");
    assert.deepEqual(b.sync.remoteNodes, ['a'], 'a member no node signed for is no node');
    assert.ok(b.sync.stats.countsRefused.auth >= 63, `the fakes read in the places left are refused: ${b.sync.stats.countsRefused.auth}`);
    // The attacker takes a out of the list: b still reads it, as a signed lately.
    await w.zrem(`${P}nodes`, 'a');
    await exchange(b);
    assert.deepEqual(b.sync.remoteCounts(SERVICE, `${RS[0]}:8080`), [4, 2]);
    // Heartbeats on the channel: unsigned, and signed with another key.
    await w.publish(`${P}nodes`, `fake0\n${now}\n${'0'.repeat(32)}`);
    await w.publish(`${P}nodes`, signHeartbeat(macKey('not-the-shared-key-123')!, 'fake1', now));
    await waitFor('b to refuse both heartbeats', () => b.sync.stats.nodesRefused.auth === 2);
    await exchange(b);
    assert.deepEqual(b.sync.remoteNodes, ['a']);
  } finally {
    await a.stop();
    await b.stop();
  }
});
