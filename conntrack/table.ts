/**
 * The shared-memory connection table: one per node, used by every dataplane worker and by the
 * control thread (sweeper, API). Layout and lock order: ./layout.ts.
 *
 * Both directions of a flow resolve to the same entry: the client→server key
 * (proto, caddr, cport, vaddr, vport) sits on an in-chain, the server→client key
 * (proto, daddr, dport, laddr, lport) on an out-chain. A key is looked up holding that bucket's
 * lock, kept while the entry is read or updated, so an entry cannot be freed under it (freeing
 * takes both of the entry's bucket locks). The packet path never sees a lock or an entry word:
 * its calls (lookupIn, lookupOut, readFlow, touchIn, templateFor, insert…) take a key or a record
 * and fill a view (./flow.ts), each under the locks it needs, and name entries by index only.
 *
 * Counting follows the kernel (ip_vs_conn.c: ip_vs_bind_dest / ip_vs_unbind_dest): a new entry
 * starts INACTIVE (InActConn + 1), state changes move it between InActConn and ActiveConn, and the
 * OVERLOAD flag is set on bind when the upper threshold is reached and cleared on unbind per the
 * lower threshold (or 3/4 of the upper one).
 *
 * IPv6 flows use the same entries and calls: E_PROTO carries L.PROTO_V6, the address words hold
 * each address's last 32 bits and the caller passes the other 96 bits of all four addresses in a
 * `hi` array (L.HI_WORDS, the order of E_CADDR_HI…E_LADDR_HI); they are stored in the entry,
 * compared on lookup, and hashed in full (bucket6).
 *
 * Hash flooding: every key part comes from the network (a client picks its address, all of an
 * IPv6 /64 and its ports), so the bucket hash is keyed — HalfSipHash-1-3 under a 64-bit key from
 * crypto random at creation, kept in the header (H_SALT, H_HASH_K1) so every thread hashes alike —
 * and nobody outside can tell which keys share a chain. Chains stay short (buckets = capacity:
 * the longest of 2^16 chains at full load is ~8, of 2^26 ~11); a walk longer than CHAIN_ALARM is
 * counted (longWalks, longestWalk: the worker publishes both), and an insert into a chain of
 * CHAIN_LIMIT entries is refused (−3), so no lookup ever walks further even if the key leaked.
 *
 * Nothing here allocates per call; failures are return values (-1), never exceptions. Only a
 * broken table throws (lockStuck, chainLoop, holdLoop): a lock word held for LOCK_STUCK_MS, or a
 * chain walk longer than the table (a held-packet list longer than the area), is a dead owner
 * nobody released or corrupted links — the thread fails loudly (a worker is restarted, the control
 * thread's error is logged) instead of spinning silently.
 */
import { randomFillSync } from 'node:crypto';
import type { FlowKey, FlowView, NewFlow } from './flow';
import * as L from './layout';
import { formatIPv4, formatIPv6 } from '../net/addr';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../net/packet';
import { HalfSipHash, hsiphash4, sipInit } from '../net/siphash';
import {
  SCTP_ACTIVE,
  SCTP_DEFAULT_TIMEOUTS,
  SCTP_HALF_OPEN,
  SCTP_S_CLOSED,
  SCTP_S_ESTABLISHED,
  sctpNextState,
  SCTP_STATE_COUNT,
} from './sctp-state';
import {
  DIR_INPUT,
  DIR_OUTPUT,
  TCP_ACTIVE,
  TCP_CLOSE,
  TCP_ESTABLISHED,
  TCP_HALF_OPEN,
  TCP_TIME_WAIT,
  tcpNextState,
  TCP_STATE_COUNT,
} from './state';

/** HalfSipHash's last word: message length in bytes << 24 | the protocol byte that ends it. */
const KEY4_TAIL = 13 << 24; // addr1, ports, addr2: 12 bytes + protocol
const KEY6_TAIL = 37 << 24; // two 16-byte addresses, ports: 36 bytes + protocol

/**
 * A walk longer than this is counted (longChains): 17 entries in one of 2^26 chains at full load
 * has a probability of ~1e-7 with a keyed hash, so a count that grows means a hash attack or a
 * broken hash. An insert into a chain that already holds CHAIN_LIMIT entries is refused.
 */
export const CHAIN_ALARM = 16;
export const CHAIN_LIMIT = 32;

/**
 * A lock word still held after this long is never coming free: critical sections are a few
 * dozen instructions, and a dead worker's locks are released by the control thread at its exit
 * (releaseLocksOf), within milliseconds. The spinner then throws (lockStuck). Counted in time
 * the spinner spent spinning, so a stopped process or a suspended machine is no stuck lock.
 */
export const LOCK_STUCK_MS = 5000;
/** A gap between two clock readings of a spin longer than this is time the spinner did not run. */
const SPIN_GAP_MS = 100;

/** lookupIn's results. */
export const FLOW_MISS = 0;
export const FLOW_HIT = 1;
export const FLOW_DEST_GONE = 2;
export const FLOW_REUSE = 3;
/** A SYN-proxied flow whose real server has not answered yet (lb/synproxy.ts): found, not touched. */
export const FLOW_SP_PENDING = 4;
/** spHold's result bits: the packet was held, refused (no room), our SYN is due again; refused because its source holds HOLD_PER_SOURCE (with SPH_REFUSED). */
export const SPH_HELD = 1;
export const SPH_REFUSED = 2;
export const SPH_RESEND = 4;
export const SPH_SOURCE = 8;
/** lookupIn's options: the packet may start a connection; expire_nodest_conn is on. */
export const LOOKUP_NEW = 1;
export const LOOKUP_EXPIRE_NODEST = 2;

export interface TableTimeouts {
  /** Seconds per TCP state, index = state (11 entries). */
  tcp: number[];
  udp: number;
  /** Seconds per SCTP state, index = state (14 entries); absent = the kernel's defaults. */
  sctp?: number[];
}

export class ConnTable {
  readonly sab: SharedArrayBuffer;
  readonly i32: Int32Array;
  readonly capacity: number;
  readonly mask: number;
  /** Bucket hash key (H_SALT, H_HASH_K1). */
  private readonly k0: number;
  private readonly k1: number;
  private readonly hasher = new HalfSipHash();
  /** Longest chain this thread walked (lookups, inserts) since the last chainWindow(). */
  private chainPeak = 0;
  /** Walks by this thread longer than CHAIN_ALARM (monotonic). */
  private longChains = 0;
  /** Entries the last find*() stepped over (the whole chain when it found nothing). */
  private lastWalk = 0;
  readonly epoch: number;
  private readonly inHeads: number;
  private readonly outHeads: number;
  private readonly locks: number;
  private readonly entries: number;
  /** Per-source half-open counters (layout.ts) and the SipHash state of their key. */
  private readonly sources: number;
  private readonly srcKey: Uint32Array;
  /** SYN proxy words (layout.ts SP_*) and the held-packet area (HOLD_*): word offsets, and the area's bytes. */
  private readonly spWords: number;
  private readonly hold: number;
  readonly holdBytes: Uint8Array;
  private readonly holdData: number;
  /** The two buckets lockFlow() locked. */
  private spB1 = 0;
  private spB2 = 0;
  /** Real-server region (layout.ts RS_*). */
  readonly rs: Int32Array;
  /** This thread's lock owner id. */
  readonly owner: number;
  /** How long a lock word may stay held before spin() gives up (LOCK_STUCK_MS; tests wait less). */
  private readonly stuckMs: number;

  static create(capacity: number, timeouts: TableTimeouts): SharedArrayBuffer {
    if (!Number.isInteger(capacity) || capacity < 16 || (capacity & (capacity - 1)) !== 0) {
      throw new RangeError(`connection table capacity must be a power of two ≥ 16, got ${capacity}`);
    }
    const sab = new SharedArrayBuffer(L.tableBytes(capacity));
    const a = new Int32Array(sab);
    a[L.H_MAGIC] = L.TABLE_MAGIC;
    a[L.H_CAPACITY] = capacity;
    a[L.H_BUCKETS] = capacity;
    const key = new Int32Array(2);
    randomFillSync(key);
    a[L.H_SALT] = key[0]!;
    a[L.H_HASH_K1] = key[1]!;
    const epoch = Date.now();
    a[L.H_EPOCH_LO] = (epoch % 0x100000000) | 0;
    a[L.H_EPOCH_HI] = Math.floor(epoch / 0x100000000);
    const entries = L.entriesOffset(capacity);
    for (let e = 0; e < capacity; e++) {
      a[entries + e * L.ENTRY_WORDS + L.E_NEXT_IN] = e + 1 < capacity ? e + 2 : 0;
    }
    a[L.H_FREE_HEAD] = 1;
    for (let i = 0; i < 4; i++) a[L.H_SRC_KEY + i] = (Math.random() * 0x100000000) | 0;
    const spKey = new Int32Array(4);
    randomFillSync(spKey);
    a.set(spKey, L.H_SP_KEY);
    a[L.H_SP_LAST] = -0x40000000; // no cookie sent yet: ACKs are not checked
    a[L.H_SP_MSS4] = 1460;
    a[L.H_SP_MSS6] = 1440;
    a[L.H_SP_WSCALE] = 7;
    // The held-packet area's free list: every slot, in order.
    const h = L.holdOffset(capacity);
    a[h + L.HOLD_FREE] = 1;
    for (let i = 0; i < L.HOLD_SLOTS; i++) a[h + L.HOLD_HDR_WORDS + i * L.HOLD_SLOT_WORDS + L.HS_NEXT] = i + 1 < L.HOLD_SLOTS ? i + 2 : 0;
    setTimeouts(a, timeouts);
    return sab;
  }

