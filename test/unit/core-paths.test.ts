/**
 * lb/core.ts corners the flow tests leave open: the header checks, each with a packet whose only
 * fault is the one checked (the protocol otherwise unsupported, so the drop reason tells which
 * check caught it), ICMP(v6) shorter than its header, the offload gate when the packet sits at an
 * offset of a larger buffer, the ICMPv6 that is not ours (multicast, link-local, a server's echo
 * reply), the counters a new flow adds to, the region's "none" fields, per-service scheduler
 * state, IPv6 persistence, a full table for a template, the drop_packet counter when its rate
 * falls, and the F_NOOUTPUT flag (tunnel only).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Defense } from '../../conntrack/defense';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { field, field6, icmp6, icmpEcho, partial, tcp, tcp6, udp, udp6 } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const V = P.VNET_HLEN;
const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const CLIENT = '192.168.1.100';
const CLIENT6 = '2001:db8:1::100';
const RS = ['10.0.0.1', '10.0.0.2'];

function setup(o: { offload?: boolean; capacity?: number } = {}, extra: Record<string, unknown> = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'] },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: RS.map((a) => ({ address: a, port: 8080 })), ...extra },
        { protocol: 'udp', address: VIP, port: 53, scheduler: 'rr', realServers: RS.map((a) => ({ address: a, port: 5353 })) },
        { protocol: 'tcp', address: VIP6, port: 80, scheduler: 'rr', realServers: [{ address: 'fd00:10:1:2::5', port: 8080 }] },
      ],
    },
    { offload: o.offload ?? false, capacity: o.capacity, outBytes: 1 << 16 },
  );
}

/** An IPv4 packet of `len` bytes (header included) with protocol 47, as if GRE: nothing uvs takes. */
function other(len: number, o: { ihl?: number; totlen?: number } = {}): Uint8Array {
  const ihl = o.ihl ?? 20;
  const b = new Uint8Array(len);
  b[0] = 0x40 | (ihl >> 2);
  P.put16(b, P.IP_TOTLEN, o.totlen ?? len);
  b[P.IP_TTL] = 64;
  b[P.IP_PROTO] = 47;
  P.put32(b, P.IP_SRC, 0xc0a80164);
  P.put32(b, P.IP_DST, 0x0a60000a);
  for (let i = 20; i < ihl; i++) b[i] = 1; // NOP options
  P.put16(b, P.IP_CSUM, P.checksum(b, 0, ihl, 0));
  return b;
}

test('IPv4 header checks: a bare 20-byte header is a whole packet; a total length below the header or past the data is truncated', () => {
  const p = setup();
  assert.equal(p.run(other(20)).v, DROP);
  assert.equal(p.drops('unsupported_protocol'), 1, '20 bytes, total 20: complete, just not ours');
  assert.equal(p.drops('truncated'), 0);
  assert.equal(p.run(other(24, { ihl: 24 })).v, DROP, 'header with options, total = header');
  assert.equal(p.drops('unsupported_protocol'), 2);
  assert.equal(p.run(other(40, { totlen: 19 })).v, DROP);
  assert.equal(p.drops('truncated'), 1, 'total length below the header');
  assert.equal(p.run(other(40, { totlen: 41 })).v, DROP);
  assert.equal(p.drops('truncated'), 2, 'total length past the data');
  assert.equal(p.run(other(19)).v, DROP);
  assert.equal(p.drops('truncated'), 3, 'shorter than a header');
  assert.equal(p.drops('unsupported_protocol'), 2);
});

