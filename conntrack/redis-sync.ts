/**
 * Flow state shared through Redis, so any node can adopt another node's flows. Control thread
 * only: workers hand events over through their rings (layout.ts RG_*) and never wait for Redis.
 *
 * Out (this node's flows): workers queue an entry for sync on its 3rd packet, every 50th after,
 * on each state change and once half its timeout has passed (IPVS sync daemon rules plus a
 * refresh). Every 50 ms the queue is written — two keys per flow, one per direction, each with a
 * TTL that follows the entry's timer — and published on a channel so the other nodes pre-load it.
 * A write round carries at most WRITE_BATCH records; rounds follow each other at once while
 * records wait, so a catch-up after an outage holds one round's commands in memory, not the queue's.
 *
 *   <prefix>c:{proto.caddr.cports.vaddr}   client→server key    value: the flow record
 *   <prefix>o:{proto.daddr.dports.laddr}   server→client key    value: the flow record
 *   <prefix>flows                          channel: "<nodeId>\n<record>\n<record>…"
 *   <prefix>counts:<nodeId>                JSON {"<service>|<realServer>": [active, inactive]}, TTL 3 periods
 *   <prefix>nodes                          sorted set nodeId → last heartbeat (ms)
 *   <prefix>nodes                          channel, with redis.recordKey: signed heartbeats
 *                                          (redis-record.ts signHeartbeat), one per count period
 * Each flow key's hash tag is the whole tuple, so Redis Cluster spreads flows over all slots and
 * never needs a cross-slot command.
 *
 * In (other nodes' flows): published records become shadow entries in the table (not counted)
 * that the first packet adopts with no wait. A mid-flow packet that finds nothing is parked by
 * its worker; this module asks Redis for both possible keys, installs a hit as a shadow and writes
 * the packet back into the device, where it is adopted. Misses, timeouts and errors drop it.
 *
 * Redis down or slow: forwarding goes on from the local table; the write queue — entry indexes,
 * each flow's record read from the table when its round is written — is bounded (the oldest
 * flows are dropped, counted) and flushed after the automatic reconnect; writes that
 * fail or time out stay queued. What Redis may still lack afterwards — records dropped from the
 * queue, every key of a Redis restarted without persistence, writes a Sentinel or Cluster
 * failover did not replicate — is not left to the sync rules (a quiet established flow is written
 * again only once half its timeout has passed: 7.5 minutes): after a dropped record, or on
 * reconnecting to another server (another run_id; Cluster: a node joining), once Redis answers
 * and takes writes again the local table is walked and every live local flow queued again
 * (after a reconnect, only those not queued since the connection was lost: the others' records
 * are in the queue already), RESYNC_SLOTS slots and at most WRITE_BATCH records every FLUSH_MS
 * (20,000 records/s), never pushing the queue past maxQueue. So every live flow is in Redis again within about
 * FLUSH_MS × (table size / RESYNC_SLOTS + live flows / WRITE_BATCH) of Redis answering: 3.3 s for
 * 65,536 live flows, 50 s for a million.
 * (IPVS's sync daemon has no such walk: it resends a connection only on its packets —
 * sync_threshold/sync_period, or sync_refresh_period — and a backup that missed messages learns
 * the flow at its next resend; docs/redis.md.)
 *
 * Redis hung (answers nothing, e.g. SIGSTOP): every command fails after redis.commandTimeout, and
 * since Redis answers a connection's commands in order, the first timeout drops the connection —
 * ioredis keeps each sent command until its reply (and queues later ones in an auto-pipeline
 * behind it), so staying on it would keep every later command too. Lookups are deduplicated by
 * flow (later packets of a flow wait on its first lookup, up to PARK_PER_FLOW) and capped
 * (redis.maxLookups in flight, the rings' PARK_SLOTS per worker of packets waiting); beyond, a
 * parked packet is dropped and counted (`busy`). So memory stays bounded whatever Redis does.
 *
 * Everything read back is input from whoever can write to Redis: redis-record.ts says what is
 * believed (records checked against the local service and real server, counts and node lists
 * bounded), the rest is refused and counted by reason. Shadows take at most
 * redis.maxShadowShare of the table, so other nodes' flows never crowd out this node's own.
 */
import Redis, { Cluster } from 'ioredis';
import type { Logger } from 'pino';
import { ip6Upper, u16, u32 } from '../net/packet';
import { ClusterCounts } from './cluster-counts';
import { NewFlow } from './flow';
import * as L from './layout';
import type { ConnTable } from './table';
import {
  checkRecord,
  COUNTS_REFUSALS,
  genField,
  Generation,
  macKey,
  NODE_REFUSALS,
  parseCounts,
  parseHeartbeat,
  parseRecord,
  ppField,
  spField,
  RECORD_REFUSALS,
  recordMatches,
  selectNodes,
  signCounts,
  signHeartbeat,
  signRecord,
  supersedes,
  writerToken,
  MAX_CLOCK_SKEW_MS,
  type CountsRefusal,
  type FlowRecord,
  type FlowTarget,
  type NodeRefusal,
  type RecordRefusal,
} from './redis-record';

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
  /** Shared secret: records and counts carry an HMAC-SHA256 and other nodes' must verify. */
  recordKey?: string;
  /** Share of the table shadow entries may hold (0..1]; the rest is kept for local flows. */
  maxShadowShare: number;
  /** Most other nodes whose counts are read per exchange (the newest heartbeats win). */
  maxNodes: number;
  /** Most adoption lookups in flight; parked packets beyond are dropped (counted `busy`). */
  maxLookups: number;
  /** Seconds a Redis command may take; the first that takes longer drops the connection. */
  commandTimeout: number;
}

