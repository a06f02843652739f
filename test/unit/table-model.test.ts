/**
 * A model-based test of the connection table (conntrack/table.ts): random sequences of what its
 * callers do — workers inserting new flows (both families; TCP, UDP, SCTP; masq, tunnel, full-NAT
 * with a small port pool), their packets both ways (TCP flags and SCTP chunks moving the state),
 * persistence templates made, reserved and controlling, the control thread's shadows (other
 * nodes' flows, under a shadow cap, superseded as redis-sync does) adopted by a packet, removals
 * by key, by a handle kept from an earlier lookup and by the sweeper, the clock moved and due
 * entries expired (across the int32 wrap of table time in some sequences), real servers leaving,
 * quiesced and coming back, the per-source half-open limit switched, and workers dying while
 * they hold locks — run against the table and against a plain model (a Map of what the table
 * should hold, written from the rules in table.ts's comments and the kernel's). After every
 * operation the table's memory is checked:
 *   - no lock word is left held;
 *   - every live entry is on exactly one client→server chain and one server→client chain, the
 *     bucket its key hashes to, and nothing else is on any chain; no chain loops;
 *   - the free list holds exactly the other entries: free + used = capacity; H_COUNT = used;
 *   - H_SHADOWS = the shadow entries, and within the cap redis-sync keeps (maxShadowShare);
 *   - each real server's ActiveConn/InActConn/PersistConn equal what its entries say, OVERLOAD as
 *     the kernel's bind/unbind rules set and clear it; each template's NCONTROL = the connections
 *     pointing at it; each per-source half-open counter = the entries counted at it;
 *   - every entry equals its model entry (key words, server, flags, state, timer, template link),
 *     and lookups of the operation's flow and a few others agree with the model.
 * A failing sequence is shrunk — cut at the failing operation, then chunks and single operations
 * removed while it still fails the same way — and printed as code-like lines with what each one
 * returned, so the assertion message is the reproduction.
 *
 * Worker death: a worker is a ConnTable of its own owner id on the same memory; it "dies" by an
 * exception thrown right after it takes its n-th lock of a kind (bucket, entry, allocation), as a
 * thread killed there would leave the memory; the control thread then does what control/daemon.ts
 * does at a worker's exit: releaseLocksOf(owner) and holdReclaim(owner). By default workers die
 * only where that recovery is complete — holding the locks of an insert, a removal or a template
 * lookup before it writes anything, or anywhere in a lookup (nothing is written before the entry
 * lock; an adoption is whole before the touch's) — and the model says what the table must then
 * hold. UVS_MODEL_DEATH=all lets them die at any lock,
 * also inside an insert after the entry left the free list or after it was linked, and inside a
 * removal before the entry is back on the free list, expecting the operation to have had no
 * effect; the table does not repair those (releaseLocksOf frees locks only), so that mode fails
 * and prints the shortest such sequence.
 *
 * The model takes the protocols' state transitions from conntrack/state.ts and sctp-state.ts (the
 * kernel's tables, tested against them elsewhere) and the hash from the table (to know which
 * chain a key must be on). Not covered here: SYN-proxy pending flows and held packets, the Redis
 * write decisions (sync is off), secure_tcp, and true concurrency — operations of different
 * workers interleave only between calls here (table.test.ts hammers one table from threads).
 *
 * Deterministic: fixed seeds, each with its own hash and source keys written into the table's
 * header. UVS_MODEL_SEEDS=N runs N sequences (default 200), UVS_MODEL_OPS=M operations each
 * (default 300), UVS_MODEL_SEED=S that one seed only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import {
  CHAIN_LIMIT,
  ConnTable,
  createRealServerRegion,
  FLOW_DEST_GONE,
  FLOW_HIT,
  FLOW_MISS,
  FLOW_REUSE,
  LOOKUP_EXPIRE_NODEST,
  LOOKUP_NEW,
} from '../../conntrack/table';
import { FlowKey, FlowView, type NewFlow, newFlow } from '../../conntrack/flow';
import {
  DIR_INPUT,
  DIR_INPUT_ONLY,
  DIR_OUTPUT,
  TCP_ACTIVE,
  TCP_CLOSE,
  TCP_ESTABLISHED,
  TCP_HALF_OPEN,
  TCP_STATE_NAMES,
  TCP_TIME_WAIT,
  TCPF_ACK,
  TCPF_FIN,
  TCPF_PSH,
  TCPF_RST,
  TCPF_SYN,
  tcpNextState,
} from '../../conntrack/state';
import {
  SCTP_ACTIVE,
  SCTP_DEFAULT_TIMEOUTS,
  SCTP_EV_INIT,
  SCTP_EVENT_COUNT,
  SCTP_HALF_OPEN,
  SCTP_S_CLOSED,
  SCTP_S_ESTABLISHED,
  SCTP_STATE_NAMES,
  sctpNextState,
} from '../../conntrack/sctp-state';
import { formatIPv4, formatIPv6 } from '../../net/addr';
import { mulberry32 } from '../helpers/rng';
import { TABLE_TIMEOUTS } from '../helpers/table';

const SEEDS = Number(process.env.UVS_MODEL_SEEDS ?? 200);
const OPS = Number(process.env.UVS_MODEL_OPS ?? 300);
const ONLY = process.env.UVS_MODEL_SEED;
const DEATH_ALL = process.env.UVS_MODEL_DEATH === 'all';

const TCP = 6;
const UDP = 17;
const SCTP = 132;
/** Real-server slots; 2 and 3 have connection thresholds (-x / -y): [upper, lower]. */
const RS_SLOTS = 4;
const THRESHOLDS: readonly (readonly [number, number])[] = [
  [0, 0],
  [0, 0],
  [3, 0],
  [4, 2],
];
const RPORT = 8080;
const POOL4 = 0x0a0c0001;
const POOL6_HI = [0xfd000020 | 0, 0, 0];
/** Full-NAT local ports 1000..1003: few enough that two flows to one server meet (insert −2). */
const POOL_PORTS = 4;
const TEMPLATE_MS = 30_000;
const SRC_LIMIT = 100;
/** redis.maxShadowShare as redis-sync applies it (mayInsert = shadows() < cap). */
const SHADOW_SHARE = 0.125;
const WORKERS = 3;
/** A lock held this long in a test is a bug: fail fast instead of spinning 5 s. */
const STUCK_MS = 50;
const REARM_MS = L.TEMPLATE_REARM_MS;

// ── the universe of one sequence ───────────────────────────────────────────────────────────
interface Flow {
  id: number;
  /** IP protocol | L.PROTO_V6. */
  proto: number;
  v6: boolean;
  caddr: number;
  cport: number;
  vaddr: number;
  vport: number;
  /** The client's and the virtual address's high words (IPv6; zeros for IPv4). */
  hiC: number[];
  hiV: number[];
  /** The persistence template's client: /24 (IPv4) or /64 (IPv6) of caddr. */
  masked: number;
  maskedHi: number[];
  fwd: number;
  svc: number;
}

interface Universe {
  seed: number;
  capacity: number;
  shadowCap: number;
  start: number;
  flows: Flow[];
}

function universe(seed: number): Universe {
  const next = mulberry32(seed * 2654435761);
  const below = (n: number) => next() % n;
  const capacity = below(3) === 0 ? 64 : 16;
  const n = capacity === 16 ? 24 : 48;
  const flows: Flow[] = [];
  for (let i = 0; i < n; i++) {
    const p = below(4);
    const proto = p < 2 ? TCP : p === 2 ? UDP : SCTP;
    const v6 = below(10) < 3;
    const group = i % 3; // three clients share each template key
    const vi = below(2);
    const f = below(10);
    const hiC = v6 ? [0x20010db8, group, 0x11] : [0, 0, 0];
    flows.push({
      id: i,
      proto: v6 ? proto | L.PROTO_V6 : proto,
      v6,
      caddr: v6 ? i + 1 : 0x0a000000 | (group << 8) | (i + 1) | 0,
      cport: 40000 + i,
      vaddr: v6 ? vi + 1 : 0x0a600001 + vi,
      vport: proto === TCP ? 80 : proto === UDP ? 53 : 3868,
      hiC,
      hiV: v6 ? [0xfd000096 | 0, 0, 0] : [0, 0, 0],
      masked: v6 ? 0 : 0x0a000000 | (group << 8) | 0,
      maskedHi: v6 ? [0x20010db8, group, 0] : [0, 0, 0],
      fwd: f < 5 ? L.FWD_MASQ : f < 8 ? L.FWD_FULLNAT : L.FWD_TUNNEL,
      svc: vi * 3 + (proto === TCP ? 0 : proto === UDP ? 1 : 2),
    });
  }
  // A quarter of the sequences start 20 s before table time wraps (int32 ms, 24.8 days).
  const start = below(4) === 0 ? 0x7fffffff - 20_000 : 1_000_000;
  return { seed, capacity, shadowCap: Math.floor(capacity * SHADOW_SHARE), start, flows };
}

/** Real server rs: IPv4 10.11.0.(rs+1); IPv6 fd00:10::rs:0:0:1 (its servers differ in a high word only). */
const rsAddr4 = (rs: number) => 0x0a0b0001 + rs;
const rsHi = (rs: number) => [0xfd000010 | 0, 0, rs];

/** The words of a record (flow.ts NewFlow) and of a model entry's key. */
interface Rec {
  proto: number;
  caddr: number;
  cports: number;
  vaddr: number;
  daddr: number;
  dports: number;
  laddr: number;
  /** 12 words (flow.ts): client, virtual, real server, local; zeros for IPv4. */
  hi: number[];
  flags: number;
  rs: number;
  svc: number;
}

