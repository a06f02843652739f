/**
 * lb/xmit.ts corners the flow tests leave open: which flows take the PROXY protocol path (only
 * full-NAT TCP flows with a header — a masq segment at sequence number 0 is no header's place,
 * a full-NAT flow without one syncs nothing extra), the PROXY header segment under offloads, at
 * the output region's end and over IPv6 (the addresses of the flow it belongs to, its length
 * fixed at the SYN), the IPv6 rewrite (SCTP, a UDP checksum of 0, a TCP checksum that comes out
 * 0), and full-NAT port allocation (no pool, an IPv6 pool address, a full pool remembered for
 * FULLNAT_FULL_MS per pool address and server). Checksums are summed here (RFC 1071).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import { FULLNAT_FULL_MS } from '../../lb/xmit';
import { parseIPv6 } from '../../net/addr';
import * as P from '../../net/packet';
import { field, field6, initValue, sctp6, sctp6CrcValid, tcp, tcp6, udp, udp6 } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const V = P.VNET_HLEN;
const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = '10.0.0.1';

function sum(b: ArrayLike<number>, from: number, to: number, initial = 0): number {
  let s = initial;
  for (let i = from; i < to; i += 2) s += (b[i]! << 8) | (i + 1 < to ? b[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}
/** The IPv6 pseudo-header sum (RFC 8200 §8.1) of the packet's addresses, next header and L4 length. */
function pseudo6(pkt: Uint8Array, next: number): number {
  const len = P.u16(pkt, P.IP6_PLEN);
  return sum(pkt, 8, 40, (len >>> 16) + (len & 0xffff) + next);
}
const l4Valid6 = (pkt: Uint8Array) => sum(pkt, 40, 40 + P.u16(pkt, P.IP6_PLEN), pseudo6(pkt, pkt[P.IP6_NEXT]!)) === 0xffff;
const l4Valid4 = (pkt: Uint8Array) =>
  sum(pkt, 20, P.u16(pkt, P.IP_TOTLEN), sum(pkt, 12, 20, pkt[P.IP_PROTO]! + P.u16(pkt, P.IP_TOTLEN) - 20)) === 0xffff;

// ── which flows take the PROXY protocol path ─────────────────────────────────────────────────
test('masq: a client segment whose sequence number is 0 is forwarded as any other (no PROXY header place)', () => {
  const p = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'] },
    services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] }],
  });
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN, seq: 0xffffffff })).v, FORWARD);
  const data = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, seq: 0, payload: payload(20) });
  const r = p.run(data);
  assert.equal(r.v, FORWARD);
  assert.equal(field(data).seq, 0);
  assert.equal(field(data).dst, RS);
  assert.ok(l4Valid4(data));
  assert.equal(p.counters[L.C_PP_HEADERS], 0);
});

test('full-NAT without a PROXY header: a server ACK is no header acknowledgement and queues no sync event', () => {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] } },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding: 'fullnat', realServers: [{ address: RS, port: 8080 }] },
      ],
    },
    { ring: true },
  );
  p.table.setSync(true);
  const r = new Int32Array(p.ring!);
  const c = (flags: number, seq: number, ack = 0) => tcp({ src: CLIENT, dst: VIP, sport: 40000, flags, seq, ack });
  const syn = c(TCPF_SYN, 1000);
  assert.equal(p.run(syn).v, FORWARD);
  const lport = field(syn).sport;
  const s = (flags: number, seq: number, ack: number, n = 0) =>
    tcp({ src: RS, dst: '10.99.0.1', sport: 8080, dport: lport, flags, seq, ack, payload: payload(n) });
  assert.equal(p.run(s(TCPF_SYN | TCPF_ACK, 5000, 1001)).v, FORWARD);
  assert.equal(p.run(c(TCPF_ACK, 1001, 5001)).v, FORWARD);
  const before = Atomics.load(r, L.RG_SYNC_TAIL);
  // The server's data, ESTABLISHED: no state change, and replies do not count toward the sync.
  for (let i = 0; i < 3; i++) {
    const reply = s(TCPF_ACK, 5001 + 10 * i, 1001, 10);
    assert.equal(p.run(reply).v, FORWARD);
    assert.equal(field(reply).ack, 1001, 'acknowledgement unchanged');
  }
  assert.equal(Atomics.load(r, L.RG_SYNC_TAIL), before, 'no sync event');
  let pp = -1;
  p.table.forEach((_e, o) => (pp = p.table.i32[o + L.E_PP]!));
  assert.equal(pp, 0, 'the flow has no PROXY state');
});

