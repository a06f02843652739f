/** Test packet fixtures: build IPv4 TCP/UDP/ICMP/SCTP and IPv6 packets with correct checksums, and check them. */
import { formatIPv6, parseIPv4, parseIPv6 } from '../../net/addr';
import * as P from '../../net/packet';

export interface PacketSpec {
  src: string;
  dst: string;
  sport?: number;
  dport?: number;
  flags?: number;
  seq?: number;
  ack?: number;
  payload?: Uint8Array;
  ttl?: number;
  id?: number;
  frag?: number;
  udpNoChecksum?: boolean;
}

function ipHeader(b: Uint8Array, total: number, proto: number, s: PacketSpec): void {
  b[0] = 0x45;
  P.put16(b, P.IP_TOTLEN, total);
  P.put16(b, P.IP_ID, s.id ?? 0x1234);
  P.put16(b, P.IP_FRAG, s.frag ?? 0x4000);
  b[P.IP_TTL] = s.ttl ?? 64;
  b[P.IP_PROTO] = proto;
  P.put32(b, P.IP_SRC, parseIPv4(s.src)!);
  P.put32(b, P.IP_DST, parseIPv4(s.dst)!);
  P.put16(b, P.IP_CSUM, P.checksum(b, 0, 20, 0));
}

/** A 20-byte TCP header and the payload at b[t]; the checksum is the caller's (pseudo-header). */
function tcpSegment(b: Uint8Array, t: number, s: PacketSpec, payload: Uint8Array): void {
  P.put16(b, t + P.L4_SPORT, s.sport ?? 40000);
  P.put16(b, t + P.L4_DPORT, s.dport ?? 80);
  P.put32(b, t + P.TCP_SEQ, s.seq ?? 1000);
  P.put32(b, t + P.TCP_ACK, s.ack ?? 0);
  b[t + P.TCP_OFF] = 5 << 4;
  b[t + P.TCP_FLAGS] = s.flags ?? 0x02;
  P.put16(b, t + P.TCP_WIN, 65535);
  b.set(payload, t + 20);
}

export function tcp(s: PacketSpec): Uint8Array {
  const payload = s.payload ?? new Uint8Array(0);
  const b = new Uint8Array(40 + payload.length);
  ipHeader(b, b.length, P.IPPROTO_TCP, s);
  const t = 20;
  tcpSegment(b, t, s, payload);
  P.put16(
    b,
    t + P.TCP_CSUM,
    P.checksum(b, t, 20 + payload.length, P.pseudoSum(P.u32(b, P.IP_SRC), P.u32(b, P.IP_DST), P.IPPROTO_TCP, 20 + payload.length)),
  );
  return b;
}

export function udp(s: PacketSpec): Uint8Array {
  const payload = s.payload ?? new Uint8Array(0);
  const b = new Uint8Array(28 + payload.length);
  ipHeader(b, b.length, P.IPPROTO_UDP, s);
  const u = 20;
  P.put16(b, u + P.L4_SPORT, s.sport ?? 40000);
  P.put16(b, u + P.L4_DPORT, s.dport ?? 53);
  P.put16(b, u + P.UDP_LEN, 8 + payload.length);
  b.set(payload, 28);
  if (!s.udpNoChecksum) {
    const c = P.checksum(b, u, 8 + payload.length, P.pseudoSum(P.u32(b, P.IP_SRC), P.u32(b, P.IP_DST), P.IPPROTO_UDP, 8 + payload.length));
    P.put16(b, u + P.UDP_CSUM, c === 0 ? 0xffff : c);
  }
  return b;
}

export function icmpEcho(s: PacketSpec): Uint8Array {
  const payload = s.payload ?? new Uint8Array(8);
  const b = new Uint8Array(28 + payload.length);
  ipHeader(b, b.length, P.IPPROTO_ICMP, s);
  b[20] = P.ICMP_ECHO;
  P.put16(b, 24, 0x77);
  P.put16(b, 26, 1);
  b.set(payload, 28);
  P.put16(b, 22, P.checksum(b, 20, 8 + payload.length, 0));
  return b;
}