test('transport headers: TCP shorter than 20 bytes or than its data offset, a data offset below 5, UDP shorter than 8 — truncated, both families', () => {
  const p = setup();
  const cut = (pkt: Uint8Array, n: number) => {
    const b = pkt.slice(0, n);
    P.put16(b, P.IP_TOTLEN, n);
    P.put16(b, P.IP_CSUM, 0);
    P.put16(b, P.IP_CSUM, P.checksum(b, 0, 20, 0));
    return b;
  };
  const syn = () => tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN, payload: payload(8) });
  let n = 0;
  assert.equal(p.run(cut(syn(), 39)).v, DROP, '19 bytes of TCP');
  assert.equal(p.drops('truncated'), ++n);
  const longOff = syn();
  longOff[20 + P.TCP_OFF] = 8 << 4; // 32 bytes of header, 28 there
  assert.equal(p.run(longOff).v, DROP);
  assert.equal(p.drops('truncated'), ++n, 'data offset past the segment');
  const shortOff = syn();
  shortOff[20 + P.TCP_OFF] = 4 << 4;
  assert.equal(p.run(shortOff).v, DROP);
  assert.equal(p.drops('truncated'), ++n, 'data offset 4');
  const u = udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 53, payload: payload(4) });
  assert.equal(p.run(cut(u, 27)).v, DROP, '7 bytes of UDP');
  assert.equal(p.drops('truncated'), ++n);
  assert.equal(p.table.count(), 0);
  // IPv6: the same checks after the IPv6 header.
  const s6 = tcp6({ src: CLIENT6, dst: VIP6, sport: 40000, flags: TCPF_SYN, payload: payload(8) });
  s6[40 + P.TCP_OFF] = 8 << 4;
  assert.equal(p.run(s6).v, DROP);
  assert.equal(p.drops('truncated'), ++n, 'IPv6 TCP data offset past the segment');
  // IPv6 with nothing after the header: a complete packet of an unsupported protocol.
  const bare6 = new Uint8Array(40);
  bare6.set(tcp6({ src: CLIENT6, dst: VIP6 }).subarray(0, 40));
  P.put16(bare6, P.IP6_PLEN, 0);
  bare6[P.IP6_NEXT] = 47;
  assert.equal(p.run(bare6).v, DROP);
  assert.equal(p.drops('unsupported_protocol'), 1);
  assert.equal(p.drops('truncated'), n);
  // A hop-by-hop header claiming 24 bytes where 8 are left: the upper header is past the end.
  const hop = new Uint8Array(48);
  hop.set(bare6);
  P.put16(hop, P.IP6_PLEN, 8);
  hop[P.IP6_NEXT] = 0;
  hop[40] = 47;
  hop[41] = 2;
  assert.equal(p.run(hop).v, DROP);
  assert.equal(p.drops('truncated'), ++n, 'extension header past the end');
  assert.equal(p.drops('unsupported_protocol'), 1);
  assert.equal(p.table.count(), 0);
});

test('ICMP shorter than its 8-byte header is truncated; an echo of exactly 8 bytes is answered (both families)', () => {
  const p = setup();
  const e = icmpEcho({ src: CLIENT, dst: VIP, payload: new Uint8Array(0) });
  assert.equal(e.length, 28);
  assert.equal(p.run(e).v, FORWARD, 'answered in place');
  assert.equal(field(e).icmpType, P.ICMP_ECHOREPLY);
  const short = icmpEcho({ src: CLIENT, dst: VIP, payload: new Uint8Array(0) }).slice(0, 27);
  P.put16(short, P.IP_TOTLEN, 27);
  P.put16(short, P.IP_CSUM, 0);
  P.put16(short, P.IP_CSUM, P.checksum(short, 0, 20, 0));
  assert.equal(p.run(short).v, DROP);
  assert.equal(p.drops('truncated'), 1);
  const e6 = icmp6({ src: CLIENT6, dst: VIP6, type: P.ICMP6_ECHO_REQUEST, payload: new Uint8Array(0) });
  assert.equal(e6.length, 48);
  assert.equal(p.run(e6).v, FORWARD);
  assert.equal(field6(e6).icmpType, P.ICMP6_ECHO_REPLY);
  const s6 = e6.slice(0, 47);
  P.put16(s6, P.IP6_PLEN, 7);
  assert.equal(p.run(s6).v, DROP);
  assert.equal(p.drops('truncated'), 2);
});

test("ICMPv6 not to a VIP: multicast and link-local destinations are the device's own chatter (dropped); a server's echo reply goes on", () => {
  const p = setup();
  for (const dst of ['ff02::1:ff00:5', 'fe80::1', 'febf::1']) {
    const ns = icmp6({ src: 'fe80::2', dst, type: 135 });
    assert.equal(p.run(ns).v, DROP, dst);
  }
  assert.equal(p.drops('icmp_ignored'), 3);
  const reply = icmp6({ src: 'fd00:10:1:2::5', dst: CLIENT6, type: P.ICMP6_ECHO_REPLY });
  const copy = [...reply];
  assert.equal(p.run(reply).v, FORWARD);
  assert.deepEqual([...reply], copy, 'unchanged');
  const global = icmp6({ src: 'fd00:10:1:2::5', dst: 'fec0::1', type: 135 });
  assert.equal(p.run(global).v, FORWARD, 'fec0::/10 is no link-local');
  assert.equal(p.drops('icmp_ignored'), 3);
});