  constructor(sab: SharedArrayBuffer, rsSab: SharedArrayBuffer, owner: number, lockStuckMs = LOCK_STUCK_MS) {
    this.sab = sab;
    this.i32 = new Int32Array(sab);
    if (this.i32[L.H_MAGIC] !== L.TABLE_MAGIC) throw new Error('not a uvs connection table');
    this.capacity = this.i32[L.H_CAPACITY]!;
    this.mask = this.capacity - 1;
    this.k0 = this.i32[L.H_SALT]!;
    this.k1 = this.i32[L.H_HASH_K1]!;
    this.epoch = (this.i32[L.H_EPOCH_LO]! >>> 0) + this.i32[L.H_EPOCH_HI]! * 0x100000000;
    this.inHeads = L.inHeadsOffset();
    this.outHeads = L.outHeadsOffset(this.capacity);
    this.locks = L.bucketLocksOffset(this.capacity);
    this.entries = L.entriesOffset(this.capacity);
    this.sources = L.sourceCountersOffset(this.capacity);
    this.spWords = L.synproxyOffset(this.capacity);
    this.hold = L.holdOffset(this.capacity);
    this.holdBytes = new Uint8Array(sab);
    this.holdData = L.holdDataOffset(this.capacity);
    const k = this.i32;
    this.srcKey = sipInit([k[L.H_SRC_KEY]! >>> 0, k[L.H_SRC_KEY + 1]! >>> 0, k[L.H_SRC_KEY + 2]! >>> 0, k[L.H_SRC_KEY + 3]! >>> 0]);
    this.rs = new Int32Array(rsSab);
    this.owner = owner;
    this.stuckMs = lockStuckMs;
  }

  /** Table-relative milliseconds (int32, wraps after 24 days; compare with (a - b) | 0). */
  now(): number {
    return (Date.now() - this.epoch) | 0;
  }

  /**
   * How long a TCP flow counted now may live (ms): an active one (ESTABLISHED) by its timeout, an
   * inactive one by the longest other TCP state's (conntrack/cluster-counts.ts holds a vanished
   * node's counts that long; control/services.ts the drained servers' trash).
   */
  tcpHold(): { active: number; inactive: number } {
    const a = this.i32;
    let inactive = 0;
    for (let s = 0; s < TCP_STATE_COUNT; s++) if (s !== TCP_ESTABLISHED) inactive = Math.max(inactive, a[L.H_TIMEOUTS + s]!);
    return { active: a[L.H_TIMEOUTS + TCP_ESTABLISHED]!, inactive };
  }

  setTimeouts(t: TableTimeouts): void {
    setTimeouts(this.i32, t);
  }

  count(): number {
    return Atomics.load(this.i32, L.H_COUNT);
  }

  /** Shadow entries (other nodes' flows) among count(). */
  shadows(): number {
    return Atomics.load(this.i32, L.H_SHADOWS);
  }

  setSync(on: boolean): void {
    Atomics.store(this.i32, L.H_SYNC_ON, on ? 1 : 0);
  }

  /** Word offset of entry e. */
  base(e: number): number {
    return this.entries + e * L.ENTRY_WORDS;
  }

  // ── hashing ───────────────────────────────────────────────────────────────────────────────
  /** Bucket of an IPv4 key: HalfSipHash-1-3 of (addr1, ports, addr2, protocol) under the table's key. */
  bucket(proto: number, a1: number, ports: number, a2: number): number {
    const h = this.hasher;
    h.begin(this.k0, this.k1);
    h.word(a1);
    h.word(ports);
    h.word(a2);
    return h.end(KEY4_TAIL | (proto & 0xff)) & this.mask;
  }

  /**
   * Bucket of an IPv6 key: all 128 bits of both addresses — w[i1, i1+3) then a1, the ports,
   * w[i2, i2+3) then a2 — and the protocol. Nothing is folded: keys of one /64 that differ
   * anywhere differ in the hash input.
   */
  bucket6(proto: number, w: ArrayLike<number>, i1: number, a1: number, ports: number, i2: number, a2: number): number {
    const h = this.hasher;
    h.begin(this.k0, this.k1);
    h.word(w[i1]!);
    h.word(w[i1 + 1]!);
    h.word(w[i1 + 2]!);
    h.word(a1);
    h.word(ports);
    h.word(w[i2]!);
    h.word(w[i2 + 1]!);
    h.word(w[i2 + 2]!);
    h.word(a2);
    return h.end(KEY6_TAIL | (proto & 0xff)) & this.mask;
  }

  /** Bucket of a client→server key (IPv6: `hi` holds its high words at 0..5). */
  bucketIn(proto: number, caddr: number, cports: number, vaddr: number, hi: ArrayLike<number> | null): number {
    if ((proto & L.PROTO_V6) === 0 || hi === null) return this.bucket(proto, caddr, cports, vaddr);
    return this.bucket6(proto, hi, 0, caddr, cports, 3, vaddr);
  }

  /** Bucket of a server→client key (IPv6: `hi` holds its high words at 6..11). */
  bucketOut(proto: number, daddr: number, dports: number, laddr: number, hi: ArrayLike<number> | null): number {
    if ((proto & L.PROTO_V6) === 0 || hi === null) return this.bucket(proto, daddr, dports, laddr);
    return this.bucket6(proto, hi, 6, daddr, dports, 9, laddr);
  }

  /** The longest chain this thread walked since the last chainWindow(). */
  longestWalk(): number {
    return this.chainPeak;
  }

  /** Starts a new window for longestWalk(); returns the longest walk of the one that ends. */
  chainWindow(): number {
    const peak = this.chainPeak;
    this.chainPeak = 0;
    return peak;
  }

  /** Walks by this thread longer than CHAIN_ALARM (monotonic). */
  longWalks(): number {
    return this.longChains;
  }

  /** Records a walk of n entries (chainPeak, longChains). */
  private walked(n: number): void {
    this.lastWalk = n;
    if (n > this.chainPeak) this.chainPeak = n;
    if (n > CHAIN_ALARM) this.longChains++;
  }

  /** Entries on the chain starting at a[headIdx] linked through nextField (caller holds its lock). */
  private chainLength(headIdx: number, nextField: number): number {
    const a = this.i32;
    let n = 0;
    for (let ref = a[headIdx]!; ref !== 0; ref = a[this.entries + (ref - 1) * L.ENTRY_WORDS + nextField]!) {
      if (++n > this.capacity) this.chainLoop(headIdx);
    }
    return n;
  }

  /** The high words of an entry's IPv6 key match hi[from, from+6) at entry word `at`. */
  private hiEqual(o: number, at: number, hi: ArrayLike<number>, from: number): boolean {
    const a = this.i32;
    for (let i = 0; i < 6; i++) if (a[o + at + i] !== hi[from + i]) return false;
    return true;
  }

  // ── per-source half-open counters ─────────────────────────────────────────────────────────
  /**
   * Counter slot of a client source: keyed SipHash (hsiphash, the table's random key) of the IPv4
   * address, or of an IPv6 client's /64 (its two high words, chained through the PRF), since one
   * host holds a whole /64. Without the key no one can aim sources at another client's slot.
   */
  sourceSlot(v6: boolean, caddr: number, hi0: number, hi1: number): number {
    if (!v6) return hsiphash4(this.srcKey, caddr) & this.mask;
    return hsiphash4(this.srcKey, hi1 ^ hsiphash4(this.srcKey, hi0)) & this.mask;
  }

  /** Half-open entries counted at a source slot (atomic read; may lag by a packet in flight). */
  halfOpenAt(slot: number): number {
    return Atomics.load(this.i32, this.sources + slot);
  }

  /** Adds d to the counter of the source of the entry at o (its client address words). */
  private sourceAdd(o: number, d: number): void {
    const a = this.i32;
    const slot = this.sourceSlot((a[o + L.E_PROTO]! & L.PROTO_V6) !== 0, a[o + L.E_CADDR]!, a[o + L.E_CADDR_HI]!, a[o + L.E_CADDR_HI + 1]!);
    Atomics.add(a, this.sources + slot, d);
  }

  // ── locks ─────────────────────────────────────────────────────────────────────────────────
  lockBucket(b: number): void {
    const i = this.locks + b;
    if (Atomics.compareExchange(this.i32, i, 0, this.owner) !== 0) this.spin(i);
  }
  unlockBucket(b: number): void {
    Atomics.store(this.i32, this.locks + b, 0);
  }
  private lockWord(i: number): void {
    if (Atomics.compareExchange(this.i32, i, 0, this.owner) !== 0) this.spin(i);
  }
  /**
   * Takes lock word i, held by another: spins (critical sections are a few dozen instructions),
   * reading the clock every 2^16 tries; still held after stuckMs spent spinning, it throws.
   */
  private spin(i: number): void {
    const a = this.i32;
    let last = -1;
    let spun = 0;
    for (let n = 1; Atomics.compareExchange(a, i, 0, this.owner) !== 0; n++) {
      if ((n & 0xffff) !== 0) continue;
      const t = Date.now();
      // Only time this thread spent spinning counts: 2^16 tries take well under a millisecond, so a
      // longer gap is time it did not run (the process stopped, the machine suspended, this thread
      // descheduled) — the owner did not run either, and must not be declared stuck for it.
      if (last >= 0 && t - last < SPIN_GAP_MS) spun += t - last;
      last = t;
      if (spun >= this.stuckMs) this.lockStuck(i);
    }
  }
  /** Throws: lock word i has been held stuckMs. */
  private lockStuck(i: number): never {
    throw new Error(
      `conntrack: lock word ${i} held by owner ${Atomics.load(this.i32, i)} for ${this.stuckMs} ms; owner ${this.owner} gives up`,
    );
  }
  /** Throws: the held-packet list from slot first − 1 is longer than the area (its links loop). */
  private holdLoop(first: number): never {
    throw new Error(
      `conntrack: the held-packet list from slot ${first - 1} has more links than the area has slots (${L.HOLD_SLOTS}): it loops`,
    );
  }
  /** Throws: the chain at a[headIdx] is longer than the table (its links loop). */
  private chainLoop(headIdx: number): never {
    throw new Error(`conntrack: the chain at word ${headIdx} has more links than the table has entries (${this.capacity}): it loops`);
  }
  private lockPair(b1: number, b2: number): void {
    if (b1 === b2) this.lockBucket(b1);
    else if (b1 < b2) {
      this.lockBucket(b1);
      this.lockBucket(b2);
    } else {
      this.lockBucket(b2);
      this.lockBucket(b1);
    }
  }
  private unlockPair(b1: number, b2: number): void {
    this.unlockBucket(b1);
    if (b1 !== b2) this.unlockBucket(b2);
  }

