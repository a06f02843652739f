/**
 * Overload defenses: what IPVS does when its connection table eats the node's memory
 * (kernel net/netfilter/ipvs/ip_vs_ctl.c update_defense_level + defense_work_handler,
 * ip_vs_conn.c ip_vs_random_dropentry + todrop_entry, ip_vs_core.c/ip_vs.h ip_vs_todrop,
 * ip_vs_proto_tcp.c tcp_states_dos; Documentation/networking/ipvs-sysctl.rst), adapted to a table
 * of fixed size. docs/defense.md explains each one with its kernel counterpart and default.
 *
 * The trigger. The kernel compares available memory with `amemthresh` (pages) once a second. A
 * uvs table cannot grow, so its scarce resource is free entries: `availmem` = capacity − live
 * entries, `amemthresh` = a number of free entries (default capacity/16). Full-NAT real servers
 * have a second one, their pool ports (every entry to a server holds one of its pool
 * address × port pairs): a server with fewer free pairs than the same share of its pairs
 * (amemthresh / capacity, rounded up) is short of room too. Either shortage is the kernel's `nomem`.
 *
 * Each defense has the kernel's sysctl modes: 0 off; 1 automatic, off now; 2 automatic, on now
 * (the value turns 1 → 2 when nomem is seen and 2 → 1 when it is gone, as /proc shows it);
 * 3 always on. uvs adds a hold (`holdTime`, default 60 s; 0 = the kernel's rule): an automatic
 * drop_entry, secure_tcp or per-source limit stays on until no tick has been short of room for
 * that long. Memory comes back slowly; free entries come back the moment a defense acts, and
 * without the hold the defenses switched off a second later, the real servers' retransmitted
 * SYN-ACKs re-armed the flood's entries for the normal 60 s, and the table sat at amemthresh.
 * drop_packet has no hold: its rate follows the room there is. Once a second tick():
 *  - drop_entry, by `dropEntryScope`:
 *    · `halfOpen` (uvs, the default): only entries whose handshake never completed — TCP
 *      SYN_RECV and SYNACK, SCTP INIT1 and INIT — nearest their timer first, never a flow past
 *      its handshake, a UDP flow, a template or a SYN-proxied flow whose client proved its
 *      address (pending). How many a tick: the kernel's expected share of them (it scans 1/32 of
 *      the table, so 1/32 of the half-open entries) and, while short of room, as many as bring
 *      free entries back to amemthresh (and short full-NAT pools back to their share). A real
 *      client's handshake re-arms its entry with every retransmitted SYN (Linux: 1, 3, 7, 15 s),
 *      so the entries nearest expiry are those silent longest: a spoofed SYN's.
 *    · `kernel` (ip_vs_random_dropentry exactly): scans capacity/32 entry slots from a random
 *      start (the kernel scans 1/32 of its buckets; uvs's buckets are as many as its slots, so the
 *      expected work is the same) and removes half-open TCP entries (SYN_RECV, SYNACK) and SCTP
 *      (INIT1, INIT), and of established TCP/SCTP and all UDP entries those todrop_entry picks:
 *      idle for 60 s and with 1–8 client packets, 1 in n of those with n packets — an idle
 *      established connection too (a burst that filled the default table cost 36 of 100 idle
 *      connections in the lab, issue 25).
 *    Templates are never dropped (older kernels' rule: uvs templates have no ASSURED state to
 *    tell a flood's from a client's).
 *  - drop_packet: workers refuse 1 of every `rate` new flows; rate = amemthresh / (amemthresh −
 *    availmem) in mode 1/2 (1 = every flow once the table is full), am_droprate in mode 3.
 *  - secure_tcp: workers use tcp_states_dos and, a uvs addition after 2.4's
 *    vs_timeout_table_dos (SYN_RECV 10 s), the short `secureTcpTimeout` for every half-open TCP
 *    state, re-armed only by the client's packets (a server retransmitting its SYN-ACK to a
 *    spoofed client would keep the entry alive). Entries already half-open when it switches on
 *    are shortened here, measured from their last packet: a spoofed SYN never sends a second
 *    packet, so the worker would never re-arm it.
 *  - half-open limit per source (uvs; the kernel has none): workers refuse a new TCP/SCTP flow
 *    from a source (IPv4 address, IPv6 /64) that holds `maxHalfOpenPerSource` half-open entries.
 *  - SYN proxy (uvs, lb/synproxy.ts): workers answer SYNs with cookies, no entry. In mode 1–2 it
 *    frees the table it defends: the flood's SYNs take no entries, nomem goes, the hold runs out
 *    — and without a rule of its own it would switch off and let the flood fill the table again,
 *    every holdTime. So it also stays on while the cookies answered since the last tick (a rate,
 *    `cookieRate`), each made a half-open entry living the half-open timeout (secureTcpTimeout
 *    when secure_tcp is not off, else the SYN_RECV timeout), would take more than the room above
 *    amemthresh: cookieRate × timeout > free entries − amemthresh. A sustained flood never turns
 *    it off; once the flood stops, the clients' own SYNs fit and the hold ends it.
 *
 * All of this runs on the control thread, never per packet: workers only read the header words
 * written here (layout.ts H_SECURE_TCP … H_SRC_LIMIT). Work per tick is bounded: capacity/32
 * slots for the kernel's drop_entry, two passes over at most DROP_SCAN_MAX slots for the
 * half-open one, at most SECURE_SCAN_MAX slots for secure_tcp's shortening.
 */
