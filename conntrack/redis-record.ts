/**
 * What a node believes of what it reads from Redis. Anyone who can write to Redis — another node,
 * or whoever got its password — can publish flow records, counts and heartbeats, so each is input
 * from the network: parsed strictly, checked against this node's own configuration, and refused
 * (counted, by reason) when it does not describe a flow this node could have made itself. Pure:
 * no I/O, no clock (callers pass the time), so the rules are unit-tested as data.
 *
 * A flow record (redis-sync.ts writes it; fields joined by '|'):
 *   0 proto (| PROTO_V6)   1 caddr   2 cports (cport << 16 | vport)   3 vaddr
 *   4 daddr   5 dports (dport << 16 | lport)   6 laddr   7 forwarding method (FWD_*)
 *   8 service key   9 real server "addr:port"   10 state   11 inactive (0/1)
 *   12 expiresAt (ms since the Unix epoch)   13 IPv6 high words (12, comma-separated; '' for IPv4)
 *   then, only for a flow with a PROXY protocol header (lb/proxy-protocol.ts):
 *   pp=<E_PP word>,<E_PP_SEQ>  the header's length, version and delivery flags, and its sequence
 *                              number: the adopting node must go on shifting by exactly as much
 *   or, only for a SYN-proxied flow past its server's handshake (lb/synproxy.ts; never both):
 *   sp=<SP_DELTA>,<SP_TSDELTA>,<SP_OPTS>  its sequence and timestamp deltas and its options and
 *                              window scales: the adopting node must go on adjusting by as much
 *   then g=<generation>,<writer>  when the record was written and by whom (below); every record
 *                              of this release has it
 *   last, only when redis.recordKey is set: the MAC, 128 bits of HMAC-SHA256 over everything
 *   before it (the generation and the writer included), in hex
 * Versions, each read by the releases after it: 13 fields (before IPv6, IPv4 only); 14 fields
 * (IPv6 high words); then the pp= and sp= fields; then the g= field. None of 'p', 's' and 'g' is
 * a hex digit, so no optional field looks like a MAC. A node from before pp=/sp= refuses such a
 * record as malformed — rightly, as it would forward the flow without its shift. A node from
 * before g= without a key reads a record with it as before (it takes the field for an unchecked
 * MAC: at most 16 fields, which is what such a record has without a MAC); with a key it refuses
 * it (`auth`: one field more than it allows; `malformed` with a pp= or sp= field: 17 fields).
 * docs/redis.md "Rolling upgrades".
 *
 * Generation: a hybrid logical clock, GEN_PER_MS per millisecond of the writer's Unix time — the
 * larger of (its last generation + 1), (now × GEN_PER_MS) and (the largest generation it has read
 * in a record it believed), so it survives a restart of the writer (a restarted node starts at its
 * clock, past everything it wrote before as long as its clock did not step back further than it
 * was down) and orders records of different writers by cause: a node that adopted a flow from A's
 * record had read that record, so everything it writes after is newer. A shadow keeps the
 * generation of the record it was made from; a record for the same client→server key that is not
 * newer is refused (`stale`): a record captured earlier and written back to Redis — one of the
 * same flow, or of an earlier flow on a client port that was reused since — cannot roll a flow
 * back. A record without a generation (an earlier release's) may make or refresh a shadow that
 * has none, never replace one that has one. Writer: the node id, percent-encoded (node ids may
 * contain '|').
 *
 * A record is installed only if it is what this node would have written for the same flow
 * (the kernel's backup does less: ip_vs_proc_conn keeps FWD_MASK|NOOUTPUT|INACTIVE|TEMPLATE of
 * the received flags and takes the forwarding method from its local dest):
 *   - it names a service and a real server this node has listed (else `unknown_server`);
 *   - its protocol and family are the service's (`protocol`);
 *   - its virtual address is the service's VIP, its server address the real server's, and its
 *     reply address what the forwarding method puts there: the client for masq and tunnel, a
 *     full-NAT pool address for full-NAT (`address`);
 *   - likewise its ports: the service port, the real server's port, the client port or one of the
 *     pool's ports (`port`);
 *   - its forwarding method is exactly the real server's, no other flag bit (a template or shadow
 *     bit would pin clients or confuse the table) (`forwarding`);
 *   - its state exists for the protocol and its inactive bit is the one that state implies (`state`);
 *   - a SYN proxy field only on a masq or full-NAT TCP flow without PROXY protocol, its options
 *     word with no bit but SPO_*'s and window scales of at most 14 (`synproxy`);
 *   - it expires in the future, at most the state's timeout (plus MAX_CLOCK_SKEW_MS) away — a
 *     23-day record cannot hold a slot for 23 days (`expiry`);
 *   - its generation is not ahead of this node's clock by more than MAX_CLOCK_SKEW_MS — one that
 *     was would outrank every true record of the flow until then (`generation`);
 *   - with a key configured, it carries a valid MAC (`auth`);
 *   - and, checked when it is installed (redis-sync.ts): it is newer than the record the shadow
 *     of its key was made from, if there is one (`stale`).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import * as L from './layout';
import { ppLength, ppVersion } from './layout';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../net/packet';
import { PP_MAX_LEN, PP_V1, PP_V2, writeProxyHeader } from '../net/proxy-protocol';
import { TCP_ACTIVE, TCP_STATE_COUNT } from './state';
import { SCTP_ACTIVE, SCTP_STATE_COUNT } from './sctp-state';

/** Why a record was refused: the `reason` label of uvs_redis_records_refused_total. */
export const RECORD_REFUSALS = [
  'malformed',
  'auth',
  'unknown_server',
  'protocol',
  'address',
  'port',
  'forwarding',
  'state',
  'expiry',
  'proxy_protocol', // a PROXY protocol word this node would not have written for the flow
  'synproxy', // SYN proxy words on a flow that cannot be proxied, or options no node writes
  'generation', // a generation ahead of this node's clock by more than MAX_CLOCK_SKEW_MS
  'stale', // not newer than the record the key's shadow was made from: a replay, or overtaken
  'key_mismatch', // a lookup's answer describes another flow than the parked packet's
  'shadow_cap', // redis.maxShadowShare of the table already holds shadows
  'not_installed', // a local entry has the key, or the table is full
] as const;
export type RecordRefusal = (typeof RECORD_REFUSALS)[number];

