/**
 * An independent review's checks of the offload, IPv6 and ICMP paths and the table's IPv6 keys:
 * random round trips in both families with full and partial checksums, extension headers, and
 * the bugs it found (tunnel super-packets beyond MAX_OUT segments, damaged ICMP errors given a
 * fresh checksum, a missing service out counter, an IPv6 shadow refreshed by another server).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_FIN, TCPF_PSH, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, MAX_OUT, REPLY } from '../../lb/processor';
import * as P from '../../net/packet';
import { checksumsValid, checksumsValid6, complete, field, field6, icmp6, partial, tcp, tcp6, udp, udp6 } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const V = P.VNET_HLEN;
const VIP6 = 'fd00:96::10';
const CLIENT6 = '2001:db8:1::100';
const RS6 = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];

function setup6(forwarding: string, protocol = 'tcp', offload = true, extra: Record<string, unknown> = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['fd00:96::/64'], tunnelSource6: 'fd00:1::1', fullnat: { addresses: ['fd00:99::1'] } },
      services: [{ protocol, address: VIP6, port: 80, scheduler: 'rr', forwarding, realServers: RS6.map((a) => (forwarding === 'tunnel' ? { address: a } : { address: a, port: 8080 })), ...extra }],
    },
    { offload, outBytes: 1 << 18 },
  );
}

const payload = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + 3) & 255);

test('IPv6 masq: partial TCP, and a GSO super-packet, complete to valid checksums', () => {
  const { run } = setup6('masq');
  const syn = partial(tcp6({ src: CLIENT6, dst: VIP6, sport: 40000, flags: TCPF_SYN, payload: payload(33) }));
  assert.equal(run(syn).v, FORWARD);
  assert.ok(checksumsValid6(complete(syn)));
  const big = partial(tcp6({ src: CLIENT6, dst: VIP6, sport: 40000, flags: TCPF_ACK, payload: payload(20000) }), 1400);
  assert.equal(run(big).v, FORWARD);
  assert.ok(checksumsValid6(complete(big)));
  const rip = field6(big.subarray(V)).dst;
  const rep = partial(tcp6({ src: rip, dst: CLIENT6, sport: 8080, dport: 40000, flags: TCPF_ACK | TCPF_SYN, payload: payload(7) }));
  assert.equal(run(rep).v, FORWARD);
  assert.ok(checksumsValid6(complete(rep)));
});

test('IPv6 full-NAT: partial UDP and TCP both ways', () => {
  for (const proto of ['udp', 'tcp']) {
    const { run } = setup6('fullnat', proto);
    const mk = proto === 'udp' ? udp6 : tcp6;
    const q = partial(mk({ src: CLIENT6, dst: VIP6, sport: 5000, dport: 80, flags: TCPF_SYN, payload: payload(101) }));
    assert.equal(run(q).v, FORWARD);
    const f = field6(q.subarray(V));
    assert.equal(f.src, 'fd00:99::1');
    assert.ok(checksumsValid6(complete(q)), proto);
    const r = partial(mk({ src: f.dst, dst: f.src, sport: f.dport, dport: f.sport, flags: TCPF_SYN | TCPF_ACK, payload: payload(60) }));
    assert.equal(run(r).v, FORWARD);
    const g = field6(r.subarray(V));
    assert.deepEqual([g.src, g.sport, g.dst, g.dport], [VIP6, 80, CLIENT6, 5000]);
    assert.ok(checksumsValid6(complete(r)), proto);
  }
});

test('IPv6 tunnel: partial and GSO segments', () => {
  const { run, proc, out } = setup6('tunnel');
  const syn = partial(tcp6({ src: CLIENT6, dst: VIP6, sport: 40002, flags: TCPF_SYN, payload: payload(10) }));
  const inner = complete(syn);
  assert.equal(run(syn).v, REPLY);
  const framed = out.slice(proc.outOff - V, proc.outOff + proc.outLen);
  assert.equal(P.le16(framed, P.VNET_CSUM_START), 80);
  const outer = complete(framed);
  assert.equal(outer[P.IP6_NEXT], 41);
  assert.ok(RS6.includes(field6(outer).dst));
  assert.deepEqual([...outer.subarray(40)], [...inner]);
  const data = payload(5000);
  const seq = 0xfffff000;
  assert.equal(run(partial(tcp6({ src: CLIENT6, dst: VIP6, sport: 40002, flags: TCPF_ACK | TCPF_PSH | TCPF_FIN, seq, payload: data }), 1400)).v, REPLY);
  assert.equal(proc.outCount, 4);
  const got: number[] = [];
  for (let k = 0; k < proc.outCount; k++) {
    const seg = complete(out.slice(proc.outOffs[k]!, proc.outOffs[k]! + proc.outLens[k]!));
    assert.equal(40 + P.u16(seg, P.IP6_PLEN), seg.length);
    const i = seg.subarray(40);
    assert.equal(40 + P.u16(i, P.IP6_PLEN), i.length);
    assert.ok(checksumsValid6(i), `segment ${k}`);
    got.push(...i.subarray(60));
  }
  assert.deepEqual(got, [...data]);
});

test('ICMPv6 errors through full-NAT both ways, and tunnel', () => {
  const { run } = setup6('fullnat', 'udp', false);
  const q = run(udp6({ src: CLIENT6, dst: VIP6, sport: 5353, dport: 80, payload: payload(10) }));
  const sent = field6(q.pkt);
  const up = run(icmp6({ src: sent.dst, dst: sent.src, type: P.ICMP6_DST_UNREACH, code: 4, payload: q.pkt.slice() }));
  assert.equal(up.v, FORWARD);
  const f = field6(up.pkt);
  assert.deepEqual([f.src, f.dst], [VIP6, CLIENT6]);
  const qq = field6(up.pkt, 48);
  assert.deepEqual([qq.src, qq.sport, qq.dst, qq.dport], [CLIENT6, 5353, VIP6, 80]);
  assert.ok(checksumsValid6(up.pkt));
  const reply = run(udp6({ src: sent.dst, dst: sent.src, sport: 8080, dport: sent.sport, payload: payload(10) }));
  const down = run(icmp6({ src: '2001:db8:7::1', dst: VIP6, type: P.ICMP6_TIME_EXCEEDED, payload: reply.pkt.slice() }));
  assert.equal(down.v, FORWARD);
  const g = field6(down.pkt);
  assert.deepEqual([g.src, g.dst], ['fd00:99::1', sent.dst]);
  const qd = field6(down.pkt, 48);
  assert.deepEqual([qd.src, qd.sport, qd.dst, qd.dport], [sent.dst, 8080, 'fd00:99::1', sent.sport]);
  assert.ok(checksumsValid6(down.pkt));

  // Tunnel: an error to the VIP quoting a reply a real server sent straight to the client
  // (VIP:80 → client) goes, encapsulated unchanged in ip6ip6 from tunnelSource6, to the real
  // server of that flow (ip_vs_in_icmp_v6 → the conn's xmit). Three flows on three servers, so
  // that a lookup of the wrong flow, or none, shows.
  const tun = setup6('tunnel', 'udp', false);
  const rsOf = new Map<number, string>();
  for (const sport of [6001, 6002, 6003]) {
    const r = tun.run(udp6({ src: CLIENT6, dst: VIP6, sport, dport: 80, payload: payload(10) }));
    assert.equal(r.v, REPLY);
    rsOf.set(sport, field6(r.reply!).dst);
  }
  assert.equal(new Set(rsOf.values()).size, 3, 'rr spread the three flows');
  const quoted = udp6({ src: VIP6, dst: CLIENT6, sport: 80, dport: 6002, payload: payload(10) });
  const err = icmp6({ src: '2001:db8:7::1', dst: VIP6, type: P.ICMP6_DST_UNREACH, code: 0, payload: quoted });
  const original = err.slice();
  const te = tun.run(err);
  assert.equal(te.v, REPLY);
  const enc = te.reply!;
  assert.equal(enc[P.IP6_NEXT], P.IPPROTO_IPV6);
  assert.equal(P.u16(enc, P.IP6_PLEN), original.length);
  assert.deepEqual([field6(enc).src, field6(enc).dst], ['fd00:1::1', rsOf.get(6002)]);
  assert.deepEqual([...enc.subarray(40)], [...original], 'the ICMPv6 error is carried unchanged');
  const stray = icmp6({ src: '2001:db8:7::1', dst: VIP6, type: P.ICMP6_DST_UNREACH, code: 0, payload: udp6({ src: VIP6, dst: CLIENT6, sport: 80, dport: 6009, payload: payload(10) }) });
  assert.equal(tun.run(stray).v, DROP, 'an error about no tracked flow is not tunnelled anywhere');
});

test('IPv6 entries are removed by the sweeper (keys hash the same at insert and remove)', () => {
  const { run, table } = setup6('fullnat', 'udp', false, { persistence: 60, netmask: 64 });
  for (let i = 0; i < 50; i++) run(udp6({ src: `2001:db8:${i}::${i + 1}`, dst: VIP6, sport: 5000 + i, dport: 80 }));
  assert.equal(table.count(), 100);
  const now = table.now();
  table.expire(now + 400_000);
  table.expire(now + 400_000 + 61_000);
  assert.equal(table.count(), 0);
});

/** IPv6 TCP/UDP with a destination-options header (8 bytes) before the transport header. */
function withDstOpts(pkt: Uint8Array): Uint8Array {
  const b = new Uint8Array(pkt.length + 8);
  b.set(pkt.subarray(0, 40), 0);
  b.set(pkt.subarray(40), 48);
  b[48 - 8] = pkt[P.IP6_NEXT]!;
  b[48 - 7] = 0; // 8 bytes
  b[48 - 6] = 1; // PadN
  b[48 - 5] = 4;
  b[P.IP6_NEXT] = 60;
  P.put16(b, P.IP6_PLEN, P.u16(pkt, P.IP6_PLEN) + 8);
  return b;
}
function plainFrame(q: Uint8Array): Uint8Array {
  const b = new Uint8Array(V + q.length);
  b.set(q, V);
  return b;
}
function valid6x(b: Uint8Array): boolean {
  const hasOpt = b[P.IP6_NEXT] === 60;
  const l4 = hasOpt ? 48 : 40;
  const next = hasOpt ? b[40]! : b[P.IP6_NEXT]!;
  const l4len = 40 + P.u16(b, P.IP6_PLEN) - l4;
  return P.sum16(b, l4, l4len, P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, next, l4len)) === 0xffff;
}