  /**
   * Releases every lock word held by `owner` (a worker that died mid-section). The entry it was
   * changing may be half-updated; chains stay consistent because each link change is one store.
   * Locks only: a worker that dies inside insert after taking an entry off the free list and
   * before linking it or giving it back, or inside remove after unlinking and before pushFree,
   * loses that entry until the table is made again; one that dies after linking a new entry and
   * before counting it leaves it live but outside H_COUNT and its server's counts (both go one
   * below zero when it goes); one that dies between templateFor and control/unreserve leaves the
   * template's reservation, so it is re-armed forever (test/unit/table-model.test.ts,
   * UVS_MODEL_DEATH=all, shows each in a shortest sequence).
   */
  releaseLocksOf(owner: number): number {
    let released = 0;
    const a = this.i32;
    for (let b = 0; b < this.capacity; b++) {
      if (Atomics.compareExchange(a, this.locks + b, owner, 0) === owner) released++;
    }
    for (let e = 0; e < this.capacity; e++) {
      if (Atomics.compareExchange(a, this.base(e) + L.E_LOCK, owner, 0) === owner) released++;
    }
    if (Atomics.compareExchange(a, L.H_ALLOC_LOCK, owner, 0) === owner) released++;
    if (Atomics.compareExchange(a, this.hold + L.HOLD_LOCK, owner, 0) === owner) released++;
    return released;
  }

  // ── entry-level calls (caller holds the bucket lock) ─────────────────────────────────────
  // For this file, the control thread's conntrack/ code and the table's own tests; the packet
  // path uses the flow-level calls further down, which take the locks themselves.
  /** Entry whose client→server key matches, or -1. */
  findIn(b: number, proto: number, caddr: number, cports: number, vaddr: number, hi: ArrayLike<number> | null = null): number {
    const a = this.i32;
    let ref = a[this.inHeads + b]!;
    let n = 0;
    while (ref !== 0) {
      if (++n > this.capacity) this.chainLoop(this.inHeads + b);
      const e = ref - 1;
      const o = this.entries + e * L.ENTRY_WORDS;
      if (
        a[o + L.E_CADDR] === caddr &&
        a[o + L.E_CPORTS] === cports &&
        a[o + L.E_VADDR] === vaddr &&
        a[o + L.E_PROTO] === proto &&
        (a[o + L.E_FLAGS]! & L.F_TEMPLATE) === 0 &&
        ((proto & L.PROTO_V6) === 0 || this.hiEqual(o, L.E_CADDR_HI, hi!, 0))
      ) {
        this.walked(n);
        return e;
      }
      ref = a[o + L.E_NEXT_IN]!;
    }
    this.walked(n);
    return -1;
  }

  /** Valid persistence template for (proto, masked client, vport, vaddr), or -1. */
  findTemplate(b: number, proto: number, maskedCaddr: number, vport: number, vaddr: number, hi: ArrayLike<number> | null = null): number {
    const a = this.i32;
    let ref = a[this.inHeads + b]!;
    let n = 0;
    while (ref !== 0) {
      if (++n > this.capacity) this.chainLoop(this.inHeads + b);
      const e = ref - 1;
      const o = this.entries + e * L.ENTRY_WORDS;
      if (
        a[o + L.E_CADDR] === maskedCaddr &&
        a[o + L.E_CPORTS] === vport &&
        a[o + L.E_VADDR] === vaddr &&
        a[o + L.E_PROTO] === proto &&
        (a[o + L.E_FLAGS]! & (L.F_TEMPLATE | L.F_INVALID)) === L.F_TEMPLATE &&
        ((proto & L.PROTO_V6) === 0 || this.hiEqual(o, L.E_CADDR_HI, hi!, 0))
      ) {
        this.walked(n);
        return e;
      }
      ref = a[o + L.E_NEXT_IN]!;
    }
    this.walked(n);
    return -1;
  }

  /** Marks a template so it is never matched again (ip_vs_check_template); it dies at its timer. */
  invalidate(e: number): void {
    Atomics.or(this.i32, this.base(e) + L.E_FLAGS, L.F_INVALID);
  }

  /**
   * Holds template t for a connection about to be made through it: NCONTROL + 1, so the sweeper
   * re-arms instead of freeing it. Caller holds t's bucket lock (or just created t).
   */
  reserve(t: number): void {
    Atomics.add(this.i32, this.base(t) + L.E_NCONTROL, 1);
  }

  /** Gives back a reservation that made no connection. */
  unreserve(t: number): void {
    Atomics.sub(this.i32, this.base(t) + L.E_NCONTROL, 1);
  }

  /** The reserved connection exists: link it to template t and re-arm t (ip_vs_sched_persist). */
  control(conn: number, t: number, now: number): void {
    const a = this.i32;
    const ot = this.base(t);
    a[this.base(conn) + L.E_CONTROL] = t + 1;
    a[ot + L.E_EXPIRES] = (now + a[ot + L.E_TIMEOUT]!) | 0;
  }

  /**
   * ip_vs_control_assure_ct: marks the template controlling the entry at o (if any) ASSURED. Read
   * before writing, so the replies of a UDP flow do not write the template's line each time.
   */
  private assureTemplate(o: number): void {
    const a = this.i32;
    const control = a[o + L.E_CONTROL]!;
    if (control === 0) return;
    const ot = this.base(control - 1) + L.E_STATE;
    if ((a[ot]! & L.CTPL_ASSURED) === 0) Atomics.or(a, ot, L.CTPL_ASSURED);
  }

  /** Entry whose server→client key matches, or -1. */
  findOut(b: number, proto: number, daddr: number, dports: number, laddr: number, hi: ArrayLike<number> | null = null): number {
    const a = this.i32;
    let ref = a[this.outHeads + b]!;
    let n = 0;
    while (ref !== 0) {
      if (++n > this.capacity) this.chainLoop(this.outHeads + b);
      const e = ref - 1;
      const o = this.entries + e * L.ENTRY_WORDS;
      if (
        a[o + L.E_DADDR] === daddr &&
        a[o + L.E_DPORTS] === dports &&
        a[o + L.E_LADDR] === laddr &&
        a[o + L.E_PROTO] === proto &&
        (a[o + L.E_FLAGS]! & L.F_TEMPLATE) === 0 &&
        ((proto & L.PROTO_V6) === 0 || this.hiEqual(o, L.E_DADDR_HI, hi!, 6))
      ) {
        this.walked(n);
        return e;
      }
      ref = a[o + L.E_NEXT_OUT]!;
    }
    this.walked(n);
    return -1;
  }

  /**
   * A packet of entry e was seen in direction dir (state.ts DIR_*): advance the protocol state,
   * move the entry between ActiveConn and InActConn on a change, re-arm its timer. `ev` is what
   * the protocol's state machine reads: TCP the segment's flags, SCTP its chunk event
   * (sctp-state.ts SCTP_EV_*); UDP has none.
   * Caller holds one of the entry's bucket locks. Returns true when the entry should be written to
   * Redis now (sync on: first at packet 3, then every 50 packets, on every state change, and once
   * half its timeout has passed since the last write — the kernel sync daemon's rules plus a refresh).
   */
  touch(e: number, dir: number, ev: number, now: number): boolean {
    const a = this.i32;
    const o = this.entries + e * L.ENTRY_WORDS;
    this.lockWord(o + L.E_LOCK);
    const proto = a[o + L.E_PROTO]! & 0xff;
    let state = a[o + L.E_STATE]!;
    let timeoutSlot = L.TIMEOUT_UDP;
    let changed = false;
    let secure = false;
    if (proto === IPPROTO_TCP || proto === IPPROTO_SCTP) {
      let flags = a[o + L.E_FLAGS]!;
      if (dir === 1 && flags & L.F_NOOUTPUT) {
        // The first reply clears NOOUTPUT for good (masq entries start without it anyway).
        flags &= ~L.F_NOOUTPUT;
        a[o + L.E_FLAGS] = flags;
      } else if (dir === 0 && flags & L.F_NOOUTPUT) {
        dir = 2;
      }
      const tcp = proto === IPPROTO_TCP;
      secure = tcp && a[L.H_SECURE_TCP] !== 0;
      const next = tcp ? tcpNextState(dir, ev, state, secure) : sctpNextState(dir, ev, state);
      const active = tcp ? TCP_ACTIVE : SCTP_ACTIVE;
      if (next !== state) {
        const rsBase = a[o + L.E_RS]! * L.RS_WORDS;
        if (!(flags & L.F_INACTIVE) && active[next] === 0) {
          Atomics.sub(this.rs, rsBase + L.RS_ACTIVE, 1);
          Atomics.add(this.rs, rsBase + L.RS_INACTIVE, 1);
          flags |= L.F_INACTIVE;
        } else if (flags & L.F_INACTIVE && active[next] === 1) {
          Atomics.sub(this.rs, rsBase + L.RS_INACTIVE, 1);
          Atomics.add(this.rs, rsBase + L.RS_ACTIVE, 1);
          flags &= ~L.F_INACTIVE;
        }
        // The source's half-open count follows the state while the per-source limit is on (a
        // counted entry is uncounted whenever it leaves); the flag makes each entry count once.
        const half = (tcp ? TCP_HALF_OPEN : SCTP_HALF_OPEN)[next] === 1;
        if (flags & L.F_HALFOPEN && !half) {
          flags &= ~L.F_HALFOPEN;
          this.sourceAdd(o, -1);
        } else if (!(flags & (L.F_HALFOPEN | L.F_SHADOW)) && half && a[L.H_SRC_LIMIT] !== 0) {
          flags |= L.F_HALFOPEN;
          this.sourceAdd(o, 1);
        }
        a[o + L.E_FLAGS] = flags;
        state = next;
        a[o + L.E_STATE] = state;
        changed = true;
        if (state === (tcp ? TCP_ESTABLISHED : SCTP_S_ESTABLISHED)) this.assureTemplate(o);
      }
      timeoutSlot = tcp ? state : L.TIMEOUT_SCTP + state;
    } else if (dir === 1) {
      this.assureTemplate(o); // udp_state_transition: a reply assures the template
    }
    let timeout = a[L.H_TIMEOUTS + timeoutSlot]!;
    // secure_tcp: half-open states get the short timer (2.4's vs_timeout_table_dos; defense.ts),
    // and only the client re-arms it: a server retransmitting its SYN-ACK to a spoofed client
    // (5 times over 31 s on Linux) would otherwise keep every flood entry alive that long.
    if (secure && TCP_HALF_OPEN[state] === 1) {
      if (timeout > a[L.H_SECURE_TCP_MS]!) timeout = a[L.H_SECURE_TCP_MS]!;
      if (dir !== 1 || changed) a[o + L.E_EXPIRES] = (now + timeout) | 0;
    } else {
      a[o + L.E_EXPIRES] = (now + timeout) | 0;
    }
    let p = a[o + L.E_IN_PKTS]!;
    if (dir !== 1 && p < 0x7fffffff) a[o + L.E_IN_PKTS] = ++p;
    let sync = false;
    if (a[L.H_SYNC_ON] !== 0) {
      sync =
        changed ||
        (dir !== 1 && (p === L.SYNC_THRESHOLD || (p > L.SYNC_THRESHOLD && (p - L.SYNC_THRESHOLD) % L.SYNC_PERIOD === 0))) ||
        ((now - a[o + L.E_SYNCED]!) | 0) > timeout >> 1;
      if (sync) a[o + L.E_SYNCED] = now;
    }
    Atomics.store(a, o + L.E_LOCK, 0);
    return sync;
  }

