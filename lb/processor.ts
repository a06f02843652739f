/**
 * The per-packet path: parse in place, find or create the connection, rewrite, decide.
 *
 *   process(buf, off, len) → FORWARD (buf rewritten in place; write it back to the device),
 *                            REPLY   (a generated packet — ICMP unreachable, TCP RST, echo reply —
 *                                     is in `out` at `outOff`, `outLen` bytes),
 *                            DROP    (counted by reason in the worker's counters).
 *
 * Inbound = destination inside a VIP range. Anything else reaching the device is a reply from a
 * real server (masq: policy routing sends it here) and must match a connection's server→client
 * key. No allocation, no strings, no exceptions: every field is read at a named offset.
 *
 * IPVS edge behaviour reproduced (docs/ipvs-semantics.md §2, §3):
 *  - no eligible real server → ICMP port unreachable to the client, no entry (ip_vs_leave);
 *  - a VIP port without a service → TCP RST / ICMP port unreachable (the host never answers);
 *  - only a TCP segment with SYN and without RST creates a connection; other segments with no
 *    entry get a RST, as the kernel's local stack would answer them;
 *  - a SYN that hits an entry in TIME_WAIT starts a new connection (conn_reuse_mode=1);
 *  - weight 0 keeps existing flows: only scheduling looks at weights;
 *  - SCTP (./sctp.ts, sctp_conn_schedule): only a packet whose first chunk is INIT creates an
 *    entry, an INIT on an entry in CLOSED starts a new one, other chunks without an entry are
 *    dropped (counted); the CRC32c is checked on arrival and recomputed after the rewrite. *  - ICMP errors about a flow are translated both ways (icmpError, icmp6Error), and a DF packet
 *    too big for the route to its real server is answered from the VIP (forwardIn): path MTU.
 *  - full-NAT TCP to a server with proxyProtocol: a PROXY protocol header segment goes first and
 *    the flow's sequence numbers are shifted both ways (proxyIn, proxyOut; lb/proxy-protocol.ts).
 *
 * Every generated answer passes mayAnswer first: a RST is never answered, nothing is sent to a
 * source the kernel would route back into the device (a VIP, the full-NAT pool) or that is no
 * unicast host (multicast, broadcast, loopback, unspecified, reserved), and answers are limited
 * per source and per worker as net/ipv4/icmp.c limits ICMP (docs/generated-packets.md).
 *
 * IPv4 and IPv6 take the same path: process6 parses IPv6 and hands its addresses' low words to
 * inbound/outbound with the high words in `hi` (conntrack/table.ts explains the keys). With
 * device offloads (`vnet`), a packet has a virtio_net_hdr before it: a partial checksum is kept
 * partial through the rewrite and a GSO super-packet is one packet here.
 */
import { randomFillSync } from 'node:crypto';
import * as L from '../conntrack/layout';
import { Drop, ppLength, ppVersion } from '../conntrack/layout';
import { ConnTable } from '../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCP_ESTABLISHED, TCP_TIME_WAIT, TCPF_ACK, TCPF_CWR, TCPF_FIN, TCPF_PSH, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import { SCTP_EV_INIT, SCTP_S_CLOSED } from '../conntrack/sctp-state';
import { HalfSipHash } from '../net/siphash';
import { getScheduler } from '../schedulers/registry';
import type { SchedInput, Scheduler } from '../schedulers/types';
import * as P from '../net/packet';
import { PP_MAX_LEN, writeProxyHeader } from '../net/proxy-protocol';
import { shiftSeq, toClientSeq, unshiftAck } from './proxy-protocol';
import { SCTP_BAD_CRC, sctpInspect, sctpSeal } from './sctp';
import { findService, inVipRange, inVipRange6, type CompiledService, type Snapshot } from './snapshot';

export const DROP = 0;
export const FORWARD = 1;
export const REPLY = 2;

/** Most packets one input can turn into (a GSO super-packet segmented for the tunnel). */
export const MAX_OUT = 128;

/**
 * Per-source token buckets for generated packets: a fixed array indexed by a keyed hash of the
 * source (sources sharing a slot share its budget, so no source ever gets more than one slot's
 * worth, and spoofing many sources cannot evict anyone's). 4096 slots × 2 words = 32 KiB a worker.
 */
export const GEN_PEER_SLOTS = 4096;

/** Full-NAT port choice (insertFullnat): random probes before the scan, the full-pool memo. */
const FULLNAT_PROBES = 16;
const FULLNAT_MEMO_SLOTS = 64;
export const FULLNAT_FULL_MS = 100;

export class PacketProcessor {
  readonly table: ConnTable;
  readonly counters: Float64Array;
  readonly sched: Int32Array;
  readonly maxRealServers: number;
  snapshot: Snapshot;
  /** Scheduler objects per service index of the current snapshot. */
  private schedulers: Scheduler[] = [];
  /** Buffer for generated packets. */
  out: Uint8Array;
  /** Where the generated packet's IP header goes (its virtio header, if any, just before). */
  outOff = 0;
  outLen = 0;
  /** End (exclusive) of the region at outOff that this packet's outputs may fill. */
  outEnd = 0;
  /**
   * More than one generated packet (a segmented GSO packet): outCount packets at outOffs[i],
   * outLens[i] bytes, virtio header included. 0 = the single packet at outOff/outLen.
   */
  outCount = 0;
  readonly outOffs = new Int32Array(MAX_OUT);
  readonly outLens = new Int32Array(MAX_OUT);
  /** Bytes of virtio_net_hdr before every packet: P.VNET_HLEN with device offloads, else 0. */
  readonly vnet: number;
  /** The current packet's L4 checksum is partial (virtio NEEDS_CSUM): P.fixPartial32 applies. */
  private partial = false;
  /** gso_size of the current packet if it is a TCP GSO super-packet, else 0. */
  private gsoSize = 0;
  /** The current packet is IPv6: addresses are low words plus `hi` (see ConnTable). */
  private v6 = false;
  /**
   * IPv6 key high words in the table's order — client, virtual, real server, local (3 each). For
   * a client's packet 0..5 hold its key, for a server's 6..11; the rest is filled from the entry
   * or the chosen real server as the packet goes on. Unused (but passed) for IPv4.
   */
  private readonly hi = new Int32Array(L.HI_WORDS);
  /** The same for a persistence template's key. */
  private readonly thi = new Int32Array(L.HI_WORDS);
  /** The current IPv6 packet's addresses: source words 0..3, destination 4..7. */
  private readonly pa = new Int32Array(8);
  /** PROXY protocol: a header's two addresses, 4 words each (writeProxyHeader), and a scratch line to measure one. */
  private readonly ppAddrs = new Int32Array(8);
  private readonly ppScratch = new Uint8Array(PP_MAX_LEN);
  /** Client and virtual address folded to 32 bits, as the kernel's schedulers hash IPv6. */
  private cfold = 0;
  private vfold = 0;
  /** Table-relative ms; set once per batch by the caller. */
  now = 0;
  private readonly input: SchedInput = { caddr: 0, cport: 0, vaddr: 0, vport: 0, now: 0 };
  /** Worker → control rings (conntrack/layout.ts RG_*), or null (tests, no Redis). */
  private ring: Int32Array | null = null;
  private ringBytes: Uint8Array | null = null;
  private ipId = 1;
  /** Generated-packet limits (mayAnswer): [tokens (ms of credit; −1 = never used), last use (ms)] per slot. */
  private readonly peerBuckets = new Int32Array(GEN_PEER_SLOTS * 2).fill(-1);
  private readonly peerHash = new HalfSipHash();
  private readonly peerKey = new Int32Array(2);
  /** The worker's global bucket (icmp_global): credit and the time it was last refilled; −1 = never used. */
  private genCredit = -1;
  private genStamp = 0;
  /**
   * What the last packet got, for flow sampling (lb/capture.ts): its drop (or answer) reason and
   * the service and real server it was counted on. Plain stores on the way; only read, and reset
   * to −1 before a packet, while a capture is on.
   */
  lastDrop = -1;
  lastSvc = -1;
  lastRs = -1;

  constructor(table: ConnTable, counters: Float64Array, sched: Int32Array, maxRealServers: number, snapshot: Snapshot, out: Uint8Array, offload = false) {
    this.vnet = offload ? P.VNET_HLEN : 0;
    this.outEnd = out.length;
    this.table = table;
    this.counters = counters;
    this.sched = sched;
    this.maxRealServers = maxRealServers;
    this.snapshot = snapshot;
    this.out = out;
    randomFillSync(this.peerKey);
    randomFillSync(this.rndSeed);
    this.rnd = this.rndSeed[0]! | 1; // xorshift state: never 0
    this.setSnapshot(snapshot);
  }

  setRing(sab: SharedArrayBuffer): void {
    this.ring = new Int32Array(sab);
    this.ringBytes = new Uint8Array(sab);
  }

  /** Queues entry e for a Redis write; a full ring loses the event (counted), never blocks. */
  private pushSync(e: number): void {
    const r = this.ring;
    if (r === null) return;
    const tail = r[L.RG_SYNC_TAIL]!;
    if (((tail - Atomics.load(r, L.RG_SYNC_HEAD)) | 0) >= L.SYNC_RING_SLOTS) {
      this.counters[L.C_SYNC_RING_FULL]!++;
      return;
    }
    r[L.syncRingOffset() + (tail & (L.SYNC_RING_SLOTS - 1))] = e;
    Atomics.store(r, L.RG_SYNC_TAIL, (tail + 1) | 0);
  }

  /**
   * Parks a mid-flow packet that matches no entry while the control thread asks Redis for its
   * flow; if found, the control thread installs it and writes the packet back into the device.
   * Bounded: a full ring (or a packet larger than a slot) drops it, counted.
   */
  private park(b: Uint8Array, off: number, len: number): number {
    // Replayed later without offload metadata: the checksum must be whole.
    if (this.partial) this.completePartial(b, off);
    const r = this.ring!;
    const tail = r[L.RG_PARK_TAIL]!;
    if (len > L.PARK_SLOT_BYTES || ((tail - Atomics.load(r, L.RG_PARK_HEAD)) | 0) >= L.PARK_SLOTS) {
      this.counters[L.C_PARK_FULL]!++;
      return DROP;
    }
    const slot = tail & (L.PARK_SLOTS - 1);
    const dst = L.parkDataOffset(slot);
    const x = this.ringBytes!;
    for (let i = 0; i < len; i++) x[dst + i] = b[off + i]!;
    r[L.parkLensOffset() + slot] = len;
    Atomics.store(r, L.RG_PARK_TAIL, (tail + 1) | 0);
    this.counters[L.C_PARKED]!++;
    return DROP;
  }

  setSnapshot(s: Snapshot): void {
    this.snapshot = s;
    this.schedulers = s.services.map((svc) => getScheduler(svc.scheduler)!);
  }

  private drop(reason: Drop): number {
    this.lastDrop = reason;
    this.counters[L.C_DROP_BASE + reason]!++;
    return DROP;
  }

