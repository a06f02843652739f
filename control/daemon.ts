/**
 * uvsd's control thread: owns the configuration, the shared memory, the service model, the
 * dataplane, the sweeper, and the listeners it is given to run (the admin API, metrics, healthz:
 * started by uvsd.ts, which knows them; this module does not import them, so they may read the
 * daemon without an import circle). Workers never see any of this but the shared regions and
 * the snapshots it publishes.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, watch, writeFileSync, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from 'pino';
import * as L from '../conntrack/layout';
import { ConnTable, createRealServerRegion, type TableTimeouts } from '../conntrack/table';
import { Defense, type PoolUse } from '../conntrack/defense';
import { RedisSync } from '../conntrack/redis-sync';
import { SCTP_STATE_KEYS } from '../conntrack/sctp-state';
import { TCP_STATE_NAMES } from '../conntrack/state';
import { Dataplane } from '../lb/dataplane';
import { stopWatchingGcs, watchFullGcs } from './memory';
import { Announcer } from './announce';
import { HealthChecker } from './health';
import { readConfigDoc, validateConfig, type UvsConfig } from './config';
import { Capturer } from './capture';
import { UvsError } from './errors';
import { serviceKey, ServiceModel, type PersistedDrain } from './services';
import type { EditLimits, EditOp, ServiceRef } from './edits';
import type { DisruptionPreview, PreviewService } from './disruption';
import { Offload } from './offload';
import { applyPatch, fromJobError, toJobError, unpackSteps, type BaseRef, type Job, type JobResult } from './offload-jobs';
import { runSliced, stopWatchingLoopDelay, watchLoopDelay } from './slices';
import type { Snapshot } from '../lb/snapshot';
import type { ListenerStatus } from './listen';
import { RouteMtus } from './route-mtus';
import { StatsReader } from './stats';
import { validateStateDrains } from './state-file';

/** How often the MTUs of the devices towards the real servers are read again (ms). */
const MTU_REFRESH_MS = 5000;
/** Every this many MTU refreshes the routes themselves are looked up again (`ip`, a fork). */
const ROUTE_REFRESH_TICKS = 12;
/** Trashed real-server slots the periodic sweep frees at most per turn (control/services.ts collectTrash). */
const TRASH_PER_SWEEP = 500;
/** The defense timer (kernel DEFENSE_TIMER_PERIOD, 1 s). */
const DEFENSE_PERIOD_MS = 1000;
/** Slow-start check period: steps are ≥ 1 s apart per service, so 250 ms keeps them on time within a quarter. */
const RAMP_TICK_MS = 250;

/** A listener the daemon closes when it stops. */
export interface Endpoint {
  close(): Promise<void>;
  /** Its TCP listeners' state (a port another process holds is tried again: listen.ts listenOrWait). */
  listeners?(): ListenerStatus[];
}

/**
 * Starts the daemon's listeners (uvsd.ts: the admin API, metrics, healthz), once everything else
 * runs and before the node is announced. `keep` hands each to the daemon as soon as it listens:
 * the daemon closes them when it stops, and also when a later one fails to start.
 */
export type Serve = (d: Daemon, keep: (e: Endpoint) => void) => Promise<void>;

/** A configuration change's outcome: the snapshot version now running, or why it was refused. */
export type Applied = { ok: true; version: number } | { ok: false; error: UvsError };

export function tableTimeouts(cfg: UvsConfig): TableTimeouts {
  return {
    tcp: TCP_STATE_NAMES.map((n) => cfg.timeouts.tcp[n]!),
    udp: cfg.timeouts.udp,
    sctp: SCTP_STATE_KEYS.map((n) => cfg.timeouts.sctp[n]!),
  };
}