import { createHash, randomFillSync } from 'node:crypto';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../net/packet';
import * as L from './layout';
import { SCTP_S_ESTABLISHED, SCTP_S_INIT, SCTP_S_INIT1 } from './sctp-state';
import { TCP_ESTABLISHED, TCP_SYN_RECV, TCP_SYN_SENT, TCP_SYNACK } from './state';
import type { ConnTable } from './table';

export const MODE_OFF = 0;
export const MODE_AUTO = 1;
export const MODE_AUTO_ACTIVE = 2;
export const MODE_ALWAYS = 3;

/**
 * What drop_entry may drop (config `defense.dropEntryScope`): `halfOpen` only entries whose
 * handshake never completed, nearest their timer first (uvs's default); `kernel` what
 * ip_vs_random_dropentry drops, idle established connections and UDP flows included.
 */
export type DropEntryScope = 'halfOpen' | 'kernel';
export const DROP_ENTRY_SCOPES: readonly DropEntryScope[] = ['halfOpen', 'kernel'];

/** The settings (config `defense:`); modes 0–3 as the kernel's sysctls. */
export interface DefenseSettings {
  /** Free entries below which the table is short of room (kernel amemthresh, in pages there). */
  amemthresh: number;
  /** drop_packet's rate in mode 3 (kernel am_droprate, default 10). */
  amDroprate: number;
  dropEntry: number;
  /** What drop_entry drops: half-open entries only (default), or the kernel's choice. */
  dropEntryScope: DropEntryScope;
  dropPacket: number;
  secureTcp: number;
  /** Seconds a half-open TCP entry lives while secure_tcp is on. */
  secureTcpTimeout: number;
  halfOpenPerSource: number;
  /** Half-open entries one source may hold while that defense is on. */
  maxHalfOpenPerSource: number;
  /** Seconds an automatic defense (but drop_packet) stays on after the last shortage; 0 = kernel. */
  holdTime: number;
  /** SYN proxy (lb/synproxy.ts): 0 off, 1–2 automatic, 3 always — SYNs answered with cookies. */
  synProxy: number;
  /** The MSS offered to clients at most (IPv6: 20 less); absent = 1460 / 1440. */
  synProxyMss?: number | undefined;
  /** The window scale offered to clients. */
  synProxyWscale: number;
  /** The cookie secret, shared by nodes that must accept each other's cookies (ECMP); absent = random per start. */
  synProxyKey?: string | undefined;
}

/** Entries using a full-NAT real server's pool: used pairs of capacity (pool addresses × ports). */
export interface PoolUse {
  realServer: string;
  used: number;
  capacity: number;
}

export type DefenseName = 'dropEntry' | 'dropPacket' | 'secureTcp' | 'halfOpenPerSource' | 'synProxy';
export const DEFENSE_NAMES: readonly DefenseName[] = ['dropEntry', 'dropPacket', 'secureTcp', 'halfOpenPerSource', 'synProxy'];