  /**
   * Handles the packet at b[off, off+len). With offloads its virtio_net_hdr is at off − vnet:
   * for a FORWARD it is written back unchanged (the device then segments a GSO packet and
   * completes a partial checksum on the way out).
   */
  process(b: Uint8Array, off: number, len: number): number {
    this.outCount = 0;
    this.partial = false;
    this.gsoSize = 0;
    this.v6 = false;
    if (len > 0 && b[off]! >> 4 === 6) return this.process6(b, off, len);
    if (len < P.IP_MIN_HLEN) return this.drop(Drop.Truncated);
    const version = b[off]! >> 4;
    if (version !== 4) return this.drop(Drop.BadVersion);
    const ihl = (b[off]! & 15) << 2;
    if (ihl < P.IP_MIN_HLEN) return this.drop(Drop.BadHeaderLength);
    const totlen = P.u16(b, off + P.IP_TOTLEN);
    if (totlen < ihl || totlen > len || ihl > len) return this.drop(Drop.Truncated);
    if (P.sum16(b, off, ihl, 0) !== 0xffff) return this.drop(Drop.BadChecksum);
    if ((P.u16(b, off + P.IP_FRAG) & P.IP_FRAG_MASK) !== 0) return this.drop(Drop.Fragment);
    const proto = b[off + P.IP_PROTO]!;
    const saddr = P.u32(b, off + P.IP_SRC);
    const daddr = P.u32(b, off + P.IP_DST);
    const l4 = off + ihl;
    const l4len = totlen - ihl;
    const inbound = inVipRange(this.snapshot, daddr);
    if (this.vnet !== 0 && (b[off - P.VNET_HLEN + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM || b[off - P.VNET_HLEN + P.VNET_GSO_TYPE] !== 0)) {
      if (!this.offloadMeta(b, off, ihl, totlen, proto)) return this.drop(Drop.BadOffload);
    }

    let sctpEv = 0;
    if (proto === P.IPPROTO_TCP) {
      if (l4len < P.TCP_MIN_HLEN || (b[l4 + P.TCP_OFF]! >> 4) << 2 > l4len || b[l4 + P.TCP_OFF]! >> 4 < 5) return this.drop(Drop.Truncated);
    } else if (proto === P.IPPROTO_UDP) {
      if (l4len < P.UDP_HLEN) return this.drop(Drop.Truncated);
    } else if (proto === P.IPPROTO_SCTP) {
      sctpEv = sctpInspect(b, l4, off + totlen);
      if (sctpEv < 0) return this.drop(sctpEv === SCTP_BAD_CRC ? Drop.BadChecksum : Drop.SctpBad);
    } else if (proto === P.IPPROTO_ICMP) {
      if (l4len < P.ICMP_HLEN) return this.drop(Drop.Truncated);
      const type = b[l4 + P.ICMP_TYPE]!;
      if (type === P.ICMP_DEST_UNREACH || type === P.ICMP_SOURCE_QUENCH || type === P.ICMP_TIME_EXCEEDED) return this.icmpError(b, off, ihl, totlen, inbound);
      return inbound ? this.icmpToVip(b, off, ihl, totlen, saddr, daddr) : this.icmpNotOurs(daddr);
    } else {
      return this.drop(Drop.UnsupportedProtocol);
    }

    const sport = P.u16(b, l4 + P.L4_SPORT);
    const dport = P.u16(b, l4 + P.L4_DPORT);
    // What ConnTable.touch reads: TCP the flags, SCTP the chunk event (conntrack/sctp-state.ts).
    const tcpFlags = proto === P.IPPROTO_TCP ? b[l4 + P.TCP_FLAGS]! : sctpEv;
    return inbound
      ? this.inbound(b, off, l4, totlen, proto, saddr, sport, daddr, dport, tcpFlags)
      : this.outbound(b, off, l4, totlen, proto, saddr, sport, daddr, dport, tcpFlags);
  }

  /**
   * IPv6: the same path with the table's IPv6 keys (PROTO_V6, low words plus `hi`). Extension
   * headers hop-by-hop, routing and destination options are stepped over; a fragment is dropped
   * as IPVS drops IPv4 fragments it cannot place.
   */
  private process6(b: Uint8Array, off: number, len: number): number {
    this.v6 = true;
    if (len < P.IP6_HLEN) return this.drop(Drop.Truncated);
    const totlen = P.IP6_HLEN + P.u16(b, off + P.IP6_PLEN);
    if (totlen > len) return this.drop(Drop.Truncated);
    const end = off + totlen;
    let next = b[off + P.IP6_NEXT]!;
    let l4 = off + P.IP6_HLEN;
    for (let i = 0; next === P.IPPROTO_HOPOPTS || next === P.IPPROTO_ROUTING || next === P.IPPROTO_DSTOPTS; i++) {
      if (i === 8 || l4 + 8 > end) return this.drop(Drop.Ipv6);
      next = b[l4]!;
      l4 += (b[l4 + 1]! + 1) << 3;
    }
    if (next === P.IPPROTO_FRAGMENT) return this.drop(Drop.Fragment);
    if (l4 > end) return this.drop(Drop.Truncated);
    const pa = this.pa;
    for (let i = 0; i < 8; i++) pa[i] = P.u32(b, off + P.IP6_SRC + 4 * i);
    const inbound = inVipRange6(this.snapshot, pa, 4);
    const l4len = end - l4;
    if (this.vnet !== 0 && (b[off - P.VNET_HLEN + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM || b[off - P.VNET_HLEN + P.VNET_GSO_TYPE] !== 0)) {
      if (!this.offloadMeta(b, off, l4 - off, totlen, next)) return this.drop(Drop.BadOffload);
    }
    let sctpEv = 0;
    if (next === P.IPPROTO_TCP) {
      if (l4len < P.TCP_MIN_HLEN || (b[l4 + P.TCP_OFF]! >> 4) << 2 > l4len || b[l4 + P.TCP_OFF]! >> 4 < 5) return this.drop(Drop.Truncated);
    } else if (next === P.IPPROTO_UDP) {
      if (l4len < P.UDP_HLEN) return this.drop(Drop.Truncated);
    } else if (next === P.IPPROTO_SCTP) {
      sctpEv = sctpInspect(b, l4, end);
      if (sctpEv < 0) return this.drop(sctpEv === SCTP_BAD_CRC ? Drop.BadChecksum : Drop.SctpBad);
    } else if (next === P.IPPROTO_ICMPV6) {
      if (l4len < P.ICMP_HLEN) return this.drop(Drop.Truncated);
      const type = b[l4 + P.ICMP_TYPE]!;
      if (type < 128) return this.icmp6Error(b, off, l4, totlen, inbound);
      if (inbound) return this.icmp6ToVip(b, off, l4, totlen);
      // The device's own neighbour/router/multicast-listener chatter (multicast, link-local): not ours.
      if (pa[4]! >>> 24 === 0xff || pa[4]! >>> 22 === 0x3fa) return this.drop(Drop.IcmpIgnored);
      return this.icmpNotOurs(0);
    } else {
      return this.drop(Drop.UnsupportedProtocol);
    }
    const hi = this.hi;
    if (inbound) {
      for (let i = 0; i < 3; i++) {
        hi[i] = pa[i]!;
        hi[3 + i] = pa[4 + i]!;
      }
      this.cfold = pa[0]! ^ pa[1]! ^ pa[2]! ^ pa[3]!;
      this.vfold = pa[4]! ^ pa[5]! ^ pa[6]! ^ pa[7]!;
    } else {
      for (let i = 0; i < 3; i++) {
        hi[6 + i] = pa[i]!;
        hi[9 + i] = pa[4 + i]!;
      }
    }
    const sport = P.u16(b, l4 + P.L4_SPORT);
    const dport = P.u16(b, l4 + P.L4_DPORT);
    const tcpFlags = next === P.IPPROTO_TCP ? b[l4 + P.TCP_FLAGS]! : sctpEv;
    const proto = next | L.PROTO_V6;
    return inbound
      ? this.inbound(b, off, l4, totlen, proto, pa[3]!, sport, pa[7]!, dport, tcpFlags)
      : this.outbound(b, off, l4, totlen, proto, pa[3]!, sport, pa[7]!, dport, tcpFlags);
  }

  /** Copies an entry's (or template's) real-server and local high words into hi[6..11]. */
  private entryHiOut(o: number, into: Int32Array): void {
    const a = this.table.i32;
    for (let i = 0; i < 6; i++) into[6 + i] = a[o + L.E_DADDR_HI + i]!;
  }

  private inbound(
    b: Uint8Array,
    off: number,
    l4: number,
    totlen: number,
    proto: number,
    saddr: number,
    sport: number,
    daddr: number,
    dport: number,
    tcpFlags: number,
  ): number {
    const t = this.table;
    const hi = this.hi;
    const v6 = this.v6;
    const isTcp = (proto & 0xff) === P.IPPROTO_TCP;
    const cports = (sport << 16) | dport;
    const bucket = t.bucketIn(proto, saddr, cports, daddr, hi);
    // May start a connection (is_new_conn): a TCP SYN, an SCTP INIT.
    const isSctp = (proto & 0xff) === P.IPPROTO_SCTP;
    const isNew = isSctp ? tcpFlags === SCTP_EV_INIT : (tcpFlags & (TCPF_SYN | TCPF_RST | TCPF_ACK)) === TCPF_SYN;
    t.lockBucket(bucket);
    let e = t.findIn(bucket, proto, saddr, cports, daddr, hi);
    if (e >= 0) {
      const o = t.base(e);
      const a = t.i32;
      const rsSlot = a[o + L.E_RS]!;
      if ((Atomics.load(t.rs, rsSlot * L.RS_WORDS + L.RS_FLAGS) & L.RSF_AVAILABLE) === 0) {
        t.unlockBucket(bucket);
        if (!this.snapshot.expireNodestConn) {
          // expire_nodest_conn=0: drop without refreshing the timer; the entry dies at its timeout.
          return this.drop(Drop.RealServerGone);
        }
        // expire_nodest_conn=1 (≥ 5.9): expire the entry now and handle the packet as new.
        t.remove(e, false, this.now, proto, saddr, cports);
        this.counters[L.C_NODEST_EXPIRED]!++;
        e = -1;
      } else if (
        isNew &&
        ((a[o + L.E_STATE] === (isTcp ? TCP_TIME_WAIT : SCTP_S_CLOSED) && a[o + L.E_CONTROL] === 0) ||
          (this.snapshot.expireNodestConn && Atomics.load(t.rs, rsSlot * L.RS_WORDS + L.RS_WEIGHT) === 0))
      ) {
        // A new SYN (SCTP: INIT) on this entry's ports (ip_vs_in, conn_reuse_mode=1): in TIME_WAIT
        // (SCTP: CLOSED) and not controlled by a persistence template, or its server quiesced with
        // expire_nodest_conn=1 (≥ 5.16), it is a new connection.
        t.unlockBucket(bucket);
        t.remove(e, false, this.now, proto, saddr, cports);
        e = -1;
      } else {
        if (a[o + L.E_FLAGS]! & L.F_SHADOW && t.adopt(e, this.now)) {
          this.counters[L.C_ADOPTED]!++;
          this.pushSync(e);
        }
        if (t.touch(e, DIR_INPUT, tcpFlags, this.now)) this.pushSync(e);
        const raddr = a[o + L.E_DADDR]!;
        const dports = a[o + L.E_DPORTS]!;
        const laddr = a[o + L.E_LADDR]!;
        const fwd = a[o + L.E_FLAGS]! & L.FWD_MASK;
        const svcSlot = a[o + L.E_SVC]!;
        if (v6) this.entryHiOut(o, hi);
        t.unlockBucket(bucket);
        this.countIn(rsSlot, svcSlot, totlen);
        return this.forwardIn(b, off, l4, totlen, proto, saddr, sport, daddr, dport, raddr, dports, laddr, fwd, rsSlot, e);
      }
    } else {
      t.unlockBucket(bucket);
    }

    // No connection: a new flow, if the service exists and the packet may start one.
    const si = findService(this.snapshot, proto, daddr, dport, hi, 3);
    if (si < 0) {
      // Never answer a RST (tcp_v4_send_reset, tcp_v6_send_reset): two of them would answer each other.
      if (isTcp && tcpFlags & TCPF_RST) return this.drop(Drop.NoService);
      if (isTcp) return this.mayAnswer(L.GEN_RESET, Drop.NoService, saddr) ? this.tcpReset(b, off, l4, totlen, tcpFlags) : DROP;
      return this.mayAnswer(L.GEN_UNREACH, Drop.NoService, saddr) ? this.unreachable(b, off, totlen, daddr, saddr) : DROP;
    }
    if (isTcp && (tcpFlags & (TCPF_SYN | TCPF_RST)) !== TCPF_SYN) {
      // Mid-flow: another node may have carried this flow; ask Redis (bounded) before refusing.
      if (this.ring !== null && this.snapshot.adopt) return this.park(b, off, totlen);
      if (tcpFlags & TCPF_RST) return this.drop(Drop.NoConnection); // never answer a RST
      return this.mayAnswer(L.GEN_RESET, Drop.NoConnection, saddr) ? this.tcpReset(b, off, l4, totlen, tcpFlags) : DROP;
    }
    if (isSctp && tcpFlags !== SCTP_EV_INIT) {
      // Only an INIT starts an association (sctp_conn_schedule); the rest may be another node's.
      if (this.ring !== null && this.snapshot.adopt) return this.park(b, off, totlen);
      return this.drop(Drop.NoConnection);
    }
    // Overload defenses (conntrack/defense.ts sets the words once a second): drop_packet refuses
    // 1 of every `rate` new flows (ip_vs_todrop, per worker), and a source holding its limit of
    // half-open entries gets no more.
    const rate = t.i32[L.H_DROP_RATE]!;
    if (rate !== 0) {
      if (this.dropCounter > rate) this.dropCounter = rate;
      if (--this.dropCounter <= 0) {
        this.dropCounter = rate;
        return this.drop(Drop.DefenseDropPacket);
      }
    }
    const srcLimit = t.i32[L.H_SRC_LIMIT]!;
    if (srcLimit !== 0 && (isTcp || isSctp) && t.halfOpenAt(t.sourceSlot(v6, saddr, hi[0]!, hi[1]!)) >= srcLimit) return this.drop(Drop.HalfOpenPerSource);
    const svc = this.snapshot.services[si]!;
    let tmpl = -1;
    let daddr2: number, dport2: number, rs2: number, fwd2: number;
    if (svc.persistMs > 0) {
      // ip_vs_sched_persist: one template per (masked client, service) pins the real server.
      const thi = this.thi;
      let masked: number;
      if (v6) {
        // The template's client is the client's prefix (-M is a prefix length for IPv6).
        const m = svc.netmask6!;
        masked = saddr & m[3]!;
        for (let i = 0; i < 3; i++) {
          thi[i] = hi[i]! & m[i]!;
          thi[3 + i] = hi[3 + i]!;
          thi[9 + i] = thi[i]!;
        }
      } else {
        masked = saddr & svc.netmask;
      }
      const tb = t.bucketIn(proto, masked, dport, daddr, thi);
      t.lockBucket(tb);
      tmpl = t.findTemplate(tb, proto, masked, dport, daddr, thi);
      if (tmpl >= 0) {
        const to = t.base(tmpl);
        const rsw = t.i32[to + L.E_RS]! * L.RS_WORDS;
        // ip_vs_check_template: a deleted server, or (expire_quiescent_template) a quiesced one, ends it.
        if ((Atomics.load(t.rs, rsw + L.RS_FLAGS) & L.RSF_AVAILABLE) === 0 || (this.snapshot.expireQuiescentTemplate && Atomics.load(t.rs, rsw + L.RS_WEIGHT) === 0)) {
          t.invalidate(tmpl);
          tmpl = -1;
        } else {
          t.reserve(tmpl);
        }
      }
      t.unlockBucket(tb);
      if (tmpl < 0) {
        const di = this.schedule(svc, si, v6 ? this.cfold : saddr, sport, v6 ? this.vfold : daddr, dport);
        if (di < 0) return this.mayAnswer(L.GEN_UNREACH, Drop.NoRealServer, saddr) ? this.unreachable(b, off, totlen, daddr, saddr) : DROP;
        const d = svc.dests[di]!;
        const a6 = d.addr6;
        if (a6 !== null) for (let i = 0; i < 3; i++) thi[6 + i] = a6[i]!;
        tmpl = t.insert(proto, masked, dport, daddr, a6 !== null ? a6[3]! : d.addr, d.port << 16, masked, L.F_TEMPLATE | d.fwd, d.rs, svc.slot, this.now, svc.persistMs, 0, 0, thi);
        if (tmpl < 0) return this.drop(tmpl === -3 ? Drop.ChainFull : Drop.TableFull);
        // A new template's timer is the persistence timeout away; one found in a race is valid.
        t.lockBucket(tb);
        t.reserve(tmpl);
        t.unlockBucket(tb);
      }
      const to = t.base(tmpl);
      daddr2 = t.i32[to + L.E_DADDR]!;
      dport2 = t.i32[to + L.E_DPORTS]! >>> 16;
      rs2 = t.i32[to + L.E_RS]!;
      fwd2 = t.i32[to + L.E_FLAGS]! & L.FWD_MASK;
      if (v6) for (let i = 0; i < 3; i++) hi[6 + i] = t.i32[to + L.E_DADDR_HI + i]!;
    } else {
      const di = this.schedule(svc, si, v6 ? this.cfold : saddr, sport, v6 ? this.vfold : daddr, dport);
      if (di < 0) return this.mayAnswer(L.GEN_UNREACH, Drop.NoRealServer, saddr) ? this.unreachable(b, off, totlen, daddr, saddr) : DROP;
      const d = svc.dests[di]!;
      const a6 = d.addr6;
      daddr2 = a6 !== null ? a6[3]! : d.addr;
      if (a6 !== null) for (let i = 0; i < 3; i++) hi[6 + i] = a6[i]!;
      dport2 = d.port;
      rs2 = d.rs;
      fwd2 = d.fwd;
    }
    let ne: number;
    if (fwd2 === L.FWD_FULLNAT) {
      // PROXY protocol: the flow's header length and version, fixed for its life (E_PP).
      const ver = isTcp ? this.snapshot.proxyProtocol[rs2]! : 0;
      const pp = ver === 0 ? 0 : (ver << L.PP_VER_SHIFT) | this.proxyHeader(this.ppScratch, 0, ver, saddr, sport, daddr, dport);
      ne = this.insertFullnat(proto, saddr, cports, daddr, daddr2, dport2, rs2, svc.slot, pp, pp === 0 ? 0 : (P.u32(b, l4 + P.TCP_SEQ) + 1) | 0);
      if (ne === -2) {
        if (tmpl >= 0) t.unreserve(tmpl);
        return this.drop(Drop.FullnatExhausted);
      }
    } else {
      // Masq: the server answers the client's address (IPv6: its high words are the local ones).
      if (v6) for (let i = 0; i < 3; i++) hi[9 + i] = hi[i]!;
      // Tunnel: the server answers the client directly, so this node sees one direction only.
      ne = t.insert(proto, saddr, cports, daddr, daddr2, (dport2 << 16) | sport, saddr, fwd2 === L.FWD_TUNNEL ? fwd2 | L.F_NOOUTPUT : fwd2, rs2, svc.slot, this.now, 0, 0, 0, hi);
    }
    const created = t.lastInsertNew;
    if (tmpl >= 0) {
      if (ne >= 0 && created) t.control(ne, tmpl, this.now);
      else t.unreserve(tmpl);
    }
    if (ne < 0) return this.drop(ne === -3 ? Drop.ChainFull : Drop.TableFull);
    t.lockBucket(bucket);
    // The entry's timer is 2 s away and we hold its in-bucket lock: it is still ours to touch.
    if (t.touch(ne, DIR_INPUT, tcpFlags, this.now)) this.pushSync(ne);
    const o = t.base(ne);
    const raddr = t.i32[o + L.E_DADDR]!;
    const dports = t.i32[o + L.E_DPORTS]!;
    const laddr = t.i32[o + L.E_LADDR]!;
    const fwd = t.i32[o + L.E_FLAGS]! & L.FWD_MASK;
    const rsSlot = t.i32[o + L.E_RS]!;
    if (v6) this.entryHiOut(o, hi); // another worker may have created it with another server
    t.unlockBucket(bucket);
    if (created) {
      this.counters[L.C_CONNS_NEW]!++;
      this.counters[L.rsCounterBase(rsSlot) + L.RSC_CONNS]!++;
      this.counters[L.svcCounterBase(this.maxRealServers, svc.slot) + L.RSC_CONNS]!++;
    }
    this.countIn(rsSlot, svc.slot, totlen);
    return this.forwardIn(b, off, l4, totlen, proto, saddr, sport, daddr, dport, raddr, dports, laddr, fwd, rsSlot, ne);
  }

  /**
   * Sends a client's packet on to its real server by the flow's method — after the path-MTU
   * check of ip_vs_*_xmit: a DF packet (for GSO, one segment) larger than the route to the real
   * server allows is answered with ICMP fragmentation needed from the VIP, quoting the packet as
   * the client sent it, so the client's path-MTU discovery works through uvs (the kernel would
   * answer after our rewrite, quoting the real server, and the client would ignore it).
   */
  private forwardIn(
    b: Uint8Array,
    off: number,
    l4: number,
    totlen: number,
    proto: number,
    saddr: number,
    sport: number,
    daddr: number,
    dport: number,
    raddr: number,
    dports: number,
    laddr: number,
    fwd: number,
    rsSlot: number,
    e: number,
  ): number {
    const mtu = this.table.rs[rsSlot * L.RS_WORDS + L.RS_MTU]!;
    const v6 = this.v6;
    // IPv6 is never fragmented on the way: every packet is checked (Packet Too Big).
    if (mtu > 0 && (v6 || (P.u16(b, off + P.IP_FRAG) & P.IP_DF) !== 0)) {
      const outer = fwd === L.FWD_TUNNEL ? (v6 ? P.IP6_HLEN : P.IP_MIN_HLEN) : 0;
      const size = (this.gsoSize !== 0 ? l4 - off + ((b[l4 + P.TCP_OFF]! >> 4) << 2) + this.gsoSize : totlen) + outer;
      if (size > mtu) {
        if (!this.mayAnswer(L.GEN_TOO_BIG, Drop.TooBig, saddr)) return DROP;
        // Never below the IPv6 minimum MTU, which every path must carry (RFC 8200 §5).
        if (v6) return this.icmp6Generate(b, off, totlen, P.ICMP6_PACKET_TOO_BIG, 0, mtu - outer < P.IPV6_MIN_MTU ? P.IPV6_MIN_MTU : mtu - outer);
        return this.icmpUnreach(b, off, totlen, daddr, saddr, P.ICMP_FRAG_NEEDED, mtu - outer);
      }
    }
    if (fwd === L.FWD_TUNNEL) return this.encapsulate(b, off, totlen, raddr, mtu > 0);
    if (v6) {
      this.rewrite6(b, off, l4, proto, P.IP6_DST, raddr, 6, dport, dports >>> 16);
      if (fwd === L.FWD_FULLNAT) this.rewrite6(b, off, l4, proto, P.IP6_SRC, laddr, 9, sport, dports & 0xffff);
    } else {
      this.rewrite(b, off, l4, proto, P.IP_DST, daddr, dport, raddr, dports >>> 16);
      if (fwd === L.FWD_FULLNAT) this.rewrite(b, off, l4, proto, P.IP_SRC, saddr, sport, laddr, dports & 0xffff);
    }
    if ((proto & 0xff) === P.IPPROTO_SCTP) sctpSeal(b, l4, off + totlen);
    if (fwd === L.FWD_FULLNAT && (proto & 0xff) === P.IPPROTO_TCP) {
      const o = this.table.base(e);
      const pp = this.table.i32[o + L.E_PP]!; // a plain read: flags only gain bits, a stale one costs a duplicate header at most
      if (pp !== 0) return this.proxyIn(b, off, l4, totlen, o, pp);
    }
    return FORWARD;
  }

  /**
   * A full-NAT TCP segment (already rewritten) of a flow with a PROXY protocol header, on its way
   * to the server (lb/proxy-protocol.ts explains the rules): shifted into the server's numbering,
   * or, at the header's place while the server has not acknowledged it, preceded by the header
   * segment built in `out` — which replaces a bare ACK and goes before anything else (REPLY, two
   * packets). Entry word o + E_PP is pp; its flags gain bits (Atomics.or), and lose them only when
   * a client's new SYN starts the header over.
   */
  private proxyIn(b: Uint8Array, off: number, l4: number, totlen: number, o: number, pp: number): number {
    const a = this.table.i32;
    const len = ppLength(pp);
    const s = a[o + L.E_PP_SEQ]!;
    const flags = b[l4 + P.TCP_FLAGS]!;
    const seq = P.u32(b, l4 + P.TCP_SEQ);
    if (flags & TCPF_SYN) {
      // The SYN keeps its own number. One with another ISN on an entry that is not ESTABLISHED
      // (the client's port reused after a RST or close) starts the header over.
      if (!(flags & TCPF_ACK) && ((seq + 1) | 0) !== s && a[o + L.E_STATE] !== TCP_ESTABLISHED) {
        a[o + L.E_PP_SEQ] = (seq + 1) | 0;
        Atomics.and(a, o + L.E_PP, ~L.PP_FLAGS);
      }
      return FORWARD;
    }
    if (seq !== s || pp & L.PP_ACKED) {
      shiftSeq(b, l4, len, this.partial);
      return FORWARD;
    }
    // At the header's place, the header not yet acknowledged.
    if (flags & TCPF_RST) {
      // A RST must carry the server's next expected number exactly (RFC 5961): after the header if it went.
      if (pp & L.PP_SENT) shiftSeq(b, l4, len, this.partial);
      return FORWARD;
    }
    const hl = (b[l4 + P.TCP_OFF]! >> 4) << 2;
    const data = totlen - (l4 - off) - hl > 0 || (flags & TCPF_FIN) !== 0;
    if (data && (pp & (L.PP_SENT | L.PP_DATA)) === L.PP_SENT) {
      // The client's first bytes right behind the ACK that carried the header: it is on its way.
      Atomics.or(a, o + L.E_PP, L.PP_DATA);
      shiftSeq(b, l4, len, this.partial);
      return FORWARD;
    }
    const hdr = this.outOff;
    const hlen = l4 - off + hl + len;
    const V = this.vnet;
    const at = hdr + hlen + V; // the client's segment after it, its virtio header (offloads) before it
    if ((data ? at + totlen : hdr + hlen) > this.outEnd) return this.drop(Drop.Truncated); // never with a worker's out slots (2 × a packet slot)
    this.proxySegment(b, off, l4, hl, o, pp, hdr);
    Atomics.or(a, o + L.E_PP, data ? L.PP_SENT | L.PP_DATA : L.PP_SENT);
    this.counters[L.C_PP_HEADERS]!++;
    this.outLen = hlen;
    if (!data) return REPLY; // a bare ACK: the header segment says all it said
    shiftSeq(b, l4, len, this.partial);
    this.copyOut(b, off - V, at - V, totlen + V);
    this.outOffs[0] = hdr - V;
    this.outLens[0] = hlen + V;
    this.outOffs[1] = at - V;
    this.outLens[1] = totlen + V;
    this.outCount = 2;
    return REPLY;
  }

  /**
   * Builds the header segment at out[at]: the client's segment's IP and TCP headers (as rewritten:
   * addresses, ports, options such as timestamps) at the header's number, flags ACK|PSH, and the
   * header as its payload; full checksums (no offload: its virtio header is plain). The caller
   * checked that it fits.
   */
  private proxySegment(b: Uint8Array, off: number, l4: number, hl: number, o: number, pp: number, at: number): void {
    const ih = l4 - off;
    const len = ppLength(pp);
    const total = ih + hl + len;
    const x = this.out;
    this.plainVnet(at);
    this.copyOut(b, off, at, ih + hl);
    const t = at + ih;
    const a = this.table.i32;
    const w = this.ppAddrs;
    if (this.v6) {
      for (let i = 0; i < 3; i++) {
        w[i] = a[o + L.E_CADDR_HI + i]!;
        w[4 + i] = a[o + L.E_VADDR_HI + i]!;
      }
    }
    w[3] = a[o + L.E_CADDR]!;
    w[7] = a[o + L.E_VADDR]!;
    const cports = a[o + L.E_CPORTS]!;
    writeProxyHeader(x, t + hl, ppVersion(pp), this.v6, w, cports >>> 16, cports & 0xffff);
    P.put32(x, t + P.TCP_SEQ, a[o + L.E_PP_SEQ]!);
    x[t + P.TCP_FLAGS] = TCPF_ACK | TCPF_PSH;
    P.put16(x, t + P.TCP_CSUM, 0);
    if (this.v6) {
      P.put16(x, at + P.IP6_PLEN, total - P.IP6_HLEN);
      P.put16(x, t + P.TCP_CSUM, P.checksum(x, t, hl + len, P.pseudoSum6(x, at + P.IP6_SRC, at + P.IP6_DST, P.IPPROTO_TCP, hl + len)));
    } else {
      P.put16(x, at + P.IP_TOTLEN, total);
      P.put16(x, at + P.IP_ID, this.ipId);
      this.ipId = (this.ipId + 1) & 0xffff;
      P.put16(x, at + P.IP_CSUM, 0);
      P.put16(x, at + P.IP_CSUM, P.checksum(x, at, ih, 0));
      P.put16(x, t + P.TCP_CSUM, P.checksum(x, t, hl + len, P.pseudoSum(P.u32(x, at + P.IP_SRC), P.u32(x, at + P.IP_DST), P.IPPROTO_TCP, hl + len)));
    }
  }

  /** The header for the flow being made (client saddr:sport → VIP daddr:dport, IPv6 high words in hi[0..5]) at dst[at]; its length. */
  private proxyHeader(dst: Uint8Array, at: number, ver: number, saddr: number, sport: number, daddr: number, dport: number): number {
    const w = this.ppAddrs;
    if (this.v6) {
      for (let i = 0; i < 3; i++) {
        w[i] = this.hi[i]!;
        w[4 + i] = this.hi[3 + i]!;
      }
    }
    w[3] = saddr;
    w[7] = daddr;
    return writeProxyHeader(dst, at, ver, this.v6, w, sport, dport);
  }

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
  private icmpError(b: Uint8Array, off: number, ihl: number, totlen: number, inbound: boolean): number {
    const ic = off + ihl;
    const q = ic + P.ICMP_HLEN;
    const end = off + totlen;
    if (q + P.IP_MIN_HLEN > end || b[q]! >> 4 !== 4) return this.drop(Drop.Truncated);
    const qihl = (b[q]! & 15) << 2;
    if (qihl < P.IP_MIN_HLEN || q + qihl + 4 > end) return this.drop(Drop.Truncated);
    const qproto = b[q + P.IP_PROTO]!;
    const daddr = P.u32(b, off + P.IP_DST);
    if (qproto !== P.IPPROTO_TCP && qproto !== P.IPPROTO_UDP && qproto !== P.IPPROTO_SCTP) return inbound ? this.drop(Drop.IcmpIgnored) : this.icmpNotOurs(daddr);
    // The kernel drops an error whose checksum fails ("failed checksum" in ip_vs_in_icmp and
    // handle_response_icmp); recomputing it below must not make a damaged one look intact.
    if (P.sum16(b, ic, totlen - ihl, 0) !== 0xffff) return this.drop(Drop.BadChecksum);
    // A quoted non-first fragment carries no ports (the kernel ignores these too).
    if ((P.u16(b, q + P.IP_FRAG) & 0x1fff) !== 0) return inbound ? this.drop(Drop.IcmpIgnored) : this.icmpNotOurs(daddr);
    const ql4 = q + qihl;
    const qs = P.u32(b, q + P.IP_SRC);
    const qd = P.u32(b, q + P.IP_DST);
    const qsp = P.u16(b, ql4 + P.L4_SPORT);
    const qdp = P.u16(b, ql4 + P.L4_DPORT);
    const t = this.table;
    const a = t.i32;
    const ports = (qdp << 16) | qsp;
    const bucket = t.bucket(qproto, qd, ports, qs);
    t.lockBucket(bucket);
    const e = inbound ? t.findIn(bucket, qproto, qd, ports, qs) : t.findOut(bucket, qproto, qd, ports, qs);
    if (e < 0) {
      t.unlockBucket(bucket);
      return inbound ? this.drop(Drop.IcmpIgnored) : this.icmpNotOurs(daddr);
    }
    const o = t.base(e);
    const fwd = a[o + L.E_FLAGS]! & L.FWD_MASK;
    const raddr = a[o + L.E_DADDR]!;
    const dports = a[o + L.E_DPORTS]!;
    const laddr = a[o + L.E_LADDR]!;
    const caddr = a[o + L.E_CADDR]!;
    const cports = a[o + L.E_CPORTS]!;
    const vaddr = a[o + L.E_VADDR]!;
    const rsSlot = a[o + L.E_RS]!;
    const svcSlot = a[o + L.E_SVC]!;
    const pp = qproto === P.IPPROTO_TCP && fwd === L.FWD_FULLNAT ? a[o + L.E_PP]! : 0;
    const ppSeq = a[o + L.E_PP_SEQ]!;
    t.unlockBucket(bucket);
    if (inbound) {
      this.countIn(rsSlot, svcSlot, totlen);
      if (fwd === L.FWD_TUNNEL) return this.encapsulate(b, off, totlen, raddr, false);
      P.put32(b, off + P.IP_DST, raddr);
      P.put32(b, q + P.IP_SRC, raddr);
      P.put16(b, ql4 + P.L4_SPORT, dports >>> 16);
      if (fwd === L.FWD_FULLNAT) {
        P.put32(b, off + P.IP_SRC, laddr);
        P.put32(b, q + P.IP_DST, laddr);
        P.put16(b, ql4 + P.L4_DPORT, dports & 0xffff);
      }
    } else {
      this.countOut(rsSlot, svcSlot, totlen);
      P.put32(b, off + P.IP_SRC, vaddr);
      P.put32(b, q + P.IP_DST, vaddr);
      P.put16(b, ql4 + P.L4_DPORT, cports & 0xffff);
      if (fwd === L.FWD_FULLNAT) {
        P.put32(b, off + P.IP_DST, caddr);
        P.put32(b, q + P.IP_SRC, caddr);
        P.put16(b, ql4 + P.L4_SPORT, cports >>> 16);
      }
      if (pp !== 0) this.proxyQuoted(b, ql4, end, pp, ppSeq);
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
   * ICMP from the real servers' side that is not about a flow of ours (echo replies, errors about
   * their own traffic) only came here through the `ipproto icmp` reply rule: it goes on unchanged
   * (packets leaving the device are routed by the main table). One to a full-NAT pool address
   * would come straight back: dropped.
   */
  private icmpNotOurs(daddr: number): number {
    if (this.v6) {
      const pool = this.snapshot.fullnatAddrs6;
      const pa = this.pa;
      for (let i = 0; i < pool.length; i += 4) {
        if (pool[i] === pa[4] && pool[i + 1] === pa[5] && pool[i + 2] === pa[6] && pool[i + 3] === pa[7]) return this.drop(Drop.IcmpIgnored);
      }
      return FORWARD;
    }
    const pool = this.snapshot.fullnatAddrs;
    for (let i = 0; i < pool.length; i++) if (pool[i] === daddr) return this.drop(Drop.IcmpIgnored);
    return FORWARD;
  }

  /**
   * ICMPv6 errors (types below 128) about a tracked flow: ip_vs_in_icmp_v6 / ip_vs_out_icmp_v6,
   * the same translation as icmpError for IPv4 (see there), then the ICMPv6 checksum (which
   * covers the outer addresses too) is recomputed. The quoted packet must be TCP or UDP directly
   * after its IPv6 header.
   */
  private icmp6Error(b: Uint8Array, off: number, ic: number, totlen: number, inbound: boolean): number {
    const q = ic + P.ICMP_HLEN;
    const end = off + totlen;
    if (q + P.IP6_HLEN + 4 > end || b[q]! >> 4 !== 6) return this.drop(Drop.Truncated);
    const qproto = b[q + P.IP6_NEXT]!;
    if (qproto !== P.IPPROTO_TCP && qproto !== P.IPPROTO_UDP && qproto !== P.IPPROTO_SCTP) return inbound ? this.drop(Drop.IcmpIgnored) : this.icmpNotOurs(0);
    // As for IPv4: a damaged error is dropped, never given a fresh checksum.
    const l4len = end - ic;
    if (P.sum16(b, ic, l4len, P.pseudoSum6(b, off + P.IP6_SRC, off + P.IP6_DST, P.IPPROTO_ICMPV6, l4len)) !== 0xffff) return this.drop(Drop.BadChecksum);
    const ql4 = q + P.IP6_HLEN;
    const qsp = P.u16(b, ql4 + P.L4_SPORT);
    const qdp = P.u16(b, ql4 + P.L4_DPORT);
    const t = this.table;
    const a = t.i32;
    const hi = this.hi;
    const proto = qproto | L.PROTO_V6;
    const ports = (qdp << 16) | qsp;
    // The quoted packet reversed is the key: to a VIP (client side) the flow's client→server key,
    // from the servers' side its server→client key.
    const k = inbound ? 0 : 6;
    for (let i = 0; i < 3; i++) {
      hi[k + i] = P.u32(b, q + P.IP6_DST + 4 * i);
      hi[k + 3 + i] = P.u32(b, q + P.IP6_SRC + 4 * i);
    }
    const qd = P.u32(b, q + P.IP6_DST + 12);
    const qs = P.u32(b, q + P.IP6_SRC + 12);
    const bucket = inbound ? t.bucketIn(proto, qd, ports, qs, hi) : t.bucketOut(proto, qd, ports, qs, hi);
    t.lockBucket(bucket);
    const e = inbound ? t.findIn(bucket, proto, qd, ports, qs, hi) : t.findOut(bucket, proto, qd, ports, qs, hi);
    if (e < 0) {
      t.unlockBucket(bucket);
      return inbound ? this.drop(Drop.IcmpIgnored) : this.icmpNotOurs(0);
    }
    const o = t.base(e);
    const fwd = a[o + L.E_FLAGS]! & L.FWD_MASK;
    const raddr = a[o + L.E_DADDR]!;
    const dports = a[o + L.E_DPORTS]!;
    const cports = a[o + L.E_CPORTS]!;
    const rsSlot = a[o + L.E_RS]!;
    const svcSlot = a[o + L.E_SVC]!;
    const pp = qproto === P.IPPROTO_TCP && fwd === L.FWD_FULLNAT ? a[o + L.E_PP]! : 0;
    const ppSeq = a[o + L.E_PP_SEQ]!;
    // The entry's high words, three per address in the table's order: client 0, virtual 3, real
    // server 6, local 9 (thi is free here).
    const w = this.thi;
    for (let i = 0; i < L.HI_WORDS; i++) w[i] = a[o + L.E_HI + i]!;
    const lo0 = a[o + L.E_CADDR]!;
    const lo1 = a[o + L.E_VADDR]!;
    const lo3 = a[o + L.E_LADDR]!;
    t.unlockBucket(bucket);
    if (inbound) {
      this.countIn(rsSlot, svcSlot, totlen);
      if (fwd === L.FWD_TUNNEL) {
        for (let i = 0; i < 3; i++) hi[6 + i] = w[6 + i]!;
        return this.encapsulate(b, off, totlen, raddr, false);
      }
      this.putAddr6(b, off + P.IP6_DST, 6, raddr);
      this.putAddr6(b, q + P.IP6_SRC, 6, raddr);
      P.put16(b, ql4 + P.L4_SPORT, dports >>> 16);
      if (fwd === L.FWD_FULLNAT) {
        this.putAddr6(b, off + P.IP6_SRC, 9, lo3);
        this.putAddr6(b, q + P.IP6_DST, 9, lo3);
        P.put16(b, ql4 + P.L4_DPORT, dports & 0xffff);
      }
    } else {
      this.countOut(rsSlot, svcSlot, totlen);
      this.putAddr6(b, off + P.IP6_SRC, 3, lo1);
      this.putAddr6(b, q + P.IP6_DST, 3, lo1);
      P.put16(b, ql4 + P.L4_DPORT, cports & 0xffff);
      if (fwd === L.FWD_FULLNAT) {
        this.putAddr6(b, off + P.IP6_DST, 0, lo0);
        this.putAddr6(b, q + P.IP6_SRC, 0, lo0);
        P.put16(b, ql4 + P.L4_SPORT, cports >>> 16);
      }
      if (pp !== 0) this.proxyQuoted(b, ql4, end, pp, ppSeq);
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
  private proxyQuoted(b: Uint8Array, ql4: number, end: number, pp: number, s: number): void {
    if (ql4 + P.TCP_SEQ + 4 > end) return;
    P.put32(b, ql4 + P.TCP_SEQ, toClientSeq(P.u32(b, ql4 + P.TCP_SEQ), s, ppLength(pp), (pp & L.PP_ACKED) !== 0));
  }

  /** Writes an IPv6 address at b[at]: thi[hiIdx, hiIdx+3) then the low word. */
  private putAddr6(b: Uint8Array, at: number, hiIdx: number, lo: number): void {
    const w = this.thi;
    for (let i = 0; i < 3; i++) P.put32(b, at + 4 * i, w[hiIdx + i]!);
    P.put32(b, at + 12, lo);
  }

  /** ICMPv6 to a VIP: an echo request is answered in place (when configured); the rest is not ours. */
  private icmp6ToVip(b: Uint8Array, off: number, ic: number, totlen: number): number {
    if (b[ic + P.ICMP_TYPE] !== P.ICMP6_ECHO_REQUEST || !this.snapshot.answerPing) return this.drop(Drop.IcmpIgnored);
    const l4len = off + totlen - ic;
    if (P.sum16(b, ic, l4len, P.pseudoSum6(b, off + P.IP6_SRC, off + P.IP6_DST, P.IPPROTO_ICMPV6, l4len)) !== 0xffff) return this.drop(Drop.BadChecksum);
    if (!this.mayAnswer(L.GEN_ECHO, -1, 0)) return DROP;
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

  /** IPv6 header at out[o]: traffic class/flow 0, hop limit 64. */
  private ip6Header(o: number, plen: number, next: number): void {
    const x = this.out;
    this.plainVnet(o);
    P.put32(x, o, 0x60000000);
    P.put16(x, o + P.IP6_PLEN, plen);
    x[o + P.IP6_NEXT] = next;
    x[o + P.IP6_HOPS] = 64;
  }

  /**
   * An ICMPv6 error about the packet at b[off] to its source, from its destination (the VIP):
   * port unreachable or packet too big (`info` = the MTU). It quotes as much of the packet as keeps
   * the error within the IPv6 minimum MTU (RFC 4443 §2.4).
   */
  private icmp6Generate(b: Uint8Array, off: number, totlen: number, type: number, code: number, info: number): number {
    const o = this.outOff;
    const x = this.out;
    const quoted = Math.min(totlen, P.IPV6_MIN_MTU - P.IP6_HLEN - P.ICMP_HLEN, this.outEnd - o - P.IP6_HLEN - P.ICMP_HLEN);
    const plen = P.ICMP_HLEN + quoted;
    this.ip6Header(o, plen, P.IPPROTO_ICMPV6);
    for (let i = 0; i < 16; i++) {
      x[o + P.IP6_SRC + i] = b[off + P.IP6_DST + i]!;
      x[o + P.IP6_DST + i] = b[off + P.IP6_SRC + i]!;
    }
    const ic = o + P.IP6_HLEN;
    x[ic + P.ICMP_TYPE] = type;
    x[ic + P.ICMP_CODE] = code;
    P.put16(x, ic + P.ICMP_CSUM, 0);
    P.put32(x, ic + 4, info);
    this.copyOut(b, off, ic + P.ICMP_HLEN, quoted);
    P.put16(x, ic + P.ICMP_CSUM, P.checksum(x, ic, plen, P.pseudoSum6(x, o + P.IP6_SRC, o + P.IP6_DST, P.IPPROTO_ICMPV6, plen)));
    this.outLen = P.IP6_HLEN + plen;
    return REPLY;
  }

  /** "Nothing here" to the client: ICMP(v6) port unreachable from the VIP. */
  private unreachable(b: Uint8Array, off: number, totlen: number, from: number, to: number): number {
    return this.v6 ? this.icmp6Generate(b, off, totlen, P.ICMP6_DST_UNREACH, P.ICMP6_PORT_UNREACH, 0) : this.icmpUnreach(b, off, totlen, from, to);
  }

  /**
   * IPIP (ipvsadm -i): the packet, VIP and ports unchanged, inside an outer IPv4 header from
   * dataplane.tunnelSource to the real server, built in `out`. The outer header leaves DF clear,
   * so a full-size inner packet is fragmented on the way rather than dropped. A partial inner
   * checksum stays partial (its start moves by the outer header); a GSO super-packet cannot be
   * described to the device once encapsulated (virtio has no IPIP GSO type), so it is cut into
   * its segments here, each with a partial checksum the device completes.
   */
  private encapsulate(b: Uint8Array, off: number, totlen: number, raddr: number, copyDf: boolean): number {
    const v6 = this.v6;
    const t6 = this.snapshot.tunnelSrc6;
    if (v6 ? (t6[0]! | t6[1]! | t6[2]! | t6[3]!) === 0 : this.snapshot.tunnelSrc === 0) return this.drop(Drop.Truncated);
    const df = copyDf && !v6 ? P.u16(b, off + P.IP_FRAG) & P.IP_DF : 0;
    if (this.gsoSize !== 0) return this.encapsulateSegments(b, off, totlen, raddr, df);
    const o = this.outOff;
    const ohl = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
    const len = totlen + ohl;
    if ((v6 ? totlen : len) > 65535 || o + len > this.outEnd) return this.drop(Drop.Truncated);
    if (v6) this.outerHeader6(o, totlen, raddr);
    else this.outerHeader(o, len, b[off + 1]!, raddr, df);
    if (this.vnet !== 0) {
      this.plainVnet(o);
      if (this.partial) {
        const h = off - P.VNET_HLEN;
        const x = this.out;
        x[o - P.VNET_HLEN + P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
        P.putLe16(x, o - P.VNET_HLEN + P.VNET_CSUM_START, P.le16(b, h + P.VNET_CSUM_START) + ohl);
        P.putLe16(x, o - P.VNET_HLEN + P.VNET_CSUM_OFFSET, P.le16(b, h + P.VNET_CSUM_OFFSET));
      }
    }
    this.copyOut(b, off, o + ohl, totlen);
    this.outLen = len;
    return REPLY;
  }

  /** The outer ip6ip6 header at out[o]: tunnelSource6 → the real server (hi[6..8] + lo). */
  private outerHeader6(o: number, plen: number, lo: number): void {
    const x = this.out;
    P.put32(x, o, 0x60000000);
    P.put16(x, o + P.IP6_PLEN, plen);
    x[o + P.IP6_NEXT] = P.IPPROTO_IPV6;
    x[o + P.IP6_HOPS] = 64;
    const src = this.snapshot.tunnelSrc6;
    for (let i = 0; i < 4; i++) P.put32(x, o + P.IP6_SRC + 4 * i, src[i]!);
    for (let i = 0; i < 3; i++) P.put32(x, o + P.IP6_DST + 4 * i, this.hi[6 + i]!);
    P.put32(x, o + P.IP6_DST + 12, lo);
  }

  /** The outer IPIP header at out[o]: tunnelSource → raddr, DF as given (the inner's, or clear). */
  private outerHeader(o: number, len: number, tos: number, raddr: number, df: number): void {
    const x = this.out;
    x[o] = 0x45;
    x[o + 1] = tos; // TOS of the inner packet
    P.put16(x, o + P.IP_TOTLEN, len);
    P.put16(x, o + P.IP_ID, this.ipId);
    this.ipId = (this.ipId + 1) & 0xffff;
    P.put16(x, o + P.IP_FRAG, df);
    x[o + P.IP_TTL] = 64;
    x[o + P.IP_PROTO] = 4; // IPPROTO_IPIP
    P.put16(x, o + P.IP_CSUM, 0);
    P.put32(x, o + P.IP_SRC, this.snapshot.tunnelSrc);
    P.put32(x, o + P.IP_DST, raddr);
    P.put16(x, o + P.IP_CSUM, P.checksum(x, o, P.IP_MIN_HLEN, 0));
  }

  /**
   * A TCPv4 GSO super-packet for the tunnel: the device's own segmentation (tcp_gso_segment)
   * done here — per segment the inner IP length, ID and checksum, the TCP sequence number, FIN
   * and PSH on the last segment only, CWR on the first only — each in its own outer header.
   */
  private encapsulateSegments(b: Uint8Array, off: number, totlen: number, raddr: number, df: number): number {
    const g = this.gsoSize;
    const v6 = this.v6;
    // The inner network header (IPv6: up to the TCP header, csum_start) and the outer one.
    const ihl = v6 ? P.le16(b, off - P.VNET_HLEN + P.VNET_CSUM_START) : (b[off]! & 15) << 2;
    const ohl = v6 ? P.IP6_HLEN : P.IP_MIN_HLEN;
    const l4 = off + ihl;
    const hl = ihl + ((b[l4 + P.TCP_OFF]! >> 4) << 2);
    const payload = totlen - hl;
    const n = payload <= 0 ? 1 : Math.ceil(payload / g);
    const V = this.vnet;
    const per = V + ohl + hl + g;
    let o = this.outOff;
    if (n > MAX_OUT || o - V + n * per > this.outEnd) return this.drop(Drop.Truncated);
    const x = this.out;
    const seq0 = P.u32(b, l4 + P.TCP_SEQ);
    const id0 = v6 ? 0 : P.u16(b, off + P.IP_ID);
    const flags = b[l4 + P.TCP_FLAGS]!;
    const isrc = v6 ? 0 : P.u32(b, off + P.IP_SRC);
    const idst = v6 ? 0 : P.u32(b, off + P.IP_DST);
    const tos = b[off + 1]!;
    for (let k = 0; k < n; k++) {
      const plen = k === n - 1 ? payload - k * g : g;
      const ilen = hl + (plen > 0 ? plen : 0);
      if (v6) this.outerHeader6(o, ilen, raddr);
      else this.outerHeader(o, ilen + P.IP_MIN_HLEN, tos, raddr, df);
      const h = o - V;
      for (let i = h; i < o; i++) x[i] = 0;
      x[h + P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
      P.putLe16(x, h + P.VNET_CSUM_START, ohl + ihl);
      P.putLe16(x, h + P.VNET_CSUM_OFFSET, P.TCP_CSUM);
      const io = o + ohl;
      this.copyOut(b, off, io, hl);
      if (plen > 0) this.copyOut(b, off + hl + k * g, io + hl, plen);
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
      const ps = v6 ? P.pseudoSum6(x, io + P.IP6_SRC, io + P.IP6_DST, P.IPPROTO_TCP, ilen - ihl) : P.pseudoSum(isrc, idst, P.IPPROTO_TCP, ilen - ihl);
      P.put16(x, t + P.TCP_CSUM, P.fold16(ps));
      this.outOffs[k] = h;
      this.outLens[k] = V + ohl + ilen;
      o += per;
    }
    this.outCount = n;
    this.outLen = this.outLens[0]! - V;
    return REPLY;
  }

  /** drop_packet's countdown (kernel drop_counter), this worker's own. */
  private dropCounter = 0;

  /** xorshift32 state for full-NAT port choice and the global limit's random cost (no Math.random per packet). */
  private rnd = 0x9e3779b9;
  private readonly rndSeed = new Int32Array(1);

  /**
   * Full-NAT: picks a pool address (by client hash) and a free port on it, so the server→client
   * key (RIP:rport → laddr:lport) is unique. First FULLNAT_PROBES random ports (with few ports
   * taken, the first nearly always fits), then every port of the range once, from a random start:
   * a flow is refused only when no port is free. A probe is one out-key lookup under its bucket
   * lock — no entry is allocated until a port looks free; a race lost on insert goes on with the
   * next port. A (pool address, server) found full is remembered for FULLNAT_FULL_MS, so a flood
   * of new flows at a full pool costs one memo check each instead of a scan of up to 64 k ports.
   */
  private insertFullnat(proto: number, caddr: number, cports: number, vaddr: number, raddr: number, rport: number, rs: number, svcSlot: number, pp: number, ppSeq: number): number {
    const s = this.snapshot;
    const v6 = this.v6;
    const pool = v6 ? s.fullnatAddrs6 : s.fullnatAddrs;
    if (pool.length === 0) return -2;
    const min = s.fullnatPortMin;
    const range = s.fullnatPortMax - min + 1;
    const hi = this.hi;
    let laddr: number;
    if (v6) {
      const p = (((caddr ^ cports) >>> 0) % (pool.length >> 2)) << 2;
      for (let i = 0; i < 3; i++) hi[9 + i] = pool[p + i]!;
      laddr = pool[p + 3]!;
    } else {
      laddr = pool[((caddr ^ cports) >>> 0) % pool.length]!;
    }
    const memo = this.fullMemoSlot(proto, laddr, raddr, rport);
    const tag = this.fullMemoTag;
    if (this.fullTags[memo] === tag && ((this.fullUntil[memo]! - this.now) | 0) > 0) return -2;
    let x = this.rnd;
    const probes = range < FULLNAT_PROBES * 4 ? 0 : FULLNAT_PROBES;
    let e = -2;
    for (let i = 0; i < probes && e === -2; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      e = this.tryPort(proto, caddr, cports, vaddr, raddr, rport, min + ((x >>> 0) % range), laddr, rs, svcSlot, pp, ppSeq);
    }
    if (e === -2) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      let lport = min + ((x >>> 0) % range);
      for (let k = 0; k < range && e === -2; k++) {
        e = this.tryPort(proto, caddr, cports, vaddr, raddr, rport, lport, laddr, rs, svcSlot, pp, ppSeq);
        if (++lport > s.fullnatPortMax) lport = min;
      }
    }
    this.rnd = x;
    if (e === -2) {
      this.fullTags[memo] = tag;
      this.fullUntil[memo] = (this.now + FULLNAT_FULL_MS) | 0;
    }
    return e;
  }

  /** Inserts the flow with pool port lport if that port looks free for this server; −2 when taken. */
  private tryPort(proto: number, caddr: number, cports: number, vaddr: number, raddr: number, rport: number, lport: number, laddr: number, rs: number, svcSlot: number, pp: number, ppSeq: number): number {
    const t = this.table;
    const dports = (rport << 16) | lport;
    const b = t.bucketOut(proto, raddr, dports, laddr, this.hi);
    t.lockBucket(b);
    const taken = t.findOut(b, proto, raddr, dports, laddr, this.hi) >= 0;
    t.unlockBucket(b);
    if (taken) return -2;
    return t.insert(proto, caddr, cports, vaddr, raddr, dports, laddr, L.FWD_FULLNAT, rs, svcSlot, this.now, 0, 0, 0, this.hi, pp, ppSeq);
  }

  /** Memo of (pool address, server) pairs found without a free port: keyed hash tag and until when. */
  private readonly fullTags = new Int32Array(FULLNAT_MEMO_SLOTS);
  private readonly fullUntil = new Int32Array(FULLNAT_MEMO_SLOTS);
  private fullMemoTag = 0;

  /** The memo slot of (proto, pool address, server address and port); sets fullMemoTag (never 0). */
  private fullMemoSlot(proto: number, laddr: number, raddr: number, rport: number): number {
    const h = this.peerHash;
    h.begin(this.peerKey[0]!, this.peerKey[1]!);
    h.word(laddr);
    h.word(raddr);
    h.word(rport);
    if (this.v6) for (let i = 6; i < 12; i++) h.word(this.hi[i]!);
    const v = h.end((this.v6 ? 37 << 24 : 13 << 24) | (proto & 0xff));
    this.fullMemoTag = (Math.imul(v, 0x9e3779b1) | 1) | 0;
    return (v >>> 0) & (FULLNAT_MEMO_SLOTS - 1);
  }

  private schedule(svc: CompiledService, si: number, caddr: number, cport: number, vaddr: number, vport: number): number {
    const s = this.schedulers[si];
    if (s === undefined) return -1; // the kernel asks the scheduler even with an empty list
    const lock = svc.slot * L.SCHED_WORDS + L.SCHED_LOCK;
    const owner = this.table.owner;
    while (Atomics.compareExchange(this.sched, lock, 0, owner) !== 0) {
      /* spin: one scheduling decision */
    }
    const inp = this.input;
    inp.caddr = caddr;
    inp.cport = cport;
    inp.vaddr = vaddr;
    inp.vport = vport;
    inp.now = this.now;
    const di = s.schedule(svc, this.sched, svc.slot * L.SCHED_WORDS + L.SCHED_STATE, this.table.rs, inp);
    Atomics.store(this.sched, lock, 0);
    return di;
  }

  private outbound(
    b: Uint8Array,
    off: number,
    l4: number,
    totlen: number,
    proto: number,
    saddr: number,
    sport: number,
    daddr: number,
    dport: number,
    tcpFlags: number,
  ): number {
    const t = this.table;
    const hi = this.hi;
    const dports = (sport << 16) | dport;
    const bucket = t.bucketOut(proto, saddr, dports, daddr, hi);
    t.lockBucket(bucket);
    const e = t.findOut(bucket, proto, saddr, dports, daddr, hi);
    if (e < 0) {
      t.unlockBucket(bucket);
      if (this.ring !== null && this.snapshot.adopt) return this.park(b, off, totlen);
      return this.drop(Drop.NoConnection);
    }
    const a = t.i32;
    const o = t.base(e);
    if (a[o + L.E_FLAGS]! & L.F_SHADOW && t.adopt(e, this.now)) {
      this.counters[L.C_ADOPTED]!++;
      this.pushSync(e);
    }
    if (t.touch(e, DIR_OUTPUT, tcpFlags, this.now)) this.pushSync(e);
    const vaddr = a[o + L.E_VADDR]!;
    const cportsE = a[o + L.E_CPORTS]!;
    const vport = cportsE & 0xffff;
    const caddr = a[o + L.E_CADDR]!;
    const fwd = a[o + L.E_FLAGS]! & L.FWD_MASK;
    const rsSlot = a[o + L.E_RS]!;
    const svcSlot = a[o + L.E_SVC]!;
    const v6 = this.v6;
    // IPv6: the client's and the VIP's high words go to hi[0..5] (the out-key used 6..11).
    if (v6) for (let i = 0; i < 6; i++) hi[i] = a[o + L.E_CADDR_HI + i]!;
    t.unlockBucket(bucket);
    if (fwd === L.FWD_FULLNAT) {
      // Full-NAT reply: destination pool:lport becomes the client's address and port again.
      if (v6) this.rewrite6(b, off, l4, proto, P.IP6_DST, caddr, 0, dport, cportsE >>> 16);
      else this.rewrite(b, off, l4, proto, P.IP_DST, daddr, dport, caddr, cportsE >>> 16);
      if ((proto & 0xff) === P.IPPROTO_TCP) {
        const pp = a[o + L.E_PP]!;
        if (pp !== 0) this.proxyOut(b, l4, e, o, pp);
      }
    }
    this.countOut(rsSlot, svcSlot, totlen);
    // Reply: source RIP:rport becomes VIP:vport.
    if (v6) this.rewrite6(b, off, l4, proto, P.IP6_SRC, vaddr, 3, sport, vport);
    else this.rewrite(b, off, l4, proto, P.IP_SRC, saddr, sport, vaddr, vport);
    if ((proto & 0xff) === P.IPPROTO_SCTP) sctpSeal(b, l4, off + totlen);
    return FORWARD;
  }

  /**
   * Server→client segment of a flow with a PROXY protocol header: acknowledgement and SACK blocks
   * back into the client's numbering (lb/proxy-protocol.ts). The first ACK that covers the whole
   * header makes every later shift a plain subtraction, and is synced (a node adopting the flow
   * must know it too).
   */
  private proxyOut(b: Uint8Array, l4: number, e: number, o: number, pp: number): void {
    const a = this.table.i32;
    const s = a[o + L.E_PP_SEQ]!;
    const len = ppLength(pp);
    let acked = (pp & L.PP_ACKED) !== 0;
    if (!acked && b[l4 + P.TCP_FLAGS]! & TCPF_ACK && ((P.u32(b, l4 + P.TCP_ACK) - s) | 0) >= len) {
      acked = true;
      Atomics.or(a, o + L.E_PP, L.PP_ACKED);
      this.pushSync(e);
    }
    unshiftAck(b, l4, s, len, acked, this.partial);
  }

  /** Server → client counters of a real server and its service (ip_vs_out_stats). */
  private countOut(rsSlot: number, svcSlot: number, bytes: number): void {
    this.lastRs = rsSlot;
    this.lastSvc = svcSlot;
    const c = this.counters;
    const rb = L.rsCounterBase(rsSlot);
    const sb = L.svcCounterBase(this.maxRealServers, svcSlot);
    c[rb + L.RSC_OUTPKTS]!++;
    c[rb + L.RSC_OUTBYTES] = c[rb + L.RSC_OUTBYTES]! + bytes;
    c[sb + L.RSC_OUTPKTS]!++;
    c[sb + L.RSC_OUTBYTES] = c[sb + L.RSC_OUTBYTES]! + bytes;
  }

  private countIn(rsSlot: number, svcSlot: number, bytes: number): void {
    this.lastRs = rsSlot;
    this.lastSvc = svcSlot;
    const c = this.counters;
    const rb = L.rsCounterBase(rsSlot);
    const sb = L.svcCounterBase(this.maxRealServers, svcSlot);
    c[rb + L.RSC_INPKTS]!++;
    c[rb + L.RSC_INBYTES] = c[rb + L.RSC_INBYTES]! + bytes;
    c[sb + L.RSC_INPKTS]!++;
    c[sb + L.RSC_INBYTES] = c[sb + L.RSC_INBYTES]! + bytes;
  }

  /**
   * Rewrites one endpoint (source: ipField IP_SRC with L4_SPORT; destination: IP_DST with
   * L4_DPORT) from addr:port to addr2:port2, updating the IP and TCP/UDP checksums incrementally.
   */
  private rewrite(b: Uint8Array, off: number, l4: number, proto: number, ipField: number, addr: number, port: number, addr2: number, port2: number): void {
    P.put32(b, off + ipField, addr2);
    P.fix32(b, off + P.IP_CSUM, addr, addr2);
    P.put16(b, l4 + (ipField === P.IP_SRC ? P.L4_SPORT : P.L4_DPORT), port2);
    if (this.partial) {
      // The field holds the pseudo-header sum: the address is in it, the port is not.
      P.fixPartial32(b, l4 + (proto === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM), addr, addr2);
    } else if (proto === P.IPPROTO_TCP) {
      P.fix32(b, l4 + P.TCP_CSUM, addr, addr2);
      P.fix16(b, l4 + P.TCP_CSUM, port, port2);
    } else if (proto === P.IPPROTO_UDP) {
      this.fixUdp(b, l4, addr, addr2, port, port2);
    } // SCTP: its CRC32c covers the ports and is recomputed once both endpoints are rewritten (sctpSeal).
  }

  /**
   * IPv6 rewrite of one endpoint: the 16-byte address at ipField (IP6_SRC/IP6_DST) becomes
   * hi[hiIdx, hiIdx+3) + lo, the port becomes port2; the TCP/UDP checksum follows word by word
   * (IPv6 has no header checksum; a partial checksum only follows the address).
   */
  private rewrite6(b: Uint8Array, off: number, l4: number, proto: number, ipField: number, lo: number, hiIdx: number, port: number, port2: number): void {
    if ((proto & 0xff) === P.IPPROTO_SCTP) {
      // CRC32c covers no addresses; the ports are in it and sctpSeal recomputes it afterwards.
      for (let i = 0; i < 4; i++) P.put32(b, off + ipField + 4 * i, i < 3 ? this.hi[hiIdx + i]! : lo);
      P.put16(b, l4 + (ipField === P.IP6_SRC ? P.L4_SPORT : P.L4_DPORT), port2);
      return;
    }
    const isTcp = (proto & 0xff) === P.IPPROTO_TCP;
    const co = l4 + (isTcp ? P.TCP_CSUM : P.UDP_CSUM);
    let c = P.u16(b, co);
    // An IPv6 UDP checksum of 0 is invalid, but it is not ours to invent one: left as the kernel leaves it.
    const keepZero = !isTcp && !this.partial && c === 0;
    if (this.partial) c = ~c & 0xffff; // work on the sum; complemented back below
    const hi = this.hi;
    for (let i = 0; i < 4; i++) {
      const at = off + ipField + 4 * i;
      const from = P.u32(b, at);
      const to = i < 3 ? hi[hiIdx + i]! : lo;
      if (from === to) continue;
      P.put32(b, at, to);
      c = P.csumReplace32(c, from, to);
    }
    P.put16(b, l4 + (ipField === P.IP6_SRC ? P.L4_SPORT : P.L4_DPORT), port2);
    if (keepZero) return;
    if (this.partial) c = ~c & 0xffff;
    else c = P.csumReplace16(c, port, port2);
    P.put16(b, co, !this.partial && !isTcp && c === 0 ? 0xffff : c);
  }

  /**
   * Reads the virtio header of a packet that carries offload metadata. A partial checksum must
   * point at the TCP/UDP checksum field (anything else — ICMP, odd offsets — is completed here in
   * software and the flag cleared); GSO must be TCPv4 with a partial TCP checksum. False = drop.
   */
  private offloadMeta(b: Uint8Array, off: number, ihl: number, totlen: number, proto: number): boolean {
    const h = off - P.VNET_HLEN;
    const gsoType = b[h + P.VNET_GSO_TYPE]! & ~P.VNET_GSO_ECN;
    const needs = (b[h + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM) !== 0;
    const start = P.le16(b, h + P.VNET_CSUM_START);
    const field = P.le16(b, h + P.VNET_CSUM_OFFSET);
    const expected = proto === P.IPPROTO_TCP ? P.TCP_CSUM : proto === P.IPPROTO_UDP ? P.UDP_CSUM : -1;
    if (gsoType !== P.VNET_GSO_NONE) {
      const size = P.le16(b, h + P.VNET_GSO_SIZE);
      if (gsoType !== (this.v6 ? P.VNET_GSO_TCPV6 : P.VNET_GSO_TCPV4) || proto !== P.IPPROTO_TCP || !needs || start !== ihl || field !== expected || size === 0) return false;
      this.gsoSize = size;
      this.partial = true;
      return true;
    }
    if (!needs) return true;
    if (proto === P.IPPROTO_SCTP) return false; // a partial CRC32c is no Internet checksum (and TUN never leaves one: sctp.ts)
    if (start === ihl && field === expected) {
      this.partial = true;
      return true;
    }
    if (start + field + 2 > totlen || start < ihl) return false;
    P.completeChecksum(b, off + start, off + totlen, off + start + field, proto === P.IPPROTO_UDP);
    b[h + P.VNET_FLAGS] = b[h + P.VNET_FLAGS]! & ~P.VNET_F_NEEDS_CSUM;
    return true;
  }

  /** Finishes the current packet's partial checksum in software and clears its flag. */
  private completePartial(b: Uint8Array, off: number): void {
    const h = off - P.VNET_HLEN;
    const start = P.le16(b, h + P.VNET_CSUM_START);
    const field = P.le16(b, h + P.VNET_CSUM_OFFSET);
    const totlen = this.v6 ? P.IP6_HLEN + P.u16(b, off + P.IP6_PLEN) : P.u16(b, off + P.IP_TOTLEN);
    P.completeChecksum(b, off + start, off + totlen, off + start + field, field === P.UDP_CSUM);
    b[h + P.VNET_FLAGS] = b[h + P.VNET_FLAGS]! & ~P.VNET_F_NEEDS_CSUM;
    this.partial = false;
  }

  /** Writes the virtio header of a generated packet at `o` (its IP header): no offload. */
  private plainVnet(o: number): void {
    if (this.vnet === 0) return;
    const x = this.out;
    for (let i = o - P.VNET_HLEN; i < o; i++) x[i] = 0;
  }

  /** Copies b[from, from+len) to out[to] (memmove when they are one buffer, as in workers). */
  private copyOut(b: Uint8Array, from: number, to: number, len: number): void {
    const x = this.out;
    if (b === x) x.copyWithin(to, from, from + len);
    else for (let i = 0; i < len; i++) x[to + i] = b[from + i]!;
  }

  /** UDP checksum 0 means "none" and stays 0; a computed 0 is sent as 0xffff (RFC 768). */
  private fixUdp(b: Uint8Array, l4: number, fromAddr: number, toAddr: number, fromPort: number, toPort: number): void {
    const o = l4 + P.UDP_CSUM;
    let c = P.u16(b, o);
    if (c === 0) return;
    c = P.csumReplace32(c, fromAddr, toAddr);
    c = P.csumReplace16(c, fromPort, toPort);
    P.put16(b, o, c === 0 ? 0xffff : c);
  }

  // ── generated packets ────────────────────────────────────────────────────────────────────
  /**
   * Whether an answer of `kind` (L.GEN_*) may go back to the current packet's source (saddr; for
   * IPv6 pa[0..3]). Not to a source the answer would loop through or reflect off: one inside the
   * VIP ranges or the full-NAT pool comes straight back into the device (a RST between two VIPs
   * answered itself for ever, 300 k packets/s from one spoofed packet), and multicast, broadcast,
   * loopback, unspecified and reserved sources are never a host that sent it (the kernel's
   * __icmp_send and tcp_v4_send_reset refuse them too) — dropped, unanswerable_source. Then the
   * limits, for the kinds genKinds names (withinLimits). True: `reason` (≥ 0) is counted and the
   * caller builds the answer; false: the packet is counted as dropped here.
   */
  private mayAnswer(kind: number, reason: number, saddr: number): boolean {
    const c = this.counters;
    const at = L.C_GEN_BASE + kind * L.GEN_RESULTS;
    if (this.v6 ? this.unanswerable6() : this.unanswerable4(saddr)) {
      c[at + L.GEN_BAD_DESTINATION]!++;
      c[L.C_DROP_BASE + Drop.UnanswerableSource]!++;
      this.lastDrop = Drop.UnanswerableSource;
      return false;
    }
    if ((this.snapshot.genKinds & (1 << kind)) !== 0 && !this.withinLimits(saddr)) {
      c[at + L.GEN_RATE_LIMITED]!++;
      c[L.C_DROP_BASE + Drop.RateLimited]!++;
      this.lastDrop = Drop.RateLimited;
      return false;
    }
    c[at + L.GEN_SENT]!++;
    if (reason >= 0) c[L.C_DROP_BASE + reason]!++;
    this.lastDrop = reason;
    return true;
  }

  /**
   * 0.0.0.0/8 (this network, RFC 1122), 127/8, 224/4 multicast (link-local 224.0.0/24 included),
   * 240/4 reserved with 255.255.255.255 (limited broadcast); the VIP ranges and the pool. A
   * subnet's directed broadcast is not knowable here: it is a route the kernel would not send here.
   */
  private unanswerable4(a: number): boolean {
    const top = a >>> 24;
    if (top === 0 || top === 127 || top >= 224) return true;
    const s = this.snapshot;
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
  private unanswerable6(): boolean {
    const pa = this.pa;
    const w0 = pa[0]!;
    if (w0 >>> 24 === 0xff) return true;
    if (w0 === 0 && pa[1] === 0 && (pa[2] === 0 || pa[2] === 0xffff)) return true;
    const s = this.snapshot;
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
  private withinLimits(saddr: number): boolean {
    const s = this.snapshot;
    const now = this.now;
    const perSec = s.genPerSec;
    if (perSec > 0 && this.genCredit <= 0) {
      let delta = (now - this.genStamp) | 0;
      if (this.genCredit < 0 || delta < 0 || delta > 1000) delta = 1000; // first use, or the clock wrapped
      if (delta < 20) return false;
      const incr = Math.floor((perSec * delta) / 1000);
      if (incr === 0) return false;
      this.genStamp = now;
      this.genCredit = incr < s.genBurst ? incr : s.genBurst;
    }
    const iv = s.genPeerMs;
    if (iv > 0) {
      const i = this.peerSlot(saddr) << 1;
      const pb = this.peerBuckets;
      const cap = iv * s.genPeerBurst;
      let tokens = pb[i]!;
      if (tokens < 0) tokens = cap; // a source never answered: a full burst (inet_getpeer: rate_last 60 s ago)
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
      let x = this.rnd;
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      this.rnd = x;
      this.genCredit -= (x >>> 0) % 3;
      if (this.genCredit < 0) this.genCredit = 0;
    }
    return true;
  }

  /** The per-source bucket of the current packet's source: a keyed hash (not steerable from outside). */
  private peerSlot(saddr: number): number {
    const h = this.peerHash;
    h.begin(this.peerKey[0]!, this.peerKey[1]!);
    if (this.v6) {
      const pa = this.pa;
      h.word(pa[0]!);
      h.word(pa[1]!);
      h.word(pa[2]!);
      h.word(pa[3]!);
      return h.end(16 << 24) & (GEN_PEER_SLOTS - 1);
    }
    h.word(saddr);
    return h.end(4 << 24) & (GEN_PEER_SLOTS - 1);
  }

  private ipHeader(o: number, totlen: number, proto: number, src: number, dst: number): void {
    const x = this.out;
    this.plainVnet(o);
    x[o] = 0x45;
    x[o + 1] = 0;
    P.put16(x, o + P.IP_TOTLEN, totlen);
    P.put16(x, o + P.IP_ID, this.ipId);
    this.ipId = (this.ipId + 1) & 0xffff;
    P.put16(x, o + P.IP_FRAG, 0x4000); // DF
    x[o + P.IP_TTL] = 64;
    x[o + P.IP_PROTO] = proto;
    P.put16(x, o + P.IP_CSUM, 0);
    P.put32(x, o + P.IP_SRC, src);
    P.put32(x, o + P.IP_DST, dst);
    P.put16(x, o + P.IP_CSUM, P.checksum(x, o, P.IP_MIN_HLEN, 0));
  }

  /**
   * ICMP destination unreachable (port unreachable unless `code` says otherwise; for
   * fragmentation needed, `mtu` is the next-hop MTU, RFC 1191) about the packet at b[off]: its IP
   * header plus 8 bytes (RFC 792).
   */
  private icmpUnreach(b: Uint8Array, off: number, totlen: number, from: number, to: number, code = P.ICMP_PORT_UNREACH, mtu = 0): number {
    const ihl = (b[off]! & 15) << 2;
    const quoted = Math.min(totlen, ihl + 8);
    const o = this.outOff;
    const x = this.out;
    const len = P.IP_MIN_HLEN + P.ICMP_HLEN + quoted;
    this.ipHeader(o, len, P.IPPROTO_ICMP, from, to);
    const ic = o + P.IP_MIN_HLEN;
    x[ic + P.ICMP_TYPE] = P.ICMP_DEST_UNREACH;
    x[ic + P.ICMP_CODE] = code;
    P.put16(x, ic + P.ICMP_CSUM, 0);
    P.put32(x, ic + 4, mtu & 0xffff);
    for (let i = 0; i < quoted; i++) x[ic + P.ICMP_HLEN + i] = b[off + i]!;
    P.put16(x, ic + P.ICMP_CSUM, P.checksum(x, ic, P.ICMP_HLEN + quoted, 0));
    this.outLen = len;
    return REPLY;
  }

  /** TCP RST answering the segment at b[off] (RFC 9293 §3.10.7.1, "reset generation"). */
  private tcpReset(b: Uint8Array, off: number, l4: number, totlen: number, flags: number): number {
    const o = this.outOff;
    const x = this.out;
    const v6 = this.v6;
    const src = v6 ? 0 : P.u32(b, off + P.IP_DST);
    const dst = v6 ? 0 : P.u32(b, off + P.IP_SRC);
    if (v6) {
      this.ip6Header(o, 20, P.IPPROTO_TCP);
      for (let i = 0; i < 16; i++) {
        x[o + P.IP6_SRC + i] = b[off + P.IP6_DST + i]!;
        x[o + P.IP6_DST + i] = b[off + P.IP6_SRC + i]!;
      }
    } else {
      this.ipHeader(o, 40, P.IPPROTO_TCP, src, dst);
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
      const seglen = totlen - (l4 - off) - hl + (flags & TCPF_SYN ? 1 : 0) + (flags & TCPF_FIN ? 1 : 0);
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
    this.outLen = (v6 ? P.IP6_HLEN : P.IP_MIN_HLEN) + 20;
    return REPLY;
  }

  /** ICMP to a VIP: echo requests are answered (when configured), errors are not ours yet. */
  private icmpToVip(b: Uint8Array, off: number, ihl: number, totlen: number, saddr: number, daddr: number): number {
    const ic = off + ihl;
    if (b[ic + P.ICMP_TYPE] !== P.ICMP_ECHO || !this.snapshot.answerPing) return this.drop(Drop.IcmpIgnored);
    if (P.sum16(b, ic, totlen - ihl, 0) !== 0xffff) return this.drop(Drop.BadChecksum);
    if (!this.mayAnswer(L.GEN_ECHO, -1, saddr)) return DROP;
    // Turn the request around in place: swap addresses, type 8 → 0.
    P.put32(b, off + P.IP_SRC, daddr);
    P.put32(b, off + P.IP_DST, saddr);
    b[off + P.IP_TTL] = 64;
    P.put16(b, off + P.IP_CSUM, 0);
    P.put16(b, off + P.IP_CSUM, P.checksum(b, off, ihl, 0));
    b[ic + P.ICMP_TYPE] = P.ICMP_ECHOREPLY;
    P.fix16(b, ic + P.ICMP_CSUM, P.ICMP_ECHO << 8, P.ICMP_ECHOREPLY << 8);
    return FORWARD;
  }
}