test('random flows, both families, masq and full-NAT, full and partial checksums: all valid both ways', () => {
  let seed = 12345;
  const rnd = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return seed >>> 0;
  };
  for (const fwd of ['masq', 'fullnat']) {
    for (const offload of [false, true]) {
      const { run } = makeProcessor(
        {
          dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], fullnat: { addresses: ['10.2.0.1', 'fd00:99::abcd:1'] } },
          services: [
            { protocol: 'tcp', address: 'fd00:96::10', port: 80, scheduler: 'rr', forwarding: fwd, realServers: RS6.map((a) => ({ address: a, port: 8080 })) },
            { protocol: 'udp', address: 'fd00:96::10', port: 80, scheduler: 'rr', forwarding: fwd, realServers: RS6.map((a) => ({ address: a, port: 8080 })) },
            { protocol: 'tcp', address: '10.96.0.10', port: 80, scheduler: 'rr', forwarding: fwd, realServers: [{ address: '10.0.0.1', port: 8080 }, { address: '10.0.0.2', port: 8081 }] },
            { protocol: 'udp', address: '10.96.0.10', port: 80, scheduler: 'rr', forwarding: fwd, realServers: [{ address: '10.0.0.1', port: 8080 }] },
          ],
        },
        { offload, outBytes: 1 << 18, capacity: 4096 },
      );
      for (let i = 0; i < 300; i++) {
        const v6 = (rnd() & 1) === 1;
        const isUdp = (rnd() & 1) === 1;
        const sport = 1024 + (rnd() % 60000);
        const pl = payload(rnd() % 300);
        const opt = v6 && (rnd() & 1) === 1;
        if (v6) {
          const c = `2001:db8:${(rnd() & 0xffff).toString(16)}:${(rnd() & 0xffff).toString(16)}::${(rnd() & 0xffff).toString(16)}:${(rnd() & 0xffff).toString(16)}`;
          let q = (isUdp ? udp6 : tcp6)({ src: c, dst: VIP6, sport, dport: 80, flags: TCPF_SYN, payload: pl });
          if (opt) q = withDstOpts(q);
          const framed = offload && !opt ? partial(q) : offload ? (() => { const b = new Uint8Array(V + q.length); b.set(q, V); return b; })() : q;
          const r = run(framed);
          assert.equal(r.v, FORWARD, `${fwd} v6 ${i}`);
          const out = offload ? complete(framed) : framed;
          assert.ok(valid6x(out), `${fwd} v6 ${isUdp ? 'udp' : 'tcp'} opt=${opt} offload=${offload} in ${i}`);
          const f = field6(out, opt ? 8 : 0);
          const fa = field6(out);
          // reply
          let rp = (isUdp ? udp6 : tcp6)({ src: fa.dst, dst: fa.src, sport: 8080, dport: P.u16(out, opt ? 48 : 40), flags: TCPF_SYN | TCPF_ACK, payload: pl });
          if (opt) rp = withDstOpts(rp);
          const rf = offload && !opt ? partial(rp) : offload ? (() => { const b = new Uint8Array(V + rp.length); b.set(rp, V); return b; })() : rp;
          const rr = run(rf);
          assert.equal(rr.v, FORWARD, `${fwd} v6 reply ${i}`);
          const ro = offload ? complete(rf) : rf;
          assert.ok(valid6x(ro), `${fwd} v6 reply ${i}`);
          const g = field6(ro);
          assert.deepEqual([g.src, g.dst], [VIP6, c]);
          void f;
        } else {
          const c = `172.${rnd() & 255}.${rnd() & 255}.${rnd() & 255}`;
          const q = (isUdp ? udp : tcp)({ src: c, dst: '10.96.0.10', sport, dport: 80, flags: TCPF_SYN, payload: pl, udpNoChecksum: isUdp && (rnd() & 3) === 0 });
          const qf = offload ? plainFrame(q) : q;
          const r = run(qf);
          assert.equal(r.v, FORWARD);
          q.set(qf.subarray(qf.length - q.length));
          assert.ok(checksumsValid(q), `${fwd} v4 ${i}`);
          const f = field(q);
          const rp = (isUdp ? udp : tcp)({ src: f.dst, dst: f.src, sport: f.dport, dport: f.sport, flags: TCPF_SYN | TCPF_ACK, payload: pl });
          const rpf = offload ? plainFrame(rp) : rp;
          assert.equal(run(rpf).v, FORWARD);
          rp.set(rpf.subarray(rpf.length - rp.length));
          assert.ok(checksumsValid(rp));
          assert.deepEqual([field(rp).src, field(rp).dst, field(rp).dport], ['10.96.0.10', c, sport]);
        }
      }
    }
  }
});