/** What the sync needs to know of the service model. */
export interface SyncResolver {
  /** Service key and real server ("a.b.c.d:port") of a slot pair, or null. */
  names(svcSlot: number, rsSlot: number): { service: string; realServer: string } | null;
  /** What a flow of a service's real server looks like here; null when this node does not have it listed. */
  target(service: string, realServer: string): FlowTarget | null;
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
  /**
   * Parked-packet lookups by result; `refused`: Redis had a record that was not believed; `busy`:
   * a packet dropped because redis.maxLookups were in flight or the packet bound was reached;
   * `joined`: a packet that waited on its flow's lookup already in flight (not a lookup).
   */
  lookups: { hit: number; miss: number; timeout: number; error: number; refused: number; busy: number; joined: number };
  lookupsInFlight: number;
  /** Packets of a hit that could not be replayed (the dataplane's send failed: no raw socket, EMSGSIZE, a firewall, a full buffer). */
  replayFailed: number;
  /** Parked packets waiting on lookups (≤ PARK_SLOTS per worker). */
  parkedWaiting: number;
  /** Commands that got no answer within redis.commandTimeout (each drops the connection once). */
  commandTimeouts: number;
  /** Other nodes' records not believed, by reason (redis-record.ts). */
  refused: Record<RecordRefusal, number>;
  /** Other nodes' counts not believed, by reason. */
  countsRefused: Record<CountsRefusal, number>;
  /** Entries of the node list, and signed heartbeats, ignored by reason. */
  nodesRefused: Record<NodeRefusal, number>;
  /** Seconds between a record being queued and its write being acknowledged (last batch). */
  lagSeconds: number;
  /** Walks of the local table that queued every live flow again after Redis lost or missed writes. */
  resyncs: number;
  /** Records those walks queued. */
  resynced: number;
  /** A walk is under way. */
  resyncing: boolean;
  /**
   * Since the last (re)connect, not everything owed to Redis is written yet: the records queued
   * before it, and those of the walk it called for (docs/redis.md "Caught up").
   */
  catchingUp: boolean;
  /** Catch-ups finished (one per connect whose backlog was written). */
  catchUps: number;
  /** Seconds the last catch-up took, from the connect to its last record written; null before the first. */
  lastCatchUpSeconds: number | null;
  /** Shadows replaced by a record of a newer flow on the same client address and port. */
  superseded: number;
  /** Counts exchanges completed (this node's report written, the others' read). */
  countExchanges: number;
  /**
   * Mid-flow client packets Redis knew nothing of twice (a miss, or no Redis to ask), PERMIT_MIN_MS
   * apart, replayed once with a permit: a sloppy service schedules them, others refuse them (a RST).
   */
  secondChances: number;
  lastError: string | null;
}

const FLUSH_MS = 50;
const PARK_POLL_MS = 5;
/**
 * Flow records per write round (two SETs each, then one PUBLISH): the commands in flight at once,
 * and so what a catch-up after an outage holds in memory. (Rounds of 5000, and ioredis resending a
 * timed-out round after the reconnect, took the reliability run's lb1 from 110 to 300 MB.)
 */
const WRITE_BATCH = 1000;
/** Most records one published message may carry (this version publishes WRITE_BATCH; older 5000). */
const MAX_MESSAGE_RECORDS = 5000;
/** Table slots a resync walk examines per write round. */
const RESYNC_SLOTS = 262_144;
/** Packets of one flow that may wait on its lookup: a failover's first burst, not a flood's. */
const PARK_PER_FLOW = 8;
/**
 * Milliseconds before the n-th reconnect attempt: 100, 200, … then every RECONNECT_MAX_MS for as
 * long as Redis is away, so a node is back within RECONNECT_MAX_MS of Redis answering (its share of
 * the catch-up bound, docs/redis.md). An attempt costs a refused connect, or against a hung server
 * a ready check that times out after redis.commandTimeout.
 */
const RECONNECT_MAX_MS = 500;
const reconnectDelay = (times: number): number => Math.min(100 * times, RECONNECT_MAX_MS);
/** Nodes' counts fetched per MGET (Cluster: per round of pipelined GETs). */
const COUNTS_BATCH = 100;

function zeros<K extends string>(keys: readonly K[]): Record<K, number> {
  return Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
}

/** A lookup in flight for one flow, and the parked packets waiting on it. */
interface Lookup {
  key: string;
  pkts: Uint8Array[];
  proto: number;
  s: number;
  ports: number;
  d: number;
  hi: Int32Array;
  timer: NodeJS.Timeout | undefined;
  done: boolean;
}

const TIMED_OUT = 'Command timed out'; // ioredis's message for commandTimeout
/** Flows remembered as missed (their second chance waits for the next miss), and for how long. */
const MAX_MISSES = 65536;
const MISS_FORGET_MS = 10_000;
/** An IPv4 lookup's high words: none (its keys and record checks never read them). */
const NO_HI = new Int32Array(0);