  /**
   * A packet reached another node's flow (a shadow entry): it becomes ours — counted in
   * ActiveConn/InActConn from its synced state, as the kernel binds synced connections.
   * Caller holds one of the entry's bucket locks. Returns false if it was not a shadow.
   */
  adopt(e: number, now: number): boolean {
    const a = this.i32;
    const o = this.entries + e * L.ENTRY_WORDS;
    this.lockWord(o + L.E_LOCK);
    const flags = a[o + L.E_FLAGS]!;
    if (!(flags & L.F_SHADOW)) {
      Atomics.store(a, o + L.E_LOCK, 0);
      return false;
    }
    a[o + L.E_FLAGS] = flags & ~L.F_SHADOW;
    a[o + L.E_SYNCED] = now;
    Atomics.store(a, o + L.E_LOCK, 0);
    Atomics.sub(a, L.H_SHADOWS, 1);
    const r = this.rs;
    const ro = a[o + L.E_RS]! * L.RS_WORDS;
    Atomics.add(r, ro + (flags & L.F_INACTIVE ? L.RS_INACTIVE : L.RS_ACTIVE), 1);
    const upper = r[ro + L.RS_UTHRESH]!;
    if (upper !== 0 && Atomics.load(r, ro + L.RS_ACTIVE) + Atomics.load(r, ro + L.RS_INACTIVE) >= upper)
      Atomics.or(r, ro + L.RS_FLAGS, L.RSF_OVERLOAD);
    return true;
  }

  // ── the packet path's calls: each takes and releases its own locks ───────────────────────
  /**
   * A client's packet (key k: client→server) looked up as ip_vs_in does. A hit is adopted if it
   * was another node's flow, touched (state, timer, counts: touch()) and copied into v, all under
   * the bucket lock: FLOW_HIT. An entry found but not touched, copied into v.entry only:
   * FLOW_DEST_GONE when its real server has left the service (expire_nodest_conn decides), or
   * FLOW_REUSE when `opts` has LOOKUP_NEW (a TCP SYN, an SCTP INIT) and the entry may be replaced
   * by a new connection (conn_reuse_mode=1): it is in TIME_WAIT (SCTP: CLOSED) and no template
   * controls it, or (LOOKUP_EXPIRE_NODEST, ≥ 5.16) its server is quiesced, or it is a SYN-proxied
   * flow that has ended (CLOSE, TIME_WAIT: spReuse), copied into v. `ev` as for touch().
   */
  lookupIn(k: FlowKey, v: FlowView, ev: number, opts: number, now: number): number {
    const b = this.bucketIn(k.proto, k.src, k.ports, k.dst, k.hi);
    k.bucket = b;
    this.lockBucket(b);
    const e = this.findIn(b, k.proto, k.src, k.ports, k.dst, k.hi);
    if (e < 0) {
      this.unlockBucket(b);
      return FLOW_MISS;
    }
    const a = this.i32;
    const o = this.base(e);
    const rsw = a[o + L.E_RS]! * L.RS_WORDS;
    v.entry = e;
    if ((Atomics.load(this.rs, rsw + L.RS_FLAGS) & (L.RSF_AVAILABLE | L.RSF_DRAINED)) === 0) {
      this.unlockBucket(b);
      return FLOW_DEST_GONE;
    }
    if (
      opts & LOOKUP_NEW &&
      ((a[o + L.E_STATE] === ((k.proto & 0xff) === IPPROTO_TCP ? TCP_TIME_WAIT : SCTP_S_CLOSED) && a[o + L.E_CONTROL] === 0) ||
        (opts & LOOKUP_EXPIRE_NODEST && Atomics.load(this.rs, rsw + L.RS_WEIGHT) === 0) ||
        this.spReuse(o))
    ) {
      this.view(e, o, v); // what the new connection may keep (lb/core.ts: full-NAT's server and pool port)
      this.unlockBucket(b);
      return FLOW_REUSE;
    }
    const flags = a[o + L.E_FLAGS]!;
    if (flags & L.F_SP_PENDING) {
      // SYN proxy: the real server has not answered our SYN; the client's packet is held, untouched.
      v.adopted = false;
      v.sync = false;
      this.view(e, o, v);
      this.unlockBucket(b);
      return FLOW_SP_PENDING;
    }
    v.adopted = (flags & L.F_SHADOW) !== 0 && this.adopt(e, now);
    v.sync = this.touch(e, DIR_INPUT, ev, now);
    this.view(e, o, v);
    this.unlockBucket(b);
    return FLOW_HIT;
  }

  /**
   * A real server's packet (key k: server→client) as ip_vs_out looks it up: adopt, touch, copy
   * into v; false on a miss. A SYN-proxy pending flow is copied untouched.
   */
  lookupOut(k: FlowKey, v: FlowView, ev: number, now: number): boolean {
    const b = this.bucketOut(k.proto, k.src, k.ports, k.dst, k.hi);
    this.lockBucket(b);
    const e = this.findOut(b, k.proto, k.src, k.ports, k.dst, k.hi);
    if (e < 0) {
      this.unlockBucket(b);
      return false;
    }
    const o = this.base(e);
    if (this.i32[o + L.E_FLAGS]! & L.F_SP_PENDING) {
      // SYN proxy, our SYN unanswered: the server's packets neither change its state nor re-arm
      // its timer (the handshake does, lb/synproxy.ts) — a server answering with anything else
      // than a SYN-ACK must not keep a half-made flow alive.
      v.adopted = false;
      v.sync = false;
    } else {
      v.adopted = (this.i32[o + L.E_FLAGS]! & L.F_SHADOW) !== 0 && this.adopt(e, now);
      v.sync = this.touch(e, DIR_OUTPUT, ev, now);
    }
    this.view(e, o, v);
    this.unlockBucket(b);
    return true;
  }

  /**
   * The entry of a client→server key (out: a server→client key) copied into v, without touching
   * it — an ICMP error quoting one of the flow's packets is no packet of the flow. False: none.
   */
  readFlow(k: FlowKey, out: boolean, v: FlowView): boolean {
    const b = out ? this.bucketOut(k.proto, k.src, k.ports, k.dst, k.hi) : this.bucketIn(k.proto, k.src, k.ports, k.dst, k.hi);
    this.lockBucket(b);
    const e = out ? this.findOut(b, k.proto, k.src, k.ports, k.dst, k.hi) : this.findIn(b, k.proto, k.src, k.ports, k.dst, k.hi);
    if (e >= 0) {
      v.adopted = false;
      v.sync = false;
      this.view(e, this.base(e), v);
    }
    this.unlockBucket(b);
    return e >= 0;
  }

  /**
   * A just-inserted connection's first packet (insert(), then this, as ip_vs_conn_new then the
   * state update): touch and copy into v under its in-bucket lock. Its timer is 2 s away, so it
   * is still ours to touch. v may show another server than the one asked for: another worker won
   * the insert race.
   */
  touchIn(e: number, v: FlowView, ev: number, now: number): void {
    const b = this.entryBucketIn(this.base(e));
    this.lockBucket(b);
    this.firstTouch(e, v, ev, now);
    this.unlockBucket(b);
  }

  /**
   * touchIn's work; the caller holds the entry's in-bucket lock. The entry may be another node's
   * flow that the control thread installed between the caller's lookup and its insert: the packet
   * adopts it first, as lookupIn would have — touched while still a shadow, its state change would
   * move ActiveConn/InActConn of a flow they never counted, for good.
   */
  private firstTouch(e: number, v: FlowView, ev: number, now: number): void {
    v.adopted = (this.i32[this.base(e) + L.E_FLAGS]! & L.F_SHADOW) !== 0 && this.adopt(e, now);
    v.sync = this.touch(e, DIR_INPUT, ev, now);
    this.view(e, this.base(e), v);
  }

  /**
   * ip_vs_sched_persist's lookup: the valid persistence template of key k (client address
   * masked, ports the virtual port, IPv6 high words at hi[0..5]), reserved (reserve()) and copied
   * into v; −1 when there is none. A template whose server has left — or, with expireQuiescent,
   * is quiesced — is invalidated (ip_vs_check_template) and not returned.
   */
  templateFor(k: FlowKey, v: FlowView, expireQuiescent: boolean): number {
    const b = this.bucketIn(k.proto, k.src, k.ports, k.dst, k.hi);
    k.bucket = b;
    this.lockBucket(b);
    let t = this.findTemplate(b, k.proto, k.src, k.ports, k.dst, k.hi);
    if (t >= 0) {
      const o = this.base(t);
      const rsw = this.i32[o + L.E_RS]! * L.RS_WORDS;
      if (
        (Atomics.load(this.rs, rsw + L.RS_FLAGS) & L.RSF_AVAILABLE) === 0 ||
        (expireQuiescent && Atomics.load(this.rs, rsw + L.RS_WEIGHT) === 0)
      ) {
        this.invalidate(t);
        t = -1;
      } else {
        this.reserve(t);
        this.view(t, o, v);
      }
    }
    this.unlockBucket(b);
    return t;
  }

  /**
   * Inserts a persistence template (r.flags has F_TEMPLATE) and reserves it as templateFor does,
   * copied into v. A template found in a race is valid too. Negative as insert().
   */
  insertTemplate(r: NewFlow, v: FlowView): number {
    const t = this.insert(r);
    if (t < 0) return t;
    const o = this.base(t);
    const b = this.entryBucketIn(o);
    this.lockBucket(b);
    this.reserve(t);
    this.view(t, o, v);
    this.unlockBucket(b);
    return t;
  }

  /** Whether r's server→client key (full-NAT: a pool address and port for its server) is in use. */
  outKeyInUse(r: NewFlow): boolean {
    const b = this.bucketOut(r.proto, r.daddr, r.dports, r.laddr, r.hi);
    this.lockBucket(b);
    const taken = this.findOut(b, r.proto, r.daddr, r.dports, r.laddr, r.hi) >= 0;
    this.unlockBucket(b);
    return taken;
  }

