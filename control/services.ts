/**
 * The virtual-service model on the control thread: turns configurations into the kernel's
 * sequence of operations and compiles the snapshot the workers use.
 *
 * A configuration change is applied as the ipvsadm commands that would make it, one at a time,
 * so every scheduler sees the kernel's hook sequence: real servers deleted (-d, in list order),
 * edited (-e), then added (-a, in configuration order — each goes to the head of the list, so the
 * list is newest first), services added (-A then -a each). A scheduler change rebinds the
 * scheduler from scratch on the current list (ip_vs_edit_service).
 *
 * Graceful termination (kube-proxy's graceful_termination.go, plus uvs's additions): removing a
 * TCP real server that still has connections sets its weight to 0 and puts it on the drain list
 * instead; checkDrains() deletes it once ActiveConn + InActConn reaches 0 (or its maximum drain
 * time passes). UDP and SCTP real servers are deleted at once. A server re-added while draining is taken
 * off the list, deleted and added back with its configured weight. A removed TCP service stays
 * (all weights 0, new flows refused) until its last server has drained.
 *
 * The configured weight is kept apart from runtime state: the weight the scheduler sees is 0 while
 * a server drains or is failing its health check, the configured one otherwise.
 *
 * Slow start (`slowStart`, HAProxy's slowstart, Envoy's slow_start_config with aggression 1): a
 * server that comes back — health check up, added to a running service, weight raised from 0 —
 * gets the weight ceil(weight · elapsed / window), at least 1, instead of its whole weight at
 * once, so it is not handed every new connection of wlc/sed (it has none) or its full share of a
 * cold cache. The ramp is what the schedulers see (the snapshot's dest weight, RS_WEIGHT, mh's
 * last_weight) and what ipvsadm -Ln shows, applied as -e edits by rampTick(): every ramping
 * server of a service steps together, at most once per max(1 s, window / 20) (HAProxy's
 * server_warmup period), so mh and sh rebuild their tables at most once a second per service.
 * Weights are integers, as in IPVS: a server of weight w ramps in at most w steps (weight 1 does
 * not ramp at all); schedulers that ignore weights other than 0 (rr, lc, dh; nq while the server
 * is idle) see no ramp. Servers present when a service is created (and at start-up) do not ramp,
 * as in HAProxy and Envoy.
 *
 * Real-server slots index the shared real-server region. A deleted server whose connections are
 * still in the table, or that its scheduler's state still references (an lblc cache entry, an
 * lblcr set), stays in the "trash" (slot kept, AVAILABLE cleared) until they are gone, and
 * re-adding it revives the same slot with its counters, as the kernel does
 * (docs/ipvs-semantics.md §1.2). A slot is reused only once nothing can mistake its next server
 * for the deleted one.
 */
import * as L from '../conntrack/layout';
import type { FlowTarget } from '../conntrack/redis-record';
import { parseCidr, parseCidr6, parseIPv4, parseIPv6, prefixMask6 } from '../net/addr';
import { PP_V1, PP_V2 } from '../net/proxy-protocol';
import { PROTO_NUMBER, type Protocol } from '../net/proto';
import { buildLookup, type CompiledDest, type CompiledService, type Snapshot } from '../lb/snapshot';
import { ruleKey, type ReplyRule } from '../lb/nftables';
import { getScheduler } from '../schedulers/registry';
import { schedFlagBits, type DestListChange, type SchedDest } from '../schedulers/types';
import type { RealServerConfig, ServiceConfig, SloppyMode, UvsConfig } from './config';
import { runAll } from './slices';

const FWD: Record<string, number> = { masq: L.FWD_MASQ, fullnat: L.FWD_FULLNAT, tunnel: L.FWD_TUNNEL };
const PP: Record<string, number> = { v1: PP_V1, v2: PP_V2 };

/** A compiled real server's address as text (IPv6 from its words; `addr` is then a fold). */
/** Deep equality of validated configuration values (plain objects, arrays, primitives). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameValue(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if (!sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  return true;
}

/** Schedulers whose choice is a function of the packet and the configuration alone: every node makes the same (sloppy `auto`). */
export const CONSISTENT_SCHEDULERS: ReadonlySet<string> = new Set(['mh', 'sh', 'dh']);

/** Slow-start steps are at least this far apart per service (HAProxy's warmup period floor). */
export const SLOW_START_MIN_STEP_MS = 1000;

/**
 * A ramping server's weight `elapsed` ms into a `window`-ms slow start: HAProxy's linear ramp
 * (server_recalc_eweight), rounded up and at least 1 so the server is eligible from the start.
 */
export function slowStartWeight(weight: number, elapsed: number, window: number): number {
  if (weight === 0 || elapsed >= window) return weight;
  return Math.max(1, Math.ceil((weight * Math.max(0, elapsed)) / window));
}

/** applySteps compares with the last list place by place while at most this many places differ. */
const MAX_PLACES = 256;

/** The places where two lists hold other objects (past the shorter one's end too), or null beyond `max`. */
function differingPlaces<T>(a: readonly T[], b: readonly T[], max: number): number[] | null {
  const out: number[] = [];
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] === b[i]) continue;
    if (out.length === max) return null;
    out.push(i);
  }
  return out;
}

export function serviceKey(s: { protocol: string; address: string; port: number }): string {
  return `${s.protocol} ${s.address}:${s.port}`;
}

/** kube-proxy's IsRsGracefulTerminationNeeded: everything but UDP and SCTP drains. */
export function drainsOnRemoval(protocol: string): boolean {
  return protocol !== 'udp' && protocol !== 'sctp';
}

interface LiveService {
  key: string;
  slot: number;
  cfg: ServiceConfig;
  compiled: CompiledService;
  /** Real-server configs by "addr:port", for servers in the list. */
  rsCfg: Map<string, RealServerConfig>;
  /** No longer configured: kept while its servers drain. */
  removing: boolean;
  /** Table-relative ms of the scheduler's next tick() (lblc/lblcr collector), or null. */
  nextTick: number | null;
  /** Clock ms of the last slow-start step or start (rampTick's rate limit). */
  lastRampStep: number;
}

interface RsSlotInfo {
  slot: number;
  svcKey: string;
  svcSlot: number;
  addr: string;
  port: number;
  /** "addr:port", its key in the service (made once: a churn of 100,000 servers formatted it per look). */
  rsKey: string;
  /** In a service's list (false = trash). */
  listed: boolean;
  /** Masq: its replies are marked into the device (an element of uvs's nftables sets) while the slot lives. */
  masq: boolean;
}

/** A service as list() shows it. */
export interface ListedService {
  key: string;
  cfg: ServiceConfig;
  slot: number;
  removing: boolean;
  realServers: (RealServerView & { lastWeight: number })[];
}

export interface DrainEntry {
  service: string;
  realServer: string;
  protocol: string;
  /** ms since the epoch. */
  since: number;
  /** ms since the epoch; null = wait for the last connection however long. */
  deadline: number | null;
}

/** What survives a restart: enough to put a draining server back at weight 0. */
export interface PersistedDrain extends DrainEntry {
  serviceConfig: ServiceConfig;
  realServerConfig: RealServerConfig;
}

export interface DrainEvent {
  service: string;
  realServer: string;
  action: 'draining' | 'deleted' | 'deadline' | 'resurrected';
  activeConns: number;
  inactConns: number;
}

export interface RealServerView {
  address: string;
  port: number;
  weight: number;
  configuredWeight: number;
  forwarding: string;
  slot: number;
  activeConns: number;
  inactConns: number;
  persistConns: number;
  overloaded: boolean;
  draining: boolean;
  healthy: boolean;
  /** Clock ms at which this server's slow start ends, or null when it is not ramping. */
  slowStartUntil: number | null;
  upperThreshold: number;
  lowerThreshold: number;
  /** PROXY protocol towards it ('v1', 'v2'), 'none' without. */
  proxyProtocol: string;
}

