/**
 * Flow state shared through Redis, so any node can adopt another node's flows. Control thread
 * only: workers hand events over through their rings (layout.ts RG_*) and never wait for Redis.
 *
 * Out (this node's flows): workers queue an entry for sync on its 3rd packet, every 50th after,
 * on each state change and once half its timeout has passed (IPVS sync daemon rules plus a
 * refresh). Every 50 ms the queue is written — two keys per flow, one per direction, each with a
 * TTL that follows the entry's timer — and published on a channel so the other nodes pre-load it.
 *
 *   <prefix>c:{proto.caddr.cports.vaddr}   client→server key    value: the flow record
 *   <prefix>o:{proto.daddr.dports.laddr}   server→client key    value: the flow record
 *   <prefix>flows                          channel: "<nodeId>\n<record>\n<record>…"
 *   <prefix>counts:<nodeId>                JSON {"<service>|<realServer>": [active, inactive]}, TTL 3 periods
 *   <prefix>nodes                          sorted set nodeId → last heartbeat (ms)
 * Each flow key's hash tag is the whole tuple, so Redis Cluster spreads flows over all slots and
 * never needs a cross-slot command.
 *
 * In (other nodes' flows): published records become shadow entries in the table (not counted)
 * that the first packet adopts with no wait. A mid-flow packet that finds nothing is parked by
 * its worker; this module asks Redis for both possible keys, installs a hit as a shadow and writes
 * the packet back into the device, where it is adopted. Misses, timeouts and errors drop it.
 *
 * Redis down or slow: forwarding goes on from the local table; the write queue is bounded (the
 * oldest records are dropped, counted) and flushed after the automatic reconnect.
 */
import Redis, { Cluster } from 'ioredis';
import type { Logger } from 'pino';
import * as L from './layout';
import { ConnTable } from './table';

/** The `redis:` configuration section (validated by control/config.ts). */
export interface RedisSyncOptions {
  /** One of: url (single Redis), sentinels + name, cluster (seed nodes). */
  url?: string;
  sentinels?: { host: string; port: number }[];
  name?: string;
  cluster?: { host: string; port: number }[];
  password?: string;
  keyPrefix: string;
  /** Identifies this node in cluster-wide counts; default: the host name. */
  nodeId: string;
  /** How long a parked packet may wait for Redis before it is dropped (seconds). */
  parkTimeout: number;
  /** How often this node publishes its per-real-server connection counts (seconds). */
  countsInterval: number;
  /** Most flow records waiting to be written; beyond it the oldest are dropped (counted). */
  maxQueue: number;
}

/** What the sync needs to know of the service model. */
export interface SyncResolver {
  /** Service key and real server ("a.b.c.d:port") of a slot pair, or null. */
  names(svcSlot: number, rsSlot: number): { service: string; realServer: string } | null;
  /** Local slots for a service's real server; null when this node does not have it listed. */
  slots(service: string, realServer: string): { slot: number; svcSlot: number } | null;
  /** Local per-real-server connection counts to publish. */
  counts(): Record<string, [number, number]>;
}

export interface SyncStats {
  connected: boolean;
  queueDepth: number;
  written: number;
  dropped: number;
  errors: number;
  published: number;
  received: number;
  lookups: { hit: number; miss: number; timeout: number; error: number };
  /** Seconds between a record being queued and its write being acknowledged (last batch). */
  lagSeconds: number;
  lastError: string | null;
}

const FLUSH_MS = 50;
const PARK_POLL_MS = 5;
const BATCH = 5000;