// ── the PROXY header segment ─────────────────────────────────────────────────────────────────
function ppSetup(o: { v6?: boolean; pp?: string; offload?: boolean; outBytes?: number } = {}) {
  return makeProcessor(
    {
      dataplane: {
        vipCidrs: ['10.96.0.0/24', 'fd00:96:1:2::/64'],
        fullnat: { addresses: ['10.99.0.1', 'fd00:99::1'], portMin: 20000, portMax: 20099 },
      },
      services: [
        {
          address: o.v6 ? 'fd00:96:1:2:3::10' : VIP,
          port: 80,
          forwarding: 'fullnat',
          proxyProtocol: o.pp ?? 'v2',
          realServers: [{ address: o.v6 ? 'fd00:1::1' : RS, port: 8080 }],
        },
      ],
    },
    { offload: o.offload ?? false, outBytes: o.outBytes ?? 1 << 16 },
  );
}
/** The PROXY v2 header's length for IPv4 (16 + 12) and its signature. */
const V2_4 = 28;
const V2_SIG = [0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a];

/** SYN, the server's SYN-ACK; returns the pool port. */
function open4(p: ReturnType<typeof ppSetup>, sport: number, isn: number, frame = false): number {
  const w = (pkt: Uint8Array) => (frame ? framed(pkt) : pkt);
  const syn = w(tcp({ src: CLIENT, dst: VIP, sport, flags: TCPF_SYN, seq: isn }));
  assert.equal(p.run(syn).v, FORWARD);
  const lport = field(syn.subarray(frame ? V : 0)).sport;
  assert.equal(
    p.run(w(tcp({ src: RS, dst: '10.99.0.1', sport: 8080, dport: lport, flags: TCPF_SYN | TCPF_ACK, seq: 7000, ack: isn + 1 }))).v,
    FORWARD,
  );
  return lport;
}
const framed = (pkt: Uint8Array) => {
  const b = new Uint8Array(V + pkt.length);
  b.set(pkt, V);
  return b;
};

test('offloads: data on the first ACK goes out behind the header segment, shifted by the header length', () => {
  const p = ppSetup({ offload: true });
  const isn = 0x10000000;
  open4(p, 40000, isn, true);
  const data = payload(5); // fewer bytes than the virtio header and the IP header together
  const r = p.run(framed(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, seq: isn + 1, ack: 7001, payload: data })));
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, 2, 'the header segment, then the client segment');
  const [h, d] = r.outs.map((o) => o.slice(V));
  assert.deepEqual([...h!.subarray(40, 52)], V2_SIG);
  assert.equal(P.u16(h!, P.IP_TOTLEN), 40 + V2_4);
  assert.equal(h!.length, 40 + V2_4, 'the header segment is sent at its length');
  assert.equal(d!.length, 40 + data.length);
  assert.equal(field(h!).seq, isn + 1);
  assert.ok(l4Valid4(h!));
  assert.equal(field(d!).seq, isn + 1 + V2_4, 'the data after the header');
  assert.deepEqual([...d!.subarray(40)], [...data]);
  assert.ok(l4Valid4(d!));
});

