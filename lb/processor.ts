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
 * IPVS edge behaviour reproduced (../shared/ipvs-semantics.md §2, §3):
 *  - no eligible real server → ICMP port unreachable to the client, no entry (ip_vs_leave);
 *  - a VIP port without a service → TCP RST / ICMP port unreachable (the host never answers);
 *  - only a TCP segment with SYN and without RST creates a connection; other segments with no
 *    entry get a RST, as the kernel's local stack would answer them;
 *  - a SYN that hits an entry in TIME_WAIT starts a new connection (conn_reuse_mode=1);
 *  - weight 0 keeps existing flows: only scheduling looks at weights;
 *  - SCTP (./sctp.ts, sctp_conn_schedule): only a packet whose first chunk is INIT creates an
 *    entry, an INIT on an entry in CLOSED starts a new one, other chunks without an entry are
 *    dropped (counted); the CRC32c is checked on arrival and recomputed after the rewrite.
 */
import * as L from '../conntrack/layout';
import { Drop } from '../conntrack/layout';
import { ConnTable } from '../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCP_TIME_WAIT, TCPF_ACK, TCPF_CWR, TCPF_FIN, TCPF_PSH, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import { SCTP_EV_INIT, SCTP_S_CLOSED } from '../conntrack/sctp-state';
import { getScheduler } from '../schedulers/registry';
import type { SchedInput, Scheduler } from '../schedulers/types';
import * as P from './packet';
import { SCTP_BAD_CRC, sctpInspect, sctpSeal } from './sctp';
import { findService, inVipRange, type CompiledService, type Snapshot } from './snapshot';

export const DROP = 0;
export const FORWARD = 1;
export const REPLY = 2;