  /**
   * The server's SYN-ACK named a PROXY protocol flow's stream start (its acknowledgement, `seq`):
   * the header goes before it, confirmed (PP_WAIT cleared), and nothing of it has been sent — the
   * first SYN-ACK, or one of a new connection on the client's reused port (layout.ts E_PP).
   */
  ppRestart(e: number, seq: number): void {
    const o = this.base(e);
    this.i32[o + L.E_PP_SEQ] = seq;
    Atomics.and(this.i32, o + L.E_PP, ~L.PP_FLAGS);
  }

  /** Adds PP_SENT / PP_DATA / PP_ACKED to a flow's PROXY protocol word (flags only gain bits). */
  ppMark(e: number, bits: number): void {
    Atomics.or(this.i32, this.base(e) + L.E_PP, bits);
  }

  // ── SYN proxy (lb/synproxy.ts; layout.ts SP_*, HOLD_*) ─────────────────────────────────
  /** Whether the SYN proxy answers SYNs now (defense.ts sets H_SYNPROXY). */
  synProxyOn(): boolean {
    return this.i32[L.H_SYNPROXY] !== 0;
  }

  /**
   * Locks both buckets of entry e (its keys as stored) and checks that it is still the live flow
   * v saw — its client→server key: protocol, client address and ports, virtual address, and for
   * IPv6 the high words of both (the entry may have been freed and reused for another flow since
   * v was filled): true with the locks held, false with none.
   */
  private lockFlow(e: number, v: FlowView): boolean {
    const proto = v.proto;
    const a = this.i32;
    const o = this.base(e);
    for (;;) {
      const b1 = this.entryBucketIn(o);
      const b2 = this.entryBucketOut(o);
      this.lockPair(b1, b2);
      if (b1 === this.entryBucketIn(o) && b2 === this.entryBucketOut(o)) {
        if (
          a[o + L.E_FLAGS]! & L.F_IN_USE &&
          !(a[o + L.E_FLAGS]! & L.F_TEMPLATE) &&
          a[o + L.E_PROTO] === proto &&
          a[o + L.E_CADDR] === v.caddr &&
          a[o + L.E_CPORTS] === v.cports &&
          a[o + L.E_VADDR] === v.vaddr &&
          ((proto & L.PROTO_V6) === 0 || this.hiEqual(o, L.E_CADDR_HI, v.hi, 0))
        ) {
          this.spB1 = b1;
          this.spB2 = b2;
          return true;
        }
        this.unlockPair(b1, b2);
        return false;
      }
      this.unlockPair(b1, b2);
    }
  }
  /**
   * A flow just made pending from a client's cookie ACK (inserted with F_SYNPROXY |
   * F_SP_PENDING and the client's handshake in its SP words, NewFlow.spHandshake; its first touch
   * done) gets its timer `pendingMs` away. False if it is no longer there or no longer pending.
   */
  spBegin(e: number, v: FlowView, pendingMs: number, now: number): boolean {
    if (!this.lockFlow(e, v)) return false;
    const a = this.i32;
    const o = this.base(e);
    const pending = (a[o + L.E_FLAGS]! & L.F_SP_PENDING) !== 0;
    if (pending) a[o + L.E_EXPIRES] = (now + pendingMs) | 0;
    this.unlockPair(this.spB1, this.spB2);
    return pending;
  }

  /**
   * A client packet of pending flow v (lookupIn said FLOW_SP_PENDING): held in the shared area
   * when `hold` (it carries data or FIN) and there is room, bytes b[off, off+len) with its TCP
   * header at off + l4; and our SYN to the server is due again when it went ≥ resendMs ago — the
   * client retransmits, so our SYN (or the server's SYN-ACK) may have been lost: then w gets the
   * flow's SP words to rebuild it. Returns SPH_* bits, or −1 when the flow is pending no more
   * (the caller looks it up again).
   */
  spHold(
    v: FlowView,
    hold: boolean,
    b: Uint8Array,
    off: number,
    len: number,
    l4: number,
    w: Int32Array,
    resendMs: number,
    now: number,
  ): number {
    const e = v.entry;
    if (!this.lockFlow(e, v)) return -1;
    const a = this.i32;
    const o = this.base(e);
    if (!(a[o + L.E_FLAGS]! & L.F_SP_PENDING)) {
      this.unlockPair(this.spB1, this.spB2);
      return -1;
    }
    const s = this.spWords + e * L.SP_WORDS;
    let r = 0;
    if (hold) {
      const held = a[s + L.SP_HELD]!;
      const n = held >>> 16;
      const slot = n < L.HOLD_PER_FLOW && len <= L.HOLD_SLOT_BYTES ? this.holdAlloc(this.holdSource(o)) : -1;
      if (slot < 0) r |= slot === -2 ? SPH_REFUSED | SPH_SOURCE : SPH_REFUSED;
      else {
        const h = this.hold + L.HOLD_HDR_WORDS;
        const x = this.holdBytes;
        const d = this.holdData + slot * L.HOLD_SLOT_BYTES;
        for (let i = 0; i < len; i++) x[d + i] = b[off + i]!;
        const sh = h + slot * L.HOLD_SLOT_WORDS;
        a[sh + L.HS_NEXT] = 0;
        a[sh + L.HS_LEN] = len;
        a[sh + L.HS_L4] = l4;
        // Appended at the tail: replayed in the order they came.
        let ref = held & 0xffff;
        if (ref === 0) a[s + L.SP_HELD] = (slot + 1) | ((n + 1) << 16);
        else {
          for (let k = 1; a[h + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT] !== 0; k++) {
            if (k > L.HOLD_SLOTS) this.holdLoop(held & 0xffff);
            ref = a[h + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT]!;
          }
          a[h + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT] = slot + 1;
          a[s + L.SP_HELD] = (held & 0xffff) | ((n + 1) << 16);
        }
        a[sh + L.HS_OWNER] = 0; // on the flow's list now: no longer this worker's alone
        r |= SPH_HELD;
      }
    }
    if (((now - a[s + L.SP_SYN_AT]!) | 0) >= resendMs) {
      a[s + L.SP_SYN_AT] = now;
      for (let i = 0; i < L.SP_WORDS; i++) w[i] = a[s + i]!;
      r |= SPH_RESEND;
    }
    this.unlockPair(this.spB1, this.spB2);
    return r;
  }

  /**
   * The real server's SYN-ACK for flow v (found by lookupOut), acknowledging `ack`: with its ISN,
   * TSval and window scale (−1 = none) the flow's deltas are set (layout.ts SP_DELTA, SP_TSDELTA,
   * spServerOpts) and it is pending no more. w gets the SP
   * words as they were before (the handshake: our ACK to the server is built from them). Returns
   * the first held slot + 1 (0 = none; the caller replays and frees them), −2 when the flow was
   * already complete (a retransmitted SYN-ACK: w is filled, with the deltas), −1 when it is gone
   * or not proxied, −3 when `ack` is not our SYN's (the client's ISN + 1): nothing changes.
   */
  spComplete(v: FlowView, serverIsn: number, serverTs: number, serverWs: number, ack: number, w: Int32Array): number {
    const e = v.entry;
    if (!this.lockFlow(e, v)) return -1;
    const a = this.i32;
    const o = this.base(e);
    const flags = a[o + L.E_FLAGS]!;
    const s = this.spWords + e * L.SP_WORDS;
    for (let i = 0; i < L.SP_WORDS; i++) w[i] = a[s + i]!;
    if (!(flags & L.F_SYNPROXY) || !(flags & L.F_SP_PENDING) || ack !== ((w[L.SP_ISN]! + 1) | 0)) {
      this.unlockPair(this.spB1, this.spB2);
      return !(flags & L.F_SYNPROXY) ? -1 : ack !== ((w[L.SP_ISN]! + 1) | 0) ? -3 : -2;
    }
    a[s + L.SP_DELTA] = (w[L.SP_COOKIE]! - serverIsn) | 0;
    a[s + L.SP_TSDELTA] = (w[L.SP_OURTS]! - serverTs) | 0;
    a[s + L.SP_OPTS] = L.spServerOpts(w[L.SP_OPTS]!, serverWs);
    const held = w[L.SP_HELD]! & 0xffff;
    this.holdDetach(held);
    a[s + L.SP_HELD] = 0;
    a[o + L.E_FLAGS] = flags & ~L.F_SP_PENDING;
    this.unlockPair(this.spB1, this.spB2);
    Atomics.sub(a, L.H_SP_PENDING, 1);
    return held;
  }

  /**
   * A TCP SYN on entry e (at o) starts a new connection because the entry is a SYN-proxied flow
   * past its handshake that has ended — CLOSE (a RST) or TIME_WAIT, the states IPVS reuses
   * (conn_reuse_mode) and nf_synproxy reopens (TCP_CONNTRACK_CLOSE): the proxy made the server's
   * side of the old one, so the SYN must get a cookie of its own (a client reusing its port after
   * a RST would otherwise meet the old flow's numbers). Every SYN while the flow lives
   * (ESTABLISHED…) keeps it: it goes to the server, whose challenge ACK comes back adjusted — an
   * off-path SYN must not end a connection. Unlike the plain reuse, a flow a persistence template
   * controls is reused too: forwarded, the SYN would meet a server socket at the old numbers that
   * no handshake of ours can reach, and the new flow gets the template's server anyway.
   */
  private spReuse(o: number): boolean {
    const a = this.i32;
    const st = a[o + L.E_STATE]!;
    return (a[o + L.E_FLAGS]! & (L.F_SYNPROXY | L.F_SP_PENDING)) === L.F_SYNPROXY && (st === TCP_CLOSE || st === TCP_TIME_WAIT);
  }

  /** Entry e's SP words from a record (its deltas and options; no handshake, no held packets). */
  private spSet(e: number, r: NewFlow): void {
    const a = this.i32;
    const s = this.spWords + e * L.SP_WORDS;
    for (let i = 0; i < L.SP_WORDS; i++) a[s + i] = 0;
    a[s + L.SP_DELTA] = r.spDelta;
    a[s + L.SP_TSDELTA] = r.spTsDelta;
    a[s + L.SP_OPTS] = r.spOpts;
  }

  /** The SP words of entry e at word o (a SYN-proxied flow's record: delta, timestamp delta, options); control thread. */
  spRecordWords(e: number): [number, number, number] {
    const s = this.spWords + e * L.SP_WORDS;
    return [this.i32[s + L.SP_DELTA]!, this.i32[s + L.SP_TSDELTA]!, this.i32[s + L.SP_OPTS]!];
  }