export class RedisSync {
  private readonly o: RedisSyncOptions;
  private readonly table: ConnTable;
  private readonly rings: Int32Array[];
  private readonly ringBytes: Uint8Array[];
  private readonly resolver: SyncResolver;
  /** Replays a packet into the dataplane; false when it could not be sent. */
  private readonly inject: (pkt: Uint8Array) => boolean;
  private readonly log: Logger;
  private client!: Redis | Cluster;
  private sub!: Redis | Cluster;
  /**
   * Flows waiting to be written, by entry index, oldest first; each value a token of its latest
   * queueing (`at`: when). The record is read from the table when its write round is built, as
   * the kernel's sync daemon reads a connection when it sends: a queued flow costs a Map entry,
   * not its record's strings (a Redis outage queues every new flow for its whole length), and
   * what is written after an outage is the flow as it is then — a flow that ended meanwhile is
   * not written at all.
   */
  private queue = new Map<number, { at: number }>();
  private timers: NodeJS.Timeout[] = [];
  private flushing = false;
  /** Other nodes' counts, live and held after a node stopped reporting (./cluster-counts.ts). */
  private remote: ClusterCounts;
  private exchanging = false;
  /** The connection is being dropped after a command timed out (until the next 'ready'). */
  private resetting = false;
  private readonly key: Buffer | null;
  /** This node's generations (redis-record.ts Generation), and its writer field. */
  private readonly gen = new Generation();
  private readonly writer: string;
  /**
   * Generation of the record each shadow was made from, by entry index (0: a record without one).
   * Read only for an entry that is a shadow now, and every shadow is made by installRecord, which
   * sets it: a value left by an entry's earlier life is never read. 8 bytes per table entry (the
   * table itself has 128 + 36), on the control thread only, as nothing else reads it.
   */
  private readonly shadowGen: Float64Array;
  /**
   * With redis.recordKey: other nodes whose signed counts or heartbeats were believed, and when
   * (epoch ms), for three count periods; at most redis.maxNodes. Their counts are read before any
   * other member of the node list, so members that anyone with access to Redis can add never
   * push them out of the exchange.
   */
  private readonly trusted = new Map<string, number>();
  /** How long counts and heartbeats count: three count periods (ms). */
  private readonly countsTtlMs: number;
  /** Most shadow entries at once: redis.maxShadowShare of the table. */
  private readonly shadowCap: number;
  /** Lookups by flow (the parked packet's tuple). Bounded: ≤ maxHeld entries, so no hash flood. */
  private pending = new Map<string, Lookup>();
  /** Flows whose lookup found nothing, and when first (ms): the next miss after PERMIT_MIN_MS is a second chance. */
  private misses = new Map<string, number>();
  /** Lookups whose commands have not settled (answer, timeout or closed connection). */
  private inFlight = 0;
  /** Parked packets waiting on lookups, and their bound: what the workers' park rings hold. */
  private held = 0;
  private readonly maxHeld: number;
  private readonly scratchHi = new Int32Array(L.HI_WORDS);
  readonly stats: SyncStats = {
    connected: false,
    queueDepth: 0,
    written: 0,
    dropped: 0,
    errors: 0,
    published: 0,
    received: 0,
    lookups: { hit: 0, miss: 0, timeout: 0, error: 0, refused: 0, busy: 0, joined: 0 },
    lookupsInFlight: 0,
    replayFailed: 0,
    parkedWaiting: 0,
    commandTimeouts: 0,
    refused: zeros(RECORD_REFUSALS),
    countsRefused: zeros(COUNTS_REFUSALS),
    nodesRefused: zeros(NODE_REFUSALS),
    lagSeconds: 0,
    resyncs: 0,
    resynced: 0,
    resyncing: false,
    catchingUp: false,
    catchUps: 0,
    lastCatchUpSeconds: null,
    superseded: 0,
    countExchanges: 0,
    secondChances: 0,
    lastError: null,
  };
  /** Redis may lack records of live flows (records dropped from the queue, another server). */
  private resyncWanted = false;
  /** The due walk may skip flows queued since this table time (E_SYNCED): their records are queued. Null: none. */
  private resyncSkipSince: number | null = null;
  /** The running walk's threshold (as resyncSkipSince). */
  private walkSince: number | null = null;
  /** Table time the connection to a server that had answered was lost; null while none is. */
  private lostAt: number | null = null;
  /** run_id of the Redis server last connected to; null before the first answer. */
  private runId: string | null = null;
  /** The last write round failed: a walk waits for Redis to take writes again. */
  private writeFailed = false;
  /** Next entry index of the resync walk; -1 when none runs. */
  private resyncAt = -1;
  /**
   * The catch-up under way (null: none): since when (epoch ms of the connect), whether the server
   * check that may call for a walk has answered, and once no walk is due or running, the time
   * (epoch ms) before which every queued record is owed from the catch-up.
   */
  private catchUp: { since: number; checked: boolean; owedBefore: number | null } | null = null;

  constructor(
    o: RedisSyncOptions,
    table: ConnTable,
    rings: SharedArrayBuffer[],
    resolver: SyncResolver,
    inject: (pkt: Uint8Array) => boolean,
    log: Logger,
  ) {
    this.o = o;
    this.table = table;
    this.rings = rings.map((r) => new Int32Array(r));
    this.ringBytes = rings.map((r) => new Uint8Array(r));
    this.resolver = resolver;
    this.inject = inject;
    this.log = log;
    this.key = macKey(o.recordKey);
    this.writer = writerToken(o.nodeId);
    this.shadowGen = new Float64Array(table.capacity);
    this.countsTtlMs = Math.round(o.countsInterval * 3000);
    this.shadowCap = Math.floor(table.capacity * o.maxShadowShare);
    this.remote = new ClusterCounts(4 * o.maxNodes); // dead nodes' reports held beside the live ones
    this.maxHeld = rings.length * L.PARK_SLOTS;
  }

  /** The main client times its commands out; the subscriber only listens, so it has no timeout. */
  private makeClient(timed: boolean): Redis | Cluster {
    // A hung server never answers the FIN either: wait no longer than for a command to close.
    const ms = Math.max(1, Math.round(this.o.commandTimeout * 1000));
    const timeout = timed ? { commandTimeout: ms, disconnectTimeout: ms } : {};
    const common = {
      enableOfflineQueue: false, // fail fast when down: our own queue is the bounded one
      // Failed writes stay in our queue and lookups have given up: resending what was unanswered
      // at the disconnect would only hold it (a hang's whole round) and write it twice.
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 1,
      enableAutoPipelining: true, // batches commands per node, also for Cluster
      retryStrategy: reconnectDelay,
      ...timeout,
      ...(this.o.password ? { password: this.o.password } : {}),
    };
    if (this.o.cluster) {
      return new Cluster(this.o.cluster, {
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        clusterRetryStrategy: reconnectDelay,
        redisOptions: {
          maxRetriesPerRequest: 1,
          autoResendUnfulfilledCommands: false,
          ...timeout,
          ...(this.o.password ? { password: this.o.password } : {}),
        },
      });
    }
    if (this.o.sentinels) return new Redis({ sentinels: this.o.sentinels, name: this.o.name!, ...common });
    return new Redis(this.o.url!, common);
  }