test('without offloads a packet at an offset of a larger buffer is read as it is: the bytes before it are no virtio header', () => {
  const p = setup();
  const pkt = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN });
  const b = new Uint8Array(16 + pkt.length);
  b.fill(0x05, 0, 16); // would read as NEEDS_CSUM and GSO type 5
  b.set(pkt, 16);
  p.region.off = 0;
  p.region.end = p.out.length;
  assert.equal(p.proc.process(b, 16, pkt.length, p.region), FORWARD);
  assert.equal(field(b.subarray(16)).dst, RS[0]!.startsWith('10.') ? field(b.subarray(16)).dst : '');
  assert.equal(p.drops('bad_offload'), 0);
  const p6 = tcp6({ src: CLIENT6, dst: VIP6, sport: 40000, flags: TCPF_SYN });
  const b6 = new Uint8Array(16 + p6.length);
  b6.fill(0x05, 0, 16);
  b6.set(p6, 16);
  assert.equal(p.proc.process(b6, 16, p6.length, p.region), FORWARD);
  assert.equal(p.drops('bad_offload'), 0);
});

test('with offloads the virtio header right before the packet decides, whatever lies before it', () => {
  for (const v6 of [false, true]) {
    const p = setup({ offload: true });
    // A GSO type without NEEDS_CSUM (dropped: bad_offload), the buffer's byte before the header 0.
    const pkt = v6
      ? tcp6({ src: CLIENT6, dst: VIP6, sport: 40000, flags: TCPF_SYN })
      : tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN });
    const b = new Uint8Array(1 + V + pkt.length);
    b.set(pkt, 1 + V);
    b[1 + P.VNET_GSO_TYPE] = v6 ? P.VNET_GSO_TCPV6 : P.VNET_GSO_TCPV4;
    P.putLe16(b, 1 + P.VNET_GSO_SIZE, 1000);
    P.putLe16(b, 1 + P.VNET_CSUM_START, v6 ? 40 : 20);
    P.putLe16(b, 1 + P.VNET_CSUM_OFFSET, P.TCP_CSUM);
    p.region.off = V;
    p.region.end = p.out.length;
    assert.equal(p.proc.process(b, 1 + V, pkt.length, p.region), DROP, v6 ? 'IPv6' : 'IPv4');
    assert.equal(p.drops('bad_offload'), 1);
    // A partial checksum with no GSO: kept partial, the device completes it.
    const q = partial(
      v6 ? tcp6({ src: CLIENT6, dst: VIP6, sport: 40001, flags: TCPF_SYN }) : tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_SYN }),
    );
    const c = new Uint8Array(1 + q.length);
    c.set(q, 1);
    assert.equal(p.proc.process(c, 1 + V, q.length - V, p.region), FORWARD);
    assert.equal(c[1 + P.VNET_FLAGS], P.VNET_F_NEEDS_CSUM);
  }
});

test("a new flow counts once: new connections, its server's and its service's connections; later packets do not", () => {
  const p = setup();
  const conns = () => [
    p.counters[L.C_CONNS_NEW],
    ...RS.map((_, k) => p.counters[L.rsCounterBase([...p.model.eachRsSlotAddr()].find((r) => r.addr === RS[k])!.slot) + L.RSC_CONNS]),
    p.counters[L.svcCounterBase(16, 0) + L.RSC_CONNS],
  ];
  for (let i = 0; i < 3; i++) assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000 + i, flags: TCPF_SYN })).v, FORWARD);
  const after = conns();
  assert.equal(after[0], 3);
  assert.deepEqual([after[1]! + after[2]!, Math.abs(after[1]! - after[2]!)], [3, 1], 'rr: 2 and 1');
  assert.equal(after[3], 3);
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK })).v, FORWARD);
  assert.deepEqual(conns(), after, 'a second packet is no new connection');
});

