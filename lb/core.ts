/**
 * The per-packet path's entry (ip_vs_core.c): parse in place, find or create the connection,
 * then hand the packet to transmit.
 *
 *   process(buf, off, len, out) → DROP | FORWARD | REPLY, the contract of ./verdict.ts.
 *
 * A packet goes, top to bottom: process (IPv4) or process6 (IPv6) parse the network header into
 * the packet context (./context.ts), read offload metadata (./offload.ts), dispatch ICMP
 * (./icmp.ts) and check the transport header (transport); inbound (destination inside a VIP
 * range: ip_vs_in) or outbound (anything else reaching the device is a real server's reply —
 * masq: policy routing sends it here — and must match a connection's server→client key:
 * ip_vs_out) find the connection through the table's API (conntrack/table.ts); a new flow is
 * scheduled (persistence template, then the service's scheduler) and inserted; then ./xmit.ts
 * rewrites and sends it (./tunnel.ts for the tunnel method). No allocation, no strings, no
 * exceptions: every field is read at a named offset.
 *
 * IPVS edge behaviour reproduced (docs/ipvs-semantics.md §2, §3):
 *  - no eligible real server → ICMP port unreachable to the client, no entry (ip_vs_leave);
 *  - a VIP port without a service → TCP RST / ICMP port unreachable (the host never answers);
 *  - only a TCP segment with SYN and without RST creates a connection; other segments with no
 *    entry get a RST, as the kernel's local stack would answer them;
 *  - a SYN that hits an entry in TIME_WAIT starts a new connection (conn_reuse_mode=1); in
 *    full-NAT it keeps the old one's server and pool port where it may (§3.8, the servers' TIME_WAIT);
 *  - weight 0 keeps existing flows: only scheduling looks at weights;
 *  - SCTP (./sctp.ts, sctp_conn_schedule): only a packet whose first chunk is INIT creates an
 *    entry, an INIT on an entry in CLOSED starts a new one, other chunks without an entry are
 *    dropped (counted); the CRC32c is checked on arrival and recomputed after the rewrite;
 *  - ICMP errors about a flow are translated both ways, and a DF packet too big for the route to
 *    its real server is answered from the VIP: path MTU (./icmp.ts, ./xmit.ts);
 *  - full-NAT TCP to a server with proxyProtocol: a PROXY protocol header segment goes first and
 *    the flow's sequence numbers are shifted both ways (./xmit.ts, lb/proxy-protocol.ts);
 *  - a mid-flow packet of no known flow is parked while the control thread asks Redis whether
 *    another node carried it (adoption), when Redis is configured;
 *  - with the SYN proxy on (uvs; ./synproxy.ts), a SYN to a masq/full-NAT TCP service is
 *    answered with a cookie and makes no entry; the client's ACK with a valid cookie makes the
 *    flow through newFlow, and the flow's packets are adjusted both ways.
 *
 * IPv4 and IPv6 take the same path: process6 parses IPv6 into the context's low address words
 * with the high words in key.hi (conntrack/flow.ts explains the keys). With device offloads, a
 * packet has a virtio_net_hdr before it: a partial checksum is kept partial through the rewrite
 * and a GSO super-packet is one packet here.
 */
import { randomFillSync } from 'node:crypto';
import { FlowKey, FlowView, NewFlow } from '../conntrack/flow';
import * as L from '../conntrack/layout';
import { Drop } from '../conntrack/layout';
import { SCTP_EV_ABORT, SCTP_EV_INIT } from '../conntrack/sctp-state';
import { TCP_TIME_WAIT, TCPF_ACK, TCPF_RST, TCPF_SYN } from '../conntrack/state';
import {
  type ConnTable,
  FLOW_DEST_GONE,
  FLOW_HIT,
  FLOW_REUSE,
  FLOW_SP_PENDING,
  LOOKUP_EXPIRE_NODEST,
  LOOKUP_NEW,
} from '../conntrack/table';
import * as P from '../net/packet';
import { positionOf, unavailable } from '../schedulers/common';
import { getScheduler } from '../schedulers/registry';
import type { SchedInput, Scheduler } from '../schedulers/types';
import { countIn, countOut, drop, PacketContext, pushSync } from './context';
import { icmp6Error, icmp6ToVip, icmpError, icmpNotOurs, icmpToVip, mayAnswer, tcpReset, unreachable } from './icmp';
import { completePartial, offloadMeta } from './offload';
import { SCTP_BAD_CRC, sctpInspect } from './sctp';
import { type CompiledService, findService, inVipRange, inVipRange6, type Snapshot } from './snapshot';
import { adjustIn, cookieAck, cookiesRecent, eligible, spOpen, spOut, spPendingIn, synCookieReply } from './synproxy';
import { DROP, type OutRegion } from './verdict';
import { forwardIn, forwardOut, insertFullnat, proxyHeaderLength } from './xmit';