  /** Flow v's SP words into w (a pending flow's handshake); false when it is gone or not proxied. */
  spRead(v: FlowView, w: Int32Array): boolean {
    const e = v.entry;
    if (!this.lockFlow(e, v)) return false;
    const a = this.i32;
    const s = this.spWords + e * L.SP_WORDS;
    for (let i = 0; i < L.SP_WORDS; i++) w[i] = a[s + i]!;
    const ok = (a[this.base(e) + L.E_FLAGS]! & L.F_SYNPROXY) !== 0;
    this.unlockPair(this.spB1, this.spB2);
    return ok;
  }

  /** The held slot after `slot` (0-based) of the same flow + 1, 0 = the last. */
  holdNext(slot: number): number {
    return this.i32[this.hold + L.HOLD_HDR_WORDS + slot * L.HOLD_SLOT_WORDS + L.HS_NEXT]!;
  }
  /** A held packet's length, its TCP header's offset, and the byte offset of its data in holdBytes. */
  holdLen(slot: number): number {
    return this.i32[this.hold + L.HOLD_HDR_WORDS + slot * L.HOLD_SLOT_WORDS + L.HS_LEN]!;
  }
  holdL4(slot: number): number {
    return this.i32[this.hold + L.HOLD_HDR_WORDS + slot * L.HOLD_SLOT_WORDS + L.HS_L4]!;
  }
  holdAt(slot: number): number {
    return this.holdData + slot * L.HOLD_SLOT_BYTES;
  }
  /** Held slots in use (a gauge). */
  holdUsed(): number {
    return Atomics.load(this.i32, this.hold + L.HOLD_USED);
  }
  /** SYN-proxied flows whose real server has not answered yet (a gauge). */
  spPending(): number {
    return Atomics.load(this.i32, L.H_SP_PENDING);
  }

  /** The held-slot counter of the source of the entry at o: the per-source counters' keyed hash, folded. */
  private holdSource(o: number): number {
    const a = this.i32;
    const slot = this.sourceSlot((a[o + L.E_PROTO]! & L.PROTO_V6) !== 0, a[o + L.E_CADDR]!, a[o + L.E_CADDR_HI]!, a[o + L.E_CADDR_HI + 1]!);
    return slot & (L.HOLD_SOURCES - 1);
  }

  /** Held slots counted at source counter src (holdSource). */
  holdAtSource(src: number): number {
    return Atomics.load(this.i32, this.hold + L.HOLD_SRC_BASE + src);
  }

  /**
   * Takes a free held slot (0-based) for source counter src, in this worker's hands (HS_OWNER)
   * until the caller attaches it to a flow; −1 when none is free, −2 when src holds
   * HOLD_PER_SOURCE. The owner is written before the slot leaves the free list: a worker dying
   * in between leaves it findable (holdReclaim).
   */
  private holdAlloc(src: number): number {
    const a = this.i32;
    const h = this.hold;
    this.lockWord(h + L.HOLD_LOCK);
    const ref = a[h + L.HOLD_FREE]!;
    let slot = -1;
    if (a[h + L.HOLD_SRC_BASE + src]! >= L.HOLD_PER_SOURCE) slot = -2;
    else if (ref !== 0) {
      slot = ref - 1;
      const sh = h + L.HOLD_HDR_WORDS + slot * L.HOLD_SLOT_WORDS;
      a[sh + L.HS_OWNER] = this.owner;
      a[sh + L.HS_SRC] = src;
      a[h + L.HOLD_FREE] = a[sh + L.HS_NEXT]!;
      a[h + L.HOLD_USED]!++;
      a[h + L.HOLD_SRC_BASE + src]!++;
    }
    Atomics.store(a, h + L.HOLD_LOCK, 0);
    return slot;
  }

  /** A flow's list of held slots (first slot + 1) taken off it by this worker (to replay or free): in its hands. Caller holds the flow's bucket locks. */
  private holdDetach(first: number): void {
    const a = this.i32;
    const h = this.hold + L.HOLD_HDR_WORDS;
    for (let ref = first, n = 0; ref !== 0 && n < L.HOLD_PER_FLOW; ref = a[h + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT]!, n++)
      a[h + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_OWNER] = this.owner;
  }

  /** Gives back a detached list of held slots (first slot + 1; 0 = none). */
  holdRelease(first: number): void {
    const a = this.i32;
    const h = this.hold;
    let ref = first;
    for (let n = 1; ref !== 0; n++) {
      if (n > L.HOLD_SLOTS) this.holdLoop(first);
      const sh = h + L.HOLD_HDR_WORDS + (ref - 1) * L.HOLD_SLOT_WORDS;
      const next = a[sh + L.HS_NEXT]!;
      this.lockWord(h + L.HOLD_LOCK);
      a[h + L.HOLD_SRC_BASE + a[sh + L.HS_SRC]!]!--;
      a[sh + L.HS_NEXT] = a[h + L.HOLD_FREE]!;
      a[h + L.HOLD_FREE] = ref;
      a[h + L.HOLD_USED]!--;
      a[sh + L.HS_OWNER] = 0;
      Atomics.store(a, h + L.HOLD_LOCK, 0);
      ref = next;
    }
  }

  /**
   * Gives back the held slots a dead worker (lock owner id `owner`) left in its hands — taken and
   * not yet on a flow's list, or taken off one (the server's SYN-ACK, a removal) and not yet
   * freed — and recounts the area: HOLD_USED and the per-source counters from the slots not on
   * the free list. Control thread, after releaseLocksOf(owner) and before the worker's
   * replacement starts; the other workers go on meanwhile (the area's lock is taken; the flows'
   * lists are read first, so a slot another worker detaches meanwhile carries its owner by the
   * time it is checked). Returns the slots given back.
   */
  holdReclaim(owner: number): number {
    const a = this.i32;
    const h = this.hold;
    const sh = h + L.HOLD_HDR_WORDS;
    const mark = new Uint8Array(L.HOLD_SLOTS); // 1 attached to a flow, 2 free
    // Attached: on a pending flow's list (a slot the dead worker attached but had not yet
    // disowned must stay). Read without the bucket locks: a list seen changing only keeps more.
    for (let e = 0; e < this.capacity; e++) {
      const o = this.base(e);
      if ((a[o + L.E_FLAGS]! & (L.F_IN_USE | L.F_SP_PENDING)) !== (L.F_IN_USE | L.F_SP_PENDING)) continue;
      for (
        let ref = a[this.spWords + e * L.SP_WORDS + L.SP_HELD]! & 0xffff, n = 0;
        ref > 0 && ref <= L.HOLD_SLOTS && n < L.HOLD_PER_FLOW;
        n++
      ) {
        mark[ref - 1] = 1;
        ref = a[sh + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT]!;
      }
    }
    this.lockWord(h + L.HOLD_LOCK);
    let free = 0;
    for (
      let ref = a[h + L.HOLD_FREE]!;
      ref > 0 && ref <= L.HOLD_SLOTS && mark[ref - 1] !== 2;
      ref = a[sh + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT]!
    ) {
      mark[ref - 1] = 2;
      free++;
    }
    let reclaimed = 0;
    for (let i = 0; i < L.HOLD_SLOTS; i++) {
      const w = sh + i * L.HOLD_SLOT_WORDS;
      if (a[w + L.HS_OWNER] !== owner) continue;
      if (mark[i] === 0) {
        a[w + L.HS_NEXT] = a[h + L.HOLD_FREE]!;
        a[h + L.HOLD_FREE] = i + 1;
        mark[i] = 2;
        free++;
        reclaimed++;
      }
      Atomics.compareExchange(a, w + L.HS_OWNER, owner, 0);
    }
    a[h + L.HOLD_USED] = L.HOLD_SLOTS - free;
    for (let i = 0; i < L.HOLD_SOURCES; i++) a[h + L.HOLD_SRC_BASE + i] = 0;
    for (let i = 0; i < L.HOLD_SLOTS; i++)
      if (mark[i] !== 2) a[h + L.HOLD_SRC_BASE + (a[sh + i * L.HOLD_SLOT_WORDS + L.HS_SRC]! & (L.HOLD_SOURCES - 1))]!++;
    Atomics.store(a, h + L.HOLD_LOCK, 0);
    return reclaimed;
  }

  /** drop_packet's rate (defense.ts): refuse 1 of every this many new flows; 0 = off. */
  dropRate(): number {
    return this.i32[L.H_DROP_RATE]!;
  }

  /** Half-open entries a client source may hold now (defense.ts); 0 = no limit. */
  sourceLimit(): number {
    return this.i32[L.H_SRC_LIMIT]!;
  }

  /** MTU of the route to real server `rs` (the control thread refreshes it), 0 = unknown. */
  routeMtu(rs: number): number {
    return this.rs[rs * L.RS_WORDS + L.RS_MTU]!;
  }

  /** Copies entry e (at word o) into v; the caller holds one of its bucket locks. */
  private view(e: number, o: number, v: FlowView): void {
    const a = this.i32;
    v.entry = e;
    const proto = a[o + L.E_PROTO]!;
    v.proto = proto;
    const flags = a[o + L.E_FLAGS]!;
    v.fwd = flags & L.FWD_MASK;
    v.sp = flags & (L.F_SYNPROXY | L.F_SP_PENDING);
    if (flags & L.F_SYNPROXY) {
      const s = this.spWords + e * L.SP_WORDS;
      v.spDelta = a[s + L.SP_DELTA]!;
      v.spTsDelta = a[s + L.SP_TSDELTA]!;
      v.spOpts = a[s + L.SP_OPTS]!;
    }
    v.state = a[o + L.E_STATE]!;
    v.caddr = a[o + L.E_CADDR]!;
    v.cports = a[o + L.E_CPORTS]!;
    v.vaddr = a[o + L.E_VADDR]!;
    v.daddr = a[o + L.E_DADDR]!;
    v.dports = a[o + L.E_DPORTS]!;
    v.laddr = a[o + L.E_LADDR]!;
    v.rs = a[o + L.E_RS]!;
    v.svc = a[o + L.E_SVC]!;
    v.pp = a[o + L.E_PP]!;
    v.ppSeq = a[o + L.E_PP_SEQ]!;
    if ((proto & L.PROTO_V6) !== 0) {
      // Unrolled (HI_WORDS = 12): every IPv6 packet copies them, and the loop cost ~10 ns (perf/LOG.md).
      const hi = v.hi;
      const h = o + L.E_HI;
      hi[0] = a[h]!;
      hi[1] = a[h + 1]!;
      hi[2] = a[h + 2]!;
      hi[3] = a[h + 3]!;
      hi[4] = a[h + 4]!;
      hi[5] = a[h + 5]!;
      hi[6] = a[h + 6]!;
      hi[7] = a[h + 7]!;
      hi[8] = a[h + 8]!;
      hi[9] = a[h + 9]!;
      hi[10] = a[h + 10]!;
      hi[11] = a[h + 11]!;
    }
  }

