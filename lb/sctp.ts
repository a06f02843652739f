/**
 * SCTP (IP protocol 132) on the packet path: the common header, the chunk list, the CRC32c.
 *
 *   common header (RFC 9260 §3.1): sport 0, dport 2 (as TCP/UDP), verification tag 4,
 *   checksum 8 (CRC32c, RFC 9260 appendix A / RFC 3309), then chunks: type 0, flags 1,
 *   length 2 (header included, padding excluded), each padded to 4 bytes.
 *
 * The CRC32c covers the SCTP packet only — no pseudo-header — so a NAT rewrite of addresses leaves
 * it alone and one of ports invalidates it. It is no ones'-complement sum: there is no RFC 1624
 * shortcut, and the rewrite recomputes it over the whole packet, as the kernel's
 * sctp_dnat_handler/sctp_snat_handler do (ip_vs_proto_sctp.c). It arrives complete: a TUN device
 * has no NETIF_F_SCTP_CRC, so the kernel finishes a locally generated CRC before handing the
 * packet over, and virtio has no SCTP offload to leave it partial in.
 *
 * Unlike the kernel, uvs checks the CRC of every SCTP packet before it rewrites it: recomputing
 * over a packet damaged on the way in would make the damage look valid to the receiver, whose
 * CRC32c is SCTP's only end-to-end check. A packet that fails is dropped (bad_checksum), as the
 * receiver would drop it.
 *
 * Table-driven, slicing by 8 (eight 256-entry tables, 8 KiB, built once at load); nothing here
 * allocates per packet.
 */
import { SCTP_CID_ABORT, SCTP_CID_COOKIE_ACK, SCTP_CID_COOKIE_ECHO, SCTP_EV_ABORT, sctpChunkEvent } from '../conntrack/sctp-state';

export const SCTP_HLEN = 12;
export const SCTP_VTAG = 4;
export const SCTP_CSUM = 8;
export const CHUNK_HLEN = 4;
export const CHUNK_TYPE = 0;
export const CHUNK_FLAGS = 1;
export const CHUNK_LEN = 2;

/** sctpInspect verdicts below 0. */
export const SCTP_MALFORMED = -1;
export const SCTP_BAD_CRC = -2;

/** CRC32c (Castagnoli), reflected: polynomial 0x1EDC6F41 bit-reversed. */
const POLY = 0x82f63b78;

/** T[k * 256 + n]: the CRC register after byte n followed by k zero bytes (slicing-by-8). */
const T = new Int32Array(8 * 256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
  T[n] = c;
}
for (let n = 0; n < 256; n++) {
  for (let k = 1; k < 8; k++) {
    const p = T[(k - 1) * 256 + n]!;
    T[k * 256 + n] = (p >>> 8) ^ T[p & 255]!;
  }
}

/** Continues a CRC32c register (pre-inverted) over b[start, end). */
function update(crc: number, b: Uint8Array, start: number, end: number): number {
  let c = crc;
  let i = start;
  for (; i + 8 <= end; i += 8) {
    c ^= b[i]! | (b[i + 1]! << 8) | (b[i + 2]! << 16) | (b[i + 3]! << 24);
    const hi = b[i + 4]! | (b[i + 5]! << 8) | (b[i + 6]! << 16) | (b[i + 7]! << 24);
    c =
      T[7 * 256 + (c & 255)]! ^
      T[6 * 256 + ((c >>> 8) & 255)]! ^
      T[5 * 256 + ((c >>> 16) & 255)]! ^
      T[4 * 256 + (c >>> 24)]! ^
      T[3 * 256 + (hi & 255)]! ^
      T[2 * 256 + ((hi >>> 8) & 255)]! ^
      T[256 + ((hi >>> 16) & 255)]! ^
      T[hi >>> 24]!;
  }
  for (; i < end; i++) c = (c >>> 8) ^ T[(c ^ b[i]!) & 255]!;
  return c;
}

/** CRC32c of b[start, end) (unsigned). */
export function crc32c(b: Uint8Array, start: number, end: number): number {
  return ~update(-1, b, start, end) >>> 0;
}

/** CRC32c of the SCTP packet at b[l4, end) with its checksum field taken as zero (unsigned). */
export function sctpCrc(b: Uint8Array, l4: number, end: number): number {
  let c = update(-1, b, l4, l4 + SCTP_CSUM);
  for (let k = 0; k < 4; k++) c = (c >>> 8) ^ T[c & 255]!; // the checksum field, as zeros
  return ~update(c, b, l4 + SCTP_HLEN, end) >>> 0;
}

/** The checksum field as stored: the CRC's least significant byte first (RFC 9260 appendix A). */
function storedCrc(b: Uint8Array, l4: number): number {
  const o = l4 + SCTP_CSUM;
  return (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;
}

/** Writes the CRC32c of the SCTP packet at b[l4, end) into its checksum field. */
export function sctpSeal(b: Uint8Array, l4: number, end: number): void {
  const c = sctpCrc(b, l4, end);
  const o = l4 + SCTP_CSUM;
  b[o] = c & 255;
  b[o + 1] = (c >>> 8) & 255;
  b[o + 2] = (c >>> 16) & 255;
  b[o + 3] = c >>> 24;
}

/**
 * Checks the SCTP packet at b[l4, end) and returns the event its chunks make for the state
 * machine (conntrack/sctp-state.ts SCTP_EV_*), or SCTP_MALFORMED (no chunk; a chunk shorter than
 * its header or running past the packet) or SCTP_BAD_CRC.
 *
 * The event is the first chunk's (set_sctp_state), except that a COOKIE ECHO or COOKIE ACK
 * followed by an ABORT counts as the ABORT: control chunks may be bundled before an ABORT, and
 * the association is over either way.
 */
export function sctpInspect(b: Uint8Array, l4: number, end: number): number {
  const first = l4 + SCTP_HLEN;
  if (first + CHUNK_HLEN > end) return SCTP_MALFORMED;
  // Bounded: every chunk is at least 4 bytes, so a 64 KB packet has at most 16 K of them.
  for (let p = first; p + CHUNK_HLEN <= end; ) {
    const clen = (b[p + CHUNK_LEN]! << 8) | b[p + CHUNK_LEN + 1]!;
    if (clen < CHUNK_HLEN || p + clen > end) return SCTP_MALFORMED;
    p += (clen + 3) & ~3;
  }
  if (sctpCrc(b, l4, end) !== storedCrc(b, l4)) return SCTP_BAD_CRC;
  const type = b[first + CHUNK_TYPE]!;
  if (type === SCTP_CID_COOKIE_ECHO || type === SCTP_CID_COOKIE_ACK) {
    const next = first + ((((b[first + CHUNK_LEN]! << 8) | b[first + CHUNK_LEN + 1]!) + 3) & ~3);
    if (next + CHUNK_HLEN <= end && b[next + CHUNK_TYPE] === SCTP_CID_ABORT) return SCTP_EV_ABORT;
  }
  return sctpChunkEvent(type);
}