export class PacketProcessor {
  /** Everything the path's files share: the worker's state and the current packet. */
  private readonly c: PacketContext;
  /** Scheduler state region (conntrack/layout.ts SCHED_*): a lock and the scheduler's words per service. */
  private readonly sched: Int32Array;
  /** Scheduler objects per service index of the current snapshot. */
  private schedulers: Scheduler[] = [];
  /** Per service index of the current snapshot: 1 where the SYN proxy may take its SYNs (./synproxy.ts eligible). */
  private spOk = new Uint8Array(0);
  private readonly input: SchedInput = { caddr: 0, cport: 0, vaddr: 0, vport: 0, now: 0 };
  /** A persistence template's key and view (ip_vs_sched_persist), and the record of a new entry. */
  private readonly tkey = new FlowKey();
  private readonly tmpl = new FlowView();
  private readonly rec = new NewFlow();

  constructor(table: ConnTable, counters: Float64Array, sched: Int32Array, maxRealServers: number, snapshot: Snapshot, offload = false) {
    const c = new PacketContext(table, counters, maxRealServers, snapshot, offload ? P.VNET_HLEN : 0);
    randomFillSync(c.hashKey);
    const seed = new Int32Array(1);
    randomFillSync(seed);
    c.rnd = seed[0]! | 1; // xorshift state: never 0
    this.c = c;
    this.sched = sched;
    this.setSnapshot(snapshot);
  }

  /** The worker → control rings (conntrack/layout.ts RG_*): sync events and parked packets. */
  setRing(sab: SharedArrayBuffer): void {
    this.c.ring = new Int32Array(sab);
    this.c.ringBytes = new Uint8Array(sab);
  }

  /**
   * The device steers by uvs's program with the key (k0, k1) over `queues` queues, and this worker
   * reads queue `queue`: full-NAT then prefers pool ports whose replies come back to it (./xmit.ts).
   */
  setSteering(k0: number, k1: number, queue: number, queues: number): void {
    this.c.steerK0 = k0 | 0;
    this.c.steerK1 = k1 | 0;
    this.c.steerQueue = queue;
    this.c.steerQueues = queues;
  }