export class Daemon {
  cfg: UvsConfig;
  /**
   * The running configuration as a raw document (YAML as parsed, or as edited through the API):
   * every change is made on a copy of it and validated whole by the same schema as the file.
   */
  doc: unknown;
  readonly configFile: string;
  readonly log: Logger;
  readonly table: ConnTable;
  readonly model: ServiceModel;
  readonly stats: StatsReader;
  readonly dataplane: Dataplane;
  /** Overload defenses (conntrack/defense.ts). */
  readonly defense: Defense;
  private defenseTimer: NodeJS.Timeout | null = null;
  private sweeper: NodeJS.Timeout | null = null;
  private mtuTimer: NodeJS.Timeout | null = null;
  private drainTimer: NodeJS.Timeout | null = null;
  /** Slow-start steps (ServiceModel.rampTick): a map lookup when nothing ramps. */
  private rampTimer: NodeJS.Timeout | null = null;
  /** The listeners Serve started, in that order. */
  private endpoints: Endpoint[] = [];
  private watcher: FSWatcher | null = null;
  private syncTimer: NodeJS.Timeout | null = null;
  private pendingReload: NodeJS.Timeout | null = null;
  private lastFileReload = 0;
  private fileHash = '';
  readonly health: HealthChecker;
  /** Flow sampling (POST /v1/capture, uvsadm --capture). */
  readonly capture: Capturer;
  /** Drains finished, by result (metrics). */
  readonly drainResults = { deleted: 0, deadline: 0, resurrected: 0 };
  /** When the last snapshot was published (ms since the epoch). */
  lastSnapshotAt = Date.now();
  readonly startedAt = Date.now();
  expiredTotal = 0;
  /** lastSeconds: how long the last accepted change took, from its turn to its answer (checks, model, workers, nftables, MTUs). */
  reloads = { ok: 0, failed: 0, lastError: null as string | null, lastSeconds: 0 };

  private constructor(doc: unknown, cfg: UvsConfig, configFile: string, log: Logger) {
    this.doc = doc;
    this.cfg = cfg;
    this.configFile = configFile;
    this.log = log;
    const dp = cfg.dataplane;
    const tableSab = ConnTable.create(dp.tableSize, tableTimeouts(cfg));
    const rsSab = createRealServerRegion(dp.maxRealServers);
    const schedSab = new SharedArrayBuffer(dp.maxServices * L.SCHED_WORDS * 4);
    const counters = Array.from({ length: dp.workers }, () => new SharedArrayBuffer(L.counterWords(dp.maxRealServers, dp.maxServices) * 8));
    const rings = Array.from({ length: dp.workers }, () => new SharedArrayBuffer(L.ringBytes()));
    this.capture = new Capturer(dp.workers, {
      service: (slot) => this.model.serviceOfSlot(slot),
      realServer: (slot) => this.model.namesOfSlot(slot)?.realServer ?? null,
    });
    this.table = new ConnTable(tableSab, rsSab, L.OWNER_CONTROL);
    this.stats = new StatsReader(counters, dp.maxRealServers);
    this.model = new ServiceModel(rsSab, schedSab, dp.maxRealServers, dp.maxServices);
    this.model.onFreshRealServerSlot = (slot) => this.stats.zeroRealServer(slot);
    this.model.onFreshServiceSlot = (slot) => this.stats.zeroService(slot);
    this.model.now = () => this.table.now();
    this.mtus = new RouteMtus(this.model, log);
    const drainLog = log.child({ component: 'graceful-termination' });
    this.model.onDrainEvent = (e) => {
      const f = { service: e.service, realServer: e.realServer, activeConnection: e.activeConns, inactiveConnection: e.inactConns };
      if (e.action !== 'draining') this.drainResults[e.action]++;
      if (e.action === 'draining') drainLog.info(f, 'skip deleting real server till all connections have expired');
      else if (e.action === 'deleted') drainLog.info(f, 'deleted real server: all connections have expired');
      else if (e.action === 'deadline') drainLog.warn(f, 'maximum drain time reached: deleted real server with connections left');
      else drainLog.info(f, 'real server re-added while draining: deleted and added back');
    };
    this.health = new HealthChecker(log.child({ component: 'health' }), (service, realServer, healthy) =>
      this.whenIdle(() => {
        if (this.model.setHealthy(service, realServer, healthy)) this.publishSoon();
      }),
    );
    this.model.apply(cfg);
    this.defense = new Defense(
      this.table,
      cfg.defense,
      () => this.fullnatPools(),
      () => this.stats.word(L.C_GEN_BASE + L.GEN_SYN_ACK * L.GEN_RESULTS + L.GEN_SENT),
    );
    const snapshot = this.model.restoreDrains(this.loadState(), (d, reason) => this.skipState(`${d.service}|${d.realServer}`, reason));
    this.dataplane = new Dataplane(
      {
        device: dp.device,
        vipCidrs: dp.vipCidrs,
        workers: dp.workers,
        mtu: dp.mtu,
        routeTable: dp.routeTable,
        rulePriority: dp.rulePriority,
        markMask: dp.markMask,
        resyncInterval: dp.resyncInterval,
        batch: dp.batch,
        maxRealServers: dp.maxRealServers,
        fullnatAddrs: dp.fullnat.addresses,
        offload: dp.offload,
        io: dp.io,
        steering: dp.steering,
      },
      { table: tableSab, realServers: rsSab, sched: schedSab, counters, rings, capture: this.capture.sab },
      snapshot,
      log.child({ component: 'dataplane' }),
    );
    this.dataplane.releaseLocks = (owner) => this.releaseLocksOf(owner);
    this.offload = new Offload({ table: tableSab, realServers: rsSab }, log.child({ component: 'control-worker' }));
    if (cfg.redis) {
      const model = this.model;
      this.sync = new RedisSync(
        cfg.redis,
        this.table,
        rings,
        {
          names: (_svcSlot, rsSlot) => model.namesOfSlot(rsSlot),
          target: (service, realServer) => model.flowTarget(service, realServer),
          counts: () => {
            const out: Record<string, [number, number]> = {};
            for (const r of model.eachRealServer()) out[`${r.service}|${r.address}:${r.port}`] = [r.activeConns, r.inactConns];
            return out;
          },
        },
        (pkt) => this.dataplane.inject(pkt),
        log.child({ component: 'redis-sync' }),
      );
      this.model.remoteConns = (service, realServer) => this.sync!.remoteCounts(service, realServer);
      this.model.recordHold = () => {
        const h = this.table.tcpHold();
        return Math.max(h.active, h.inactive);
      };
    }
    this.announcer = new Announcer(
      { table: dp.announceTable, device: dp.device, vipCidrs: dp.vipCidrs },
      log.child({ component: 'announce' }),
      () => this.stats.word(L.C_RX_PACKETS),
    );
  }

