/**
 * The PROXY protocol header (HAProxy's proxy-protocol.txt, versions 1 and 2): the wire format of
 * the header uvs puts in front of a full-NAT TCP flow's bytes towards a real server, naming the
 * client's address and port and the VIP's. lb/proxy-protocol.ts inserts it into the stream and
 * shifts the flow's sequence numbers; conntrack/redis-record.ts rebuilds it to check a record's
 * length. Writes into buffers the caller owns, at offsets: no allocation per packet.
 */
import { put16, put32 } from './packet';

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

/**
 * Writes the header for a TCP connection from a:ap to b:bp (client, then VIP) at dst[at] and
 * returns its length. `w` holds the two addresses as 4 words each (IPv4: words 3 and 7 only).
 * v1 is the text line `PROXY TCP4 <src> <dst> <sport> <dport>\r\n` (IPv6 in RFC 5952 form);
 * v2 the 16-byte binary header and the 12- or 36-byte address block (no TLVs).
 */
export function writeProxyHeader(
  dst: Uint8Array,
  at: number,
  version: number,
  v6: boolean,
  w: ArrayLike<number>,
  sport: number,
  dport: number,
): number {
  let o = at;
  if (version === PP_V2) {
    for (let i = 0; i < 12; i++) dst[o + i] = V2_SIG[i]!;
    dst[o + 12] = V2_CMD_PROXY;
    dst[o + 13] = v6 ? V2_TCP6 : V2_TCP4;
    put16(dst, o + 14, v6 ? 36 : 12);
    o += 16;
    if (v6) {
      for (let i = 0; i < 8; i++) put32(dst, o + 4 * i, w[i]!);
      o += 32;
    } else {
      put32(dst, o, w[3]!);
      put32(dst, o + 4, w[7]!);
      o += 8;
    }
    put16(dst, o, sport);
    put16(dst, o + 2, dport);
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
