/**
 * ICMP on the packet path, as ip_vs_core.c handles it (ip_vs_in_icmp, ip_vs_out_icmp and their
 * IPv6 twins) and as the kernel's own stack would answer for a VIP:
 *  - errors about a tracked flow are translated both ways (icmpError, icmp6Error);
 *  - echo requests to a VIP are answered in place when configured (icmpToVip, icmp6ToVip);
 *  - ICMP from the real servers' side that is not about a flow of ours goes on unchanged
 *    (icmpNotOurs);
 *  - the answers the path generates — TCP RST, port unreachable, fragmentation needed / Packet
 *    Too Big — are built here (tcpReset, unreachable, tooBig), each after mayAnswer: a RST is
 *    never answered (the callers check), nothing is sent to a source the kernel would route back
 *    into the device (a VIP, the full-NAT pool) or that is no unicast host (multicast, broadcast,
 *    loopback, unspecified, reserved), and answers are limited per source and per worker as
 *    net/ipv4/icmp.c limits ICMP (docs/generated-packets.md).
 * Every answer goes from the current packet's destination to its source, into the caller's
 * output region (./verdict.ts), with a plain virtio header under offloads.
 */
import * as L from '../conntrack/layout';
import { Drop, ppLength } from '../conntrack/layout';
import { TCPF_ACK, TCPF_FIN, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import * as P from '../net/packet';
import { copyOut, countIn, countOut, drop, GEN_PEER_SLOTS, nextIpId, nextRandom, type PacketContext, reply } from './context';
import { plainVnet } from './offload';
import { toClientSeq } from './proxy-protocol';
import { inVipRange, inVipRange6 } from './snapshot';
import { encapsulate } from './tunnel';
import { DROP, FORWARD } from './verdict';

// ── ICMP arriving ────────────────────────────────────────────────────────────────────────────
/**
 * ICMP errors (destination unreachable, source quench, time exceeded) about a tracked flow,
 * translated as ip_vs_in_icmp / ip_vs_out_icmp do. The quoted packet is looked up the other
 * way round:
 *  - to a VIP (inbound), quoting a reply VIP:vport → client (e.g. fragmentation needed on the
 *    client's path, also the one this node's own kernel sends when a reply is too big): goes
 *    on to the flow's real server — the outer destination and the quoted source become the
 *    real server (full-NAT: the outer source and the quoted destination the pool address and
 *    port), or for a tunnelled flow the ICMP is encapsulated unchanged;
 *  - from the real servers' side (outbound: routed here by uvsd's `ipproto icmp` rule, or to a
 *    full-NAT pool address), quoting a packet we sent to a real server (e.g. its port
 *    unreachable for a UDP service that stopped): goes to the client from the VIP, the quoted
 *    destination made VIP:vport again (full-NAT: the outer destination and quoted source the
 *    client's).
 * The checksums of the quoted IP header, the outer header and the ICMP message are recomputed
 * (ip_vs_nat_icmp; the quoted TCP/UDP checksum is left as it is, as there).
 */
export function icmpError(c: PacketContext, b: Uint8Array, inbound: boolean): number {
  const off = c.off;
  const totlen = c.totlen;
  const ic = c.l4;
  const ihl = ic - off;
  const q = ic + P.ICMP_HLEN;
  const end = off + totlen;
  if (q + P.IP_MIN_HLEN > end || b[q]! >> 4 !== 4) return drop(c, Drop.Truncated);
  const qihl = (b[q]! & 15) << 2;
  if (qihl < P.IP_MIN_HLEN || q + qihl + 4 > end) return drop(c, Drop.Truncated);
  const qproto = b[q + P.IP_PROTO]!;
  if (qproto !== P.IPPROTO_TCP && qproto !== P.IPPROTO_UDP && qproto !== P.IPPROTO_SCTP)
    return inbound ? drop(c, Drop.IcmpIgnored) : icmpNotOurs(c);
  // The kernel drops an error whose checksum fails ("failed checksum" in ip_vs_in_icmp and
  // handle_response_icmp); recomputing it below must not make a damaged one look intact.
  if (P.sum16(b, ic, totlen - ihl, 0) !== 0xffff) return drop(c, Drop.BadChecksum);
  // A quoted non-first fragment carries no ports (the kernel ignores these too).
  if ((P.u16(b, q + P.IP_FRAG) & 0x1fff) !== 0) return inbound ? drop(c, Drop.IcmpIgnored) : icmpNotOurs(c);
  const ql4 = q + qihl;
  // The quoted packet reversed is the key: to a VIP (client side) the flow's client→server key,
  // from the servers' side its server→client key.
  const k = c.key;
  k.proto = qproto;
  k.src = P.u32(b, q + P.IP_DST);
  k.ports = (P.u16(b, ql4 + P.L4_DPORT) << 16) | P.u16(b, ql4 + P.L4_SPORT);
  k.dst = P.u32(b, q + P.IP_SRC);
  const f = c.flow;
  if (!c.table.readFlow(k, !inbound, f)) return inbound ? drop(c, Drop.IcmpIgnored) : icmpNotOurs(c);
  const fwd = f.fwd;
  if (inbound) {
    countIn(c, f.rs, f.svc, totlen);
    if (fwd === L.FWD_TUNNEL) return encapsulate(c, b, f.hi, f.daddr, false);
    P.put32(b, off + P.IP_DST, f.daddr);
    P.put32(b, q + P.IP_SRC, f.daddr);
    P.put16(b, ql4 + P.L4_SPORT, f.dports >>> 16);
    if (fwd === L.FWD_FULLNAT) {
      P.put32(b, off + P.IP_SRC, f.laddr);
      P.put32(b, q + P.IP_DST, f.laddr);
      P.put16(b, ql4 + P.L4_DPORT, f.dports & 0xffff);
    }
  } else {
    countOut(c, f.rs, f.svc, totlen);
    P.put32(b, off + P.IP_SRC, f.vaddr);
    P.put32(b, q + P.IP_DST, f.vaddr);
    P.put16(b, ql4 + P.L4_DPORT, f.cports & 0xffff);
    if (fwd === L.FWD_FULLNAT) {
      P.put32(b, off + P.IP_DST, f.caddr);
      P.put32(b, q + P.IP_SRC, f.caddr);
      P.put16(b, ql4 + P.L4_SPORT, f.cports >>> 16);
    }
    if (qproto === P.IPPROTO_TCP && fwd === L.FWD_FULLNAT && f.pp !== 0) proxyQuoted(b, ql4, end, f.pp, f.ppSeq);
  }
  P.put16(b, q + P.IP_CSUM, 0);
  P.put16(b, q + P.IP_CSUM, P.checksum(b, q, qihl, 0));
  P.put16(b, off + P.IP_CSUM, 0);
  P.put16(b, off + P.IP_CSUM, P.checksum(b, off, ihl, 0));
  P.put16(b, ic + P.ICMP_CSUM, 0);
  P.put16(b, ic + P.ICMP_CSUM, P.checksum(b, ic, totlen - ihl, 0));
  return FORWARD;
}

/**
 * ICMPv6 errors (types below 128) about a tracked flow: ip_vs_in_icmp_v6 / ip_vs_out_icmp_v6,
 * the same translation as icmpError for IPv4 (see there), then the ICMPv6 checksum (which
 * covers the outer addresses too) is recomputed. The quoted packet must be TCP, UDP or SCTP
 * directly after its IPv6 header.
 */
export function icmp6Error(c: PacketContext, b: Uint8Array, inbound: boolean): number {
  const off = c.off;
  const ic = c.l4;
  const q = ic + P.ICMP_HLEN;
  const end = off + c.totlen;
  if (q + P.IP6_HLEN + 4 > end || b[q]! >> 4 !== 6) return drop(c, Drop.Truncated);
  const qproto = b[q + P.IP6_NEXT]!;
  if (qproto !== P.IPPROTO_TCP && qproto !== P.IPPROTO_UDP && qproto !== P.IPPROTO_SCTP)
    return inbound ? drop(c, Drop.IcmpIgnored) : icmpNotOurs(c);
  // As for IPv4: a damaged error is dropped, never given a fresh checksum.
  const l4len = end - ic;
  if (P.sum16(b, ic, l4len, P.pseudoSum6(b, off + P.IP6_SRC, off + P.IP6_DST, P.IPPROTO_ICMPV6, l4len)) !== 0xffff)
    return drop(c, Drop.BadChecksum);
  const ql4 = q + P.IP6_HLEN;
  const k = c.key;
  const hi = k.hi;
  // The key as for IPv4, its high words where the table keeps them: client side 0..5, server side 6..11.
  const h = inbound ? 0 : 6;
  for (let i = 0; i < 3; i++) {
    hi[h + i] = P.u32(b, q + P.IP6_DST + 4 * i);
    hi[h + 3 + i] = P.u32(b, q + P.IP6_SRC + 4 * i);
  }
  k.proto = qproto | L.PROTO_V6;
  k.src = P.u32(b, q + P.IP6_DST + 12);
  k.ports = (P.u16(b, ql4 + P.L4_DPORT) << 16) | P.u16(b, ql4 + P.L4_SPORT);
  k.dst = P.u32(b, q + P.IP6_SRC + 12);
  const f = c.flow;
  if (!c.table.readFlow(k, !inbound, f)) return inbound ? drop(c, Drop.IcmpIgnored) : icmpNotOurs(c);
  const fwd = f.fwd;
  // The entry's high words, three per address in the table's order: client 0, virtual 3, real
  // server 6, local 9.
  const w = f.hi;
  if (inbound) {
    countIn(c, f.rs, f.svc, c.totlen);
    if (fwd === L.FWD_TUNNEL) return encapsulate(c, b, w, f.daddr, false);
    putAddr6(b, off + P.IP6_DST, w, 6, f.daddr);
    putAddr6(b, q + P.IP6_SRC, w, 6, f.daddr);
    P.put16(b, ql4 + P.L4_SPORT, f.dports >>> 16);
    if (fwd === L.FWD_FULLNAT) {
      putAddr6(b, off + P.IP6_SRC, w, 9, f.laddr);
      putAddr6(b, q + P.IP6_DST, w, 9, f.laddr);
      P.put16(b, ql4 + P.L4_DPORT, f.dports & 0xffff);
    }
  } else {
    countOut(c, f.rs, f.svc, c.totlen);
    putAddr6(b, off + P.IP6_SRC, w, 3, f.vaddr);
    putAddr6(b, q + P.IP6_DST, w, 3, f.vaddr);
    P.put16(b, ql4 + P.L4_DPORT, f.cports & 0xffff);
    if (fwd === L.FWD_FULLNAT) {
      putAddr6(b, off + P.IP6_DST, w, 0, f.caddr);
      putAddr6(b, q + P.IP6_SRC, w, 0, f.caddr);
      P.put16(b, ql4 + P.L4_SPORT, f.cports >>> 16);
    }
    if (qproto === P.IPPROTO_TCP && fwd === L.FWD_FULLNAT && f.pp !== 0) proxyQuoted(b, ql4, end, f.pp, f.ppSeq);
  }
  P.put16(b, ic + P.ICMP_CSUM, 0);
  P.put16(b, ic + P.ICMP_CSUM, P.checksum(b, ic, l4len, P.pseudoSum6(b, off + P.IP6_SRC, off + P.IP6_DST, P.IPPROTO_ICMPV6, l4len)));
  return FORWARD;
}

/**
 * The sequence number of a quoted segment we sent to a server, back in the client's numbering:
 * the client checks it against what it has in flight (tcp_v4_err ignores an error quoting a
 * number outside snd_una..snd_nxt), so path-MTU discovery keeps working with a PROXY header.
 */
function proxyQuoted(b: Uint8Array, ql4: number, end: number, pp: number, s: number): void {
  if (ql4 + P.TCP_SEQ + 4 > end) return;
  P.put32(b, ql4 + P.TCP_SEQ, toClientSeq(P.u32(b, ql4 + P.TCP_SEQ), s, ppLength(pp), (pp & L.PP_ACKED) !== 0));
}

/** Writes an IPv6 address at b[at]: w[hiIdx, hiIdx+3) then the low word. */
function putAddr6(b: Uint8Array, at: number, w: Int32Array, hiIdx: number, lo: number): void {
  for (let i = 0; i < 3; i++) P.put32(b, at + 4 * i, w[hiIdx + i]!);
  P.put32(b, at + 12, lo);
}

/**
 * ICMP from the real servers' side that is not about a flow of ours (echo replies, errors about
 * their own traffic) only came here through the `ipproto icmp` reply rule: it goes on unchanged
 * (packets leaving the device are routed by the main table). One to a full-NAT pool address
 * would come straight back: dropped.
 */
export function icmpNotOurs(c: PacketContext): number {
  if (c.v6) {
    const pool = c.snapshot.fullnatAddrs6;
    const pa = c.pa;
    for (let i = 0; i < pool.length; i += 4) {
      if (pool[i] === pa[4] && pool[i + 1] === pa[5] && pool[i + 2] === pa[6] && pool[i + 3] === pa[7]) return drop(c, Drop.IcmpIgnored);
    }
    return FORWARD;
  }
  const pool = c.snapshot.fullnatAddrs;
  for (let i = 0; i < pool.length; i++) if (pool[i] === c.daddr) return drop(c, Drop.IcmpIgnored);
  return FORWARD;
}

/** ICMP to a VIP: echo requests are answered (when configured), errors are not ours yet. */
export function icmpToVip(c: PacketContext, b: Uint8Array): number {
  const off = c.off;
  const ic = c.l4;
  const ihl = ic - off;
  if (b[ic + P.ICMP_TYPE] !== P.ICMP_ECHO || !c.snapshot.answerPing) return drop(c, Drop.IcmpIgnored);
  if (P.sum16(b, ic, c.totlen - ihl, 0) !== 0xffff) return drop(c, Drop.BadChecksum);
  if (!mayAnswer(c, L.GEN_ECHO, -1)) return DROP;
  // Turn the request around in place: swap addresses, type 8 → 0.
  P.put32(b, off + P.IP_SRC, c.daddr);
  P.put32(b, off + P.IP_DST, c.saddr);
  b[off + P.IP_TTL] = 64;
  P.put16(b, off + P.IP_CSUM, 0);
  P.put16(b, off + P.IP_CSUM, P.checksum(b, off, ihl, 0));
  b[ic + P.ICMP_TYPE] = P.ICMP_ECHOREPLY;
  P.fix16(b, ic + P.ICMP_CSUM, P.ICMP_ECHO << 8, P.ICMP_ECHOREPLY << 8);
  return FORWARD;
}

/** ICMPv6 to a VIP: an echo request is answered in place (when configured); the rest is not ours. */
export function icmp6ToVip(c: PacketContext, b: Uint8Array): number {
  const off = c.off;
  const ic = c.l4;
  if (b[ic + P.ICMP_TYPE] !== P.ICMP6_ECHO_REQUEST || !c.snapshot.answerPing) return drop(c, Drop.IcmpIgnored);
  const l4len = off + c.totlen - ic;
  if (P.sum16(b, ic, l4len, P.pseudoSum6(b, off + P.IP6_SRC, off + P.IP6_DST, P.IPPROTO_ICMPV6, l4len)) !== 0xffff)
    return drop(c, Drop.BadChecksum);
  if (!mayAnswer(c, L.GEN_ECHO, -1)) return DROP;
  // Swap the addresses (the pseudo-header sum does not change) and turn 128 into 129.
  for (let i = 0; i < 16; i++) {
    const x = b[off + P.IP6_SRC + i]!;
    b[off + P.IP6_SRC + i] = b[off + P.IP6_DST + i]!;
    b[off + P.IP6_DST + i] = x;
  }
  b[off + P.IP6_HOPS] = 64;
  b[ic + P.ICMP_TYPE] = P.ICMP6_ECHO_REPLY;
  P.fix16(b, ic + P.ICMP_CSUM, P.ICMP6_ECHO_REQUEST << 8, P.ICMP6_ECHO_REPLY << 8);
  return FORWARD;
}

// ── answers we generate ──────────────────────────────────────────────────────────────────────
/**
 * Whether an answer of `kind` (L.GEN_*) may go back to the current packet's source. Not to a
 * source the answer would loop through or reflect off: one inside the VIP ranges or the
 * full-NAT pool comes straight back into the device (a RST between two VIPs answered itself for
 * ever, 300 k packets/s from one spoofed packet), and multicast, broadcast, loopback,
 * unspecified and reserved sources are never a host that sent it (the kernel's __icmp_send and
 * tcp_v4_send_reset refuse them too) — dropped, unanswerable_source. Then the limits, for the
 * kinds genKinds names (withinLimits). True: `reason` (≥ 0) is counted and the caller builds the
 * answer; false: the packet is counted as dropped here.
 */
export function mayAnswer(c: PacketContext, kind: number, reason: number): boolean {
  const n = c.counters;
  const at = L.C_GEN_BASE + kind * L.GEN_RESULTS;
  if (c.v6 ? unanswerable6(c) : unanswerable4(c, c.saddr)) {
    n[at + L.GEN_BAD_DESTINATION]!++;
    n[L.C_DROP_BASE + Drop.UnanswerableSource]!++;
    c.out.reason = Drop.UnanswerableSource;
    return false;
  }
  if ((c.snapshot.genKinds & (1 << kind)) !== 0 && !withinLimits(c)) {
    n[at + L.GEN_RATE_LIMITED]!++;
    n[L.C_DROP_BASE + Drop.RateLimited]!++;
    c.out.reason = Drop.RateLimited;
    return false;
  }
  n[at + L.GEN_SENT]!++;
  if (reason >= 0) n[L.C_DROP_BASE + reason]!++;
  c.out.reason = reason;
  return true;
}

/** The current packet's source is one mayAnswer never answers (the SYN proxy's cookies obey it without the limits). */
export function unanswerableSource(c: PacketContext): boolean {
  return c.v6 ? unanswerable6(c) : unanswerable4(c, c.saddr);
}

/**
 * 0.0.0.0/8 (this network, RFC 1122), 127/8, 224/4 multicast (link-local 224.0.0/24 included),
 * 240/4 reserved with 255.255.255.255 (limited broadcast); the VIP ranges and the pool. A
 * subnet's directed broadcast is not knowable here: it is a route the kernel would not send here.
 */
function unanswerable4(c: PacketContext, a: number): boolean {
  const top = a >>> 24;
  if (top === 0 || top === 127 || top >= 224) return true;
  const s = c.snapshot;
  if (inVipRange(s, a)) return true;
  const pool = s.fullnatAddrs;
  for (let i = 0; i < pool.length; i++) if (pool[i] === a) return true;
  return false;
}

/**
 * ff00::/8 multicast (link-local ff02:: included), ::/96 (unspecified, loopback ::1, the
 * deprecated IPv4-compatible form), ::ffff:0:0/96 (IPv4-mapped: never on the wire, RFC 4291
 * §2.5.5.2 — ipv6_rcv drops it as a source); the VIP ranges and the pool.
 */
function unanswerable6(c: PacketContext): boolean {
  const pa = c.pa;
  const w0 = pa[0]!;
  if (w0 >>> 24 === 0xff) return true;
  if (w0 === 0 && pa[1] === 0 && (pa[2] === 0 || pa[2] === 0xffff)) return true;
  const s = c.snapshot;
  if (inVipRange6(s, pa, 0)) return true;
  const pool = s.fullnatAddrs6;
  for (let i = 0; i < pool.length; i += 4) {
    if (pool[i] === w0 && pool[i + 1] === pa[1] && pool[i + 2] === pa[2] && pool[i + 3] === pa[3]) return true;
  }
  return false;
}

/**
 * The kernel's two ICMP limits, in its order (net/ipv4/icmp.c, 6.12+): the global bucket must
 * hold credit (icmp_global_allow: refilled at most every 20 ms by genPerSec × elapsed, capped at
 * genBurst), then the source's bucket must allow one (inet_peer_xrlim_allow: credit in ms,
 * + elapsed, capped at genPeerBurst × genPeerMs, one answer costs genPeerMs), and only a sent
 * answer takes from the global credit — 0, 1 or 2 at random, 1 on average, so its exact state
 * cannot be probed from outside (icmp_global_consume; CVE-2020-25705). Times are the batch clock.
 */
function withinLimits(c: PacketContext): boolean {
  const s = c.snapshot;
  const now = c.now;
  const perSec = s.genPerSec;
  if (perSec > 0 && c.genCredit <= 0) {
    let delta = (now - c.genStamp) | 0;
    if (c.genCredit < 0 || delta < 0 || delta > 1000) delta = 1000; // first use, or the clock wrapped
    if (delta < 20) return false;
    const incr = Math.floor((perSec * delta) / 1000);
    if (incr === 0) return false;
    c.genStamp = now;
    c.genCredit = incr < s.genBurst ? incr : s.genBurst;
  }
  const iv = s.genPeerMs;
  if (iv > 0) {
    const i = peerSlot(c) << 1;
    const pb = c.peerBuckets;
    const cap = iv * s.genPeerBurst;
    let tokens = pb[i]!;
    if (tokens < 0)
      tokens = cap; // a source never answered: a full burst (inet_getpeer: rate_last 60 s ago)
    else {
      let el = (now - pb[i + 1]!) | 0;
      if (el < 0 || el > cap) el = cap;
      tokens += el;
      if (tokens > cap) tokens = cap;
    }
    pb[i + 1] = now;
    if (tokens < iv) {
      pb[i] = tokens;
      return false;
    }
    pb[i] = tokens - iv;
  }
  if (perSec > 0) {
    c.genCredit -= (nextRandom(c) >>> 0) % 3;
    if (c.genCredit < 0) c.genCredit = 0;
  }
  return true;
}

/** The per-source bucket of the current packet's source: a keyed hash (not steerable from outside). */
function peerSlot(c: PacketContext): number {
  const h = c.hash;
  h.begin(c.hashKey[0]!, c.hashKey[1]!);
  if (c.v6) {
    const pa = c.pa;
    h.word(pa[0]!);
    h.word(pa[1]!);
    h.word(pa[2]!);
    h.word(pa[3]!);
    return h.end(16 << 24) & (GEN_PEER_SLOTS - 1);
  }
  h.word(c.saddr);
  return h.end(4 << 24) & (GEN_PEER_SLOTS - 1);
}

/** "Nothing here" to the client: ICMP(v6) port unreachable from the VIP. */
export function unreachable(c: PacketContext, b: Uint8Array): number {
  return c.v6 ? icmp6Generate(c, b, P.ICMP6_DST_UNREACH, P.ICMP6_PORT_UNREACH, 0) : icmpUnreach(c, b, P.ICMP_PORT_UNREACH, 0);
}

/**
 * "Too big for the path to the real server" (ip_vs_*_xmit's path-MTU check): ICMP fragmentation
 * needed (RFC 1191) or ICMPv6 Packet Too Big with that path's MTU — for IPv6 never below the
 * minimum MTU every path must carry (RFC 8200 §5).
 */
export function tooBig(c: PacketContext, b: Uint8Array, mtu: number): number {
  if (c.v6) return icmp6Generate(c, b, P.ICMP6_PACKET_TOO_BIG, 0, mtu < P.IPV6_MIN_MTU ? P.IPV6_MIN_MTU : mtu);
  return icmpUnreach(c, b, P.ICMP_FRAG_NEEDED, mtu);
}

/** TCP RST answering the current segment (RFC 9293 §3.10.7.1, "reset generation"). */
export function tcpReset(c: PacketContext, b: Uint8Array): number {
  const off = c.off;
  const l4 = c.l4;
  const flags = c.ev;
  const o = c.out.off;
  const x = c.out.buf;
  const v6 = c.v6;
  const src = v6 ? 0 : P.u32(b, off + P.IP_DST);
  const dst = v6 ? 0 : P.u32(b, off + P.IP_SRC);
  if (v6) {
    ip6Header(c, o, 20, P.IPPROTO_TCP);
    for (let i = 0; i < 16; i++) {
      x[o + P.IP6_SRC + i] = b[off + P.IP6_DST + i]!;
      x[o + P.IP6_DST + i] = b[off + P.IP6_SRC + i]!;
    }
  } else {
    ipHeader(c, o, 40, P.IPPROTO_TCP, src, dst);
  }
  const t = o + (v6 ? P.IP6_HLEN : P.IP_MIN_HLEN);
  P.put16(x, t + P.L4_SPORT, P.u16(b, l4 + P.L4_DPORT));
  P.put16(x, t + P.L4_DPORT, P.u16(b, l4 + P.L4_SPORT));
  if (flags & TCPF_ACK) {
    P.put32(x, t + P.TCP_SEQ, P.u32(b, l4 + P.TCP_ACK));
    P.put32(x, t + P.TCP_ACK, 0);
    x[t + P.TCP_FLAGS] = TCPF_RST;
  } else {
    const hl = (b[l4 + P.TCP_OFF]! >> 4) << 2;
    const seglen = c.totlen - (l4 - off) - hl + (flags & TCPF_SYN ? 1 : 0) + (flags & TCPF_FIN ? 1 : 0);
    P.put32(x, t + P.TCP_SEQ, 0);
    P.put32(x, t + P.TCP_ACK, (P.u32(b, l4 + P.TCP_SEQ) + seglen) | 0);
    x[t + P.TCP_FLAGS] = TCPF_RST | TCPF_ACK;
  }
  x[t + P.TCP_OFF] = 5 << 4;
  P.put16(x, t + P.TCP_WIN, 0);
  P.put16(x, t + P.TCP_CSUM, 0);
  P.put16(x, t + 18, 0);
  const ps = v6 ? P.pseudoSum6(x, o + P.IP6_SRC, o + P.IP6_DST, P.IPPROTO_TCP, 20) : P.pseudoSum(src, dst, P.IPPROTO_TCP, 20);
  P.put16(x, t + P.TCP_CSUM, P.checksum(x, t, 20, ps));
  return reply(c, (v6 ? P.IP6_HLEN : P.IP_MIN_HLEN) + 20);
}

/**
 * ICMP destination unreachable (`code`; for fragmentation needed, `mtu` is the next-hop MTU,
 * RFC 1191) about the current packet, from its destination to its source: its IP header plus 8
 * bytes (RFC 792).
 */
function icmpUnreach(c: PacketContext, b: Uint8Array, code: number, mtu: number): number {
  const off = c.off;
  const ihl = (b[off]! & 15) << 2;
  const quoted = Math.min(c.totlen, ihl + 8);
  const o = c.out.off;
  const x = c.out.buf;
  const len = P.IP_MIN_HLEN + P.ICMP_HLEN + quoted;
  ipHeader(c, o, len, P.IPPROTO_ICMP, c.daddr, c.saddr);
  const ic = o + P.IP_MIN_HLEN;
  x[ic + P.ICMP_TYPE] = P.ICMP_DEST_UNREACH;
  x[ic + P.ICMP_CODE] = code;
  P.put16(x, ic + P.ICMP_CSUM, 0);
  P.put32(x, ic + 4, mtu & 0xffff);
  for (let i = 0; i < quoted; i++) x[ic + P.ICMP_HLEN + i] = b[off + i]!;
  P.put16(x, ic + P.ICMP_CSUM, P.checksum(x, ic, P.ICMP_HLEN + quoted, 0));
  return reply(c, len);
}

/**
 * An ICMPv6 error about the current packet to its source, from its destination (the VIP): port
 * unreachable or packet too big (`info` = the MTU). It quotes as much of the packet as keeps the
 * error within the IPv6 minimum MTU (RFC 4443 §2.4).
 */
function icmp6Generate(c: PacketContext, b: Uint8Array, type: number, code: number, info: number): number {
  const off = c.off;
  const o = c.out.off;
  const x = c.out.buf;
  const quoted = Math.min(c.totlen, P.IPV6_MIN_MTU - P.IP6_HLEN - P.ICMP_HLEN, c.out.end - o - P.IP6_HLEN - P.ICMP_HLEN);
  const plen = P.ICMP_HLEN + quoted;
  ip6Header(c, o, plen, P.IPPROTO_ICMPV6);
  for (let i = 0; i < 16; i++) {
    x[o + P.IP6_SRC + i] = b[off + P.IP6_DST + i]!;
    x[o + P.IP6_DST + i] = b[off + P.IP6_SRC + i]!;
  }
  const ic = o + P.IP6_HLEN;
  x[ic + P.ICMP_TYPE] = type;
  x[ic + P.ICMP_CODE] = code;
  P.put16(x, ic + P.ICMP_CSUM, 0);
  P.put32(x, ic + 4, info);
  copyOut(c, b, off, ic + P.ICMP_HLEN, quoted);
  P.put16(x, ic + P.ICMP_CSUM, P.checksum(x, ic, plen, P.pseudoSum6(x, o + P.IP6_SRC, o + P.IP6_DST, P.IPPROTO_ICMPV6, plen)));
  return reply(c, P.IP6_HLEN + plen);
}

/** An IPv4 header at out.buf[o] for a generated packet: DF, TTL 64, the worker's next ID. */
export function ipHeader(c: PacketContext, o: number, totlen: number, proto: number, src: number, dst: number): void {
  const x = c.out.buf;
  plainVnet(c, o);
  x[o] = 0x45;
  x[o + 1] = 0;
  P.put16(x, o + P.IP_TOTLEN, totlen);
  P.put16(x, o + P.IP_ID, nextIpId(c));
  P.put16(x, o + P.IP_FRAG, 0x4000); // DF
  x[o + P.IP_TTL] = 64;
  x[o + P.IP_PROTO] = proto;
  P.put16(x, o + P.IP_CSUM, 0);
  P.put32(x, o + P.IP_SRC, src);
  P.put32(x, o + P.IP_DST, dst);
  P.put16(x, o + P.IP_CSUM, P.checksum(x, o, P.IP_MIN_HLEN, 0));
}

/** IPv6 header at out.buf[o]: traffic class/flow 0, hop limit 64. */
export function ip6Header(c: PacketContext, o: number, plen: number, next: number): void {
  const x = c.out.buf;
  plainVnet(c, o);
  P.put32(x, o, 0x60000000);
  P.put16(x, o + P.IP6_PLEN, plen);
  x[o + P.IP6_NEXT] = next;
  x[o + P.IP6_HOPS] = 64;
}