export interface DrainPolicy {
  /** ms; 0 = no limit. Per service overrides in ServiceConfig.maxDrainTime. */
  maxDrainTime: number;
}

export class ServiceModel {
  readonly rs: Int32Array;
  readonly sched: Int32Array;
  readonly maxRealServers: number;
  readonly maxServices: number;
  private services = new Map<string, LiveService>();
  /** The configuration's services as last applied, in order (applySteps compares place by place); null after a change that did not end. */
  private applied: ServiceConfig[] | null = null;
  /** Live services by slot (the snapshot's dirty slots are looked up here). */
  private bySlot = new Map<number, LiveService>();
  /**
   * The live service a configuration object was applied to (live.cfg): applySteps finds an
   * unchanged service by the object's identity, without its key or a comparison (issue 37).
   */
  private liveOf = new WeakMap<ServiceConfig, LiveService>();
  private rsSlots = new Map<string, RsSlotInfo>(); // key: svcKey|addr:port
  private rsBySlot = new Map<number, RsSlotInfo>();
  /** Slots in the trash (not listed, still allocated): what collectTrash looks at. */
  private trashed = new Set<RsSlotInfo>();
  /** Real-server slots allocated since the last takeFreshSlots() (their route MTU is not known yet). */
  private fresh: number[] = [];
  /**
   * Service slots whose compiled form changed since the last snapshot(): the snapshot copies only
   * those and shares the others with the last one (10,000 services copied took 10–20 ms a change).
   */
  private dirty = new Set<number>();
  /** The last snapshot's services, at their slots. */
  private published: CompiledService[] = [];
  /** PROXY protocol version per real-server slot of the listed servers (Snapshot.proxyProtocol), kept as they change. */
  private readonly pp: Uint8Array;
  /**
   * The last snapshot's service index and PROXY protocol copy, kept while nothing they hold
   * changed (a service added or removed; a server's PROXY protocol): the same objects go in the
   * next snapshot, and the workers' delta leaves them out (lb/snapshot.ts snapshotDelta).
   */
  private lastIndex: { lookup: Int32Array; lookupMask: number } | null = null;
  private lastPp: Uint8Array | null = null;
  private freeRs: number[] = [];
  private freeSvc: number[] = [];
  private svcSlotRefs: Int32Array;
  /** Service slots of removed services still referenced by trashed real servers. */
  private orphanSvcSlots = new Set<number>();
  private version = 0;
  private vipCidrs: string[] = [];
  private answerPing = true;
  private expireNodestConn = true;
  private expireQuiescentTemplate = false;
  private sloppy: { tcp: SloppyMode; sctp: SloppyMode } = { tcp: 'auto', sctp: 'auto' };
  private adopt = false;
  private fullnat = { addresses: [] as string[], portMin: 1024, portMax: 65535 };
  private tunnelSrc = 0;
  private tunnelSrc6: Int32Array = new Int32Array(4);
  private genLimit = { genPeerMs: 1000, genPeerBurst: 6, genPerSec: 1000, genBurst: 50, genKinds: 0b11 };
  /** Draining real servers by slot key. */
  private draining = new Map<string, DrainEntry>();
  /** Their configurations when they started draining (for restarts). */
  private drainConfigs = new Map<string, { svc: ServiceConfig; rs: RealServerConfig }>();
  /** Real servers failing their health check, by slot key. */
  private unhealthy = new Set<string>();
  /** Real servers in slow start, by slot key: when the ramp started (clock ms) and its length. */
  private ramps = new Map<string, { start: number; ms: number }>();
  policy: DrainPolicy = { maxDrainTime: 0 };
  /** Called when a slot is (re)allocated, so its statistics start from zero. */
  onFreshRealServerSlot: ((slot: number) => void) | null = null;
  onFreshServiceSlot: ((slot: number) => void) | null = null;
  /** Drain decisions, for logs and metrics. */
  onDrainEvent: ((e: DrainEvent) => void) | null = null;
  /**
   * Servers a drain deleted at a cluster-wide count of 0 (with Redis), by slot key, and until when
   * their records are still served: a count can miss flows (a node restarted or started after
   * another died, its held counts lost: conntrack/cluster-counts.ts), and those flows' records
   * may arrive for as long as their entries could live (recordHold). Their slots stay in the trash
   * with RSF_DRAINED: an adopted flow goes on to the server, nothing new is scheduled to it.
   */
  private drainedTrash = new Map<string, { until: number; target: FlowTarget }>();
  /** How long a flow's record may outlive its last count (ms): the longest TCP timeout. Set with Redis. */
  recordHold: (() => number) | null = null;
  /** Clock (ms since the epoch); replaceable in tests. */
  clock: () => number = Date.now;

  constructor(rs: SharedArrayBuffer, sched: SharedArrayBuffer, maxRealServers: number, maxServices: number) {
    this.rs = new Int32Array(rs);
    this.sched = new Int32Array(sched);
    this.maxRealServers = maxRealServers;
    this.maxServices = maxServices;
    for (let i = maxRealServers - 1; i >= 0; i--) this.freeRs.push(i);
    for (let i = maxServices - 1; i >= 0; i--) this.freeSvc.push(i);
    this.svcSlotRefs = new Int32Array(maxServices);
    this.pp = new Uint8Array(maxRealServers);
  }

  /** Applies a validated configuration; returns the new snapshot. Throws before changing anything if slots run out. */
  apply(cfg: UvsConfig): Snapshot {
    return runAll(this.applySteps(cfg));
  }

