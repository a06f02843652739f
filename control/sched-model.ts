/**
 * One virtual service's real-server list and scheduler, outside the daemon: what uvs simulate and
 * the disruption preview run the dataplane's scheduler code on. It applies list changes the way
 * control/services.ts does (and the kernel's ip_vs_ctl.c): one ipvsadm command at a time, each
 * followed by the scheduler's prepare() then its update hook; -a puts the server at the head of
 * the list; -d unlinks it into the trash, where it keeps its counters and flags, and a later -a of
 * the same address and port revives it (the trash is never emptied here: a dest the kernel frees
 * has no connections, no OVERLOAD and gets every other field reset by the add, so freeing it
 * would change nothing visible — except lblc/lblcr cache references, which keep it in the kernel's
 * trash as well).
 *
 * Counters follow ip_vs_bind_dest / ip_vs_unbind_dest: binding a connection or a template counts
 * it and sets OVERLOAD when upper ≠ 0 and ActiveConn + InActConn ≥ upper; unbinding uncounts it
 * and clears OVERLOAD when lower ≠ 0 and total < lower, else when upper ≠ 0 and
 * total·4 < upper·3, else always. __ip_vs_update_dest clears OVERLOAD when the new upper is 0 or
 * above the old one, and sets last_weight = weight on add or when the new weight is not 0.
 */
import * as L from '../conntrack/layout';
import { getScheduler } from '../schedulers/registry';
import type { DestListChange, SchedDest, SchedInput, SchedService, Scheduler } from '../schedulers/types';
import { fold, formatEndpoint, type Inet } from '../net/addr';

export interface ModelServer {
  /** "a.b.c.d:port" / "[v6]:port". */
  key: string;
  addr: Inet;
  port: number;
  /** Real-server slot in `rs`. */
  rs: number;
  weight: number;
  lastWeight: number;
  upper: number;
  lower: number;
  /** In the list (false = in the trash). */
  listed: boolean;
}

export class SchedModel {
  readonly scheduler: Scheduler;
  readonly svc: SchedService;
  readonly state = new Int32Array(L.SCHED_WORDS);
  readonly base = L.SCHED_STATE;
  rs: Int32Array;
  /** Every server ever added, listed or trashed, by key. */
  readonly servers = new Map<string, ModelServer>();
  private readonly bySlot: ModelServer[] = [];

  constructor(schedulerName: string, schedFlags: number, mhTableSize?: number, capacity = 16) {
    const s = getScheduler(schedulerName);
    if (!s) throw new Error(`unknown scheduler ${schedulerName}`);
    this.scheduler = s;
    this.svc = { dests: [], schedFlags, data: null };
    if (mhTableSize !== undefined) this.svc.mhTableSize = mhTableSize;
    this.rs = new Int32Array(Math.max(1, capacity) * L.RS_WORDS);
    // ip_vs_bind_scheduler: init_service on the empty list.
    this.svc.data = s.prepare?.(this.svc) ?? null;
    s.init?.(this.svc, this.state, this.base);
  }

  /**
   * Sets the list directly (kernel order, newest first) with one prepare(), as if the servers had
   * been added oldest first and edited since: a snapshot to compare against, not a hook sequence.
   */
  load(list: { addr: Inet; port: number; weight: number; lastWeight: number; overloaded?: boolean }[]): void {
    const dests: SchedDest[] = [];
    for (const r of list) {
      const s = this.slotFor(r.addr, r.port);
      s.listed = true;
      s.weight = r.weight;
      s.lastWeight = r.lastWeight;
      const o = s.rs * L.RS_WORDS;
      this.rs[o + L.RS_WEIGHT] = r.weight;
      this.rs[o + L.RS_FLAGS] = L.RSF_AVAILABLE | (r.overloaded ? L.RSF_OVERLOAD : 0);
      dests.push(this.dest(s));
    }
    this.svc.dests = dests;
    this.svc.data = this.scheduler.prepare?.(this.svc) ?? null;
  }

  /** Servers in kernel list order (newest first). */
  listed(): ModelServer[] {
    return this.svc.dests.map((d) => this.bySlot[d.rs]!);
  }

  server(slot: number): ModelServer {
    return this.bySlot[slot]!;
  }

  word(server: ModelServer, word: number): number {
    return this.rs[server.rs * L.RS_WORDS + word]!;
  }

  overloaded(server: ModelServer): boolean {
    return (this.word(server, L.RS_FLAGS) & L.RSF_OVERLOAD) !== 0;
  }