/** Most packets one input can turn into (a GSO super-packet segmented for the tunnel). */
export const MAX_OUT = 128;

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
  /** gso_size of the current packet if it is a TCPv4 GSO super-packet, else 0. */
  private gsoSize = 0;
  /** Table-relative ms; set once per batch by the caller. */
  now = 0;
  private readonly input: SchedInput = { caddr: 0, cport: 0, vaddr: 0, vport: 0, now: 0 };
  /** Worker → control rings (conntrack/layout.ts RG_*), or null (tests, no Redis). */
  private ring: Int32Array | null = null;
  private ringBytes: Uint8Array | null = null;
  private ipId = 1;

  constructor(table: ConnTable, counters: Float64Array, sched: Int32Array, maxRealServers: number, snapshot: Snapshot, out: Uint8Array, offload = false) {
    this.vnet = offload ? P.VNET_HLEN : 0;
    this.outEnd = out.length;
    this.table = table;
    this.counters = counters;
    this.sched = sched;
    this.maxRealServers = maxRealServers;
    this.snapshot = snapshot;
    this.out = out;
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
    if (len < P.IP_MIN_HLEN) return len > 0 && b[off]! >> 4 === 6 ? this.drop(Drop.Ipv6) : this.drop(Drop.Truncated);
    const version = b[off]! >> 4;
    if (version !== 4) return this.drop(version === 6 ? Drop.Ipv6 : Drop.BadVersion);
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
    const cports = (sport << 16) | dport;
    const bucket = t.bucket(proto, saddr, cports, daddr);
    // May start a connection (is_new_conn): a TCP SYN, an SCTP INIT.
    const isNew = proto === P.IPPROTO_SCTP ? tcpFlags === SCTP_EV_INIT : (tcpFlags & (TCPF_SYN | TCPF_RST | TCPF_ACK)) === TCPF_SYN;
    t.lockBucket(bucket);
    let e = t.findIn(bucket, proto, saddr, cports, daddr);
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
        t.remove(e, false, this.now);
        this.counters[L.C_NODEST_EXPIRED]!++;
        e = -1;
      } else if (
        isNew &&
        ((a[o + L.E_STATE] === (proto === P.IPPROTO_TCP ? TCP_TIME_WAIT : SCTP_S_CLOSED) && a[o + L.E_CONTROL] === 0) ||
          (this.snapshot.expireNodestConn && Atomics.load(t.rs, rsSlot * L.RS_WORDS + L.RS_WEIGHT) === 0))
      ) {
        // A new SYN (SCTP: INIT) on this entry's ports (ip_vs_in, conn_reuse_mode=1): in TIME_WAIT
        // (SCTP: CLOSED) and not controlled by a persistence template, or its server quiesced with
        // expire_nodest_conn=1 (≥ 5.16), it is a new connection.
        t.unlockBucket(bucket);
        t.remove(e, false, this.now);
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
        t.unlockBucket(bucket);
        this.countIn(rsSlot, svcSlot, totlen);
        return this.forwardIn(b, off, l4, totlen, proto, saddr, sport, daddr, dport, raddr, dports, laddr, fwd, rsSlot);
      }
    } else {
      t.unlockBucket(bucket);
    }

    // No connection: a new flow, if the service exists and the packet may start one.
    const si = findService(this.snapshot, proto, daddr, dport);
    if (si < 0) {
      this.counters[L.C_DROP_BASE + Drop.NoService]!++;
      return proto === P.IPPROTO_TCP ? this.tcpReset(b, off, l4, totlen, tcpFlags) : this.icmpUnreach(b, off, totlen, daddr, saddr);
    }
    if (proto === P.IPPROTO_TCP && (tcpFlags & (TCPF_SYN | TCPF_RST)) !== TCPF_SYN) {
      // Mid-flow: another node may have carried this flow; ask Redis (bounded) before refusing.
      if (this.ring !== null && this.snapshot.adopt) return this.park(b, off, totlen);
      this.counters[L.C_DROP_BASE + Drop.NoConnection]!++;
      if (tcpFlags & TCPF_RST) return DROP; // never answer a RST
      return this.tcpReset(b, off, l4, totlen, tcpFlags);
    }
    if (proto === P.IPPROTO_SCTP && tcpFlags !== SCTP_EV_INIT) {
      // Only an INIT starts an association (sctp_conn_schedule); the rest may be another node's.
      if (this.ring !== null && this.snapshot.adopt) return this.park(b, off, totlen);
      return this.drop(Drop.NoConnection);
    }
    const svc = this.snapshot.services[si]!;
    let tmpl = -1;
    let daddr2: number, dport2: number, rs2: number, fwd2: number;
    if (svc.persistMs > 0) {
      // ip_vs_sched_persist: one template per (masked client, service) pins the real server.
      const masked = saddr & svc.netmask;
      const tb = t.bucket(proto, masked, dport, daddr);
      t.lockBucket(tb);
      tmpl = t.findTemplate(tb, proto, masked, dport, daddr);
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
        const di = this.schedule(svc, si, saddr, sport, daddr, dport);
        if (di < 0) {
          this.counters[L.C_DROP_BASE + Drop.NoRealServer]!++;
          return this.icmpUnreach(b, off, totlen, daddr, saddr);
        }
        const d = svc.dests[di]!;
        tmpl = t.insert(proto, masked, dport, daddr, d.addr, d.port << 16, masked, L.F_TEMPLATE | d.fwd, d.rs, svc.slot, this.now, svc.persistMs);
        if (tmpl < 0) return this.drop(Drop.TableFull);
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
    } else {
      const di = this.schedule(svc, si, saddr, sport, daddr, dport);
      if (di < 0) {
        this.counters[L.C_DROP_BASE + Drop.NoRealServer]!++;
        return this.icmpUnreach(b, off, totlen, daddr, saddr);
      }
      const d = svc.dests[di]!;
      daddr2 = d.addr;
      dport2 = d.port;
      rs2 = d.rs;
      fwd2 = d.fwd;
    }
    let ne: number;
    if (fwd2 === L.FWD_FULLNAT) {
      ne = this.insertFullnat(proto, saddr, cports, daddr, daddr2, dport2, rs2, svc.slot);
      if (ne === -2) {
        if (tmpl >= 0) t.unreserve(tmpl);
        return this.drop(Drop.FullnatExhausted);
      }
    } else {
      // Tunnel: the server answers the client directly, so this node sees one direction only.
      ne = t.insert(proto, saddr, cports, daddr, daddr2, (dport2 << 16) | sport, saddr, fwd2 === L.FWD_TUNNEL ? fwd2 | L.F_NOOUTPUT : fwd2, rs2, svc.slot, this.now);
    }
    const created = t.lastInsertNew;
    if (tmpl >= 0) {
      if (ne >= 0 && created) t.control(ne, tmpl, this.now);
      else t.unreserve(tmpl);
    }
    if (ne < 0) return this.drop(Drop.TableFull);
    t.lockBucket(bucket);
    // The entry's timer is 2 s away and we hold its in-bucket lock: it is still ours to touch.
    if (t.touch(ne, DIR_INPUT, tcpFlags, this.now)) this.pushSync(ne);
    const o = t.base(ne);
    const raddr = t.i32[o + L.E_DADDR]!;
    const dports = t.i32[o + L.E_DPORTS]!;
    const laddr = t.i32[o + L.E_LADDR]!;
    const fwd = t.i32[o + L.E_FLAGS]! & L.FWD_MASK;
    const rsSlot = t.i32[o + L.E_RS]!;
    t.unlockBucket(bucket);
    if (created) {
      this.counters[L.C_CONNS_NEW]!++;
      this.counters[L.rsCounterBase(rsSlot) + L.RSC_CONNS]!++;
      this.counters[L.svcCounterBase(this.maxRealServers, svc.slot) + L.RSC_CONNS]!++;
    }
    this.countIn(rsSlot, svc.slot, totlen);
    return this.forwardIn(b, off, l4, totlen, proto, saddr, sport, daddr, dport, raddr, dports, laddr, fwd, rsSlot);
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
  ): number {
    const mtu = this.table.rs[rsSlot * L.RS_WORDS + L.RS_MTU]!;
    if (mtu > 0 && (P.u16(b, off + P.IP_FRAG) & P.IP_DF) !== 0) {
      const size = (this.gsoSize !== 0 ? l4 - off + ((b[l4 + P.TCP_OFF]! >> 4) << 2) + this.gsoSize : totlen) + (fwd === L.FWD_TUNNEL ? P.IP_MIN_HLEN : 0);
      const room = fwd === L.FWD_TUNNEL ? mtu - P.IP_MIN_HLEN : mtu;
      if (size > mtu) {
        this.counters[L.C_DROP_BASE + Drop.TooBig]!++;
        return this.icmpUnreach(b, off, totlen, daddr, saddr, P.ICMP_FRAG_NEEDED, room);
      }
    }
    if (fwd === L.FWD_TUNNEL) return this.encapsulate(b, off, totlen, raddr, mtu > 0);
    this.rewrite(b, off, l4, proto, P.IP_DST, daddr, dport, raddr, dports >>> 16);
    if (fwd === L.FWD_FULLNAT) this.rewrite(b, off, l4, proto, P.IP_SRC, saddr, sport, laddr, dports & 0xffff);
    if (proto === P.IPPROTO_SCTP) sctpSeal(b, l4, off + totlen);
    return FORWARD;
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
      const c = this.counters;
      const rb = L.rsCounterBase(rsSlot);
      c[rb + L.RSC_OUTPKTS]!++;
      c[rb + L.RSC_OUTBYTES] = c[rb + L.RSC_OUTBYTES]! + totlen;
      P.put32(b, off + P.IP_SRC, vaddr);
      P.put32(b, q + P.IP_DST, vaddr);
      P.put16(b, ql4 + P.L4_DPORT, cports & 0xffff);
      if (fwd === L.FWD_FULLNAT) {
        P.put32(b, off + P.IP_DST, caddr);
        P.put32(b, q + P.IP_SRC, caddr);
        P.put16(b, ql4 + P.L4_SPORT, cports >>> 16);
      }
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
    const pool = this.snapshot.fullnatAddrs;
    for (let i = 0; i < pool.length; i++) if (pool[i] === daddr) return this.drop(Drop.IcmpIgnored);
    return FORWARD;
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
    if (this.snapshot.tunnelSrc === 0) return this.drop(Drop.Truncated);
    const df = copyDf ? P.u16(b, off + P.IP_FRAG) & P.IP_DF : 0;
    if (this.gsoSize !== 0) return this.encapsulateSegments(b, off, totlen, raddr, df);
    const o = this.outOff;
    const len = totlen + P.IP_MIN_HLEN;
    if (len > 65535 || o + len > this.outEnd) return this.drop(Drop.Truncated);
    this.outerHeader(o, len, b[off + 1]!, raddr, df);
    if (this.vnet !== 0) {
      this.plainVnet(o);
      if (this.partial) {
        const h = off - P.VNET_HLEN;
        const x = this.out;
        x[o - P.VNET_HLEN + P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
        P.putLe16(x, o - P.VNET_HLEN + P.VNET_CSUM_START, P.le16(b, h + P.VNET_CSUM_START) + P.IP_MIN_HLEN);
        P.putLe16(x, o - P.VNET_HLEN + P.VNET_CSUM_OFFSET, P.le16(b, h + P.VNET_CSUM_OFFSET));
      }
    }
    this.copyOut(b, off, o + P.IP_MIN_HLEN, totlen);
    this.outLen = len;
    return REPLY;
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
    const ihl = (b[off]! & 15) << 2;
    const l4 = off + ihl;
    const hl = ihl + ((b[l4 + P.TCP_OFF]! >> 4) << 2);
    const payload = totlen - hl;
    const n = payload <= 0 ? 1 : Math.ceil(payload / g);
    const V = this.vnet;
    const per = V + P.IP_MIN_HLEN + hl + g;
    let o = this.outOff;
    if (n > MAX_OUT || o - V + n * per > this.outEnd) return this.drop(Drop.Truncated);
    const x = this.out;
    const seq0 = P.u32(b, l4 + P.TCP_SEQ);
    const id0 = P.u16(b, off + P.IP_ID);
    const flags = b[l4 + P.TCP_FLAGS]!;
    const isrc = P.u32(b, off + P.IP_SRC);
    const idst = P.u32(b, off + P.IP_DST);
    const tos = b[off + 1]!;
    for (let k = 0; k < n; k++) {
      const plen = k === n - 1 ? payload - k * g : g;
      const ilen = hl + (plen > 0 ? plen : 0);
      this.outerHeader(o, ilen + P.IP_MIN_HLEN, tos, raddr, df);
      const h = o - V;
      for (let i = h; i < o; i++) x[i] = 0;
      x[h + P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
      P.putLe16(x, h + P.VNET_CSUM_START, P.IP_MIN_HLEN + ihl);
      P.putLe16(x, h + P.VNET_CSUM_OFFSET, P.TCP_CSUM);
      const io = o + P.IP_MIN_HLEN;
      this.copyOut(b, off, io, hl);
      if (plen > 0) this.copyOut(b, off + hl + k * g, io + hl, plen);
      P.put16(x, io + P.IP_TOTLEN, ilen);
      P.put16(x, io + P.IP_ID, (id0 + k) & 0xffff);
      P.put16(x, io + P.IP_CSUM, 0);
      P.put16(x, io + P.IP_CSUM, P.checksum(x, io, ihl, 0));
      const t = io + ihl;
      P.put32(x, t + P.TCP_SEQ, (seq0 + k * g) | 0);
      let f = flags;
      if (k !== n - 1) f &= ~(TCPF_FIN | TCPF_PSH);
      if (k !== 0) f &= ~TCPF_CWR;
      x[t + P.TCP_FLAGS] = f;
      // Partial: the pseudo-header sum for this segment's length.
      P.put16(x, t + P.TCP_CSUM, P.fold16(P.pseudoSum(isrc, idst, P.IPPROTO_TCP, ilen - ihl)));
      this.outOffs[k] = h;
      this.outLens[k] = V + P.IP_MIN_HLEN + ilen;
      o += per;
    }
    this.outCount = n;
    this.outLen = this.outLens[0]! - V;
    return REPLY;
  }

  /** xorshift32 state for full-NAT port choice (no allocation, no Math.random per packet). */
  private rnd = 0x9e3779b9;

  /**
   * Full-NAT: picks a pool address (by client hash) and a free port on it, so the server→client
   * key (RIP:rport → laddr:lport) is unique. A few random probes, then a scan, bounded: a pool with
   * every port taken refuses the flow (counted) instead of searching for ever.
   */
  private insertFullnat(proto: number, caddr: number, cports: number, vaddr: number, raddr: number, rport: number, rs: number, svcSlot: number): number {
    const s = this.snapshot;
    const pool = s.fullnatAddrs;
    if (pool.length === 0) return -2;
    const min = s.fullnatPortMin;
    const range = s.fullnatPortMax - min + 1;
    const laddr = pool[((caddr ^ cports) >>> 0) % pool.length]!;
    let x = this.rnd;
    const probes = range < 64 ? range : 64;
    for (let i = 0; i < probes; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      const lport = range < 64 ? min + i : min + ((x >>> 0) % range);
      const e = this.table.insert(proto, caddr, cports, vaddr, raddr, (rport << 16) | lport, laddr, L.FWD_FULLNAT, rs, svcSlot, this.now);
      if (e !== -2) {
        this.rnd = x;
        return e;
      }
    }
    this.rnd = x;
    return -2;
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
    const dports = (sport << 16) | dport;
    const bucket = t.bucket(proto, saddr, dports, daddr);
    t.lockBucket(bucket);
    const e = t.findOut(bucket, proto, saddr, dports, daddr);
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
    t.unlockBucket(bucket);
    if (fwd === L.FWD_FULLNAT) {
      // Full-NAT reply: destination pool:lport becomes the client's address and port again.
      this.rewrite(b, off, l4, proto, P.IP_DST, daddr, dport, caddr, cportsE >>> 16);
    }
    const c = this.counters;
    const rb = L.rsCounterBase(rsSlot);
    const sb = L.svcCounterBase(this.maxRealServers, svcSlot);
    c[rb + L.RSC_OUTPKTS]!++;
    c[rb + L.RSC_OUTBYTES] = c[rb + L.RSC_OUTBYTES]! + totlen;
    c[sb + L.RSC_OUTPKTS]!++;
    c[sb + L.RSC_OUTBYTES] = c[sb + L.RSC_OUTBYTES]! + totlen;
    // Reply: source RIP:rport becomes VIP:vport.
    this.rewrite(b, off, l4, proto, P.IP_SRC, saddr, sport, vaddr, vport);
    if (proto === P.IPPROTO_SCTP) sctpSeal(b, l4, off + totlen);
    return FORWARD;
  }

  private countIn(rsSlot: number, svcSlot: number, bytes: number): void {
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
      if (gsoType !== P.VNET_GSO_TCPV4 || proto !== P.IPPROTO_TCP || !needs || start !== ihl || field !== expected || size === 0) return false;
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
    const ihl = (b[off]! & 15) << 2;
    const proto = b[off + P.IP_PROTO]!;
    const totlen = P.u16(b, off + P.IP_TOTLEN);
    P.completeChecksum(b, off + ihl, off + totlen, off + ihl + (proto === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM), proto === P.IPPROTO_UDP);
    b[off - P.VNET_HLEN + P.VNET_FLAGS] = b[off - P.VNET_HLEN + P.VNET_FLAGS]! & ~P.VNET_F_NEEDS_CSUM;
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
    const src = P.u32(b, off + P.IP_DST);
    const dst = P.u32(b, off + P.IP_SRC);
    this.ipHeader(o, 40, P.IPPROTO_TCP, src, dst);
    const t = o + P.IP_MIN_HLEN;
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
    P.put16(x, t + P.TCP_CSUM, P.checksum(x, t, 20, P.pseudoSum(src, dst, P.IPPROTO_TCP, 20)));
    this.outLen = 40;
    return REPLY;
  }

  /** ICMP to a VIP: echo requests are answered (when configured), errors are not ours yet. */
  private icmpToVip(b: Uint8Array, off: number, ihl: number, totlen: number, saddr: number, daddr: number): number {
    const ic = off + ihl;
    if (b[ic + P.ICMP_TYPE] !== P.ICMP_ECHO || !this.snapshot.answerPing) return this.drop(Drop.IcmpIgnored);
    if (P.sum16(b, ic, totlen - ihl, 0) !== 0xffff) return this.drop(Drop.BadChecksum);
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