/** A connection of flow f to real server rs by method fwd (full-NAT: local port 1000 + pool). */
function connRec(f: Flow, rs: number, fwd: number, pool: number): Rec {
  const nat = fwd === L.FWD_FULLNAT;
  const hi = f.v6 ? [...f.hiC, ...f.hiV, ...rsHi(rs), ...(nat ? POOL6_HI : f.hiC)] : new Array<number>(12).fill(0);
  return {
    proto: f.proto,
    caddr: f.caddr,
    cports: (f.cport << 16) | f.vport | 0,
    vaddr: f.vaddr,
    daddr: f.v6 ? 1 : rsAddr4(rs),
    dports: (RPORT << 16) | (nat ? 1000 + pool : f.cport) | 0,
    laddr: nat ? (f.v6 ? 1 : POOL4) : f.caddr,
    hi,
    // Tunnel: the server answers the client directly; this node sees one direction (core.ts).
    flags: fwd === L.FWD_TUNNEL ? fwd | L.F_NOOUTPUT : fwd,
    rs,
    svc: f.svc,
  };
}

/** Flow f's persistence template to real server rs (core.ts newFlow: client masked, cport 0). */
function templateRec(f: Flow, rs: number): Rec {
  const hi = f.v6 ? [...f.maskedHi, ...f.hiV, ...rsHi(rs), ...f.maskedHi] : new Array<number>(12).fill(0);
  return {
    proto: f.proto,
    caddr: f.masked,
    cports: f.vport,
    vaddr: f.vaddr,
    daddr: f.v6 ? 1 : rsAddr4(rs),
    dports: (RPORT << 16) | 0,
    laddr: f.masked,
    hi,
    flags: L.F_TEMPLATE | f.fwd,
    rs,
    svc: f.svc,
  };
}

function toNewFlow(r: Rec, now: number, more: Partial<Parameters<typeof newFlow>[0]> = {}): NewFlow {
  const { hi, ...rest } = r;
  return newFlow({ ...rest, now, hi: (r.proto & L.PROTO_V6) !== 0 ? hi : null, ...more });
}

function inKey(f: Flow): FlowKey {
  const k = new FlowKey();
  k.proto = f.proto;
  k.src = f.caddr;
  k.ports = (f.cport << 16) | f.vport | 0;
  k.dst = f.vaddr;
  for (let i = 0; i < 3; i++) {
    k.hi[i] = f.hiC[i]!;
    k.hi[3 + i] = f.hiV[i]!;
  }
  return k;
}

function templateKey(f: Flow): FlowKey {
  const k = new FlowKey();
  k.proto = f.proto;
  k.src = f.masked;
  k.ports = f.vport;
  k.dst = f.vaddr;
  for (let i = 0; i < 3; i++) {
    k.hi[i] = f.maskedHi[i]!;
    k.hi[3 + i] = f.hiV[i]!;
  }
  return k;
}

/** A server→client key: (proto, daddr, dports, laddr), high words at 6..11. */
interface OutKey {
  proto: number;
  daddr: number;
  dports: number;
  laddr: number;
  hi: number[];
}

function outKey(k: OutKey): FlowKey {
  const fk = new FlowKey();
  fk.proto = k.proto;
  fk.src = k.daddr;
  fk.ports = k.dports;
  fk.dst = k.laddr;
  for (let i = 6; i < 12; i++) fk.hi[i] = k.hi[i]!;
  return fk;
}

// ── the model ──────────────────────────────────────────────────────────────────────────────
/** What one entry of the table should be. */
interface ModelEntry extends Rec {
  e: number;
  tpl: boolean;
  /** The flow a connection belongs to (−1: a template). */
  flow: number;
  fwd: number;
  noOutput: boolean;
  /** TCP/SCTP state index; a template's is its ASSURED bit. */
  state: number;
  /** Counted in InActConn rather than ActiveConn (F_INACTIVE). */
  inactive: boolean;
  shadow: boolean;
  halfOpen: boolean;
  sp: boolean;
  spWords: [number, number, number];
  expires: number;
  /** The template controlling a connection (entry), −1 none. */
  control: number;
  /** A template's connections plus reservations (NCONTROL), its own timeout, ASSURED, invalidated. */
  ncontrol: number;
  timeout: number;
  invalid: boolean;
  pp: number;
  ppSeq: number;
}

interface RealServer {
  available: boolean;
  drained: boolean;
  weight: number;
  overload: boolean;
}

type LinkOutcome = { result: number } | { existing: ModelEntry } | { fresh: true };

/** Milliseconds an entry in `state` of protocol p8 lives after a packet (TABLE_TIMEOUTS, kernel SCTP defaults). */
function timeoutMs(p8: number, state: number): number {
  if (p8 === TCP) return Math.round(TABLE_TIMEOUTS.tcp[state]! * 1000);
  if (p8 === SCTP) return Math.round(SCTP_DEFAULT_TIMEOUTS[state]! * 1000);
  return TABLE_TIMEOUTS.udp * 1000;
}

const due = (expires: number, now: number) => ((expires - now) | 0) <= 0;

class Model {
  entries = new Map<number, ModelEntry>();
  servers: RealServer[] = [];
  srcLimit = false;
  /** The entry each flow was last seen at (a worker's f.entry kept past its lock). */
  lastHandle = new Map<number, number>();
  /** The server→client key each flow last had. */
  lastOut = new Map<number, OutKey>();

  constructor(readonly capacity: number) {
    for (let s = 0; s < RS_SLOTS; s++) this.servers.push({ available: true, drained: false, weight: 1, overload: false });
  }

  clone(): Model {
    const m = new Model(this.capacity);
    for (const [e, me] of this.entries) m.entries.set(e, { ...me, hi: [...me.hi], spWords: [...me.spWords] });
    m.servers = this.servers.map((s) => ({ ...s }));
    m.srcLimit = this.srcLimit;
    m.lastHandle = new Map(this.lastHandle);
    m.lastOut = new Map(this.lastOut);
    return m;
  }

  static sameHi(a: readonly number[], b: ArrayLike<number>, from: number, n: number): boolean {
    for (let i = from; i < from + n; i++) if (a[i] !== b[i]) return false;
    return true;
  }

  /** The connection (local or shadow) with r's client→server key (findIn). */
  findIn(r: Pick<Rec, 'proto' | 'caddr' | 'cports' | 'vaddr' | 'hi'>): ModelEntry | undefined {
    for (const me of this.entries.values()) {
      if (me.tpl || me.proto !== r.proto || me.caddr !== r.caddr || me.cports !== r.cports || me.vaddr !== r.vaddr) continue;
      if ((r.proto & L.PROTO_V6) !== 0 && !Model.sameHi(me.hi, r.hi, 0, 6)) continue;
      return me;
    }
    return undefined;
  }

  /** A valid template with r's key (findTemplate). */
  findTemplate(r: Pick<Rec, 'proto' | 'caddr' | 'cports' | 'vaddr' | 'hi'>): ModelEntry | undefined {
    for (const me of this.entries.values()) {
      if (!me.tpl || me.invalid || me.proto !== r.proto || me.caddr !== r.caddr || me.cports !== r.cports || me.vaddr !== r.vaddr) continue;
      if ((r.proto & L.PROTO_V6) !== 0 && !Model.sameHi(me.hi, r.hi, 0, 6)) continue;
      return me;
    }
    return undefined;
  }

  /** The connections with server→client key k (findOut: unique here, the table takes the first). */
  findOut(k: OutKey): ModelEntry[] {
    const found: ModelEntry[] = [];
    for (const me of this.entries.values()) {
      if (me.tpl || me.proto !== k.proto || me.daddr !== k.daddr || me.dports !== k.dports || me.laddr !== k.laddr) continue;
      if ((k.proto & L.PROTO_V6) !== 0 && !Model.sameHi(me.hi, k.hi, 6, 6)) continue;
      found.push(me);
    }
    return found;
  }

  /** ActiveConn, InActConn, PersistConn of real server rs: the entries bound to it. */
  counts(rs: number): [number, number, number] {
    let active = 0;
    let inactive = 0;
    let persist = 0;
    for (const me of this.entries.values()) {
      if (me.rs !== rs || me.shadow) continue;
      if (me.tpl) persist++;
      else if (me.inactive) inactive++;
      else active++;
    }
    return [active, inactive, persist];
  }

  /** ip_vs_bind_dest's OVERLOAD: at the upper threshold (after the entry is counted). */
  bound(rs: number): void {
    const [upper] = THRESHOLDS[rs]!;
    const [a, i] = this.counts(rs);
    if (upper !== 0 && a + i >= upper) this.servers[rs]!.overload = true;
  }

  /** ip_vs_unbind_dest's: cleared below the lower threshold, or 3/4 of the upper, or always. */
  unbound(rs: number): void {
    const [upper, lower] = THRESHOLDS[rs]!;
    const [a, i] = this.counts(rs);
    const total = a + i;
    if (lower !== 0 ? total < lower : upper !== 0 ? total * 4 < upper * 3 : true) this.servers[rs]!.overload = false;
  }

  /**
   * What insert (link) does with record r: −1 with the table full (before anything else, even for a
   * key already there), the entry already there, −2 for a full-NAT connection whose server→client
   * key is taken, −3 for a chain at CHAIN_LIMIT, else a new entry.
   */
  link(r: Rec, chainIn: number, chainOut: number): LinkOutcome {
    if (this.entries.size >= this.capacity) return { result: -1 };
    const tpl = (r.flags & L.F_TEMPLATE) !== 0;
    const existing = tpl ? this.findTemplate(r) : this.findIn(r);
    if (existing !== undefined) return { existing };
    if ((r.flags & L.FWD_MASK) === L.FWD_FULLNAT && this.findOut(r).length > 0) return { result: -2 };
    if (chainIn >= CHAIN_LIMIT || chainOut >= CHAIN_LIMIT) return { result: -3 };
    return { fresh: true };
  }