  /**
   * apply() as steps (control/slices.ts runSliced): one step per real server added, edited or
   * removed, so the control thread can answer between them. Its caller must keep every other
   * change of the model (health verdicts, drains, slow start, the trash) for after the last step.
   * The shared real-server and scheduler regions change step by step, as they always did while
   * the operations ran; the snapshot with the new lists is returned, and published, at the end.
   */
  *applySteps(cfg: UvsConfig): Generator<void, Snapshot> {
    this.vipCidrs = cfg.dataplane.vipCidrs;
    this.answerPing = cfg.dataplane.answerPing;
    this.expireNodestConn = cfg.gracefulTermination.expireNodestConn;
    this.expireQuiescentTemplate = cfg.dataplane.expireQuiescentTemplate;
    this.adopt = cfg.redis !== null;
    this.fullnat = cfg.dataplane.fullnat;
    this.tunnelSrc = cfg.dataplane.tunnelSource ? parseIPv4(cfg.dataplane.tunnelSource)! : 0;
    this.tunnelSrc6 = cfg.dataplane.tunnelSource6 ? parseIPv6(cfg.dataplane.tunnelSource6)! : new Int32Array(4);
    const g = cfg.dataplane.generatedLimit;
    const w = cfg.dataplane.workers;
    this.genLimit = {
      genPeerMs: Math.round(g.perSourceInterval * 1000),
      genPeerBurst: g.perSourceBurst,
      // The node-wide budget shared out: each worker keeps its own bucket (no atomics per packet).
      genPerSec: Math.ceil(g.perSecond / w),
      genBurst: Math.ceil(g.burst / w),
      genKinds: g.kinds.reduce((m, k) => m | (1 << (L.GEN_KIND_NAMES as readonly string[]).indexOf(k)), 0),
    };
    this.policy = { maxDrainTime: cfg.gracefulTermination.maxDrainTime * 1000 };
    const sloppy = { tcp: cfg.dataplane.sloppyTcp, sctp: cfg.dataplane.sloppySctp };
    if (sloppy.tcp !== this.sloppy.tcp || sloppy.sctp !== this.sloppy.sctp) for (const slot of this.bySlot.keys()) this.dirty.add(slot);
    this.sloppy = sloppy;
    // Services whose configuration is what runs: nothing to do for them (a reload that changes
    // one of 10,000 services costs that one, issue 37). The object applied last is found by its
    // identity (the control worker keeps an unchanged service's object: offload-jobs.ts); another
    // object by key and value. Where the list is the last one's but for a few places, only those
    // are looked at; in steps, as 10,000 keys are ~20 ms.
    const wanted = new Set<LiveService>();
    const todo: { key: string; s: ServiceConfig }[] = [];
    const look = (s: ServiceConfig): void => {
      const mine = this.liveOf.get(s);
      if (mine !== undefined && mine.cfg === s && !mine.removing && this.services.get(mine.key) === mine) {
        wanted.add(mine);
        return;
      }
      const key = serviceKey(s);
      const live = this.services.get(key);
      if (live) wanted.add(live);
      if (live && !live.removing && sameValue(live.cfg, s)) {
        live.cfg = s;
        this.liveOf.set(s, live);
      } else todo.push({ key, s });
    };
    const prev = this.applied;
    this.applied = null; // until this change has run to its end
    const places = prev ? differingPlaces(prev, cfg.services, MAX_PLACES) : null;
    let gone: ServiceConfig[];
    if (prev && places) {
      for (const i of places) if (i < cfg.services.length) look(cfg.services[i]!);
      gone = places.filter((i) => i < prev.length).map((i) => prev[i]!);
    } else {
      let n = 0;
      for (const s of cfg.services) {
        if (++n % 1000 === 0) yield;
        look(s);
      }
      gone = [];
    }
    yield* this.checkCapacity(todo);
    if (prev && places) {
      // Only services at the differing places can have left: those whose object is gone and whose key nothing took.
      for (const o of gone) {
        const live = this.liveOf.get(o);
        if (live && live.cfg === o && !live.removing && !wanted.has(live) && this.services.get(live.key) === live)
          yield* this.removeService(live);
      }
    } else {
      for (const live of [...this.services.values()]) {
        if (!wanted.has(live) && !live.removing) yield* this.removeService(live);
      }
    }
    for (const { key, s } of todo) {
      const live = this.services.get(key);
      if (live) yield* this.editService(live, s);
      else yield* this.addService(s);
      yield;
    }
    this.applied = cfg.services.slice();
    return this.snapshot();
  }

  /** Throws, before anything changed, when the services to add or edit need more slots than are free. In steps: 100,000 servers are ~100 ms. */
  private *checkCapacity(todo: { key: string; s: ServiceConfig }[]): Generator<void> {
    let newSvcs = 0;
    let newRs = 0;
    for (const { key, s } of todo) {
      const live = this.services.get(key);
      if (!live) newSvcs++;
      for (const r of s.realServers) {
        const k = `${r.address}:${r.port}`;
        // Listed already (most of an edited service's), else a slot of its own or in the trash.
        if (!live?.rsCfg.has(k) && !this.rsSlots.has(`${key}|${k}`)) newRs++;
      }
      yield;
    }
    // Drained servers held only for late records give their slots up first (never one in use).
    if (newSvcs > this.freeSvc.length) this.collectTrash(Number.POSITIVE_INFINITY);
    else if (newRs > this.freeRs.length) this.collectTrash(newRs - this.freeRs.length);
    if (newSvcs > this.freeSvc.length)
      throw new Error(`not enough service slots: ${newSvcs} needed, ${this.freeSvc.length} free (dataplane.maxServices)`);
    if (newRs > this.freeRs.length)
      throw new Error(`not enough real-server slots: ${newRs} needed, ${this.freeRs.length} free (dataplane.maxRealServers)`);
  }

  private schedBase(svcSlot: number): number {
    return svcSlot * L.SCHED_WORDS + L.SCHED_STATE;
  }

  private withSchedLock(svcSlot: number, fn: () => void): void {
    const lock = svcSlot * L.SCHED_WORDS + L.SCHED_LOCK;
    while (Atomics.compareExchange(this.sched, lock, 0, L.OWNER_CONTROL) !== 0) {
      /* a worker is scheduling: microseconds */
    }
    try {
      fn();
    } finally {
      Atomics.store(this.sched, lock, 0);
    }
  }

  private static flagBits(s: ServiceConfig): number {
    return schedFlagBits(s.schedFlags);
  }

  /** Time base of scheduler ticks (table-relative ms, as SchedInput.now); set by the owner. */
  now: () => number = () => 0;

  /** ip_vs_bind_scheduler: fresh state words, init_service on the current list. */
  private bindScheduler(live: LiveService): void {
    this.dirty.add(live.slot);
    const sched = getScheduler(live.cfg.scheduler)!;
    live.nextTick = sched.tick && sched.tickInterval ? (this.now() + sched.tickInterval) | 0 : null;
    live.compiled.scheduler = live.cfg.scheduler;
    live.compiled.data = null;
    live.compiled.data = sched.prepare?.(live.compiled) ?? null;
    this.withSchedLock(live.slot, () => {
      const base = this.schedBase(live.slot);
      for (let i = 0; i < L.SCHED_WORDS - 1; i++) this.sched[base + i] = 0;
      sched.init?.(live.compiled, this.sched, base);
    });
  }

  private *addService(s: ServiceConfig): Generator<void> {
    const key = serviceKey(s);
    const slot = this.freeSvc.pop()!;
    this.onFreshServiceSlot?.(slot);
    const v6 = parseIPv6(s.address);
    const compiled: CompiledService = {
      slot,
      proto: PROTO_NUMBER[s.protocol] | (v6 ? L.PROTO_V6 : 0),
      vaddr: v6 ? v6[3]! : parseIPv4(s.address)!,
      addr6: v6,
      vport: s.port,
      scheduler: s.scheduler,
      schedFlags: ServiceModel.flagBits(s),
      dests: [],
      data: null,
      persistMs: (s.persistence ?? 0) * 1000,
      sloppy: false, // snapshot() decides: it depends on the servers too
      ...ServiceModel.netmasks(s),
      ...(s.mhTableSize !== undefined ? { mhTableSize: s.mhTableSize } : {}),
    };
    const live: LiveService = { key, slot, cfg: s, compiled, rsCfg: new Map(), removing: false, nextTick: null, lastRampStep: 0 };
    this.services.set(key, live);
    this.bySlot.set(slot, live);
    this.lastIndex = null;
    this.liveOf.set(s, live);
    this.dirty.add(slot);
    this.bindScheduler(live);
    for (const r of s.realServers) {
      this.addDest(live, r);
      yield;
    }
  }

