/**
 * The scheduler contract: the shape of the kernel's struct ip_vs_scheduler
 * (net/netfilter/ipvs/ip_vs_sched.c), split for threads.
 *
 *  - prepare(): control thread, whenever a service's real-server list or weights change (the
 *    kernel's init_service/add_dest/upd_dest/del_dest rebuilds). Returns immutable per-service
 *    data (sh/mh lookup tables, wrr's gcd and max weight) shipped to workers with the snapshot.
 *  - init(): control thread, once when the service is created (empty list), like init_service.
 *  - update(): control thread, same moments, under the service's scheduler lock: adjusts the
 *    mutable state words (rr's cursor, wrr's current weight) as the kernel's hooks do.
 *  - schedule(): any worker, for the first packet of a new flow, under the service's scheduler
 *    lock. Returns an index into svc.dests or -1 ("no destination available"). It must not
 *    allocate, throw or use strings.
 *
 * Real servers are given in kernel list order: most recently added first. A real server is
 * eligible for a new flow only with weight > 0 and without OVERLOAD (schedulers that ignore
 * weights still skip weight 0). Mutable state lives in the shared scheduler region
 * (conntrack/layout.ts SCHED_*), never in the scheduler object, so every worker sees one rotation.
 */

export interface SchedDest {
  /** Real-server slot: index into the shared real-server region. */
  rs: number;
  /** Address as a signed 32-bit integer (IPv4, network order read big-endian). */
  addr: number;
  port: number;
  weight: number;
}

export interface SchedService {
  dests: SchedDest[];
  /** IP_VS_SVC_F_SCHED1..3 bits (sh-fallback/mh-fallback = 1, sh-port/mh-port = 2, flag-3 = 4). */
  schedFlags: number;
  /** What prepare() returned. */
  data: Int32Array | null;
}

/** The packet fields a scheduler may look at; one reusable object per worker. */
export interface SchedInput {
  caddr: number;
  cport: number;
  vaddr: number;
  vport: number;
  /** Table-relative ms. */
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
  /** Kernel init_service: the state words start as zeros; set the scheduler's initial state. */
  init?(svc: SchedService, state: Int32Array, base: number): void;
  prepare?(svc: SchedService): Int32Array | null;
  update?(svc: SchedService, state: Int32Array, base: number, change: DestListChange): void;
  schedule(svc: SchedService, state: Int32Array, base: number, rs: Int32Array, input: SchedInput): number;
}

/** Words of the scheduler state a scheduler may use, from `base` on. */
export const SCHED_STATE_WORDS = 15;
