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
 * The header's bytes are [S, S + len) of the server's numbering, S = the client's SYN + 1 as the
 * server's SYN-ACK acknowledges it (lb/xmit.ts proxyOut; no client packet moves S, and no client byte
 * before S or before that SYN-ACK goes on while the header is unacknowledged: no forged header) —
 * always the same bytes at the same numbers, so sending them twice is a duplicate TCP discards,
 * never data. Where they go (lb/xmit.ts proxyIn), chosen for what stays correct under loss:
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
 * The header's bytes: net/proxy-protocol.ts. Everything here writes into buffers the caller owns,
 * at offsets: no allocation per packet.
 */
import * as P from '../net/packet';

const TCPOPT_EOL = 0;
const TCPOPT_NOP = 1;
const TCPOPT_SACK = 5;

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
