/**
 * The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2) towards full-NAT real
 * servers: a header naming the client's address and port and the VIP's goes in front of the
 * client's bytes, so a server that sees only uvs's pool address still learns who connected.
 *
 * The header is inserted into the TCP stream, as HAProxy's `send-proxy` writes it first on its own
 * connection and DPVS inserts it into a full-NAT flow (src/ipvs/ip_vs_proxy_proto.c). The server's
 * stream is then the client's with `len` more bytes in front, so for the whole flow:
 *   client→server  seq += len               (the client's byte s is the server's s + len)
 *   server→client  ack −= len, SACK −= len  (the server acknowledges bytes of its own numbering)
 * The header's bytes are [S, S + len) of the server's numbering, S = the client's SYN + 1 —
 * always the same bytes at the same numbers, so sending them twice is a duplicate TCP discards,
 * never data. Where they go (lb/processor.ts proxyIn), chosen for what stays correct under loss:
 *   - the header is a segment of its own, never grown into the client's: a client segment of a
 *     full MSS plus the header would be larger than the path allows;
 *   - the client's handshake-completing ACK (seq S, no data) becomes that segment: the header is
 *     at the server as the connection is accepted, which protocols where the server speaks first
 *     (SMTP, MySQL…) need — DPVS, which waits for the client's first data, stalls them;
 *   - a client segment at S while the server has not acknowledged the header is a retransmission
 *     of the ACK or of the first data (the header may have been lost): the header goes again in
 *     front of it — except the first data right behind the ACK that carried the header, which
 *     would otherwise always send it twice;
 *   - once the server's ACK covers the header (PP_ACKED), every shift is a plain ±len with no
 *     comparison against S — so a flow may carry more than 2 GiB (sequence numbers wrap), and a
 *     node that adopts the flow from Redis goes on from the same word.
 * Before that, a server acknowledgement inside the header (it has part of it) is reported to the
 * client as S: the client never sent those bytes and must not see them acknowledged.
 *
 * Everything here writes into buffers the caller owns, at offsets: no allocation per packet.
 */
import * as L from '../conntrack/layout';
import * as P from './packet';

export const PP_NONE = 0;
export const PP_V1 = 1;
export const PP_V2 = 2;
export const PP_NAMES = ['none', 'v1', 'v2'] as const;
/** The longest header this module writes: a PROXY v1 TCP6 line with two 39-character addresses. */
export const PP_MAX_LEN = 104;

/** v2's 12-byte signature (proxy-protocol.txt §2.2): CR LF CR LF NUL CR LF "QUIT" LF. */
const V2_SIG = [0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a];
const V2_CMD_PROXY = 0x21; // version 2 (high nibble), command PROXY (low nibble)
const V2_TCP4 = 0x11; // AF_INET (high nibble), STREAM (low nibble)
const V2_TCP6 = 0x21; // AF_INET6, STREAM

const TCPOPT_EOL = 0;
const TCPOPT_NOP = 1;
const TCPOPT_SACK = 5;

/**
 * Writes the header for a TCP connection from a:ap to b:bp (client, then VIP) at dst[at] and
 * returns its length. `w` holds the two addresses as 4 words each (IPv4: words 3 and 7 only).
 * v1 is the text line `PROXY TCP4 <src> <dst> <sport> <dport>\r\n` (IPv6 in RFC 5952 form);
 * v2 the 16-byte binary header and the 12- or 36-byte address block (no TLVs).
 */
export function writeProxyHeader(dst: Uint8Array, at: number, version: number, v6: boolean, w: ArrayLike<number>, sport: number, dport: number): number {
  let o = at;
  if (version === PP_V2) {
    for (let i = 0; i < 12; i++) dst[o + i] = V2_SIG[i]!;
    dst[o + 12] = V2_CMD_PROXY;
    dst[o + 13] = v6 ? V2_TCP6 : V2_TCP4;
    P.put16(dst, o + 14, v6 ? 36 : 12);
    o += 16;
    if (v6) {
      for (let i = 0; i < 8; i++) P.put32(dst, o + 4 * i, w[i]!);
      o += 32;
    } else {
      P.put32(dst, o, w[3]!);
      P.put32(dst, o + 4, w[7]!);
      o += 8;
    }
    P.put16(dst, o, sport);
    P.put16(dst, o + 2, dport);
    return o + 4 - at;
  }
  o = ascii(dst, o, 'PROXY TCP');
  dst[o++] = v6 ? 0x36 : 0x34; // '6' / '4'
  dst[o++] = 0x20;
  o = v6 ? text6(dst, o, w, 0) : text4(dst, o, w[3]!);
  dst[o++] = 0x20;
  o = v6 ? text6(dst, o, w, 4) : text4(dst, o, w[7]!);
  dst[o++] = 0x20;
  o = decimal(dst, o, sport);
  dst[o++] = 0x20;
  o = decimal(dst, o, dport);
  dst[o++] = 0x0d;
  dst[o++] = 0x0a;
  return o - at;
}