/**
 * update_defense_level's rule for one defense: its next sysctl value and whether it acts now.
 * 0 stays off; 1 turns 2 (on) under pressure; 2 turns 1 (off) without; 3 is always on.
 */
export function defenseStep(mode: number, nomem: boolean): { mode: number; active: boolean } {
  switch (mode) {
    case MODE_AUTO:
    case MODE_AUTO_ACTIVE:
      return nomem ? { mode: MODE_AUTO_ACTIVE, active: true } : { mode: MODE_AUTO, active: false };
    case MODE_ALWAYS:
      return { mode, active: true };
    default:
      return { mode: MODE_OFF, active: false };
  }
}

/** The kernel's automatic drop rate: amemthresh / (amemthresh − availmem), integer, at least 1. */
export function autoDropRate(threshold: number, available: number): number {
  if (available >= threshold) return 0;
  return Math.max(1, Math.floor(threshold / (threshold - Math.max(0, available))));
}

/** todrop_entry keeps an entry that saw a packet in the last 60 s. */
const TODROP_IDLE_MS = 60_000;
/** secure_tcp's shortening visits at most this many slots a tick (a full pass of the default table). */
const SECURE_SCAN_MAX = 65536;
/**
 * How far a worker's clock may run ahead of the tick's: a worker reads Date.now() at each batch,
 * the tick once before its scan (~1 ms for 65 536 slots, more when the control thread is
 * descheduled). An entry a worker armed under secure_tcp after the tick read its clock has up to
 * the short timeout + that much left, and must not be taken for one the normal table armed.
 */
const SECURE_CLOCK_SLACK_MS = 1000;
/**
 * The half-open drop_entry looks at most this many slots a tick, twice (a histogram, then the
 * drops): a table up to 262 144 entries in one tick, a larger one a window at a time. Measured
 * once by hand (tables of SYN_RECV entries, the shared 2-core machine at load ~7.5, 16 ticks):
 * 1.5–3.5 ms a tick for 65 536 slots dropping ~1 300–2 000 entries, 14–23 ms for 262 144 slots
 * dropping ~5 000–8 000 (most of it the removals' bucket locks); the first, JIT-cold tick ~30 ms.
 */
const DROP_SCAN_MAX = 1 << 18;
/** Its histogram of time left: 128 ms buckets (>> 7) over 262 s, the last one holding the rest. */
const DROP_HIST_SHIFT = 7;
const DROP_HIST_BUCKETS = 2048;

export class Defense {
  private readonly t: ConnTable;
  private cfg: DefenseSettings;
  private readonly pools: () => PoolUse[];
  /** Current sysctl values (1 ↔ 2 as pressure comes and goes). */
  readonly modes: Record<DefenseName, number> = { dropEntry: 0, dropPacket: 0, secureTcp: 0, halfOpenPerSource: 0, synProxy: 0 };
  readonly active: Record<DefenseName, boolean> = {
    dropEntry: false,
    dropPacket: false,
    secureTcp: false,
    halfOpenPerSource: false,
    synProxy: false,
  };
  /** What the last tick saw. */
  freeEntries = 0;
  nomem = false;
  dropRate = 0;
  poolUse: PoolUse[] = [];
  /** Counters since start. */
  readonly counts = { droppedHalfOpen: 0, droppedIdle: 0, secureTcpShortened: 0, ticks: 0, nomemTicks: 0 };
  /** todrop_entry's rolling counters, one per in_pkts value 1..8 (ipvs->dropentry_counters). */
  private readonly todrop = new Int32Array(8);
  private secureCursor = 0;
  private dropCursor = 0;
  /** The half-open drop_entry's histogram of time left (DROP_HIST_BUCKETS buckets), reused every tick. */
  private readonly dropHist = new Int32Array(DROP_HIST_BUCKETS);
  /** Table-relative ms of the last update that saw a shortage, null = none yet. */
  private lastNomemAt: number | null = null;
  /** SYN cookies answered per second over the last tick (the SYN proxy's own rule, above). */
  cookieRate = 0;
  private readonly cookies: () => number;
  private lastCookies: number;
  private lastCookieAt: number;