/**
 * CRC32c the slow way, bit by bit from the polynomial (RFC 9260 appendix A), independent of the
 * table-driven one in lb/sctp.ts, to check what the dataplane writes.
 */
export function crc32cBitwise(b: Uint8Array): number {
  let c = 0xffffffff;
  for (const x of b) {
    c ^= x;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}

export interface SctpChunk {
  type: number;
  flags?: number;
  value?: Uint8Array;
}

/** INIT / INIT ACK chunk parameters: initiate tag, a_rwnd, streams out/in, initial TSN. */
export function initValue(tag: number, extra: Uint8Array = new Uint8Array(0)): Uint8Array {
  const v = new Uint8Array(16 + extra.length);
  P.put32(v, 0, tag);
  P.put32(v, 4, 65536);
  P.put16(v, 8, 10);
  P.put16(v, 10, 10);
  P.put32(v, 12, 1);
  v.set(extra, 16);
  return v;
}

/** An SCTP packet: common header, the chunks (each padded to 4 bytes) and a valid CRC32c. */
export function sctp(s: PacketSpec & { vtag?: number; chunks: SctpChunk[] }): Uint8Array {
  const body = s.chunks.reduce((n, c) => n + ((4 + (c.value?.length ?? 0) + 3) & ~3), 0);
  const b = new Uint8Array(20 + 12 + body);
  ipHeader(b, b.length, P.IPPROTO_SCTP, s);
  const h = 20;
  P.put16(b, h, s.sport ?? 40000);
  P.put16(b, h + 2, s.dport ?? 3868);
  P.put32(b, h + 4, s.vtag ?? 0);
  let o = h + 12;
  for (const c of s.chunks) {
    const v = c.value ?? new Uint8Array(0);
    b[o] = c.type;
    b[o + 1] = c.flags ?? 0;
    P.put16(b, o + 2, 4 + v.length);
    b.set(v, o + 4);
    o += (4 + v.length + 3) & ~3;
  }
  const crc = crc32cBitwise(b.subarray(h));
  b[h + 8] = crc & 255;
  b[h + 9] = (crc >>> 8) & 255;
  b[h + 10] = (crc >>> 16) & 255;
  b[h + 11] = crc >>> 24;
  return b;
}

/** True when the CRC32c of the SCTP packet at b[ihl, total) matches its checksum field. */
function sctpCrcValid(b: Uint8Array, ihl: number, total: number): boolean {
  const x = b.slice(ihl, total);
  const stored = (x[8]! | (x[9]! << 8) | (x[10]! << 16) | (x[11]! << 24)) >>> 0;
  x.fill(0, 8, 12);
  return crc32cBitwise(x) === stored;
}

/** True when the IP header and the TCP/UDP/ICMP checksums (SCTP: CRC32c) of a packet are all valid. */
/**
 * The IPv4 packet b (20-byte header) with 4 bytes of IP options (NOPs) after its header: IHL 6,
 * total length and header checksum made again; what follows the header is unchanged.
 */
export function withIpOptions(b: Uint8Array): Uint8Array {
  const o = new Uint8Array(b.length + 4);
  o.set(b.subarray(0, 20));
  o.set([1, 1, 1, 1], 20);
  o.set(b.subarray(20), 24);
  o[0] = 0x46;
  P.put16(o, P.IP_TOTLEN, o.length);
  P.put16(o, P.IP_CSUM, 0);
  P.put16(o, P.IP_CSUM, P.checksum(o, 0, 24, 0));
  return o;
}

export function checksumsValid(b: Uint8Array): boolean {
  const ihl = (b[0]! & 15) * 4;
  const total = P.u16(b, P.IP_TOTLEN);
  if (P.sum16(b, 0, ihl, 0) !== 0xffff) return false;
  const proto = b[P.IP_PROTO]!;
  const l4len = total - ihl;
  if (proto === P.IPPROTO_SCTP) return sctpCrcValid(b, ihl, total);
  if (proto === P.IPPROTO_ICMP) return P.sum16(b, ihl, l4len, 0) === 0xffff;
  if (proto === P.IPPROTO_UDP && P.u16(b, ihl + P.UDP_CSUM) === 0) return true;
  const ps = P.pseudoSum(P.u32(b, P.IP_SRC), P.u32(b, P.IP_DST), proto, l4len);
  return P.sum16(b, ihl, l4len, ps) === 0xffff;
}

export function field(b: Uint8Array) {
  const ihl = (b[0]! & 15) * 4;
  const fmt = (a: number) => `${(a >>> 24) & 255}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`;
  return {
    src: fmt(P.u32(b, P.IP_SRC)),
    dst: fmt(P.u32(b, P.IP_DST)),
    proto: b[P.IP_PROTO]!,
    sport: P.u16(b, ihl),
    dport: P.u16(b, ihl + 2),
    flags: b[ihl + P.TCP_FLAGS]!,
    seq: P.u32(b, ihl + P.TCP_SEQ) >>> 0,
    ack: P.u32(b, ihl + P.TCP_ACK) >>> 0,
    icmpType: b[ihl]!,
    icmpCode: b[ihl + 1]!,
  };
}

// ── IPv6 ────────────────────────────────────────────────────────────────────────────────────

function ip6Header(b: Uint8Array, plen: number, next: number, s: PacketSpec): void {
  P.put32(b, 0, 0x60000000);
  P.put16(b, P.IP6_PLEN, plen);
  b[P.IP6_NEXT] = next;
  b[P.IP6_HOPS] = s.ttl ?? 64;
  const src = parseIPv6(s.src)!;
  const dst = parseIPv6(s.dst)!;
  for (let i = 0; i < 4; i++) {
    P.put32(b, P.IP6_SRC + 4 * i, src[i]!);
    P.put32(b, P.IP6_DST + 4 * i, dst[i]!);
  }
}

export function tcp6(s: PacketSpec): Uint8Array {
  const payload = s.payload ?? new Uint8Array(0);
  const b = new Uint8Array(60 + payload.length);
  ip6Header(b, 20 + payload.length, P.IPPROTO_TCP, s);
  const t = 40;
  tcpSegment(b, t, s, payload);
  P.put16(
    b,
    t + P.TCP_CSUM,
    P.checksum(b, t, 20 + payload.length, P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, P.IPPROTO_TCP, 20 + payload.length)),
  );
  return b;
}

