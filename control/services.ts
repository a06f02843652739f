/**
 * The virtual-service model on the control thread: turns configurations into the kernel's
 * sequence of operations and compiles the snapshot the workers use.
 *
 * A configuration change is applied as the ipvsadm commands that would make it, one at a time,
 * so every scheduler sees the kernel's hook sequence: services removed (-D), real servers deleted
 * (-d, in list order), edited (-e), then added (-a, in configuration order — each goes to the
 * head of the list, so the list is newest first), services added (-A then -a each).
 *
 * Real-server slots index the shared real-server region. A deleted server whose connections are
 * still in the table stays in the "trash" (slot kept, AVAILABLE cleared) until they are gone, and
 * re-adding it revives the same slot with its counters, as the kernel does.
 */
import * as L from '../conntrack/layout';
import { formatIPv4 as formatAddr, parseCidr, parseIPv4 } from '../lb/addr';
import { buildLookup, type CompiledDest, type CompiledService, type Snapshot } from '../lb/snapshot';
import { getScheduler } from '../schedulers/registry';
import type { DestListChange, SchedDest } from '../schedulers/types';
import type { RealServerConfig, ServiceConfig, UvsConfig } from './config';

const PROTO: Record<string, number> = { tcp: 6, udp: 17 };
const FWD: Record<string, number> = { masq: L.FWD_MASQ };
const SCHED_FLAG_BITS: Record<string, number> = {
  'flag-1': 1,
  'flag-2': 2,
  'flag-3': 4,
  'sh-fallback': 1,
  'sh-port': 2,
  'mh-fallback': 1,
  'mh-port': 2,
};

export function serviceKey(s: { protocol: string; address: string; port: number }): string {
  return `${s.protocol} ${s.address}:${s.port}`;
}

interface LiveService {
  key: string;
  slot: number;
  cfg: ServiceConfig;
  compiled: CompiledService;
  /** Real-server configs by "addr:port". */
  rsCfg: Map<string, RealServerConfig>;
}

interface RsSlotInfo {
  slot: number;
  svcKey: string;
  svcSlot: number;
  addr: string;
  port: number;
  /** In a service's list (false = trash). */
  listed: boolean;
}

export interface RealServerView {
  address: string;
  port: number;
  weight: number;
  forwarding: string;
  slot: number;
  activeConns: number;
  inactConns: number;
  persistConns: number;
  overloaded: boolean;
  upperThreshold: number;
  lowerThreshold: number;
}

export class ServiceModel {
  readonly rs: Int32Array;
  readonly sched: Int32Array;
  readonly maxRealServers: number;
  readonly maxServices: number;
  private services = new Map<string, LiveService>();
  private rsSlots = new Map<string, RsSlotInfo>(); // key: svcKey|addr:port
  private freeRs: number[] = [];
  private freeSvc: number[] = [];
  private svcSlotRefs: Int32Array;
  private version = 0;
  private vipCidrs: string[] = [];
  private answerPing = true;
  /** Called when a slot is (re)allocated, so its statistics start from zero. */
  onFreshRealServerSlot: ((slot: number) => void) | null = null;
  onFreshServiceSlot: ((slot: number) => void) | null = null;

  constructor(rs: SharedArrayBuffer, sched: SharedArrayBuffer, maxRealServers: number, maxServices: number) {
    this.rs = new Int32Array(rs);
    this.sched = new Int32Array(sched);
    this.maxRealServers = maxRealServers;
    this.maxServices = maxServices;
    for (let i = maxRealServers - 1; i >= 0; i--) this.freeRs.push(i);
    for (let i = maxServices - 1; i >= 0; i--) this.freeSvc.push(i);
    this.svcSlotRefs = new Int32Array(maxServices);
  }