test('the header segment and the client segment behind it must fit the output region: exactly is enough, one byte less is output_full', () => {
  const isn = 0x20000000;
  const data = payload(30);
  const need = 40 + V2_4 + 40 + data.length; // header segment, then the client's segment
  for (const end of [need, need - 1]) {
    const p = ppSetup();
    open4(p, 40000, isn);
    p.out.fill(0xa5);
    p.region.off = 0;
    p.region.end = end;
    const pkt = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, seq: isn + 1, ack: 7001, payload: data });
    const v = p.proc.process(pkt, 0, pkt.length, p.region);
    assert.deepEqual(
      [...p.out.subarray(end, end + 200)].filter((x) => x !== 0xa5),
      [],
      'nothing past the end',
    );
    if (end === need) {
      assert.equal(v, REPLY);
      assert.equal(p.region.count, 2);
    } else {
      assert.equal(v, DROP);
      assert.equal(p.drops('output_full'), 1);
    }
  }
  // A bare ACK: the header segment alone.
  for (const end of [40 + V2_4, 40 + V2_4 - 1]) {
    const p = ppSetup();
    open4(p, 40001, isn);
    p.region.off = 0;
    p.region.end = end;
    const pkt = tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_ACK, seq: isn + 1, ack: 7001 });
    assert.equal(p.proc.process(pkt, 0, pkt.length, p.region), end === 40 + V2_4 ? REPLY : DROP, `end ${end}`);
  }
});

test("IPv6: each flow's header carries its own addresses (two clients interleaved), with a right payload length; v1 shifts by its own text", () => {
  const VIP6 = 'fd00:96:1:2:3::10';
  const clients = ['2001:db8:aa:bb::7', '2001:db8:cc:dd:ee::9'];
  for (const pp of ['v2', 'v1']) {
    const p = ppSetup({ v6: true, pp });
    const isn = [0x30000000, 0x40000000];
    const lports: number[] = [];
    for (const [k, cl] of clients.entries()) {
      const syn = tcp6({ src: cl, dst: VIP6, sport: 41000 + k, flags: TCPF_SYN, seq: isn[k] });
      assert.equal(p.run(syn).v, FORWARD);
      lports.push(P.u16(syn, 40));
    }
    for (const k of clients.keys()) {
      const sa = tcp6({
        src: 'fd00:1::1',
        dst: 'fd00:99::1',
        sport: 8080,
        dport: lports[k],
        flags: TCPF_SYN | TCPF_ACK,
        seq: 9000,
        ack: isn[k]! + 1,
      });
      assert.equal(p.run(sa).v, FORWARD);
    }
    for (const [k, cl] of clients.entries()) {
      const data = payload(11);
      const r = p.run(tcp6({ src: cl, dst: VIP6, sport: 41000 + k, flags: TCPF_ACK, seq: isn[k]! + 1, ack: 9001, payload: data }));
      assert.equal(r.v, REPLY, `${pp} client ${k}`);
      const [h, d] = r.outs;
      const hlen = P.u16(h!, P.IP6_PLEN) - 20;
      assert.equal(h!.length, 40 + 20 + hlen, 'payload length = the segment');
      assert.ok(l4Valid6(h!), `${pp}: header segment checksum`);
      const hdr = h!.subarray(60);
      if (pp === 'v2') {
        assert.equal(hlen, 16 + 36);
        const a = (at: number) =>
          [...parseIPv6(at === 0 ? cl : VIP6)!].flatMap((w) => [(w >>> 24) & 255, (w >>> 16) & 255, (w >>> 8) & 255, w & 255]);
        assert.deepEqual([...hdr.subarray(16, 32)], a(0), "the source is this flow's client");
        assert.deepEqual([...hdr.subarray(32, 48)], a(1), 'the destination is the VIP');
      } else {
        const line = Buffer.from(hdr).toString('latin1');
        assert.equal(line, `PROXY TCP6 ${cl} ${VIP6} ${41000 + k} 80\r\n`);
      }
      assert.equal(P.u32(d!, 44) >>> 0, isn[k]! + 1 + hlen, `${pp}: data shifted by the header's own length`);
      assert.deepEqual([...d!.subarray(60)], [...data]);
      assert.ok(l4Valid6(d!));
    }
  }
});