/** Why a node's published counts were not believed: uvs_redis_counts_refused_total{reason}. */
export const COUNTS_REFUSALS = ['malformed', 'value', 'too_large', 'auth', 'stale'] as const;
export type CountsRefusal = (typeof COUNTS_REFUSALS)[number];

/** Why a node in the node list was ignored: uvs_redis_nodes_refused_total{reason}. */
export const NODE_REFUSALS = ['future', 'cap', 'bad_id', 'auth', 'stale'] as const;
export type NodeRefusal = (typeof NODE_REFUSALS)[number];

/**
 * Clocks of the nodes may differ by this much (NTP keeps them within milliseconds; 5 s tolerates
 * a node that lost its time source for a while). A heartbeat or an expiry beyond it is a lie.
 */
export const MAX_CLOCK_SKEW_MS = 5000;
/**
 * Longest record accepted: an IPv6 record with names, the sp= field and a MAC is ~500 characters;
 * the writer adds its node id (at most 255 characters, 765 percent-encoded; a host name ~20).
 */
export const MAX_RECORD_CHARS = 1536;
/**
 * Generations per millisecond (the writer's counter within one): a generation reads as the Unix
 * time in ms followed by three digits. A node writes at most 20,000 records/s (redis-sync.ts), 20
 * per ms, so its generations stay within a millisecond of its clock.
 */
export const GEN_PER_MS = 1000;
/** MAC length in hex: HMAC-SHA256 truncated to 128 bits (RFC 2104 §5 allows ≥ half the output). */
export const MAC_HEX = 32;
/** Most connections a count may claim: a node's table holds at most 2^26 entries (dataplane.tableSize). */
export const MAX_COUNT = 1 << 26;
/** Node ids are host names by default; anything longer or with control characters is not a node. */
const NODE_ID = /^[\x21-\x7e]{1,255}$/;