  /**
   * Maintenance on: every local flow is queued for Redis at once (so a flow that had not reached
   * its 3rd packet is adoptable too), then the announcement is withdrawn. Off: announced again.
   */
  setMaintenance(on: boolean): ReturnType<Announcer['status']> {
    if (on) this.sync?.queueAll();
    return this.announcer.setMaintenance(on);
  }

  /** Shared flow state through Redis, when configured. */
  readonly sync: RedisSync | null = null;
  /** The control worker: parsing, validation and table walks off this thread (control/offload.ts). */
  readonly offload: Offload;
  /** The announcement routes a BGP speaker follows, and node maintenance (control/announce.ts). */
  readonly announcer: Announcer;

  static async start(configFile: string, log: Logger, serve: Serve): Promise<Daemon> {
    const doc = readConfigDoc(configFile);
    const cfg = validateConfig(doc);
    const d = new Daemon(doc, cfg, configFile, log);
    await d.dataplane.start();
    try {
      await d.dataplane.changeReplyRules(d.model.replyChanges());
      // The route MTUs of a few thousand servers are known before traffic is drawn; beyond (one
      // `ip route get` each: seconds at 100,000) they arrive meanwhile — a server's path-MTU check
      // starts with its first answer.
      d.model.takeFreshSlots(); // the refresh of every slot below covers these
      const mtus = d.mtus.refresh(true);
      if (d.model.rsSlotCount() <= 4096) await mtus;
      // The control worker gets the running configuration now, and the file's parse for its
      // cache, so that the first change is not the one that pays for them (offload-jobs.ts).
      void d.based((base, doc) => ({ kind: 'prime', file: configFile, base, ...(doc ? { doc } : {}) }));
      d.mtuTimer = setInterval(() => void d.mtus.refresh(++d.mtuTicks % ROUTE_REFRESH_TICKS === 0), MTU_REFRESH_MS);
      d.sweeper = setInterval(() => d.sweep(), Math.round(cfg.timeouts.sweepInterval * 1000));
      watchFullGcs(); // memory.heapAfterFullGc (control/memory.ts)
      d.defenseTimer = setInterval(() => d.defense.tick(), DEFENSE_PERIOD_MS);
      d.drainTimer = setInterval(() => d.checkDrains(), Math.round(cfg.gracefulTermination.checkInterval * 1000));
      d.rampTimer = setInterval(() => {
        // While a change is applied in slices the model is not ours to touch: the next tick steps.
        if (!d.applying && d.model.rampTick()) void d.publish(d.model.snapshot());
      }, RAMP_TICK_MS);
      d.health.sync(cfg.services);
      d.sync?.start();
      d.saveState();
      d.fileHash = d.hashFile();
      d.startReloadTriggers();
      await serve(d, (e) => d.endpoints.push(e));
      // From here requests come: GET /v1/stats controlThread (control/slices.ts). Start-up (the
      // listeners' routes compiled, ~50–90 ms in one piece) is before any request can wait.
      watchLoopDelay();
      // Last: traffic is drawn here only once everything that carries it runs.
      d.announcer.start(() => d.sync === null || d.sync.stats.connected);
    } catch (e) {
      await d.stop();
      throw e;
    }
    log.info(
      { services: cfg.services.length, tableSize: cfg.dataplane.tableSize, workers: cfg.dataplane.workers, api: cfg.api.socket },
      'uvsd started',
    );
    return d;
  }

