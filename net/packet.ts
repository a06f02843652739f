/**
 * IPv4/IPv6/TCP/UDP/ICMP field offsets, IP protocol numbers and in-place accessors on a
 * Uint8Array, plus RFC 1071 checksums, RFC 1624 incremental updates and the virtio_net_hdr of
 * a TUN queue: the packet path (lb/), the connection table and Redis sync (conntrack/) and the
 * tools read packets with these. Addresses are signed 32-bit integers (see addr.ts). Nothing
 * here allocates.
 */

export const IPPROTO_ICMP = 1;
export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;
export const IPPROTO_SCTP = 132; // header, chunks and CRC32c: lb/sctp.ts

// IPv4 header offsets.
export const IP_VHL = 0;
export const IP_TOTLEN = 2;
export const IP_ID = 4;
export const IP_FRAG = 6;
export const IP_TTL = 8;
export const IP_PROTO = 9;
export const IP_CSUM = 10;
export const IP_SRC = 12;
export const IP_DST = 16;
export const IP_MIN_HLEN = 20;
export const IP_FRAG_MASK = 0x3fff; // MF flag + fragment offset: any of these = a fragment

// TCP/UDP offsets (from the L4 header).
export const L4_SPORT = 0;
export const L4_DPORT = 2;
export const TCP_SEQ = 4;
export const TCP_ACK = 8;
export const TCP_OFF = 12;
export const TCP_FLAGS = 13;
export const TCP_WIN = 14;
export const TCP_CSUM = 16;
export const TCP_MIN_HLEN = 20;
export const UDP_LEN = 4;
export const UDP_CSUM = 6;
export const UDP_HLEN = 8;

// ICMP.
export const ICMP_TYPE = 0;
export const ICMP_CODE = 1;
export const ICMP_CSUM = 2;
export const ICMP_HLEN = 8;
export const ICMP_ECHOREPLY = 0;
export const ICMP_DEST_UNREACH = 3;
export const ICMP_SOURCE_QUENCH = 4;
export const ICMP_ECHO = 8;
export const ICMP_TIME_EXCEEDED = 11;
export const ICMP_PORT_UNREACH = 3;
export const ICMP_FRAG_NEEDED = 4;
export const IP_DF = 0x4000;