  private *editService(live: LiveService, s: ServiceConfig): Generator<void> {
    const schedChanged = s.scheduler !== live.cfg.scheduler || s.mhTableSize !== live.cfg.mhTableSize;
    live.removing = false;
    live.cfg = s;
    this.liveOf.set(s, live);
    this.dirty.add(live.slot);
    live.compiled.schedFlags = ServiceModel.flagBits(s);
    live.compiled.persistMs = (s.persistence ?? 0) * 1000;
    Object.assign(live.compiled, ServiceModel.netmasks(s));
    if (s.mhTableSize !== undefined) live.compiled.mhTableSize = s.mhTableSize;
    else delete live.compiled.mhTableSize;
    if (schedChanged) this.bindScheduler(live);
    const want = new Map(s.realServers.map((r) => [`${r.address}:${r.port}`, r]));
    // -d (or drain) in list order
    for (const d of [...live.compiled.dests]) {
      const k = this.rsBySlot.get(d.rs)!.rsKey;
      if (!want.has(k)) this.removeDest(live, k);
      yield;
    }
    for (const [k, r] of want) {
      const slotKey = this.draining.size > 0 ? `${live.key}|${k}` : '';
      if (this.draining.size > 0 && this.draining.has(slotKey)) {
        // Re-added while draining: off the list, deleted and added back cleanly (kube-proxy's
        // MoveRSOutofGracefulDeleteList); the kernel revives the same server from the trash.
        const o = this.rsSlots.get(slotKey)!.slot * L.RS_WORDS;
        this.onDrainEvent?.({
          service: live.key,
          realServer: k,
          action: 'resurrected',
          activeConns: Atomics.load(this.rs, o + L.RS_ACTIVE),
          inactConns: Atomics.load(this.rs, o + L.RS_INACTIVE),
        });
        this.draining.delete(slotKey);
        this.drainConfigs.delete(slotKey);
        this.delDest(live, k);
        this.startRamp(live, k, r);
        this.addDest(live, r);
        yield;
        continue;
      }
      const old = live.rsCfg.get(k);
      if (!old) continue;
      if (old.weight === 0 && r.weight > 0) this.startRamp(live, k, r);
      if (
        old.weight !== r.weight ||
        old.upperThreshold !== r.upperThreshold ||
        old.lowerThreshold !== r.lowerThreshold ||
        old.forwarding !== r.forwarding ||
        old.proxyProtocol !== r.proxyProtocol
      ) {
        this.editDest(live, k, r);
      }
      yield;
    }
    // -a for new ones, in configuration order
    for (const [k, r] of want) {
      if (live.rsCfg.has(k)) continue;
      this.startRamp(live, k, r);
      this.addDest(live, r);
      yield;
    }
  }

  /** The service is no longer configured: delete it, or keep it while its TCP servers drain. */
  private *removeService(live: LiveService): Generator<void> {
    live.removing = true;
    for (const d of [...live.compiled.dests]) {
      this.removeDest(live, this.rsBySlot.get(d.rs)!.rsKey);
      yield;
    }
    if (live.compiled.dests.length === 0) this.deleteService(live);
  }

  private deleteService(live: LiveService): void {
    for (const d of [...live.compiled.dests]) this.delDest(live, this.rsBySlot.get(d.rs)!.rsKey);
    this.services.delete(live.key);
    this.bySlot.delete(live.slot);
    this.lastIndex = null;
    this.dirty.add(live.slot);
    if (this.svcSlotRefs[live.slot] === 0) this.freeSvc.push(live.slot);
    else this.orphanSvcSlots.add(live.slot);
  }

  /** This node's connection counts of a real-server slot plus, with Redis, the other nodes'. */
  private conns(slot: number): { active: number; inactive: number } {
    const o = slot * L.RS_WORDS;
    let active = Atomics.load(this.rs, o + L.RS_ACTIVE);
    let inactive = Atomics.load(this.rs, o + L.RS_INACTIVE);
    const i = this.rsBySlot.get(slot);
    if (this.remoteConns && i) {
      const [ra, ri] = this.remoteConns(i.svcKey, `${i.addr}:${i.port}`);
      active += ra;
      inactive += ri;
    }
    return { active, inactive };
  }

  /** GracefulDeleteRS: delete now if nothing uses the server, else weight 0 and drain. */
  private removeDest(live: LiveService, k: string): void {
    const slotKey = `${live.key}|${k}`;
    if (this.draining.has(slotKey)) return; // never drained twice
    const info = this.rsSlots.get(slotKey)!;
    const c = this.conns(info.slot);
    if (drainsOnRemoval(live.cfg.protocol) && c.active + c.inactive > 0) {
      const now = this.clock();
      const max = live.cfg.maxDrainTime !== undefined ? live.cfg.maxDrainTime * 1000 : this.policy.maxDrainTime;
      this.draining.set(slotKey, {
        service: live.key,
        realServer: k,
        protocol: live.cfg.protocol,
        since: now,
        deadline: max > 0 ? now + max : null,
      });
      this.drainConfigs.set(slotKey, { svc: live.cfg, rs: live.rsCfg.get(k)! });
      this.refreshWeight(live, k);
      this.onDrainEvent?.({ service: live.key, realServer: k, action: 'draining', activeConns: c.active, inactConns: c.inactive });
      return;
    }
    if (drainsOnRemoval(live.cfg.protocol)) this.delDrained(live, k);
    else this.delDest(live, k);
  }

  /**
   * Deletes a TCP server whose drain found no connection in the cluster; with Redis it goes to
   * the drained trash, its records served until recordHold() has passed (drainedTrash).
   */
  private delDrained(live: LiveService, k: string): void {
    const target = this.recordHold ? this.flowTarget(live.key, k) : null;
    const slot = this.rsSlots.get(`${live.key}|${k}`)!.slot;
    this.delDest(live, k);
    if (!target) return;
    this.drainedTrash.set(`${live.key}|${k}`, { until: this.clock() + this.recordHold!(), target });
    Atomics.or(this.rs, slot * L.RS_WORDS + L.RS_FLAGS, L.RSF_DRAINED);
  }

  /**
   * The periodic check (kube-proxy's tryDeleteRs, every checkInterval): deletes drained servers
   * and those past their deadline. Returns true when the list changed (publish a new snapshot).
   */
  checkDrains(): boolean {
    const now = this.clock();
    let changed = false;
    for (const [slotKey, d] of [...this.draining]) {
      const live = this.services.get(d.service);
      const info = this.rsSlots.get(slotKey);
      if (!live || !info) {
        this.draining.delete(slotKey);
        this.drainConfigs.delete(slotKey);
        continue;
      }
      const c = this.conns(info.slot);
      const expired = d.deadline !== null && now >= d.deadline;
      if (c.active + c.inactive === 0 || expired) {
        this.draining.delete(slotKey);
        this.drainConfigs.delete(slotKey);
        if (c.active + c.inactive === 0) this.delDrained(live, d.realServer);
        else this.delDest(live, d.realServer);
        this.onDrainEvent?.({
          service: d.service,
          realServer: d.realServer,
          action: expired && c.active + c.inactive > 0 ? 'deadline' : 'deleted',
          activeConns: c.active,
          inactConns: c.inactive,
        });
        changed = true;
      }
    }
    for (const live of [...this.services.values()]) {
      if (live.removing && live.compiled.dests.length === 0) {
        this.deleteService(live);
        changed = true;
      }
    }
    return changed;
  }

  drains(): (DrainEntry & { activeConns: number; inactConns: number })[] {
    return [...this.draining.entries()].map(([slotKey, d]) => {
      const c = this.conns(this.rsSlots.get(slotKey)!.slot);
      return { ...d, activeConns: c.active, inactConns: c.inactive };
    });
  }

  /** The drain list as it must survive a restart. */
  persistedDrains(): PersistedDrain[] {
    return [...this.draining.entries()].map(([k, d]) => ({
      ...d,
      serviceConfig: this.drainConfigs.get(k)!.svc,
      realServerConfig: this.drainConfigs.get(k)!.rs,
    }));
  }