  start(): void {
    this.client = this.makeClient(true);
    this.sub = this.makeClient(false);
    for (const c of [this.client, this.sub]) {
      c.on('error', (e: Error) => {
        this.stats.errors++;
        if (this.stats.lastError !== e.message) this.log.warn({ err: e.message }, 'Redis error; forwarding continues from local state');
        this.stats.lastError = e.message;
      });
    }
    this.client.on('ready', () => {
      this.resetting = false;
      this.writeFailed = false;
      this.stats.connected = true;
      this.log.info('Redis connected');
      const cluster = this.client instanceof Cluster;
      const cu = { since: Date.now(), checked: cluster, owedBefore: null };
      this.catchUp = cu;
      this.stats.catchingUp = true;
      if (!cluster)
        void this.checkServer().then(() => {
          cu.checked = true; // this connect's check: a later connect has its own
        });
    });
    this.client.on('close', () => {
      if (this.stats.connected) {
        this.log.warn('Redis connection lost; will reconnect');
        this.lostAt ??= this.table.now();
      }
      this.stats.connected = false;
    });
    // Cluster: a node joining the slot map is a failover's new master, which may lack recent writes.
    if (this.client instanceof Cluster) this.client.on('+node', () => this.wantResync(null));
    const flows = `${this.o.keyPrefix}flows`;
    // Signed heartbeats exist only with a key: without one anybody's would be as good as a node's.
    const channels = this.key !== null ? [flows, `${this.o.keyPrefix}nodes`] : [flows];
    this.sub.on('ready', () => {
      (this.sub.subscribe(...channels) as Promise<unknown>).catch((e: Error) =>
        this.log.warn({ err: e.message }, 'Redis subscribe failed'),
      );
    });
    this.sub.on('message', (ch: string, msg: string) => (ch === flows ? this.onPublished(msg) : this.onHeartbeat(msg)));
    this.table.setSync(true);
    this.timers.push(setInterval(() => this.drainParked(), PARK_POLL_MS));
    this.timers.push(setInterval(() => void this.flush(true), FLUSH_MS));
    this.timers.push(setInterval(() => void this.exchangeCounts(), this.o.countsInterval * 1000));
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    for (const p of [...this.pending.values()]) this.settle(p, 'error');
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

  /** Moves the workers' sync events into the write queue (their records are read when written). */
  private collect(): void {
    for (const r of this.rings) {
      const head = r[L.RG_SYNC_HEAD]!;
      const tail = Atomics.load(r, L.RG_SYNC_TAIL);
      for (let i = head; i !== tail; i = (i + 1) | 0) {
        this.enqueue(this.table.base(r[L.syncRingOffset() + (i & (L.SYNC_RING_SLOTS - 1))]!));
      }
      Atomics.store(r, L.RG_SYNC_HEAD, tail);
    }
    // Bounded: drop the oldest flows beyond maxQueue.
    while (this.queue.size > this.o.maxQueue) {
      this.queue.delete(this.queue.keys().next().value!);
      this.stats.dropped++;
      this.wantResync(null); // that flow's record is written again by the walk
    }
    this.stats.queueDepth = this.queue.size;
  }

  /** A flow this node may publish (no shadow or template), and not a SYN-proxied one still pending. */
  private publishable(o: number): boolean {
    const flags = this.table.i32[o + L.E_FLAGS]!;
    return (flags & L.F_IN_USE) !== 0 && (flags & (L.F_SHADOW | L.F_TEMPLATE | L.F_SP_PENDING)) === 0;
  }

  /**
   * Queues the entry at word offset o for writing (this node's flows only: no shadow or
   * template); false if it is none. A SYN-proxied flow (lb/synproxy.ts) is published with its
   * deltas (the sp field), but not while its server's handshake is pending: another node could
   * not finish it (it has neither the client's handshake nor the held packets).
   */
  private enqueue(o: number): boolean {
    if (!this.publishable(o)) return false;
    const e = (o - this.table.base(0)) / L.ENTRY_WORDS;
    this.queue.delete(e); // re-insert: newest last
    this.queue.set(e, { at: Date.now() });
    return true;
  }

  /**
   * The record of the entry at word offset o as it is now, with its two keys and their TTL; null
   * when the entry is no longer a flow to publish (ended, or its service or server is gone).
   */
  private record(o: number, now: number): { key: string; out: string; rec: string; ttl: number } | null {
    if (!this.publishable(o)) return null;
    const a = this.table.i32;
    const flags = a[o + L.E_FLAGS]!;
    const names = this.resolver.names(a[o + L.E_SVC]!, a[o + L.E_RS]!);
    if (!names) return null;
    const proto = a[o + L.E_PROTO]!;
    const state = a[o + L.E_STATE]!;
    const left = (a[o + L.E_EXPIRES]! - now) | 0;
    if (left <= 0) return null; // expired, not swept yet
    const expiresAt = Date.now() + left;
    const rec =
      [
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
      ].join('|') +
      ppField(Atomics.load(a, o + L.E_PP), a[o + L.E_PP_SEQ]!) +
      spField(flags & L.F_SYNPROXY ? this.table.spRecordWords((o - this.table.base(0)) / L.ENTRY_WORDS) : null) +
      genField(this.gen.next(Date.now()), this.writer);
    const hi = proto & L.PROTO_V6 ? this.table.entryHi(o) : undefined;
    return {
      key: this.inKey(proto, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, a[o + L.E_VADDR]!, hi),
      out: this.outKey(proto, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, a[o + L.E_LADDR]!, hi),
      rec: signRecord(this.key, rec), // control thread, per batch: never per packet
      ttl: Math.max(1000, left + 1000),
    };
  }

  /**
   * One step of the resync walk (control thread, every FLUSH_MS): starts a walk when Redis
   * may lack records and takes writes again, then queues the live local flows of the next
   * RESYNC_SLOTS table slots — at most WRITE_BATCH, and never more than the queue has room for, so
   * the walk never pushes out a fresher record. Entries are read as queueAll reads them.
   */
  private resyncStep(): void {
    if (!this.stats.connected || this.writeFailed) return;
    if (this.resyncWanted) {
      this.resyncWanted = false;
      if (this.resyncAt < 0) this.stats.resyncs++;
      this.resyncAt = 0; // from the start again: what an earlier walk queued may be lost too
      this.walkSince = this.resyncSkipSince;
      this.log.info({ entries: this.table.count() }, 'Redis takes writes again: queueing every live local flow again');
    }
    if (this.resyncAt < 0) return;
    let budget = Math.min(WRITE_BATCH, this.o.maxQueue - this.queue.size);
    if (budget <= 0) return;
    const a = this.table.i32;
    const now = this.table.now();
    const cap = this.table.capacity;
    const end = Math.min(cap, this.resyncAt + RESYNC_SLOTS);
    let e = this.resyncAt;
    for (; e < end && budget > 0; e++) {
      const o = this.table.base(e);
      if (!(a[o + L.E_FLAGS]! & L.F_IN_USE) || ((a[o + L.E_EXPIRES]! - now) | 0) <= 0) continue;
      // Queued since the connection was lost: its record is in the queue, or written since.
      if (this.walkSince !== null && ((a[o + L.E_SYNCED]! - this.walkSince) | 0) >= 0) continue;
      if (this.enqueue(o)) {
        budget--;
        this.stats.resynced++;
      }
    }
    this.resyncAt = e >= cap ? -1 : e;
    this.stats.resyncing = this.resyncAt >= 0;
    this.stats.queueDepth = this.queue.size;
  }

  /**
   * A walk is due. `skipSince`: flows queued since that table time may be skipped (null: none).
   * With two reasons pending, the walk skips only what both allow.
   */
  private wantResync(skipSince: number | null): void {
    if (!this.resyncWanted) this.resyncSkipSince = skipSince;
    else if (skipSince === null || this.resyncSkipSince === null) this.resyncSkipSince = null;
    else if (((skipSince - this.resyncSkipSince) | 0) < 0) this.resyncSkipSince = skipSince;
    this.resyncWanted = true;
  }

  /**
   * Queues every local flow now (node maintenance: a flow that has not reached its 3rd packet is
   * in Redis too before the router moves it away). Written by the next flushes, WRITE_BATCH at a time;
   * the queue's bound (redis.maxQueue) applies as always.
   */
  queueAll(): number {
    const now = this.table.now();
    const a = this.table.i32;
    let n = 0;
    this.table.forEach((_e, o) => {
      if (((a[o + L.E_EXPIRES]! - now) | 0) <= 0) return; // expired, not swept yet: nobody's flow
      if (this.enqueue(o)) n++;
    });
    this.collect(); // applies the bound and the queue-depth figure
    return n;
  }

  /**
   * One write round: at most WRITE_BATCH records; the next follows at once while records wait.
   * The resync walk adds its records on the timer's rounds only (`tick`): WRITE_BATCH per FLUSH_MS.
   */
  private async flush(tick = false): Promise<void> {
    this.collect();
    if (this.flushing || !this.stats.connected) return;
    if (tick) this.resyncStep();
    this.checkCaughtUp();
    if (this.queue.size === 0) return;
    this.flushing = true;
    let again = false;
    try {
      // The round's records, read from the table now; a queued flow that is no flow to publish
      // any more (ended, or its server deleted) leaves the queue unwritten.
      const batch: { e: number; token: { at: number }; rec: string }[] = [];
      const writes: Promise<unknown>[] = [];
      const now = this.table.now();
      for (const [e, token] of this.queue) {
        const r = this.record(this.table.base(e), now);
        if (r === null) {
          this.queue.delete(e);
          continue;
        }
        batch.push({ e, token, rec: r.rec });
        writes.push(this.client.set(r.key, r.rec, 'PX', r.ttl), this.client.set(r.out, r.rec, 'PX', r.ttl));
        if (batch.length >= WRITE_BATCH) break;
      }
      if (batch.length === 0) return;
      const results = await Promise.allSettled(writes);
      const failed = results.filter((r) => r.status === 'rejected').length;
      if (failed === 0) {
        // A flow queued again while its write was on the way (a new token) stays queued.
        for (const b of batch) if (this.queue.get(b.e) === b.token) this.queue.delete(b.e);
        this.stats.written += batch.length;
        this.stats.lagSeconds = (Date.now() - Math.min(...batch.map((b) => b.token.at))) / 1000;
        await this.client.publish(`${this.o.keyPrefix}flows`, `${this.o.nodeId}\n${batch.map((b) => b.rec).join('\n')}`);
        this.stats.published += batch.length;
        this.writeFailed = false;
        this.checkCaughtUp();
        again = this.queue.size > 0;
      } else {
        // Kept queued: written after the reconnect.
        for (const r of results) if (r.status === 'rejected') this.failed(r.reason, true);
      }
    } catch (e) {
      this.failed(e, true);
    } finally {
      this.stats.queueDepth = this.queue.size;
      this.flushing = false;
    }
    if (again && this.timers.length > 0) setImmediate(() => void this.flush());
  }

  /**
   * After each (re)connect: a Redis server with another run_id than the last one — restarted, or
   * a Sentinel failover's new master — may lack any record written before, so the table is walked
   * (a walk costs the whole table's records: after a mere hang or a lost connection to the same
   * server nothing is, since failed writes stay queued). Unknown (INFO refused, e.g. by an ACL):
   * assumed so.
   */
  private async checkServer(): Promise<void> {
    let id: string | null = null;
    try {
      id = /^run_id:(\w+)/m.exec(await this.client.info('server'))?.[1] ?? null;
    } catch {
      // unknown: walk
    }
    if (id === null || (this.runId !== null && id !== this.runId)) {
      if (this.runId !== null)
        this.log.warn(
          { was: this.runId, now: id },
          'another Redis server answers (restarted or failed over): every live local flow is written again',
        );
      // Flows queued since the connection was lost have their records in the queue: skipped.
      this.wantResync(this.lostAt);
    }
    if (id !== null) this.runId = id;
    this.lostAt = null;
  }

  /**
   * Ends the catch-up once everything owed since the connect is written: the server check has
   * answered, no walk is due or running (its records are queued by then), and no record queued
   * before that moment is still waiting. The queue is in queueing order (a flow queued again moves
   * to the end, with its new time), so its first entry tells. Records of new flows queued
   * meanwhile are the ordinary load, not the catch-up: under load the queue is never empty for long.
   */
  private checkCaughtUp(): void {
    const c = this.catchUp;
    if (c === null || !c.checked || !this.stats.connected || this.writeFailed || this.resyncWanted || this.resyncAt >= 0) return;
    const now = Date.now();
    c.owedBefore ??= now;
    const first = this.queue.values().next();
    if (!first.done && first.value.at <= c.owedBefore) return;
    this.catchUp = null;
    this.stats.catchingUp = false;
    this.stats.catchUps++;
    this.stats.lastCatchUpSeconds = (now - c.since) / 1000;
    this.log.info({ seconds: this.stats.lastCatchUpSeconds, written: this.stats.written }, 'Redis sync caught up');
  }

  /**
   * A command failed. A timeout means Redis is not answering this connection: it answers in
   * order, so every command sent after this one waits too, and ioredis holds each until its reply.
   * Dropping the connection fails them all now; until Redis answers again (the reconnect's ready
   * check times out the same way), new commands fail at once, so nothing piles up. A failed write
   * (`write`: its records stay queued) holds back a resync walk until writes succeed again.
   */
  private failed(e: unknown, write = false): void {
    const msg = e instanceof Error ? e.message : String(e);
    this.stats.errors++;
    this.stats.lastError = msg;
    if (write) this.writeFailed = true;
    if (msg !== TIMED_OUT) return;
    this.stats.commandTimeouts++;
    // Once per connection: the other commands that time out with it find it already dropped.
    if (this.client.status === 'ready' && !this.resetting) {
      this.resetting = true;
      this.stats.connected = false;
      this.log.warn(
        { timeoutSeconds: this.o.commandTimeout },
        'Redis command timed out; reconnecting (forwarding continues from local state)',
      );
      this.lostAt ??= this.table.now();
      this.client.disconnect(true);
    }
  }

  /**
   * Commands not answered yet: sent (ioredis's commandQueue) or waiting in an auto-pipeline
   * behind a pipeline in flight — what a hung Redis makes grow.
   */
  pendingCommands(): number {
    const c = this.client;
    if (!c) return 0;
    const sent = c instanceof Cluster ? c.nodes().reduce((n, x) => n + x.commandQueue.length, 0) : c.commandQueue.length;
    return sent + c.autoPipelineQueueSize;
  }

  // ── in ────────────────────────────────────────────────────────────────────────────────────
  private onPublished(msg: string): void {
    const nl = msg.indexOf('\n');
    if (nl < 0) {
      this.stats.refused.malformed++;
      return;
    }
    if (msg.slice(0, nl) === this.o.nodeId) return;
    // A node publishes at most MAX_MESSAGE_RECORDS records at once: lines beyond are not a node's (refused).
    const recs = msg.slice(nl + 1).split('\n', MAX_MESSAGE_RECORDS + 1);
    if (recs.length > MAX_MESSAGE_RECORDS) {
      recs.pop();
      let extra = 0;
      for (let i = msg.indexOf('\n', nl + 1); i >= 0; i = msg.indexOf('\n', i + 1)) extra++;
      this.stats.refused.malformed += extra + 1 - MAX_MESSAGE_RECORDS;
    }
    for (const rec of recs) if (this.installRecord(rec, null)) this.stats.received++;
  }

  private refuse(why: RecordRefusal): false {
    this.stats.refused[why]++;
    return false;
  }

  /** Local timeout of a state slot (layout.ts H_TIMEOUTS, ms). */
  private timeoutMs(slot: number): number {
    return this.table.i32[L.H_TIMEOUTS + slot]!;
  }

  /**
   * A flow record → shadow entry, if it is believed (redis-record.ts) and, for a lookup, describes
   * the parked packet's flow. False when refused (counted by reason).
   */
  /** installRecord's shadow entry on its way into the table. */
  private readonly shadow = new NewFlow();

  private installRecord(text: string, lookup: Lookup | null): boolean {
    const r = parseRecord(text, this.key);
    if (typeof r === 'string') return this.refuse(r);
    // A lookup's answer must be the packet's flow: another flow's record would install a shadow
    // the replayed packet does not match, and park it again — a loop through Redis.
    if (lookup !== null && !recordMatches(r, lookup.proto, lookup.s, lookup.ports, lookup.d, lookup.hi)) return this.refuse('key_mismatch');
    const t = this.resolver.target(r.service, r.realServer);
    const nowMs = Date.now();
    const why = checkRecord(r, t, nowMs, (slot) => this.timeoutMs(slot));
    if (why !== null) return this.refuse(why);
    // Believed: what this node writes from now on is newer (a flow it adopts from this record).
    this.gen.observe(r.gen);
    // A shadow of the key made from a record at least as new: this one is a replay, or overtaken.
    const cur = this.shadowOf(r);
    if (cur >= 0 && !supersedes(r.gen, this.shadowGen[cur]!)) return this.refuse('stale');
    const mayAdd = this.table.shadows() < this.shadowCap;
    const fwd = r.fwd | (r.fwd === L.FWD_MASQ || r.fwd === L.FWD_FULLNAT ? 0 : L.F_NOOUTPUT); // tunnel: one direction only
    const n = this.shadow;
    n.proto = r.proto;
    n.caddr = r.caddr;
    n.cports = r.cports;
    n.vaddr = r.vaddr;
    n.daddr = r.daddr;
    n.dports = r.dports;
    n.laddr = r.laddr;
    n.flags = fwd | (r.inactive ? L.F_INACTIVE : 0);
    n.rs = t!.slot;
    n.svc = t!.svcSlot;
    n.state = r.state;
    n.expires = (this.table.now() + (r.expiresAt - nowMs)) | 0;
    n.pp = r.pp;
    n.ppSeq = r.ppSeq;
    n.sp = r.sp;
    n.spDelta = r.spDelta;
    n.spTsDelta = r.spTsDelta;
    n.spOpts = r.spOpts;
    if (r.hi !== null) n.hi.set(r.hi);
    let e = this.table.putShadow(n, mayAdd);
    // One shadow replaced by another: the count stays, so the shadow cap does not stand in the way.
    if (e < 0 && this.dropSuperseded(r)) e = this.table.putShadow(n, true);
    if (e < 0) return this.refuse(mayAdd ? 'not_installed' : 'shadow_cap');
    this.shadowGen[e] = r.gen;
    return true;
  }

  /** The shadow entry under the record's client→server key, or −1 (none, or a local entry). */
  private shadowOf(r: FlowRecord): number {
    const t = this.table;
    const b = t.bucketIn(r.proto, r.caddr, r.cports, r.vaddr, r.hi);
    t.lockBucket(b);
    const e = t.findIn(b, r.proto, r.caddr, r.cports, r.vaddr, r.hi);
    const shadow = e >= 0 && (t.i32[t.base(e) + L.E_FLAGS]! & L.F_SHADOW) !== 0;
    t.unlockBucket(b);
    return shadow ? e : -1;
  }

  /**
   * A shadow under the record's client→server key that names another server is an earlier flow
   * of the same client address and port — clients reuse ports, and a closed flow's shadow lives
   * out its TIME_WAIT (2 min) — which the record, newer (installRecord checked its generation),
   * supersedes: removed, so that the record can take its place (else the new flow's packets would
   * go to the old flow's server, or be parked and refused here until the old shadow expired). A
   * local entry is never touched. True if one was removed (counted in `superseded`).
   */
  private dropSuperseded(r: FlowRecord): boolean {
    const t = this.table;
    const b = t.bucketIn(r.proto, r.caddr, r.cports, r.vaddr, r.hi);
    t.lockBucket(b);
    const e = t.findIn(b, r.proto, r.caddr, r.cports, r.vaddr, r.hi);
    const shadow = e >= 0 && (t.i32[t.base(e) + L.E_FLAGS]! & L.F_SHADOW) !== 0;
    t.unlockBucket(b);
    if (!shadow || !t.remove(e, false, t.now(), r.proto, r.caddr, r.cports)) return false;
    this.stats.superseded++;
    return true;
  }

  /** Parked packets → lookups, one per flow; later packets of a flow wait on it (bounded). */
  private drainParked(): void {
    for (let w = 0; w < this.rings.length; w++) {
      const r = this.rings[w]!;
      const bytes = this.ringBytes[w]!;
      const head = r[L.RG_PARK_HEAD]!;
      const tail = Atomics.load(r, L.RG_PARK_TAIL);
      for (let i = head; i !== tail; i = (i + 1) | 0) {
        const slot = i & (L.PARK_SLOTS - 1);
        this.parked(bytes, L.parkDataOffset(slot), r[L.parkLensOffset() + slot]!);
      }
      Atomics.store(r, L.RG_PARK_HEAD, tail);
    }
    this.stats.lookupsInFlight = this.inFlight;
    this.stats.parkedWaiting = this.held;
  }

  private parked(b: Uint8Array, off: number, len: number): void {
    const v6 = b[off]! >> 4 === 6;
    // IPv6: the parked packet's key high words, source then destination — the in-key's client
    // and virtual ones, and equally the out-key's real-server and local ones.
    const hi = this.scratchHi;
    let proto: number, s: number, d: number, ports: number;
    if (v6) {
      // The worker stepped over hop-by-hop, routing and destination-options headers before it
      // parked the packet (lb/core.ts): so does its key, or the lookup asks for another flow.
      const upper = ip6Upper(b, off, off + len);
      const l4 = off + (upper >>> 8);
      if (upper < 0 || l4 + 4 > off + len) {
        this.stats.lookups.error++;
        return;
      }
      proto = (upper & 0xff) | L.PROTO_V6;
      for (let i = 0; i < 3; i++) {
        hi[i] = hi[6 + i] = u32(b, off + 8 + 4 * i);
        hi[3 + i] = hi[9 + i] = u32(b, off + 24 + 4 * i);
      }
      s = u32(b, off + 20);
      d = u32(b, off + 36);
      ports = (u16(b, l4) << 16) | u16(b, l4 + 2);
    } else {
      const ihl = (b[off]! & 15) << 2;
      proto = b[off + 9]!;
      s = u32(b, off + 12);
      d = u32(b, off + 16);
      ports = (u16(b, off + ihl) << 16) | u16(b, off + ihl + 2);
    }
    const key = v6 ? `${proto}.${s}.${ports}.${d}.${hi.subarray(0, 6).join('.')}` : `${proto}.${s}.${ports}.${d}`;
    const waiting = this.pending.get(key);
    if (waiting !== undefined) {
      if (waiting.pkts.length >= PARK_PER_FLOW || this.held >= this.maxHeld) {
        this.stats.lookups.busy++;
        return;
      }
      waiting.pkts.push(b.slice(off, off + len));
      this.held++;
      this.stats.lookups.joined++;
      return;
    }
    if (this.inFlight >= this.o.maxLookups || this.held >= this.maxHeld) {
      this.stats.lookups.busy++;
      return;
    }
    if (!this.stats.connected) {
      this.stats.lookups.error++;
      this.missed(key, [b.slice(off, off + len)], proto, s, ports, d, v6 ? hi : NO_HI);
      return;
    }
    const p: Lookup = {
      key,
      pkts: [b.slice(off, off + len)],
      proto,
      s,
      ports,
      d,
      hi: v6 ? Int32Array.from(hi) : NO_HI,
      timer: undefined,
      done: false,
    };
    this.pending.set(key, p);
    this.held++;
    this.inFlight++;
    p.timer = setTimeout(() => this.settle(p, 'timeout'), this.o.parkTimeout * 1000);
    const inKey = this.inKey(proto, s, ports, d, p.hi);
    const outKey = this.outKey(proto, s, ports, d, p.hi);
    // One command for both keys (half the commands, promises and timers a flood of lookups makes),
    // except on Cluster, where the two keys live in different slots.
    (this.o.cluster ? Promise.all([this.client.get(inKey), this.client.get(outKey)]) : this.client.mget(inKey, outKey)).then(
      (recs) => {
        this.inFlight--;
        let result: 'hit' | 'miss' | 'refused' = 'miss';
        for (const rec of recs) {
          if (rec === null) continue;
          // Installed even when the packets already timed out: their retransmissions find it.
          if (this.installRecord(rec, p)) {
            result = 'hit';
            break;
          }
          result = 'refused';
        }
        this.settle(p, result);
      },
      (e: unknown) => {
        this.inFlight--;
        this.failed(e);
        this.settle(p, e instanceof Error && e.message === TIMED_OUT ? 'timeout' : 'error');
      },
    );
  }

  /**
   * A lookup's end (first of: answer, error, parkTimeout): its packets replayed on a hit, else
   * dropped — or, when Redis knew nothing of the flow (or could not be asked) twice, replayed
   * with a second chance (missed).
   */
  private settle(p: Lookup, result: 'hit' | 'miss' | 'refused' | 'timeout' | 'error'): void {
    if (p.done) return;
    p.done = true;
    clearTimeout(p.timer);
    if (this.pending.get(p.key) === p) this.pending.delete(p.key);
    this.held -= p.pkts.length;
    this.stats.parkedWaiting = this.held;
    this.stats.lookups[result]++;
    if (result === 'hit') {
      this.misses.delete(p.key);
      for (const pkt of p.pkts) if (!this.inject(pkt)) this.stats.replayFailed++;
    } else if (result !== 'refused') this.missed(p.key, p.pkts, p.proto, p.s, p.ports, p.d, p.hi);
    p.pkts = [];
  }

  /**
   * A flow Redis knew nothing of (or could not be asked about). The first time its packets are
   * dropped: a live node's record may still be on its way (written within 50 ms of the flow's 3rd
   * packet), and the client sends again. A miss at least PERMIT_MIN_MS later is the second chance
   * (issue 33: never a silent black hole): the packets are replayed with a permit in every
   * worker's ring (layout.ts PERMIT_*), and the worker schedules them on a sloppy service or
   * answers them (a TCP RST) otherwise. Server-side packets never match a permit (the worker reads
   * it for client packets only): they stay dropped.
   */
  private missed(key: string, pkts: Uint8Array[], proto: number, s: number, ports: number, d: number, hi: Int32Array): void {
    const now = Date.now();
    const first = this.misses.get(key);
    if (first === undefined || now - first > MISS_FORGET_MS) {
      this.misses.delete(key);
      this.misses.set(key, now);
      if (this.misses.size > MAX_MISSES) this.misses.delete(this.misses.keys().next().value!);
      return;
    }
    if (now - first < L.PERMIT_MIN_MS) return;
    this.misses.delete(key);
    const fold = hi.length >= 6 ? hi[0]! ^ hi[1]! ^ hi[2]! ^ hi[3]! ^ hi[4]! ^ hi[5]! : 0;
    const o = L.permitOffset() + L.permitIndex(proto, s, ports, d, fold) * L.PERMIT_WORDS;
    const expires = (this.table.now() + L.PERMIT_TTL_MS) | 0 || 1;
    for (const r of this.rings) {
      r[o] = proto;
      r[o + 1] = s;
      r[o + 2] = ports;
      r[o + 3] = d;
      r[o + 4] = fold;
      Atomics.store(r, o + L.PERMIT_EXPIRES, expires);
    }
    this.stats.secondChances++;
    for (const pkt of pkts) if (!this.inject(pkt)) this.stats.replayFailed++;
  }

  // ── cluster-wide counts ───────────────────────────────────────────────────────────────────
  /**
   * Publishes this node's counts and heartbeat, and reads the other nodes'. What others publish is
   * bounded (redis-record.ts): heartbeats from the future are removed (they would never age out),
   * at most maxNodes nodes are read, in batches of COUNTS_BATCH, and each node's counts are parsed
   * on their own — one bad node does not spoil the rest, and a count is a non-negative integer.
   * With redis.recordKey, the nodes whose signed counts or heartbeats were believed in the last
   * three periods are read first (`trusted`): members of the node list that no node signed for
   * cannot push them out, only take the places left.
   */
  private async exchangeCounts(): Promise<void> {
    if (!this.stats.connected || this.exchanging) return;
    this.exchanging = true;
    const ttl = this.countsTtlMs;
    const now = Date.now();
    const P = this.o.keyPrefix;
    const self = this.o.nodeId;
    try {
      const local = this.resolver.counts();
      await this.client.set(`${P}counts:${self}`, signCounts(this.key, self, JSON.stringify(local), now), 'PX', ttl);
      await this.client.zadd(`${P}nodes`, now, self);
      if (this.key !== null) await this.client.publish(`${P}nodes`, signHeartbeat(this.key, self, now));
      await this.client.zremrangebyscore(`${P}nodes`, '-inf', now - ttl);
      const future = await this.client.zremrangebyscore(`${P}nodes`, `(${now + MAX_CLOCK_SKEW_MS}`, '+inf');
      const total = await this.client.zcard(`${P}nodes`);
      const flat = await this.client.zrevrangebyscore(`${P}nodes`, '+inf', now - ttl, 'WITHSCORES', 'LIMIT', 0, this.o.maxNodes + 1);
      for (const [id, at] of this.trusted) if (at < now - ttl) this.trusted.delete(id);
      const first = [...this.trusted].sort((x, y) => y[1] - x[1]).map(([id]) => id);
      const picked = selectNodes(flat, total, self, now, this.o.maxNodes, first);
      picked.refused.future += future;
      for (const k of NODE_REFUSALS) this.stats.nodesRefused[k] += picked.refused[k];
      if (future > 0 || picked.refused.cap > 0 || picked.refused.bad_id > 0)
        this.log.warn({ ...picked.refused }, 'Redis node list: entries ignored');
      // Nodes run the same configuration: a report far larger than ours is not a node's.
      const known = new Set(Object.keys(local));
      const maxChars = 65536 + 256 * known.size;
      const live = new Map<string, Map<string, [number, number]>>();
      const nodes = picked.nodes;
      const believed: string[] = [];
      for (let i = 0; i < nodes.length; i += COUNTS_BATCH) {
        const chunk = nodes.slice(i, i + COUNTS_BATCH);
        const keys = chunk.map((n) => `${P}counts:${n}`);
        // Cluster: the keys live in different slots, so no MGET; auto-pipelining batches the GETs.
        const texts = this.o.cluster ? await Promise.all(keys.map((k) => this.client.get(k))) : await this.client.mget(keys);
        texts.forEach((t, j) => {
          if (t === null) return; // its counts expired: it has nothing to add
          const c = parseCounts(t, chunk[j]!, this.key, known, maxChars, now, ttl);
          if (typeof c === 'string') {
            this.stats.countsRefused[c]++;
            return;
          }
          believed.push(chunk[j]!);
          if (this.key !== null) this.trust(chunk[j]!, now);
          live.set(chunk[j]!, c);
        });
      }
      this.remote.update(live, now, ttl, this.table.tcpHold());
      // With a key, only the nodes whose signed counts were read: a member nobody signed for is none.
      this.remoteNodes = this.key !== null ? believed : nodes;
      this.stats.countExchanges++;
    } catch (e) {
      this.failed(e);
    } finally {
      this.exchanging = false;
    }
  }

  /** A signed heartbeat from <prefix>nodes (only subscribed with a key): its node is trusted. */
  private onHeartbeat(msg: string): void {
    const h = parseHeartbeat(this.key!, msg, Date.now(), this.countsTtlMs);
    if (typeof h === 'string') this.stats.nodesRefused[h]++;
    else if (h.nodeId !== this.o.nodeId) this.trust(h.nodeId, h.atMs);
  }

  /**
   * Another node proved itself (its MAC held) at `atMs`. At most redis.maxNodes are kept: a new
   * one takes the place of the one heard from longest ago, if that is older.
   */
  private trust(nodeId: string, atMs: number): void {
    const was = this.trusted.get(nodeId);
    if (was === undefined && this.trusted.size >= this.o.maxNodes) {
      let oldest: string | null = null;
      let oldestAt = atMs;
      for (const [id, at] of this.trusted) {
        if (at < oldestAt) {
          oldest = id;
          oldestAt = at;
        }
      }
      if (oldest === null) return;
      this.trusted.delete(oldest);
    }
    if (was === undefined || atMs > was) this.trusted.set(nodeId, atMs);
  }

  /** Other live nodes seen in the last exchange (with a key: those whose signed counts were believed). */
  remoteNodes: string[] = [];

  /** Nodes no longer reporting whose last counts are still held (their flows may live on). */
  get heldNodes(): string[] {
    return this.remote.held;
  }

  /** Connections other nodes report for a real server (0, 0 when none or unknown). */
  remoteCounts(service: string, realServer: string): [number, number] {
    return this.remote.counts(`${service}|${realServer}`);
  }
}

/** The IPv6 part of a key: the two addresses' high words (from hi[from, from+6)), else ''. */
function hiPart(proto: number, hi: ArrayLike<number> | undefined, from: number): string {
  if ((proto & L.PROTO_V6) === 0 || hi === undefined) return '';
  let out = '';
  for (let i = from; i < from + 6; i++) out += `.${hi[i]}`;
  return out;
}
