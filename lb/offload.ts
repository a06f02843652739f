/**
 * Device offloads (dataplane.offload): every packet on the queue has a virtio_net_hdr before its
 * IP header (net/packet.ts VNET_*). A packet may arrive with its TCP/UDP checksum left partial
 * (NEEDS_CSUM: the field holds the pseudo-header sum, the device completes it on the way out) and
 * TCP as a GSO super-packet of up to 64 KB the device segments on the way out. The path keeps
 * both as they came through a rewrite (./xmit.ts adjusts the partial sum), writes the header back
 * unchanged with a FORWARD, and gives every packet it generates a plain header.
 */
import * as P from '../net/packet';
import type { PacketContext } from './context';

/**
 * Reads the virtio header of a packet that carries offload metadata (c.off, c.totlen; `ihl` the
 * bytes before the L4 header). A partial checksum must point at the TCP/UDP checksum field
 * (anything else — ICMP, odd offsets — is completed here in software and the flag cleared); GSO
 * must be TCP of the packet's family with a partial TCP checksum. Sets c.partial and c.gsoSize;
 * false = drop (bad_offload).
 */
export function offloadMeta(c: PacketContext, b: Uint8Array, ihl: number, proto: number): boolean {
  const off = c.off;
  const h = off - P.VNET_HLEN;
  const gsoType = b[h + P.VNET_GSO_TYPE]! & ~P.VNET_GSO_ECN;
  const needs = (b[h + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM) !== 0;
  const start = P.le16(b, h + P.VNET_CSUM_START);
  const field = P.le16(b, h + P.VNET_CSUM_OFFSET);
  const expected = proto === P.IPPROTO_TCP ? P.TCP_CSUM : proto === P.IPPROTO_UDP ? P.UDP_CSUM : -1;
  if (gsoType !== P.VNET_GSO_NONE) {
    const size = P.le16(b, h + P.VNET_GSO_SIZE);
    if (
      gsoType !== (c.v6 ? P.VNET_GSO_TCPV6 : P.VNET_GSO_TCPV4) ||
      proto !== P.IPPROTO_TCP ||
      !needs ||
      start !== ihl ||
      field !== expected ||
      size === 0
    )
      return false;
    c.gsoSize = size;
    c.partial = true;
    return true;
  }
  if (!needs) return true;
  if (proto === P.IPPROTO_SCTP) return false; // a partial CRC32c is no Internet checksum (and TUN never leaves one: sctp.ts)
  if (start === ihl && field === expected) {
    c.partial = true;
    return true;
  }
  if (start + field + 2 > c.totlen || start < ihl) return false;
  P.completeChecksum(b, off + start, off + c.totlen, off + start + field, proto === P.IPPROTO_UDP);
  b[h + P.VNET_FLAGS] = b[h + P.VNET_FLAGS]! & ~P.VNET_F_NEEDS_CSUM;
  return true;
}

/** Finishes the current packet's partial checksum in software and clears its flag (a parked packet is replayed without offload metadata). */
export function completePartial(c: PacketContext, b: Uint8Array): void {
  const off = c.off;
  const h = off - P.VNET_HLEN;
  const start = P.le16(b, h + P.VNET_CSUM_START);
  const field = P.le16(b, h + P.VNET_CSUM_OFFSET);
  P.completeChecksum(b, off + start, off + c.totlen, off + start + field, field === P.UDP_CSUM);
  b[h + P.VNET_FLAGS] = b[h + P.VNET_FLAGS]! & ~P.VNET_F_NEEDS_CSUM;
  c.partial = false;
}

/** Writes the virtio header of a generated packet whose IP header is at out.buf[o]: no offload. */
export function plainVnet(c: PacketContext, o: number): void {
  if (c.vnet === 0) return;
  const x = c.out.buf;
  for (let i = o - P.VNET_HLEN; i < o; i++) x[i] = 0;
}