  /**
   * After a restart: servers that were draining and are not configured any more are put back at
   * weight 0 on the drain list with their original start and deadline, so the drain resumes
   * instead of the server vanishing (or staying at weight 0 for ever). Configured servers get
   * their configured weight: the configuration wins, as kube-proxy's initial sync does.
   */
  restoreDrains(entries: PersistedDrain[], skip: (d: PersistedDrain, reason: string) => void = () => {}): Snapshot {
    for (const d of entries) {
      const slotKey = `${d.service}|${d.realServer}`;
      let live = this.services.get(d.service);
      if (live?.rsCfg.has(d.realServer) && !this.draining.has(slotKey)) continue; // configured again: not draining
      // Slots first: the configuration has taken its own, and a state file may list any number.
      if ((!live && this.freeSvc.length === 0) || (!this.rsSlots.has(slotKey) && this.freeRs.length === 0)) {
        skip(d, 'no free service or real-server slot (dataplane.maxServices, maxRealServers)');
        continue;
      }
      if (!live) {
        runAll(this.addService({ ...d.serviceConfig, realServers: [] }));
        live = this.services.get(d.service)!;
        live.removing = true;
      }
      if (!live.rsCfg.has(d.realServer)) this.addDest(live, d.realServerConfig);
      this.draining.set(slotKey, {
        service: d.service,
        realServer: d.realServer,
        protocol: d.protocol,
        since: d.since,
        deadline: d.deadline,
      });
      this.drainConfigs.set(slotKey, { svc: d.serviceConfig, rs: d.realServerConfig });
      this.refreshWeight(live, d.realServer);
    }
    return this.snapshot();
  }

  /** Health-check verdict: a failing server is quiesced (weight 0, flows kept), a healthy one restored. */
  setHealthy(service: string, realServer: string, healthy: boolean): boolean {
    const slotKey = `${service}|${realServer}`;
    const live = this.services.get(service);
    if (!live?.rsCfg.has(realServer)) return false;
    if (healthy === !this.unhealthy.has(slotKey)) return false;
    if (healthy) {
      this.unhealthy.delete(slotKey);
      this.startRamp(live, realServer, live.rsCfg.get(realServer)!);
    } else {
      this.unhealthy.add(slotKey);
      this.ramps.delete(slotKey);
    }
    this.refreshWeight(live, realServer);
    return true;
  }

  /** Puts a returning server in slow start if its service or itself asks for one. */
  private startRamp(live: LiveService, k: string, r: RealServerConfig): void {
    const ms = Math.round((r.slowStart ?? live.cfg.slowStart ?? 0) * 1000);
    const slotKey = `${live.key}|${k}`;
    if (ms <= 0 || r.weight <= 1) {
      this.ramps.delete(slotKey);
      return;
    }
    const now = this.clock();
    this.ramps.set(slotKey, { start: now, ms });
    live.lastRampStep = now;
  }

  private effectiveWeight(live: LiveService, k: string, r: RealServerConfig): number {
    const slotKey = `${live.key}|${k}`;
    if (this.draining.has(slotKey) || this.unhealthy.has(slotKey)) return 0;
    const ramp = this.ramps.get(slotKey);
    return ramp ? slowStartWeight(r.weight, this.clock() - ramp.start, ramp.ms) : r.weight;
  }

  /**
   * One slow-start step for every service whose ramp period has passed: the ramping servers get
   * their current ramp weight (finished ramps their whole weight) as one batch of -e edits.
   * Called a few times a second; returns true when a weight changed (publish a new snapshot).
   */
  rampTick(): boolean {
    if (this.ramps.size === 0) return false;
    const now = this.clock();
    const due = new Map<LiveService, { ks: string[]; period: number; finished: boolean }>();
    for (const [slotKey, ramp] of [...this.ramps]) {
      const info = this.rsSlots.get(slotKey);
      const live = info?.listed ? this.services.get(info.svcKey) : undefined;
      if (!info || !live) {
        this.ramps.delete(slotKey);
        continue;
      }
      const e = due.get(live) ?? { ks: [], period: Infinity, finished: false };
      e.ks.push(`${info.addr}:${info.port}`);
      // HAProxy's server_warmup re-runs every MAX(1000 ms, slowstart / 20).
      e.period = Math.min(e.period, Math.max(SLOW_START_MIN_STEP_MS, ramp.ms / 20));
      if (now - ramp.start >= ramp.ms) e.finished = true;
      due.set(live, e);
    }
    let changed = false;
    for (const [live, e] of due) {
      const since = now - live.lastRampStep;
      // A finished ramp is not held for the period, but never two rebuilds within a second.
      if (since < SLOW_START_MIN_STEP_MS || (since < e.period && !e.finished)) continue;
      const ks = e.ks.filter((k) => {
        const info = this.rsSlots.get(`${live.key}|${k}`)!;
        return live.compiled.dests.find((d) => d.rs === info.slot)!.weight !== this.effectiveWeight(live, k, live.rsCfg.get(k)!);
      });
      for (const k of e.ks) {
        const ramp = this.ramps.get(`${live.key}|${k}`)!;
        if (now - ramp.start >= ramp.ms) this.ramps.delete(`${live.key}|${k}`);
      }
      if (ks.length === 0) continue;
      this.editDests(live, ks);
      live.lastRampStep = now;
      changed = true;
    }
    return changed;
  }

  private refreshWeight(live: LiveService, k: string): void {
    const r = live.rsCfg.get(k)!;
    const info = this.rsSlots.get(`${live.key}|${k}`)!;
    const w = this.effectiveWeight(live, k, r);
    const d = live.compiled.dests.find((x) => x.rs === info.slot)!;
    if (d.weight !== w) this.editDest(live, k, r);
  }

  private change(live: LiveService, kind: DestListChange['kind'], rs: number, position: number, before: SchedDest[]): void {
    this.dirty.add(live.slot);
    const sched = getScheduler(live.cfg.scheduler)!;
    live.compiled.data = sched.prepare?.(live.compiled) ?? null;
    if (sched.update) {
      this.withSchedLock(live.slot, () =>
        sched.update!(live.compiled, this.sched, this.schedBase(live.slot), { kind, rs, position, before }),
      );
    }
  }

  private addDest(live: LiveService, r: RealServerConfig): void {
    const k = `${r.address}:${r.port}`;
    const slotKey = `${live.key}|${k}`;
    let info = this.rsSlots.get(slotKey);
    if (!info) {
      const slot = this.freeRs.pop()!;
      info = { slot, svcKey: live.key, svcSlot: live.slot, addr: r.address, port: r.port, rsKey: k, listed: false, masq: false };
      this.rsSlots.set(slotKey, info);
      this.rsBySlot.set(slot, info);
      this.svcSlotRefs[live.slot]!++;
      const o = slot * L.RS_WORDS;
      for (let i = 0; i < L.RS_WORDS; i++) Atomics.store(this.rs, o + i, 0);
      this.onFreshRealServerSlot?.(slot);
      this.fresh.push(slot);
    }
    info.listed = true;
    this.trashed.delete(info);
    this.setMasq(info, r.forwarding === 'masq');
    if (this.drainedTrash.delete(slotKey)) Atomics.and(this.rs, info.slot * L.RS_WORDS + L.RS_FLAGS, ~L.RSF_DRAINED);
    live.rsCfg.set(k, r);
    const weight = this.effectiveWeight(live, k, r);
    const o = info.slot * L.RS_WORDS;
    this.setThresholds(o, r);
    Atomics.store(this.rs, o + L.RS_WEIGHT, weight);
    Atomics.or(this.rs, o + L.RS_FLAGS, L.RSF_AVAILABLE);
    // The list is never changed in place (each change makes a new array), so the current one is
    // the schedulers' `before` as it is: no copy, which made adding n servers cost n² copies.
    const before = live.compiled.dests;
    // __ip_vs_update_dest: last_weight = weight on add.
    const a6 = r.address.includes(':') ? parseIPv6(r.address) : null;
    const addr = a6 ? a6[0]! ^ a6[1]! ^ a6[2]! ^ a6[3]! : parseIPv4(r.address)!;
    const d: CompiledDest = {
      rs: info.slot,
      addr,
      addr6: a6,
      port: r.port,
      weight,
      lastWeight: weight,
      fwd: FWD[r.forwarding]!,
      pp: PP[r.proxyProtocol ?? ''] ?? 0,
    };
    this.setPp(info.slot, d.pp);
    live.compiled.dests = [d, ...before]; // list_add_rcu: at the head
    this.change(live, 'add', info.slot, -1, before);
  }