// ── the IPv6 rewrite ─────────────────────────────────────────────────────────────────────────
function masq6(protocol: string, port = 80) {
  return makeProcessor({
    dataplane: { vipCidrs: ['fd00:96::/64'] },
    services: [{ protocol, address: 'fd00:96::10', port, scheduler: 'rr', realServers: [{ address: 'fd00:10:1:2::5', port: 8080 }] }],
  });
}

test('IPv6 SCTP through masq: addresses and ports rewritten, the rest of the common header kept, CRC32c valid both ways', () => {
  const p = masq6('sctp', 3868);
  const init = sctp6({
    src: '2001:db8:1::100',
    dst: 'fd00:96::10',
    sport: 5000,
    dport: 3868,
    vtag: 0,
    chunks: [{ type: 1, value: initValue(0x1234) }],
  });
  assert.equal(p.run(init).v, FORWARD);
  assert.deepEqual(
    [field6(init).src, field6(init).dst, field6(init).sport, field6(init).dport],
    ['2001:db8:1::100', 'fd00:10:1:2::5', 5000, 8080],
  );
  assert.equal(P.u32(init, 44), 0, 'verification tag');
  assert.ok(sctp6CrcValid(init));
  const ack = sctp6({
    src: 'fd00:10:1:2::5',
    dst: '2001:db8:1::100',
    sport: 8080,
    dport: 5000,
    vtag: 0x1234,
    chunks: [{ type: 2, value: initValue(0x5678) }],
  });
  assert.equal(p.run(ack).v, FORWARD);
  assert.deepEqual([field6(ack).src, field6(ack).sport], ['fd00:96::10', 3868]);
  assert.equal(P.u32(ack, 44), 0x1234);
  assert.ok(sctp6CrcValid(ack));
});

test('IPv6 UDP with checksum 0 keeps 0 through the rewrite; a computed 0 goes out as 0xffff; both ways', () => {
  const p = masq6('udp', 53);
  const q = udp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 5000, dport: 53, payload: payload(20) });
  P.put16(q, 46, 0);
  assert.equal(p.run(q).v, FORWARD);
  assert.equal(field6(q).dst, 'fd00:10:1:2::5');
  assert.equal(P.u16(q, 46), 0, 'not ours to invent one');
  const r = udp6({ src: 'fd00:10:1:2::5', dst: '2001:db8:1::100', sport: 8080, dport: 5000, payload: payload(20) });
  P.put16(r, 46, 0);
  assert.equal(p.run(r).v, FORWARD);
  assert.equal(P.u16(r, 46), 0);
  // A datagram whose checksum after the rewrite computes to 0.
  const d = zeroAfter(
    udp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 5001, dport: 53, payload: payload(20) }),
    'fd00:10:1:2::5',
    8080,
  );
  assert.equal(p.run(d).v, FORWARD);
  assert.equal(P.u16(d, 46), 0xffff);
  assert.ok(l4Valid6(d));
});

test('IPv6 TCP whose checksum after the rewrite computes to 0 keeps 0 (TCP has no "no checksum")', () => {
  const p = masq6('tcp');
  const syn = zeroAfter(
    tcp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 40000, flags: TCPF_SYN, payload: payload(20) }),
    'fd00:10:1:2::5',
    8080,
  );
  assert.equal(p.run(syn).v, FORWARD);
  assert.equal(field6(syn).dst, 'fd00:10:1:2::5');
  assert.equal(P.u16(syn, 56), 0);
  assert.ok(l4Valid6(syn));
  // And one whose checksum is 0 before the rewrite: TCP's 0 is a checksum like any other.
  const z = tcp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 40001, flags: TCPF_SYN, payload: payload(20) });
  P.put16(z, z.length - 2, 0);
  P.put16(z, 56, 0);
  P.put16(z, z.length - 2, 0xffff - sum(z, 40, z.length, pseudo6(z, 6)));
  assert.equal(sum(z, 40, z.length, pseudo6(z, 6)), 0xffff, 'valid with checksum 0');
  assert.equal(p.run(z).v, FORWARD);
  assert.equal(field6(z).dst, 'fd00:10:1:2::5');
  assert.ok(l4Valid6(z), 'updated, not kept');
});