  /**
   * `pools`: the full-NAT pools' use; `cookies`: SYN cookies answered since start (the workers'
   * GEN_SYN_ACK sent counters summed).
   */
  constructor(table: ConnTable, settings: DefenseSettings, pools: () => PoolUse[] = () => [], cookies: () => number = () => 0) {
    this.t = table;
    this.cfg = settings;
    this.pools = pools;
    this.cookies = cookies;
    this.lastCookies = cookies();
    this.lastCookieAt = table.now();
    for (const n of DEFENSE_NAMES) this.modes[n] = settings[n];
    if (settings.synProxyKey !== undefined) setSynProxyKey(table, settings.synProxyKey);
    this.update();
  }

  get settings(): DefenseSettings {
    return this.cfg;
  }

  /**
   * New settings (reload). As writing the kernel's sysctl: a mode that changed takes the written
   * value; an unchanged one keeps its automatic 1/2 state. The levels are updated at once
   * (proc_do_defense_mode calls update_defense_level).
   */
  configure(settings: DefenseSettings): void {
    for (const n of DEFENSE_NAMES) if (settings[n] !== this.cfg[n]) this.modes[n] = settings[n];
    if (settings.synProxyKey !== this.cfg.synProxyKey) setSynProxyKey(this.t, settings.synProxyKey);
    this.cfg = settings;
    this.update();
  }

  /** defense_work_handler: update the levels, then drop entries and shorten timers if on. */
  tick(now = this.t.now(), random: () => number = Math.random): void {
    this.counts.ticks++;
    const total = this.cookies();
    const dt = (now - this.lastCookieAt) | 0;
    if (dt > 0) {
      this.cookieRate = (Math.max(0, total - this.lastCookies) * 1000) / dt;
      this.lastCookies = total;
      this.lastCookieAt = now;
    }
    this.update(now);
    if (this.nomem) this.counts.nomemTicks++;
    // secure_tcp first: what it frees at once (entries past their short timer) is room the
    // half-open drop_entry then need not take.
    if (this.active.secureTcp) this.shortenHalfOpen(now);
    if (this.active.dropEntry) {
      if (this.cfg.dropEntryScope === 'kernel') this.randomDropEntry(now, random);
      else this.dropHalfOpen(now);
    }
  }

  /** update_defense_level: measures room, steps every defense, publishes to the workers. */
  update(now = this.t.now()): void {
    const t = this.t;
    const thr = Math.max(0, this.cfg.amemthresh);
    this.freeEntries = t.capacity - t.count();
    let nomem = this.freeEntries < thr;
    let rate = autoDropRate(thr, this.freeEntries);
    this.poolUse = this.pools();
    for (const p of this.poolUse) {
      // The same share of a server's pool pairs as amemthresh is of the table, at least one pair
      // (when amemthresh > 0): a small pool is short of room at the latest when it is full.
      const pthr = Math.ceil((p.capacity * thr) / t.capacity);
      const pfree = p.capacity - p.used;
      if (pfree < pthr) {
        nomem = true;
        const r = autoDropRate(pthr, pfree);
        if (rate === 0 || r < rate) rate = r;
      }
    }
    this.nomem = nomem;
    if (nomem) this.lastNomemAt = now;
    const held = this.lastNomemAt !== null && ((now - this.lastNomemAt) | 0) < this.cfg.holdTime * 1000;
    // The SYN proxy's own rule (above): the cookies of the last tick as half-open entries.
    const halfOpenMs = this.cfg.secureTcp !== MODE_OFF ? this.cfg.secureTcpTimeout * 1000 : t.i32[L.H_TIMEOUTS + TCP_SYN_RECV]!;
    const flood = (this.cookieRate * halfOpenMs) / 1000 > Math.max(0, this.freeEntries - thr);
    for (const n of DEFENSE_NAMES) {
      const s = defenseStep(this.modes[n], n === 'dropPacket' ? nomem : n === 'synProxy' ? nomem || held || flood : nomem || held);
      this.modes[n] = s.mode;
      this.active[n] = s.active;
    }
    this.dropRate = !this.active.dropPacket
      ? 0
      : this.modes.dropPacket === MODE_ALWAYS
        ? Math.max(1, this.cfg.amDroprate)
        : Math.max(1, rate);
    const a = t.i32;
    Atomics.store(a, L.H_SECURE_TCP_MS, Math.round(this.cfg.secureTcpTimeout * 1000));
    Atomics.store(a, L.H_SECURE_TCP, this.active.secureTcp ? 1 : 0);
    Atomics.store(a, L.H_DROP_RATE, this.dropRate);
    Atomics.store(a, L.H_SRC_LIMIT, this.active.halfOpenPerSource ? this.cfg.maxHalfOpenPerSource : 0);
    const mss = this.cfg.synProxyMss;
    Atomics.store(a, L.H_SP_MSS4, mss ?? 1460);
    // IPv6: 20 less (its longer header), never below its minimum link MTU's MSS (1280 − 60).
    Atomics.store(a, L.H_SP_MSS6, mss === undefined ? 1440 : Math.max(1220, mss - 20));
    Atomics.store(a, L.H_SP_WSCALE, this.cfg.synProxyWscale);
    Atomics.store(a, L.H_SYNPROXY, this.active.synProxy ? 1 : 0);
  }