  /**
   * Control thread: installs or refreshes another node's flow as a shadow entry (not counted, not
   * synced back) that a packet can adopt without waiting for Redis. r is the flow as synced: its
   * forwarding method in r.flags (| F_NOOUTPUT; | F_INACTIVE when its state counts as inactive),
   * r.state and r.expires as the record has them; r.flags gains F_SHADOW. A live local entry
   * with the same key wins and is left alone. Returns the entry or -1 (table full / key is local,
   * or `mayInsert` false — the shadow cap — and no shadow of the key to refresh).
   */
  putShadow(r: NewFlow, mayInsert = true): number {
    const a = this.i32;
    const { proto, caddr, cports, vaddr, hi } = r;
    r.flags |= L.F_SHADOW;
    const b1 = this.bucketIn(proto, caddr, cports, vaddr, hi);
    this.lockBucket(b1);
    const found = this.findIn(b1, proto, caddr, cports, vaddr, hi);
    if (found >= 0) {
      const o = this.base(found);
      const sameServer =
        a[o + L.E_DADDR] === r.daddr &&
        a[o + L.E_DPORTS] === r.dports &&
        ((proto & L.PROTO_V6) === 0 ||
          (a[o + L.E_DADDR_HI] === hi[6] && a[o + L.E_DADDR_HI + 1] === hi[7] && a[o + L.E_DADDR_HI + 2] === hi[8]));
      if (a[o + L.E_FLAGS]! & L.F_SHADOW && sameServer) {
        a[o + L.E_STATE] = r.state;
        a[o + L.E_EXPIRES] = r.expires;
        a[o + L.E_FLAGS] = (a[o + L.E_FLAGS]! & ~L.F_INACTIVE) | (r.flags & L.F_INACTIVE);
        a[o + L.E_PP] = r.pp;
        a[o + L.E_PP_SEQ] = r.ppSeq;
        if (r.sp !== 0) {
          this.spSet(found, r);
          a[o + L.E_FLAGS] = a[o + L.E_FLAGS]! | L.F_SYNPROXY;
        }
        this.unlockBucket(b1);
        return found;
      }
      this.unlockBucket(b1);
      return -1;
    }
    this.unlockBucket(b1);
    if (!mayInsert) return -1;
    r.inBucket = b1;
    const e = this.insert(r);
    return e >= 0 && r.created ? e : -1;
  }

  // ── insert / remove ──────────────────────────────────────────────────────────────────────
  /**
   * Inserts a new entry (flow.ts NewFlow) bound to real server r.rs (counted INACTIVE, OVERLOAD
   * checked) in state NONE with a 2 s timer like ip_vs_conn_new; the caller then touches it with
   * the first packet (touchIn; insertIn does both under one lock). Returns the entry with r.created true, an existing entry with the
   * same client→server key (another worker won the race: nothing was bound; r.created false), −1
   * when the table is full, −2 for a full-NAT entry whose server→client key (pool address and port)
   * is already in use, or −3 when either of its chains already holds CHAIN_LIMIT entries (hash
   * flooding: see the top).
   *
   * With F_TEMPLATE in r.flags it is a persistence template instead: counted in PersistConn,
   * timer r.templateMs, never matched by packets (findIn/findOut skip it) but by findTemplate.
   * With F_SHADOW it is another node's flow (putShadow): not counted, and its synced state and
   * expiry (r.state, r.expires) are in place before it is linked, so no worker or sweeper ever
   * sees it half made. r.pp/r.ppSeq: a connection's PROXY protocol words (layout.ts E_PP),
   * likewise in place before it is linked — a packet forwarded without its shift would corrupt
   * the server's stream.
   *
   * r.inBucket ≥ 0 is the bucket of r's client→server key from the caller's lookup of that key
   * (FlowKey.bucket): it spares hashing the key again.
   */
  insert(r: NewFlow): number {
    return this.link(r, null, 0, 0);
  }

  /**
   * insert() and the new connection's first packet in one (ip_vs_conn_new, then the state
   * update): the entry — or the one that won the race, r.created false — is touched with `ev`
   * and copied into v under the in-bucket lock insert took, as touchIn() would do after it,
   * without a second hash of the key and a second lock. Not for templates and shadows.
   */
  insertIn(r: NewFlow, v: FlowView, ev: number, now: number): number {
    return this.link(r, v, ev, now);
  }

  /** insert(), and with a view (insertIn) the first touch under the in-bucket lock. */
  private link(r: NewFlow, v: FlowView | null, ev: number, now: number): number {
    const a = this.i32;
    const { proto, caddr, cports, vaddr, daddr, dports, laddr, flags: fwdFlags, hi } = r;
    const isTemplate = (fwdFlags & L.F_TEMPLATE) !== 0;
    const isShadow = (fwdFlags & L.F_SHADOW) !== 0;
    r.created = false;
    // The in-key's bucket: from the caller's lookup of the same key, or hashed here.
    const b1 = r.inBucket >= 0 ? r.inBucket : this.bucketIn(proto, caddr, cports, vaddr, hi);
    r.inBucket = -1;
    const b2 = this.bucketOut(proto, daddr, dports, laddr, hi);
    // Allocate before taking the bucket locks: an allocated, unlinked entry is private.
    this.lockWord(L.H_ALLOC_LOCK);
    const ref = a[L.H_FREE_HEAD]!;
    if (ref === 0) {
      Atomics.store(a, L.H_ALLOC_LOCK, 0);
      return -1;
    }
    const e = ref - 1;
    const o = this.entries + e * L.ENTRY_WORDS;
    a[L.H_FREE_HEAD] = a[o + L.E_NEXT_IN]!;
    Atomics.store(a, L.H_ALLOC_LOCK, 0);

    a[o + L.E_PROTO] = proto;
    a[o + L.E_STATE] = isShadow ? r.state : 0;
    a[o + L.E_CADDR] = caddr;
    a[o + L.E_CPORTS] = cports;
    a[o + L.E_VADDR] = vaddr;
    a[o + L.E_DADDR] = daddr;
    a[o + L.E_DPORTS] = dports;
    a[o + L.E_LADDR] = laddr;
    if (proto & L.PROTO_V6) for (let i = 0; i < L.HI_WORDS; i++) a[o + L.E_HI + i] = hi[i]!;
    a[o + L.E_RS] = r.rs;
    a[o + L.E_SVC] = r.svc;
    a[o + L.E_IN_PKTS] = 0;
    a[o + L.E_CONTROL] = 0;
    a[o + L.E_NCONTROL] = isTemplate ? 0 : r.pp; // E_PP
    a[o + L.E_TIMEOUT] = isTemplate ? r.templateMs : r.ppSeq; // E_PP_SEQ
    a[o + L.E_EXPIRES] = isShadow ? r.expires : (r.now + (isTemplate ? r.templateMs : a[L.H_TIMEOUTS + 0]!)) | 0;
    // A shadow is not ours to sync until a packet adopts it.
    a[o + L.E_SYNCED] = isShadow ? r.expires : r.now;

    this.lockPair(b1, b2);
    const existing = isTemplate ? this.findTemplate(b1, proto, caddr, cports, vaddr, hi) : this.findIn(b1, proto, caddr, cports, vaddr, hi);
    if (existing >= 0) {
      if (v !== null) {
        // Touched under b1 alone (as touchIn); the entry slot goes back after the locks.
        if (b1 !== b2) this.unlockBucket(b2);
        this.firstTouch(existing, v, ev, now);
        this.unlockBucket(b1);
      } else {
        this.unlockPair(b1, b2);
      }
      this.pushFree(e);
      return existing;
    }
    const inLen = this.lastWalk; // the lookup above found nothing: it walked the whole in-chain
    if ((fwdFlags & L.FWD_MASK) === L.FWD_FULLNAT && this.findOut(b2, proto, daddr, dports, laddr, hi) >= 0) {
      // The pool address and port chosen for this flow are taken: the caller picks another.
      this.unlockPair(b1, b2);
      this.pushFree(e);
      return -2;
    }
    if (inLen >= CHAIN_LIMIT || this.chainLength(this.outHeads + b2, L.E_NEXT_OUT) >= CHAIN_LIMIT) {
      this.unlockPair(b1, b2);
      this.pushFree(e);
      return -3;
    }
    // A new TCP/SCTP connection starts half-open (state NONE), counted for its source while the
    // per-source limit is on (hash + atomic add: ~100 ns a SYN, for nothing while it is off).
    const p8 = proto & 0xff;
    const halfOpen = !isTemplate && !isShadow && (p8 === IPPROTO_TCP || p8 === IPPROTO_SCTP) && a[L.H_SRC_LIMIT] !== 0;
    // A SYN-proxied flow from Redis: its words in place before it is linked (as E_PP above). One
    // made by a cookie ACK (F_SP_PENDING in its flags) is pending from the start, with the
    // client's handshake in its words before anyone can find it (another worker may hold the
    // client's next packet for it or take the server's SYN-ACK); spBegin sets its timer next.
    if (r.sp !== 0) this.spSet(e, r);
    else if (fwdFlags & L.F_SP_PENDING) {
      const s = this.spWords + e * L.SP_WORDS;
      const w = r.spHandshake;
      for (let i = 0; i < L.SP_HELD; i++) a[s + i] = w !== null ? w[i]! : 0;
      a[s + L.SP_HELD] = 0;
    }
    a[o + L.E_FLAGS] =
      L.F_IN_USE | (isTemplate || isShadow ? 0 : L.F_INACTIVE) | (halfOpen ? L.F_HALFOPEN : 0) | (r.sp !== 0 ? L.F_SYNPROXY : 0) | fwdFlags;
    a[o + L.E_NEXT_IN] = a[this.inHeads + b1]!;
    a[o + L.E_NEXT_OUT] = a[this.outHeads + b2]!;
    a[this.inHeads + b1] = e + 1;
    a[this.outHeads + b2] = e + 1;
    if (v !== null) {
      if (b1 !== b2) this.unlockBucket(b2);
      this.firstTouch(e, v, ev, now);
      this.unlockBucket(b1);
    } else {
      this.unlockPair(b1, b2);
    }
    Atomics.add(a, L.H_COUNT, 1);
    if (fwdFlags & L.F_SP_PENDING) Atomics.add(a, L.H_SP_PENDING, 1);
    if (halfOpen) this.sourceAdd(o, 1);
    if (isShadow) Atomics.add(a, L.H_SHADOWS, 1);
    else this.bindRealServer(r.rs, isTemplate);
    r.created = true;
    return e;
  }

