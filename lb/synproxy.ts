/**
 * The SYN proxy: SYN cookies in front of TCP virtual services, as nftables `synproxy`, DPVS's
 * and Alibaba LVS's synproxy do it (docs/defense.md "SYN proxy"). While it is on
 * (defense.synProxy, layout.ts H_SYNPROXY), a SYN to an eligible service takes no table entry:
 *
 *  1. uvs answers the SYN itself (synCookieReply) with a SYN-ACK whose ISN is a keyed cookie —
 *     Linux's scheme (net/ipv4/syncookies.c): two keyed hashes of the 4-tuple, one with a minute
 *     counter, the client's ISN and an MSS index (makeCookie). With the client's timestamps, the
 *     low 6 bits of our TSval carry its window scale, SACK-permitted and ECN bits
 *     (cookie_init_timestamp); without them neither can be carried and neither is offered.
 *  2. The client's ACK with no entry, while cookies were sent in the last 2 minutes
 *     (tcp_synq_no_recent_overflow): ack − 1 is checked (checkCookie); a valid one makes the flow
 *     through the normal new-flow path (lb/core.ts newFlow: persistence, scheduling, full-NAT
 *     port, counters), marked pending (F_SYNPROXY | F_SP_PENDING, a short timer), and the real
 *     server gets a SYN of our making in the client's name: the client's ISN, the options the
 *     cookie kept, the client's TSval (spOpen). An invalid one is counted (bad_cookie) and reset
 *     as Linux's LISTEN socket does, within mayAnswer's limits (lb/core.ts).
 *  3. Client packets while the server's handshake is pending are held in the table's shared
 *     area (the SYN-ACK may reach another worker), at most HOLD_PER_FLOW a flow and
 *     HOLD_PER_SOURCE a client source (spPendingIn; synproxy_hold_per_source);
 *     a client retransmission re-sends our SYN at most once a second — no timer.
 *  4. The server's SYN-ACK (spServerSynAck) fixes the flow's deltas — sequence (cookie − the
 *     server's ISN), timestamp (our TSval − the server's) and the server's window scale — and is
 *     answered with our ACK, followed by the held packets. A retransmitted SYN-ACK gets the ACK
 *     again. The server's RST is passed to the client as a RST at the client's numbers and the
 *     flow ends. From then on every packet is adjusted in place with incremental checksums
 *     (adjustIn, adjustOut): server→client seq += delta, TSval += tsdelta, window rescaled from
 *     the server's scale to ours; client→server ack −= delta, SACK blocks −= delta,
 *     TSecr −= tsdelta.
 *
 * Only masq and full-NAT (without PROXY protocol) can be proxied: both directions must pass
 * through uvs. A service with a tunnel or DR server, or a PROXY protocol one, keeps the normal
 * path (eligible(), decided per snapshot). A proxied flow's Redis record carries its SP words
 * (conntrack/redis-record.ts `sp=`), so a node adopting it goes on adjusting; a pending one is
 * not published.
 *
 * Everything is in place in the worker's buffers: no allocation, no exception per packet.
 */
