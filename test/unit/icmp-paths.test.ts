/**
 * lb/icmp.ts corners the flow tests leave open: how much of a quoted packet an ICMP(v6) error
 * must carry (RFC 792: the IP header and 8 bytes; the translation needs the ports), which quoted
 * packets are not ours (other protocols, non-first fragments), an error in a buffer with bytes
 * after the packet (Ethernet padding: the checksum covers the IP total length, no more), the
 * tunnel's copy of an error (DF clear), the PROXY shift of a quote over IPv6 and a quote too short
 * for a sequence number, ICMP to a full-NAT pool address, echo requests (type, checksum, TTL),
 * answers to unusual IPv6 sources and the per-source limit of IPv6 sources.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import * as P from '../../net/packet';
import { field, field6, icmp6, icmpEcho, tcp, tcp6, udp, udp6, withIpOptions } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const CLIENT = '192.168.1.100';
const RS = '10.0.0.1';

function setup(forwarding = 'masq') {
  return makeProcessor(
    {
      dataplane: {
        vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'],
        tunnelSource: '10.1.1.1',
        fullnat: { addresses: ['10.2.0.1', 'fd00:99:1:2::7'] },
      },
      services: [
        {
          protocol: 'tcp',
          address: VIP,
          port: 80,
          scheduler: 'rr',
          forwarding,
          realServers: [forwarding === 'tunnel' ? { address: RS } : { address: RS, port: 8080 }],
        },
        {
          protocol: 'tcp',
          address: VIP6,
          port: 80,
          scheduler: 'rr',
          forwarding: 'masq',
          realServers: [{ address: 'fd00:10::5', port: 8080 }],
        },
      ],
    },
    { outBytes: 1 << 16 },
  );
}

/** An ICMP error (type 3 code 4) from src to dst quoting `quote` as given; `tail` bytes after the packet in its buffer. */
function icmpErr(src: string, dst: string, quote: Uint8Array, tail = 0): Uint8Array {
  const b = new Uint8Array(28 + quote.length + tail);
  b[0] = 0x45;
  P.put16(b, P.IP_TOTLEN, 28 + quote.length);
  b[P.IP_TTL] = 64;
  b[P.IP_PROTO] = P.IPPROTO_ICMP;
  P.put16(b, P.IP_FRAG, P.IP_DF);
  P.put32(b, P.IP_SRC, parseIPv4(src)!);
  P.put32(b, P.IP_DST, parseIPv4(dst)!);
  P.put16(b, P.IP_CSUM, P.checksum(b, 0, 20, 0));
  b[20] = 3;
  b[21] = 4;
  P.put32(b, 24, 1400);
  b.set(quote, 28);
  P.put16(b, 22, P.checksum(b, 20, 8 + quote.length, 0));
  b.fill(0x5a, 28 + quote.length);
  return b;
}

/** A client flow through masq; returns the reply VIP:80 → client as the client got it (what its router quotes). */
function flow(p: ReturnType<typeof setup>, sport = 40000) {
  assert.notEqual(p.run(tcp({ src: CLIENT, dst: VIP, sport, flags: TCPF_SYN, seq: 100 })).v, DROP);
  return tcp({ src: VIP, dst: CLIENT, sport: 80, dport: sport, flags: TCPF_SYN | TCPF_ACK, seq: 5000, ack: 101 });
}

test('an error must quote a whole IPv4 header and 4 bytes of ports: less is truncated, exactly that is translated', () => {
  const p = setup();
  const reply = flow(p);
  const cases: [string, Uint8Array, string][] = [
    ['19 bytes of the header', reply.slice(0, 19), 'truncated'],
    [
      'a header of IPv6',
      (() => {
        const q = reply.slice(0, 28);
        q[0] = 0x65;
        return q;
      })(),
      'truncated',
    ],
    [
      'a header length of 16',
      (() => {
        const q = reply.slice(0, 28);
        q[0] = 0x44;
        return q;
      })(),
      'truncated',
    ],
    ['20 + 3 bytes', reply.slice(0, 23), 'truncated'],
  ];
  let n = 0;
  for (const [what, q, reason] of cases) {
    assert.equal(p.run(icmpErr(CLIENT, VIP, q)).v, DROP, what);
    assert.equal(p.drops(reason as 'truncated'), ++n, what);
  }
  assert.equal(p.drops('icmp_ignored'), 0);
  const ok = icmpErr(CLIENT, VIP, reply.slice(0, 24));
  assert.equal(p.run(ok).v, FORWARD, '20 + 4 bytes: the ports are there');
  assert.equal(field(ok).dst, RS);
  assert.equal(P.u16(ok, 28 + 20), 8080, "the quoted source port is the server's");
  assert.equal(P.sum16(ok, 20, ok.length - 20, 0), 0xffff);
});