test('putShadow: an IPv6 record for the same client key but another real server is not taken as a refresh', async () => {
  const { ConnTable, createRealServerRegion } = await import('../../conntrack/table');
  const { parseIPv6 } = await import('../../net/addr');
  const t = new ConnTable(ConnTable.create(64, { tcp: [0, 900, 120, 60, 120, 60, 10, 60, 60, 120, 10], udp: 300 }), createRealServerRegion(8), L.OWNER_CONTROL);
  const c = parseIPv6('2001:db8::5')!, v = parseIPv6('fd00:96::10')!;
  const r1 = parseIPv6('fd00:10::1')!, r2 = parseIPv6('fd00:20::1')!; // same last 32 bits
  const hi = (r: Int32Array) => [c[0]!, c[1]!, c[2]!, v[0]!, v[1]!, v[2]!, r[0]!, r[1]!, r[2]!, c[0]!, c[1]!, c[2]!];
  const proto = 6 | L.PROTO_V6;
  const cports = (40000 << 16) | 80, dports = (8080 << 16) | 40000;
  const now = t.now();
  const e1 = t.putShadow(proto, c[3]!, cports, v[3]!, r1[3]!, dports, c[3]!, 0, 1, 0, 3, false, now + 10_000, hi(r1));
  assert.ok(e1 >= 0);
  const e2 = t.putShadow(proto, c[3]!, cports, v[3]!, r2[3]!, dports, c[3]!, 0, 2, 0, 3, false, now + 900_000, hi(r2));
  // IPv4 semantics: a different server for the key → -1, the old shadow keeps its own timer.
  assert.equal(e2, -1, 'a record naming fd00:20::1 refreshed the shadow that points at fd00:10::1');
});

