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
 *  - weight 0 keeps existing flows: only scheduling looks at weights.
 */
import * as L from '../conntrack/layout';
import { Drop } from '../conntrack/layout';
import { ConnTable } from '../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCP_TIME_WAIT, TCPF_ACK, TCPF_FIN, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import { getScheduler } from '../schedulers/registry';
import type { SchedInput, Scheduler } from '../schedulers/types';
import * as P from './packet';
import { findService, inVipRange, type CompiledService, type Snapshot } from './snapshot';

export const DROP = 0;
export const FORWARD = 1;
export const REPLY = 2;

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
  outOff = 0;
  outLen = 0;
  /** Table-relative ms; set once per batch by the caller. */
  now = 0;
  private readonly input: SchedInput = { caddr: 0, cport: 0, vaddr: 0, vport: 0, now: 0 };
  /** Worker → control rings (conntrack/layout.ts RG_*), or null (tests, no Redis). */
  private ring: Int32Array | null = null;
  private ringBytes: Uint8Array | null = null;
  private ipId = 1;

  constructor(table: ConnTable, counters: Float64Array, sched: Int32Array, maxRealServers: number, snapshot: Snapshot, out: Uint8Array) {
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

  process(b: Uint8Array, off: number, len: number): number {
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

    if (proto === P.IPPROTO_TCP) {
      if (l4len < P.TCP_MIN_HLEN || (b[l4 + P.TCP_OFF]! >> 4) << 2 > l4len || b[l4 + P.TCP_OFF]! >> 4 < 5) return this.drop(Drop.Truncated);
    } else if (proto === P.IPPROTO_UDP) {
      if (l4len < P.UDP_HLEN) return this.drop(Drop.Truncated);
    } else if (proto === P.IPPROTO_ICMP) {
      if (l4len < P.ICMP_HLEN) return this.drop(Drop.Truncated);
      return inbound ? this.icmpToVip(b, off, ihl, totlen, saddr, daddr) : this.drop(Drop.IcmpIgnored);
    } else {
      return this.drop(Drop.UnsupportedProtocol);
    }

    const sport = P.u16(b, l4 + P.L4_SPORT);
    const dport = P.u16(b, l4 + P.L4_DPORT);
    const tcpFlags = proto === P.IPPROTO_TCP ? b[l4 + P.TCP_FLAGS]! : 0;
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
    const isSyn = (tcpFlags & (TCPF_SYN | TCPF_RST | TCPF_ACK)) === TCPF_SYN;
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
        isSyn &&
        proto === P.IPPROTO_TCP &&
        ((a[o + L.E_STATE] === TCP_TIME_WAIT && a[o + L.E_CONTROL] === 0) ||
          (this.snapshot.expireNodestConn && Atomics.load(t.rs, rsSlot * L.RS_WORDS + L.RS_WEIGHT) === 0))
      ) {
        // A new SYN on this entry's ports (ip_vs_in, conn_reuse_mode=1): in TIME_WAIT and not
        // controlled by a persistence template, or its server quiesced with expire_nodest_conn=1
        // (≥ 5.16), it is a new connection.
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
        if (fwd === L.FWD_TUNNEL) return this.encapsulate(b, off, totlen, raddr);
        this.rewrite(b, off, l4, proto, P.IP_DST, daddr, dport, raddr, dports >>> 16);
        if (fwd === L.FWD_FULLNAT) this.rewrite(b, off, l4, proto, P.IP_SRC, saddr, sport, laddr, dports & 0xffff);
        return FORWARD;
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
    if (fwd === L.FWD_TUNNEL) return this.encapsulate(b, off, totlen, raddr);
    this.rewrite(b, off, l4, proto, P.IP_DST, daddr, dport, raddr, dports >>> 16);
    if (fwd === L.FWD_FULLNAT) this.rewrite(b, off, l4, proto, P.IP_SRC, saddr, sport, laddr, dports & 0xffff);
    return FORWARD;
  }

  /**
   * IPIP (ipvsadm -i): the packet, VIP and ports unchanged, inside an outer IPv4 header from
   * dataplane.tunnelSource to the real server, built in `out`. The outer header leaves DF clear,
   * so a full-size inner packet is fragmented on the way rather than dropped.
   */
  private encapsulate(b: Uint8Array, off: number, totlen: number, raddr: number): number {
    const x = this.out;
    const o = this.outOff;
    const len = totlen + P.IP_MIN_HLEN;
    if (len > 65535 || o + len > x.length || this.snapshot.tunnelSrc === 0) return this.drop(Drop.Truncated);
    x[o] = 0x45;
    x[o + 1] = b[off + 1]!; // TOS of the inner packet
    P.put16(x, o + P.IP_TOTLEN, len);
    P.put16(x, o + P.IP_ID, this.ipId);
    this.ipId = (this.ipId + 1) & 0xffff;
    P.put16(x, o + P.IP_FRAG, 0);
    x[o + P.IP_TTL] = 64;
    x[o + P.IP_PROTO] = 4; // IPPROTO_IPIP
    P.put16(x, o + P.IP_CSUM, 0);
    P.put32(x, o + P.IP_SRC, this.snapshot.tunnelSrc);
    P.put32(x, o + P.IP_DST, raddr);
    P.put16(x, o + P.IP_CSUM, P.checksum(x, o, P.IP_MIN_HLEN, 0));
    for (let i = 0; i < totlen; i++) x[o + P.IP_MIN_HLEN + i] = b[off + i]!;
    this.outLen = len;
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
    if (proto === P.IPPROTO_TCP) {
      P.fix32(b, l4 + P.TCP_CSUM, addr, addr2);
      P.fix16(b, l4 + P.TCP_CSUM, port, port2);
    } else {
      this.fixUdp(b, l4, addr, addr2, port, port2);
    }
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

  /** ICMP port unreachable about the packet at b[off]: its IP header plus 8 bytes (RFC 792). */
  private icmpUnreach(b: Uint8Array, off: number, totlen: number, from: number, to: number): number {
    const ihl = (b[off]! & 15) << 2;
    const quoted = Math.min(totlen, ihl + 8);
    const o = this.outOff;
    const x = this.out;
    const len = P.IP_MIN_HLEN + P.ICMP_HLEN + quoted;
    this.ipHeader(o, len, P.IPPROTO_ICMP, from, to);
    const ic = o + P.IP_MIN_HLEN;
    x[ic + P.ICMP_TYPE] = P.ICMP_DEST_UNREACH;
    x[ic + P.ICMP_CODE] = P.ICMP_PORT_UNREACH;
    P.put16(x, ic + P.ICMP_CSUM, 0);
    P.put32(x, ic + 4, 0);
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