/** A record's fields once parsed (addresses as int32 words, as in the table). */
export interface FlowRecord {
  proto: number;
  caddr: number;
  cports: number;
  vaddr: number;
  daddr: number;
  dports: number;
  laddr: number;
  fwd: number;
  service: string;
  realServer: string;
  state: number;
  inactive: boolean;
  /** ms since the Unix epoch. */
  expiresAt: number;
  /** IPv6: the 12 high words (client, virtual, real server, local); null for IPv4. */
  hi: Int32Array | null;
  /** PROXY protocol: the entry's E_PP word (0 = none) and E_PP_SEQ. */
  pp: number;
  ppSeq: number;
  /** SYN proxy (1 = the record has it): the entry's SP_DELTA, SP_TSDELTA, SP_OPTS. */
  sp: number;
  spDelta: number;
  spTsDelta: number;
  spOpts: number;
  /** The writer's generation (GEN_PER_MS per ms of its clock); 0 = none (an earlier release's record). */
  gen: number;
  /** The writer's node id ('' with no generation). */
  writer: string;
}

/** What this node has for a (service, real server) pair: the flow a record may describe. */
export interface FlowTarget {
  /** Real-server and service slots in the shared regions. */
  slot: number;
  svcSlot: number;
  /** IP protocol | PROTO_V6 for IPv6. */
  proto: number;
  /** The VIP (IPv6: its last word; addr6 has all four). */
  vaddr: number;
  vaddr6: ArrayLike<number> | null;
  vport: number;
  /** The real server (IPv6: last word; daddr6 all four). */
  daddr: number;
  daddr6: ArrayLike<number> | null;
  dport: number;
  /** FWD_* of the real server. */
  fwd: number;
  /** PROXY protocol version of the real server (net/proxy-protocol.ts PP_*); absent or 0 = none. */
  pp?: number;
  /** Full-NAT pool of the service's family: one word per IPv4 address, four per IPv6 address. */
  pool: ArrayLike<number>;
  portMin: number;
  portMax: number;
}

/** Key material for record authentication (redis.recordKey). */
export function macKey(recordKey: string | undefined): Buffer | null {
  return recordKey === undefined ? null : Buffer.from(recordKey, 'utf8');
}

/** The MAC of a text: 128 bits of HMAC-SHA256, hex. */
export function mac(key: Buffer, text: string): string {
  return createHmac('sha256', key).update(text).digest('hex').slice(0, MAC_HEX);
}

/** Constant-time check of a MAC (hex) over text. */
export function macOk(key: Buffer, text: string, m: string): boolean {
  if (m.length !== MAC_HEX) return false;
  const want = Buffer.from(mac(key, text), 'latin1');
  const got = Buffer.from(m, 'latin1');
  return got.length === want.length && timingSafeEqual(got, want);
}

/** A record's text as written: fields 0–13, then the MAC when a key is set. */
export function signRecord(key: Buffer | null, text: string): string {
  return key === null ? text : `${text}|${mac(key, text)}`;
}

/** A 32-bit word written as a signed or unsigned decimal; NaN when it is not one. */
function word(s: string): number {
  if (!/^-?\d{1,10}$/.test(s)) return NaN;
  const n = Number(s);
  return n >= -0x80000000 && n <= 0xffffffff ? n | 0 : NaN;
}

/** The writer field of a node id: percent-encoded, so that no '|' or ',' of an id splits a record. */
export function writerToken(nodeId: string): string {
  return encodeURIComponent(nodeId);
}

/** The record's generation field (written before the MAC; docs at the top). */
export function genField(gen: number, writer: string): string {
  return `|g=${gen},${writer}`;
}

/**
 * A writer's generations: a hybrid logical clock (the top of this file). next() for each record
 * written; observe() with the generation of each record believed.
 */
export class Generation {
  private last = 0;
  next(nowMs: number): number {
    this.last = Math.max(this.last + 1, nowMs * GEN_PER_MS);
    return this.last;
  }
  observe(gen: number): void {
    if (gen > this.last) this.last = gen;
  }
}

/**
 * Whether a record of generation `gen` may replace or refresh a shadow made from one of
 * generation `installed` (0: none, an earlier release's record): only a newer one. A record
 * without one may refresh or replace a shadow without one (what every record did before), never
 * one with one — a replayed record of an earlier release would roll it back.
 */
export function supersedes(gen: number, installed: number): boolean {
  return installed === 0 || gen > installed;
}

const MAC_TEXT = /^[0-9a-f]{32}$/;
/**
 * g=<generation>,<writer>: a positive integer of at most 16 digits, a percent-encoded node id
 * (writerToken; its '%' sequences are checked by decodeURIComponent, which throws on a bad one).
 */