  /** A new entry at e from record r (ip_vs_conn_new): state NONE, 2 s, counted inactive, or a template / shadow. */
  add(e: number, r: Rec, flow: number, now: number, shadow: Partial<ModelEntry> | null, templateMs = 0): ModelEntry {
    const tpl = (r.flags & L.F_TEMPLATE) !== 0;
    const p8 = r.proto & 0xff;
    const me: ModelEntry = {
      ...r,
      hi: [...r.hi],
      e,
      tpl,
      flow,
      fwd: r.flags & L.FWD_MASK,
      noOutput: (r.flags & L.F_NOOUTPUT) !== 0,
      state: 0,
      inactive: !tpl,
      shadow: false,
      halfOpen: !tpl && (p8 === TCP || p8 === SCTP) && this.srcLimit,
      sp: false,
      spWords: [0, 0, 0],
      expires: (now + (tpl ? templateMs : timeoutMs(TCP, 0))) | 0,
      control: -1,
      ncontrol: 0,
      timeout: tpl ? templateMs : 0,
      invalid: false,
      pp: 0,
      ppSeq: 0,
    };
    if (shadow !== null) {
      Object.assign(me, shadow);
      me.halfOpen = false;
    }
    this.entries.set(e, me);
    if (!me.tpl) this.lastHandle.set(flow, e);
    if (!me.tpl) this.lastOut.set(flow, { proto: me.proto, daddr: me.daddr, dports: me.dports, laddr: me.laddr, hi: [...me.hi] });
    if (!me.shadow) this.bound(me.rs);
    return me;
  }

  /** ip_vs_control_assure_ct: the template controlling me is ASSURED. */
  assure(me: ModelEntry): void {
    if (me.control >= 0) this.entries.get(me.control)!.state |= L.CTPL_ASSURED;
  }

  /** A packet of me in direction dir: state (kernel tables), ActiveConn/InActConn, half-open count, timer. */
  touch(me: ModelEntry, dir: number, ev: number, now: number): void {
    const p8 = me.proto & 0xff;
    let timeout: number;
    if (p8 === TCP || p8 === SCTP) {
      let d = dir;
      if (dir === DIR_OUTPUT && me.noOutput) me.noOutput = false;
      else if (dir === DIR_INPUT && me.noOutput) d = DIR_INPUT_ONLY;
      const tcp = p8 === TCP;
      const next = tcp ? tcpNextState(d, ev, me.state) : sctpNextState(d, ev, me.state);
      if (next !== me.state) {
        me.inactive = (tcp ? TCP_ACTIVE : SCTP_ACTIVE)[next] === 0;
        const half = (tcp ? TCP_HALF_OPEN : SCTP_HALF_OPEN)[next] === 1;
        if (me.halfOpen && !half) me.halfOpen = false;
        else if (!me.halfOpen && !me.shadow && half && this.srcLimit) me.halfOpen = true;
        me.state = next;
        if (next === (tcp ? TCP_ESTABLISHED : SCTP_S_ESTABLISHED)) this.assure(me);
      }
      timeout = timeoutMs(p8, me.state);
    } else {
      if (dir === DIR_OUTPUT) this.assure(me); // a UDP reply
      timeout = timeoutMs(UDP, 0);
    }
    me.expires = (now + timeout) | 0;
  }

  /** A packet reached another node's flow: it is ours, counted as its synced state says. */
  adopt(me: ModelEntry): void {
    me.shadow = false;
    this.bound(me.rs);
  }

  private drop(me: ModelEntry): void {
    this.entries.delete(me.e);
    if (me.control >= 0) this.entries.get(me.control)!.ncontrol--;
    if (!me.shadow) this.unbound(me.rs);
  }

  /** remove(e, onlyIfExpired, now, expect…): as table.ts documents it. */
  remove(
    e: number,
    onlyIfExpired: boolean,
    now: number,
    expect: { proto: number; caddr: number; cports: number; state: number } | null,
  ): boolean {
    const me = this.entries.get(e);
    if (me === undefined || (onlyIfExpired && !due(me.expires, now))) return false;
    if (
      expect !== null &&
      (me.proto !== expect.proto ||
        me.caddr !== expect.caddr ||
        me.cports !== expect.cports ||
        me.tpl ||
        (expect.state >= 0 && me.state !== expect.state))
    )
      return false;
    if (onlyIfExpired && me.tpl && me.ncontrol > 0) {
      // ip_vs_conn_expire: a template still controlling connections lives on, 60 s at a time.
      me.timeout = REARM_MS;
      me.expires = (now + REARM_MS) | 0;
      return false;
    }
    this.drop(me);
    return true;
  }

  /** The sweeper: every due entry, in entry order (a connection freed first lets its template go in the same sweep). */
  expire(now: number): number {
    let removed = 0;
    for (let e = 0; e < this.capacity; e++) {
      const me = this.entries.get(e);
      if (me !== undefined && due(me.expires, now) && this.remove(e, true, now, null)) removed++;
    }
    return removed;
  }

  shadows(): number {
    let n = 0;
    for (const me of this.entries.values()) if (me.shadow) n++;
    return n;
  }
}

// ── operations ─────────────────────────────────────────────────────────────────────────────
type LockKind = 'bucket' | 'entry' | 'alloc';

type Op =
  /** A worker's new connection and its first packet (masq, tunnel: insertIn; full-NAT: insert + touchIn). */
  | { op: 'insert'; w: number; flow: number; rs: number; pool: number; ev: number }
  /** core.ts newFlow with persistence: templateFor, else insertTemplate; the connection; control or unreserve. */
  | { op: 'persist'; w: number; flow: number; rs: number; pool: number; ev: number; eq: boolean }
  | { op: 'lookupIn'; w: number; flow: number; ev: number; opts: number }
  | { op: 'lookupOut'; w: number; flow: number; ev: number }
  | { op: 'readFlow'; flow: number; out: boolean }
  /** redis-sync installRecord: putShadow(r, shadows() < cap); refused and `supersede`: dropSuperseded, then putShadow(r, true). */
  | { op: 'shadow'; flow: number; rs: number; pool: number; state: number; ttl: number; sp: boolean; pp: number; supersede: boolean }
  /** A worker finds the flow (readFlow) and removes it by the key it found it by. */
  | { op: 'remove'; w: number; flow: number }
  /** remove() of the entry the flow was last seen at (a handle that may be stale), with the key, state and timer checks callers use. */
  | { op: 'removeLast'; w: number; flow: number; state: number; due: boolean }
  /** The control thread's remove(e, true): due entries only (defense.ts shortenHalfOpen). */
  | { op: 'removeDue'; e: number }
  | { op: 'tick'; ms: number }
  | { op: 'server'; rs: number; available: boolean; drained: boolean; weight: number }
  | { op: 'srcLimit'; on: boolean }
  | { op: 'die'; w: number; kind: LockKind; nth: number; inner: Op };

/** Thrown into a dying worker's stack: the thread is gone from here on (no Error: no stack to capture). */
class Death {}

/** A broken promise: `kind` names the invariant (shrinking keeps to it). */
class Fail extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
  }
}

function same(actual: unknown, expected: unknown, what: string, kind = 'result'): void {
  if (!Object.is(actual, expected)) throw new Fail(kind, `${what}: table ${String(actual)}, model ${String(expected)}`);
}

// ── text ───────────────────────────────────────────────────────────────────────────────────
const SCTP_EV_NAMES = [
  'DATA',
  'INIT',
  'INIT_ACK',
  'COOKIE_ECHO',
  'COOKIE_ACK',
  'SHUTDOWN',
  'SHUTDOWN_ACK',
  'SHUTDOWN_COMPLETE',
  'ERROR',
  'ABORT',
];

function evText(proto: number, ev: number): string {
  const p8 = proto & 0xff;
  if (p8 === SCTP) return SCTP_EV_NAMES[ev]!;
  if (p8 === UDP) return 'datagram';
  const names: string[] = [];
  for (const [bit, name] of [
    [TCPF_SYN, 'SYN'],
    [TCPF_ACK, 'ACK'],
    [TCPF_FIN, 'FIN'],
    [TCPF_RST, 'RST'],
    [TCPF_PSH, 'PSH'],
  ] as const)
    if (ev & bit) names.push(name);
  return names.length > 0 ? names.join('|') : 'no flags';
}

function stateText(proto: number, state: number): string {
  const p8 = proto & 0xff;
  return p8 === TCP ? TCP_STATE_NAMES[state]! : p8 === SCTP ? SCTP_STATE_NAMES[state]! : 'UDP';
}

const FWD_NAMES: Record<number, string> = { [L.FWD_MASQ]: 'masq', [L.FWD_FULLNAT]: 'full-NAT', [L.FWD_TUNNEL]: 'tunnel' };

function addrText(v6: boolean, hi: readonly number[], lo: number): string {
  return v6 ? `[${formatIPv6([hi[0]!, hi[1]!, hi[2]!, lo])}]` : formatIPv4(lo);
}

function flowText(f: Flow): string {
  const p = (f.proto & 0xff) === TCP ? 'tcp' : (f.proto & 0xff) === UDP ? 'udp' : 'sctp';
  return `f${f.id} = ${p}${f.v6 ? 6 : 4} ${addrText(f.v6, f.hiC, f.caddr)}:${f.cport} → ${addrText(f.v6, f.hiV, f.vaddr)}:${f.vport} (service ${f.svc}, ${FWD_NAMES[f.fwd]}; template client ${addrText(f.v6, f.maskedHi, f.masked)})`;
}

