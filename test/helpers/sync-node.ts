/**
 * In-process uvs nodes for tests against a real Redis: the real table, service model, packet
 * processor and RedisSync, wired as control/daemon.ts wires them (counts from the model, other
 * nodes' counts into the drain check, replayed packets back through the processor), with no
 * device. And a real redis-server (or redis-sentinel) on loopback, started and awaited.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import Redis from 'ioredis';
import pino from 'pino';
import * as L from '../../conntrack/layout';
import { RedisSync } from '../../conntrack/redis-sync';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { FORWARD } from '../../lb/verdict';
import { field, tcp } from './packets';
import { makeProcessor } from './processor';

export function hasCommand(cmd: string): boolean {
  try {
    return execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).trim() !== '';
  } catch {
    return false;
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export async function waitFor(what: string, ok: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** True once a Redis (server or sentinel) answers PING on 127.0.0.1:port. */
export async function answers(port: number): Promise<boolean> {
  const c = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return (await c.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    c.disconnect();
  }
}

/**
 * Starts `bin args` and waits until it answers PING on 127.0.0.1:port. A server that exits first
 * (a port taken, a bad config) fails at once with its exit code and the end of its output.
 */
export async function startServer(bin: string, args: string[], port: number): Promise<ChildProcess> {
  const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (d: Buffer) => {
    out = (out + d.toString()).slice(-2000);
  };
  p.stdout!.on('data', keep);
  p.stderr!.on('data', keep);
  let exited: string | null = null;
  p.once('exit', (code, signal) => {
    exited = `${bin} on ${port} exited (${signal ?? code}) before it answered; its output:\n${out}`;
  });
  p.once('error', (e) => {
    exited = `${bin}: ${e.message}`;
  });
  await waitFor(`${bin} on ${port}`, async () => {
    if (exited) throw new Error(exited);
    return answers(port);
  });
  return p;
}

/** Starts `redis-server` on 127.0.0.1:port with no persistence (extra arguments appended) and waits for it. */
export function startRedis(port: number, extra: string[] = [], bin = 'redis-server'): Promise<ChildProcess> {
  return startServer(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], port);
}

export const VIP = '10.96.0.10';
export const RS = ['10.1.0.1', '10.1.0.2', '10.1.0.3'];

export interface NodeOptions {
  /** The `redis:` section (url or sentinels…, nodeId is the node's id). */
  redis: Record<string, unknown>;
  realServers?: string[];
  protocol?: 'tcp' | 'udp';
  tableSize?: number;
  /** The `timeouts:` section (seconds), e.g. { tcp: 8 } for a short ESTABLISHED timeout. */
  timeouts?: Record<string, unknown>;
  /** The service's scheduler (default rr). */
  scheduler?: string;
}

/** One node: `run` a packet through it; `apply` another list of real servers (a reload). */
export function syncNode(id: string, o: NodeOptions) {
  const tableSize = o.tableSize ?? 4096;
  const doc = (servers: string[]) => ({
    dataplane: { vipCidrs: ['10.96.0.0/24'], workers: 1, tableSize, maxRealServers: 16, maxServices: 8 },
    services: [
      {
        protocol: o.protocol ?? 'tcp',
        address: VIP,
        port: 80,
        scheduler: o.scheduler ?? 'rr',
        realServers: servers.map((a) => ({ address: a, port: 8080 })),
      },
    ],
    redis: { nodeId: id, ...o.redis },
    ...(o.timeouts ? { timeouts: o.timeouts } : {}),
  });
  const p = makeProcessor(doc(o.realServers ?? RS), { capacity: tableSize, ring: true, liveClock: true });
  const { cfg, table, model, proc, counters } = p;
  const ring = p.ring!;
  const run = (pkt: Uint8Array) => p.run(pkt).v;
  /** Packets the sync replayed after a lookup hit, with what the processor then did with them. */
  const replayed: { verdict: number; dst: string }[] = [];
  const sync = new RedisSync(
    cfg.redis!,
    table,
    [ring],
    {
      names: (_svc, rs) => model.namesOfSlot(rs),
      target: (service, realServer) => model.flowTarget(service, realServer),
      counts: () => {
        const out: Record<string, [number, number]> = {};
        for (const s of model.list()) for (const r of s.realServers) out[`${s.key}|${r.address}:${r.port}`] = [r.activeConns, r.inactConns];
        return out;
      },
    },
    (pkt) => replayed.push({ verdict: run(pkt), dst: field(pkt).dst }) > 0,
    pino({ level: 'silent' }),
  );
  model.remoteConns = (service, realServer) => sync.remoteCounts(service, realServer);
  model.recordHold = () => {
    const h = table.tcpHold();
    return Math.max(h.active, h.inactive);
  };
  const apply = (servers: string[]) => p.apply(doc(servers));
  const counter = (i: number) => counters[i]!;
  const r = new Int32Array(ring);
  /** Every flow the worker queued has been written: its ring is drained and the write queue empty. */
  const allWritten = () => Atomics.load(r, L.RG_SYNC_HEAD) === Atomics.load(r, L.RG_SYNC_TAIL) && sync.stats.queueDepth === 0;
  return { sync, table, model, proc, run, replayed, apply, counter, allWritten, stop: () => sync.stop() };
}
export type SyncNode = ReturnType<typeof syncNode>;

/** A TCP connection's opening from a client: SYN, then two ACKs (its 3rd packet queues it for Redis). Returns the real server. */
export function openFlow(n: SyncNode, client: string, sport: number): string {
  const syn = tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_SYN });
  assert.equal(n.run(syn), FORWARD);
  for (let i = 0; i < 2; i++) assert.equal(n.run(tcp({ src: client, dst: VIP, sport, dport: 80, flags: TCPF_ACK })), FORWARD);
  return field(syn).dst;
}

/** Client source ports of the flow records a Redis on `port` stores under a prefix (client→server keys). */
export async function storedPorts(port: number, prefix: string): Promise<number[]> {
  const c = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  try {
    const keys = await c.keys(`${prefix}c:*`);
    const recs = keys.length ? await c.mget(keys) : [];
    return recs.map((r) => Number(r!.split('|')[2]) >>> 16).sort((x, y) => x - y);
  } finally {
    c.disconnect();
  }
}