test("an error quoting another protocol or a non-first fragment is not ours: to a VIP ignored, from the servers' side passed on unchanged", () => {
  const p = setup();
  const reply = flow(p);
  const other = reply.slice(0, 28);
  other[P.IP_PROTO] = 47;
  P.put16(other, P.IP_CSUM, 0);
  P.put16(other, P.IP_CSUM, P.checksum(other, 0, 20, 0));
  const frag = reply.slice(0, 28);
  P.put16(frag, P.IP_FRAG, 185);
  P.put16(frag, P.IP_CSUM, 0);
  P.put16(frag, P.IP_CSUM, P.checksum(frag, 0, 20, 0));
  for (const [what, q] of [
    ['GRE', other],
    ['fragment 185', frag],
  ] as const) {
    const before = p.drops('icmp_ignored');
    assert.equal(p.run(icmpErr(CLIENT, VIP, q)).v, DROP, what);
    assert.equal(p.drops('icmp_ignored'), before! + 1, what);
    const out = icmpErr(RS, CLIENT, q);
    const copy = [...out];
    assert.equal(p.run(out).v, FORWARD, what);
    assert.deepEqual([...out], copy, `${what}: unchanged`);
  }
});

test('an error with bytes after it in its buffer: its checksum is checked and redone over the IP total length only', () => {
  const p = setup();
  const reply = flow(p);
  const e = icmpErr(CLIENT, VIP, reply.slice(0, 28), 6);
  assert.equal(p.run(e).v, FORWARD);
  const total = P.u16(e, P.IP_TOTLEN);
  assert.equal(P.sum16(e, 20, total - 20, 0), 0xffff, 'valid over its own length');
  assert.deepEqual([...e.subarray(total)], new Array(6).fill(0x5a), 'the padding untouched');
  // An echo request with padding is answered just as well.
  const echo = icmpEcho({ src: CLIENT, dst: VIP, payload: payload(8) });
  const padded = new Uint8Array(echo.length + 6).fill(0x5a);
  padded.set(echo);
  assert.equal(p.run(padded).v, FORWARD);
  assert.equal(field(padded).icmpType, P.ICMP_ECHOREPLY);
});

test('an error to a VIP about a tunnel flow goes to the server inside an outer header with DF clear, even with the route MTU known', () => {
  const p = setup('tunnel');
  p.setMtu(9000);
  assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN })).v, REPLY);
  const reply = tcp({ src: VIP, dst: CLIENT, sport: 80, dport: 40000, flags: TCPF_SYN | TCPF_ACK });
  const e = icmpErr(CLIENT, VIP, reply.slice(0, 28));
  const r = p.run(e.slice());
  assert.equal(r.v, REPLY);
  assert.equal(r.reply![P.IP_PROTO], 4);
  assert.equal(P.u16(r.reply!, P.IP_FRAG), 0, 'DF clear');
  assert.deepEqual([...r.reply!.subarray(20)], [...e]);
});

test('echo requests: only type 8 with a valid checksum is answered, with TTL 64 (both families)', () => {
  const p = setup();
  const ts = icmpEcho({ src: CLIENT, dst: VIP, ttl: 5 });
  ts[20] = 13; // timestamp request
  P.put16(ts, 22, 0);
  P.put16(ts, 22, P.checksum(ts, 20, ts.length - 20, 0));
  assert.equal(p.run(ts).v, DROP);
  assert.equal(p.drops('icmp_ignored'), 1);
  const bad = icmpEcho({ src: CLIENT, dst: VIP });
  bad[30] = bad[30]! ^ 1;
  assert.equal(p.run(bad).v, DROP);
  assert.equal(p.drops('bad_checksum'), 1);
  const e = icmpEcho({ src: CLIENT, dst: VIP, ttl: 5 });
  const before = [...p.counters];
  assert.equal(p.run(e).v, FORWARD);
  assert.equal(e[P.IP_TTL], 64);
  // An echo answer is no refusal: it counts as sent (generated packets), and as no drop of any kind.
  const changed = [...p.counters].flatMap((x, i) => (x !== before[i] ? [i] : []));
  assert.deepEqual(changed, [L.C_GEN_BASE + L.GEN_ECHO * L.GEN_RESULTS + L.GEN_SENT]);
  assert.equal(P.sum16(e, 0, 20, 0), 0xffff);
  const e6 = icmp6({ src: '2001:db8:1::100', dst: VIP6, type: P.ICMP6_ECHO_REQUEST, ttl: 5 });
  assert.equal(p.run(e6).v, FORWARD);
  assert.equal(e6[P.IP6_HOPS], 64);
  const other6 = icmp6({ src: '2001:db8:1::100', dst: VIP6, type: 130 });
  assert.equal(p.run(other6).v, DROP);
  assert.equal(p.drops('icmp_ignored'), 2);
  const bad6 = icmp6({ src: '2001:db8:1::100', dst: VIP6, type: P.ICMP6_ECHO_REQUEST });
  bad6[50] = bad6[50]! ^ 1;
  assert.equal(p.run(bad6).v, DROP);
  assert.equal(p.drops('bad_checksum'), 2);
});