  private pushFree(e: number): void {
    const a = this.i32;
    const o = this.entries + e * L.ENTRY_WORDS;
    a[o + L.E_FLAGS] = 0;
    this.lockWord(L.H_ALLOC_LOCK);
    a[o + L.E_NEXT_IN] = a[L.H_FREE_HEAD]!;
    a[o + L.E_NEXT_OUT] = 0;
    a[L.H_FREE_HEAD] = e + 1;
    Atomics.store(a, L.H_ALLOC_LOCK, 0);
  }

  private bindRealServer(rs: number, isTemplate: boolean): void {
    const r = this.rs;
    const o = rs * L.RS_WORDS;
    if (isTemplate) Atomics.add(r, o + L.RS_PERSIST, 1);
    else Atomics.add(r, o + L.RS_INACTIVE, 1);
    const upper = r[o + L.RS_UTHRESH]!;
    if (upper !== 0 && Atomics.load(r, o + L.RS_ACTIVE) + Atomics.load(r, o + L.RS_INACTIVE) >= upper) {
      Atomics.or(r, o + L.RS_FLAGS, L.RSF_OVERLOAD);
    }
  }

  private unbindRealServer(rs: number, flags: number): void {
    const r = this.rs;
    const o = rs * L.RS_WORDS;
    Atomics.sub(r, o + (flags & L.F_TEMPLATE ? L.RS_PERSIST : flags & L.F_INACTIVE ? L.RS_INACTIVE : L.RS_ACTIVE), 1);
    const total = Atomics.load(r, o + L.RS_ACTIVE) + Atomics.load(r, o + L.RS_INACTIVE);
    const lower = r[o + L.RS_LTHRESH]!;
    const upper = r[o + L.RS_UTHRESH]!;
    let clear: boolean;
    if (lower !== 0) clear = total < lower;
    else if (upper !== 0) clear = total * 4 < upper * 3;
    else clear = true;
    if (clear) Atomics.and(r, o + L.RS_FLAGS, ~L.RSF_OVERLOAD);
  }

  /**
   * Removes entry e if it is still live and (when onlyIfExpired) its timer is due at `now`.
   * Takes both bucket locks; the caller must hold none. Returns true if removed.
   * A worker that found e under a lock it has since released passes the key it found it by
   * (expectProto ≥ 0, the client address and ports): if the sweeper freed e meanwhile and
   * another flow took the slot, that flow is left alone. With expectState ≥ 0 the entry must
   * also still be in that state (drop_entry: a flow that completed its handshake since is kept).
   */
  remove(e: number, onlyIfExpired: boolean, now: number, expectProto = -1, expectCaddr = 0, expectCports = 0, expectState = -1): boolean {
    const a = this.i32;
    const o = this.entries + e * L.ENTRY_WORDS;
    let b1: number, b2: number;
    for (;;) {
      // Key fields cannot change while the entry is linked; if it was freed and reused between
      // the unlocked read and the lock, the buckets differ and we try again with the new key.
      b1 = this.entryBucketIn(o);
      b2 = this.entryBucketOut(o);
      this.lockPair(b1, b2);
      if (b1 === this.entryBucketIn(o) && b2 === this.entryBucketOut(o)) break;
      this.unlockPair(b1, b2);
    }
    const flags = a[o + L.E_FLAGS]!;
    if (!(flags & L.F_IN_USE) || (onlyIfExpired && ((a[o + L.E_EXPIRES]! - now) | 0) > 0)) {
      this.unlockPair(b1, b2);
      return false;
    }
    if (
      expectProto >= 0 &&
      (a[o + L.E_PROTO] !== expectProto ||
        a[o + L.E_CADDR] !== expectCaddr ||
        a[o + L.E_CPORTS] !== expectCports ||
        flags & L.F_TEMPLATE ||
        (expectState >= 0 && a[o + L.E_STATE] !== expectState))
    ) {
      this.unlockPair(b1, b2);
      return false;
    }
    if (onlyIfExpired && flags & L.F_TEMPLATE && Atomics.load(a, o + L.E_NCONTROL) > 0) {
      // ip_vs_conn_expire: a template still controlling connections lives on, 60 s at a time.
      a[o + L.E_TIMEOUT] = L.TEMPLATE_REARM_MS;
      a[o + L.E_EXPIRES] = (now + L.TEMPLATE_REARM_MS) | 0;
      this.unlockPair(b1, b2);
      return false;
    }
    if (!this.unlink(this.inHeads + b1, e, L.E_NEXT_IN)) {
      this.unlockPair(b1, b2); // not on this chain: it was recycled with another key
      return false;
    }
    this.unlink(this.outHeads + b2, e, L.E_NEXT_OUT);
    a[o + L.E_FLAGS] = 0;
    const control = a[o + L.E_CONTROL]!;
    let held = 0;
    if (flags & L.F_SP_PENDING) {
      const sw = this.spWords + e * L.SP_WORDS + L.SP_HELD;
      held = a[sw]! & 0xffff;
      this.holdDetach(held);
      a[sw] = 0;
    }
    this.unlockPair(b1, b2);
    if (flags & L.F_SP_PENDING) {
      Atomics.sub(a, L.H_SP_PENDING, 1);
      this.holdRelease(held);
    }
    // Key words stay intact until pushFree below: the source can still be hashed.
    if (flags & L.F_HALFOPEN) this.sourceAdd(o, -1);
    Atomics.sub(a, L.H_COUNT, 1);
    // The template outlives what it controls (its NCONTROL > 0 keeps it), so the link is valid.
    if (control !== 0) Atomics.sub(a, this.base(control - 1) + L.E_NCONTROL, 1);
    if (flags & L.F_SHADOW) Atomics.sub(a, L.H_SHADOWS, 1);
    else this.unbindRealServer(a[o + L.E_RS]!, flags);
    this.pushFree(e);
    return true;
  }

  /** The buckets of entry words at o (its two keys as stored; no allocation: workers remove too). */
  private entryBucketIn(o: number): number {
    const a = this.i32;
    const p = a[o + L.E_PROTO]!;
    if ((p & L.PROTO_V6) === 0) return this.bucket(p, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, a[o + L.E_VADDR]!);
    return this.bucket6(p, a, o + L.E_CADDR_HI, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, o + L.E_VADDR_HI, a[o + L.E_VADDR]!);
  }
  private entryBucketOut(o: number): number {
    const a = this.i32;
    const p = a[o + L.E_PROTO]!;
    if ((p & L.PROTO_V6) === 0) return this.bucket(p, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, a[o + L.E_LADDR]!);
    return this.bucket6(p, a, o + L.E_DADDR_HI, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, o + L.E_LADDR_HI, a[o + L.E_LADDR]!);
  }
  /** A view of the entry's high words (control-thread paths only: remove, listings). */
  entryHi(o: number): Int32Array {
    return this.i32.subarray(o + L.E_HI, o + L.E_HI + L.HI_WORDS);
  }

  private unlink(headIdx: number, e: number, nextField: number): boolean {
    const a = this.i32;
    let prevIdx = headIdx;
    let ref = a[headIdx]!;
    for (let n = 1; ref !== 0; n++) {
      if (n > this.capacity) this.chainLoop(headIdx);
      if (ref === e + 1) {
        a[prevIdx] = a[this.entries + e * L.ENTRY_WORDS + nextField]!;
        return true;
      }
      prevIdx = this.entries + (ref - 1) * L.ENTRY_WORDS + nextField;
      ref = a[prevIdx]!;
    }
    return false;
  }

  /** Removes every entry whose timer is due; returns how many. Control thread, once a second. */
  expire(now: number): number {
    const a = this.i32;
    let removed = 0;
    for (let e = 0; e < this.capacity; e++) {
      const o = this.entries + e * L.ENTRY_WORDS;
      if (a[o + L.E_FLAGS]! & L.F_IN_USE && ((a[o + L.E_EXPIRES]! - now) | 0) <= 0) {
        if (this.remove(e, true, now)) removed++;
      }
    }
    return removed;
  }

  /** Calls fn for every live entry (unlocked read: a consistent-enough view for listings). */
  forEach(fn: (e: number, o: number) => void): void {
    const a = this.i32;
    for (let e = 0; e < this.capacity; e++) {
      const o = this.entries + e * L.ENTRY_WORDS;
      if (a[o + L.E_FLAGS]! & L.F_IN_USE) fn(e, o);
    }
  }
}

function setTimeouts(a: Int32Array, t: TableTimeouts): void {
  for (let s = 0; s < TCP_STATE_COUNT; s++) a[L.H_TIMEOUTS + s] = Math.round((t.tcp[s] ?? 0) * 1000);
  a[L.H_TIMEOUTS + L.TIMEOUT_UDP] = Math.round(t.udp * 1000);
  const sctp = t.sctp ?? SCTP_DEFAULT_TIMEOUTS;
  for (let s = 0; s < SCTP_STATE_COUNT; s++) a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + s] = Math.round((sctp[s] ?? 0) * 1000);
}

/** Real-server region for `slots` servers. */
export function createRealServerRegion(slots: number): SharedArrayBuffer {
  return new SharedArrayBuffer(slots * L.RS_WORDS * 4);
}

/**
 * An entry's address as text (control thread: listings, API). `field` is E_CADDR, E_VADDR,
 * E_DADDR or E_LADDR; IPv6 entries add the address's high words from the matching E_*_HI.
 */
export function entryAddr(a: Int32Array, o: number, field: number): string {
  if ((a[o + L.E_PROTO]! & L.PROTO_V6) === 0) return formatIPv4(a[o + field]!);
  const hi = field === L.E_CADDR ? L.E_CADDR_HI : field === L.E_VADDR ? L.E_VADDR_HI : field === L.E_DADDR ? L.E_DADDR_HI : L.E_LADDR_HI;
  return formatIPv6([a[o + hi]!, a[o + hi + 1]!, a[o + hi + 2]!, a[o + field]!]);
}