  private editDest(live: LiveService, k: string, r: RealServerConfig): void {
    const info = this.rsSlots.get(`${live.key}|${k}`)!;
    live.rsCfg.set(k, r);
    this.setMasq(info, r.forwarding === 'masq');
    const weight = this.effectiveWeight(live, k, r);
    const o = info.slot * L.RS_WORDS;
    this.setThresholds(o, r);
    Atomics.store(this.rs, o + L.RS_WEIGHT, weight);
    const before = live.compiled.dests.slice();
    const position = before.findIndex((d) => d.rs === info.slot);
    this.setPp(info.slot, PP[r.proxyProtocol ?? ''] ?? 0);
    live.compiled.dests = before.map((d, i) =>
      // last_weight follows the weight unless the new weight is 0 (mh keeps its table on quiesce).
      i === position
        ? {
            ...d,
            weight,
            lastWeight: weight !== 0 ? weight : (d.lastWeight ?? d.weight),
            fwd: FWD[r.forwarding]!,
            pp: PP[r.proxyProtocol ?? ''] ?? 0,
          }
        : d,
    );
    this.change(live, 'upd', info.slot, position, before);
  }

  /**
   * Slow-start steps of several servers of one service: -e edits of their weights (no other
   * field changes) with one prepare() — one mh/sh table rebuild for the batch — then each
   * change's update hook, as the kernel's upd_dest would run after each.
   */
  private editDests(live: LiveService, ks: string[]): void {
    const changes: { rs: number; position: number; before: SchedDest[] }[] = [];
    for (const k of ks) {
      const info = this.rsSlots.get(`${live.key}|${k}`)!;
      const weight = this.effectiveWeight(live, k, live.rsCfg.get(k)!);
      Atomics.store(this.rs, info.slot * L.RS_WORDS + L.RS_WEIGHT, weight);
      const before = live.compiled.dests.slice();
      const position = before.findIndex((d) => d.rs === info.slot);
      live.compiled.dests = before.map((d, i) =>
        i === position ? { ...d, weight, lastWeight: weight !== 0 ? weight : (d.lastWeight ?? d.weight) } : d,
      );
      changes.push({ rs: info.slot, position, before });
    }
    this.dirty.add(live.slot);
    const sched = getScheduler(live.cfg.scheduler)!;
    live.compiled.data = sched.prepare?.(live.compiled) ?? null;
    if (sched.update) {
      for (const c of changes)
        this.withSchedLock(live.slot, () => sched.update!(live.compiled, this.sched, this.schedBase(live.slot), { kind: 'upd', ...c }));
    }
  }

  private delDest(live: LiveService, k: string): void {
    const info = this.rsSlots.get(`${live.key}|${k}`)!;
    const before = live.compiled.dests.slice();
    const position = before.findIndex((d) => d.rs === info.slot);
    live.compiled.dests = before.filter((_, i) => i !== position);
    live.rsCfg.delete(k);
    this.unhealthy.delete(`${live.key}|${k}`);
    this.ramps.delete(`${live.key}|${k}`);
    info.listed = false;
    this.trashed.add(info);
    this.setPp(info.slot, 0);
    Atomics.and(this.rs, info.slot * L.RS_WORDS + L.RS_FLAGS, ~L.RSF_AVAILABLE);
    this.change(live, 'del', info.slot, position, before);
  }

  private setPp(slot: number, v: number): void {
    if (this.pp[slot] === v) return;
    this.pp[slot] = v;
    this.lastPp = null;
  }

  /**
   * __ip_vs_update_dest (add and edit alike): store thresholds; clear OVERLOAD if the new upper is 0
   * or raised — so a server revived from the trash keeps its OVERLOAD otherwise.
   */
  private setThresholds(o: number, r: RealServerConfig): void {
    const oldUpper = this.rs[o + L.RS_UTHRESH]!;
    if (r.upperThreshold === 0 || r.upperThreshold > oldUpper) Atomics.and(this.rs, o + L.RS_FLAGS, ~L.RSF_OVERLOAD);
    Atomics.store(this.rs, o + L.RS_UTHRESH, r.upperThreshold);
    Atomics.store(this.rs, o + L.RS_LTHRESH, r.lowerThreshold);
  }

  /**
   * Runs the schedulers' timers (lblc/lblcr's 60 s collector) that are due at `now`
   * (table-relative ms), under each service's scheduler lock. Called about once a second.
   */
  tick(now: number): void {
    for (const live of this.services.values()) {
      if (live.nextTick === null) continue;
      const sched = getScheduler(live.cfg.scheduler)!;
      while (((now - live.nextTick) | 0) >= 0) {
        const at = live.nextTick;
        this.withSchedLock(live.slot, () => sched.tick!(live.compiled, this.sched, this.schedBase(live.slot), this.rs, at));
        live.nextTick = (live.nextTick + sched.tickInterval!) | 0;
      }
    }
  }

  /**
   * Frees trashed real-server slots nothing references any more (the kernel's dest trash GC,
   * ip_vs_dest_trash_expire: refcnt down to the trash's own): no connections or templates left,
   * and not held by the scheduler state of its service (lblc's cache entry, lblcr's set). At most
   * `limit` slots a call: the periodic sweep frees a churn's thousands of slots over several turns.
   */
  collectTrash(need = 0, limit = Number.POSITIVE_INFINITY): number {
    let freed = 0;
    const now = this.clock();
    for (const info of [...this.trashed]) {
      if (freed >= limit) break;
      const k = `${info.svcKey}|${info.addr}:${info.port}`;
      // A drained server's records are served until `until`; flows adopted meanwhile keep the slot
      // (and RSF_DRAINED) as long as they live, as a kernel dest stays in the trash while referenced.
      const drained = this.drainedTrash.get(k);
      if (drained) {
        if (now < drained.until) continue;
        this.drainedTrash.delete(k);
      }
      if (this.freeSlot(k, info)) freed++;
    }
    // Slots a configuration needs (checkCapacity): drained servers give theirs up before their
    // hold ends, the soonest-ending first — late records for them are then refused (unknown_server),
    // which is what a server deleted without the drained trash gets.
    if (freed < need) {
      const held = [...this.drainedTrash].sort((x, y) => x[1].until - y[1].until);
      for (const [k] of held) {
        const info = this.rsSlots.get(k);
        if (info && !info.listed && this.freeSlot(k, info)) {
          this.drainedTrash.delete(k);
          if (++freed >= need) break;
        }
      }
    }
    return freed;
  }

  /** Frees a trashed slot nothing references (connections, templates, scheduler state); whether it did. */
  private freeSlot(k: string, info: RsSlotInfo): boolean {
    const o = info.slot * L.RS_WORDS;
    if (Atomics.load(this.rs, o + L.RS_ACTIVE) + Atomics.load(this.rs, o + L.RS_INACTIVE) + Atomics.load(this.rs, o + L.RS_PERSIST) !== 0)
      return false;
    if (this.heldByScheduler(info)) return false;
    this.setMasq(info, false);
    this.rsSlots.delete(k);
    this.rsBySlot.delete(info.slot);
    this.trashed.delete(info);
    this.freeRs.push(info.slot);
    if (--this.svcSlotRefs[info.svcSlot]! === 0 && this.orphanSvcSlots.delete(info.svcSlot)) this.freeSvc.push(info.svcSlot);
    return true;
  }