const GEN_FIELD = /^g=([1-9]\d{0,15}),([A-Za-z0-9\-_.!~*'()%]{1,765})$/;

/** Parses a record's text; with a key, only a record with a valid MAC. */
export function parseRecord(text: string, key: Buffer | null): FlowRecord | RecordRefusal {
  if (text.length > MAX_RECORD_CHARS) return 'malformed';
  const f = text.split('|');
  const nf = f.length;
  if (nf < 13 || nf > 17) return 'malformed';
  // After the 14 fields: pp= or sp=, then g=, then the MAC — each optional, in this order.
  let i = 14;
  const optField = i < nf && (f[i]!.startsWith('pp=') || f[i]!.startsWith('sp=')) ? f[i++]! : null;
  const genText = i < nf && f[i]!.startsWith('g=') ? f[i++]! : null;
  const macText = i < nf ? f[i++]! : null;
  if (i < nf) return 'malformed';
  // Without a key a MAC is not checked: this node trusts the store (the default, as before).
  if (key !== null && (macText === null || !macOk(key, text.slice(0, text.lastIndexOf('|')), macText))) return 'auth';
  if (key === null && macText !== null && !MAC_TEXT.test(macText)) return 'malformed'; // a last field that is no MAC
  let gen = 0;
  let writer = '';
  if (genText !== null) {
    const m = GEN_FIELD.exec(genText);
    if (!m) return 'malformed';
    gen = Number(m[1]);
    if (!Number.isSafeInteger(gen)) return 'malformed';
    writer = m[2]!;
    if (writer.includes('%')) {
      try {
        writer = decodeURIComponent(writer);
      } catch {
        return 'malformed'; // a percent-encoding that is no UTF-8
      }
    }
  }
  let pp = 0;
  let ppSeq = 0;
  let sp = 0;
  let spDelta = 0;
  let spTsDelta = 0;
  let spOpts = 0;
  if (optField?.startsWith('pp=')) {
    const m = /^pp=(-?\d{1,10}),(-?\d{1,10})$/.exec(optField);
    if (!m) return 'malformed';
    pp = word(m[1]!);
    ppSeq = word(m[2]!);
    if (Number.isNaN(pp) || Number.isNaN(ppSeq)) return 'malformed';
  } else if (optField !== null) {
    const m = /^sp=(-?\d{1,10}),(-?\d{1,10}),(-?\d{1,10})$/.exec(optField);
    if (!m) return 'malformed';
    sp = 1;
    spDelta = word(m[1]!);
    spTsDelta = word(m[2]!);
    spOpts = word(m[3]!);
    if (Number.isNaN(spDelta) || Number.isNaN(spTsDelta) || Number.isNaN(spOpts)) return 'malformed';
  }
  const n: number[] = [];
  for (const i of [0, 1, 2, 3, 4, 5, 6, 7, 10, 11]) n[i] = word(f[i]!);
  if (n.some((x) => Number.isNaN(x))) return 'malformed';
  if (!/^\d{1,15}$/.test(f[12]!)) return 'malformed';
  const proto = n[0]!;
  if ((proto & ~(0xff | L.PROTO_V6)) !== 0) return 'malformed';
  const v6 = (proto & L.PROTO_V6) !== 0;
  let hi: Int32Array | null = null;
  const hs = f[13] ?? '';
  if (v6) {
    const h = hs.split(',');
    if (h.length !== L.HI_WORDS) return 'malformed';
    hi = new Int32Array(L.HI_WORDS);
    for (let i = 0; i < L.HI_WORDS; i++) {
      const x = word(h[i]!);
      if (Number.isNaN(x)) return 'malformed';
      hi[i] = x;
    }
  } else if (hs !== '') return 'malformed';
  if (n[11] !== 0 && n[11] !== 1) return 'malformed';
  return {
    proto,
    caddr: n[1]!,
    cports: n[2]!,
    vaddr: n[3]!,
    daddr: n[4]!,
    dports: n[5]!,
    laddr: n[6]!,
    fwd: n[7]!,
    service: f[8]!,
    realServer: f[9]!,
    state: n[10]!,
    inactive: n[11] === 1,
    expiresAt: Number(f[12]),
    hi,
    pp,
    ppSeq,
    sp,
    spDelta,
    spTsDelta,
    spOpts,
    gen,
    writer,
  };
}

/** Timeout slot (layout.ts H_TIMEOUTS) of a protocol's state. */
export function timeoutSlot(proto: number, state: number): number {
  const p = proto & 0xff;
  return p === IPPROTO_TCP ? state : p === IPPROTO_SCTP ? L.TIMEOUT_SCTP + state : L.TIMEOUT_UDP;
}

/** Whether words [i, i+3) of hi are the first three of a (IPv6) address. */
function hiIs(hi: Int32Array, i: number, a: ArrayLike<number>): boolean {
  return hi[i] === (a[0]! | 0) && hi[i + 1] === (a[1]! | 0) && hi[i + 2] === (a[2]! | 0);
}

/**
 * Checks a parsed record against what this node has for the service and real server it names.
 * `timeoutMs(slot)` is the local timeout of a state slot; `nowMs` the Unix time. null = believed.
 */
export function checkRecord(r: FlowRecord, t: FlowTarget | null, nowMs: number, timeoutMs: (slot: number) => number): RecordRefusal | null {
  if (t === null) return 'unknown_server';
  if (r.proto !== t.proto) return 'protocol';
  const hi = r.hi;
  const v6 = hi !== null;
  if (r.vaddr !== (t.vaddr | 0) || r.daddr !== (t.daddr | 0)) return 'address';
  if (v6 && (t.vaddr6 === null || t.daddr6 === null || !hiIs(hi, 3, t.vaddr6) || !hiIs(hi, 6, t.daddr6))) return 'address';
  if ((r.cports & 0xffff) !== t.vport || r.dports >>> 16 !== t.dport) return 'port';
  if (r.fwd !== t.fwd) return 'forwarding';
  const lport = r.dports & 0xffff;
  if (r.fwd === L.FWD_FULLNAT) {
    // The reply address is one of this node's pool addresses, on a port of the pool's range.
    let inPool = false;
    if (v6) {
      for (let i = 0; i + 3 < t.pool.length && !inPool; i += 4)
        inPool = hiIs(hi, 9, [t.pool[i]!, t.pool[i + 1]!, t.pool[i + 2]!]) && r.laddr === (t.pool[i + 3]! | 0);
    } else {
      for (let i = 0; i < t.pool.length && !inPool; i++) inPool = r.laddr === (t.pool[i]! | 0);
    }
    if (!inPool) return 'address';
    if (lport < t.portMin || lport > t.portMax) return 'port';
  } else {
    // masq and tunnel: the server answers the client's own address and port.
    if (r.laddr !== r.caddr || (v6 && (hi[9] !== hi[0] || hi[10] !== hi[1] || hi[11] !== hi[2]))) return 'address';
    if (lport !== r.cports >>> 16) return 'port';
  }
  if (r.pp !== 0 && !proxyProtocolOk(r, t)) return 'proxy_protocol';
  if (r.sp !== 0 && !synProxyOk(r)) return 'synproxy';
  const p = r.proto & 0xff;
  const states = p === IPPROTO_TCP ? TCP_STATE_COUNT : p === IPPROTO_SCTP ? SCTP_STATE_COUNT : 1;
  if (r.state < 0 || r.state >= states) return 'state';
  const active = p === IPPROTO_TCP ? TCP_ACTIVE[r.state] === 1 : p === IPPROTO_SCTP ? SCTP_ACTIVE[r.state] === 1 : false;
  if (r.inactive === active) return 'state';
  const left = r.expiresAt - nowMs;
  if (!(left > 0) || left > timeoutMs(timeoutSlot(r.proto, r.state)) + MAX_CLOCK_SKEW_MS) return 'expiry';
  if (r.gen >= (nowMs + MAX_CLOCK_SKEW_MS + 1) * GEN_PER_MS) return 'generation';
  return null;
}

/**
 * A record's PROXY protocol word: a full-NAT TCP flow to a server that has proxyProtocol (either
 * version: a flow keeps the one it was made with), no bits but the word's, and exactly the length
 * of the header this node writes for the record's client and VIP — a node that shifted a flow by
 * any other amount would corrupt every byte of it.
 */
function proxyProtocolOk(r: FlowRecord, t: FlowTarget): boolean {
  if ((r.proto & 0xff) !== 6 || r.fwd !== L.FWD_FULLNAT || !t.pp) return false;
  if ((r.pp & ~(L.PP_LEN_MASK | L.PP_VER_MASK | L.PP_FLAGS)) !== 0) return false;
  const version = ppVersion(r.pp);
  if (version !== PP_V1 && version !== PP_V2) return false;
  const w = new Int32Array(8);
  if (r.hi !== null) {
    w.set(r.hi.subarray(0, 3), 0);
    w.set(r.hi.subarray(3, 6), 4);
  }
  w[3] = r.caddr;
  w[7] = r.vaddr;
  return writeProxyHeader(new Uint8Array(PP_MAX_LEN), 0, version, r.hi !== null, w, r.cports >>> 16, r.cports & 0xffff) === ppLength(r.pp);
}

/**
 * A record's SYN proxy words: a masq or full-NAT TCP flow without PROXY protocol (what the SYN
 * proxy takes), an options word with only SPO_* bits, its window scales at most 14 (the client's
 * 0xf = none). The deltas are any 32-bit numbers: every value is some flow's.
 */
const SPO_BITS =
  L.SPO_MSS_MASK |
  (0xf << L.SPO_WS_SHIFT) |
  L.SPO_SACK |
  L.SPO_TS |
  L.SPO_SRV_NOWS |
  (0xf << L.SPO_OURWS_SHIFT) |
  (0xf << L.SPO_SRVWS_SHIFT);
function synProxyOk(r: FlowRecord): boolean {
  if ((r.proto & 0xff) !== IPPROTO_TCP || (r.fwd !== L.FWD_MASQ && r.fwd !== L.FWD_FULLNAT) || r.pp !== 0) return false;
  const o = r.spOpts;
  if ((o & ~SPO_BITS) !== 0) return false;
  const cws = (o >>> L.SPO_WS_SHIFT) & 0xf;
  return (cws <= 14 || cws === 0xf) && ((o >>> L.SPO_OURWS_SHIFT) & 0xf) <= 14 && ((o >>> L.SPO_SRVWS_SHIFT) & 0xf) <= 14;
}

/** The record's sp field ('' for none). */
export function spField(words: readonly [number, number, number] | null): string {
  return words === null ? '' : `|sp=${words[0]},${words[1]},${words[2]}`;
}

/** The record's pp field ('' for none; |-separated like the others). */
export function ppField(pp: number, ppSeq: number): string {
  return pp === 0 ? '' : `|pp=${pp},${ppSeq}`;
}

/**
 * Whether a record describes the flow of a parked packet (proto, source, ports, destination and,
 * for IPv6, the packet's high words in the key order: source 0–2, destination 3–5): as its
 * client→server key or as its server→client key.
 */
export function recordMatches(r: FlowRecord, proto: number, s: number, ports: number, d: number, phi: ArrayLike<number>): boolean {
  if (r.proto !== proto) return false;
  const v6 = r.hi !== null;
  const h = r.hi;
  const same = (ri: number, pi: number) => !v6 || (h![ri] === phi[pi] && h![ri + 1] === phi[pi + 1] && h![ri + 2] === phi[pi + 2]);
  if (r.caddr === s && r.cports === ports && r.vaddr === d && same(0, 0) && same(3, 3)) return true;
  return r.daddr === s && r.dports === ports && r.laddr === d && same(6, 0) && same(9, 3);
}

/**
 * The text stored as a node's counts: the JSON; with a key, preceded by a MAC over the node id, the
 * time it was made (ms) and the JSON — bound to its node, and too old to replay after maxAge.
 */
export function signCounts(key: Buffer | null, nodeId: string, json: string, nowMs: number): string {
  return key === null ? json : `${mac(key, `${nodeId}\n${nowMs}\n${json}`)}\n${nowMs}\n${json}`;
}

/**
 * Parses a node's counts (with a key: signed by that node less than maxAgeMs ago — a replayed old
 * report is `stale`). Each value must be [active, inactive], integers in 0..MAX_COUNT; one
 * bad value refuses the node's whole report (a node that lies about one server is not believed
 * about the others). Keys this node does not have (`known`) are skipped: the merged map never
 * grows beyond this node's own real servers.
 */
export function parseCounts(
  text: string,
  nodeId: string,
  key: Buffer | null,
  known: ReadonlySet<string>,
  maxChars: number,
  nowMs: number,
  maxAgeMs: number,
): Map<string, [number, number]> | CountsRefusal {
  if (text.length > maxChars) return 'too_large';
  let json = text;
  if (key !== null) {
    const nl = text.indexOf('\n');
    if (nl < 0 || !macOk(key, `${nodeId}\n${text.slice(nl + 1)}`, text.slice(0, nl))) return 'auth';
    const nl2 = text.indexOf('\n', nl + 1);
    const at = Number(text.slice(nl + 1, nl2));
    if (nl2 < 0 || !(at >= nowMs - maxAgeMs && at <= nowMs + MAX_CLOCK_SKEW_MS)) return 'stale';
    json = text.slice(nl2 + 1);
  }
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    return 'malformed';
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'malformed';
  const out = new Map<string, [number, number]>();
  for (const [k, c] of Object.entries(v as Record<string, unknown>)) {
    if (!Array.isArray(c) || c.length !== 2) return 'malformed';
    const [a, i] = c as unknown[];
    if (!sane(a) || !sane(i)) return 'value';
    if (known.has(k)) out.set(k, [a, i]);
  }
  return out;
}

function sane(x: unknown): x is number {
  return typeof x === 'number' && Number.isInteger(x) && x >= 0 && x <= MAX_COUNT;
}

/** The MAC input of a heartbeat: its own domain, so that no record or counts MAC can pass for one. */
const heartbeatText = (nodeId: string, atMs: number) => `uvs-heartbeat\n${nodeId}\n${atMs}`;

/**
 * A signed heartbeat, published on <prefix>nodes with redis.recordKey set: "<nodeId>\n<ms>\n<MAC>".
 * It tells the other nodes this node is alive without the node list, whose members anyone who can
 * write to Redis can add.
 */
export function signHeartbeat(key: Buffer, nodeId: string, nowMs: number): string {
  return `${nodeId}\n${nowMs}\n${mac(key, heartbeatText(nodeId, nowMs))}`;
}

/**
 * A heartbeat's node id and time, if its MAC holds (`auth`), its id is one (`bad_id`) and it was
 * made less than maxAgeMs ago and not in the future beyond MAX_CLOCK_SKEW_MS (`stale`: a
 * recorded heartbeat replayed later).
 */
export function parseHeartbeat(
  key: Buffer,
  text: string,
  nowMs: number,
  maxAgeMs: number,
): { nodeId: string; atMs: number } | 'auth' | 'bad_id' | 'stale' {
  const parts = text.length <= 512 ? text.split('\n') : [];
  if (parts.length !== 3 || !/^\d{1,15}$/.test(parts[1]!)) return 'auth';
  const [nodeId, at, m] = parts as [string, string, string];
  const atMs = Number(at);
  if (!macOk(key, heartbeatText(nodeId, atMs), m)) return 'auth';
  if (!NODE_ID.test(nodeId)) return 'bad_id';
  if (!(atMs >= nowMs - maxAgeMs && atMs <= nowMs + MAX_CLOCK_SKEW_MS)) return 'stale';
  return { nodeId, atMs };
}

/**
 * Picks the nodes to read counts from: first `first` (with redis.recordKey, the nodes whose signed
 * counts or heartbeats were believed lately: no entry of the node list can push them out), then
 * out of ZREVRANGEBYSCORE … WITHSCORES (newest first, [id, score, id, score…]): valid ids, not
 * this node, heartbeats not from the future, at most maxNodes in all. `total` is how many the
 * window held (ZCOUNT): the ones not fetched count as `cap`.
 */
export function selectNodes(
  flat: string[],
  total: number,
  self: string,
  nowMs: number,
  maxNodes: number,
  first: readonly string[] = [],
): { nodes: string[]; refused: Record<NodeRefusal, number> } {
  const refused: Record<NodeRefusal, number> = { future: 0, cap: Math.max(0, total - flat.length / 2), bad_id: 0, auth: 0, stale: 0 };
  const nodes: string[] = first.filter((id) => id !== self).slice(0, maxNodes);
  const taken = new Set(nodes);
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const id = flat[i]!;
    if (id === self || taken.has(id)) continue;
    const at = Number(flat[i + 1]);
    if (!NODE_ID.test(id)) refused.bad_id++;
    else if (!(at <= nowMs + MAX_CLOCK_SKEW_MS)) refused.future++;
    else if (nodes.length >= maxNodes) refused.cap++;
    else nodes.push(id);
  }
  return { nodes, refused };
}
