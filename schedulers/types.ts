/**
 * The scheduler contract: the shape of the kernel's struct ip_vs_scheduler
 * (net/netfilter/ipvs/ip_vs_sched.c), split for threads.
 *
 *  - prepare(): control thread, whenever a service's real-server list or weights change (the
 *    kernel's init_service/add_dest/upd_dest/del_dest rebuilds). Returns immutable per-service
 *    data (sh/dh/mh lookup tables, wrr's gcd and max weight) shipped to workers with the snapshot.
 *  - init(): control thread, once when the service is created (empty list), like init_service.
 *  - update(): control thread, same moments, under the service's scheduler lock: adjusts the
 *    mutable state words (rr's cursor, wrr's current weight) as the kernel's hooks do.
 *  - schedule(): any worker, for the first packet of a new flow, under the service's scheduler
 *    lock. Returns an index into svc.dests or -1 ("no destination available"). It must not
 *    allocate, throw or use strings.
 *
 * What a scheduler is, beyond those hooks, it says itself, so code outside schedulers/ asks the
 * scheduler object and never branches on its name: the scheduler flags it gives a meaning
 * (`flags`), the lookup table of the hashing schedulers (`lookupTable`), a seed for one that
 * draws random numbers (`seed`), the period of a kernel timer (`tickInterval`), the real servers
 * its state still references (`holds`).
 *
 * Real servers are given in kernel list order: most recently added first. A real server is
 * eligible for a new flow only with weight > 0 and without OVERLOAD (schedulers that ignore
 * weights still skip weight 0). Mutable state lives in the shared scheduler region
 * (conntrack/layout.ts SCHED_*), never in the scheduler object, so every worker sees one rotation.
 * The kernel helpers several schedulers share (connection overhead, OVERLOAD, gcd) are in
 * common.ts.
 */
import { SCHED_STATE, SCHED_WORDS } from '../conntrack/layout';

export interface SchedDest {
  /** Real-server slot: index into the shared real-server region. */
  rs: number;
  /**
   * Address as a signed 32-bit integer: IPv4 read big-endian; IPv6 (uvs simulate) folded as the
   * kernel's hashes fold it, the XOR of its four big-endian 32-bit words.
   */
  addr: number;
  port: number;
  weight: number;
  /**
   * Kernel last_weight: the weight given on add, then the last non-zero weight given on edit
   * (__ip_vs_update_dest). mh builds its table from it, so quiescing (weight 0) keeps the table.
   * Absent = weight.
   */
  lastWeight?: number;
}

export interface SchedService {
  dests: SchedDest[];
  /** IP_VS_SVC_F_SCHED1..3 bits (sh-fallback/mh-fallback = 1, sh-port/mh-port = 2, flag-3 = 4). */
  schedFlags: number;
  /** What prepare() returned. */
  data: Int32Array | null;
  /** mh lookup-table size, one of the kernel's primes (schedulers/mh.ts MH_PRIMES); absent = 4093. */
  mhTableSize?: number;
}

/** The packet fields a scheduler may look at; one reusable object per worker. */
export interface SchedInput {
  /** Client and virtual addresses, as SchedDest.addr. */
  caddr: number;
  cport: number;
  vaddr: number;
  vport: number;
  /** Table-relative ms, an int32; schedulers compare times by wrapping difference, as jiffies. */
  now: number;
}

/** One list change, as one ipvsadm command makes it (-a, -d or -e). */
export interface DestListChange {
  kind: 'add' | 'del' | 'upd';
  /** Slot of the real server added, deleted or edited. */
  rs: number;
  /** Its position in `before` (del, upd) — -1 for add. */
  position: number;
  /** The list before the change (kernel order). */
  before: SchedDest[];
}

export interface Scheduler {
  readonly name: string;
  /**
   * The names this scheduler gives the IP_VS_SVC_F_SCHED1..3 bits, in bit order (keys of
   * SCHED_FLAG_BITS: sh's sh-fallback and sh-port, mh's mh-fallback and mh-port). ipvsadm.c's
   * parse_sched_flags accepts such a name only with this scheduler and print_sched_flags prints
   * them instead of flag-1..3 (a bit without a name here is not printed). Absent: the generic
   * flag-1..3, which every scheduler accepts. The registry refuses a name another scheduler owns.
   */
  readonly flags?: readonly string[];
  /** Kernel init_service: the state words start as zeros; set the scheduler's initial state. */
  init?(svc: SchedService, state: Int32Array, base: number): void;
  /** svc.data still holds the previous result while prepare() runs (the first time: null). */
  prepare?(svc: SchedService): Int32Array | null;
  update?(svc: SchedService, state: Int32Array, base: number, change: DestListChange): void;
  schedule(svc: SchedService, state: Int32Array, base: number, rs: Int32Array, input: SchedInput): number;
  /**
   * Period of tick() in ms, for schedulers with a kernel timer (lblc/lblcr: 60 s). The owner of the
   * service calls tick() every tickInterval ms from the service's creation, under the service's
   * scheduler lock, with the same time base as SchedInput.now.
   */
  readonly tickInterval?: number;
  tick?(svc: SchedService, state: Int32Array, base: number, rs: Int32Array, now: number): void;
  /**
   * Whether the state words still reference the real server in `slot` — lblc's cache entry,
   * lblcr's set member: the kernel's ip_vs_dest_hold by scheduler state, which keeps a deleted
   * server in the trash (and its slot out of reuse) until the entry lets it go. Control thread,
   * under the service's scheduler lock; reads only. Absent: the state references no server by slot.
   */
  holds?(state: Int32Array, base: number, slot: number): boolean;
  /**
   * For a scheduler whose decision is a lookup in a table prepare() built (sh, dh: 256 buckets;
   * mh: M slots): that table, as list positions per slot (-1 = empty), from what prepare()
   * returned. schedule() is then a function of the packet, this table and the servers' weights
   * and OVERLOAD only — no counters, no rotation state — which the disruption preview relies on
   * (control/disruption.ts: slots moved, and each flow's next decision). Absent for the others.
   */
  lookupTable?(data: Int32Array): Int32Array;
  /**
   * For a scheduler that draws random numbers (twos): sets its stream from `seed` (any integer,
   * taken mod 2^32) so runs are reproducible, as uvs simulate needs. Control thread, after
   * init(), before any schedule().
   */
  seed?(state: Int32Array, base: number, seed: number): void;
}

/** Words of the scheduler state a scheduler may use, from `base` on (conntrack/layout.ts). */
export const SCHED_STATE_WORDS = SCHED_WORDS - SCHED_STATE;

/** ipvsadm -b names → IP_VS_SVC_F_SCHED1..3 bits (include/uapi/linux/ip_vs.h). */
export const SCHED_FLAG_BITS: Readonly<Record<string, number>> = {
  'flag-1': 1,
  'flag-2': 2,
  'flag-3': 4,
  'sh-fallback': 1,
  'sh-port': 2,
  'mh-fallback': 1,
  'mh-port': 2,
};

export function schedFlagBits(flags: readonly string[] | undefined): number {
  return (flags ?? []).reduce((a, f) => a | (SCHED_FLAG_BITS[f] ?? 0), 0);
}