  /**
   * Whether the scheduler state of the server's service still references its slot
   * (Scheduler.holds). A deleted service's state references nothing: the kernel's done_service
   * flushed it, as bindScheduler's fresh state words do on a scheduler change.
   */
  private heldByScheduler(info: RsSlotInfo): boolean {
    const live = this.services.get(info.svcKey);
    if (!live || live.slot !== info.svcSlot) return false;
    const sched = getScheduler(live.cfg.scheduler)!;
    if (!sched.holds) return false;
    let held = false;
    this.withSchedLock(live.slot, () => {
      held = sched.holds!(this.sched, this.schedBase(live.slot), info.slot);
    });
    return held;
  }

  snapshot(): Snapshot {
    // Copies: the daemon sends a snapshot to one worker per slice, and a change applied meanwhile
    // sets fields of the live objects (flags, netmasks, data) — a later worker must not get those
    // under this version. A service's dest list and its entries are never changed in place.
    // Each at its slot (lb/snapshot.ts SnapshotDelta: an unchanged service keeps its place), and
    // only the changed ones copied: the others are the last snapshot's (never changed either).
    const services = this.published.slice();
    for (const slot of this.dirty) {
      const l = this.bySlot.get(slot);
      if (l) {
        l.compiled.sloppy = this.sloppyOf(l);
        services[slot] = { ...l.compiled };
      } else delete services[slot];
    }
    this.dirty.clear();
    let len = services.length;
    while (len > 0 && services[len - 1] === undefined) len--;
    services.length = len;
    this.published = services;
    this.lastIndex ??= buildLookup(services);
    const { lookup, lookupMask } = this.lastIndex;
    const v4 = this.vipCidrs.map((c) => parseCidr(c)).filter((c) => c !== null);
    const vips = new Int32Array(v4.length * 2);
    v4.forEach((p, i) => {
      vips[i * 2] = p.net;
      vips[i * 2 + 1] = p.mask;
    });
    const v6 = this.vipCidrs.map((c) => parseCidr6(c)).filter((c) => c !== null);
    const vips6 = new Int32Array(v6.length * 8);
    v6.forEach((p, i) => {
      vips6.set(p.net, i * 8);
      vips6.set(p.mask, i * 8 + 4);
    });
    const pool6 = this.fullnat.addresses.map((a) => parseIPv6(a)).filter((a) => a !== null);
    const fullnatAddrs6 = new Int32Array(pool6.length * 4);
    pool6.forEach((a, i) => fullnatAddrs6.set(a, i * 4));
    this.lastPp ??= this.pp.slice();
    const proxyProtocol = this.lastPp;
    return {
      version: ++this.version,
      services,
      lookup,
      lookupMask,
      vips,
      answerPing: this.answerPing,
      expireNodestConn: this.expireNodestConn,
      expireQuiescentTemplate: this.expireQuiescentTemplate,
      adopt: this.adopt,
      vips6,
      tunnelSrc: this.tunnelSrc,
      tunnelSrc6: this.tunnelSrc6,
      fullnatAddrs: Int32Array.from(this.fullnat.addresses.map((a) => parseIPv4(a)).filter((a) => a !== null)),
      fullnatAddrs6,
      fullnatPortMin: this.fullnat.portMin,
      fullnatPortMax: this.fullnat.portMax,
      proxyProtocol,
      ...this.genLimit,
    };
  }

  /** Services with their real servers in kernel list order, for the API. */
  list(): ListedService[] {
    return [...this.eachService()];
  }

  /**
   * list() one service at a time, for readers that let the event loop turn between services
   * (GET /v1/services, the metrics: control/slices.ts). The services are those of the moment it
   * starts; a service removed meanwhile still comes, as it was.
   */
  *eachService(): Generator<ListedService> {
    yield* this.views([...this.services.values()]);
  }

  private *views(services: LiveService[]): Generator<ListedService> {
    for (const l of services) {
      yield {
        key: l.key,
        cfg: l.cfg,
        slot: l.slot,
        removing: l.removing,
        realServers: l.compiled.dests.map((d) => {
          const k = this.rsBySlot.get(d.rs)!.rsKey;
          return { ...this.rsView(l, k, d.rs, l.rsCfg.get(k)!), lastWeight: d.lastWeight ?? d.weight };
        }),
      };
    }
  }

  /** One service as list() shows it, or null (without building the others' views). */
  listed(key: string): ListedService | null {
    const l = this.services.get(key);
    if (!l) return null;
    for (const v of this.views([l])) return v;
    return null;
  }

  /**
   * The counter slots of every service (or of the one with `key`) and of its listed real servers,
   * without building views: the rate estimator every 2 s, the node totals, ipvsadm -Z.
   */
  counterSlots(key?: string): { key: string; slot: number; realServers: number[] }[] {
    const out: { key: string; slot: number; realServers: number[] }[] = [];
    for (const l of this.services.values()) {
      if (key !== undefined && l.key !== key) continue;
      out.push({ key: l.key, slot: l.slot, realServers: l.compiled.dests.map((d) => d.rs) });
    }
    return out;
  }

  /** counterSlots() one service at a time, without arrays: its slot and its listed servers' (the rate estimator). */
  *eachCounterSlots(): Generator<{ slot: number; dests: readonly { readonly rs: number }[] }> {
    for (const l of this.services.values()) yield l.compiled;
  }

  /**
   * Every listed real server with its service and connection counts, without building views: for
   * readers that run every second (the Redis count exchange, full-NAT pool use), which list() made
   * cost tens of ms at 4096 real servers.
   */
  *eachRealServer(): Generator<{
    service: string;
    protocol: Protocol;
    address: string;
    port: number;
    forwarding: string;
    activeConns: number;
    inactConns: number;
  }> {
    for (const i of this.rsSlots.values()) {
      if (!i.listed) continue;
      const live = this.services.get(i.svcKey);
      const r = live?.rsCfg.get(`${i.addr}:${i.port}`);
      if (!live || !r) continue;
      const o = i.slot * L.RS_WORDS;
      yield {
        service: i.svcKey,
        protocol: live.cfg.protocol,
        address: i.addr,
        port: i.port,
        forwarding: r.forwarding,
        activeConns: Atomics.load(this.rs, o + L.RS_ACTIVE),
        inactConns: Atomics.load(this.rs, o + L.RS_INACTIVE),
      };
    }
  }

  private rsView(live: LiveService, k: string, slot: number, r: RealServerConfig): RealServerView {
    const o = slot * L.RS_WORDS;
    const slotKey = `${live.key}|${k}`;
    return {
      address: r.address,
      port: r.port,
      weight: Atomics.load(this.rs, o + L.RS_WEIGHT),
      configuredWeight: r.weight,
      forwarding: r.forwarding,
      slot,
      activeConns: Atomics.load(this.rs, o + L.RS_ACTIVE),
      inactConns: Atomics.load(this.rs, o + L.RS_INACTIVE),
      persistConns: Atomics.load(this.rs, o + L.RS_PERSIST),
      overloaded: (Atomics.load(this.rs, o + L.RS_FLAGS) & L.RSF_OVERLOAD) !== 0,
      draining: this.draining.has(slotKey),
      healthy: !this.unhealthy.has(slotKey),
      slowStartUntil: this.ramps.has(slotKey) ? this.ramps.get(slotKey)!.start + this.ramps.get(slotKey)!.ms : null,
      upperThreshold: r.upperThreshold,
      lowerThreshold: r.lowerThreshold,
      proxyProtocol: r.proxyProtocol ?? 'none',
    };
  }