  /** A new configuration, between batches. */
  setSnapshot(s: Snapshot): void {
    this.c.snapshot = s;
    // Services sit at their slots (lb/snapshot.ts): the array may have holes.
    const n = s.services.length;
    this.schedulers = new Array<Scheduler>(n);
    this.spOk = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      const svc = s.services[i];
      if (svc === undefined) continue;
      this.schedulers[i] = getScheduler(svc.scheduler)!;
      this.spOk[i] = eligible(s, svc) ? 1 : 0;
    }
  }

  /** Sets the time (ConnTable.now()) the next packets are handled at: once per batch. */
  setTime(now: number): void {
    const c = this.c;
    c.now = now;
    // The SYN proxy's clocks: the cookie's minute counter and our timestamps (Unix ms, 32 bits).
    const unix = c.table.epoch + now;
    c.spMinute = Math.floor(unix / 60000) | 0;
    c.tsNow = (unix % 4294967296) | 0;
  }

  // ── parse ──────────────────────────────────────────────────────────────────────────────────
  /**
   * Handles the packet at b[off, off+len) (./verdict.ts). With offloads its virtio_net_hdr is at
   * off − VNET_HLEN: for a FORWARD it is written back unchanged (the device then segments a GSO
   * packet and completes a partial checksum on the way out).
   */
  process(b: Uint8Array, off: number, len: number, out: OutRegion): number {
    const c = this.c;
    c.out = out;
    out.count = 0;
    out.reason = out.svc = out.rs = out.state = -1;
    out.proto = 0;
    c.partial = false;
    c.gsoSize = 0;
    c.off = off;
    if (len > 0 && b[off]! >> 4 === 6) return this.process6(b, off, len);
    c.v6 = false;
    if (len < P.IP_MIN_HLEN) return drop(c, Drop.Truncated);
    const version = b[off]! >> 4;
    if (version !== 4) return drop(c, Drop.BadVersion);
    const ihl = (b[off]! & 15) << 2;
    if (ihl < P.IP_MIN_HLEN) return drop(c, Drop.BadHeaderLength);
    const totlen = P.u16(b, off + P.IP_TOTLEN);
    if (totlen < ihl || totlen > len || ihl > len) return drop(c, Drop.Truncated);
    if (P.sum16(b, off, ihl, 0) !== 0xffff) return drop(c, Drop.BadChecksum);
    if ((P.u16(b, off + P.IP_FRAG) & P.IP_FRAG_MASK) !== 0) return drop(c, Drop.Fragment);
    const proto = b[off + P.IP_PROTO]!;
    c.totlen = totlen;
    c.l4 = off + ihl;
    c.proto = proto;
    c.saddr = P.u32(b, off + P.IP_SRC);
    c.daddr = P.u32(b, off + P.IP_DST);
    const inbound = inVipRange(c.snapshot, c.daddr);
    if (c.vnet !== 0 && (b[off - P.VNET_HLEN + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM || b[off - P.VNET_HLEN + P.VNET_GSO_TYPE] !== 0)) {
      if (!offloadMeta(c, b, ihl, proto)) return drop(c, Drop.BadOffload);
    }
    if (proto === P.IPPROTO_ICMP) {
      if (totlen - ihl < P.ICMP_HLEN) return drop(c, Drop.Truncated);
      const type = b[c.l4 + P.ICMP_TYPE]!;
      if (type === P.ICMP_DEST_UNREACH || type === P.ICMP_SOURCE_QUENCH || type === P.ICMP_TIME_EXCEEDED) return icmpError(c, b, inbound);
      return inbound ? icmpToVip(c, b) : icmpNotOurs(c);
    }
    const bad = this.transport(b, proto);
    if (bad >= 0) return drop(c, bad);
    return inbound ? this.inbound(b) : this.outbound(b);
  }

  /**
   * IPv6: the same path with the table's IPv6 keys (PROTO_V6, low words plus key.hi). Extension
   * headers hop-by-hop, routing and destination options are stepped over; a fragment is dropped
   * as IPVS drops IPv4 fragments it cannot place.
   */
  private process6(b: Uint8Array, off: number, len: number): number {
    const c = this.c;
    c.v6 = true;
    if (len < P.IP6_HLEN) return drop(c, Drop.Truncated);
    const totlen = P.IP6_HLEN + P.u16(b, off + P.IP6_PLEN);
    if (totlen > len) return drop(c, Drop.Truncated);
    const end = off + totlen;
    const upper = P.ip6Upper(b, off, end);
    if (upper < 0) return drop(c, Drop.Ipv6);
    const next = upper & 0xff;
    const l4 = off + (upper >>> 8);
    if (next === P.IPPROTO_FRAGMENT) return drop(c, Drop.Fragment);
    if (l4 > end) return drop(c, Drop.Truncated);
    const pa = c.pa;
    for (let i = 0; i < 8; i++) pa[i] = P.u32(b, off + P.IP6_SRC + 4 * i);
    c.totlen = totlen;
    c.l4 = l4;
    c.proto = next | L.PROTO_V6;
    c.saddr = pa[3]!;
    c.daddr = pa[7]!;
    const inbound = inVipRange6(c.snapshot, pa, 4);
    if (c.vnet !== 0 && (b[off - P.VNET_HLEN + P.VNET_FLAGS]! & P.VNET_F_NEEDS_CSUM || b[off - P.VNET_HLEN + P.VNET_GSO_TYPE] !== 0)) {
      if (!offloadMeta(c, b, l4 - off, next)) return drop(c, Drop.BadOffload);
    }
    if (next === P.IPPROTO_ICMPV6) {
      if (end - l4 < P.ICMP_HLEN) return drop(c, Drop.Truncated);
      const type = b[l4 + P.ICMP_TYPE]!;
      if (type < 128) return icmp6Error(c, b, inbound);
      if (inbound) return icmp6ToVip(c, b);
      // The device's own neighbour/router/multicast-listener chatter (multicast, link-local): not ours.
      if (pa[4]! >>> 24 === 0xff || pa[4]! >>> 22 === 0x3fa) return drop(c, Drop.IcmpIgnored);
      return icmpNotOurs(c);
    }
    const bad = this.transport(b, next);
    if (bad >= 0) return drop(c, bad);
    // The key's high words where the table keeps them: a client's packet 0..5, a server's 6..11.
    const hi = c.key.hi;
    if (inbound) {
      for (let i = 0; i < 3; i++) {
        hi[i] = pa[i]!;
        hi[3 + i] = pa[4 + i]!;
      }
      c.cfold = pa[0]! ^ pa[1]! ^ pa[2]! ^ pa[3]!;
      c.vfold = pa[4]! ^ pa[5]! ^ pa[6]! ^ pa[7]!;
      return this.inbound(b);
    }
    for (let i = 0; i < 3; i++) {
      hi[6 + i] = pa[i]!;
      hi[9 + i] = pa[4 + i]!;
    }
    return this.outbound(b);
  }

  /**
   * The transport header, checked alike for both families: TCP and UDP must hold their header,
   * SCTP a well-formed chunk list and a valid CRC32c (./sctp.ts); anything else is not ours.
   * Sets the ports, the state machine's event (TCP flags, SCTP chunk event) and the packet's
   * table key. A drop reason, or −1 when the packet goes on.
   */
  private transport(b: Uint8Array, proto: number): number {
    const c = this.c;
    const l4 = c.l4;
    const l4len = c.off + c.totlen - l4;
    let ev = 0;
    if (proto === P.IPPROTO_TCP) {
      if (l4len < P.TCP_MIN_HLEN) return Drop.Truncated;
      const doff = b[l4 + P.TCP_OFF]! >> 4;
      if (doff << 2 > l4len || doff < 5) return Drop.Truncated;
      ev = b[l4 + P.TCP_FLAGS]!;
    } else if (proto === P.IPPROTO_UDP) {
      if (l4len < P.UDP_HLEN) return Drop.Truncated;
    } else if (proto === P.IPPROTO_SCTP) {
      ev = sctpInspect(b, l4, c.off + c.totlen);
      if (ev < 0) return ev === SCTP_BAD_CRC ? Drop.BadChecksum : Drop.SctpBad;
    } else {
      return Drop.UnsupportedProtocol;
    }
    c.ev = ev;
    c.sport = P.u16(b, l4 + P.L4_SPORT);
    c.dport = P.u16(b, l4 + P.L4_DPORT);
    const k = c.key;
    k.proto = c.proto;
    k.src = c.saddr;
    k.ports = (c.sport << 16) | c.dport;
    k.dst = c.daddr;
    return -1;
  }

  // ── client → server (ip_vs_in) ─────────────────────────────────────────────────────────────
  private inbound(b: Uint8Array): number {
    const c = this.c;
    const t = c.table;
    const proto = c.proto;
    const ev = c.ev;
    const isTcp = (proto & 0xff) === P.IPPROTO_TCP;
    const isSctp = (proto & 0xff) === P.IPPROTO_SCTP;
    // May start a connection (is_new_conn): a TCP SYN, an SCTP INIT.
    const isNew = isSctp ? ev === SCTP_EV_INIT : (ev & (TCPF_SYN | TCPF_RST | TCPF_ACK)) === TCPF_SYN;
    const f = c.flow;
    c.keepFlow = false;
    const found = t.lookupIn(c.key, f, ev, (isNew ? LOOKUP_NEW : 0) | (c.snapshot.expireNodestConn ? LOOKUP_EXPIRE_NODEST : 0), c.now);
    if (found === FLOW_HIT) {
      this.touched(f);
      countIn(c, f.rs, f.svc, c.totlen);
      if (f.sp !== 0) adjustIn(c, b, f); // SYN-proxied: into the server's numbers
      return forwardIn(c, b, f);
    }
    if (found === FLOW_SP_PENDING) {
      // SYN proxy, the real server's handshake not done: held (or our SYN again); −1: done meanwhile.
      const v = spPendingIn(c, b, f);
      return v >= 0 ? v : this.inbound(b);
    }
    if (found === FLOW_DEST_GONE) {
      // expire_nodest_conn=0: drop without refreshing the timer; the entry dies at its timeout.
      if (!c.snapshot.expireNodestConn) return drop(c, Drop.RealServerGone);
      // expire_nodest_conn=1 (≥ 5.9): expire the entry now and handle the packet as new.
      t.remove(f.entry, false, c.now, proto, c.saddr, c.key.ports);
      c.counters[L.C_NODEST_EXPIRED]!++;
    } else if (found === FLOW_REUSE) {
      // A new SYN (SCTP: INIT) on this entry's ports (ip_vs_in, conn_reuse_mode=1): in TIME_WAIT
      // (SCTP: CLOSED) and not controlled by a persistence template, or its server quiesced with
      // expire_nodest_conn=1 (≥ 5.16), it is a new connection.
      // Full-NAT TCP in TIME_WAIT: the new connection keeps the server and the pool port, if it
      // may (newFlow). The server holds its TIME_WAIT socket for that 4-tuple (it closed first,
      // as an HTTP server does) and takes a new SYN on it only if the SYN's timestamp (or, without
      // timestamps, its sequence number) is newer (tcp_timewait_state_process). The client derives
      // both from its own 4-tuple, so a SYN of the same client port is newer; a SYN of another
      // client, which a new pool port may meet there, is newer or older by chance — about half of
      // them were refused (PAWS) and waited 1 s for their retransmission (perf/LOG.md).
      // f (lookupIn's view of the entry) stays as it is until the new entry is inserted.
      c.keepFlow = isTcp && f.fwd === L.FWD_FULLNAT && f.state === TCP_TIME_WAIT;
      t.remove(f.entry, false, c.now, proto, c.saddr, c.key.ports);
    }

    // No connection: a new flow, if the service exists and the packet may start one.
    const si = findService(c.snapshot, proto, c.daddr, c.dport, c.key.hi, 3);
    if (si < 0) {
      // Never answer a RST (tcp_v4_send_reset, tcp_v6_send_reset): two of them would answer each other.
      if (isTcp && ev & TCPF_RST) return drop(c, Drop.NoService);
      if (isTcp) return mayAnswer(c, L.GEN_RESET, Drop.NoService) ? tcpReset(c, b) : DROP;
      return mayAnswer(c, L.GEN_UNREACH, Drop.NoService) ? unreachable(c, b) : DROP;
    }
    // SYN proxy (./synproxy.ts): a SYN is answered with a cookie while it is on, and an ACK is
    // checked as one while cookies went out in the last 2 minutes; a valid one makes the flow.
    let proxied = false;
    if (isTcp && this.spOk[si] === 1) {
      const fl = ev & (TCPF_SYN | TCPF_RST | TCPF_ACK);
      if (fl === TCPF_SYN) {
        if (t.synProxyOn()) return synCookieReply(c, b);
      } else if (fl === TCPF_ACK && cookiesRecent(c)) {
        if (!cookieAck(c, b)) {
          if (c.ring !== null && c.snapshot.adopt) return this.park(b); // another node's flow, maybe
          // As Linux's LISTEN socket answers an ACK it cannot take (tcp_v4_send_reset), within
          // mayAnswer's limits: a flood of them costs no more than one of stray ACKs without cookies.
          return mayAnswer(c, L.GEN_RESET, Drop.BadCookie) ? tcpReset(c, b) : DROP;
        }
        proxied = true;
        c.ev = TCPF_SYN; // the flow's first touch stands for the SYN it acknowledges: SYN_RECV
      }
    }
    if (!proxied && isTcp && (ev & (TCPF_SYN | TCPF_RST)) !== TCPF_SYN) {
      // Mid-flow: another node may have carried this flow; ask Redis (bounded) before refusing.
      if (c.ring !== null && c.snapshot.adopt && !this.secondChance()) return this.park(b);
      if (ev & TCPF_RST) return drop(c, Drop.NoConnection); // never answer a RST
      // sloppy_tcp (tcp_conn_schedule): any segment but a RST may start a connection; its first
      // touch puts it in the state the kernel's table gives from NONE (an ACK: ESTABLISHED).
      if (!c.snapshot.services[si]!.sloppy) return mayAnswer(c, L.GEN_RESET, Drop.NoConnection) ? tcpReset(c, b) : DROP;
    }
    if (isSctp && ev !== SCTP_EV_INIT) {
      // Only an INIT starts an association (sctp_conn_schedule), or with sloppy_sctp any chunk but
      // an ABORT; the rest may be another node's.
      if (c.ring !== null && c.snapshot.adopt && !this.secondChance()) return this.park(b);
      if (ev === SCTP_EV_ABORT || !c.snapshot.services[si]!.sloppy) return drop(c, Drop.NoConnection);
    }
    // Overload defenses (conntrack/defense.ts sets the words once a second): drop_packet refuses
    // 1 of every `rate` new flows (ip_vs_todrop, per worker), and a source holding its limit of
    // half-open entries gets no more.
    const rate = t.dropRate();
    if (rate !== 0) {
      if (c.dropCounter > rate) c.dropCounter = rate;
      if (--c.dropCounter <= 0) {
        c.dropCounter = rate;
        return drop(c, Drop.DefenseDropPacket);
      }
    }
    const srcLimit = t.sourceLimit();
    if (srcLimit !== 0 && (isTcp || isSctp) && t.halfOpenAt(t.sourceSlot(c.v6, c.saddr, c.key.hi[0]!, c.key.hi[1]!)) >= srcLimit)
      return drop(c, Drop.HalfOpenPerSource);
    return this.newFlow(b, c.snapshot.services[si]!, si, proxied);
  }

  /**
   * A new connection for the current client packet to service svc (index si): its real server
   * from the client's persistence template (made now if there is none) or from the scheduler,
   * then the entry (ip_vs_conn_new) — full-NAT with a pool port — touched by this first packet,
   * and the packet sent on. `proxied`: the packet is a client's valid cookie ACK (./synproxy.ts):
   * the flow waits for the real server's handshake, which our SYN starts.
   */
  private newFlow(b: Uint8Array, svc: CompiledService, si: number, proxied: boolean): number {
    const c = this.c;
    const t = c.table;
    const v6 = c.v6;
    const proto = c.proto;
    const hi = c.key.hi;
    const r = this.rec;
    let tmpl = -1;
    let dport2: number, fwd2: number;
    if (svc.persistMs > 0) {
      // ip_vs_sched_persist: one template per (masked client, service) pins the real server.
      const tk = this.tkey;
      const thi = tk.hi;
      let masked: number;
      if (v6) {
        // The template's client is the client's prefix (-M is a prefix length for IPv6).
        const m = svc.netmask6!;
        masked = c.saddr & m[3]!;
        for (let i = 0; i < 3; i++) {
          thi[i] = hi[i]! & m[i]!;
          thi[3 + i] = hi[3 + i]!;
          thi[9 + i] = thi[i]!;
        }
      } else {
        masked = c.saddr & svc.netmask;
      }
      tk.proto = proto;
      tk.src = masked;
      tk.ports = c.dport;
      tk.dst = c.daddr;
      const tv = this.tmpl;
      tmpl = t.templateFor(tk, tv, c.snapshot.expireQuiescentTemplate);
      if (tmpl < 0) {
        const di = this.schedule(svc, si);
        if (di < 0) return this.noRealServer(b, proxied);
        const d = svc.dests[di]!;
        const a6 = d.addr6;
        if (a6 !== null) for (let i = 0; i < 3; i++) thi[6 + i] = a6[i]!;
        r.proto = proto;
        r.caddr = masked;
        r.cports = c.dport;
        r.vaddr = c.daddr;
        r.daddr = a6 !== null ? a6[3]! : d.addr;
        r.dports = d.port << 16;
        r.laddr = masked;
        r.flags = L.F_TEMPLATE | d.fwd;
        r.rs = d.rs;
        r.svc = svc.slot;
        r.now = c.now;
        r.templateMs = svc.persistMs;
        r.pp = 0;
        r.ppSeq = 0;
        if (v6) r.hi.set(thi);
        r.inBucket = tk.bucket; // templateFor just hashed this key
        // A new template's timer is the persistence timeout away; one found in a race is valid.
        tmpl = t.insertTemplate(r, tv);
        if (tmpl < 0) return drop(c, tmpl === -3 ? Drop.ChainFull : Drop.TableFull);
      }
      r.daddr = tv.daddr;
      dport2 = tv.dports >>> 16;
      r.rs = tv.rs;
      fwd2 = tv.fwd;
      if (v6) for (let i = 0; i < 3; i++) r.hi[6 + i] = tv.hi[6 + i]!;
    } else {
      const keep = c.keepFlow ? this.keptDest(svc) : -1;
      const di = keep >= 0 ? keep : this.schedule(svc, si);
      if (di < 0) return this.noRealServer(b, proxied);
      const d = svc.dests[di]!;
      const a6 = d.addr6;
      r.daddr = a6 !== null ? a6[3]! : d.addr;
      if (a6 !== null) for (let i = 0; i < 3; i++) r.hi[6 + i] = a6[i]!;
      dport2 = d.port;
      r.rs = d.rs;
      fwd2 = d.fwd;
    }
    // The connection's client→server key is the packet's.
    r.proto = proto;
    r.caddr = c.saddr;
    r.cports = c.key.ports;
    r.vaddr = c.daddr;
    r.svc = svc.slot;
    r.now = c.now;
    r.templateMs = 0;
    if (v6) for (let i = 0; i < 6; i++) r.hi[i] = hi[i]!;
    r.inBucket = c.key.bucket; // lookupIn just hashed this key (insert then clears it)
    const f = c.flow;
    let ne: number;
    /** insertIn touched the flow with this packet already (masq, tunnel, DR). */
    let touched = false;
    // A SYN-proxied flow is pending from its first moment: never published, held packets (./synproxy.ts).
    const spf = proxied ? L.F_SYNPROXY | L.F_SP_PENDING : 0;
    r.spHandshake = proxied ? c.spW : null; // the words cookieAck filled, in the entry before it is linked
    if (fwd2 === L.FWD_FULLNAT) {
      // PROXY protocol: the flow's header length and version, fixed for its life (E_PP).
      const ver = (proto & 0xff) === P.IPPROTO_TCP ? c.snapshot.proxyProtocol[r.rs]! : 0;
      const pp = ver === 0 ? 0 : (ver << L.PP_VER_SHIFT) | proxyHeaderLength(c, ver) | L.PP_WAIT;
      r.pp = pp;
      r.ppSeq = pp === 0 ? 0 : (P.u32(b, c.l4 + P.TCP_SEQ) + 1) | 0;
      ne = insertFullnat(c, r, dport2, spf);
      if (ne === -2) {
        if (tmpl >= 0) t.unreserve(tmpl);
        return drop(c, Drop.FullnatExhausted);
      }
    } else {
      // Masq: the server answers the client's address (IPv6: its high words are the local ones).
      r.dports = (dport2 << 16) | c.sport;
      r.laddr = c.saddr;
      if (v6) for (let i = 0; i < 3; i++) r.hi[9 + i] = hi[i]!;
      // Tunnel: the server answers the client directly, so this node sees one direction only.
      r.flags = (fwd2 === L.FWD_TUNNEL ? fwd2 | L.F_NOOUTPUT : fwd2) | spf;
      r.pp = 0;
      r.ppSeq = 0;
      ne = t.insertIn(r, f, c.ev, c.now);
      touched = ne >= 0;
    }
    const created = r.created;
    if (tmpl >= 0) {
      if (ne >= 0 && created) t.control(ne, tmpl, c.now);
      else t.unreserve(tmpl);
    }
    if (ne < 0) return drop(c, ne === -3 ? Drop.ChainFull : Drop.TableFull);
    // f may show another server than chosen: another worker created the flow first.
    if (!touched) t.touchIn(ne, f, c.ev, c.now);
    if (proxied) {
      c.out.state = f.state; // no sync event: a pending flow is not published
      c.out.proto = f.proto;
    } else this.touched(f);
    if (created) {
      c.counters[L.C_CONNS_NEW]!++;
      // Started by a packet other than a SYN / INIT: sloppy_tcp, sloppy_sctp.
      if ((proto & 0xff) === P.IPPROTO_TCP ? (c.ev & TCPF_SYN) === 0 : (proto & 0xff) === P.IPPROTO_SCTP && c.ev !== SCTP_EV_INIT)
        c.counters[L.C_SLOPPY]!++;
      c.counters[L.rsCounterBase(f.rs) + L.RSC_CONNS]!++;
      c.counters[L.svcCounterBase(c.maxRealServers, svc.slot) + L.RSC_CONNS]!++;
    }
    if (proxied) {
      if (!created) return drop(c, Drop.NoConnection); // another worker made it from the same ACK
      if ((f.fwd !== L.FWD_MASQ && f.fwd !== L.FWD_FULLNAT) || f.pp !== 0) {
        // A persistence template to a server that cannot be proxied (changed since): refused.
        t.remove(f.entry, false, c.now, f.proto, f.caddr, f.cports);
        return drop(c, Drop.NoRealServer);
      }
      return spOpen(c, b, f);
    }
    countIn(c, f.rs, svc.slot, c.totlen);
    return forwardIn(c, b, f);
  }

  /**
   * No real server for a new flow (ip_vs_leave): ICMP port unreachable to the client — or, for a
   * SYN-proxied client, whose handshake was done with uvs already, a RST at its numbers.
   */
  private noRealServer(b: Uint8Array, proxied: boolean): number {
    const c = this.c;
    if (proxied) {
      c.ev = b[c.l4 + P.TCP_FLAGS]!; // the ACK it is (the first touch's SYN is no more): RST at its ack
      return mayAnswer(c, L.GEN_RESET, Drop.NoRealServer) ? tcpReset(c, b) : DROP;
    }
    return mayAnswer(c, L.GEN_UNREACH, Drop.NoRealServer) ? unreachable(c, b) : DROP;
  }

  /**
   * The index in svc of the real server a replaced full-NAT connection had (c.keepFlow, inbound),
   * if it is still in the service and available as sh and mh see it (weight above 0, not
   * overloaded); else −1 and the scheduler picks, as for any new connection.
   */
  private keptDest(svc: CompiledService): number {
    const i = positionOf(svc.dests, this.c.flow.rs);
    return i >= 0 && !unavailable(svc.dests[i]!, this.c.table.rs) ? i : -1;
  }

  /** The service's scheduler picks a real server for the current client packet, under the service's lock (rr is one rotation across workers). */
  private schedule(svc: CompiledService, si: number): number {
    const s = this.schedulers[si];
    if (s === undefined) return -1; // the kernel asks the scheduler even with an empty list
    const c = this.c;
    const lock = svc.slot * L.SCHED_WORDS + L.SCHED_LOCK;
    const owner = c.table.owner;
    while (Atomics.compareExchange(this.sched, lock, 0, owner) !== 0) {
      /* spin: one scheduling decision */
    }
    const inp = this.input;
    inp.caddr = c.v6 ? c.cfold : c.saddr;
    inp.cport = c.sport;
    inp.vaddr = c.v6 ? c.vfold : c.daddr;
    inp.vport = c.dport;
    inp.now = c.now;
    const di = s.schedule(svc, this.sched, svc.slot * L.SCHED_WORDS + L.SCHED_STATE, c.table.rs, inp);
    Atomics.store(this.sched, lock, 0);
    return di;
  }

  // ── server → client (ip_vs_out) ────────────────────────────────────────────────────────────
  private outbound(b: Uint8Array): number {
    const c = this.c;
    const f = c.flow;
    if (!c.table.lookupOut(c.key, f, c.ev, c.now)) {
      if (c.ring !== null && c.snapshot.adopt) return this.park(b);
      return drop(c, Drop.NoConnection);
    }
    this.touched(f);
    countOut(c, f.rs, f.svc, c.totlen);
    if (f.sp !== 0) {
      // SYN-proxied: the server's handshake, or its numbers into the client's.
      const v = spOut(c, b, f);
      if (v >= 0) return v;
    }
    return forwardOut(c, b, f);
  }

  // ── after a lookup ─────────────────────────────────────────────────────────────────────────
  /** A lookup touched flow f: what it asks of Redis, and what flow sampling reports. */
  private touched(f: FlowView): void {
    const c = this.c;
    if (f.adopted) {
      c.counters[L.C_ADOPTED]!++;
      pushSync(c, f.entry);
    }
    if (f.sync) pushSync(c, f.entry);
    c.out.state = f.state;
    c.out.proto = f.proto;
  }

  /**
   * Parks a mid-flow packet that matches no entry while the control thread asks Redis for its
   * flow; if found, the control thread installs it and writes the packet back into the device.
   * Bounded: a full ring (or a packet larger than a slot) drops it, counted.
   */
  /**
   * Whether this client packet holds a second chance (layout.ts PERMIT_*): Redis knew nothing of
   * its flow twice, so it is not parked again but scheduled (sloppy) or refused. Takes the permit.
   */
  private secondChance(): boolean {
    const c = this.c;
    const r = c.ring!;
    const k = c.key;
    const hi = k.hi;
    const fold = c.v6 ? hi[0]! ^ hi[1]! ^ hi[2]! ^ hi[3]! ^ hi[4]! ^ hi[5]! : 0;
    const o = L.permitOffset() + L.permitIndex(k.proto, k.src, k.ports, k.dst, fold) * L.PERMIT_WORDS;
    const exp = Atomics.load(r, o + L.PERMIT_EXPIRES);
    if (exp === 0 || ((exp - c.now) | 0) <= 0) return false;
    if (r[o] !== k.proto || r[o + 1] !== k.src || r[o + 2] !== k.ports || r[o + 3] !== k.dst || r[o + 4] !== fold) return false;
    Atomics.store(r, o + L.PERMIT_EXPIRES, 0);
    c.counters[L.C_SECOND_CHANCE]!++;
    return true;
  }

  private park(b: Uint8Array): number {
    const c = this.c;
    // Replayed later without offload metadata: the checksum must be whole.
    if (c.partial) completePartial(c, b);
    const off = c.off;
    const len = c.totlen;
    const r = c.ring!;
    const tail = r[L.RG_PARK_TAIL]!;
    if (len > L.PARK_SLOT_BYTES || ((tail - Atomics.load(r, L.RG_PARK_HEAD)) | 0) >= L.PARK_SLOTS) {
      c.counters[L.C_PARK_FULL]!++;
      return DROP;
    }
    const slot = tail & (L.PARK_SLOTS - 1);
    const dst = L.parkDataOffset(slot);
    const x = c.ringBytes!;
    for (let i = 0; i < len; i++) x[dst + i] = b[off + i]!;
    r[L.parkLensOffset() + slot] = len;
    Atomics.store(r, L.RG_PARK_TAIL, (tail + 1) | 0);
    c.counters[L.C_PARKED]!++;
    return DROP;
  }
}