/**
 * Sets the last payload word of an IPv6 TCP/UDP packet so that, once its destination is `dst`
 * and its destination port `dport`, its checksum computes to 0; returns it with the checksum
 * right for the packet as it is.
 */
function zeroAfter(pkt: Uint8Array, dst: string, dport: number): Uint8Array {
  const next = pkt[P.IP6_NEXT]!;
  const co = 40 + (next === P.IPPROTO_TCP ? 16 : 6);
  const end = pkt.length;
  const after = pkt.slice();
  const w = parseIPv6(dst)!;
  for (let i = 0; i < 4; i++) P.put32(after, 24 + 4 * i, w[i]!);
  P.put16(after, 42, dport);
  P.put16(after, co, 0);
  P.put16(after, end - 2, 0);
  const s = sum(after, 40, end, pseudo6(after, next));
  P.put16(pkt, end - 2, 0xffff - s);
  P.put16(pkt, co, 0);
  P.put16(pkt, co, ~sum(pkt, 40, end, pseudo6(pkt, next)) & 0xffff);
  return pkt;
}

// ── full-NAT ports ───────────────────────────────────────────────────────────────────────────
test("full-NAT with no pool address of the flow's family refuses the flow (fullnat_ports_exhausted)", () => {
  const p = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] } },
    services: [
      { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding: 'fullnat', realServers: [{ address: RS, port: 8080 }] },
    ],
  });
  p.proc.setSnapshot({ ...p.model.apply(p.cfg), fullnatAddrs: new Int32Array(0) });
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN })).v, DROP);
  assert.equal(p.drops('fullnat_ports_exhausted'), 1);
  assert.equal(p.table.count(), 0);
});

test('full-NAT over IPv6: the server sees the pool address, all of its words', () => {
  const p = makeProcessor({
    dataplane: { vipCidrs: ['fd00:96::/64'], fullnat: { addresses: ['fd00:99:1:2:3:4:5:6'] } },
    services: [
      {
        protocol: 'udp',
        address: 'fd00:96::10',
        port: 53,
        scheduler: 'rr',
        forwarding: 'fullnat',
        realServers: [{ address: 'fd00:10:7:8::5', port: 8080 }],
      },
    ],
  });
  const q = udp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 5000, dport: 53, payload: payload(9) });
  assert.equal(p.run(q).v, FORWARD);
  assert.deepEqual([field6(q).src, field6(q).dst], ['fd00:99:1:2:3:4:5:6', 'fd00:10:7:8::5']);
  assert.ok(l4Valid6(q));
});

test('a full pool is remembered per pool address and server: two IPv6 servers differing only in their high words', () => {
  const cfg = (rs: string) => ({
    protocol: 'udp',
    port: 53,
    scheduler: 'rr',
    forwarding: 'fullnat',
    realServers: [{ address: rs, port: 8080 }],
  });
  const p = makeProcessor({
    dataplane: { vipCidrs: ['fd00:96::/64'], fullnat: { addresses: ['fd00:99::1'], portMin: 30000, portMax: 30003 } },
    services: [
      { ...cfg('fd00:10::5'), address: 'fd00:96::10' },
      { ...cfg('fd00:11::5'), address: 'fd00:96::11' },
    ],
  });
  const to = (vip: string, sport: number) => udp6({ src: '2001:db8:1::100', dst: vip, sport, dport: 53 });
  for (let i = 0; i < 4; i++) assert.equal(p.run(to('fd00:96::10', 5000 + i)).v, FORWARD);
  assert.equal(p.run(to('fd00:96::10', 5004)).v, DROP, 'four ports, four flows');
  assert.equal(p.drops('fullnat_ports_exhausted'), 1);
  assert.equal(p.run(to('fd00:96::11', 5000)).v, FORWARD, 'the other server has its own ports');
});