function setup4(forwarding: 'masq' | 'tunnel' | 'fullnat', protocol = 'tcp', offload = false) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1', fullnat: { addresses: ['10.2.0.1'] } },
      services: [{ protocol, address: '10.96.0.10', port: 80, scheduler: 'rr', forwarding, realServers: ['10.0.0.1', '10.0.0.2'].map((a) => (forwarding === 'tunnel' ? { address: a } : { address: a, port: 8080 })) }],
    },
    { offload, outBytes: 1 << 18 },
  );
}

test('tunnel: a super-packet of MAX_OUT segments is segmented; one of more is dropped and counted (uvsd sets gso_max_segs so the kernel never sends one)', () => {
  // Measured on this kernel: without gso_max_segs a TUN with TSO hands over GSO packets of 742
  // segments at MSS 88 and 163 at MSS 400.
  const { run, proc, drops } = setup4('tunnel', 'tcp', true);
  const frame = (pkt: Uint8Array, g: number) => {
    const b = new Uint8Array(V + pkt.length);
    b.set(pkt, V);
    P.put16(b, V + 20 + P.TCP_CSUM, P.fold16(P.pseudoSum(P.u32(pkt, P.IP_SRC), P.u32(pkt, P.IP_DST), 6, pkt.length - 20)));
    b[P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
    P.putLe16(b, P.VNET_CSUM_START, 20);
    P.putLe16(b, P.VNET_CSUM_OFFSET, P.TCP_CSUM);
    if (g) {
      b[P.VNET_GSO_TYPE] = P.VNET_GSO_TCPV4;
      P.putLe16(b, P.VNET_GSO_SIZE, g);
      P.putLe16(b, P.VNET_HDR_LEN, 40);
    }
    return b;
  };
  assert.equal(run(frame(tcp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 40000, flags: TCPF_SYN }), 0)).v, REPLY);
  const r = run(frame(tcp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 40000, flags: TCPF_ACK, payload: payload(MAX_OUT * 400) }), 400));
  assert.equal(r.v, REPLY);
  assert.equal(proc.outCount, MAX_OUT);
  const over = run(frame(tcp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 40000, flags: TCPF_ACK, payload: payload(60000) }), 400));
  assert.equal(over.v, DROP, '150 segments: more than a worker can write for one packet');
  assert.equal(drops('truncated'), 1);
});

