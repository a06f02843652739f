/**
 * IPv6 flows through Redis: node A carries an IPv6 flow and writes it (with its 128-bit key) to a
 * real redis-server; node B learns it from the change stream as a shadow entry and adopts it on
 * the first mid-flow packet, sending it to the same real server — the failover path of the
 * two-node lab, without namespaces (two in-process nodes, one real Redis on loopback).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import pino from 'pino';
import { RedisSync } from '../../conntrack/redis-sync';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { FORWARD } from '../../lb/verdict';
import { connect } from 'node:net';
import { field6, tcp6 } from '../helpers/packets';
import { freePorts } from '../helpers/ports';
import { startRedis } from '../helpers/sync-node';
import { makeProcessor } from '../helpers/processor';
import { needTool, waitFor as waitUntil } from '../helpers/wait';

const hasRedis = (() => {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() !== '';
  } catch {
    return false;
  }
})();
const [PORT] = freePorts(1) as [number];
const VIP = 'fd00:96::10';
const CLIENT = '2001:db8:1::100';
const RS = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];
let redis: ChildProcess | null = null;

function node(id: string) {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['fd00:96::/64'] },
      services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: RS.map((a) => ({ address: a, port: 8080 })) }],
      redis: { url: `redis://127.0.0.1:${PORT}`, nodeId: id },
    },
    { ring: true, liveClock: true },
  );
  const { cfg, table, model } = p;
  const ring = p.ring!;
  /** Packets the sync replayed after a lookup hit, with what the processor then did with them. */
  const replayed: { verdict: number; dst: string }[] = [];
  const sync = new RedisSync(
    cfg.redis!,
    table,
    [ring],
    {
      names: (_svc, rs) => model.namesOfSlot(rs),
      target: (service, realServer) => model.flowTarget(service, realServer),
      counts: () => ({}),
    },
    (pkt) => replayed.push({ verdict: run(pkt), dst: field6(pkt).dst }) > 0,
    pino({ level: 'silent' }),
  );
  const run = (pkt: Uint8Array) => p.run(pkt).v;
  return { sync, table, run, replayed, keyPrefix: cfg.redis!.keyPrefix };
}

/** The packet with an 8-byte hop-by-hop header (one PadN option) before its TCP header. */
function withHopByHop(pkt: Uint8Array): Uint8Array {
  const out = new Uint8Array(pkt.length + 8);
  out.set(pkt.subarray(0, 40));
  out.set([pkt[6]!, 0, 1, 4, 0, 0, 0, 0], 40); // next header: the packet's; length 0 (8 bytes); PadN of 4
  out.set(pkt.subarray(40), 48);
  out[6] = 0; // hop-by-hop
  const plen = ((pkt[4]! << 8) | pkt[5]!) + 8;
  out[4] = plen >> 8;
  out[5] = plen & 0xff;
  return out; // the TCP checksum stands: the pseudo-header has no extension headers
}

/** One Redis command over a plain connection (RESP), then QUIT: the raw reply text. */
function redisCmd(...args: string[]): Promise<string> {
  return new Promise((resolve) => {
    const c = connect(PORT, '127.0.0.1');
    let text = '';
    c.on('data', (d: Buffer) => (text += d.toString()));
    c.on('error', () => resolve(''));
    c.on('close', () => resolve(text));
    const enc = (a: string[]) => `*${a.length}\r\n${a.map((x) => `$${Buffer.byteLength(x)}\r\n${x}\r\n`).join('')}`;
    c.write(enc(args) + enc(['QUIT']));
  });
}

const waitFor = async (what: string, ok: () => boolean, ms = 20000) => {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

before(async () => {
  if (!hasRedis) return;
  redis = await startRedis(PORT);
});
after(() => {
  redis?.kill('SIGKILL');
});

test('an IPv6 flow written by one node is adopted by the other and keeps its real server', {
  skip: needTool(hasRedis, 'redis-server'),
}, async () => {
  const a = node('a');
  const b = node('b');
  a.sync.start();
  b.sync.start();
  try {
    await waitFor('both nodes connected', () => a.sync.stats.connected && b.sync.stats.connected);
    // Both nodes subscribed to the flow channel (b learns a's writes from it).
    const channel = `${b.keyPrefix}flows`;
    await waitUntil('both nodes subscribed', async () => /:(\d+)\r\n/.exec(await redisCmd('PUBSUB', 'NUMSUB', channel))?.[1] === '2');
    const syn = tcp6({ src: CLIENT, dst: VIP, sport: 45000, dport: 80, flags: TCPF_SYN });
    assert.equal(a.run(syn), FORWARD);
    const rip = field6(syn).dst;
    // The kernel sync rules: the third packet of the client's direction is written.
    for (let i = 0; i < 3; i++) a.run(tcp6({ src: CLIENT, dst: VIP, sport: 45000, dport: 80, flags: TCPF_ACK }));
    await waitFor('node b to learn the flow', () => b.table.shadows() === 1);
    const mid = tcp6({ src: CLIENT, dst: VIP, sport: 45000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) });
    assert.equal(b.run(mid), FORWARD, 'a mid-flow packet is forwarded, not refused');
    assert.equal(field6(mid).dst, rip, 'to the real server node a chose');
    assert.equal(b.table.shadows(), 0, 'adopted');
    assert.equal(b.table.count(), 1);
  } finally {
    await a.sync.stop();
    await b.sync.stop();
  }
});

test('a node that missed the change stream looks an IPv6 flow up from a packet with a hop-by-hop header, and replays it', {
  skip: needTool(hasRedis, 'redis-server'),
}, async () => {
  const a = node('a');
  a.sync.start();
  let b: ReturnType<typeof node> | null = null;
  try {
    await waitFor('a connected', () => a.sync.stats.connected);
    const syn = tcp6({ src: CLIENT, dst: VIP, sport: 45100, dport: 80, flags: TCPF_SYN });
    assert.equal(a.run(syn), FORWARD);
    const rip = field6(syn).dst;
    for (let i = 0; i < 3; i++) a.run(tcp6({ src: CLIENT, dst: VIP, sport: 45100, dport: 80, flags: TCPF_ACK }));
    await waitFor('a to write the flow', () => a.sync.stats.written >= 1 && a.sync.stats.queueDepth === 0);
    // b starts after the write: no shadow, a lookup.
    b = node('b');
    b.sync.start();
    await waitFor('b connected', () => b!.sync.stats.connected);
    const mid = withHopByHop(tcp6({ src: CLIENT, dst: VIP, sport: 45100, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(10) }));
    assert.notEqual(b.run(mid), FORWARD, 'parked: b has no entry yet');
    await waitFor('the replay', () => b!.replayed.length === 1);
    assert.equal(b.sync.stats.lookups.hit, 1, 'found under the key of its TCP header, past the hop-by-hop one');
    assert.deepEqual(b.replayed[0], { verdict: FORWARD, dst: rip }, 'replayed to the real server node a chose');
  } finally {
    await a.sync.stop();
    await b?.sync.stop();
  }
});