test("ICMP from the servers' side to a full-NAT pool address would come straight back: dropped (both families); to others passed on", () => {
  const p = setup();
  const r4 = icmpEcho({ src: RS, dst: '10.2.0.1' });
  r4[20] = 0; // an echo reply
  P.put16(r4, 22, 0);
  P.put16(r4, 22, P.checksum(r4, 20, r4.length - 20, 0));
  assert.equal(p.run(r4).v, DROP);
  assert.equal(p.drops('icmp_ignored'), 1);
  const r6 = icmp6({ src: 'fd00:10::5', dst: 'fd00:99:1:2::7', type: P.ICMP6_ECHO_REPLY });
  assert.equal(p.run(r6).v, DROP);
  assert.equal(p.drops('icmp_ignored'), 2);
  for (const dst of ['fd00:99:1:2::8', 'fd00:99:1:3::7', 'fd00:99:2:2::7', 'fd00:98:1:2::7', '2001:db8::1']) {
    const o = icmp6({ src: 'fd00:10::5', dst, type: P.ICMP6_ECHO_REPLY });
    assert.equal(p.run(o).v, FORWARD, dst);
  }
  assert.equal(p.drops('icmp_ignored'), 2);
});

test('answers go to any IPv6 source outside ::/96, ::ffff:0:0/96 and the pool: ::5:0:0:1 and 0:0:0:1::5 get their RST; the pool address does not', () => {
  const p = setup();
  for (const src of ['::5:0:0:1', '0:0:0:1::5', 'fd00:99:1:2::8', 'fd00:99:1:3::7']) {
    const r = p.run(tcp6({ src, dst: VIP6, sport: 40000, dport: 81, flags: TCPF_SYN }));
    assert.equal(r.v, REPLY, src);
    assert.equal(field6(r.reply!).dst, src === '0:0:0:1::5' ? '::1:0:0:0:5' : src);
  }
  for (const src of ['::7', '::ffff:10.0.0.9', 'fd00:99:1:2::7']) {
    assert.equal(p.run(tcp6({ src, dst: VIP6, sport: 40000, dport: 81, flags: TCPF_SYN })).v, DROP, src);
  }
  assert.equal(p.drops('unanswerable_source'), 3);
});

test('the per-source answer limit tells IPv6 sources apart by their whole address, not the low word', () => {
  const p = setup();
  const syn = (src: string, sport: number) => p.run(tcp6({ src, dst: VIP6, sport, dport: 81, flags: TCPF_SYN })).v;
  const a = '2001:db8:1::5';
  const b = '2001:db8:2::5';
  let answered = 0;
  for (let i = 0; i < 10; i++) if (syn(a, 1000 + i) === REPLY) answered++;
  assert.ok(answered < 10, `a's burst runs out (${answered})`);
  assert.equal(syn(b, 2000), REPLY, 'b has its own bucket');
});