export function udp6(s: PacketSpec): Uint8Array {
  const payload = s.payload ?? new Uint8Array(0);
  const b = new Uint8Array(48 + payload.length);
  ip6Header(b, 8 + payload.length, P.IPPROTO_UDP, s);
  const u = 40;
  P.put16(b, u + P.L4_SPORT, s.sport ?? 40000);
  P.put16(b, u + P.L4_DPORT, s.dport ?? 53);
  P.put16(b, u + P.UDP_LEN, 8 + payload.length);
  b.set(payload, 48);
  const c = P.checksum(b, u, 8 + payload.length, P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, P.IPPROTO_UDP, 8 + payload.length));
  P.put16(b, u + P.UDP_CSUM, c === 0 ? 0xffff : c);
  return b;
}

export function icmp6(s: PacketSpec & { type: number; code?: number; info?: number }): Uint8Array {
  const payload = s.payload ?? new Uint8Array(8);
  const b = new Uint8Array(48 + payload.length);
  ip6Header(b, 8 + payload.length, P.IPPROTO_ICMPV6, s);
  b[40] = s.type;
  b[41] = s.code ?? 0;
  P.put32(b, 44, s.info ?? 0);
  b.set(payload, 48);
  P.put16(b, 42, P.checksum(b, 40, 8 + payload.length, P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, P.IPPROTO_ICMPV6, 8 + payload.length)));
  return b;
}

/** The L4 (TCP/UDP/ICMPv6) checksum of an IPv6 packet without extension headers is valid. */
export function checksumsValid6(b: Uint8Array): boolean {
  const l4len = P.u16(b, P.IP6_PLEN);
  return P.sum16(b, 40, l4len, P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, b[P.IP6_NEXT]!, l4len)) === 0xffff;
}