  /** Applies a validated configuration; returns the new snapshot. Throws before changing anything if slots run out. */
  apply(cfg: UvsConfig): Snapshot {
    this.vipCidrs = cfg.dataplane.vipCidrs;
    this.answerPing = cfg.dataplane.answerPing;
    const wanted = new Map(cfg.services.map((s) => [serviceKey(s), s]));
    this.checkCapacity(wanted);
    for (const [key, live] of [...this.services]) {
      const next = wanted.get(key);
      if (!next || next.scheduler !== live.cfg.scheduler || next.forwarding !== live.cfg.forwarding) {
        // Removed, or the scheduler changed (the kernel rebinds it from scratch): delete and re-add.
        this.deleteService(live);
      }
    }
    for (const [key, s] of wanted) {
      const live = this.services.get(key);
      if (live) this.editService(live, s);
      else this.addService(s);
    }
    return this.snapshot();
  }

  private checkCapacity(wanted: Map<string, ServiceConfig>): void {
    let newSvcs = 0;
    let newRs = 0;
    for (const [key, s] of wanted) {
      if (!this.services.has(key)) newSvcs++;
      for (const r of s.realServers) if (!this.rsSlots.has(`${key}|${r.address}:${r.port}`)) newRs++;
    }
    if (newSvcs > this.freeSvc.length) throw new Error(`not enough service slots: ${newSvcs} needed, ${this.freeSvc.length} free (dataplane.maxServices)`);
    if (newRs > this.freeRs.length) throw new Error(`not enough real-server slots: ${newRs} needed, ${this.freeRs.length} free (dataplane.maxRealServers)`);
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

  private addService(s: ServiceConfig): void {
    const key = serviceKey(s);
    const slot = this.freeSvc.pop()!;
    this.onFreshServiceSlot?.(slot);
    const compiled: CompiledService = {
      slot,
      proto: PROTO[s.protocol]!,
      vaddr: parseIPv4(s.address)!,
      vport: s.port,
      scheduler: s.scheduler,
      schedFlags: s.schedFlags.reduce((a, f) => a | (SCHED_FLAG_BITS[f] ?? 0), 0),
      dests: [],
      data: null,
    };
    const live: LiveService = { key, slot, cfg: s, compiled, rsCfg: new Map() };
    this.services.set(key, live);
    const sched = getScheduler(s.scheduler)!;
    compiled.data = sched.prepare?.(compiled) ?? null;
    this.withSchedLock(slot, () => {
      const base = this.schedBase(slot);
      for (let i = 0; i < L.SCHED_WORDS - 1; i++) this.sched[base + i] = 0;
      sched.init?.(compiled, this.sched, base);
    });
    for (const r of s.realServers) this.addDest(live, r);
  }

  private editService(live: LiveService, s: ServiceConfig): void {
    live.cfg = s;
    live.compiled.schedFlags = s.schedFlags.reduce((a, f) => a | (SCHED_FLAG_BITS[f] ?? 0), 0);
    const want = new Map(s.realServers.map((r) => [`${r.address}:${r.port}`, r]));
    // -d in list order
    for (const d of [...live.compiled.dests]) {
      const k = `${formatAddr(d.addr)}:${d.port}`;
      if (!want.has(k)) this.delDest(live, k);
    }
    // -e for changed ones
    for (const [k, r] of want) {
      const old = live.rsCfg.get(k);
      if (old && (old.weight !== r.weight || old.upperThreshold !== r.upperThreshold || old.lowerThreshold !== r.lowerThreshold || old.forwarding !== r.forwarding)) {
        this.editDest(live, k, r);
      }
    }
    // -a for new ones, in configuration order
    for (const [k, r] of want) if (!live.rsCfg.has(k)) this.addDest(live, r);
  }

  private deleteService(live: LiveService): void {
    for (const d of [...live.compiled.dests]) this.delDest(live, `${formatAddr(d.addr)}:${d.port}`);
    this.services.delete(live.key);
    if (this.svcSlotRefs[live.slot] === 0) this.freeSvc.push(live.slot);
    else this.orphanSvcSlots.add(live.slot);
  }

  /** Service slots of removed services still referenced by trashed real servers. */
  private orphanSvcSlots = new Set<number>();

  private change(live: LiveService, kind: DestListChange['kind'], rs: number, position: number, before: SchedDest[]): void {
    const sched = getScheduler(live.cfg.scheduler)!;
    live.compiled.data = sched.prepare?.(live.compiled) ?? null;
    if (sched.update) {
      this.withSchedLock(live.slot, () => sched.update!(live.compiled, this.sched, this.schedBase(live.slot), { kind, rs, position, before }));
    }
  }

  private addDest(live: LiveService, r: RealServerConfig): void {
    const k = `${r.address}:${r.port}`;
    const slotKey = `${live.key}|${k}`;
    let info = this.rsSlots.get(slotKey);
    if (!info) {
      const slot = this.freeRs.pop()!;
      info = { slot, svcKey: live.key, svcSlot: live.slot, addr: r.address, port: r.port, listed: false };
      this.rsSlots.set(slotKey, info);
      this.svcSlotRefs[live.slot]!++;
      const o = slot * L.RS_WORDS;
      for (let i = 0; i < L.RS_WORDS; i++) Atomics.store(this.rs, o + i, 0);
      this.onFreshRealServerSlot?.(slot);
    }
    info.listed = true;
    const o = info.slot * L.RS_WORDS;
    this.setThresholds(o, r, true);
    Atomics.store(this.rs, o + L.RS_WEIGHT, r.weight);
    Atomics.or(this.rs, o + L.RS_FLAGS, L.RSF_AVAILABLE);
    const before = live.compiled.dests.slice();
    const d: CompiledDest = { rs: info.slot, addr: parseIPv4(r.address)!, port: r.port, weight: r.weight, fwd: FWD[r.forwarding]! };
    live.compiled.dests = [d, ...before]; // list_add_rcu: at the head
    live.rsCfg.set(k, r);
    this.change(live, 'add', info.slot, -1, before);
  }

  private editDest(live: LiveService, k: string, r: RealServerConfig): void {
    const info = this.rsSlots.get(`${live.key}|${k}`)!;
    const o = info.slot * L.RS_WORDS;
    this.setThresholds(o, r, false);
    Atomics.store(this.rs, o + L.RS_WEIGHT, r.weight);
    const before = live.compiled.dests.slice();
    const position = before.findIndex((d) => d.rs === info.slot);
    live.compiled.dests = before.map((d, i) => (i === position ? { ...d, weight: r.weight, fwd: FWD[r.forwarding]! } : d));
    live.rsCfg.set(k, r);
    this.change(live, 'upd', info.slot, position, before);
  }

  private delDest(live: LiveService, k: string): void {
    const info = this.rsSlots.get(`${live.key}|${k}`)!;
    const before = live.compiled.dests.slice();
    const position = before.findIndex((d) => d.rs === info.slot);
    live.compiled.dests = before.filter((_, i) => i !== position);
    live.rsCfg.delete(k);
    info.listed = false;
    Atomics.and(this.rs, info.slot * L.RS_WORDS + L.RS_FLAGS, ~L.RSF_AVAILABLE);
    this.change(live, 'del', info.slot, position, before);
  }

  /** __ip_vs_update_dest: store thresholds; clear OVERLOAD if the new upper is 0 or raised. */
  private setThresholds(o: number, r: RealServerConfig, isAdd: boolean): void {
    const oldUpper = this.rs[o + L.RS_UTHRESH]!;
    if (isAdd || r.upperThreshold === 0 || r.upperThreshold > oldUpper) Atomics.and(this.rs, o + L.RS_FLAGS, ~L.RSF_OVERLOAD);
    Atomics.store(this.rs, o + L.RS_UTHRESH, r.upperThreshold);
    Atomics.store(this.rs, o + L.RS_LTHRESH, r.lowerThreshold);
  }

  /** Frees trashed real-server slots with no connections left (kernel dest trash GC). */
  collectTrash(): number {
    let freed = 0;
    for (const [k, info] of this.rsSlots) {
      if (info.listed) continue;
      const o = info.slot * L.RS_WORDS;
      if (Atomics.load(this.rs, o + L.RS_ACTIVE) + Atomics.load(this.rs, o + L.RS_INACTIVE) + Atomics.load(this.rs, o + L.RS_PERSIST) !== 0) continue;
      this.rsSlots.delete(k);
      this.freeRs.push(info.slot);
      freed++;
      if (--this.svcSlotRefs[info.svcSlot]! === 0 && this.orphanSvcSlots.delete(info.svcSlot)) this.freeSvc.push(info.svcSlot);
    }
    return freed;
  }

  snapshot(): Snapshot {
    const services = [...this.services.values()].map((l) => l.compiled);
    const { lookup, lookupMask } = buildLookup(services);
    const vips = new Int32Array(this.vipCidrs.length * 2);
    this.vipCidrs.forEach((c, i) => {
      const p = parseCidr(c)!;
      vips[i * 2] = p.net;
      vips[i * 2 + 1] = p.mask;
    });
    return { version: ++this.version, services, lookup, lookupMask, vips, answerPing: this.answerPing };
  }

  /** Services with their real servers in kernel list order, for the API. */
  list(): { key: string; cfg: ServiceConfig; slot: number; realServers: RealServerView[] }[] {
    return [...this.services.values()].map((l) => ({
      key: l.key,
      cfg: l.cfg,
      slot: l.slot,
      realServers: l.compiled.dests.map((d) => {
        const k = `${formatAddr(d.addr)}:${d.port}`;
        const r = l.rsCfg.get(k)!;
        return this.rsView(d.rs, r);
      }),
    }));
  }

  rsView(slot: number, r: RealServerConfig): RealServerView {
    const o = slot * L.RS_WORDS;
    return {
      address: r.address,
      port: r.port,
      weight: Atomics.load(this.rs, o + L.RS_WEIGHT),
      forwarding: r.forwarding,
      slot,
      activeConns: Atomics.load(this.rs, o + L.RS_ACTIVE),
      inactConns: Atomics.load(this.rs, o + L.RS_INACTIVE),
      persistConns: Atomics.load(this.rs, o + L.RS_PERSIST),
      overloaded: (Atomics.load(this.rs, o + L.RS_FLAGS) & L.RSF_OVERLOAD) !== 0,
      upperThreshold: r.upperThreshold,
      lowerThreshold: r.lowerThreshold,
    };
  }

  /** Slots of trashed real servers (deleted, connections remaining). */
  trash(): RsSlotInfo[] {
    return [...this.rsSlots.values()].filter((i) => !i.listed);
  }

  /** Masq real servers whose replies must be routed into the device. */
  replyRules(): { addr: number; port: number; proto: 'tcp' | 'udp' }[] {
    const out = new Map<string, { addr: number; port: number; proto: 'tcp' | 'udp' }>();
    for (const l of this.services.values()) {
      for (const d of l.compiled.dests) {
        if (d.fwd !== L.FWD_MASQ) continue;
        out.set(`${l.cfg.protocol} ${d.addr}:${d.port}`, { addr: d.addr, port: d.port, proto: l.cfg.protocol });
      }
    }
    // Keep rules for trashed servers too: their remaining flows still need their replies.
    for (const i of this.rsSlots.values()) {
      if (i.listed) continue;
      const proto = i.svcKey.startsWith('udp') ? 'udp' : 'tcp';
      out.set(`${proto} ${parseIPv4(i.addr)}:${i.port}`, { addr: parseIPv4(i.addr)!, port: i.port, proto });
    }
    return [...out.values()];
  }
}
