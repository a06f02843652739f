/**
 * The tunnel forwarding method (ipvsadm -i; ip_vs_xmit.c ip_vs_tunnel_xmit and its IPv6 twin):
 * the client's packet, VIP and ports unchanged, inside an outer IPv4 (IPIP) or IPv6 (ip6ip6)
 * header from dataplane.tunnelSource(6) to the real server, built in the caller's output region.
 * The outer IPv4 header leaves DF clear (unless the route's MTU is known: then the inner packet's
 * DF, after the path-MTU check), so a full-size inner packet is fragmented on the way rather
 * than dropped. A partial inner checksum stays partial (its start moves by the outer header); a
 * GSO super-packet cannot be described to the device once encapsulated (virtio has no IPIP GSO
 * type), so it is cut into its segments here, each with a partial checksum the device completes.
 */
import { Drop } from '../conntrack/layout';
import { TCPF_CWR, TCPF_FIN, TCPF_PSH } from '../conntrack/state';
import * as P from '../net/packet';
import { copyOut, drop, nextIpId, type PacketContext, reply } from './context';
import { plainVnet } from './offload';
import { MAX_OUT, REPLY } from './verdict';

/**
 * Encapsulates the current packet to real server `raddr` (IPv6: its high words at hi[6..8]).
 * copyDf: the outer IPv4 header takes the inner one's DF (the path MTU is known and was checked).
 */