test('the region says "none" (-1) for what a packet did not get: no drop reason on a forward, no flow for an echo', () => {
  const p = setup();
  assert.equal(p.run(other(20)).v, DROP);
  assert.equal(p.region.reason, L.DROP_NAMES.indexOf('unsupported_protocol'));
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(p.region.reason, -1);
  assert.equal(p.run(icmpEcho({ src: CLIENT, dst: VIP })).v, FORWARD);
  assert.deepEqual([p.region.reason, p.region.svc, p.region.rs, p.region.state, p.region.proto], [-1, -1, -1, -1, 0]);
});

test('each service rotates its own rr: new flows of two services interleaved', () => {
  const p = setup();
  const tcpTo = (k: number) => {
    const pkt = tcp({ src: CLIENT, dst: VIP, sport: 41000 + k, flags: TCPF_SYN });
    assert.equal(p.run(pkt).v, FORWARD);
    return field(pkt).dst;
  };
  const udpTo = (k: number) => {
    const pkt = udp({ src: CLIENT, dst: VIP, sport: 42000 + k, dport: 53 });
    assert.equal(p.run(pkt).v, FORWARD);
    return field(pkt).dst;
  };
  const a = [tcpTo(0), udpTo(0), tcpTo(1), udpTo(1), tcpTo(2), udpTo(2)];
  const only = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'] },
    services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: RS.map((x) => ({ address: x, port: 8080 })) }],
  });
  const alone = [0, 1, 2].map((k) => {
    const pkt = tcp({ src: CLIENT, dst: VIP, sport: 41000 + k, flags: TCPF_SYN });
    only.run(pkt);
    return field(pkt).dst;
  });
  assert.deepEqual([a[0], a[2], a[4]], alone, 'TCP service: as if alone');
  assert.deepEqual([a[1], a[3], a[5]], alone, 'UDP service (same list order): as if alone');
});

test("a masq flow sees both directions (no F_NOOUTPUT); only the tunnel's has it", () => {
  const p = setup();
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN })).v, FORWARD);
  let flags = -1;
  p.table.forEach((_e, o) => (flags = p.table.i32[o + L.E_FLAGS]!));
  assert.equal(flags & L.F_NOOUTPUT, 0);
});

test('the drop_packet counter is clamped to a lower rate: the next refusal comes within the new rate', () => {
  const p = setup();
  const a = p.table.i32;
  Atomics.store(a, L.H_DROP_RATE, 10);
  const q = (sport: number) => p.run(udp({ src: CLIENT, dst: VIP, sport, dport: 53 })).v;
  assert.deepEqual([q(6000), q(6001)], [DROP, FORWARD], 'the first of every 10, then 9 to go');
  Atomics.store(a, L.H_DROP_RATE, 2);
  assert.deepEqual([q(7000), q(7001), q(7002), q(7003)], [FORWARD, DROP, FORWARD, DROP], 'one of every 2 at once, not after 8 more');
  assert.equal(p.drops('defense_drop_packet'), 3);
});

test('IPv6 persistence: one template per client /64 pins the whole server address', () => {
  const p = makeProcessor({
    dataplane: { vipCidrs: ['fd00:96::/64'] },
    services: [
      {
        protocol: 'tcp',
        address: VIP6,
        port: 80,
        scheduler: 'rr',
        persistence: 300,
        netmask: 64,
        realServers: ['fd00:10:1:2::5', 'fd00:10:3:4::5'].map((a) => ({ address: a, port: 8080 })),
      },
    ],
  });
  const to = (src: string, sport: number) => {
    const pkt = tcp6({ src, dst: VIP6, sport, flags: TCPF_SYN });
    assert.equal(p.run(pkt).v, FORWARD);
    return field6(pkt).dst;
  };
  const first = to('2001:db8:1:2::100', 40000);
  assert.ok(['fd00:10:1:2::5', 'fd00:10:3:4::5'].includes(first), first);
  assert.equal(to('2001:db8:1:2::100', 40001), first, 'the same client again');
  assert.equal(to('2001:db8:1:2:ffff::7', 40002), first, 'another client of the /64');
  const other6 = to('2001:db8:9:9::100', 40003);
  assert.notEqual(other6, first, 'another /64: rr moves on');
  assert.equal(to('2001:db8:9:9::101', 40004), other6);
  assert.equal(to('2001:db8:1:2::200', 40005), first, "back to the first /64 after the other server: its template's whole address");
  // A reply from the pinned server finds its flow (the whole address in the entry).
  const r = tcp6({ src: first, dst: '2001:db8:1:2::100', sport: 8080, dport: 40001, flags: TCPF_SYN | TCPF_ACK });
  assert.equal(p.run(r).v, FORWARD);
  assert.equal(field6(r).src, VIP6);
});