test('a full pool is remembered for FULLNAT_FULL_MS: a port freed meanwhile is taken only after it', () => {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'], portMin: 30000, portMax: 30003 } },
      services: [
        { protocol: 'udp', address: VIP, port: 53, scheduler: 'rr', forwarding: 'fullnat', realServers: [{ address: RS, port: 8080 }] },
      ],
    },
    { liveClock: false },
  );
  const t0 = p.now();
  const q = (sport: number) => udp({ src: CLIENT, dst: VIP, sport, dport: 53 });
  for (let i = 0; i < 4; i++) assert.equal(p.run(q(5000 + i)).v, FORWARD);
  assert.equal(p.run(q(5004)).v, DROP);
  assert.equal(p.drops('fullnat_ports_exhausted'), 1);
  // One flow goes (as its timer would end it): a port is free again.
  let victim = -1;
  p.table.forEach((e) => (victim = victim < 0 ? e : victim));
  assert.ok(p.table.remove(victim, false, t0));
  assert.equal(p.table.count(), 3);
  p.setNow((t0 + FULLNAT_FULL_MS - 1) | 0);
  assert.equal(p.run(q(5005)).v, DROP, 'still remembered as full');
  assert.equal(p.drops('fullnat_ports_exhausted'), 2);
  p.setNow((t0 + FULLNAT_FULL_MS) | 0);
  assert.equal(p.run(q(5006)).v, FORWARD, 'forgotten after FULLNAT_FULL_MS: the freed port');
  assert.equal(p.table.count(), 4);
});

test("the PROXY header starts over only where the server's SYN-ACK names another stream start; no client packet moves it", () => {
  const isn = 0x10000000;
  /** Handshake, header segment, the server's acknowledgement of it; returns the client-segment sender. */
  const acked = () => {
    const p = ppSetup();
    const lport = open4(p, 40000, isn);
    assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, seq: isn + 1, ack: 7001 })).v, REPLY);
    const sack = tcp({ src: RS, dst: '10.99.0.1', sport: 8080, dport: lport, flags: TCPF_ACK, seq: 7001, ack: isn + 1 + V2_4 });
    assert.equal(p.run(sack).v, FORWARD);
    assert.equal(field(sack).ack, isn + 1, 'the header acknowledged');
    const c = (flags: number, seq: number, n = 0) => {
      const pkt = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags, seq, ack: 7001, payload: payload(n) });
      const r = p.run(pkt);
      return { v: r.v, seq: field(pkt).seq, n: r.outs.length };
    };
    return { p, c, lport };
  };
  // After a RST (CLOSE), the SYN again with the same ISN (a retransmission): the header state stays.
  const a = acked();
  assert.equal(a.c(TCPF_RST | TCPF_ACK, isn + 1).v, FORWARD);
  assert.equal(a.c(TCPF_SYN, isn).v, FORWARD);
  const ad = a.c(TCPF_ACK, isn + 1, 10);
  assert.deepEqual([ad.v, ad.seq], [FORWARD, isn + 1 + V2_4], 'shifted as before: no second header');
  // After a RST, a SYN|ACK with another number is no new connection's SYN: no restart.
  const b = acked();
  assert.equal(b.c(TCPF_RST | TCPF_ACK, isn + 1).v, FORWARD);
  b.c(TCPF_SYN | TCPF_ACK, 0x70000000);
  const bd = b.c(TCPF_ACK, 0x70000001, 10);
  assert.deepEqual([bd.v, bd.seq], [FORWARD, 0x70000001 + V2_4], 'no header at the other number');
  // On an ESTABLISHED entry a SYN with another number starts nothing over either.
  const e = acked();
  e.c(TCPF_SYN, 0x70000000);
  const ed = e.c(TCPF_ACK, 0x70000001, 10);
  assert.deepEqual([ed.v, ed.seq], [FORWARD, 0x70000001 + V2_4]);
  assert.equal(e.p.counters[L.C_PP_HEADERS], 1);
  // After a RST, a SYN with another ISN: nothing moves until the server answers it.
  const d = acked();
  assert.equal(d.c(TCPF_RST | TCPF_ACK, isn + 1).v, FORWARD);
  d.c(TCPF_SYN, 0x70000000);
  const early = d.c(TCPF_ACK, 0x70000001, 10);
  assert.deepEqual([early.v, early.seq], [FORWARD, 0x70000001 + V2_4], 'shifted as the old flow: the server has not named a new start');
  // The control: the server's SYN-ACK names the new start, and the header goes again there.
  const sa = tcp({ src: RS, dst: '10.99.0.1', sport: 8080, dport: d.lport, flags: TCPF_SYN | TCPF_ACK, seq: 9000, ack: 0x70000001 });
  assert.equal(d.p.run(sa).v, FORWARD);
  const dd = d.c(TCPF_ACK, 0x70000001, 10);
  assert.deepEqual([dd.v, dd.n], [REPLY, 2], 'header segment, then the data');
});