function opText(u: Universe, op: Op): string {
  const f = 'flow' in op ? u.flows[op.flow]! : null;
  const ev = (x: number) => evText(f!.proto, x);
  const pool = (p: number) => (f!.fwd === L.FWD_FULLNAT ? ` port ${1000 + p}` : '');
  switch (op.op) {
    case 'insert':
      return `w${op.w}.insertIn(f${op.flow} → rs${op.rs}${pool(op.pool)}, ${ev(op.ev)})`;
    case 'persist':
      return `w${op.w}.persistent(f${op.flow}, new template → rs${op.rs}${pool(op.pool)}, ${ev(op.ev)}${op.eq ? ', expireQuiescent' : ''})`;
    case 'lookupIn': {
      const o = [op.opts & LOOKUP_NEW ? 'NEW' : '', op.opts & LOOKUP_EXPIRE_NODEST ? 'EXPIRE_NODEST' : ''].filter((x) => x).join('|');
      return `w${op.w}.lookupIn(f${op.flow}, ${ev(op.ev)}${o ? `, ${o}` : ''})`;
    }
    case 'lookupOut':
      return `w${op.w}.lookupOut(f${op.flow}, ${ev(op.ev)})`;
    case 'readFlow':
      return `t.readFlow(f${op.flow}${op.out ? ', server→client' : ''})`;
    case 'shadow':
      return `t.putShadow(f${op.flow} → rs${op.rs}${pool(op.pool)}, ${stateText(f!.proto, op.state)}, expires in ${op.ttl} ms${op.sp ? ', SYN proxy' : ''}${op.pp ? `, pp ${op.pp}` : ''}${op.supersede ? ', supersede' : ''})`;
    case 'remove':
      return `w${op.w}.remove(f${op.flow} as found)`;
    case 'removeLast':
      return `w${op.w}.remove(entry f${op.flow} was last seen at${op.due ? ', only if due' : ''}${op.state >= 0 ? `, expect ${stateText(f!.proto, op.state)}` : ''})`;
    case 'removeDue':
      return `t.remove(e${op.e}, only if due)`;
    case 'tick':
      return `now += ${op.ms}; t.expire(now)`;
    case 'server':
      return `rs${op.rs}: ${op.available ? 'available' : op.drained ? 'drained' : 'gone'}, weight ${op.weight}`;
    case 'srcLimit':
      return `H_SRC_LIMIT = ${op.on ? SRC_LIMIT : 0}`;
    case 'die':
      return `w${op.w} dies at its ${['', '1st', '2nd', '3rd'][op.nth] ?? `${op.nth}th`} ${op.kind} lock in ${opText(u, op.inner)}; t.releaseLocksOf(${op.w + 1}), t.holdReclaim(${op.w + 1})`;
  }
}

// ── table and model side by side ───────────────────────────────────────────────────────────
/** Counts of what the sequences reached (the generator's reach is asserted at the end). */
type Reach = Record<string, number>;

class Sim {
  readonly sab: SharedArrayBuffer;
  readonly rsSab: SharedArrayBuffer;
  readonly t: ConnTable;
  readonly rs: Int32Array;
  workers: ConnTable[];
  m: Model;
  now: number;
  private probeTurn = 0;