test('persistence with no server to pin answers port unreachable; with no room for the template, table_full', () => {
  const none = setup({}, { persistence: 300, realServers: RS.map((a) => ({ address: a, port: 8080, weight: 0 })) });
  const r = none.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }));
  assert.equal(r.v, REPLY);
  assert.equal(field(r.reply!).icmpType, P.ICMP_DEST_UNREACH);
  assert.equal(none.table.count(), 0);
  const full = setup({ capacity: 16 }, { persistence: 300 });
  for (let i = 0; i < 16; i++) full.run(udp({ src: CLIENT, dst: VIP, sport: 8000 + i, dport: 53 }));
  assert.equal(full.table.count(), 16);
  assert.equal(full.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN })).v, DROP);
  assert.equal(full.drops('table_full'), 1);
  assert.equal(full.drops('chain_full'), 0);
});

void udp6;

test('SYN proxy clocks: a cookie ACK 59 s after its SYN-ACK (one minute on) is good, 125 s after it (two on) is not; the pending flow is not synced', () => {
  const mk = () => {
    const p = makeProcessor(
      {
        dataplane: { vipCidrs: ['10.96.0.0/24'] },
        services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: RS[0], port: 8080 }] }],
        defense: { synProxy: 3 },
      },
      { ring: true, outBytes: 1 << 16 },
    );
    new Defense(p.table, p.cfg.defense);
    p.table.setSync(true);
    return p;
  };
  for (const [later, good] of [
    [59_000, true],
    [125_000, false],
  ] as const) {
    const p = mk();
    const r = new Int32Array(p.ring!);
    // An hour into the table's clock, 1 s into a minute of Unix time (the cookie's counter).
    const t0 = 3_600_000 + ((((1000 - p.table.epoch) % 60_000) + 60_000) % 60_000);
    p.setNow(t0);
    const sa = p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN, seq: 1000 }));
    assert.equal(sa.v, REPLY);
    const cookie = field(sa.reply!).seq;
    p.setNow(t0 + later);
    const tail = Atomics.load(r, L.RG_SYNC_TAIL);
    const ack = p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, seq: 1001, ack: (cookie + 1) >>> 0 }));
    assert.equal(ack.v, REPLY, `${later} ms`);
    const out = field(ack.reply!);
    if (good) {
      assert.deepEqual([out.dst, out.flags], [RS[0], TCPF_SYN], 'our SYN to the server');
      assert.equal(p.table.count(), 1);
      assert.equal(Atomics.load(r, L.RG_SYNC_TAIL), tail, 'a pending flow is not published');
    } else {
      assert.deepEqual([out.dst, out.flags & 4], [CLIENT, 4], 'a RST: the cookie is too old');
      assert.equal(p.table.count(), 0);
    }
  }
});

test('a SYN-proxied client whose persistence template pins a server it cannot proxy (changed since) is refused: no_real_server, no entry left', () => {
  const doc = (forwarding: string) => ({
    dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1' },
    services: [
      {
        protocol: 'tcp',
        address: VIP,
        port: 80,
        scheduler: 'rr',
        forwarding,
        persistence: 300,
        realServers: [{ address: RS[0], port: 80 }],
      },
    ],
    defense: { synProxy: 3 },
  });
  const p = makeProcessor(doc('tunnel'), { outBytes: 1 << 16 });
  new Defense(p.table, p.cfg.defense);
  const first = p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }));
  assert.equal(first.v, REPLY, 'tunnel: not proxied, encapsulated');
  assert.equal(first.reply![P.IP_PROTO], 4);
  const entries = p.table.count(); // the template and the connection
  p.apply(doc('masq'));
  const sa = p.run(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_SYN, seq: 5000 }));
  assert.equal(sa.v, REPLY);
  assert.equal(field(sa.reply!).flags, TCPF_SYN | TCPF_ACK, 'masq now: a cookie');
  const ack = p.run(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_ACK, seq: 5001, ack: (field(sa.reply!).seq + 1) >>> 0 }));
  assert.equal(ack.v, DROP);
  assert.equal(p.drops('no_real_server'), 1);
  assert.equal(p.table.count(), entries, 'the refused flow left no entry');
});