  /**
   * drop_entry with `dropEntryScope: halfOpen`: half-open entries only, nearest their timer first
   * (see the file comment for which and how many). Two passes over a window of the table (all of
   * it up to DROP_SCAN_MAX slots, else the next window each tick): the first counts the
   * candidates by time left into 128 ms buckets, which gives the cut-off; the second drops those
   * below it (and from the cut-off bucket, in slot order, until the count is reached). The
   * removal re-checks the key and the state under both bucket locks (the locks every state
   * change is made under), so an entry whose handshake completed since it was counted is kept:
   * never an established flow. No allocation: the histogram is the object's.
   */
  dropHalfOpen(now: number): number {
    const t = this.t;
    const a = t.i32;
    const n = Math.min(t.capacity, DROP_SCAN_MAX);
    const start = this.dropCursor;
    this.dropCursor = (start + n) & t.mask;
    const hist = this.dropHist;
    hist.fill(0);
    let candidates = 0;
    for (let i = 0; i < n; i++) {
      const o = t.base((start + i) & t.mask);
      if (halfOpenState(a, o) < 0) continue;
      hist[leftBucket(a[o + L.E_EXPIRES]!, now)]!++;
      candidates++;
    }
    if (candidates === 0) return 0;
    // How many: the kernel's expected share (1/32 of the half-open entries), and while short of
    // room what brings free entries (and each short full-NAT pool) back to its threshold — both
    // for this window's share of the table.
    const thr = Math.max(0, this.cfg.amemthresh);
    let short = Math.max(0, thr - (t.capacity - t.count()));
    for (const p of this.poolUse) short += Math.max(0, Math.ceil((p.capacity * thr) / t.capacity) - (p.capacity - p.used));
    const want = Math.min(candidates, Math.max(candidates >> 5, Math.ceil((short * n) / t.capacity)));
    if (want === 0) return 0;
    let cut = 0;
    let below = 0;
    while (below + hist[cut]! < want) below += hist[cut++]!;
    let fromCut = want - below;
    let dropped = 0;
    for (let i = 0; i < n && dropped < want; i++) {
      const e = (start + i) & t.mask;
      const o = t.base(e);
      const state = halfOpenState(a, o);
      if (state < 0) continue;
      const b = leftBucket(a[o + L.E_EXPIRES]!, now);
      if (b > cut) continue;
      if (b === cut) {
        if (fromCut === 0) continue;
        fromCut--;
      }
      if (t.remove(e, false, now, a[o + L.E_PROTO]!, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, state)) {
        dropped++;
        this.counts.droppedHalfOpen++;
      }
    }
    return dropped;
  }