import { FlowView } from '../conntrack/flow';
import * as L from '../conntrack/layout';
import { Drop } from '../conntrack/layout';
import { TCPF_ACK, TCPF_FIN, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import { SPH_HELD, SPH_REFUSED, SPH_RESEND, SPH_SOURCE } from '../conntrack/table';
import * as P from '../net/packet';
import type { HalfSipHash } from '../net/siphash';
import { countIn, drop, type PacketContext, pushSync } from './context';
import { ip6Header, ipHeader, unanswerableSource } from './icmp';
import { completePartial, plainVnet } from './offload';
import type { CompiledService, Snapshot } from './snapshot';
import { DROP, REPLY } from './verdict';
import { rewriteIn } from './xmit';

/** Linux's MSS tables (syncookies.c msstab, and its IPv6 twin): the cookie carries an index into them. */
export const MSS_TABLE4 = [536, 1300, 1440, 1460] as const;
export const MSS_TABLE6 = [1220, 1420, 1440, 8940] as const;
/** The cookie's top 8 bits are the minute counter (COOKIEBITS 24), and a cookie lives 2 minutes (MAX_SYNCOOKIE_AGE). */
const COOKIE_BITS = 24;
const COOKIE_MASK = 0xffffff;
export const MAX_COOKIE_AGE = 2;
/** Timestamp option bits (TSBITS): window scale (0xf = none), SACK, ECN. */
const TS_OPT_WSCALE_MASK = 0xf;
const TS_OPT_SACK = 0x10;
const TS_OPT_ECN = 0x20;
const TS_BITS = 6;
/** ACKs are checked as cookies this long after the last cookie went out (tcp_synq_no_recent_overflow). */
export const COOKIE_RECENT_MS = 120_000;
/** A pending flow's timer: no answer from the server by then, and the flow is gone (the client's next retransmission makes it again). */
export const PENDING_MS = 5000;
/** A client retransmission while pending re-sends our SYN at most this often. */
export const RESEND_MS = 1000;

/** A view for touchIn to fill: the packet's own is still in use. */
const spView = new FlowView();

const OPT_EOL = 0;
const OPT_NOP = 1;
const OPT_MSS = 2;
const OPT_WS = 3;
const OPT_SACK_PERM = 4;
const OPT_SACK = 5;
const OPT_TS = 8;

// ── the cookie ───────────────────────────────────────────────────────────────────────────────
/**
 * One of the cookie's keyed hashes (syncookies.c cookie_hash): HalfSipHash-1-3 under (k0, k1) of
 * the source and destination addresses (IPv6: all 8 words of pa; IPv4: pa[3], pa[7]), the ports
 * (source << 16 | destination) and the count.
 */
function cookieHash(h: HalfSipHash, k0: number, k1: number, v6: boolean, pa: ArrayLike<number>, ports: number, count: number): number {
  h.begin(k0, k1);
  if (v6) for (let i = 0; i < 8; i++) h.word(pa[i]!);
  else {
    h.word(pa[3]!);
    h.word(pa[7]!);
  }
  h.word(ports);
  h.word(count);
  return h.end((v6 ? 40 : 16) << 24);
}

/**
 * secure_tcp_syn_cookie: hash₀(tuple) + the client's ISN + count << 24 + ((hash₁(tuple, count)
 * + mssIdx) mod 2²⁴). key[ko, ko+4): two HalfSipHash keys. pa, ports as for cookieHash (the SYN's
 * source and destination).
 */
export function makeCookie(
  h: HalfSipHash,
  key: ArrayLike<number>,
  ko: number,
  v6: boolean,
  pa: ArrayLike<number>,
  ports: number,
  isn: number,
  count: number,
  mssIdx: number,
): number {
  const h0 = cookieHash(h, key[ko]!, key[ko + 1]!, v6, pa, ports, 0);
  const h1 = cookieHash(h, key[ko + 2]!, key[ko + 3]!, v6, pa, ports, count);
  return (h0 + isn + (count << COOKIE_BITS) + ((h1 + mssIdx) & COOKIE_MASK)) | 0;
}

/**
 * check_tcp_syn_cookie: the MSS index of cookie (the client's ACK − 1) for its ISN (seq − 1) at
 * minute `count`, or −1: made under another key or tuple, more than MAX_COOKIE_AGE − 1 minutes
 * ago, or in the future, or not a cookie at all (the data part is no index).
 */
export function checkCookie(
  h: HalfSipHash,
  key: ArrayLike<number>,
  ko: number,
  v6: boolean,
  pa: ArrayLike<number>,
  ports: number,
  isn: number,
  cookie: number,
  count: number,
): number {
  const x = (cookie - cookieHash(h, key[ko]!, key[ko + 1]!, v6, pa, ports, 0) - isn) | 0;
  const diff = (count - (x >>> COOKIE_BITS)) & 0xff;
  if (diff >= MAX_COOKIE_AGE) return -1;
  const data = (x - cookieHash(h, key[ko + 2]!, key[ko + 3]!, v6, pa, ports, (count - diff) | 0)) & COOKIE_MASK;
  return data < 4 ? data : -1;
}

/** cookieHash's count word for the timestamp offset: another input than any minute's (domain separation). */
const TS_OFF_DOMAIN = 0x74736f66;

/**
 * The keyed timestamp offset of a client and VIP (secure_tcp_ts_off): added to our TSvals so
 * they do not reveal the node's clock (Unix ms), the same for every connection of the pair and on
 * every node with the same key. pa as for cookieHash (filled).
 */
export function tsOffset(h: HalfSipHash, key: ArrayLike<number>, ko: number, v6: boolean, pa: ArrayLike<number>): number {
  return cookieHash(h, key[ko]!, key[ko + 1]!, v6, pa, 0, TS_OFF_DOMAIN);
}

/** The index of the largest table MSS not above mss (0 below the smallest), as cookie_v4_init_sequence picks it. */
export function mssIndex(mss: number, v6: boolean): number {
  const t = v6 ? MSS_TABLE6 : MSS_TABLE4;
  for (let i = 3; i > 0; i--) if (t[i]! <= mss) return i;
  return 0;
}

/**
 * cookie_init_timestamp: our TSval for the SYN-ACK, now (ms) with the client's options in the
 * low 6 bits — its window scale (0xf = none), SACK, ECN — and never ahead of now.
 */
export function cookieTimestamp(now: number, wscale: number, sack: boolean, ecn: boolean): number {
  const opts = (wscale < 0 ? TS_OPT_WSCALE_MASK : wscale) | (sack ? TS_OPT_SACK : 0) | (ecn ? TS_OPT_ECN : 0);
  let ts = (now & ~((1 << TS_BITS) - 1)) | opts;
  if (ts >>> 0 > now >>> 0) ts = (ts - (1 << TS_BITS)) | 0;
  return ts;
}

/** What a timestamp echoed by the client says (cookie_timestamp_decode): window scale (−1 none), SACK bit. */
export function timestampWscale(tsecr: number): number {
  const ws = tsecr & TS_OPT_WSCALE_MASK;
  return ws === TS_OPT_WSCALE_MASK ? -1 : ws > 14 ? 14 : ws;
}
export function timestampSack(tsecr: number): boolean {
  return (tsecr & TS_OPT_SACK) !== 0;
}

// ── options ──────────────────────────────────────────────────────────────────────────────────
/** The options of the last parseOptions: MSS, window scale (−1 = absent), SACK-permitted, timestamps (TS 0/1, TSval, TSecr). */
const opt = new Int32Array(6);
const O_MSS = 0;
const O_WS = 1;
const O_SACK = 2;
const O_TS = 3;
const O_TSVAL = 4;
const O_TSECR = 5;

/**
 * One step of a TCP option walk as tcp_parse_options takes it: the size of the option at b[o]
 * (1 for NOP), or 0 — stop — at EOL or where the list is malformed (a size below 2 or past end).
 */
function optSize(b: Uint8Array, o: number, end: number): number {
  const kind = b[o]!;
  if (kind === OPT_NOP) return 1;
  if (kind === OPT_EOL || o + 2 > end) return 0;
  const size = b[o + 1]!;
  return size < 2 || o + size > end ? 0 : size;
}

/** Walks the TCP options at b[l4 + 20, l4 + hl) as tcp_parse_options does: a malformed list stops the walk. */
function parseOptions(b: Uint8Array, l4: number, hl: number): void {
  opt[O_MSS] = -1;
  opt[O_WS] = -1;
  opt[O_SACK] = 0;
  opt[O_TS] = 0;
  const end = l4 + hl;
  for (let o = l4 + P.TCP_MIN_HLEN, size = 0; o < end && (size = optSize(b, o, end)) !== 0; o += size) {
    const kind = b[o]!;
    if (kind === OPT_MSS && size === 4) opt[O_MSS] = P.u16(b, o + 2);
    else if (kind === OPT_WS && size === 3) opt[O_WS] = b[o + 2]! > 14 ? 14 : b[o + 2]!;
    else if (kind === OPT_SACK_PERM && size === 2) opt[O_SACK] = 1;
    else if (kind === OPT_TS && size === 10) {
      opt[O_TS] = 1;
      opt[O_TSVAL] = P.u32(b, o + 2);
      opt[O_TSECR] = P.u32(b, o + 6);
    }
  }
}

/**
 * A service may be proxied: TCP, every real server masq or full-NAT without PROXY protocol, and
 * one of them with a weight (a service nobody can serve keeps answering SYNs with ICMP port
 * unreachable, as ip_vs_leave: a proxied client would be connected first and reset after).
 */
export function eligible(s: Snapshot, svc: CompiledService): boolean {
  if ((svc.proto & 0xff) !== P.IPPROTO_TCP || svc.dests.length === 0) return false;
  let weighted = false;
  for (const d of svc.dests) {
    if (d.fwd !== L.FWD_MASQ && d.fwd !== L.FWD_FULLNAT) return false;
    if (d.pp !== 0 || (s.proxyProtocol[d.rs] ?? 0) !== 0) return false;
    if (d.weight > 0) weighted = true;
  }
  return weighted;
}

// ── 1. the SYN ───────────────────────────────────────────────────────────────────────────────
/** Fills pa[3] and pa[7] with an IPv4 packet's addresses (the cookie hashes pa; IPv6 has it all). */
function addrs4(c: PacketContext): void {
  if (c.v6) return;
  c.pa[3] = c.saddr;
  c.pa[7] = c.daddr;
}

/**
 * A SYN to an eligible service while the proxy is on: answered with a cookie SYN-ACK from the
 * VIP, no entry. Never to a source mayAnswer would refuse (a VIP, the pool, multicast…); no
 * limit otherwise — one answer per SYN, no amplification.
 */
export function synCookieReply(c: PacketContext, b: Uint8Array): number {
  if (unanswerableSource(c)) return drop(c, Drop.UnanswerableSource);
  const t = c.table;
  const a = t.i32;
  const v6 = c.v6;
  const l4 = c.l4;
  const hl = (b[l4 + P.TCP_OFF]! >> 4) << 2;
  parseOptions(b, l4, hl);
  const clientMss = opt[O_MSS]! > 0 ? opt[O_MSS]! : v6 ? MSS_TABLE6[0] : MSS_TABLE4[0];
  const ours = a[v6 ? L.H_SP_MSS6 : L.H_SP_MSS4]!;
  const mss = clientMss < ours ? clientMss : ours;
  const ts = opt[O_TS] === 1;
  // Without timestamps nothing but the MSS can come back with the ACK: no window scale, no SACK.
  const ws = ts ? opt[O_WS]! : -1;
  const sack = ts && opt[O_SACK] === 1;
  const isn = P.u32(b, l4 + P.TCP_SEQ);
  addrs4(c);
  const cookie = makeCookie(c.hash, a, L.H_SP_KEY, v6, c.pa, c.key.ports, isn, c.spMinute, mssIndex(clientMss, v6));
  const thl = P.TCP_MIN_HLEN + 4 + (ts ? 12 : 0) + (ws >= 0 ? 4 : 0);
  const o = c.out.off;
  const x = c.out.buf;
  const ih = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
  if (o + ih + thl > c.out.end) return drop(c, Drop.OutputFull);
  if (v6) {
    ip6Header(c, o, thl, P.IPPROTO_TCP);
    for (let i = 0; i < 16; i++) {
      x[o + P.IP6_SRC + i] = b[c.off + P.IP6_DST + i]!;
      x[o + P.IP6_DST + i] = b[c.off + P.IP6_SRC + i]!;
    }
  } else {
    ipHeader(c, o, ih + thl, P.IPPROTO_TCP, c.daddr, c.saddr);
  }
  const tp = o + ih;
  P.put16(x, tp + P.L4_SPORT, c.dport);
  P.put16(x, tp + P.L4_DPORT, c.sport);
  P.put32(x, tp + P.TCP_SEQ, cookie);
  P.put32(x, tp + P.TCP_ACK, (isn + 1) | 0);
  x[tp + P.TCP_OFF] = (thl >> 2) << 4;
  x[tp + P.TCP_FLAGS] = TCPF_SYN | TCPF_ACK;
  // Window 0, as nf_synproxy: the client sends nothing but its ACK until the server has
  // answered and our window update (clientWindow) comes — nothing to hold but what rides the ACK.
  P.put16(x, tp + P.TCP_WIN, 0);
  P.put16(x, tp + P.TCP_CSUM, 0);
  P.put16(x, tp + 18, 0);
  let p = tp + P.TCP_MIN_HLEN;
  x[p] = OPT_MSS;
  x[p + 1] = 4;
  P.put16(x, p + 2, mss);
  p += 4;
  if (ts) {
    x[p] = sack ? OPT_SACK_PERM : OPT_NOP;
    x[p + 1] = sack ? 2 : OPT_NOP;
    x[p + 2] = OPT_TS;
    x[p + 3] = 10;
    // Our clock's ms with the client's options in the low bits, then the pair's offset (the ACK's
    // TSecr loses it again before the bits are read, as cookie_v4_check does).
    P.put32(x, p + 4, (cookieTimestamp(c.tsNow, ws, sack, false) + tsOffset(c.hash, a, L.H_SP_KEY, v6, c.pa)) | 0);
    P.put32(x, p + 8, opt[O_TSVAL]!);
    p += 12;
  }
  if (ws >= 0) {
    x[p] = OPT_NOP;
    x[p + 1] = OPT_WS;
    x[p + 2] = 3;
    x[p + 3] = a[L.H_SP_WSCALE]!;
  }
  tcpChecksum(c, o, ih, thl);
  // ACKs are checked as cookies for 2 minutes after the last one: one shared store a second at most.
  if (((c.now - a[L.H_SP_LAST]!) | 0) >= 1000 || ((c.now - a[L.H_SP_LAST]!) | 0) < 0) Atomics.store(a, L.H_SP_LAST, c.now);
  // A generated packet, the SYN answered in place (layout.ts GEN_SYN_ACK; no drop reason).
  c.counters[L.C_GEN_BASE + L.GEN_SYN_ACK * L.GEN_RESULTS + L.GEN_SENT]!++;
  const out = c.out;
  out.offs[0] = o - c.vnet;
  out.lens[0] = ih + thl + c.vnet;
  out.count = 1;
  return REPLY;
}

// ── 2. the client's ACK ──────────────────────────────────────────────────────────────────────
/**
 * Cookies went out in the last 2 minutes: an ACK without a flow is checked as one. A little in
 * the future counts too: the word is another worker's batch clock, which may run ahead of ours.
 */
export function cookiesRecent(c: PacketContext): boolean {
  const d = (c.now - c.table.i32[L.H_SP_LAST]!) | 0;
  return d > -COOKIE_RECENT_MS && d < COOKIE_RECENT_MS;
}

/**
 * The client's ACK (no flow) checked as a cookie: true when valid, with the flow's SP words in
 * c.spW (layout.ts SP_*: the client's ISN, our cookie, the options it carried, the client's TSval
 * and window, our TSval it echoes).
 */
export function cookieAck(c: PacketContext, b: Uint8Array): boolean {
  const a = c.table.i32;
  const v6 = c.v6;
  const l4 = c.l4;
  let isn = (P.u32(b, l4 + P.TCP_SEQ) - 1) | 0;
  const cookie = (P.u32(b, l4 + P.TCP_ACK) - 1) | 0;
  addrs4(c);
  let idx = checkCookie(c.hash, a, L.H_SP_KEY, v6, c.pa, c.key.ports, isn, cookie, c.spMinute);
  if (idx < 0) {
    // A zero-window probe: the client's ACK was lost (under a flood the device drops it), and
    // our SYN-ACK's window 0 leaves it probing with seq = snd_una − 1 = its ISN
    // (tcp_xmit_probe_skb) — one more try at that ISN, for a bare ACK only.
    if (hasData(c, b)) return false;
    isn = (isn + 1) | 0;
    idx = checkCookie(c.hash, a, L.H_SP_KEY, v6, c.pa, c.key.ports, isn, cookie, c.spMinute);
    if (idx < 0) return false;
  }
  parseOptions(b, l4, (b[l4 + P.TCP_OFF]! >> 4) << 2);
  const ts = opt[O_TS] === 1;
  const tsecr = opt[O_TSECR]!; // our TSval as sent: the flow's timestamps go on from it
  const bits = ts ? (tsecr - tsOffset(c.hash, a, L.H_SP_KEY, v6, c.pa)) | 0 : 0;
  const ws = ts ? timestampWscale(bits) : -1;
  const w = c.spW;
  w[L.SP_ISN] = isn;
  w[L.SP_COOKIE] = cookie;
  w[L.SP_OPTS] =
    (v6 ? MSS_TABLE6 : MSS_TABLE4)[idx]! |
    ((ws < 0 ? 0xf : ws) << L.SPO_WS_SHIFT) |
    (ts && timestampSack(bits) ? L.SPO_SACK : 0) |
    (ts ? L.SPO_TS : 0) |
    (ws < 0 ? 0 : (a[L.H_SP_WSCALE]! & 0xf) << L.SPO_OURWS_SHIFT);
  w[L.SP_CTSVAL] = ts ? opt[O_TSVAL]! : 0;
  w[L.SP_OURTS] = ts ? tsecr : 0;
  w[L.SP_SYN_AT] = c.now;
  w[L.SP_CWIN] = P.u16(b, l4 + P.TCP_WIN);
  w[L.SP_HELD] = 0;
  return true;
}

/**
 * The flow the cookie ACK made (lb/core.ts newFlow, first touch done) becomes pending, the ACK
 * itself is held if it carries data, and our SYN goes to the real server.
 */
export function spOpen(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const t = c.table;
  const w = c.spW;
  if (!t.spBegin(f.entry, f, PENDING_MS, c.now)) return drop(c, Drop.NoConnection);
  c.counters[L.C_SP_ACCEPTED]!++;
  if (hasData(c, b)) {
    // Its data held (consumed) or refused (a drop, as in spPendingIn), and our SYN written for
    // the same packet: the SYN is a write beyond it (C_TX_EXTRA).
    const r = hold(c, b, f, false);
    if (r >= 0 && r & SPH_REFUSED) c.counters[L.C_DROP_BASE + refusal(r)]!++;
    if (r >= 0 && r & (SPH_HELD | SPH_REFUSED)) c.counters[L.C_TX_EXTRA]!++;
  }
  return synToServer(c, f, w);
}

/** Why spHold refused a packet (SPH_REFUSED set): its source holds HOLD_PER_SOURCE, or no room (flow, area, size). */
function refusal(r: number): Drop {
  return r & SPH_SOURCE ? Drop.SynProxyHoldPerSource : Drop.SynProxyHoldFull;
}

/** The segment carries data or a FIN. */
function hasData(c: PacketContext, b: Uint8Array): boolean {
  const l4 = c.l4;
  return c.off + c.totlen - l4 - ((b[l4 + P.TCP_OFF]! >> 4) << 2) > 0 || (b[l4 + P.TCP_FLAGS]! & TCPF_FIN) !== 0;
}

/**
 * Holds the current client packet of pending flow f (spHold); the SPH_* bits, −1 when no longer
 * pending. A GSO super-packet is never held (refused, the client sends it again): it is replayed
 * without offload metadata, so it would leave larger than the path; its offload metadata stays
 * as it came, for the caller's re-run when the flow is pending no more.
 */
function hold(c: PacketContext, b: Uint8Array, f: FlowView, resend: boolean): number {
  const ok = c.gsoSize === 0;
  if (ok && c.partial) completePartial(c, b); // replayed later without offload metadata
  let r = c.table.spHold(f, ok, b, c.off, c.totlen, c.l4 - c.off, c.spW, resend ? RESEND_MS : 0x7fffffff, c.now);
  if (!ok && r >= 0) r |= SPH_REFUSED;
  if (r >= 0) {
    if (r & SPH_HELD) c.counters[L.C_SP_HELD]!++;
    if (r & SPH_REFUSED) c.counters[L.C_SP_HELD_REFUSED]!++;
  }
  return r;
}

/**
 * Our SYN to the real server in the client's name: built as the client would send it to the VIP
 * (the client's addresses from the flow, its ISN, the options the cookie kept, its TSval), then
 * rewritten as any client packet of the flow (masq / full-NAT). Goes out as the answer.
 */
function synToServer(c: PacketContext, f: FlowView, w: Int32Array): number {
  const opts = w[L.SP_OPTS]!;
  const ts = (opts & L.SPO_TS) !== 0;
  const ws = (opts >>> L.SPO_WS_SHIFT) & 0xf;
  const sack = (opts & L.SPO_SACK) !== 0;
  const thl = P.TCP_MIN_HLEN + 4 + (ts ? 12 : sack ? 4 : 0) + (ws !== 0xf ? 4 : 0);
  const o = c.out.off;
  const ih = clientHeader(c, f, o, thl);
  if (ih < 0) return drop(c, Drop.OutputFull);
  const x = c.out.buf;
  const tp = o + ih;
  tcpHeader(x, tp, f, w[L.SP_ISN]!, 0, TCPF_SYN, thl);
  // The SYN's window is never scaled: the client's window as its ACK gave it, in bytes, at most 65535.
  const win = ws !== 0xf ? w[L.SP_CWIN]! << ws : w[L.SP_CWIN]!;
  P.put16(x, tp + P.TCP_WIN, win > 65535 ? 65535 : win);
  let p = tp + P.TCP_MIN_HLEN;
  x[p] = OPT_MSS;
  x[p + 1] = 4;
  P.put16(x, p + 2, opts & L.SPO_MSS_MASK);
  p += 4;
  if (ts) {
    x[p] = sack ? OPT_SACK_PERM : OPT_NOP;
    x[p + 1] = sack ? 2 : OPT_NOP;
    x[p + 2] = OPT_TS;
    x[p + 3] = 10;
    P.put32(x, p + 4, w[L.SP_CTSVAL]!);
    P.put32(x, p + 8, 0);
    p += 12;
  } else if (sack) {
    x[p] = OPT_NOP;
    x[p + 1] = OPT_NOP;
    x[p + 2] = OPT_SACK_PERM;
    x[p + 3] = 2;
    p += 4;
  }
  if (ws !== 0xf) {
    x[p] = OPT_NOP;
    x[p + 1] = OPT_WS;
    x[p + 2] = 3;
    x[p + 3] = ws;
  }
  tcpChecksum(c, o, ih, thl);
  sendAsClient(c, f, o, ih + thl);
  countIn(c, f.rs, f.svc, ih + thl);
  const out = c.out;
  out.offs[0] = o - c.vnet;
  out.lens[0] = ih + thl + c.vnet;
  out.count = 1;
  return REPLY;
}

// ── 3. client packets while pending ──────────────────────────────────────────────────────────
/**
 * A client packet of a flow whose real server has not answered (lookupIn FLOW_SP_PENDING):
 * data and FIN are held, bare ACKs consumed; a client retransmission re-sends our SYN at most
 * once a second. A RST ends the flow. −1: the flow is pending no more, look it up again.
 */
export function spPendingIn(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const flags = c.ev;
  if (flags & TCPF_RST) {
    c.table.remove(f.entry, false, c.now, f.proto, f.caddr, f.cports);
    return drop(c, Drop.NoConnection);
  }
  if (flags & TCPF_SYN) return drop(c, Drop.NoConnection);
  const data = hasData(c, b);
  const r = data ? hold(c, b, f, true) : c.table.spHold(f, false, b, c.off, c.totlen, c.l4 - c.off, c.spW, RESEND_MS, c.now);
  if (r < 0) return -1;
  if (r & SPH_RESEND) {
    const v = synToServer(c, f, c.spW);
    // The packet is held (consumed) or refused (a drop) and our SYN written: a write beyond it.
    if (r & SPH_REFUSED) c.counters[L.C_DROP_BASE + refusal(r)]!++;
    if (r & (SPH_HELD | SPH_REFUSED)) c.counters[L.C_TX_EXTRA]!++;
    return v;
  }
  if (r & SPH_REFUSED) return drop(c, refusal(r));
  if (r & SPH_HELD) return DROP;
  return drop(c, Drop.SynProxy); // a bare ACK: nothing to hold
}

// ── 4. the server's answer, and the flow's packets ───────────────────────────────────────────
/**
 * A server packet of a proxied flow (lookupOut found it): its handshake (a verdict), or the
 * flow's adjustment done and −1: the caller forwards it as any server packet.
 */
export function spOut(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const flags = b[c.l4 + P.TCP_FLAGS]!;
  if ((flags & (TCPF_SYN | TCPF_ACK)) === (TCPF_SYN | TCPF_ACK)) return spServerSynAck(c, b, f);
  if (f.sp & L.F_SP_PENDING) {
    if (flags & TCPF_RST) return spServerReset(c, f);
    if (flags & TCPF_ACK) return spServerStale(c, b, f);
    return drop(c, Drop.NoConnection);
  }
  adjustOut(c, b, f);
  return -1;
}

/**
 * The server's SYN-ACK: the flow's deltas are set (ConnTable.spComplete), the server gets our ACK
 * and then the held packets, adjusted and rewritten as every client packet of the flow; the flow
 * is ESTABLISHED. A retransmitted one (our ACK was lost) gets the ACK again.
 */
function spServerSynAck(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const t = c.table;
  const l4 = c.l4;
  parseOptions(b, l4, (b[l4 + P.TCP_OFF]! >> 4) << 2);
  const sIsn = P.u32(b, l4 + P.TCP_SEQ);
  const sWin = P.u16(b, l4 + P.TCP_WIN); // a SYN-ACK's window is never scaled
  const sTs = opt[O_TS] === 1 ? opt[O_TSVAL]! : 0;
  const sWs = opt[O_WS]!; // −1: none
  const w = c.spW;
  // Not an answer to our SYN (its ack is not the client's ISN + 1): dropped, nothing changes.
  const held = t.spComplete(f, sIsn, sTs, sWs, P.u32(b, l4 + P.TCP_ACK), w);
  if (held === -1 || held === -3) return drop(c, Drop.NoConnection);
  const srvTs = opt[O_TS] === 1;
  const opts = w[L.SP_OPTS]!;
  // The flow as it is from now on: the view's words, for the ACK's and the replays' adjustment.
  f.spDelta = held === -2 ? w[L.SP_DELTA]! : (w[L.SP_COOKIE]! - sIsn) | 0;
  f.spTsDelta = held === -2 ? w[L.SP_TSDELTA]! : (w[L.SP_OURTS]! - sTs) | 0;
  f.spOpts = held === -2 ? opts : L.spServerOpts(opts, sWs);
  const cts = (opts & L.SPO_TS) !== 0;
  f.sp = L.F_SYNPROXY;
  // Our ACK, in the server's numbers already (no adjustment): seq ISN + 1, ack its ISN + 1.
  const ts = cts && srvTs;
  const thl = P.TCP_MIN_HLEN + (ts ? 12 : 0);
  const out = c.out;
  const V = c.vnet;
  const o = out.off;
  const ih = clientHeader(c, f, o, thl);
  if (ih < 0) return drop(c, Drop.OutputFull);
  // The context's packet becomes each one built here in turn; the SYN-ACK itself is consumed.
  const x = out.buf;
  const tp = o + ih;
  tcpHeader(x, tp, f, (w[L.SP_ISN]! + 1) | 0, (sIsn + 1) | 0, TCPF_ACK, thl);
  const cwin = f.spOpts & L.SPO_SRV_NOWS ? w[L.SP_CWIN]! << ((opts >>> L.SPO_WS_SHIFT) & 0xf) : w[L.SP_CWIN]!;
  P.put16(x, tp + P.TCP_WIN, cwin > 65535 ? 65535 : cwin);
  if (ts) {
    x[tp + 20] = OPT_NOP;
    x[tp + 21] = OPT_NOP;
    x[tp + 22] = OPT_TS;
    x[tp + 23] = 10;
    P.put32(x, tp + 24, w[L.SP_CTSVAL]!);
    P.put32(x, tp + 28, sTs);
  }
  tcpChecksum(c, o, ih, thl);
  sendAsClient(c, f, o, ih + thl);
  out.offs[0] = o - V;
  out.lens[0] = ih + thl + V;
  let n = 1;
  let at = o + ih + thl + V; // the next packet's IP header
  if (held > 0) {
    // Replayed in order; one that no longer fits the output region is dropped (the client sends it again).
    // A list is never longer than HOLD_PER_FLOW (table.ts holds no more); the bound keeps a damaged
    // link from looping here, as it does in the table's own walks.
    for (let ref = held, k = 0; ref !== 0 && k < L.HOLD_PER_FLOW; ref = t.holdNext(ref - 1), k++) {
      const slot = ref - 1;
      const len = t.holdLen(slot);
      if (at + len > out.end || n >= out.offs.length) {
        c.counters[L.C_SP_HELD_REFUSED]!++;
        continue;
      }
      const src = t.holdAt(slot);
      const hb = t.holdBytes;
      for (let i = 0; i < len; i++) x[at + i] = hb[src + i]!;
      plainVnet(c, at);
      const saved = c.l4;
      const savedLen = c.totlen;
      c.l4 = at + t.holdL4(slot);
      c.totlen = len;
      const savedOff = c.off;
      c.off = at;
      const partial = c.partial;
      c.partial = false;
      adjustIn(c, x, f);
      rewriteIn(c, x, f);
      c.off = savedOff;
      c.l4 = saved;
      c.totlen = savedLen;
      c.partial = partial;
      countIn(c, f.rs, f.svc, len);
      out.offs[n] = at - V;
      out.lens[n] = len + V;
      n++;
      at += len + V;
    }
    t.holdRelease(held);
  }
  if (held !== -2) {
    // The client's window update (synproxy_send_client_ack): our SYN-ACK offered a window of 0.
    const len = clientWindow(c, f, w, at, sWin, ts);
    if (len > 0 && n < out.offs.length) {
      out.offs[n] = at - V;
      out.lens[n] = len + V;
      n++;
    }
  }
  out.count = n;
  if (held !== -2) {
    t.touchIn(f.entry, spView, TCPF_ACK, c.now); // our ACK: ESTABLISHED
    if (spView.sync) pushSync(c, f.entry); // published now, with its deltas
  }
  return REPLY;
}

/**
 * The window update to flow f's client once its server has answered, at out.buf[at] (its IP
 * header; its length, 0 when it does not fit): from the VIP, seq our cookie + 1, ack the client's
 * ISN + 1, the server's SYN-ACK window `sWin` in the scale we offered the client (rounded up),
 * with timestamps (`ts`) our cookie's TSval — the server's ISN's in the client's clock — and the
 * client's. Until it comes the client sends nothing: our SYN-ACK's window was 0, as
 * nf_synproxy's (synproxy_send_client_synack), so it never sends more than the held area takes.
 */
function clientWindow(c: PacketContext, f: FlowView, w: Int32Array, at: number, sWin: number, ts: boolean): number {
  const v6 = c.v6;
  const ih = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
  const thl = P.TCP_MIN_HLEN + (ts ? 12 : 0);
  if (at + ih + thl > c.out.end) return 0;
  const x = c.out.buf;
  if (v6) {
    ip6Header(c, at, thl, P.IPPROTO_TCP);
    putAddr(x, at + P.IP6_SRC, f.hi, 3, f.vaddr);
    putAddr(x, at + P.IP6_DST, f.hi, 0, f.caddr);
  } else {
    ipHeader(c, at, ih + thl, P.IPPROTO_TCP, f.vaddr, f.caddr);
  }
  const tp = at + ih;
  P.put16(x, tp + P.L4_SPORT, f.cports & 0xffff);
  P.put16(x, tp + P.L4_DPORT, f.cports >>> 16);
  P.put32(x, tp + P.TCP_SEQ, (w[L.SP_COOKIE]! + 1) | 0);
  P.put32(x, tp + P.TCP_ACK, (w[L.SP_ISN]! + 1) | 0);
  x[tp + P.TCP_OFF] = (thl >> 2) << 4;
  x[tp + P.TCP_FLAGS] = TCPF_ACK;
  const ows = (w[L.SP_OPTS]! >>> L.SPO_OURWS_SHIFT) & 0xf;
  P.put16(x, tp + P.TCP_WIN, (sWin + (1 << ows) - 1) >>> ows);
  P.put16(x, tp + P.TCP_CSUM, 0);
  P.put16(x, tp + 18, 0);
  if (ts) {
    x[tp + 20] = OPT_NOP;
    x[tp + 21] = OPT_NOP;
    x[tp + 22] = OPT_TS;
    x[tp + 23] = 10;
    P.put32(x, tp + 24, w[L.SP_OURTS]!);
    P.put32(x, tp + 28, w[L.SP_CTSVAL]!);
  }
  tcpChecksum(c, at, ih, thl);
  return ih + thl;
}

/**
 * The server answered our SYN with an ACK (no SYN, no RST): a socket of an old connection on the
 * tuple (the client's port reused under masq, a full-NAT pool port reused) sent its challenge ACK
 * (RFC 5961 4.2). As the client's stack would, it gets a RST at the sequence number it
 * acknowledges — which it accepts, closing the old socket — and then our SYN again. One RST and
 * one SYN per ACK of the server's; the flow's timer is not re-armed (lookupOut), so a server
 * that never completes lets the flow die.
 */
function spServerStale(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const r = c.table.spHold(f, false, b, c.off, c.totlen, c.l4 - c.off, c.spW, 0, c.now);
  if (r < 0 || !(r & SPH_RESEND)) return drop(c, Drop.NoConnection);
  const seq = P.u32(b, c.l4 + P.TCP_ACK);
  const out = c.out;
  const o = out.off;
  const ih = clientHeader(c, f, o, P.TCP_MIN_HLEN);
  if (ih < 0) return drop(c, Drop.OutputFull);
  const x = out.buf;
  tcpHeader(x, o + ih, f, seq, 0, TCPF_RST, P.TCP_MIN_HLEN);
  tcpChecksum(c, o, ih, P.TCP_MIN_HLEN);
  sendAsClient(c, f, o, ih + P.TCP_MIN_HLEN);
  countIn(c, f.rs, f.svc, ih + P.TCP_MIN_HLEN);
  const len = ih + P.TCP_MIN_HLEN + c.vnet;
  // Our SYN right behind the RST, in the same output region.
  out.off = o + len;
  const v = synToServer(c, f, c.spW);
  out.off = o;
  if (v !== REPLY) return v; // no room for it: counted there (output_full)
  out.offs[1] = out.offs[0]!;
  out.lens[1] = out.lens[0]!;
  out.offs[0] = o - c.vnet;
  out.lens[0] = len;
  out.count = 2;
  return REPLY;
}

/** The server refused our SYN: the client gets a RST at its numbers (our cookie + 1), the flow ends. */
function spServerReset(c: PacketContext, f: FlowView): number {
  const t = c.table;
  const w = c.spW;
  if (!t.spRead(f, w)) return drop(c, Drop.NoConnection);
  t.remove(f.entry, false, c.now, f.proto, f.caddr, f.cports);
  c.counters[L.C_SP_SERVER_FAIL]!++;
  const o = c.out.off;
  const x = c.out.buf;
  const v6 = c.v6;
  const ih = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
  if (v6) {
    ip6Header(c, o, 20, P.IPPROTO_TCP);
    putAddr(x, o + P.IP6_SRC, f.hi, 3, f.vaddr);
    putAddr(x, o + P.IP6_DST, f.hi, 0, f.caddr);
  } else {
    ipHeader(c, o, ih + 20, P.IPPROTO_TCP, f.vaddr, f.caddr);
  }
  const tp = o + ih;
  P.put16(x, tp + P.L4_SPORT, f.cports & 0xffff);
  P.put16(x, tp + P.L4_DPORT, f.cports >>> 16);
  P.put32(x, tp + P.TCP_SEQ, (w[L.SP_COOKIE]! + 1) | 0);
  P.put32(x, tp + P.TCP_ACK, 0);
  x[tp + P.TCP_OFF] = 5 << 4;
  x[tp + P.TCP_FLAGS] = TCPF_RST;
  P.put16(x, tp + P.TCP_WIN, 0);
  P.put16(x, tp + P.TCP_CSUM, 0);
  P.put16(x, tp + 18, 0);
  tcpChecksum(c, o, ih, 20);
  c.out.reason = Drop.NoConnection;
  const out = c.out;
  out.offs[0] = o - c.vnet;
  out.lens[0] = ih + 20 + c.vnet;
  out.count = 1;
  return REPLY;
}

/**
 * Client → server of a proxied flow, in place: ack −= delta and every SACK block edge −= delta
 * (they name the server's bytes in the client's numbers), TSecr −= tsdelta; when the server has
 * window scaling off (its SYN-ACK had no option: SPO_SRV_NOWS) the window is shifted left by the
 * client's scale (at most 65535). Incremental checksum unless partial (the pseudo-header sum has
 * none of these).
 */
export function adjustIn(c: PacketContext, b: Uint8Array, f: FlowView): void {
  const l4 = c.l4;
  const d = f.spDelta;
  const partial = c.partial;
  const flags = b[l4 + P.TCP_FLAGS]!;
  if (flags & TCPF_ACK) addField(b, l4, l4 + P.TCP_ACK, -d, partial);
  if (f.spOpts & L.SPO_SRV_NOWS && !(flags & TCPF_SYN)) {
    // The server has scaling off; the client scales its windows by the scale our SYN-ACK took.
    const win = P.u16(b, l4 + P.TCP_WIN);
    setWindow(b, l4, win, win << ((f.spOpts >>> L.SPO_WS_SHIFT) & 0xf), partial);
  }
  const end = l4 + ((b[l4 + P.TCP_OFF]! >> 4) << 2);
  for (let o = l4 + P.TCP_MIN_HLEN, size = 0; o < end && (size = optSize(b, o, end)) !== 0; o += size) {
    const kind = b[o]!;
    if (kind === OPT_TS && size === 10) addField(b, l4, o + 6, -f.spTsDelta, partial);
    else if (kind === OPT_SACK && (size - 2) % 8 === 0) for (let e = o + 2; e < o + size; e += 4) addField(b, l4, e, -d, partial);
  }
}

/** The TCP window field from win to nw, clamped to 65535; the checksum follows unless partial. */
function setWindow(b: Uint8Array, l4: number, win: number, nw: number, partial: boolean): void {
  if (nw > 65535) nw = 65535;
  if (nw === win) return;
  P.put16(b, l4 + P.TCP_WIN, nw);
  if (!partial) P.fix16(b, l4 + P.TCP_CSUM, win, nw);
}

/**
 * Server → client of a proxied flow, in place: seq += delta, TSval += tsdelta, and the window
 * from the server's scale to the one we offered the client (never above 65535; a SYN's window is
 * never scaled).
 */
export function adjustOut(c: PacketContext, b: Uint8Array, f: FlowView): void {
  const l4 = c.l4;
  const partial = c.partial;
  addField(b, l4, l4 + P.TCP_SEQ, f.spDelta, partial);
  const opts = f.spOpts;
  const sws = (opts >>> L.SPO_SRVWS_SHIFT) & 0xf;
  const ows = (opts >>> L.SPO_OURWS_SHIFT) & 0xf;
  if (sws !== ows && !(b[l4 + P.TCP_FLAGS]! & TCPF_SYN)) {
    const win = P.u16(b, l4 + P.TCP_WIN);
    // Scaled down, rounded up: a small window never becomes 0 (which would stall the client).
    setWindow(b, l4, win, sws > ows ? win << (sws - ows) : (win + (1 << (ows - sws)) - 1) >>> (ows - sws), partial);
  }
  if ((opts & L.SPO_TS) === 0) return;
  const end = l4 + ((b[l4 + P.TCP_OFF]! >> 4) << 2);
  for (let o = l4 + P.TCP_MIN_HLEN, size = 0; o < end && (size = optSize(b, o, end)) !== 0; o += size) {
    if (b[o] === OPT_TS && size === 10) {
      addField(b, l4, o + 2, f.spTsDelta, partial);
      return;
    }
  }
}

/** Adds d to the 32-bit field at b[at] (mod 2³²), fixing the TCP checksum at l4 unless partial. */
function addField(b: Uint8Array, l4: number, at: number, d: number, partial: boolean): void {
  if (d === 0) return;
  const x = P.u32(b, at);
  const to = (x + d) | 0;
  P.put32(b, at, to);
  if (!partial) P.fix32(b, l4 + P.TCP_CSUM, x, to);
}

// ── building packets ─────────────────────────────────────────────────────────────────────────
/**
 * The IP header of a packet from flow f's client to its VIP at out.buf[o] (a TCP payload of thl
 * bytes to follow); its length, or −1 when it does not fit the output region.
 */
function clientHeader(c: PacketContext, f: FlowView, o: number, thl: number): number {
  const ih = c.v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
  if (o + ih + thl > c.out.end) return -1;
  if (c.v6) {
    ip6Header(c, o, thl, P.IPPROTO_TCP);
    putAddr(c.out.buf, o + P.IP6_SRC, f.hi, 0, f.caddr);
    putAddr(c.out.buf, o + P.IP6_DST, f.hi, 3, f.vaddr);
  } else {
    ipHeader(c, o, ih + thl, P.IPPROTO_TCP, f.caddr, f.vaddr);
  }
  return ih;
}

/** A TCP header from flow f's client to its VIP at x[tp]: seq, ack, flags, header length; window, checksum and urgent 0. */
function tcpHeader(x: Uint8Array, tp: number, f: FlowView, seq: number, ack: number, flags: number, thl: number): void {
  P.put16(x, tp + P.L4_SPORT, f.cports >>> 16);
  P.put16(x, tp + P.L4_DPORT, f.cports & 0xffff);
  P.put32(x, tp + P.TCP_SEQ, seq);
  P.put32(x, tp + P.TCP_ACK, ack);
  x[tp + P.TCP_OFF] = (thl >> 2) << 4;
  x[tp + P.TCP_FLAGS] = flags;
  P.put16(x, tp + P.TCP_WIN, 0);
  P.put16(x, tp + P.TCP_CSUM, 0);
  P.put16(x, tp + 18, 0);
}

/** The TCP checksum of the packet at out.buf[o] (IP header ih bytes, TCP thl bytes, no payload). */
function tcpChecksum(c: PacketContext, o: number, ih: number, thl: number): void {
  const x = c.out.buf;
  const tp = o + ih;
  const ps = c.v6
    ? P.pseudoSum6(x, o + P.IP6_SRC, o + P.IP6_DST, P.IPPROTO_TCP, thl)
    : P.pseudoSum(P.u32(x, o + P.IP_SRC), P.u32(x, o + P.IP_DST), P.IPPROTO_TCP, thl);
  P.put16(x, tp + P.TCP_CSUM, P.checksum(x, tp, thl, ps));
}

/** Rewrites the client-side packet at out.buf[o] (len bytes) for flow f's real server, as the flow's client packets are. */
function sendAsClient(c: PacketContext, f: FlowView, o: number, len: number): void {
  const off = c.off;
  const l4 = c.l4;
  const totlen = c.totlen;
  const partial = c.partial;
  c.off = o;
  c.l4 = o + (c.v6 ? P.IP6_HLEN : P.IP_MIN_HLEN);
  c.totlen = len;
  c.partial = false;
  rewriteIn(c, c.out.buf, f);
  c.off = off;
  c.l4 = l4;
  c.totlen = totlen;
  c.partial = partial;
}

/** Writes an IPv6 address at x[at]: w[hiIdx, hiIdx+3) then the low word. */
function putAddr(x: Uint8Array, at: number, w: Int32Array, hiIdx: number, lo: number): void {
  for (let i = 0; i < 3; i++) P.put32(x, at + 4 * i, w[hiIdx + i]!);
  P.put32(x, at + 12, lo);
}