/** An ICMP error from src to dst quoting `about` (header + 8 bytes). */
function icmpErr(src: number, dst: number, type: number, code: number, about: Uint8Array): Uint8Array {
  const q = about.subarray(0, 28);
  const b = new Uint8Array(28 + q.length);
  b[0] = 0x45;
  P.put16(b, 2, b.length);
  b[8] = 64;
  b[9] = 1;
  P.put32(b, 12, src);
  P.put32(b, 16, dst);
  P.put16(b, 10, P.checksum(b, 0, 20, 0));
  b[20] = type;
  b[21] = code;
  b.set(q, 28);
  P.put16(b, 22, P.checksum(b, 20, b.length - 20, 0));
  return b;
}

test('ICMP errors with a bad ICMP checksum are dropped, not re-checksummed into valid ones (ip_vs_in_icmp / handle_response_icmp)', () => {
  const { run } = setup4('masq', 'udp');
  const q = run(udp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 5353, dport: 80, payload: payload(10) }));
  const f = field(q.pkt);
  const err = icmpErr(P.u32(q.pkt, 16), P.u32(q.pkt, 12), 3, 3, q.pkt);
  err[40]! ^= 0x55; // damage a quoted byte: the ICMP checksum no longer verifies
  assert.notEqual(P.sum16(err, 20, err.length - 20, 0), 0xffff);
  const r = run(err);
  void f;
  assert.equal(r.v, DROP, 'a damaged ICMP error was forwarded with a freshly computed (valid) checksum');
});