  /** The TCP listeners' state (api.listen, metrics, healthz). */
  listenerStatus(): ListenerStatus[] {
    return this.endpoints.flatMap((e) => e.listeners?.() ?? []);
  }

  /**
   * What a dead worker (lock owner id `owner`) left: its locks, then the SYN proxy's held-packet
   * slots it had in hand (ConnTable.holdReclaim). Before its replacement starts.
   */
  private releaseLocksOf(owner: number): number {
    let n = this.table.releaseLocksOf(owner);
    const sched = this.model.sched;
    for (let i = 0; i < sched.length; i += L.SCHED_WORDS) {
      if (Atomics.compareExchange(sched, i + L.SCHED_LOCK, owner, 0) === owner) n++;
    }
    const held = this.table.holdReclaim(owner);
    if (held)
      this.log.warn(
        { owner, heldSlots: held },
        "SYN proxy: held-packet slots of a dead worker given back (their flows' clients send them again)",
      );
    return n;
  }

  /** The route MTU of every real server (RS_MTU): control/route-mtus.ts. */
  private readonly mtus: RouteMtus;
  private mtuTicks = 0;

  sweep(): void {
    const now = this.table.now();
    const removed = this.table.expire(now);
    this.expiredTotal += removed;
    if (this.applying) return; // the model's timers and trash wait for the change being applied
    this.model.tick(now);
    // A bounded number per sweep: 10,000 slots freed at once (a churn's) held the control thread
    // ~240 ms (their reply elements, one nft change); the rest wait for the next sweeps (~12 ms each).
    const freed = this.model.collectTrash(0, TRASH_PER_SWEEP);
    if (freed > 0) void this.dataplane.changeReplyRules(this.model.replyChanges());
  }

  /**
   * Pool use of every full-NAT real server (defense trigger): an entry to it holds one pool
   * address × port pair of its family, and servers of several services share one pair space per
   * protocol (the reply key is protocol, server, pool address, pool port).
   */
  fullnatPools(): PoolUse[] {
    const f = this.cfg.dataplane.fullnat;
    if (f.addresses.length === 0) return [];
    const ports = f.portMax - f.portMin + 1;
    const n6 = f.addresses.filter((a) => a.includes(':')).length;
    const n4 = f.addresses.length - n6;
    const use = new Map<string, PoolUse>();
    for (const r of this.model.eachRealServer()) {
      if (r.forwarding !== 'fullnat') continue;
      const key = `${r.protocol} ${r.address.includes(':') ? `[${r.address}]` : r.address}:${r.port}`;
      const u = use.get(key) ?? { realServer: key, used: 0, capacity: ports * (r.address.includes(':') ? n6 : n4) };
      u.used += r.activeConns + r.inactConns;
      use.set(key, u);
    }
    return [...use.values()];
  }

  /** The drain check (kube-proxy's tryDeleteRs, every gracefulTermination.checkInterval). */
  checkDrains(): void {
    if (this.applying || !this.model.checkDrains()) return;
    void this.publish(this.model.snapshot());
    void this.dataplane.changeReplyRules(this.model.replyChanges());
    this.saveState();
  }

  /** The snapshot the publisher sends next (a newer one replaces it before it goes out). */
  private nextSnapshot: Snapshot | null = null;
  private publishing: Promise<void> | null = null;

  /**
   * Sends a snapshot to every worker, one worker per slice (each postMessage clones it: about
   * 10 ms for 1023 services and 4096 real servers). Publications never interleave: one that
   * comes while another is going out waits and then goes to every worker, so each worker's
   * versions only grow. Resolves once the latest snapshot asked for has reached every worker.
   */
  publish(snapshot: Snapshot): Promise<void> {
    this.nextSnapshot = snapshot;
    this.lastSnapshotAt = Date.now();
    this.publishing ??= (async () => {
      for (let s = this.nextSnapshot; s !== null; s = this.nextSnapshot) {
        this.nextSnapshot = null;
        await runSliced('publish', this.dataplane.publishSteps(s));
      }
      this.publishing = null;
    })();
    return this.publishing;
  }