export function u16(b: Uint8Array, o: number): number {
  return (b[o]! << 8) | b[o + 1]!;
}
export function put16(b: Uint8Array, o: number, v: number): void {
  b[o] = (v >>> 8) & 255;
  b[o + 1] = v & 255;
}
export function u32(b: Uint8Array, o: number): number {
  return (b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!;
}
export function put32(b: Uint8Array, o: number, v: number): void {
  b[o] = (v >>> 24) & 255;
  b[o + 1] = (v >>> 16) & 255;
  b[o + 2] = (v >>> 8) & 255;
  b[o + 3] = v & 255;
}

/** One's-complement sum of b[o, o+len) folded to 16 bits, plus `initial`. */
export function sum16(b: Uint8Array, o: number, len: number, initial: number): number {
  let s = initial;
  const end = o + (len & ~1);
  for (let i = o; i < end; i += 2) s += (b[i]! << 8) | b[i + 1]!;
  if (len & 1) s += b[o + len - 1]! << 8;
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** Folds a one's-complement sum to 16 bits. */
export function fold16(v: number): number {
  let s = v;
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** RFC 1071 checksum of a region (the value to store in the checksum field). */
export function checksum(b: Uint8Array, o: number, len: number, initial: number): number {
  return ~sum16(b, o, len, initial) & 0xffff;
}

/** Pseudo-header sum for TCP/UDP over IPv4. */
export function pseudoSum(src: number, dst: number, proto: number, l4len: number): number {
  return (src >>> 16) + (src & 0xffff) + (dst >>> 16) + (dst & 0xffff) + proto + l4len;
}

/** RFC 1624 eqn. 3: checksum field value after a 16-bit word changes from `from` to `to`. */
export function csumReplace16(csum: number, from: number, to: number): number {
  let s = (~csum & 0xffff) + (~from & 0xffff) + to;
  s = (s & 0xffff) + (s >>> 16);
  s = (s & 0xffff) + (s >>> 16);
  return ~s & 0xffff;
}

/** The same for a 32-bit value (an address): two 16-bit words. */
export function csumReplace32(csum: number, from: number, to: number): number {
  let s = (~csum & 0xffff) + (~(from >>> 16) & 0xffff) + (~from & 0xffff) + (to >>> 16) + (to & 0xffff);
  s = (s & 0xffff) + (s >>> 16);
  s = (s & 0xffff) + (s >>> 16);
  return ~s & 0xffff;
}

/** Updates the checksum field at `o` in place for a 32-bit change. */
export function fix32(b: Uint8Array, o: number, from: number, to: number): void {
  put16(b, o, csumReplace32(u16(b, o), from, to));
}
/** Updates the checksum field at `o` in place for a 16-bit change. */
export function fix16(b: Uint8Array, o: number, from: number, to: number): void {
  put16(b, o, csumReplace16(u16(b, o), from, to));
}

// virtio_net_hdr (linux/virtio_net.h), the 10 bytes before every packet on a TUN queue opened
// with IFF_VNET_HDR. Little-endian 16-bit fields (TUN's default on little-endian hosts).
export const VNET_HLEN = 10;
export const VNET_FLAGS = 0;
export const VNET_GSO_TYPE = 1;
export const VNET_HDR_LEN = 2;
export const VNET_GSO_SIZE = 4;
export const VNET_CSUM_START = 6;
export const VNET_CSUM_OFFSET = 8;
export const VNET_F_NEEDS_CSUM = 1;
export const VNET_GSO_NONE = 0;
export const VNET_GSO_TCPV4 = 1;
export const VNET_GSO_ECN = 0x80;

export function le16(b: Uint8Array, o: number): number {
  return b[o]! | (b[o + 1]! << 8);
}
export function putLe16(b: Uint8Array, o: number, v: number): void {
  b[o] = v & 255;
  b[o + 1] = (v >>> 8) & 255;
}

/**
 * A partial checksum field (CHECKSUM_PARTIAL: virtio NEEDS_CSUM) holds the folded pseudo-header
 * sum itself, not its complement, and the device completes it over the L4 bytes. An address
 * change adjusts that sum; a port change leaves it alone (ports are not in the pseudo-header).
 * This is the kernel's inet_proto_csum_replace4(…, pseudohdr=true) for CHECKSUM_PARTIAL.
 */
export function fixPartial32(b: Uint8Array, o: number, from: number, to: number): void {
  put16(b, o, ~csumReplace32(~u16(b, o) & 0xffff, from, to) & 0xffff);
}

/**
 * Completes a partial checksum in software (skb_checksum_help): the field at start+offset holds
 * the pseudo-header sum, so the checksum of [start, end) including it is the final value. UDP's
 * computed 0 goes out as 0xffff.
 */
export function completeChecksum(b: Uint8Array, start: number, end: number, field: number, udp: boolean): void {
  const c = checksum(b, start, end - start, 0);
  put16(b, field, udp && c === 0 ? 0xffff : c);
}

// ── IPv6 ────────────────────────────────────────────────────────────────────────────────────
export const IP6_HLEN = 40;
export const IP6_PLEN = 4; // payload length
export const IP6_NEXT = 6;
export const IP6_HOPS = 7;
export const IP6_SRC = 8;
export const IP6_DST = 24;
export const IPPROTO_HOPOPTS = 0;
export const IPPROTO_ROUTING = 43;
export const IPPROTO_FRAGMENT = 44;
export const IPPROTO_DSTOPTS = 60;
export const IPPROTO_IPV6 = 41; // ip6ip6 tunnel

/**
 * Steps over an IPv6 packet's hop-by-hop, routing and destination-options headers (at most 8,
 * each whole within `end`): `(l4 - off) << 8 | next`, the upper-layer header's offset from the
 * packet's start and its protocol (a fragment header ends the walk like any other); −1 when the
 * chain is longer or cut. The caller checks that l4 itself is within `end`.
 */
export function ip6Upper(b: Uint8Array, off: number, end: number): number {
  let next = b[off + IP6_NEXT]!;
  let l4 = off + IP6_HLEN;
  for (let i = 0; next === IPPROTO_HOPOPTS || next === IPPROTO_ROUTING || next === IPPROTO_DSTOPTS; i++) {
    if (i === 8 || l4 + 8 > end) return -1;
    next = b[l4]!;
    l4 += (b[l4 + 1]! + 1) << 3;
  }
  return ((l4 - off) << 8) | next;
}
export const IPPROTO_ICMPV6 = 58;
export const ICMP6_DST_UNREACH = 1;
export const ICMP6_PACKET_TOO_BIG = 2;
export const ICMP6_TIME_EXCEEDED = 3;
export const ICMP6_PARAM_PROB = 4;
export const ICMP6_PORT_UNREACH = 4; // code of ICMP6_DST_UNREACH
export const ICMP6_ECHO_REQUEST = 128;
export const ICMP6_ECHO_REPLY = 129;
export const IPV6_MIN_MTU = 1280;
export const VNET_GSO_TCPV6 = 4;

/** Pseudo-header sum for TCP/UDP/ICMPv6 over IPv6 (RFC 8200 §8.1), addresses read from b. */
export function pseudoSum6(b: Uint8Array, src: number, dst: number, next: number, l4len: number): number {
  let s = next + (l4len >>> 16) + (l4len & 0xffff);
  for (let i = 0; i < 16; i += 2) s += ((b[src + i]! << 8) | b[src + i + 1]!) + ((b[dst + i]! << 8) | b[dst + i + 1]!);
  return s;
}