  /** drop_entry with `dropEntryScope: kernel`: ip_vs_random_dropentry over capacity/32 slots from a random start. */
  randomDropEntry(now: number, random: () => number = Math.random): number {
    const t = this.t;
    const a = t.i32;
    const n = Math.max(1, t.capacity >> 5);
    const start = Math.floor(random() * t.capacity) & t.mask;
    let dropped = 0;
    for (let i = 0; i < n; i++) {
      const e = (start + i) & t.mask;
      const o = t.base(e);
      const flags = a[o + L.E_FLAGS]!;
      if (!(flags & L.F_IN_USE) || flags & L.F_TEMPLATE) continue;
      const proto = a[o + L.E_PROTO]!;
      const state = a[o + L.E_STATE]!;
      const p8 = proto & 0xff;
      let halfOpen = false;
      if (p8 === IPPROTO_TCP) {
        if (state === TCP_SYN_RECV || state === TCP_SYNACK) halfOpen = true;
        else if (state !== TCP_ESTABLISHED || !this.todropEntry(o, now, state)) continue;
      } else if (p8 === IPPROTO_SCTP) {
        if (state === SCTP_S_INIT1 || state === SCTP_S_INIT) halfOpen = true;
        else if (state !== SCTP_S_ESTABLISHED || !this.todropEntry(o, now, L.TIMEOUT_SCTP + state)) continue;
      } else if (!this.todropEntry(o, now, L.TIMEOUT_UDP)) continue;
      // Under both bucket locks: still the same flow, still in the state it was picked in.
      if (t.remove(e, false, now, proto, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, state)) {
        dropped++;
        if (halfOpen) this.counts.droppedHalfOpen++;
        else this.counts.droppedIdle++;
      }
    }
    return dropped;
  }

  /**
   * todrop_entry: keep an entry refreshed in the last 60 s (its last packet = timer − the
   * timeout of its state) or with 0 or more than 8 client packets; of those with n packets
   * drop every n-th, so the ones with fewer packets go first.
   */
  private todropEntry(o: number, now: number, timeoutSlot: number): boolean {
    const a = this.t.i32;
    const lastSeen = (a[o + L.E_EXPIRES]! - a[L.H_TIMEOUTS + timeoutSlot]!) | 0;
    if (((now - lastSeen) | 0) < TODROP_IDLE_MS) return false;
    const p = a[o + L.E_IN_PKTS]!;
    if (p < 1 || p > 8) return false;
    if (--this.todrop[p - 1]! > 0) return false;
    this.todrop[p - 1] = p;
    return true;
  }

  /**
   * secure_tcp for entries already half-open: a timer longer than the short timeout (+ the
   * workers' clock slack, SECURE_CLOCK_SLACK_MS) was armed by the normal table (a worker under
   * secure_tcp never arms more), so the entry's last packet is its timer − the state's normal
   * timeout, and its timer becomes that + the short timeout. Without the slack, a client's SYN
   * armed by a worker whose batch clock read 1 ms after the tick's would be taken for one 50 s
   * old and removed at once. Compare-and-swap: a packet that re-arms the entry meanwhile wins.
   */
  shortenHalfOpen(now: number): number {
    const t = this.t;
    const a = t.i32;
    const shortMs = a[L.H_SECURE_TCP_MS]!;
    const n = Math.min(t.capacity, SECURE_SCAN_MAX);
    let shortened = 0;
    for (let i = 0; i < n; i++) {
      const e = (this.secureCursor + i) & t.mask;
      const o = t.base(e);
      const flags = a[o + L.E_FLAGS]!;
      if (!(flags & L.F_IN_USE) || flags & L.F_TEMPLATE || (a[o + L.E_PROTO]! & 0xff) !== IPPROTO_TCP) continue;
      const state = a[o + L.E_STATE]!;
      if (state !== TCP_SYN_RECV && state !== TCP_SYNACK && state !== TCP_SYN_SENT) continue;
      const expires = a[o + L.E_EXPIRES]!;
      if (((expires - now) | 0) <= shortMs + SECURE_CLOCK_SLACK_MS) continue;
      const shorter = (expires - a[L.H_TIMEOUTS + state]! + shortMs) | 0;
      if (((shorter - expires) | 0) < 0 && Atomics.compareExchange(a, o + L.E_EXPIRES, expires, shorter) === expires) {
        shortened++;
        // Already past its short timer: free the slot now rather than at the next sweep, the
        // room is needed (remove() re-checks the timer under the bucket locks).
        if (((shorter - now) | 0) <= 0) t.remove(e, true, now);
      }
    }
    this.secureCursor = (this.secureCursor + n) & t.mask;
    this.counts.secureTcpShortened += shortened;
    return shortened;
  }