  private publishQueued = false;

  /**
   * One snapshot for every health verdict of this turn of the event loop: thousands of servers
   * failing together (a subnet gone) gave one snapshot each, 5 s of the control thread at 1,000
   * services × 10 servers (perf/SCALE.md).
   */
  private publishSoon(): void {
    if (this.publishQueued) return;
    this.publishQueued = true;
    setImmediate(() => {
      this.publishQueued = false;
      this.whenIdle(() => void this.publish(this.model.snapshot()));
    });
  }

  /** A configuration change is being applied (in slices): other changes of the model wait. */
  private applying = false;
  /** What came meanwhile (health verdicts), run once it is done. */
  private afterApply: (() => void)[] = [];

  private whenIdle(fn: () => void): void {
    if (this.applying) this.afterApply.push(fn);
    else fn();
  }

  /** Configuration changes (reloads, edits, batches) run one after another, each on the last one's result. */
  private changes: Promise<unknown> = Promise.resolve();

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const timed = async () => {
      const t0 = performance.now();
      const r = await fn();
      if ((r as { ok?: unknown } | null)?.ok === true) this.reloads.lastSeconds = (performance.now() - t0) / 1000;
      return r;
    };
    const next = this.changes.then(timed, timed);
    this.changes = next.catch(() => undefined);
    return next;
  }

  /** State-file entries skipped at start-up (wrong shape, outside vipCidrs, no free slot): logged and counted. */
  stateSkipped = 0;

  private loadState(): PersistedDrain[] {
    if (!this.cfg.stateFile) return [];
    let doc: unknown;
    try {
      doc = JSON.parse(readFileSync(this.cfg.stateFile, 'utf8'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.stateSkipped++;
        this.log.warn({ err: (e as Error).message, file: this.cfg.stateFile }, 'state file unreadable; starting without it');
      }
      return [];
    }
    const { drains, skipped } = validateStateDrains(doc, this.cfg);
    for (const s of skipped) this.skipState(s.path, s.reason);
    if (drains.length) this.log.info({ draining: drains.length, file: this.cfg.stateFile }, 'resuming drains from the state file');
    return drains;
  }

  private skipState(path: string, reason: string): void {
    this.stateSkipped++;
    this.log.warn({ file: this.cfg.stateFile, entry: path, reason }, 'state file entry skipped');
  }

  /** Writes the drain list atomically (tmp + rename). */
  saveState(): void {
    if (!this.cfg.stateFile) return;
    try {
      mkdirSync(dirname(this.cfg.stateFile), { recursive: true, mode: 0o700 });
      const tmp = `${this.cfg.stateFile}.tmp`;
      writeFileSync(tmp, JSON.stringify({ version: 1, savedAt: Date.now(), draining: this.model.persistedDrains() }, null, 1), {
        mode: 0o600,
      });
      renameSync(tmp, this.cfg.stateFile);
    } catch (e) {
      this.log.error({ err: (e as Error).message, file: this.cfg.stateFile }, 'cannot write the state file');
    }
  }

  /**
   * Re-reads the configuration file. A bad file is rejected with the field and reason and the
   * running configuration stays; a good one is applied as a diff (see services.ts). The file is
   * read, parsed and validated by the control worker.
   */
  reload(): Promise<Applied> {
    return this.serial(async () => {
      this.lastFileReload = Date.now();
      this.fileHash = this.hashFile();
      const file = this.configFile;
      return this.applyResult(await this.based((base, doc) => ({ kind: 'file', file, base, ...(doc ? { doc } : {}) })), 'file');
    });
  }

  private hashFile(): string {
    try {
      return createHash('sha256').update(readFileSync(this.configFile)).digest('hex');
    } catch {
      return '';
    }
  }

  /** File watch (debounced, only on a real content change), periodic resync, rate limit. */
  private startReloadTriggers(): void {
    const r = this.cfg.reload;
    const trigger = (why: string) => {
      if (this.pendingReload) return;
      const wait = Math.max(100, this.lastFileReload + r.minInterval * 1000 - Date.now());
      this.pendingReload = setTimeout(() => {
        this.pendingReload = null;
        if (why === 'watch' && this.hashFile() === this.fileHash) return; // touched, not changed
        this.log.info({ trigger: why }, 'reloading configuration');
        void this.reload();
      }, wait);
    };
    if (r.watch) {
      try {
        // Watch the directory: editors and config managers replace files by rename.
        this.watcher = watch(dirname(this.configFile), (_ev, name) => {
          if (name === null || name === basename(this.configFile)) trigger('watch');
        });
        this.watcher.on('error', (e) => this.log.warn({ err: e.message }, 'configuration watch failed; SIGHUP and the API still reload'));
      } catch (e) {
        this.log.warn({ err: (e as Error).message }, 'cannot watch the configuration file; SIGHUP and the API still reload');
      }
    }
    if (r.syncPeriod > 0) this.syncTimer = setInterval(() => trigger('syncPeriod'), r.syncPeriod * 1000);
    if (this.cfg.kubeProxy?.strictARP) this.log.info('ipvs.strictARP has no effect: uvs puts VIPs on a TUN device, which answers no ARP');
  }

  private get limits(): EditLimits {
    return { maxServices: this.cfg.dataplane.maxServices, maxRealServers: this.cfg.dataplane.maxRealServers };
  }

  /**
   * Runtime edit (API, uvsadm): the operations change a copy of the running document; the result
   * is validated whole and applied like a reload. Edits live until the file is reloaded, as
   * ipvsadm changes live until the next restore. The copy, the checks and the edit are the
   * control worker's (control/offload-jobs.ts).
   */
  edit(ops: EditOp[]): Promise<Applied> {
    return this.serial(async () =>
      this.applyResult(await this.based((base, doc) => ({ kind: 'edit', ops, limits: this.limits, base, ...(doc ? { doc } : {}) })), 'api'),
    );
  }

  /** POST /v1/batch: the body as it came (JSON, up to 64 MB), parsed and checked by the control worker. */
  batch(body: Buffer): Promise<Applied> {
    return this.serial(async () => {
      const own = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength; // not a slice of a shared pool
      const job = (base: BaseRef, doc?: Record<string, unknown>): Job => ({
        kind: 'batch',
        body,
        limits: this.limits,
        base,
        ...(doc ? { doc } : {}),
      });
      // The body is copied to the worker the first time, moved the second (the worker lacked the configuration).
      return this.applyResult(await this.based(job, own ? () => [body.buffer as ArrayBuffer] : undefined), 'api');
    });
  }

  /** The version of the running configuration the control worker may hold (offload-jobs.ts BaseRef); 0: none. */
  private docVersion = 0;
  /** How long the last change's job took in the control worker (ms; -1: it was sent again with the document). */
  private lastJobMs = 0;
  private versions = 0;

  /**
   * A job on the running configuration, named by version: the worker answers with what changed.
   * When it does not hold that version (it started since, or the last answer was refused here),
   * the job goes again with the document and the configuration.
   */
  private async based(make: (base: BaseRef, doc?: Record<string, unknown>) => Job, transfer?: () => ArrayBuffer[]): Promise<JobResult> {
    const next = ++this.versions;
    const t = performance.now();
    const r = await this.offloaded(make({ version: this.docVersion, next }));
    this.lastJobMs = Math.round(performance.now() - t);
    if (r.ok || r.stage !== 'base') return r;
    this.lastJobMs = -1; // sent again with the document
    return this.offloaded(make({ version: this.docVersion, next, cfg: this.cfg }, this.doc as Record<string, unknown>), transfer?.() ?? []);
  }

  /** A job on the control worker; its failure to run (it died) is a result too. */
  private async offloaded(job: Job, transfer: ArrayBuffer[] = []): Promise<JobResult> {
    try {
      return await this.offload.run(job, transfer);
    } catch (e) {
      return { ok: false, error: toJobError(e), stage: 'request' };
    }
  }

  private async applyResult(r: JobResult, source: 'file' | 'api'): Promise<Applied> {
    // A request refused for itself (an unknown service, a field, the limits) is no rejected configuration.
    if (!r.ok) return r.stage === 'config' ? this.rejected(fromJobError(r.error)) : { ok: false, error: fromJobError(r.error) };
    if ('patch' in r) {
      // What changed, on the configuration this thread runs (the unchanged services keep their objects).
      let next: { doc: Record<string, unknown>; cfg: UvsConfig };
      try {
        await runSliced('unpack', unpackSteps(r.patch));
        next = applyPatch({ doc: this.doc as Record<string, unknown>, cfg: this.cfg }, r.patch);
      } catch (e) {
        this.docVersion = 0;
        return this.rejected(e);
      }
      return this.applyDoc(next.doc, next.cfg, source, r.version);
    }
    if (!('cfg' in r)) return this.rejected(new UvsError('UVS_ERR_API_INTERNAL', 'the control worker gave no configuration'));
    return this.applyDoc(r.doc, r.cfg, source);
  }

  private rejected(e: unknown): { ok: false; error: UvsError } {
    const err = e instanceof UvsError ? e : new UvsError('UVS_ERR_CONFIG_INVALID', (e as Error).message);
    this.reloads.failed++;
    this.reloads.lastError = err.message;
    this.log.error({ code: err.code, path: err.path, err: err.message }, 'configuration rejected; keeping the running one');
    return { ok: false, error: err };
  }

  /**
   * POST /v1/services/…/preview: the body checked and the preview computed by the control worker,
   * against this service's flows in the shared table. Throws the refusal (UvsError).
   */
  async preview(ref: ServiceRef, body: Buffer): Promise<DisruptionPreview> {
    const key = serviceKey(ref);
    const svc = this.model.listed(key);
    const service: PreviewService | null = svc
      ? {
          address: svc.cfg.address,
          port: svc.cfg.port,
          scheduler: svc.cfg.scheduler,
          flags: svc.cfg.schedFlags,
          ...(svc.cfg.mhTableSize !== undefined ? { mhTableSize: svc.cfg.mhTableSize } : {}),
          realServers: svc.realServers.map((r) => ({
            address: r.address,
            port: r.port,
            weight: r.weight,
            lastWeight: r.lastWeight,
            overloaded: r.overloaded,
          })),
        }
      : null;
    const r = await this.offload.run({
      kind: 'preview',
      body,
      service,
      serviceName: `${ref.protocol} ${ref.address}:${ref.port}`,
      svcSlot: svc?.slot ?? -1,
      maxRealServers: this.cfg.dataplane.maxRealServers,
    });
    if (!r.ok) throw fromJobError(r.error);
    if (!('preview' in r)) throw new UvsError('UVS_ERR_API_INTERNAL', 'the control worker gave no preview');
    return r.preview;
  }

  /** GET /v1/config as JSON bytes (ConfigResponse, secrets redacted), from the control worker. */
  async configJson(): Promise<Uint8Array> {
    const file = this.configFile;
    const r = await this.based((base, doc) => ({ kind: 'config', file, base, ...(doc ? { doc } : {}) }));
    if (!r.ok) throw fromJobError(r.error);
    if (!('json' in r)) throw new UvsError('UVS_ERR_API_INTERNAL', 'the control worker gave no configuration');
    return r.json;
  }

  /** GET /v1/connections as JSON bytes, from the control worker's walk of the shared table. */
  async connectionsJson(limit: number, offset: number): Promise<Uint8Array> {
    const r = await this.offload.run({ kind: 'connections', limit, offset });
    if (!r.ok) throw fromJobError(r.error);
    if (!('json' in r)) throw new UvsError('UVS_ERR_API_INTERNAL', 'the control worker gave no listing');
    return r.json;
  }

  /** What cannot change without a restart: refused with the field. */
  private checkUnchangeable(cfg: UvsConfig): void {
    for (const k of ['metrics', 'healthz', 'api', 'reload', 'redis'] as const) {
      if (JSON.stringify(cfg[k]) !== JSON.stringify(this.cfg[k])) {
        throw new UvsError('UVS_ERR_CONFIG_UNSUPPORTED', 'cannot change on reload (restart uvsd)', k);
      }
    }
    const fixed = [
      'device',
      'workers',
      'tableSize',
      'maxRealServers',
      'maxServices',
      'mtu',
      'routeTable',
      'rulePriority',
      'markMask',
      'batch',
      'offload',
      'io',
      'steering',
      'announceTable',
    ] as const;
    for (const k of fixed) {
      if (cfg.dataplane[k] !== this.cfg.dataplane[k]) {
        throw new UvsError(
          'UVS_ERR_CONFIG_UNSUPPORTED',
          `cannot change on reload (restart uvsd): was ${this.cfg.dataplane[k]}, now ${cfg.dataplane[k]}`,
          `dataplane.${k}`,
        );
      }
    }
    if (JSON.stringify(cfg.dataplane.fullnat) !== JSON.stringify(this.cfg.dataplane.fullnat)) {
      throw new UvsError('UVS_ERR_CONFIG_UNSUPPORTED', 'cannot change on reload (restart uvsd)', 'dataplane.fullnat');
    }
    if (cfg.dataplane.vipCidrs.join() !== this.cfg.dataplane.vipCidrs.join()) {
      throw new UvsError('UVS_ERR_CONFIG_UNSUPPORTED', 'cannot change on reload (restart uvsd)', 'dataplane.vipCidrs');
    }
  }

  /**
   * Applies a validated configuration: the model's diff in slices (the control thread answers
   * between them; health verdicts, drains, slow start and the trash wait until the new snapshot
   * has reached the workers), then the reply rules and route MTUs (`ip`, waited for without
   * blocking), the health checks and the state file. The answer comes once all of it is done.
   */
  private async applyDoc(doc: Record<string, unknown>, cfg: UvsConfig, source: 'file' | 'api', version = 0): Promise<Applied> {
    // Where the time of a change went (ms per phase, in the log line): perf/SCALE.md reads them.
    const phases: Record<string, number> = {};
    let t0 = performance.now();
    const phase = (name: string) => {
      const t = performance.now();
      phases[name] = Math.round(t - t0);
      t0 = t;
    };
    try {
      this.checkUnchangeable(cfg);
    } catch (e) {
      return this.rejected(e);
    }
    let snapshot: Snapshot;
    const intervalChanged = cfg.gracefulTermination.checkInterval !== this.cfg.gracefulTermination.checkInterval;
    this.applying = true;
    try {
      try {
        phase('checks');
        snapshot = await runSliced('apply', this.model.applySteps(cfg));
        phase('apply');
      } catch (e) {
        return this.rejected(e);
      }
      this.doc = doc;
      this.cfg = cfg;
      this.docVersion = version;
      this.table.setTimeouts(tableTimeouts(cfg));
      this.defense.configure(cfg.defense);
      await this.publish(snapshot);
      phase('publish');
    } finally {
      this.applying = false;
      for (const fn of this.afterApply.splice(0)) fn();
    }
    // The reply elements and the new slots' route MTUs together: two commands (nft, ip) that
    // need nothing of each other; at 10,000 changed servers each takes ~150–350 ms. (Their phases
    // in the log: the first to end counts from the publish, the other from that end.)
    await Promise.all([
      this.dataplane.changeReplyRules(this.model.replyChanges()).then(() => phase('replies')),
      this.mtus.changed().then(() => phase('mtus')),
    ]);
    this.health.sync(cfg.services);
    this.saveState();
    if (intervalChanged && this.drainTimer) {
      clearInterval(this.drainTimer);
      this.drainTimer = setInterval(() => this.checkDrains(), Math.round(cfg.gracefulTermination.checkInterval * 1000));
    }
    this.reloads.ok++;
    phase('rest');
    this.log.info(
      {
        version: snapshot.version,
        services: cfg.services.length,
        source,
        // worker: the job's round trip from this thread; job: its run in the worker alone.
        ms: { worker: this.lastJobMs, job: Math.round(this.offload.lastJobMs), ...phases },
      },
      source === 'file' ? 'configuration reloaded' : 'configuration changed through the API',
    );
    return { ok: true, version: snapshot.version };
  }

  async stop(): Promise<void> {
    // First: the withdrawal goes out while the dataplane still forwards what is in flight.
    this.announcer.stop();
    this.health.stop();
    await this.offload.stop();
    await this.sync?.stop();
    this.watcher?.close();
    if (this.syncTimer) clearInterval(this.syncTimer);
    if (this.pendingReload) clearTimeout(this.pendingReload);
    if (this.sweeper) clearInterval(this.sweeper);
    stopWatchingGcs();
    stopWatchingLoopDelay();
    if (this.defenseTimer) clearInterval(this.defenseTimer);
    if (this.mtuTimer) clearInterval(this.mtuTimer);
    if (this.drainTimer) clearInterval(this.drainTimer);
    if (this.rampTimer) clearInterval(this.rampTimer);
    this.sweeper = null;
    this.drainTimer = null;
    this.saveState();
    // Last started, first closed: the admin API (started first) goes last.
    for (const e of [...this.endpoints].reverse()) await e.close();
    this.endpoints = [];
    await this.dataplane.stop();
  }
}