function u16(b: Uint8Array, o: number): number {
  return (b[o]! << 8) | b[o + 1]!;
}
function u32(b: Uint8Array, o: number): number {
  return (b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!;
}

export class RedisSync {
  private readonly o: RedisSyncOptions;
  private readonly table: ConnTable;
  private readonly rings: Int32Array[];
  private readonly ringBytes: Uint8Array[];
  private readonly resolver: SyncResolver;
  private readonly inject: (pkt: Uint8Array) => void;
  private readonly log: Logger;
  private client!: Redis | Cluster;
  private sub!: Redis | Cluster;
  /** Records waiting to be written, by client→server key (the newest record of a flow wins). */
  private queue = new Map<string, { rec: string; out: string; ttl: number; at: number }>();
  private timers: NodeJS.Timeout[] = [];
  private flushing = false;
  /** Other nodes' counts, by "<service>|<realServer>". */
  private remote = new Map<string, [number, number]>();
  readonly stats: SyncStats = {
    connected: false,
    queueDepth: 0,
    written: 0,
    dropped: 0,
    errors: 0,
    published: 0,
    received: 0,
    lookups: { hit: 0, miss: 0, timeout: 0, error: 0 },
    lagSeconds: 0,
    lastError: null,
  };

  constructor(o: RedisSyncOptions, table: ConnTable, rings: SharedArrayBuffer[], resolver: SyncResolver, inject: (pkt: Uint8Array) => void, log: Logger) {
    this.o = o;
    this.table = table;
    this.rings = rings.map((r) => new Int32Array(r));
    this.ringBytes = rings.map((r) => new Uint8Array(r));
    this.resolver = resolver;
    this.inject = inject;
    this.log = log;
  }

  private makeClient(): Redis | Cluster {
    const common = {
      enableOfflineQueue: false, // fail fast when down: our own queue is the bounded one
      maxRetriesPerRequest: 1,
      enableAutoPipelining: true, // batches commands per node, also for Cluster
      retryStrategy: (times: number) => Math.min(100 * times, 2000),
      ...(this.o.password ? { password: this.o.password } : {}),
    };
    if (this.o.cluster) {
      return new Cluster(this.o.cluster, {
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        clusterRetryStrategy: (times: number) => Math.min(100 * times, 2000),
        redisOptions: { maxRetriesPerRequest: 1, ...(this.o.password ? { password: this.o.password } : {}) },
      });
    }
    if (this.o.sentinels) return new Redis({ sentinels: this.o.sentinels, name: this.o.name!, ...common });
    return new Redis(this.o.url!, common);
  }

  start(): void {
    this.client = this.makeClient();
    this.sub = this.makeClient();
    for (const c of [this.client, this.sub]) {
      c.on('error', (e: Error) => {
        this.stats.errors++;
        if (this.stats.lastError !== e.message) this.log.warn({ err: e.message }, 'Redis error; forwarding continues from local state');
        this.stats.lastError = e.message;
      });
    }
    this.client.on('ready', () => {
      this.stats.connected = true;
      this.log.info('Redis connected');
    });
    this.client.on('close', () => {
      if (this.stats.connected) this.log.warn('Redis connection lost; will reconnect');
      this.stats.connected = false;
    });
    this.sub.on('ready', () => {
      (this.sub.subscribe(`${this.o.keyPrefix}flows`) as Promise<unknown>).catch((e: Error) => this.log.warn({ err: e.message }, 'Redis subscribe failed'));
    });
    this.sub.on('message', (_ch: string, msg: string) => this.onPublished(msg));
    this.table.setSync(true);
    this.timers.push(setInterval(() => this.drainParked(), PARK_POLL_MS));
    this.timers.push(setInterval(() => void this.flush(), FLUSH_MS));
    this.timers.push(setInterval(() => void this.exchangeCounts(), this.o.countsInterval * 1000));
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.table.setSync(false);
    await this.flush().catch(() => undefined);
    this.client.disconnect();
    this.sub.disconnect();
  }

  // ── out ───────────────────────────────────────────────────────────────────────────────────
  /** Keys of a flow's two directions; IPv6 keys add the six high words of their two addresses. */
  private inKey(proto: number, caddr: number, cports: number, vaddr: number, hi?: ArrayLike<number>): string {
    return `${this.o.keyPrefix}c:{${proto}.${caddr}.${cports}.${vaddr}${hiPart(proto, hi, 0)}}`;
  }
  private outKey(proto: number, daddr: number, dports: number, laddr: number, hi?: ArrayLike<number>): string {
    return `${this.o.keyPrefix}o:{${proto}.${daddr}.${dports}.${laddr}${hiPart(proto, hi, 6)}}`;
  }

  /** Moves the workers' sync events into the write queue as records read from the table. */
  private collect(): void {
    const a = this.table.i32;
    const now = this.table.now();
    for (const r of this.rings) {
      const head = r[L.RG_SYNC_HEAD]!;
      const tail = Atomics.load(r, L.RG_SYNC_TAIL);
      for (let i = head; i !== tail; i = (i + 1) | 0) {
        const e = r[L.syncRingOffset() + (i & (L.SYNC_RING_SLOTS - 1))]!;
        const o = this.table.base(e);
        const flags = a[o + L.E_FLAGS]!;
        if (!(flags & L.F_IN_USE) || flags & (L.F_SHADOW | L.F_TEMPLATE)) continue;
        const names = this.resolver.names(a[o + L.E_SVC]!, a[o + L.E_RS]!);
        if (!names) continue;
        const proto = a[o + L.E_PROTO]!;
        const state = a[o + L.E_STATE]!;
        const left = (a[o + L.E_EXPIRES]! - now) | 0;
        const expiresAt = Date.now() + left;
        const rec = [
          proto,
          a[o + L.E_CADDR],
          a[o + L.E_CPORTS],
          a[o + L.E_VADDR],
          a[o + L.E_DADDR],
          a[o + L.E_DPORTS],
          a[o + L.E_LADDR],
          flags & L.FWD_MASK,
          names.service,
          names.realServer,
          state,
          flags & L.F_INACTIVE ? 1 : 0,
          expiresAt,
          proto & L.PROTO_V6 ? Array.from(this.table.entryHi(o)).join(',') : '',
        ].join('|');
        const hi = proto & L.PROTO_V6 ? this.table.entryHi(o) : undefined;
        const key = this.inKey(proto, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, a[o + L.E_VADDR]!, hi);
        this.queue.delete(key); // re-insert: newest last
        this.queue.set(key, { rec, out: this.outKey(proto, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, a[o + L.E_LADDR]!, hi), ttl: Math.max(1000, left + 1000), at: Date.now() });
      }
      Atomics.store(r, L.RG_SYNC_HEAD, tail);
    }
    // Bounded: drop the oldest records beyond maxQueue.
    while (this.queue.size > this.o.maxQueue) {
      this.queue.delete(this.queue.keys().next().value!);
      this.stats.dropped++;
    }
    this.stats.queueDepth = this.queue.size;
  }

  private async flush(): Promise<void> {
    this.collect();
    if (this.flushing || this.queue.size === 0 || !this.stats.connected) return;
    this.flushing = true;
    try {
      const batch: [string, { rec: string; out: string; ttl: number; at: number }][] = [];
      for (const kv of this.queue) {
        batch.push(kv);
        if (batch.length >= BATCH) break;
      }
      const writes = batch.flatMap(([k, v]) => [this.client.set(k, v.rec, 'PX', v.ttl), this.client.set(v.out, v.rec, 'PX', v.ttl)]);
      const results = await Promise.allSettled(writes);
      const failed = results.filter((r) => r.status === 'rejected').length;
      if (failed === 0) {
        for (const [k, v] of batch) if (this.queue.get(k) === v) this.queue.delete(k);
        this.stats.written += batch.length;
        this.stats.lagSeconds = (Date.now() - Math.min(...batch.map(([, v]) => v.at))) / 1000;
        await this.client.publish(`${this.o.keyPrefix}flows`, `${this.o.nodeId}\n${batch.map(([, v]) => v.rec).join('\n')}`);
        this.stats.published += batch.length;
      } else {
        this.stats.errors += failed; // kept queued: written after the reconnect
      }
    } catch (e) {
      this.stats.errors++;
      this.stats.lastError = (e as Error).message;
    } finally {
      this.stats.queueDepth = this.queue.size;
      this.flushing = false;
    }
  }

  // ── in ────────────────────────────────────────────────────────────────────────────────────
  private onPublished(msg: string): void {
    const nl = msg.indexOf('\n');
    if (nl < 0 || msg.slice(0, nl) === this.o.nodeId) return;
    for (const rec of msg.slice(nl + 1).split('\n')) if (this.installShadow(rec)) this.stats.received++;
  }

  /** A flow record → shadow entry. False when it is malformed, expired or not ours to carry. */
  installShadow(rec: string): boolean {
    const f = rec.split('|');
    if (f.length !== 13 && f.length !== 14) return false; // 13: a record from before IPv6
    const n = f.slice(0, 13).map(Number);
    const hi = f[13] ? f[13].split(',').map(Number) : null;
    if ((n[0]! & L.PROTO_V6) !== 0 && (hi === null || hi.length !== L.HI_WORDS || hi.some((x) => !Number.isInteger(x)))) return false;
    const slots = this.resolver.slots(f[8]!, f[9]!);
    if (!slots) return false; // a real server this node does not have: the kernel would drop too
    const left = n[12]! - Date.now();
    if (!(left > 0)) return false;
    const fwd = n[7]! | (n[7] === L.FWD_MASQ || n[7] === L.FWD_FULLNAT ? 0 : L.F_NOOUTPUT); // tunnel: one direction only
    const e = this.table.putShadow(n[0]!, n[1]!, n[2]!, n[3]!, n[4]!, n[5]!, n[6]!, fwd, slots.slot, slots.svcSlot, n[10]!, n[11] === 1, (this.table.now() + left) | 0, hi);
    return e >= 0;
  }

  /** Parked packets → Redis lookups (both directions' keys); hits are installed and re-injected. */
  private drainParked(): void {
    for (let w = 0; w < this.rings.length; w++) {
      const r = this.rings[w]!;
      const bytes = this.ringBytes[w]!;
      const head = r[L.RG_PARK_HEAD]!;
      const tail = Atomics.load(r, L.RG_PARK_TAIL);
      for (let i = head; i !== tail; i = (i + 1) | 0) {
        const slot = i & (L.PARK_SLOTS - 1);
        const len = r[L.parkLensOffset() + slot]!;
        const off = L.parkDataOffset(slot);
        void this.lookup(bytes.slice(off, off + len));
      }
      Atomics.store(r, L.RG_PARK_HEAD, tail);
    }
  }

  private async lookup(pkt: Uint8Array): Promise<void> {
    const v6 = pkt[0]! >> 4 === 6;
    // IPv6: the parked packet's key high words, source then destination — the in-key's client
    // and virtual ones, and equally the out-key's real-server and local ones.
    const hi = new Int32Array(L.HI_WORDS);
    let proto: number, s: number, d: number, ports: number;
    if (v6) {
      proto = pkt[6]! | L.PROTO_V6;
      for (let i = 0; i < 3; i++) {
        hi[i] = hi[6 + i] = u32(pkt, 8 + 4 * i);
        hi[3 + i] = hi[9 + i] = u32(pkt, 24 + 4 * i);
      }
      s = u32(pkt, 20);
      d = u32(pkt, 36);
      ports = (u16(pkt, 40) << 16) | u16(pkt, 42);
    } else {
      const ihl = (pkt[0]! & 15) << 2;
      proto = pkt[9]!;
      s = u32(pkt, 12);
      d = u32(pkt, 16);
      ports = (u16(pkt, ihl) << 16) | u16(pkt, ihl + 2);
    }
    if (!this.stats.connected) {
      this.stats.lookups.error++;
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((res) => (timer = setTimeout(() => res('timeout'), this.o.parkTimeout * 1000)));
    try {
      const r = await Promise.race([Promise.all([this.client.get(this.inKey(proto, s, ports, d, hi)), this.client.get(this.outKey(proto, s, ports, d, hi))]), timeout]);
      if (r === 'timeout') {
        this.stats.lookups.timeout++;
        return;
      }
      const rec = r[0] ?? r[1];
      if (rec && this.installShadow(rec)) {
        this.stats.lookups.hit++;
        this.inject(pkt);
      } else this.stats.lookups.miss++;
    } catch (e) {
      this.stats.lookups.error++;
      this.stats.lastError = (e as Error).message;
    } finally {
      clearTimeout(timer);
    }
  }

  // ── cluster-wide counts ───────────────────────────────────────────────────────────────────
  private async exchangeCounts(): Promise<void> {
    if (!this.stats.connected) return;
    const ttl = Math.round(this.o.countsInterval * 3000);
    const now = Date.now();
    try {
      await this.client.set(`${this.o.keyPrefix}counts:${this.o.nodeId}`, JSON.stringify(this.resolver.counts()), 'PX', ttl);
      await this.client.zadd(`${this.o.keyPrefix}nodes`, now, this.o.nodeId);
      await this.client.zremrangebyscore(`${this.o.keyPrefix}nodes`, '-inf', now - ttl);
      const nodes = (await this.client.zrangebyscore(`${this.o.keyPrefix}nodes`, now - ttl, '+inf')).filter((n) => n !== this.o.nodeId);
      const merged = new Map<string, [number, number]>();
      const texts = await Promise.all(nodes.map((n) => this.client.get(`${this.o.keyPrefix}counts:${n}`)));
      for (const t of texts) {
        if (!t) continue;
        for (const [k, [a, i]] of Object.entries(JSON.parse(t) as Record<string, [number, number]>)) {
          const m = merged.get(k) ?? [0, 0];
          merged.set(k, [m[0] + a, m[1] + i]);
        }
      }
      this.remote = merged;
      this.remoteNodes = nodes;
    } catch (e) {
      this.stats.errors++;
      this.stats.lastError = (e as Error).message;
    }
  }

  /** Other live nodes seen in the last exchange. */
  remoteNodes: string[] = [];

  /** Connections other nodes report for a real server (0, 0 when none or unknown). */
  remoteCounts(service: string, realServer: string): [number, number] {
    return this.remote.get(`${service}|${realServer}`) ?? [0, 0];
  }
}

/** The IPv6 part of a key: the two addresses' high words (from hi[from, from+6)), else ''. */
function hiPart(proto: number, hi: ArrayLike<number> | undefined, from: number): string {
  if ((proto & L.PROTO_V6) === 0 || hi === undefined) return '';
  let out = '';
  for (let i = from; i < from + 6; i++) out += `.${hi[i]}`;
  return out;
}