  private slotFor(addr: Inet, port: number): ModelServer {
    const key = formatEndpoint(addr, port);
    let s = this.servers.get(key);
    if (s) return s;
    const slot = this.bySlot.length;
    if ((slot + 1) * L.RS_WORDS > this.rs.length) {
      const bigger = new Int32Array(this.rs.length * 2);
      bigger.set(this.rs);
      this.rs = bigger;
    }
    s = { key, addr, port, rs: slot, weight: 0, lastWeight: 0, upper: 0, lower: 0, listed: false };
    this.servers.set(key, s);
    this.bySlot.push(s);
    return s;
  }

  private dest(s: ModelServer): SchedDest {
    return { rs: s.rs, addr: fold(s.addr), port: s.port, weight: s.weight, lastWeight: s.lastWeight };
  }

  /** __ip_vs_update_dest's threshold part. */
  private setThresholds(s: ModelServer, upper: number, lower: number): void {
    const o = s.rs * L.RS_WORDS;
    if (upper === 0 || upper > s.upper) this.rs[o + L.RS_FLAGS]! &= ~L.RSF_OVERLOAD;
    s.upper = upper;
    s.lower = lower;
    this.rs[o + L.RS_UTHRESH] = upper;
    this.rs[o + L.RS_LTHRESH] = lower;
  }

  private change(kind: DestListChange['kind'], rs: number, position: number, before: SchedDest[]): void {
    this.svc.data = this.scheduler.prepare?.(this.svc) ?? null;
    this.scheduler.update?.(this.svc, this.state, this.base, { kind, rs, position, before });
  }

  /** ipvsadm -a. The caller checks that the server is not listed. */
  add(addr: Inet, port: number, weight: number, upper = 0, lower = 0): ModelServer {
    const s = this.slotFor(addr, port);
    s.listed = true;
    s.lastWeight = weight;
    s.weight = weight;
    const o = s.rs * L.RS_WORDS;
    this.rs[o + L.RS_WEIGHT] = weight;
    this.setThresholds(s, upper, lower);
    this.rs[o + L.RS_FLAGS]! |= L.RSF_AVAILABLE;
    const before = this.svc.dests.slice();
    this.svc.dests = [this.dest(s), ...before];
    this.change('add', s.rs, -1, before);
    return s;
  }

  /** ipvsadm -e. */
  edit(s: ModelServer, weight: number, upper: number, lower: number): void {
    if (weight !== 0) s.lastWeight = weight;
    s.weight = weight;
    this.rs[s.rs * L.RS_WORDS + L.RS_WEIGHT] = weight;
    this.setThresholds(s, upper, lower);
    const before = this.svc.dests.slice();
    const position = before.findIndex((d) => d.rs === s.rs);
    this.svc.dests = before.map((d, i) => (i === position ? this.dest(s) : d));
    this.change('upd', s.rs, position, before);
  }

  /** ipvsadm -d: into the trash. */
  del(s: ModelServer): void {
    const before = this.svc.dests.slice();
    const position = before.findIndex((d) => d.rs === s.rs);
    this.svc.dests = before.filter((_, i) => i !== position);
    s.listed = false;
    this.rs[s.rs * L.RS_WORDS + L.RS_FLAGS]! &= ~L.RSF_AVAILABLE;
    this.change('del', s.rs, position, before);
  }

  /** A new-flow decision; null = no destination available. */
  schedule(input: SchedInput): ModelServer | null {
    const i = this.scheduler.schedule(this.svc, this.state, this.base, this.rs, input);
    return i < 0 ? null : this.bySlot[this.svc.dests[i]!.rs]!;
  }

  /** Counts a connection (or a template) on its server and applies the upper threshold. */
  bind(s: ModelServer, word: number): void {
    const o = s.rs * L.RS_WORDS;
    this.rs[o + word]!++;
    if (s.upper !== 0 && this.rs[o + L.RS_ACTIVE]! + this.rs[o + L.RS_INACTIVE]! >= s.upper) this.rs[o + L.RS_FLAGS]! |= L.RSF_OVERLOAD;
  }

  /** Uncounts it and applies the clear rule. */
  unbind(s: ModelServer, word: number): void {
    const o = s.rs * L.RS_WORDS;
    this.rs[o + word]!--;
    const total = this.rs[o + L.RS_ACTIVE]! + this.rs[o + L.RS_INACTIVE]!;
    const clear = s.lower !== 0 ? total < s.lower : s.upper !== 0 ? total * 4 < s.upper * 3 : true;
    if (clear) this.rs[o + L.RS_FLAGS]! &= ~L.RSF_OVERLOAD;
  }

  /** Moves one connection between ActiveConn and InActConn (a state change: no threshold rule). */
  move(s: ModelServer, from: number, to: number): void {
    const o = s.rs * L.RS_WORDS;
    this.rs[o + from]!--;
    this.rs[o + to]!++;
  }
}