  /** Slot of a real server of a service, listed or in the trash, or -1. */
  realServerSlot(service: string, realServer: string): { slot: number; svcSlot: number; listed: boolean } | null {
    const i = this.rsSlots.get(`${service}|${realServer}`);
    return i ? { slot: i.slot, svcSlot: i.svcSlot, listed: i.listed } : null;
  }

  /**
   * What a flow of a listed real server looks like here (redis-record.ts checks other nodes'
   * records against it), or null. O(real servers of the service): control thread, per record.
   */
  flowTarget(service: string, realServer: string): FlowTarget | null {
    const i = this.rsSlots.get(`${service}|${realServer}`);
    if (i && !i.listed) {
      const t = this.drainedTrash.get(`${service}|${realServer}`);
      return t && this.clock() < t.until ? t.target : null;
    }
    const live = i?.listed ? this.services.get(i.svcKey) : undefined;
    const d = live?.compiled.dests.find((x) => x.rs === i!.slot);
    if (!live || !d) return null;
    const s = live.compiled;
    const v6 = s.addr6 !== null;
    const pool: number[] = [];
    for (const a of this.fullnat.addresses) {
      const w = v6 ? (a.includes(':') ? parseIPv6(a) : null) : parseIPv4(a);
      if (w === null) continue;
      if (typeof w === 'number') pool.push(w);
      else pool.push(...w);
    }
    return {
      slot: i!.slot,
      svcSlot: i!.svcSlot,
      proto: s.proto,
      vaddr: s.vaddr,
      vaddr6: s.addr6,
      vport: s.vport,
      daddr: d.addr6 ? d.addr6[3]! : d.addr,
      daddr6: d.addr6,
      dport: d.port,
      fwd: d.fwd,
      pp: d.pp,
      pool,
      portMin: this.fullnat.portMin,
      portMax: this.fullnat.portMax,
    };
  }

  /** Service key and "addr:port" of a real-server slot (listed or trashed), or null. */
  namesOfSlot(rsSlot: number): { service: string; realServer: string } | null {
    const i = this.rsBySlot.get(rsSlot);
    return i ? { service: i.svcKey, realServer: `${i.addr}:${i.port}` } : null;
  }

  /** Connections other nodes carry, per real server (set when Redis is configured). */
  remoteConns: ((service: string, realServer: string) => [number, number]) | null = null;

  /** Service key of a service slot (live services only). */
  serviceOfSlot(svcSlot: number): string | null {
    return this.bySlot.get(svcSlot)?.key ?? null;
  }

  /** Slots of trashed real servers (deleted; connections remaining, or held by the scheduler). */
  trash(): RsSlotInfo[] {
    return [...this.trashed];
  }

  /** Every real-server slot in use (listed or trashed) with its address, one at a time (a reader in slices). */
  *eachRsSlotAddr(): Generator<{ slot: number; addr: string }> {
    for (const i of this.rsSlots.values()) yield i;
  }

  /** The address of an allocated real-server slot, or null. */
  slotAddr(slot: number): string | null {
    return this.rsBySlot.get(slot)?.addr ?? null;
  }

  /** Real-server slots allocated (listed or in the trash). */
  rsSlotCount(): number {
    return this.rsBySlot.size;
  }

  /** Real-server slots allocated since the last call, still allocated, with their addresses. */
  takeFreshSlots(): { slot: number; addr: string }[] {
    const out: { slot: number; addr: string }[] = [];
    for (const slot of this.fresh) {
      const i = this.rsBySlot.get(slot);
      if (i) out.push({ slot, addr: i.addr });
    }
    this.fresh = [];
    return out;
  }

  /**
   * The services' compiled forms built whole, as snapshot() built them before it copied only
   * what changed: tests check the incremental snapshot against it.
   */
  compiledWhole(): CompiledService[] {
    const out: CompiledService[] = [];
    for (const l of this.services.values()) out[l.slot] = { ...l.compiled, sloppy: this.sloppyOf(l) };
    return out;
  }

  /**
   * Whether a service's mid-flow packets may start a connection (docs/sloppy.md): its own
   * `sloppy`, else dataplane.sloppyTcp / sloppySctp; `auto` is on where every node picks the same
   * server for the packet — a consistent scheduler (mh, sh, dh: a hash of the packet over a table
   * all nodes build alike from the same configuration), no persistence (a template is one node's
   * state), no full-NAT server (its pool port is).
   */
  private sloppyOf(l: LiveService): boolean {
    const p = l.cfg.protocol;
    if (p !== 'tcp' && p !== 'sctp') return false;
    const want = l.cfg.sloppy ?? (p === 'tcp' ? this.sloppy.tcp : this.sloppy.sctp);
    if (want !== 'auto') return want;
    return (
      CONSISTENT_SCHEDULERS.has(l.cfg.scheduler) && (l.cfg.persistence ?? 0) === 0 && !l.compiled.dests.some((d) => d.fwd === L.FWD_FULLNAT)
    );
  }

  /** A service's persistence masks: dotted for IPv4, a prefix length for IPv6 (as ipvsadm -M). */
  private static netmasks(s: ServiceConfig): { netmask: number; netmask6: Int32Array | null } {
    if (s.address.includes(':')) return { netmask: -1, netmask6: prefixMask6(Number(s.netmask)) };
    return { netmask: parseIPv4(s.netmask)!, netmask6: null };
  }

  /** Masq real servers whose replies must be routed into the device (trashed ones too: their flows still need replies). */
  /**
   * The masq reply elements (lb/nftables.ts) every allocated masq real-server slot needs — listed
   * or in the trash, whose flows still get replies: its (protocol, address, port), and its address
   * for ICMP errors. Kept as counts as slots come and go, so a change costs its own size.
   */
  private readonly replyNeed = new Map<string, { rule: ReplyRule; n: number }>();
  /** Keys whose count crossed zero since the last replyChanges(). */
  private readonly replyDirty = new Set<string>();
  /** What replyChanges() has handed out so far: the elements the dataplane holds. */
  private readonly replyHeld = new Map<string, ReplyRule>();

  private setMasq(info: RsSlotInfo, masq: boolean): void {
    if (info.masq === masq) return;
    info.masq = masq;
    const proto = info.svcKey.slice(0, info.svcKey.indexOf(' ')) as Protocol;
    const d = masq ? 1 : -1;
    this.needReply({ addr: info.addr, port: info.port, proto }, d);
    this.needReply({ addr: info.addr, port: 0, proto: 'icmp' }, d);
  }

  private needReply(rule: ReplyRule, d: number): void {
    const k = ruleKey(rule);
    let e = this.replyNeed.get(k);
    if (!e) this.replyNeed.set(k, (e = { rule, n: 0 }));
    e.n += d;
    if (e.n <= 0) this.replyNeed.delete(k);
    this.replyDirty.add(k);
  }

  /** Every reply element needed now (a rebuild, tests). */
  replyRules(): ReplyRule[] {
    return [...this.replyNeed.values()].map((e) => e.rule);
  }

  /** The elements to add and to remove since the last call: Dataplane.changeReplyRules takes them. */
  replyChanges(): { added: ReplyRule[]; gone: ReplyRule[] } {
    const added: ReplyRule[] = [];
    const gone: ReplyRule[] = [];
    for (const k of this.replyDirty) {
      const need = this.replyNeed.get(k);
      const held = this.replyHeld.get(k);
      if (need && !held) {
        added.push(need.rule);
        this.replyHeld.set(k, need.rule);
      } else if (!need && held) {
        gone.push(held);
        this.replyHeld.delete(k);
      }
    }
    this.replyDirty.clear();
    return { added, gone };
  }
}