  /** The state for the API, metrics and uvsadm. */
  view(): DefenseView {
    return {
      amemthresh: this.cfg.amemthresh,
      freeEntries: this.freeEntries,
      capacity: this.t.capacity,
      nomem: this.nomem,
      amDroprate: this.cfg.amDroprate,
      dropRate: this.dropRate,
      secureTcpTimeout: this.cfg.secureTcpTimeout,
      maxHalfOpenPerSource: this.cfg.maxHalfOpenPerSource,
      holdTime: this.cfg.holdTime,
      dropEntryScope: this.cfg.dropEntryScope,
      defenses: DEFENSE_NAMES.map((name) => ({ name, configured: this.cfg[name], mode: this.modes[name], active: this.active[name] })),
      fullnatPools: this.poolUse.map((p) => ({ ...p })),
      synProxyMss: this.cfg.synProxyMss ?? 1460,
      synProxyWscale: this.cfg.synProxyWscale,
      synProxyPending: this.t.spPending(),
      synProxyHeld: this.t.holdUsed(),
      ...this.counts,
    };
  }
}

/**
 * The state of the entry at word o if the half-open drop_entry may drop it, else −1: a live
 * connection (no template) in TCP SYN_RECV or SYNACK or SCTP INIT1 or INIT — the states the
 * kernel drops outright — and not a SYN-proxied flow waiting for its server (its client
 * answered a cookie: a proven address, and its entry lives 5 s).
 */
function halfOpenState(a: Int32Array, o: number): number {
  const flags = a[o + L.E_FLAGS]!;
  if ((flags & (L.F_IN_USE | L.F_TEMPLATE | L.F_SP_PENDING)) !== L.F_IN_USE) return -1;
  const state = a[o + L.E_STATE]!;
  const p8 = a[o + L.E_PROTO]! & 0xff;
  if (p8 === IPPROTO_TCP) return state === TCP_SYN_RECV || state === TCP_SYNACK ? state : -1;
  if (p8 === IPPROTO_SCTP) return state === SCTP_S_INIT1 || state === SCTP_S_INIT ? state : -1;
  return -1;
}

/** The histogram bucket of an entry's time left (0 for one already due), the last one for the rest. */
function leftBucket(expires: number, now: number): number {
  const left = (expires - now) | 0;
  return left <= 0 ? 0 : Math.min(DROP_HIST_BUCKETS - 1, left >> DROP_HIST_SHIFT);
}

/**
 * The SYN cookie key (layout.ts H_SP_KEY, two HalfSipHash keys): SHA-256 of the configured
 * secret — nodes with the same secret accept each other's cookies — or, without one, random.
 */
export function setSynProxyKey(t: ConnTable, secret: string | undefined): void {
  const k = new Int32Array(4);
  if (secret === undefined) randomFillSync(k);
  else {
    const d = createHash('sha256').update(`uvs synproxy key\0${secret}`).digest();
    for (let i = 0; i < 4; i++) k[i] = d.readInt32LE(4 * i);
  }
  for (let i = 0; i < 4; i++) Atomics.store(t.i32, L.H_SP_KEY + i, k[i]!);
}

export interface DefenseView {
  amemthresh: number;
  freeEntries: number;
  capacity: number;
  nomem: boolean;
  amDroprate: number;
  dropRate: number;
  secureTcpTimeout: number;
  maxHalfOpenPerSource: number;
  holdTime: number;
  /** What drop_entry drops (config defense.dropEntryScope). */
  dropEntryScope: DropEntryScope;
  defenses: { name: DefenseName; configured: number; mode: number; active: boolean }[];
  fullnatPools: PoolUse[];
  /** SYN proxy: the MSS (IPv4) and window scale offered, flows waiting for their real server, held packets. */
  synProxyMss: number;
  synProxyWscale: number;
  synProxyPending: number;
  synProxyHeld: number;
  droppedHalfOpen: number;
  droppedIdle: number;
  secureTcpShortened: number;
  ticks: number;
  nomemTicks: number;
}