  constructor(
    readonly u: Universe,
    readonly reach: Reach | null,
  ) {
    this.sab = ConnTable.create(u.capacity, TABLE_TIMEOUTS);
    const a = new Int32Array(this.sab);
    // The table's random keys, made per seed: the same chains on every replay of a sequence.
    const keys = mulberry32(u.seed ^ 0x7ab1e);
    a[L.H_SALT] = keys() | 0;
    a[L.H_HASH_K1] = keys() | 0;
    for (let i = 0; i < 4; i++) a[L.H_SRC_KEY + i] = keys() | 0;
    this.rsSab = createRealServerRegion(RS_SLOTS);
    this.rs = new Int32Array(this.rsSab);
    for (let s = 0; s < RS_SLOTS; s++) {
      this.rs[s * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE;
      this.rs[s * L.RS_WORDS + L.RS_WEIGHT] = 1;
      this.rs[s * L.RS_WORDS + L.RS_UTHRESH] = THRESHOLDS[s]![0];
      this.rs[s * L.RS_WORDS + L.RS_LTHRESH] = THRESHOLDS[s]![1];
    }
    this.t = new ConnTable(this.sab, this.rsSab, L.OWNER_CONTROL, STUCK_MS);
    this.workers = Array.from({ length: WORKERS }, (_, w) => new ConnTable(this.sab, this.rsSab, w + 1, STUCK_MS));
    this.m = new Model(u.capacity);
    this.now = u.start;
  }

  private saw(what: string): void {
    if (this.reach !== null) this.reach[what] = (this.reach[what] ?? 0) + 1;
  }

  private chainIn(r: Rec): number {
    return this.t.bucketIn(r.proto, r.caddr, r.cports, r.vaddr, (r.proto & L.PROTO_V6) !== 0 ? r.hi : null);
  }
  private chainOut(r: Rec): number {
    return this.t.bucketOut(r.proto, r.daddr, r.dports, r.laddr, (r.proto & L.PROTO_V6) !== 0 ? r.hi : null);
  }
  /** The lengths of the chains r's keys would join (the model's entries on them). */
  private chainLengths(r: Rec): [number, number] {
    const bi = this.chainIn(r);
    const bo = this.chainOut(r);
    let ni = 0;
    let no = 0;
    for (const me of this.m.entries.values()) {
      if (this.chainIn(me) === bi) ni++;
      if (this.chainOut(me) === bo) no++;
    }
    return [ni, no];
  }

  private compareView(v: FlowView, me: ModelEntry, what: string): void {
    same(v.entry, me.e, `${what}: entry`);
    same(v.proto, me.proto, `${what}: protocol`);
    same(v.state, me.state, `${what}: state`);
    same(v.rs, me.rs, `${what}: real server`);
    same(v.svc, me.svc, `${what}: service`);
    same(v.fwd, me.fwd, `${what}: forwarding method`);
    for (const [name, x, y] of [
      ['caddr', v.caddr, me.caddr],
      ['cports', v.cports, me.cports],
      ['vaddr', v.vaddr, me.vaddr],
      ['daddr', v.daddr, me.daddr],
      ['dports', v.dports, me.dports],
      ['laddr', v.laddr, me.laddr],
    ] as const)
      same(x, y, `${what}: ${name}`);
    // A template's words 17 and 18 are NCONTROL and its timeout, not PROXY protocol words (layout.ts).
    if (!me.tpl) same(v.pp, me.pp, `${what}: pp`);
    same(v.sp, me.sp ? L.F_SYNPROXY : 0, `${what}: SYN proxy bits`);
    if ((me.proto & L.PROTO_V6) !== 0) for (let i = 0; i < L.HI_WORDS; i++) same(v.hi[i], me.hi[i], `${what}: high word ${i}`);
  }

  /**
   * Inserts connection record r by worker w with its first packet `ev`, as core.ts does, and
   * checks the outcome against the model's. Returns the entry (or the negative result) and whether
   * it was made now.
   */
  private connect(w: ConnTable, f: Flow, r: Rec, ev: number): { ne: number; created: boolean; text: string } {
    const m = this.m;
    const [ni, no] = this.chainLengths(r);
    const expect = m.link(r, ni, no);
    const nf = toNewFlow(r, this.now);
    const v = new FlowView();
    let ne: number;
    if ((r.flags & L.FWD_MASK) === L.FWD_FULLNAT) {
      ne = w.insert(nf);
      if (ne >= 0) w.touchIn(ne, v, ev, this.now);
    } else ne = w.insertIn(nf, v, ev, this.now);
    if ('result' in expect) {
      same(ne, expect.result, 'insert');
      this.saw(`insert ${expect.result}`);
      return { ne, created: false, text: `→ ${ne}` };
    }
    if ('existing' in expect) {
      const me = expect.existing;
      same(ne, me.e, 'insert of a key already there: its entry');
      same(nf.created, false, 'insert of a key already there: created');
      // The packet reached the flow already there: a shadow is adopted as by any of its packets.
      const wasShadow = me.shadow;
      if (wasShadow) m.adopt(me);
      m.touch(me, DIR_INPUT, ev, this.now);
      this.compareView(v, me, 'insert of a key already there');
      m.lastHandle.set(f.id, ne);
      this.saw(wasShadow ? 'insert onto a shadow' : 'insert onto a connection');
      return { ne, created: false, text: `→ e${ne} already there${wasShadow ? ' (a shadow)' : ''}, ${stateText(f.proto, me.state)}` };
    }
    if (ne < 0 || !nf.created || m.entries.has(ne))
      throw new Fail('result', `insert: table ${ne} (created ${nf.created}), model a new entry`);
    const me = m.add(ne, r, f.id, this.now, null);
    m.touch(me, DIR_INPUT, ev, this.now);
    this.compareView(v, me, 'new connection');
    this.saw('insert new');
    return { ne, created: true, text: `→ e${ne} new, ${stateText(f.proto, me.state)}` };
  }

  /** Runs op (by worker instance `as` when a dying one stands in), checks its results; a line of what it did. */
  step(op: Op, as: ConnTable | null = null): string {
    const m = this.m;
    const now = this.now;
    const u = this.u;
    switch (op.op) {
      case 'insert': {
        const f = u.flows[op.flow]!;
        return this.connect(as ?? this.workers[op.w]!, f, connRec(f, op.rs, f.fwd, op.pool), op.ev).text;
      }
      case 'persist': {
        const w = as ?? this.workers[op.w]!;
        const f = u.flows[op.flow]!;
        const tk = templateKey(f);
        const tv = new FlowView();
        // templateFor: a valid template whose server is still there is reserved; else invalidated.
        let mt = m.findTemplate(templateRec(f, 0));
        let expectT = -1;
        if (mt !== undefined) {
          const s = m.servers[mt.rs]!;
          if (!s.available || (op.eq && s.weight === 0)) {
            mt.invalid = true;
            this.saw('template invalidated');
            mt = undefined;
          } else {
            mt.ncontrol++;
            expectT = mt.e;
          }
        }
        let tmpl = w.templateFor(tk, tv, op.eq);
        same(tmpl, expectT, 'templateFor');
        let text = '';
        if (mt !== undefined) {
          this.compareView(tv, mt, 'templateFor');
          text = `template e${tmpl}`;
          this.saw('template reused');
        } else {
          const tr = templateRec(f, op.rs);
          const [ni, no] = this.chainLengths(tr);
          const expect = m.link(tr, ni, no);
          tmpl = w.insertTemplate(toNewFlow(tr, now, { templateMs: TEMPLATE_MS }), tv);
          if ('result' in expect) {
            same(tmpl, expect.result, 'insertTemplate');
            return `→ template ${tmpl}`;
          }
          if ('existing' in expect) {
            same(tmpl, expect.existing.e, 'insertTemplate of a template already there');
            mt = expect.existing;
          } else {
            if (tmpl < 0 || m.entries.has(tmpl)) throw new Fail('result', `insertTemplate: table ${tmpl}, model a new template`);
            mt = m.add(tmpl, tr, -1, now, null, TEMPLATE_MS);
            this.saw('template new');
          }
          mt.ncontrol++;
          this.compareView(tv, mt, 'insertTemplate');
          text = `new template e${tmpl}`;
        }
        // The connection goes to the template's server, by its method.
        const r = connRec(f, tv.rs, tv.fwd, op.pool);
        same(r.daddr, tv.daddr, "the template's server address");
        const c = this.connect(w, f, r, op.ev);
        if (c.ne >= 0 && c.created) {
          w.control(c.ne, tmpl, now);
          const me = m.entries.get(c.ne)!;
          me.control = tmpl;
          mt.expires = (now + mt.timeout) | 0;
          this.saw('controlled');
        } else {
          w.unreserve(tmpl);
          mt.ncontrol--;
        }
        return `${text}; connection ${c.text}`;
      }
      case 'lookupIn': {
        const w = as ?? this.workers[op.w]!;
        const f = u.flows[op.flow]!;
        const k = inKey(f);
        const v = new FlowView();
        const me = m.findIn(connRec(f, 0, f.fwd, 0));
        let expect = FLOW_MISS;
        if (me !== undefined) {
          const s = m.servers[me.rs]!;
          const tcp = (f.proto & 0xff) === TCP;
          if (!s.available && !s.drained) expect = FLOW_DEST_GONE;
          else if (
            op.opts & LOOKUP_NEW &&
            ((me.state === (tcp ? TCP_TIME_WAIT : SCTP_S_CLOSED) && me.control < 0) ||
              (op.opts & LOOKUP_EXPIRE_NODEST && s.weight === 0) ||
              (me.sp && (me.state === TCP_CLOSE || me.state === TCP_TIME_WAIT)))
          )
            expect = FLOW_REUSE;
          else expect = FLOW_HIT;
        }
        const got = w.lookupIn(k, v, op.ev, op.opts, now);
        same(got, expect, 'lookupIn');
        const names = ['MISS', 'HIT', 'DEST_GONE', 'REUSE'];
        if (me === undefined) return '→ MISS';
        m.lastHandle.set(f.id, me.e);
        same(v.entry, me.e, 'lookupIn: entry');
        this.saw(`lookupIn ${names[got]}`);
        if (got === FLOW_REUSE) this.compareView(v, me, 'lookupIn REUSE');
        if (got !== FLOW_HIT) return `→ ${names[got]} e${me.e}`;
        const wasShadow = me.shadow;
        if (wasShadow) m.adopt(me);
        m.touch(me, DIR_INPUT, op.ev, now);
        same(v.adopted, wasShadow, 'lookupIn: adopted');
        this.compareView(v, me, 'lookupIn');
        if (wasShadow) this.saw('adopted in');
        return `→ HIT e${me.e}${wasShadow ? ' adopted' : ''}, ${stateText(f.proto, me.state)}`;
      }
      case 'lookupOut': {
        const w = as ?? this.workers[op.w]!;
        const f = u.flows[op.flow]!;
        const ok = this.outKeyOf(f);
        const v = new FlowView();
        const cands = m.findOut(ok);
        const got = w.lookupOut(outKey(ok), v, op.ev, now);
        same(got, cands.length > 0, 'lookupOut found');
        if (!got) return '→ miss';
        const me = cands.find((c) => c.e === v.entry);
        if (me === undefined)
          throw new Fail('result', `lookupOut: table e${v.entry}, model one of ${cands.map((c) => `e${c.e}`).join(', ')}`);
        const wasShadow = me.shadow;
        if (wasShadow) m.adopt(me);
        m.touch(me, DIR_OUTPUT, op.ev, now);
        same(v.adopted, wasShadow, 'lookupOut: adopted');
        this.compareView(v, me, 'lookupOut');
        if (wasShadow) this.saw('adopted out');
        this.saw('lookupOut hit');
        return `→ e${me.e}${wasShadow ? ' adopted' : ''}, ${stateText(f.proto, me.state)}`;
      }
      case 'readFlow': {
        const f = u.flows[op.flow]!;
        this.probe(f, op.out ? 'out' : 'in', as ?? this.t);
        return '';
      }
      case 'shadow': {
        const f = u.flows[op.flow]!;
        const r = connRec(f, op.rs, f.fwd, op.pool);
        const p8 = f.proto & 0xff;
        const inactive = (p8 === TCP ? TCP_ACTIVE[op.state] : p8 === SCTP ? SCTP_ACTIVE[op.state] : 0) === 0;
        const rec = { ...r, flags: r.flags | (inactive ? L.F_INACTIVE : 0) };
        const expires = (now + op.ttl) | 0;
        const spWords: [number, number, number] = [op.ttl & 0xff, op.state, op.rs];
        const more = {
          state: op.state,
          expires,
          pp: op.pp,
          ppSeq: op.pp * 3,
          ...(op.sp ? { sp: 1, spDelta: spWords[0], spTsDelta: spWords[1], spOpts: spWords[2] } : {}),
        };
        const nf = toNewFlow(rec, now, more);
        const mayInsert = this.t.shadows() < u.shadowCap;
        same(mayInsert, m.shadows() < u.shadowCap, 'shadows below the cap');
        const put = (may: boolean): number | 'fresh' => {
          const ex = m.findIn(r);
          if (ex !== undefined) {
            const sameServer = ex.daddr === r.daddr && ex.dports === r.dports && (!f.v6 || Model.sameHi(ex.hi, r.hi, 6, 3));
            if (!ex.shadow || !sameServer) return -1;
            ex.state = op.state;
            ex.expires = expires;
            ex.inactive = inactive;
            ex.pp = op.pp;
            ex.ppSeq = op.pp * 3;
            if (op.sp) {
              ex.sp = true;
              ex.spWords = spWords;
            }
            return ex.e;
          }
          if (!may) return -1;
          const [ni, no] = this.chainLengths(r);
          return 'fresh' in m.link(rec, ni, no) ? 'fresh' : -1;
        };
        const settle = (expect: number | 'fresh', e: number, what: string): string => {
          if (expect !== 'fresh') {
            same(e, expect, what);
            return e >= 0 ? `→ e${e} refreshed` : '→ −1';
          }
          if (e < 0 || !nf.created || m.entries.has(e)) throw new Fail('result', `${what}: table ${e}, model a new shadow`);
          m.add(e, rec, f.id, now, {
            shadow: true,
            state: op.state,
            inactive,
            expires,
            pp: op.pp,
            ppSeq: op.pp * 3,
            sp: op.sp,
            spWords: op.sp ? spWords : [0, 0, 0],
          });
          this.saw('shadow new');
          return `→ e${e} new shadow`;
        };
        let expect = put(mayInsert);
        let e = this.t.putShadow(nf, mayInsert);
        let text = settle(expect, e, 'putShadow');
        if (e >= 0 && expect !== 'fresh') this.saw('shadow refreshed');
        if (e < 0 && !mayInsert && m.findIn(r) === undefined) this.saw('shadow cap');
        if (e < 0 && op.supersede) {
          // redis-sync dropSuperseded: a shadow of the key naming another server gives way to the record.
          const k = inKey(f);
          const b = this.t.bucketIn(k.proto, k.src, k.ports, k.dst, k.hi);
          this.t.lockBucket(b);
          const found = this.t.findIn(b, k.proto, k.src, k.ports, k.dst, k.hi);
          this.t.unlockBucket(b);
          const ex = m.findIn(r);
          same(found, ex === undefined ? -1 : ex.e, 'dropSuperseded: findIn');
          if (ex?.shadow) {
            same(
              this.t.remove(found, false, now, f.proto, f.caddr, k.ports),
              m.remove(ex.e, false, now, { proto: f.proto, caddr: f.caddr, cports: k.ports, state: -1 }),
              'dropSuperseded: remove',
            );
            expect = put(true);
            e = this.t.putShadow(nf, true);
            text += `; superseded e${found} ${settle(expect, e, 'putShadow after dropSuperseded')}`;
            this.saw('superseded');
          }
        }
        if (e >= 0) m.lastOut.set(f.id, { proto: r.proto, daddr: r.daddr, dports: r.dports, laddr: r.laddr, hi: [...r.hi] });
        return text;
      }
      case 'remove': {
        const w = as ?? this.workers[op.w]!;
        const f = u.flows[op.flow]!;
        const k = inKey(f);
        const v = new FlowView();
        const me = m.findIn(connRec(f, 0, f.fwd, 0));
        const found = w.readFlow(k, false, v);
        same(found, me !== undefined, 'readFlow before remove');
        if (me === undefined) return '→ not found';
        same(v.entry, me.e, 'readFlow before remove: entry');
        const ok = w.remove(v.entry, false, now, f.proto, f.caddr, k.ports);
        same(ok, m.remove(me.e, false, now, { proto: f.proto, caddr: f.caddr, cports: k.ports, state: -1 }), 'remove');
        this.saw('remove');
        return `→ e${me.e} removed`;
      }
      case 'removeLast': {
        const w = as ?? this.workers[op.w]!;
        const f = u.flows[op.flow]!;
        const e = m.lastHandle.get(f.id);
        if (e === undefined) return '→ never seen';
        const cports = (f.cport << 16) | f.vport | 0;
        const expect = m.remove(e, op.due, now, { proto: f.proto, caddr: f.caddr, cports, state: op.state });
        same(w.remove(e, op.due, now, f.proto, f.caddr, cports, op.state), expect, `remove(e${e})`);
        this.saw(expect ? 'removeLast removed' : 'removeLast refused');
        return `→ e${e} ${expect ? 'removed' : 'kept'}`;
      }
      case 'removeDue': {
        const had = m.entries.get(op.e);
        const rearm = had?.tpl === true && due(had.expires, now) && had.ncontrol > 0;
        const expect = m.remove(op.e, true, now, null);
        same(this.t.remove(op.e, true, now), expect, `remove(e${op.e}, only if due)`);
        if (rearm) this.saw('template re-armed');
        return `→ ${expect ? 'removed' : 'kept'}`;
      }
      case 'tick': {
        const before = this.now;
        this.now = (this.now + op.ms) | 0;
        if (this.now < before) this.saw('clock wrapped');
        const rearmed = [...m.entries.values()].filter((me) => me.tpl && due(me.expires, this.now) && me.ncontrol > 0).length;
        const expect = m.expire(this.now);
        same(this.t.expire(this.now), expect, 'expire: removed');
        if (expect > 0) this.saw('expired');
        if (rearmed > 0) this.saw('template re-armed');
        return `→ ${expect} expired`;
      }
      case 'server': {
        const o = op.rs * L.RS_WORDS;
        const flags = (op.available ? L.RSF_AVAILABLE : 0) | (op.drained ? L.RSF_DRAINED : 0);
        Atomics.and(this.rs, o + L.RS_FLAGS, L.RSF_OVERLOAD);
        Atomics.or(this.rs, o + L.RS_FLAGS, flags);
        Atomics.store(this.rs, o + L.RS_WEIGHT, op.weight);
        const s = m.servers[op.rs]!;
        s.available = op.available;
        s.drained = op.drained;
        s.weight = op.weight;
        return '';
      }
      case 'srcLimit':
        this.t.i32[L.H_SRC_LIMIT] = op.on ? SRC_LIMIT : 0;
        m.srcLimit = op.on;
        return '';
      case 'die':
        return this.die(op);
    }
  }

  /** The server→client key of flow f: its entry's, else the last it had, else its masq key to rs0. */
  private outKeyOf(f: Flow): OutKey {
    const me = this.m.findIn(connRec(f, 0, f.fwd, 0));
    if (me !== undefined) return { proto: me.proto, daddr: me.daddr, dports: me.dports, laddr: me.laddr, hi: [...me.hi] };
    return this.m.lastOut.get(f.id) ?? connRec(f, 0, L.FWD_MASQ, 0);
  }

  /**
   * Worker op.w dies in op.inner right after it takes its op.nth lock of op.kind; the control
   * thread gives back what it held. The model: what the operation did before that lock.
   */
  private die(op: Extract<Op, { op: 'die' }>): string {
    const owner = op.w + 1;
    const dying = new ConnTable(this.sab, this.rsSab, owner, STUCK_MS);
    const hooks = dying as unknown as { lockBucket(b: number): void; lockWord(i: number): void };
    const lockBucket = hooks.lockBucket.bind(dying);
    const lockWord = hooks.lockWord.bind(dying);
    const holdLock = L.holdOffset(this.u.capacity) + L.HOLD_LOCK;
    const taken: Record<LockKind, number> = { bucket: 0, entry: 0, alloc: 0 };
    let died = false;
    const took = (kind: LockKind | 'hold') => {
      if (kind === op.kind && ++taken[kind] === op.nth) {
        died = true;
        throw new Death();
      }
    };
    hooks.lockBucket = (b) => {
      lockBucket(b);
      took('bucket');
    };
    hooks.lockWord = (i) => {
      lockWord(i);
      took(i === L.H_ALLOC_LOCK ? 'alloc' : i === holdLock ? 'hold' : 'entry');
    };
    const before = this.m.clone();
    // What a lookup dying at its second entry lock had done: the adoption (its first) is whole.
    const adoptee =
      op.kind === 'entry' && op.nth === 2 && (op.inner.op === 'lookupIn' || op.inner.op === 'lookupOut')
        ? op.inner.op === 'lookupIn'
          ? before.findIn(connRec(this.u.flows[op.inner.flow]!, 0, 0, 0))
          : before.findOut(this.outKeyOf(this.u.flows[op.inner.flow]!))[0]
        : undefined;
    let text: string;
    try {
      text = this.step(op.inner, dying);
    } catch (e) {
      if (!(e instanceof Death)) throw e;
      text = '';
    }
    if (!died) return `${text} (did not get that far)`;
    this.m = before;
    if (adoptee !== undefined) {
      const me = this.m.entries.get(adoptee.e)!;
      if (me.shadow) this.m.adopt(me);
    }
    const a = this.t.i32;
    let held = 0;
    for (let b = 0; b < this.u.capacity; b++) if (a[L.bucketLocksOffset(this.u.capacity) + b] === owner) held++;
    for (let e = 0; e < this.u.capacity; e++) if (a[this.t.base(e) + L.E_LOCK] === owner) held++;
    if (a[L.H_ALLOC_LOCK] === owner) held++;
    if (a[holdLock] === owner) held++;
    if (held === 0) throw new Fail('death', `the dead worker ${owner} holds no lock word, though it died holding one`);
    const released = this.t.releaseLocksOf(owner);
    if (released !== held)
      throw new Fail('death', `releaseLocksOf(${owner}) gave back ${released} locks; the dead worker held ${held} lock words`);
    same(this.t.holdReclaim(owner), 0, 'holdReclaim: held slots given back', 'death');
    this.saw(`died at ${op.kind} ${op.nth} in ${op.inner.op}`);
    return `→ died holding ${held} lock${held > 1 ? 's' : ''}${adoptee?.shadow ? ` after adopting e${adoptee.e}` : ''}`;
  }

  /** A lookup of flow f by one key (readFlow: nothing changes) against the model. */
  private probe(f: Flow, dir: 'in' | 'out', t: ConnTable): void {
    const v = new FlowView();
    if (dir === 'in') {
      const me = this.m.findIn(connRec(f, 0, f.fwd, 0));
      same(t.readFlow(inKey(f), false, v), me !== undefined, `readFlow(f${f.id}) found`, 'lookup');
      if (me !== undefined) this.compareView(v, me, `readFlow(f${f.id})`);
    } else {
      const k = this.outKeyOf(f);
      const cands = this.m.findOut(k);
      same(t.readFlow(outKey(k), true, v), cands.length > 0, `readFlow(f${f.id}, server→client) found`, 'lookup');
      if (cands.length > 0) {
        const me = cands.find((c) => c.e === v.entry);
        if (me === undefined)
          throw new Fail('lookup', `readFlow(f${f.id}, server→client): table e${v.entry}, model ${cands.map((c) => `e${c.e}`)}`);
        this.compareView(v, me, `readFlow(f${f.id}, server→client)`);
      }
    }
  }

  /** The invariants, on the table's memory, and the model's entries against it. */
  check(flow: number): void {
    const { capacity, shadowCap } = this.u;
    const t = this.t;
    const a = t.i32;
    const m = this.m;
    const locks = L.bucketLocksOffset(capacity);
    for (let b = 0; b < capacity; b++) if (a[locks + b] !== 0) throw new Fail('lock', `bucket lock ${b} held by owner ${a[locks + b]}`);
    for (let e = 0; e < capacity; e++)
      if (a[t.base(e) + L.E_LOCK] !== 0) throw new Fail('lock', `entry lock of e${e} held by owner ${a[t.base(e) + L.E_LOCK]}`);
    if (a[L.H_ALLOC_LOCK] !== 0) throw new Fail('lock', `allocation lock held by owner ${a[L.H_ALLOC_LOCK]}`);
    if (a[L.holdOffset(capacity) + L.HOLD_LOCK] !== 0) throw new Fail('lock', 'hold-area lock held');

    const live: number[] = [];
    for (let e = 0; e < capacity; e++) if (a[t.base(e) + L.E_FLAGS]! & L.F_IN_USE) live.push(e);
    const hiOf = (o: number) => ((a[o + L.E_PROTO]! & L.PROTO_V6) !== 0 ? t.entryHi(o) : null);
    const bucketIn = (o: number) => t.bucketIn(a[o + L.E_PROTO]!, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, a[o + L.E_VADDR]!, hiOf(o));
    const bucketOut = (o: number) => t.bucketOut(a[o + L.E_PROTO]!, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, a[o + L.E_LADDR]!, hiOf(o));
    // Both chains: each live entry once, on the bucket of its key; nothing else; no loop.
    for (const [name, heads, next, bucketOf] of [
      ['client→server', L.inHeadsOffset(), L.E_NEXT_IN, bucketIn],
      ['server→client', L.outHeadsOffset(capacity), L.E_NEXT_OUT, bucketOut],
    ] as const) {
      const on = new Int32Array(capacity).fill(-1);
      for (let b = 0; b < capacity; b++) {
        let steps = 0;
        for (let ref = a[heads + b]!; ref !== 0; ref = a[t.base(ref - 1) + next]!) {
          if (++steps > capacity) throw new Fail('chain', `${name} chain ${b} loops`);
          if (ref < 1 || ref > capacity) throw new Fail('chain', `${name} chain ${b} links to ${ref - 1}, outside the table`);
          const e = ref - 1;
          const o = t.base(e);
          if (!(a[o + L.E_FLAGS]! & L.F_IN_USE)) throw new Fail('chain', `${name} chain ${b} holds e${e}, which is free`);
          if (on[e] !== -1) throw new Fail('chain', `e${e} is on ${name} chain ${on[e]} and again on chain ${b}`);
          on[e] = b;
          if (bucketOf(o) !== b) throw new Fail('chain', `e${e} is on ${name} chain ${b}, its key hashes to ${bucketOf(o)}`);
        }
      }
      for (const e of live) if (on[e] === -1) throw new Fail('chain', `e${e} is live and on no ${name} chain: unreachable by that key`);
    }
    // The free list: exactly the other entries.
    let free = 0;
    const seen = new Uint8Array(capacity);
    for (let ref = a[L.H_FREE_HEAD]!; ref !== 0; ref = a[t.base(ref - 1) + L.E_NEXT_IN]!) {
      if (++free > capacity || ref < 1 || ref > capacity) throw new Fail('free', 'the free list loops or leaves the table');
      if (a[t.base(ref - 1) + L.E_FLAGS]! & L.F_IN_USE) throw new Fail('free', `e${ref - 1} is live and on the free list`);
      if (seen[ref - 1]) throw new Fail('free', `e${ref - 1} is on the free list twice`);
      seen[ref - 1] = 1;
    }
    if (free + live.length !== capacity)
      throw new Fail('free', `free + used ≠ capacity: ${free} free + ${live.length} used, capacity ${capacity}`);
    if (t.count() !== live.length) throw new Fail('count', `H_COUNT ${t.count()}, live entries ${live.length}`);
    const shadowsLive = live.filter((e) => a[t.base(e) + L.E_FLAGS]! & L.F_SHADOW).length;
    if (t.shadows() !== shadowsLive) throw new Fail('count', `H_SHADOWS ${t.shadows()}, shadow entries ${shadowsLive}`);
    if (shadowsLive > shadowCap) throw new Fail('count', `${shadowsLive} shadows, over the cap of ${shadowCap}`);
    // Real-server counters and templates' NCONTROL from the entries.
    const counts = Array.from({ length: RS_SLOTS }, () => [0, 0, 0]);
    const controlled = new Map<number, number>();
    const sources = new Map<number, number>();
    for (const e of live) {
      const o = t.base(e);
      const fl = a[o + L.E_FLAGS]!;
      const p = a[o + L.E_PROTO]!;
      if (fl & L.F_HALFOPEN) {
        const slot = t.sourceSlot((p & L.PROTO_V6) !== 0, a[o + L.E_CADDR]!, a[o + L.E_CADDR_HI]!, a[o + L.E_CADDR_HI + 1]!);
        sources.set(slot, (sources.get(slot) ?? 0) + 1);
      }
      if (!(fl & L.F_TEMPLATE) && a[o + L.E_CONTROL] !== 0) {
        const c = a[o + L.E_CONTROL]! - 1;
        if (!(a[t.base(c) + L.E_FLAGS]! & L.F_TEMPLATE))
          throw new Fail('template', `e${e} is controlled by e${c}, which is no live template`);
        controlled.set(c, (controlled.get(c) ?? 0) + 1);
      }
      if (fl & L.F_SHADOW) continue;
      const c = counts[a[o + L.E_RS]!]!;
      c[fl & L.F_TEMPLATE ? 2 : fl & L.F_INACTIVE ? 1 : 0]!++;
    }
    for (let s = 0; s < RS_SLOTS; s++) {
      const o = s * L.RS_WORDS;
      const have = [this.rs[o + L.RS_ACTIVE], this.rs[o + L.RS_INACTIVE], this.rs[o + L.RS_PERSIST]];
      const want = counts[s]!;
      if (have.some((x, i) => x !== want[i]))
        throw new Fail(
          'rs-counters',
          `real server ${s}: ActiveConn/InActConn/PersistConn ${have.join('/')}, its entries say ${want.join('/')}`,
        );
      const overload = (this.rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD) !== 0;
      if (overload !== m.servers[s]!.overload)
        throw new Fail('rs-counters', `real server ${s}: OVERLOAD ${overload}, model ${m.servers[s]!.overload}`);
    }
    for (const e of live) {
      const o = t.base(e);
      if (!(a[o + L.E_FLAGS]! & L.F_TEMPLATE)) continue;
      if (a[o + L.E_NCONTROL] !== (controlled.get(e) ?? 0))
        throw new Fail('template', `template e${e}: NCONTROL ${a[o + L.E_NCONTROL]}, connections it controls ${controlled.get(e) ?? 0}`);
    }
    for (let slot = 0; slot < capacity; slot++)
      if (t.halfOpenAt(slot) !== (sources.get(slot) ?? 0))
        throw new Fail(
          'sources',
          `source slot ${slot}: half-open counter ${t.halfOpenAt(slot)}, entries counted there ${sources.get(slot) ?? 0}`,
        );
    // Every entry as the model has it.
    if (live.length !== m.entries.size || live.some((e) => !m.entries.has(e)))
      throw new Fail(
        'model',
        `live entries ${live.map((e) => `e${e}`).join(' ')}; model ${[...m.entries.keys()].map((e) => `e${e}`).join(' ')}`,
      );
    for (const me of m.entries.values()) {
      const o = t.base(me.e);
      const flags =
        L.F_IN_USE |
        me.fwd |
        (me.noOutput ? L.F_NOOUTPUT : 0) |
        (me.inactive ? L.F_INACTIVE : 0) |
        (me.tpl ? L.F_TEMPLATE : 0) |
        (me.invalid ? L.F_INVALID : 0) |
        (me.shadow ? L.F_SHADOW : 0) |
        (me.halfOpen ? L.F_HALFOPEN : 0) |
        (me.sp ? L.F_SYNPROXY : 0);
      const words: [string, number, number][] = [
        ['flags', a[o + L.E_FLAGS]!, flags],
        ['protocol', a[o + L.E_PROTO]!, me.proto],
        ['state', a[o + L.E_STATE]!, me.state],
        ['caddr', a[o + L.E_CADDR]!, me.caddr],
        ['cports', a[o + L.E_CPORTS]!, me.cports],
        ['vaddr', a[o + L.E_VADDR]!, me.vaddr],
        ['daddr', a[o + L.E_DADDR]!, me.daddr],
        ['dports', a[o + L.E_DPORTS]!, me.dports],
        ['laddr', a[o + L.E_LADDR]!, me.laddr],
        ['real server', a[o + L.E_RS]!, me.rs],
        ['service', a[o + L.E_SVC]!, me.svc],
        ['timer', a[o + L.E_EXPIRES]!, me.expires],
      ];
      if (me.tpl) words.push(['template timeout', a[o + L.E_TIMEOUT]!, me.timeout], ['NCONTROL', a[o + L.E_NCONTROL]!, me.ncontrol]);
      else
        words.push(
          ['controlled by', a[o + L.E_CONTROL]!, me.control + 1],
          ['pp', a[o + L.E_PP]!, me.pp],
          ['pp seq', a[o + L.E_PP_SEQ]!, me.ppSeq],
        );
      if (me.proto & L.PROTO_V6) for (let i = 0; i < L.HI_WORDS; i++) words.push([`high word ${i}`, a[o + L.E_HI + i]!, me.hi[i]!]);
      for (const [name, have, want] of words)
        if (have !== want)
          throw new Fail(
            'model',
            `e${me.e} (${me.tpl ? 'template' : `f${me.flow}`}) ${name}: table ${name === 'flags' ? `0x${have.toString(16)}` : have}, model ${name === 'flags' ? `0x${want.toString(16)}` : want}`,
          );
      if (me.sp) {
        const sp = t.spRecordWords(me.e);
        if (sp.some((x, i) => x !== me.spWords[i])) throw new Fail('model', `e${me.e}: SYN proxy words ${sp}, model ${me.spWords}`);
      }
    }
    // Lookups: the operation's flow and two more in turn, both keys.
    const n = this.u.flows.length;
    for (const id of [flow, (this.probeTurn++ * 2) % n, (this.probeTurn * 2 + 1) % n]) {
      if (id < 0) continue;
      const f = this.u.flows[id]!;
      this.probe(f, 'in', t);
      this.probe(f, 'out', t);
    }
  }
}

// ── generation ─────────────────────────────────────────────────────────────────────────────
const TCP_EVENTS = [
  TCPF_SYN,
  TCPF_SYN | TCPF_ACK,
  TCPF_ACK,
  TCPF_PSH | TCPF_ACK,
  TCPF_FIN | TCPF_ACK,
  TCPF_FIN,
  TCPF_RST,
  TCPF_RST | TCPF_ACK,
  0,
];

/** Recoverable death points (see the top); UVS_MODEL_DEATH=all adds the rest. */
const DEATHS: Record<string, readonly (readonly [LockKind, number])[]> = {
  lookupIn: [
    ['bucket', 1],
    ['entry', 1],
    ['entry', 2],
  ],
  lookupOut: [
    ['bucket', 1],
    ['entry', 1],
    ['entry', 2],
  ],
  readFlow: [['bucket', 1]],
  remove: [
    ['bucket', 1],
    ['bucket', 2],
    ['bucket', 3],
  ],
  insert: [['alloc', 1]],
  persist: [['bucket', 1]],
};
const DEATHS_UNREPAIRED: Record<string, readonly (readonly [LockKind, number])[]> = {
  remove: [['alloc', 1]],
  insert: [
    ['bucket', 1],
    ['bucket', 2],
    ['entry', 1],
    ['alloc', 2],
  ],
  persist: [
    ['alloc', 1],
    ['bucket', 2],
    ['bucket', 3],
    ['alloc', 2],
    ['entry', 1],
  ],
};

function generator(u: Universe, seed: number): (sim: Sim) => Op {
  const next = mulberry32(seed);
  const below = (n: number) => next() % n;
  const n = u.flows.length;
  /** A flow: 70 % one the table holds a connection of (if any), else any. */
  const flow = (sim: Sim): number => {
    if (below(10) < 7) {
      const held = [...sim.m.entries.values()].filter((me) => !me.tpl).map((me) => me.flow);
      if (held.length > 0) return held[below(held.length)]!;
    }
    return below(n);
  };
  const event = (f: Flow, first: boolean): number => {
    const p8 = f.proto & 0xff;
    if (p8 === UDP) return 0;
    if (p8 === SCTP) return first && below(10) < 8 ? SCTP_EV_INIT : below(SCTP_EVENT_COUNT);
    return first && below(10) < 8 ? TCPF_SYN : TCP_EVENTS[below(TCP_EVENTS.length)]!;
  };
  const packetOp = (sim: Sim, kind: string, w: number): Op => {
    const id = flow(sim);
    const f = u.flows[id]!;
    switch (kind) {
      case 'insert':
        return { op: 'insert', w, flow: id, rs: below(RS_SLOTS), pool: below(POOL_PORTS), ev: event(f, true) };
      case 'persist':
        return { op: 'persist', w, flow: id, rs: below(RS_SLOTS), pool: below(POOL_PORTS), ev: event(f, true), eq: below(4) === 0 };
      case 'lookupIn': {
        const ev = event(f, false);
        const p8 = f.proto & 0xff;
        // May start a connection (core.ts isNew): a TCP SYN without ACK/RST, an SCTP INIT.
        const isNew = p8 === TCP ? (ev & (TCPF_SYN | TCPF_RST | TCPF_ACK)) === TCPF_SYN : p8 === SCTP && ev === SCTP_EV_INIT;
        return { op: 'lookupIn', w, flow: id, ev, opts: isNew ? LOOKUP_NEW | (below(3) === 0 ? LOOKUP_EXPIRE_NODEST : 0) : 0 };
      }
      case 'lookupOut':
        return { op: 'lookupOut', w, flow: id, ev: event(f, false) };
      case 'readFlow':
        return { op: 'readFlow', flow: id, out: below(2) === 0 };
      default:
        return { op: 'remove', w, flow: id };
    }
  };
  const WEIGHTS: [string, number][] = [
    ['insert', 16],
    ['persist', 7],
    ['lookupIn', 18],
    ['lookupOut', 12],
    ['readFlow', 2],
    ['shadow', 11],
    ['remove', 5],
    ['removeLast', 5],
    ['removeDue', 2],
    ['tick', 12],
    ['server', 3],
    ['srcLimit', 1],
    ['die', 6],
  ];
  const total = WEIGHTS.reduce((s, [, x]) => s + x, 0);
  return (sim) => {
    let r = below(total);
    let kind = WEIGHTS[0]![0];
    for (const [k, x] of WEIGHTS) {
      if (r < x) {
        kind = k;
        break;
      }
      r -= x;
    }
    const w = below(WORKERS);
    switch (kind) {
      case 'shadow': {
        // Mostly flows this node does not hold: other nodes' flows arriving; some replace one held.
        const id = below(4) === 0 ? flow(sim) : below(n);
        const f = u.flows[id]!;
        const p8 = f.proto & 0xff;
        const state = p8 === TCP ? (below(10) < 4 ? TCP_ESTABLISHED : below(11)) : p8 === SCTP ? below(14) : 0;
        return {
          op: 'shadow',
          flow: id,
          rs: below(RS_SLOTS),
          pool: below(POOL_PORTS),
          state,
          ttl: 1000 + below(200_000),
          sp: p8 === TCP && below(10) === 0,
          pp: f.fwd === L.FWD_FULLNAT && below(10) === 0 ? 1 + below(1000) : 0,
          supersede: below(2) === 0,
        };
      }
      case 'removeLast': {
        const id = flow(sim);
        const me = sim.m.entries.get(sim.m.lastHandle.get(id) ?? -1);
        return {
          op: 'removeLast',
          w,
          flow: id,
          state: below(2) === 0 ? -1 : me !== undefined && below(3) > 0 ? me.state : below(11),
          due: below(4) === 0,
        };
      }
      case 'removeDue':
        return { op: 'removeDue', e: below(u.capacity) };
      case 'tick': {
        const x = below(10);
        return { op: 'tick', ms: x < 6 ? 50 + below(3000) : x < 9 ? 5000 + below(125_000) : 200_000 + below(800_000) };
      }
      case 'server': {
        const available = below(10) < 7;
        return { op: 'server', rs: below(RS_SLOTS), available, drained: !available && below(3) === 0, weight: below(5) === 0 ? 0 : 1 };
      }
      case 'srcLimit':
        return { op: 'srcLimit', on: below(2) === 0 };
      case 'die': {
        const inner = ['lookupIn', 'lookupOut', 'readFlow', 'remove', 'insert', 'persist'][below(6)]!;
        const points = [...DEATHS[inner]!, ...(DEATH_ALL ? (DEATHS_UNREPAIRED[inner] ?? []) : [])];
        const [k, nth] = points[below(points.length)]!;
        return { op: 'die', w, kind: k, nth, inner: packetOp(sim, inner, w) };
      }
      default:
        return packetOp(sim, kind, w);
    }
  };
}

// ── running, shrinking, reporting ──────────────────────────────────────────────────────────
interface Run {
  ops: Op[];
  lines: string[];
  fail: Fail | null;
  /** Index of the failing operation. */
  at: number;
}

/** Runs `ops` (or OPS generated ones) on a fresh table and model; stops at the first broken promise. */
function run(u: Universe, ops: Op[] | null, reach: Reach | null = null): Run {
  const sim = new Sim(u, reach);
  const gen = ops === null ? generator(u, u.seed) : null;
  const done: Op[] = [];
  const lines: string[] = [];
  const n = ops === null ? OPS : ops.length;
  for (let i = 0; i < n; i++) {
    const op = ops === null ? gen!(sim) : ops[i]!;
    done.push(op);
    try {
      lines.push(sim.step(op));
      sim.check(op.op === 'die' && 'flow' in op.inner ? op.inner.flow : 'flow' in op ? op.flow : -1);
    } catch (e) {
      const fail = e instanceof Fail ? e : new Fail('exception', e instanceof Error ? (e.stack ?? e.message) : String(e));
      lines.push(`✗ ${fail.message}`);
      return { ops: done, lines, fail, at: i };
    }
  }
  return { ops: done, lines, fail: null, at: -1 };
}

/** The shortest sequence found that still fails the same way: the failing prefix, then chunks and single operations taken out. */
function shrink(u: Universe, failed: Run): Run {
  const kind = failed.fail!.kind;
  let best = failed;
  let cur = failed.ops.slice(0, failed.at + 1);
  let budget = 4000;
  const attempt = (cand: Op[]): boolean => {
    if (budget-- <= 0) return false;
    const r = run(u, cand);
    if (r.fail === null || r.fail.kind !== kind) return false;
    best = r;
    cur = r.ops;
    return true;
  };
  for (let size = cur.length >> 1; size >= 1; size >>= 1) {
    for (let start = cur.length - size; start >= 0; start -= size) {
      attempt([...cur.slice(0, start), ...cur.slice(start + size)]);
      if (start > cur.length) start = cur.length;
    }
  }
  for (let changed = true; changed; ) {
    changed = false;
    for (let i = cur.length - 1; i >= 0; i--) {
      if (i >= cur.length) continue;
      if (attempt([...cur.slice(0, i), ...cur.slice(i + 1)])) changed = true;
      else {
        // A death that is not needed: the operation alone.
        const op = cur[i]!;
        if (op.op === 'die' && attempt([...cur.slice(0, i), op.inner, ...cur.slice(i + 1)])) changed = true;
      }
    }
  }
  return best;
}

function report(u: Universe, original: Run, min: Run): string {
  const used = new Set<number>();
  for (const op of min.ops) {
    const o = op.op === 'die' ? op.inner : op;
    if ('flow' in o) used.add(o.flow);
  }
  const width = Math.max(...min.ops.map((op) => opText(u, op).length));
  return [
    `seed ${u.seed} (capacity ${u.capacity}, shadow cap ${u.shadowCap}, ${u.flows.length} flows, clock from ${u.start}):`,
    `${min.fail!.kind}: ${min.fail!.message}`,
    `after operation ${original.at + 1}; shrunk to ${min.ops.length} (UVS_MODEL_SEED=${u.seed} reproduces it):`,
    ...[...used].sort((x, y) => x - y).map((id) => `  ${flowText(u.flows[id]!)}`),
    ...min.ops.map((op, i) => `  ${String(i + 1).padStart(3)}  ${opText(u, op).padEnd(width)}  // ${min.lines[i] ?? ''}`),
  ].join('\n');
}

const reach: Reach = {};
let completed = false;

test(`the connection table agrees with a plain model over ${ONLY !== undefined ? `seed ${ONLY}` : `${SEEDS} random sequences`} of ${OPS} operations: both chains, free list, counters, shadows, templates`, () => {
  const seeds = ONLY !== undefined ? [Number(ONLY)] : Array.from({ length: SEEDS }, (_, i) => i + 1);
  for (const seed of seeds) {
    const u = universe(seed);
    const r = run(u, null, reach);
    if (r.fail !== null) assert.fail(report(u, r, shrink(u, r)));
  }
  completed = true;
});

test('the random sequences reach what they are for: a full table, full-NAT ports taken, adoption both ways, reuse, gone servers, the shadow cap, template re-arms, deaths with locks held, the clock wrap', (t) => {
  if (ONLY !== undefined || SEEDS < 100) {
    t.skip('a single seed or fewer than 100 sequences');
    return;
  }
  assert.ok(completed, 'the sequences did not all run: see the test above');
  for (const what of [
    'insert -1',
    'insert -2',
    'insert onto a connection',
    'insert onto a shadow',
    'adopted in',
    'adopted out',
    'lookupIn REUSE',
    'lookupIn DEST_GONE',
    'shadow cap',
    'shadow refreshed',
    'superseded',
    'template new',
    'template reused',
    'template invalidated',
    'template re-armed',
    'controlled',
    'expired',
    'clock wrapped',
    'removeLast removed',
    'removeLast refused',
    'died at bucket 1 in lookupIn',
    'died at entry 2 in lookupIn',
    'died at entry 2 in lookupOut',
    'died at bucket 3 in remove',
    'died at alloc 1 in insert',
  ])
    assert.ok((reach[what] ?? 0) > 0, `never reached: ${what} (${JSON.stringify(reach)})`);
});