test('ICMPv6 errors with a bad checksum are dropped too', () => {
  const { run } = setup6('masq', 'udp', false);
  const q = run(udp6({ src: CLIENT6, dst: VIP6, sport: 5353, dport: 80, payload: payload(10) }));
  const sent = field6(q.pkt);
  const err = icmp6({ src: sent.dst, dst: sent.src, type: P.ICMP6_DST_UNREACH, code: 4, payload: q.pkt.slice() });
  err[err.length - 1]! ^= 0x55;
  assert.equal(run(err).v, DROP);
});

test('a translated ICMP error from a real server counts in the service out counters too (ip_vs_out_stats)', () => {
  const { run, counters } = setup4('masq', 'udp');
  const q = run(udp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 5353, dport: 80, payload: payload(10) }));
  const err = icmpErr(P.u32(q.pkt, 16), P.u32(q.pkt, 12), 3, 3, q.pkt);
  assert.equal(run(err).v, FORWARD);
  // service slot 0 (the only one), maxRealServers 16
  const sb = L.svcCounterBase(16, 0);
  let rsOut = 0;
  for (let rs = 0; rs < 16; rs++) rsOut += counters[L.rsCounterBase(rs) + L.RSC_OUTPKTS]!;
  assert.equal(rsOut, 1, 'real server out packets');
  assert.equal(counters[sb + L.RSC_OUTPKTS], 1, 'service out packets');
});

test('IPv6 with a destination-options header and a partial checksum: rewritten and valid', () => {
  const { run } = setup6('fullnat', 'tcp');
  const pkt = withDstOpts(tcp6({ src: CLIENT6, dst: VIP6, sport: 41000, flags: TCPF_SYN, payload: payload(50) }));
  const b = new Uint8Array(V + pkt.length);
  b.set(pkt, V);
  const l4len = P.u16(pkt, P.IP6_PLEN) - 8;
  P.put16(b, V + 48 + P.TCP_CSUM, P.fold16(P.pseudoSum6(pkt, P.IP6_SRC, P.IP6_DST, 6, l4len)));
  b[P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
  P.putLe16(b, P.VNET_CSUM_START, 48);
  P.putLe16(b, P.VNET_CSUM_OFFSET, P.TCP_CSUM);
  assert.equal(run(b).v, FORWARD);
  assert.equal(b[P.VNET_FLAGS], P.VNET_F_NEEDS_CSUM);
  assert.ok(valid6x(complete(b)));
  assert.equal(field6(b.subarray(V)).src, 'fd00:99::1');
});