test('once the header is acknowledged, further server ACKs queue no sync event of their own', () => {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] } },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, forwarding: 'fullnat', proxyProtocol: 'v2', realServers: [{ address: RS, port: 8080 }] },
      ],
    },
    { ring: true },
  );
  p.table.setSync(true);
  const r = new Int32Array(p.ring!);
  const isn = 0x10000000;
  const syn = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN, seq: isn });
  assert.equal(p.run(syn).v, FORWARD);
  const lport = field(syn).sport;
  const s = (seq: number, ack: number, flags = TCPF_ACK) =>
    tcp({ src: RS, dst: '10.99.0.1', sport: 8080, dport: lport, flags, seq, ack, payload: payload(10) });
  assert.equal(p.run(s(7000, isn + 1, TCPF_SYN | TCPF_ACK)).v, FORWARD);
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, seq: isn + 1, ack: 7001 })).v, REPLY);
  const t0 = Atomics.load(r, L.RG_SYNC_TAIL);
  assert.equal(p.run(s(7001, isn + 1 + V2_4)).v, FORWARD);
  assert.equal(Atomics.load(r, L.RG_SYNC_TAIL), t0 + 1, 'the acknowledgement of the header is synced');
  for (let i = 1; i <= 3; i++) assert.equal(p.run(s(7001 + 10 * i, isn + 1 + V2_4)).v, FORWARD);
  assert.equal(Atomics.load(r, L.RG_SYNC_TAIL), t0 + 1, 'and only it');
});

test('a full table with every pool port taken refuses the flow as fullnat_ports_exhausted: the ports are looked at first', () => {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'], portMin: 30000, portMax: 30015 } },
      services: [
        { protocol: 'udp', address: VIP, port: 53, scheduler: 'rr', forwarding: 'fullnat', realServers: [{ address: RS, port: 8080 }] },
      ],
    },
    { capacity: 16 },
  );
  for (let i = 0; i < 16; i++) assert.equal(p.run(udp({ src: CLIENT, dst: VIP, sport: 5000 + i, dport: 53 })).v, FORWARD);
  assert.equal(p.table.count(), 16);
  assert.equal(p.run(udp({ src: CLIENT, dst: VIP, sport: 5016, dport: 53 })).v, DROP);
  assert.equal(p.drops('fullnat_ports_exhausted'), 1);
  assert.equal(p.drops('table_full'), 0);
});