export function encapsulate(c: PacketContext, b: Uint8Array, hi: Int32Array, raddr: number, copyDf: boolean): number {
  const v6 = c.v6;
  const off = c.off;
  const totlen = c.totlen;
  const t6 = c.snapshot.tunnelSrc6;
  if (v6 ? (t6[0]! | t6[1]! | t6[2]! | t6[3]!) === 0 : c.snapshot.tunnelSrc === 0) return drop(c, Drop.NoTunnelSource);
  const df = copyDf && !v6 ? P.u16(b, off + P.IP_FRAG) & P.IP_DF : 0;
  if (c.gsoSize !== 0) return encapsulateSegments(c, b, hi, raddr, df);
  const o = c.out.off;
  const ohl = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
  const len = totlen + ohl;
  if ((v6 ? totlen : len) > 65535 || o + len > c.out.end) return drop(c, Drop.OutputFull);
  if (v6) outerHeader6(c, o, totlen, hi, raddr);
  else outerHeader(c, o, len, b[off + 1]!, raddr, df);
  if (c.vnet !== 0) {
    plainVnet(c, o);
    if (c.partial) {
      const h = off - P.VNET_HLEN;
      const x = c.out.buf;
      x[o - P.VNET_HLEN + P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
      P.putLe16(x, o - P.VNET_HLEN + P.VNET_CSUM_START, P.le16(b, h + P.VNET_CSUM_START) + ohl);
      P.putLe16(x, o - P.VNET_HLEN + P.VNET_CSUM_OFFSET, P.le16(b, h + P.VNET_CSUM_OFFSET));
    }
  }
  copyOut(c, b, off, o + ohl, totlen);
  return reply(c, len);
}

/**
 * A TCP GSO super-packet for the tunnel: the device's own segmentation (tcp_gso_segment) done
 * here — per segment the inner IP length, ID and checksum, the TCP sequence number, FIN and PSH
 * on the last segment only, CWR on the first only — each in its own outer header. More segments
 * than MAX_OUT, or more bytes than the region holds, are dropped (output_full).
 */
function encapsulateSegments(c: PacketContext, b: Uint8Array, hi: Int32Array, raddr: number, df: number): number {
  const g = c.gsoSize;
  const v6 = c.v6;
  const off = c.off;
  // The inner network header (IPv6: up to the TCP header, csum_start) and the outer one.
  const ihl = v6 ? P.le16(b, off - P.VNET_HLEN + P.VNET_CSUM_START) : (b[off]! & 15) << 2;
  const ohl = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
  const l4 = off + ihl;
  const hl = ihl + ((b[l4 + P.TCP_OFF]! >> 4) << 2);
  const payload = c.totlen - hl;
  const n = payload <= 0 ? 1 : Math.ceil(payload / g);
  const V = c.vnet;
  const per = V + ohl + hl + g;
  const out = c.out;
  let o = out.off;
  if (n > MAX_OUT || o - V + n * per > out.end) return drop(c, Drop.OutputFull);
  const x = out.buf;
  const seq0 = P.u32(b, l4 + P.TCP_SEQ);
  const id0 = v6 ? 0 : P.u16(b, off + P.IP_ID);
  const flags = b[l4 + P.TCP_FLAGS]!;
  const isrc = v6 ? 0 : P.u32(b, off + P.IP_SRC);
  const idst = v6 ? 0 : P.u32(b, off + P.IP_DST);
  const tos = b[off + 1]!;
  for (let k = 0; k < n; k++) {
    const plen = k === n - 1 ? payload - k * g : g;
    const ilen = hl + (plen > 0 ? plen : 0);
    if (v6) outerHeader6(c, o, ilen, hi, raddr);
    else outerHeader(c, o, ilen + P.IP_MIN_HLEN, tos, raddr, df);
    const h = o - V;
    for (let i = h; i < o; i++) x[i] = 0;
    x[h + P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
    P.putLe16(x, h + P.VNET_CSUM_START, ohl + ihl);
    P.putLe16(x, h + P.VNET_CSUM_OFFSET, P.TCP_CSUM);
    const io = o + ohl;
    copyOut(c, b, off, io, hl);
    if (plen > 0) copyOut(c, b, off + hl + k * g, io + hl, plen);
    if (v6) {
      P.put16(x, io + P.IP6_PLEN, ilen - P.IP6_HLEN);
    } else {
      P.put16(x, io + P.IP_TOTLEN, ilen);
      P.put16(x, io + P.IP_ID, (id0 + k) & 0xffff);
      P.put16(x, io + P.IP_CSUM, 0);
      P.put16(x, io + P.IP_CSUM, P.checksum(x, io, ihl, 0));
    }
    const t = io + ihl;
    P.put32(x, t + P.TCP_SEQ, (seq0 + k * g) | 0);
    let f = flags;
    if (k !== n - 1) f &= ~(TCPF_FIN | TCPF_PSH);
    if (k !== 0) f &= ~TCPF_CWR;
    x[t + P.TCP_FLAGS] = f;
    // Partial: the pseudo-header sum for this segment's length.
    const ps = v6
      ? P.pseudoSum6(x, io + P.IP6_SRC, io + P.IP6_DST, P.IPPROTO_TCP, ilen - ihl)
      : P.pseudoSum(isrc, idst, P.IPPROTO_TCP, ilen - ihl);
    P.put16(x, t + P.TCP_CSUM, P.fold16(ps));
    out.offs[k] = h;
    out.lens[k] = V + ohl + ilen;
    o += per;
  }
  out.count = n;
  return REPLY;
}

/** The outer IPIP header at out.buf[o]: tunnelSource → raddr, DF as given (the inner's, or clear). */
function outerHeader(c: PacketContext, o: number, len: number, tos: number, raddr: number, df: number): void {
  const x = c.out.buf;
  x[o] = 0x45;
  x[o + 1] = tos; // TOS of the inner packet
  P.put16(x, o + P.IP_TOTLEN, len);
  P.put16(x, o + P.IP_ID, nextIpId(c));
  P.put16(x, o + P.IP_FRAG, df);
  x[o + P.IP_TTL] = 64;
  x[o + P.IP_PROTO] = 4; // IPPROTO_IPIP
  P.put16(x, o + P.IP_CSUM, 0);
  P.put32(x, o + P.IP_SRC, c.snapshot.tunnelSrc);
  P.put32(x, o + P.IP_DST, raddr);
  P.put16(x, o + P.IP_CSUM, P.checksum(x, o, P.IP_MIN_HLEN, 0));
}

/** The outer ip6ip6 header at out.buf[o]: tunnelSource6 → the real server (hi[6..8] + lo). */
function outerHeader6(c: PacketContext, o: number, plen: number, hi: Int32Array, lo: number): void {
  const x = c.out.buf;
  P.put32(x, o, 0x60000000);
  P.put16(x, o + P.IP6_PLEN, plen);
  x[o + P.IP6_NEXT] = P.IPPROTO_IPV6;
  x[o + P.IP6_HOPS] = 64;
  const src = c.snapshot.tunnelSrc6;
  for (let i = 0; i < 4; i++) P.put32(x, o + P.IP6_SRC + 4 * i, src[i]!);
  for (let i = 0; i < 3; i++) P.put32(x, o + P.IP6_DST + 4 * i, hi[6 + i]!);
  P.put32(x, o + P.IP6_DST + 12, lo);
}