test("an ICMPv6 error about a client's flow finds it after another client's packet", () => {
  const p = setup();
  const A = '2001:db8:a:b::100';
  assert.equal(p.run(tcp6({ src: A, dst: VIP6, sport: 40000, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(p.run(tcp6({ src: '2001:db8:c:d::200', dst: VIP6, sport: 40001, flags: TCPF_SYN })).v, FORWARD);
  const reply = tcp6({ src: VIP6, dst: A, sport: 80, dport: 40000, flags: TCPF_SYN | TCPF_ACK });
  const e = icmp6({ src: A, dst: VIP6, type: 1, code: 4, payload: reply.slice(0, 48) });
  assert.equal(p.run(e).v, FORWARD);
  assert.equal(field6(e).dst, 'fd00:10::5', 'on to the server');
  void parseIPv6;
});

test('an ICMPv6 error must quote an IPv6 header and 4 bytes: less, or another version, is truncated; another protocol is not ours', () => {
  const p = setup();
  const A = '2001:db8:a:b::100';
  assert.equal(p.run(tcp6({ src: A, dst: VIP6, sport: 40000, flags: TCPF_SYN })).v, FORWARD);
  const reply = tcp6({ src: VIP6, dst: A, sport: 80, dport: 40000, flags: TCPF_SYN | TCPF_ACK });
  const err = (q: Uint8Array) => icmp6({ src: A, dst: VIP6, type: 1, code: 4, payload: q });
  assert.equal(p.run(err(reply.slice(0, 43))).v, DROP);
  assert.equal(p.drops('truncated'), 1, '40 + 3 bytes');
  const v4 = reply.slice(0, 48);
  v4[0] = 0x45;
  assert.equal(p.run(err(v4)).v, DROP);
  assert.equal(p.drops('truncated'), 2, 'version 4 inside');
  const ok = err(reply.slice(0, 44));
  assert.equal(p.run(ok).v, FORWARD, '40 + 4 bytes');
  const gre = reply.slice(0, 48);
  gre[P.IP6_NEXT] = 47;
  assert.equal(p.run(err(gre)).v, DROP);
  assert.equal(p.drops('icmp_ignored'), 1);
  const out = icmp6({ src: 'fd00:10::5', dst: A, type: 1, code: 4, payload: gre });
  assert.equal(p.run(out).v, FORWARD, "from the servers' side: passed on");
});

void udp;
void TCPF_ACK;

test('an error whose own IPv4 header carries options is read past them', () => {
  const p = setup();
  const reply = flow(p);
  const plain = icmpErr(CLIENT, VIP, reply.slice(0, 28));
  const e = withIpOptions(plain);
  assert.equal(p.run(e).v, FORWARD);
  assert.equal(field(e).dst, RS);
  assert.equal(P.u16(e, 24 + 28), 8080, "the quoted source port is the server's");
});

test('with perSecond 0 there is no global limit: answers to many sources all go (the per-source limit alone)', () => {
  const p = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], generatedLimit: { perSecond: 0 } },
    services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] }],
  });
  let sent = 0;
  for (let i = 0; i < 120; i++)
    if (p.run(tcp({ src: `192.168.${i >> 6}.${(i & 63) + 1}`, dst: VIP, sport: 40000, dport: 81, flags: TCPF_SYN })).v === REPLY) sent++;
  assert.equal(sent, 120);
});

test('answers built at an offset of the buffer and in a region that ends right after them', () => {
  const p = setup();
  // A SYN with 5 bytes to a port without a service, at offset 16: RST|ACK acknowledging 5 + 1.
  const syn = tcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 81, flags: TCPF_SYN, seq: 700, payload: payload(5) });
  const b = new Uint8Array(16 + syn.length);
  b.set(syn, 16);
  p.region.off = 0;
  p.region.end = p.out.length;
  assert.equal(p.proc.process(b, 16, syn.length, p.region), REPLY);
  const rst = p.out.subarray(0, p.region.lens[0]);
  assert.equal(field(rst).ack, 706);
  // Port unreachable for a UDP datagram: 20 + 8 + 28 bytes, the region exactly that long.
  const d = udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 53, payload: payload(40) });
  p.out.fill(0xa5);
  p.region.off = 0;
  p.region.end = 56;
  assert.equal(p.proc.process(d, 0, d.length, p.region), REPLY);
  assert.equal(p.region.lens[0], 56);
  assert.deepEqual(
    [...p.out.subarray(56, 80)].filter((x) => x !== 0xa5),
    [],
    'nothing past the region',
  );
  // ICMPv6 port unreachable in a region from 10 to 310: the quote fits the 300 bytes.
  const u6 = udp6({ src: '2001:db8:1::100', dst: VIP6, sport: 5000, dport: 81, payload: payload(1000) });
  p.out.fill(0xa5);
  p.region.off = 10;
  p.region.end = 310;
  assert.equal(p.proc.process(u6, 0, u6.length, p.region), REPLY);
  assert.equal(p.region.lens[0], 300);
  assert.equal(p.out[10 + P.IP6_NEXT], P.IPPROTO_ICMPV6);
  assert.deepEqual(
    [...p.out.subarray(310, 400)].filter((x) => x !== 0xa5),
    [],
    'nothing past the region',
  );
  // An error about a flow, at offset 16: translated, its checksum over its own length.
  const reply = flow(p);
  const e = icmpErr(CLIENT, VIP, reply.slice(0, 28));
  const eb = new Uint8Array(16 + e.length);
  eb.set(e, 16);
  p.region.off = 0;
  p.region.end = p.out.length;
  assert.equal(p.proc.process(eb, 16, e.length, p.region), FORWARD);
  assert.equal(P.sum16(eb, 16 + 20, e.length - 20, 0), 0xffff);
  assert.equal(field(eb.subarray(16)).dst, RS);
});
