/**
 * Transmit (ip_vs_xmit.c): a packet of a known flow goes on by the flow's forwarding method.
 *  - Client → server (forwardIn): the path-MTU check first, then masq (destination → real
 *    server), full-NAT (and source → pool address and port) or the tunnel (./tunnel.ts); a
 *    full-NAT TCP flow to a server with proxyProtocol gets its PROXY protocol header segment and
 *    sequence shift here (lb/proxy-protocol.ts explains the rules).
 *  - Server → client (forwardOut): source → VIP (full-NAT: destination → client too), the
 *    PROXY protocol flow's acknowledgements shifted back.
 *  - Full-NAT port allocation for a new flow (insertFullnat): the server→client key must be
 *    unique, so the pool port is chosen against the table.
 * Rewrites are in place with incremental checksums (RFC 1624); a partial checksum (offloads) is
 * kept partial, and SCTP's CRC32c is recomputed once both endpoints are rewritten (./sctp.ts).
 */
import type { FlowView, NewFlow } from '../conntrack/flow';
import * as L from '../conntrack/layout';
import { Drop, ppLength, ppVersion } from '../conntrack/layout';
import { TCPF_ACK, TCPF_FIN, TCPF_PSH, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import * as P from '../net/packet';
import { PP_MAX_LEN, writeProxyHeader } from '../net/proxy-protocol';
import { copyOut, drop, FULLNAT_MEMO_SLOTS, nextIpId, nextRandom, type PacketContext, pushSync, reply } from './context';
import { mayAnswer, tooBig } from './icmp';
import { plainVnet } from './offload';
import { shiftSeq, unshiftAck } from './proxy-protocol';
import { sctpSeal } from './sctp';
import { steeringPorts, steeringPrefix } from './steering';
import { encapsulate } from './tunnel';
import { DROP, FORWARD, REPLY } from './verdict';

/** Full-NAT port choice (insertFullnat): random probes before the scan, and how long a full pool is remembered. */
const FULLNAT_PROBES = 16;
export const FULLNAT_FULL_MS = 100;

/** PROXY protocol scratch: a header's two addresses, 4 words each (writeProxyHeader), and a line to measure one. Never live across calls. */
const ppAddrs = new Int32Array(8);
const ppScratch = new Uint8Array(PP_MAX_LEN);

// ── client → server ──────────────────────────────────────────────────────────────────────────
/**
 * Sends a client's packet on to its real server by the flow's method — after the path-MTU
 * check of ip_vs_*_xmit: a DF packet (for GSO, one segment) larger than the route to the real
 * server allows is answered with ICMP fragmentation needed from the VIP, quoting the packet as
 * the client sent it, so the client's path-MTU discovery works through uvs (the kernel would
 * answer after our rewrite, quoting the real server, and the client would ignore it).
 */
export function forwardIn(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const mtu = c.table.routeMtu(f.rs);
  const v6 = c.v6;
  const off = c.off;
  const l4 = c.l4;
  const fwd = f.fwd;
  const proto = f.proto;
  // IPv6 is never fragmented on the way: every packet is checked (Packet Too Big).
  if (mtu > 0 && (v6 || (P.u16(b, off + P.IP_FRAG) & P.IP_DF) !== 0)) {
    const outer = fwd === L.FWD_TUNNEL ? (v6 ? P.IP6_HLEN : P.IP_MIN_HLEN) : 0;
    const size = (c.gsoSize !== 0 ? l4 - off + ((b[l4 + P.TCP_OFF]! >> 4) << 2) + c.gsoSize : c.totlen) + outer;
    if (size > mtu) return mayAnswer(c, L.GEN_TOO_BIG, Drop.TooBig) ? tooBig(c, b, mtu - outer) : DROP;
  }
  if (fwd === L.FWD_TUNNEL) return encapsulate(c, b, f.hi, f.daddr, mtu > 0);
  rewriteIn(c, b, f);
  if ((proto & 0xff) === P.IPPROTO_SCTP) sctpSeal(b, l4, off + c.totlen);
  // f.pp was read under the lookup's lock: flags only gain bits, a stale one costs a duplicate header at most.
  if (fwd === L.FWD_FULLNAT && (proto & 0xff) === P.IPPROTO_TCP && f.pp !== 0) return proxyIn(c, b, f);
  return FORWARD;
}

/**
 * The masq / full-NAT rewrite of a client's packet (the context's current packet, at b[c.off]):
 * destination VIP:vport → real server, and for full-NAT source client → pool address and port.
 * Also what the SYN proxy (./synproxy.ts) sends the server in the client's name.
 */
export function rewriteIn(c: PacketContext, b: Uint8Array, f: FlowView): void {
  const sport = f.cports >>> 16;
  const dport = f.cports & 0xffff;
  if (c.v6) {
    rewrite6(c, b, P.IP6_DST, f.hi, f.daddr, 6, dport, f.dports >>> 16);
    if (f.fwd === L.FWD_FULLNAT) rewrite6(c, b, P.IP6_SRC, f.hi, f.laddr, 9, sport, f.dports & 0xffff);
  } else {
    rewrite4(c, b, P.IP_DST, f.vaddr, dport, f.daddr, f.dports >>> 16);
    if (f.fwd === L.FWD_FULLNAT) rewrite4(c, b, P.IP_SRC, f.caddr, sport, f.laddr, f.dports & 0xffff);
  }
}

/**
 * A full-NAT TCP segment (already rewritten) of a flow with a PROXY protocol header, on its way
 * to the server: shifted into the server's numbering, or, at the header's place while the
 * server has not acknowledged it, preceded by the header segment built in the output region —
 * which replaces a bare ACK and goes before anything else (REPLY, two packets). The flow's PROXY
 * word (f.pp) only gains bits (ConnTable.ppMark), and loses them only when a client's new SYN
 * starts the header over (ppRestart).
 */
function proxyIn(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const off = c.off;
  const l4 = c.l4;
  const totlen = c.totlen;
  const pp = f.pp;
  const len = ppLength(pp);
  const s = f.ppSeq;
  const flags = b[l4 + P.TCP_FLAGS]!;
  const seq = P.u32(b, l4 + P.TCP_SEQ);
  const hl = (b[l4 + P.TCP_OFF]! >> 4) << 2;
  const data = totlen - (l4 - off) - hl > 0 || (flags & TCPF_FIN) !== 0;
  if (flags & TCPF_SYN) {
    // The SYN keeps its own number; the stream start S is the server's to say (proxyOut: its
    // SYN-ACK). Data on it (TCP Fast Open) would be the server's bytes [S, …), the header's place.
    return data ? synWithoutData(c, b, hl) : FORWARD;
  }
  if (pp & L.PP_ACKED) {
    shiftSeq(b, l4, len, c.partial);
    return FORWARD;
  }
  const d = (seq - s) | 0;
  // Bytes before S land in the header's place [S, S + len) of the server's numbering: a forged
  // header, if the server has not had ours yet. No client sends them (its stream starts at S),
  // nor any byte before the server's SYN-ACK has named S (PP_WAIT: S is the client's word).
  if (data && (d < 0 || pp & L.PP_WAIT)) return drop(c, Drop.ProxyForged);
  if (d !== 0) {
    shiftSeq(b, l4, len, c.partial);
    return FORWARD;
  }
  // At the header's place, the header not yet acknowledged.
  if (flags & TCPF_RST) {
    // A RST must carry the server's next expected number exactly (RFC 5961): after the header if it went.
    if (pp & L.PP_SENT) shiftSeq(b, l4, len, c.partial);
    return FORWARD;
  }
  if (data && (pp & (L.PP_SENT | L.PP_DATA)) === L.PP_SENT) {
    // The client's first bytes right behind the ACK that carried the header: it is on its way.
    c.table.ppMark(f.entry, L.PP_DATA);
    shiftSeq(b, l4, len, c.partial);
    return FORWARD;
  }
  const out = c.out;
  const hdr = out.off;
  const hlen = l4 - off + hl + len;
  const V = c.vnet;
  const at = hdr + hlen + V; // the client's segment after it, its virtio header (offloads) before it
  if ((data ? at + totlen : hdr + hlen) > out.end) return drop(c, Drop.OutputFull); // never with a worker's out slots (2 × a packet slot)
  proxySegment(c, b, hl, f, hdr);
  c.table.ppMark(f.entry, data ? L.PP_SENT | L.PP_DATA : L.PP_SENT);
  c.counters[L.C_PP_HEADERS]!++;
  if (!data) return reply(c, hlen); // a bare ACK: the header segment says all it said
  shiftSeq(b, l4, len, c.partial);
  copyOut(c, b, off - V, at - V, totlen + V);
  out.offs[0] = hdr - V;
  out.lens[0] = hlen + V;
  out.offs[1] = at - V;
  out.lens[1] = totlen + V;
  out.count = 2;
  return REPLY;
}

/**
 * Builds the header segment at out.buf[at]: the client's segment's IP and TCP headers (as
 * rewritten: addresses, ports, options such as timestamps) at the header's number, flags
 * ACK|PSH, and the header as its payload; full checksums (no offload: its virtio header is
 * plain). The caller checked that it fits.
 */
function proxySegment(c: PacketContext, b: Uint8Array, hl: number, f: FlowView, at: number): void {
  const off = c.off;
  const ih = c.l4 - off;
  const len = ppLength(f.pp);
  const x = c.out.buf;
  plainVnet(c, at);
  copyOut(c, b, off, at, ih + hl);
  const t = at + ih;
  const w = ppAddrs;
  if (c.v6) {
    for (let i = 0; i < 3; i++) {
      w[i] = f.hi[i]!;
      w[4 + i] = f.hi[3 + i]!;
    }
  }
  w[3] = f.caddr;
  w[7] = f.vaddr;
  writeProxyHeader(x, t + hl, ppVersion(f.pp), c.v6, w, f.cports >>> 16, f.cports & 0xffff);
  P.put32(x, t + P.TCP_SEQ, f.ppSeq);
  x[t + P.TCP_FLAGS] = TCPF_ACK | TCPF_PSH;
  if (!c.v6) P.put16(x, at + P.IP_ID, nextIpId(c));
  sealSegment(c, at, ih, hl + len);
}

/**
 * A client's SYN with data (TCP Fast Open) on a PROXY protocol flow goes to the server without
 * its data, built in the output region: its bytes would be the server's first, before the header.
 * The server acknowledges the SYN alone and the client sends the data again after the handshake
 * (RFC 7413 §4.2.2: data the SYN-ACK does not acknowledge is retransmitted).
 */
function synWithoutData(c: PacketContext, b: Uint8Array, hl: number): number {
  const at = c.out.off;
  const ih = c.l4 - c.off;
  if (at + ih + hl > c.out.end) return drop(c, Drop.OutputFull);
  plainVnet(c, at);
  copyOut(c, b, c.off, at, ih + hl);
  sealSegment(c, at, ih, hl);
  c.counters[L.C_PP_SYN_DATA]!++;
  return reply(c, ih + hl);
}

/** Lengths and full checksums of a TCP segment of `seg` bytes built at out.buf[at] behind `ih` bytes of IP header. */
function sealSegment(c: PacketContext, at: number, ih: number, seg: number): void {
  const x = c.out.buf;
  const t = at + ih;
  P.put16(x, t + P.TCP_CSUM, 0);
  if (c.v6) {
    P.put16(x, at + P.IP6_PLEN, ih + seg - P.IP6_HLEN);
    P.put16(x, t + P.TCP_CSUM, P.checksum(x, t, seg, P.pseudoSum6(x, at + P.IP6_SRC, at + P.IP6_DST, P.IPPROTO_TCP, seg)));
  } else {
    P.put16(x, at + P.IP_TOTLEN, ih + seg);
    P.put16(x, at + P.IP_CSUM, 0);
    P.put16(x, at + P.IP_CSUM, P.checksum(x, at, ih, 0));
    P.put16(x, t + P.TCP_CSUM, P.checksum(x, t, seg, P.pseudoSum(P.u32(x, at + P.IP_SRC), P.u32(x, at + P.IP_DST), P.IPPROTO_TCP, seg)));
  }
}

/**
 * The length of the PROXY protocol header (version `ver`) of the flow the current client packet
 * makes (client saddr:sport → VIP daddr:dport, IPv6 high words in key.hi[0..5]): the flow's
 * sequence shift, fixed for its life (layout.ts E_PP).
 */
export function proxyHeaderLength(c: PacketContext, ver: number): number {
  const w = ppAddrs;
  if (c.v6) {
    const hi = c.key.hi;
    for (let i = 0; i < 3; i++) {
      w[i] = hi[i]!;
      w[4 + i] = hi[3 + i]!;
    }
  }
  w[3] = c.saddr;
  w[7] = c.daddr;
  return writeProxyHeader(ppScratch, 0, ver, c.v6, w, c.sport, c.dport);
}

// ── server → client ──────────────────────────────────────────────────────────────────────────
/** A real server's reply on to the client: source RIP:rport → VIP:vport (full-NAT: destination pool:lport → client too). */
export function forwardOut(c: PacketContext, b: Uint8Array, f: FlowView): number {
  const v6 = c.v6;
  const proto = c.proto;
  if (f.fwd === L.FWD_FULLNAT) {
    if (v6) rewrite6(c, b, P.IP6_DST, f.hi, f.caddr, 0, c.dport, f.cports >>> 16);
    else rewrite4(c, b, P.IP_DST, c.daddr, c.dport, f.caddr, f.cports >>> 16);
    if ((proto & 0xff) === P.IPPROTO_TCP && f.pp !== 0) proxyOut(c, b, f);
  }
  const vport = f.cports & 0xffff;
  if (v6) rewrite6(c, b, P.IP6_SRC, f.hi, f.vaddr, 3, c.sport, vport);
  else rewrite4(c, b, P.IP_SRC, c.saddr, c.sport, f.vaddr, vport);
  if ((proto & 0xff) === P.IPPROTO_SCTP) sctpSeal(b, c.l4, c.off + c.totlen);
  return FORWARD;
}

/**
 * Server→client segment of a flow with a PROXY protocol header: acknowledgement and SACK blocks
 * back into the client's numbering (lb/proxy-protocol.ts). The first ACK that covers the whole
 * header makes every later shift a plain subtraction, and is synced (a node adopting the flow
 * must know it too).
 */
function proxyOut(c: PacketContext, b: Uint8Array, f: FlowView): void {
  const l4 = c.l4;
  let pp = f.pp;
  let s = f.ppSeq;
  const len = ppLength(pp);
  const flags = b[l4 + P.TCP_FLAGS]!;
  if ((flags & (TCPF_SYN | TCPF_ACK)) === (TCPF_SYN | TCPF_ACK)) {
    // A SYN-ACK names the stream start the server expects: its acknowledgement. The first one
    // confirms S (PP_WAIT); one that differs (the client's port reused, a new ISN) starts the
    // header over there, whatever the client's packets claimed: a client SYN never moves S.
    const ack = P.u32(b, l4 + P.TCP_ACK);
    if (ack !== s || pp & L.PP_WAIT) {
      c.table.ppRestart(f.entry, ack);
      s = ack;
      pp &= ~L.PP_FLAGS;
      pushSync(c, f.entry); // a node adopting the flow must not wait for a SYN-ACK it will not see
    }
  }
  let acked = (pp & L.PP_ACKED) !== 0;
  if (!acked && flags & TCPF_ACK && ((P.u32(b, l4 + P.TCP_ACK) - s) | 0) >= len) {
    acked = true;
    c.table.ppMark(f.entry, L.PP_ACKED);
    pushSync(c, f.entry);
  }
  unshiftAck(b, l4, s, len, acked, c.partial);
}

// ── rewrites ─────────────────────────────────────────────────────────────────────────────────
/**
 * Rewrites one endpoint of an IPv4 packet (source: ipField IP_SRC with L4_SPORT; destination:
 * IP_DST with L4_DPORT) from addr:port to addr2:port2, updating the IP and TCP/UDP checksums
 * incrementally.
 */
function rewrite4(c: PacketContext, b: Uint8Array, ipField: number, addr: number, port: number, addr2: number, port2: number): void {
  const off = c.off;
  const l4 = c.l4;
  const proto = c.proto;
  P.put32(b, off + ipField, addr2);
  P.fix32(b, off + P.IP_CSUM, addr, addr2);
  P.put16(b, l4 + (ipField === P.IP_SRC ? P.L4_SPORT : P.L4_DPORT), port2);
  if (c.partial) {
    // The field holds the pseudo-header sum: the address is in it, the port is not.
    P.fixPartial32(b, l4 + (proto === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM), addr, addr2);
  } else if (proto === P.IPPROTO_TCP) {
    P.fix32(b, l4 + P.TCP_CSUM, addr, addr2);
    P.fix16(b, l4 + P.TCP_CSUM, port, port2);
  } else if (proto === P.IPPROTO_UDP) {
    fixUdp(b, l4, addr, addr2, port, port2);
  } // SCTP: its CRC32c covers the ports and is recomputed once both endpoints are rewritten (sctpSeal).
}

/** UDP checksum 0 means "none" and stays 0; a computed 0 is sent as 0xffff (RFC 768). */
function fixUdp(b: Uint8Array, l4: number, fromAddr: number, toAddr: number, fromPort: number, toPort: number): void {
  const o = l4 + P.UDP_CSUM;
  let c = P.u16(b, o);
  if (c === 0) return;
  c = P.csumReplace32(c, fromAddr, toAddr);
  c = P.csumReplace16(c, fromPort, toPort);
  P.put16(b, o, c === 0 ? 0xffff : c);
}

/**
 * IPv6 rewrite of one endpoint: the 16-byte address at ipField (IP6_SRC/IP6_DST) becomes
 * hi[hiIdx, hiIdx+3) + lo, the port becomes port2; the TCP/UDP checksum follows word by word
 * (IPv6 has no header checksum; a partial checksum only follows the address).
 */
function rewrite6(
  c: PacketContext,
  b: Uint8Array,
  ipField: number,
  hi: Int32Array,
  lo: number,
  hiIdx: number,
  port: number,
  port2: number,
): void {
  const off = c.off;
  const l4 = c.l4;
  const p8 = c.proto & 0xff;
  if (p8 === P.IPPROTO_SCTP) {
    // CRC32c covers no addresses; the ports are in it and sctpSeal recomputes it afterwards.
    for (let i = 0; i < 4; i++) P.put32(b, off + ipField + 4 * i, i < 3 ? hi[hiIdx + i]! : lo);
    P.put16(b, l4 + (ipField === P.IP6_SRC ? P.L4_SPORT : P.L4_DPORT), port2);
    return;
  }
  const partial = c.partial;
  const isTcp = p8 === P.IPPROTO_TCP;
  const co = l4 + (isTcp ? P.TCP_CSUM : P.UDP_CSUM);
  let s = P.u16(b, co);
  // An IPv6 UDP checksum of 0 is invalid, but it is not ours to invent one: left as the kernel leaves it.
  const keepZero = !isTcp && !partial && s === 0;
  if (partial) s = ~s & 0xffff; // work on the sum; complemented back below
  for (let i = 0; i < 4; i++) {
    const at = off + ipField + 4 * i;
    const from = P.u32(b, at);
    const to = i < 3 ? hi[hiIdx + i]! : lo;
    if (from === to) continue;
    P.put32(b, at, to);
    s = P.csumReplace32(s, from, to);
  }
  P.put16(b, l4 + (ipField === P.IP6_SRC ? P.L4_SPORT : P.L4_DPORT), port2);
  if (keepZero) return;
  if (partial) s = ~s & 0xffff;
  else s = P.csumReplace16(s, port, port2);
  P.put16(b, co, !partial && !isTcp && s === 0 ? 0xffff : s);
}

// ── full-NAT ports ───────────────────────────────────────────────────────────────────────────
/**
 * Full-NAT: picks a pool address (by client hash) and a free port on it for the new connection
 * r (its server port `rport`), so the server→client key (RIP:rport → laddr:lport) is unique, and
 * inserts it. First FULLNAT_PROBES random ports (with few ports taken, the first nearly always
 * fits), then every port of the range once, from a random start: a flow is refused (−2) only
 * when no port is free. A probe is one out-key lookup under its bucket lock — no entry is
 * allocated until a port looks free; a race lost on insert goes on with the next port. A (pool
 * address, server) found full is remembered for FULLNAT_FULL_MS, so a flood of new flows at a
 * full pool costs one memo check each instead of a scan of up to 64 k ports. Otherwise as
 * ConnTable.insert; extraFlags go into the entry's flags with the method.
 *
 * Where uvs's program steers the device, each random probe prefers a port whose server→client
 * packets the program sends to this worker's queue (steeredPort): the program keys a packet to a
 * pool address on its 4-tuple, so the two directions of the connection are read by one worker, as
 * in masq (docs/steering.md). A preference, never a limit: the scan after the probes takes any
 * free port.
 */
export function insertFullnat(c: PacketContext, r: NewFlow, rport: number, extraFlags = 0): number {
  const s = c.snapshot;
  const v6 = c.v6;
  const pool = v6 ? s.fullnatAddrs6 : s.fullnatAddrs;
  if (pool.length === 0) return -2;
  const min = s.fullnatPortMin;
  const range = s.fullnatPortMax - min + 1;
  const pick = (r.caddr ^ r.cports) >>> 0;
  if (v6) {
    const p = (pick % (pool.length >> 2)) << 2;
    for (let i = 0; i < 3; i++) r.hi[9 + i] = pool[p + i]!;
    r.laddr = pool[p + 3]!;
  } else {
    r.laddr = pool[pick % pool.length]!;
  }
  r.flags = L.FWD_FULLNAT | extraFlags; // | a SYN-proxied flow's F_SYNPROXY | F_SP_PENDING
  // The memo slot and tag (never 0) of (proto, pool address, server address and port): a keyed hash.
  const h = c.hash;
  h.begin(c.hashKey[0]!, c.hashKey[1]!);
  h.word(r.laddr);
  h.word(r.daddr);
  h.word(rport);
  if (v6) for (let i = 6; i < 12; i++) h.word(r.hi[i]!);
  const v = h.end((v6 ? 37 << 24 : 13 << 24) | (r.proto & 0xff));
  const tag = Math.imul(v, 0x9e3779b1) | 1 | 0;
  const memo = (v >>> 0) & (FULLNAT_MEMO_SLOTS - 1);
  if (c.fullTags[memo] === tag && ((c.fullUntil[memo]! - c.now) | 0) > 0) return -2;
  const probes = range < FULLNAT_PROBES * 4 ? 0 : FULLNAT_PROBES;
  let e = -2;
  // The connection this one replaces (its client reused the port: lb/core.ts inbound) had this
  // server: its pool address and port first, where the server's TIME_WAIT takes our SYN.
  if (c.keepFlow && keepsPort(c, r, rport)) e = tryPort(c, r, rport, c.flow.dports & 0xffff);
  const steered = c.steerQueues > 1;
  if (steered) steeringPrefix(c.steerPrefix, c.steerK0, c.steerK1, r.daddr, r.laddr, v6 ? r.hi : null);
  for (let i = 0; i < probes && e === -2; i++) {
    const lport = steered ? steeredPort(c, rport, v6) : min + ((nextRandom(c) >>> 0) % range);
    e = tryPort(c, r, rport, lport);
  }
  if (e === -2) {
    let lport = min + ((nextRandom(c) >>> 0) % range);
    for (let k = 0; k < range && e === -2; k++) {
      e = tryPort(c, r, rport, lport);
      if (++lport > s.fullnatPortMax) lport = min;
    }
  }
  if (e === -2) {
    c.fullTags[memo] = tag;
    c.fullUntil[memo] = (c.now + FULLNAT_FULL_MS) | 0;
  }
  return e;
}

/**
 * A pool port whose server→client packets the program steers to this worker's queue: it keys a
 * packet to a pool address on its 4-tuple (real server, pool address, rport, lport), whose
 * prefix c.steerPrefix holds (steeringPrefix). From a random port of the pool's range, the first
 * such port upwards (wrapping), within 16 ports per queue (at most 64), else the random one. With
 * 2 queues a port fits half the time: 2 hashes on average, and 32 ports miss once in 4·10⁹.
 * Measured: perf/LOG.md (2026-12-02, and the keyed hash of issue 25).
 */
function steeredPort(c: PacketContext, rport: number, v6: boolean): number {
  const s = c.snapshot;
  const lo = s.fullnatPortMin;
  const span = s.fullnatPortMax - lo + 1;
  const first = lo + ((nextRandom(c) >>> 0) % span);
  const tries = Math.min(64, 16 * c.steerQueues, span);
  const q = c.steerQueue;
  const n = c.steerQueues;
  let lport = first;
  for (let t = 0; t < tries; t++) {
    if (steeringPorts(c.steerPrefix, rport, lport, v6) % n === q) return lport;
    if (++lport > s.fullnatPortMax) lport = lo;
  }
  return first;
}

/** Whether r (server and pool address chosen) has the replaced connection's (c.flow) server and pool address, its port in range. */
function keepsPort(c: PacketContext, r: NewFlow, rport: number): boolean {
  const f = c.flow;
  const s = c.snapshot;
  const lport = f.dports & 0xffff;
  if (r.daddr !== f.daddr || r.laddr !== f.laddr || f.dports >>> 16 !== rport) return false;
  if (lport < s.fullnatPortMin || lport > s.fullnatPortMax) return false;
  if (c.v6) for (let i = 6; i < 12; i++) if (r.hi[i] !== f.hi[i]) return false;
  return true;
}

/** Inserts the flow with pool port lport if that port looks free for this server; −2 when taken. */
function tryPort(c: PacketContext, r: NewFlow, rport: number, lport: number): number {
  r.dports = (rport << 16) | lport;
  if (c.table.outKeyInUse(r)) return -2;
  return c.table.insert(r);
}