export function field6(b: Uint8Array, at = 0) {
  const w = (o: number) => formatIPv6([P.u32(b, o), P.u32(b, o + 4), P.u32(b, o + 8), P.u32(b, o + 12)]);
  return {
    src: w(at + P.IP6_SRC),
    dst: w(at + P.IP6_DST),
    next: b[at + P.IP6_NEXT]!,
    sport: P.u16(b, at + 40),
    dport: P.u16(b, at + 42),
    flags: b[at + 40 + P.TCP_FLAGS]!,
    icmpType: b[at + 40]!,
    icmpCode: b[at + 41]!,
  };
}

/** An SCTP packet over IPv6 (CRC32c covers no addresses: the same body as over IPv4). */
export function sctp6(s: PacketSpec & { vtag?: number; chunks: SctpChunk[] }): Uint8Array {
  const v4 = sctp({ ...s, src: '0.0.0.0', dst: '0.0.0.0' });
  const body = v4.subarray(20);
  const b = new Uint8Array(40 + body.length);
  ip6Header(b, body.length, P.IPPROTO_SCTP, s);
  b.set(body, 40);
  return b;
}

/** The CRC32c of an SCTP-over-IPv6 packet (no extension headers) matches. */
export function sctp6CrcValid(b: Uint8Array): boolean {
  return sctpCrcValid(b, 40, 40 + P.u16(b, P.IP6_PLEN));
}

// ── device offloads ──────────────────────────────────────────────────────────────────────────
/**
 * Frames a packet (IPv4, or IPv6 without extension headers) as a TUN queue with offloads hands
 * it over with CHECKSUM_PARTIAL: virtio header first, the TCP/UDP checksum field holding the
 * pseudo-header sum; with gsoSize, as a TCP GSO super-packet.
 */
export function partial(pkt: Uint8Array, gsoSize = 0): Uint8Array {
  const V = P.VNET_HLEN;
  const b = new Uint8Array(V + pkt.length);
  b.set(pkt, V);
  const v6 = pkt[0]! >> 4 === 6;
  const hl = v6 ? 40 : (pkt[0]! & 15) << 2;
  const proto = v6 ? pkt[P.IP6_NEXT]! : pkt[P.IP_PROTO]!;
  const l4len = v6 ? P.u16(pkt, P.IP6_PLEN) : P.u16(pkt, P.IP_TOTLEN) - hl;
  const fieldOff = proto === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM;
  const ps = v6
    ? P.pseudoSum6(pkt, P.IP6_SRC, P.IP6_DST, proto, l4len)
    : P.pseudoSum(P.u32(pkt, P.IP_SRC), P.u32(pkt, P.IP_DST), proto, l4len);
  P.put16(b, V + hl + fieldOff, P.fold16(ps));
  b[P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
  P.putLe16(b, P.VNET_CSUM_START, hl);
  P.putLe16(b, P.VNET_CSUM_OFFSET, fieldOff);
  if (gsoSize > 0) {
    b[P.VNET_GSO_TYPE] = v6 ? P.VNET_GSO_TCPV6 : P.VNET_GSO_TCPV4;
    P.putLe16(b, P.VNET_GSO_SIZE, gsoSize);
    P.putLe16(b, P.VNET_HDR_LEN, hl + 20);
  }
  return b;
}

/** What the device does with a NEEDS_CSUM packet on the way out: finish the checksum. */
export function complete(framed: Uint8Array, at = 0): Uint8Array {
  const pkt = framed.slice(at + P.VNET_HLEN);
  if (framed[at + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM) {
    const start = P.le16(framed, at + P.VNET_CSUM_START);
    const off = P.le16(framed, at + P.VNET_CSUM_OFFSET);
    const total = pkt[0]! >> 4 === 6 ? 40 + P.u16(pkt, P.IP6_PLEN) : P.u16(pkt, P.IP_TOTLEN);
    P.completeChecksum(pkt, start, total, start + off, false);
  }
  return pkt;
}