/** A constant ASCII string: module-level literals only (no string is built per packet). */
function ascii(dst: Uint8Array, o: number, s: string): number {
  for (let i = 0; i < s.length; i++) dst[o + i] = s.charCodeAt(i);
  return o + s.length;
}

function decimal(dst: Uint8Array, o: number, v: number): number {
  if (v >= 10) o = decimal(dst, o, (v / 10) | 0);
  dst[o] = 0x30 + (v % 10);
  return o + 1;
}

function text4(dst: Uint8Array, o: number, a: number): number {
  for (let i = 3; i >= 0; i--) {
    o = decimal(dst, o, (a >>> (8 * i)) & 255);
    if (i !== 0) dst[o++] = 0x2e;
  }
  return o;
}

function hex(dst: Uint8Array, o: number, v: number): number {
  let started = false;
  for (let s = 12; s >= 0; s -= 4) {
    const n = (v >>> s) & 15;
    if (n === 0 && !started && s !== 0) continue;
    started = true;
    dst[o++] = n < 10 ? 0x30 + n : 0x57 + n; // lower case (RFC 5952 §4.3)
  }
  return o;
}

/**
 * RFC 5952 text of the IPv6 address w[k, k+4): lower-case groups without leading zeros, the
 * longest run of two or more zero groups (the first of equal ones) as "::".
 */
function text6(dst: Uint8Array, o: number, w: ArrayLike<number>, k: number): number {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (group(w, k, i) !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && group(w, k, j) === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  for (let i = 0; i < 8; i++) {
    if (i === best) {
      dst[o++] = 0x3a;
      dst[o++] = 0x3a;
      i += bestLen - 1;
      continue;
    }
    if (i !== 0 && i !== best + bestLen) dst[o++] = 0x3a;
    o = hex(dst, o, group(w, k, i));
  }
  return o;
}

function group(w: ArrayLike<number>, k: number, i: number): number {
  const x = w[k + (i >> 1)]!;
  return i & 1 ? x & 0xffff : (x >>> 16) & 0xffff;
}

/**
 * The client's sequence number at l4 moves `len` forward (client→server): the server's numbering.
 * A partial checksum holds only the pseudo-header sum, which has no sequence number in it.
 */
export function shiftSeq(b: Uint8Array, l4: number, len: number, partial: boolean): void {
  const seq = P.u32(b, l4 + P.TCP_SEQ);
  const to = (seq + len) | 0;
  P.put32(b, l4 + P.TCP_SEQ, to);
  if (!partial) P.fix32(b, l4 + P.TCP_CSUM, seq, to);
}

/**
 * A server sequence number as the client knows it: len back, or before the server has
 * acknowledged the header (acked false), S for a number inside the header [S, S + len) and the
 * number itself at or before S (the SYN-ACK's acknowledgement of S).
 */
export function toClientSeq(x: number, s: number, len: number, acked: boolean): number {
  if (acked) return (x - len) | 0;
  const d = (x - s) | 0;
  return d >= len ? (x - len) | 0 : d > 0 ? s : x;
}

/**
 * Server→client: the acknowledgement number (when ACK is set) and every SACK block edge back into
 * the client's numbering (toClientSeq), checksum updated incrementally unless partial. Options are
 * walked as the kernel's tcp_parse_options does: a malformed list stops the walk, never throws.
 */
export function unshiftAck(b: Uint8Array, l4: number, s: number, len: number, acked: boolean, partial: boolean): void {
  if (b[l4 + P.TCP_FLAGS]! & 0x10) fixSeqField(b, l4, l4 + P.TCP_ACK, s, len, acked, partial);
  const end = l4 + ((b[l4 + P.TCP_OFF]! >> 4) << 2);
  let o = l4 + P.TCP_MIN_HLEN;
  while (o < end) {
    const kind = b[o]!;
    if (kind === TCPOPT_EOL) return;
    if (kind === TCPOPT_NOP) {
      o++;
      continue;
    }
    if (o + 2 > end) return;
    const size = b[o + 1]!;
    if (size < 2 || o + size > end) return;
    if (kind === TCPOPT_SACK && (size - 2) % 8 === 0) {
      for (let e = o + 2; e < o + size; e += 4) fixSeqField(b, l4, e, s, len, acked, partial);
    }
    o += size;
  }
}

function fixSeqField(b: Uint8Array, l4: number, at: number, s: number, len: number, acked: boolean, partial: boolean): void {
  const x = P.u32(b, at);
  const to = toClientSeq(x, s, len, acked);
  if (to === x) return;
  P.put32(b, at, to);
  if (!partial) P.fix32(b, l4 + P.TCP_CSUM, x, to);
}

/** The header length an E_PP word records. */
export function ppLength(pp: number): number {
  return pp & L.PP_LEN_MASK;
}

/** The version an E_PP word records (PP_V1, PP_V2). */
export function ppVersion(pp: number): number {
  return (pp & L.PP_VER_MASK) >>> L.PP_VER_SHIFT;
}
