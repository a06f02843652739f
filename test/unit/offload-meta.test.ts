/**
 * What the path does with each virtio_net_hdr a device may hand over (lb/offload.ts): which GSO
 * descriptions it honours and which it drops (bad_offload), which partial checksums it keeps
 * partial and which it completes in software (skb_checksum_help's job: the checksum of
 * [csum_start, end) written at csum_start + csum_offset; UDP's computed 0 as 0xffff), the bounds
 * of such a description, and the plain header every generated packet gets. Checksums are checked
 * against sums computed here, not by the code under test.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, field, icmpEcho, initValue, partial, sctp, tcp, udp } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const V = P.VNET_HLEN;
const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = '10.0.0.1';

function setup(protocol = 'tcp', adopt = false) {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'] },
      services: [
        { protocol, address: VIP, port: protocol === 'sctp' ? 3868 : 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] },
      ],
    },
    { offload: true, ring: adopt, outBytes: 1 << 18 },
  );
  if (adopt) p.proc.setSnapshot({ ...p.model.apply(p.cfg), adopt: true });
  return p;
}

/** The packet behind a virtio header with the given fields (little-endian, as TUN writes them). */
function framed(pkt: Uint8Array, h: { flags?: number; gso?: number; size?: number; start?: number; offset?: number }): Uint8Array {
  const b = new Uint8Array(V + pkt.length);
  b.set(pkt, V);
  b[P.VNET_FLAGS] = h.flags ?? 0;
  b[P.VNET_GSO_TYPE] = h.gso ?? 0;
  P.putLe16(b, P.VNET_GSO_SIZE, h.size ?? 0);
  P.putLe16(b, P.VNET_CSUM_START, h.start ?? 0);
  P.putLe16(b, P.VNET_CSUM_OFFSET, h.offset ?? 0);
  return b;
}

/** The one's complement sum of b[from, to) as RFC 1071 defines it, independently of net/packet.ts. */
function onesSum(b: Uint8Array, from: number, to: number, initial = 0): number {
  let s = initial;
  for (let i = from; i < to; i += 2) s += (b[i]! << 8) | (i + 1 < to ? b[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** IPv4 pseudo-header sum (RFC 793/768), unfolded. */
function pseudo(pkt: Uint8Array): number {
  const l4len = P.u16(pkt, P.IP_TOTLEN) - 20;
  return onesSum(pkt, P.IP_SRC, P.IP_DST + 4) + pkt[P.IP_PROTO]! + l4len;
}

/**
 * Sets the last two payload bytes of a TCP/UDP packet (IPv4, 20-byte header) so that its
 * checksum computes to 0 (the sum is 0xffff), and stores that checksum: 0 (TCP) — UDP's wire
 * form of it is 0xffff.
 */
function zeroChecksum(pkt: Uint8Array): Uint8Array {
  const csum = 20 + (pkt[P.IP_PROTO] === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM);
  const end = pkt.length;
  P.put16(pkt, csum, 0);
  P.put16(pkt, end - 2, 0);
  const s = onesSum(pkt, 20, end, pseudo(pkt));
  P.put16(pkt, end - 2, 0xffff - s);
  assert.equal(onesSum(pkt, 20, end, pseudo(pkt)), 0xffff);
  P.put16(pkt, csum, pkt[P.IP_PROTO] === P.IPPROTO_UDP ? 0xffff : 0);
  return pkt;
}

const badOffload = (p: ReturnType<typeof setup>) => p.drops('bad_offload');

test("a GSO description is honoured only as TCP of the packet's family, with a partial checksum at the TCP checksum field and a segment size", () => {
  const p = setup();
  assert.equal(p.run(partial(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }))).v, FORWARD);
  const big = () => tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, payload: payload(4000) });
  const ok = { flags: P.VNET_F_NEEDS_CSUM, gso: P.VNET_GSO_TCPV4, size: 1448, start: 20, offset: P.TCP_CSUM };
  const good = partial(big(), 1448);
  assert.equal(p.run(good).v, FORWARD, 'the well-formed description');
  assert.equal(P.le16(good, P.VNET_GSO_SIZE), 1448);
  // The ECN bit of gso_type is a flag on the type, not another type.
  assert.equal(p.run(partial(big(), 1448).map((x, i) => (i === P.VNET_GSO_TYPE ? x | P.VNET_GSO_ECN : x))).v, FORWARD, 'TCPV4 | ECN');
  assert.equal(badOffload(p), 0);
  const cases: [string, Record<string, number>][] = [
    ['no NEEDS_CSUM', { flags: 0 }],
    ['TCPV6 on IPv4', { gso: P.VNET_GSO_TCPV6 }],
    ['csum_start past the transport header', { start: 24 }],
    ['csum_start before it', { start: 16 }],
    ['csum_offset at a UDP checksum', { offset: P.UDP_CSUM }],
    ['gso_size 0', { size: 0 }],
  ];
  let n = 0;
  for (const [what, h] of cases) {
    const pkt = big();
    P.put16(pkt, 20 + P.TCP_CSUM, P.fold16(pseudo(pkt)));
    assert.equal(p.run(framed(pkt, { ...ok, ...h })).v, DROP, what);
    assert.equal(badOffload(p), ++n, what);
  }
  // A UDP datagram described as TCP GSO, the checksum offset its own.
  const u = setup('udp');
  const d = udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 80, payload: payload(3000) });
  P.put16(d, 20 + P.UDP_CSUM, P.fold16(pseudo(d)));
  assert.equal(u.run(framed(d, { ...ok, offset: P.UDP_CSUM })).v, DROP);
  assert.equal(badOffload(u), 1);
});

test('a partial UDP checksum at its field stays partial through the rewrite, as a partial TCP one does', () => {
  const p = setup('udp');
  const q = partial(udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 80, payload: payload(101) }));
  assert.equal(p.run(q).v, FORWARD);
  assert.equal(q[P.VNET_FLAGS], P.VNET_F_NEEDS_CSUM, 'left to the device');
  assert.equal(P.le16(q, P.VNET_CSUM_START), 20);
  assert.equal(P.le16(q, P.VNET_CSUM_OFFSET), P.UDP_CSUM);
  const pkt = q.slice(V);
  // The field holds the new pseudo-header sum (RS address), not a finished checksum.
  assert.equal(P.u16(pkt, 20 + P.UDP_CSUM), P.fold16(pseudo(pkt)));
});

test('a partial SCTP checksum is dropped: CRC32c is no Internet checksum', () => {
  const p = setup('sctp');
  const pkt = sctp({ src: CLIENT, dst: VIP, sport: 5000, dport: 3868, chunks: [{ type: 1, value: initValue(0x1234) }] });
  assert.equal(p.run(framed(pkt, { flags: P.VNET_F_NEEDS_CSUM, start: 20, offset: 8 })).v, DROP);
  assert.equal(badOffload(p), 1);
  assert.equal(p.drops('bad_checksum'), 0);
});

test('a partial checksum elsewhere than the TCP/UDP checksum field is completed in software and the flag cleared', () => {
  const p = setup();
  assert.equal(p.run(partial(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }))).v, FORWARD);
  // The device is asked for the sum of [38, end) — past the ports and the TCP checksum, which the
  // rewrite changes — at 38 + 16 (a payload word; the offset is TCP's, the start is not).
  const pkt = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, payload: payload(64) });
  const q = framed(pkt, { flags: P.VNET_F_NEEDS_CSUM, start: 38, offset: P.TCP_CSUM });
  const want = ~onesSum(q, V + 38, q.length) & 0xffff; // the field's seed included, as the device sums it
  assert.equal(p.run(q).v, FORWARD);
  assert.equal(q[P.VNET_FLAGS], 0, 'nothing left for the device');
  assert.equal(P.u16(q, V + 38 + P.TCP_CSUM), want, "the device's sum, written at start + offset");
});

test('a partial checksum description must lie inside the transport part: at the last two bytes it is completed, one byte further dropped', () => {
  const p = setup();
  // An echo request to the VIP whose last two payload bytes are 0: completing there leaves a
  // valid ICMP checksum valid (the sum is already -0), so the echo is answered.
  const echo = () => icmpEcho({ src: CLIENT, dst: VIP, payload: new Uint8Array([1, 2, 3, 4, 5, 6, 0, 0]) });
  const icmpLen = 16;
  const last = framed(echo(), { flags: P.VNET_F_NEEDS_CSUM, start: 20, offset: icmpLen - 2 });
  assert.equal(p.run(last).v, FORWARD);
  assert.equal(last[P.VNET_FLAGS], 0);
  assert.equal(field(last.subarray(V)).icmpType, P.ICMP_ECHOREPLY);
  assert.ok(checksumsValid(last.subarray(V)));
  assert.equal(p.run(framed(echo(), { flags: P.VNET_F_NEEDS_CSUM, start: 20, offset: icmpLen - 1 })).v, DROP, 'one byte past the end');
  assert.equal(badOffload(p), 1);
  assert.equal(p.run(framed(echo(), { flags: P.VNET_F_NEEDS_CSUM, start: 20, offset: 200 })).v, DROP, 'far past the end');
  assert.equal(badOffload(p), 2);
  assert.equal(p.run(framed(echo(), { flags: P.VNET_F_NEEDS_CSUM, start: 10, offset: 2 })).v, DROP, 'starting in the IP header');
  assert.equal(badOffload(p), 3);
});

test('an ICMP checksum described at an odd offset is completed in software too, not left partial', () => {
  const p = setup();
  // An echo whose checksum's high byte is 0 (a payload word chosen for it): completing its
  // whole sum (-0) at ICMP offset 1 writes 0 over the code and that byte, leaving it valid.
  const echo = icmpEcho({ src: CLIENT, dst: VIP, payload: new Uint8Array(8) });
  for (let w = 0; w < 0x10000 && echo[22] !== 0; w++) {
    P.put16(echo, 28, w);
    P.put16(echo, 22, 0);
    P.put16(echo, 22, ~onesSum(echo, 20, echo.length) & 0xffff);
  }
  assert.equal(echo[22], 0);
  const q = framed(echo, { flags: P.VNET_F_NEEDS_CSUM, start: 20, offset: 1 });
  assert.equal(p.run(q).v, FORWARD);
  assert.equal(q[P.VNET_FLAGS], 0, 'nothing left for the device');
  assert.equal(field(q.subarray(V)).icmpType, P.ICMP_ECHOREPLY);
  assert.ok(checksumsValid(q.subarray(V)));
});

test("an ICMP checksum described at offset 6 (UDP's) is no UDP checksum: completed in software too", () => {
  const p = setup();
  const echo = icmpEcho({ src: CLIENT, dst: VIP, payload: payload(8) });
  P.put16(echo, 26, 0); // the sequence number, where the device is asked to write: 0 stays 0 (the sum is -0)
  P.put16(echo, 22, 0);
  P.put16(echo, 22, ~onesSum(echo, 20, echo.length) & 0xffff);
  const q = framed(echo, { flags: P.VNET_F_NEEDS_CSUM, start: 20, offset: P.UDP_CSUM });
  assert.equal(p.run(q).v, FORWARD);
  assert.equal(q[P.VNET_FLAGS], 0, 'nothing left for the device');
  assert.ok(checksumsValid(q.subarray(V)));
});

test('completed in software, a UDP checksum that computes to 0 is sent as 0xffff, so the rewrite keeps a checksum', () => {
  const p = setup('udp');
  const pkt = zeroChecksum(udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 80, payload: payload(40) }));
  // Described from the destination port on (start 22), the field at 22 + 4: the partial value is
  // the sum of what the device will not see — pseudo-header and source port.
  P.put16(pkt, 20 + P.UDP_CSUM, P.fold16(pseudo(pkt) + P.u16(pkt, 20)));
  const q = framed(pkt, { flags: P.VNET_F_NEEDS_CSUM, start: 22, offset: 4 });
  assert.equal(p.run(q).v, FORWARD);
  assert.equal(q[P.VNET_FLAGS], 0);
  const out = q.subarray(V);
  assert.equal(field(out).dst, RS);
  assert.notEqual(P.u16(out, 20 + P.UDP_CSUM), 0, 'a checksum, not "none"');
  assert.equal(onesSum(out, 20, out.length, pseudo(out)), 0xffff, 'and a valid one');
});

test('a parked packet carries its finished checksum: TCP 0 stays 0, UDP 0 is 0xffff (the replay has no offload metadata)', () => {
  for (const proto of ['tcp', 'udp']) {
    const p = setup(proto, true);
    const r = new Int32Array(p.ring!);
    const bytes = new Uint8Array(p.ring!);
    // TCP: a client's mid-flow segment; UDP: a server's reply; neither has an entry here.
    const pkt =
      proto === 'tcp'
        ? zeroChecksum(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, payload: payload(30) }))
        : zeroChecksum(udp({ src: RS, dst: CLIENT, sport: 8080, dport: 5000, payload: payload(30) }));
    const wire = pkt.slice();
    const q = partial(pkt);
    assert.equal(p.run(q).v, DROP, proto);
    assert.equal(p.counters[L.C_PARKED], 1, proto);
    assert.equal(Atomics.load(r, L.RG_PARK_TAIL), 1);
    assert.equal(r[L.parkLensOffset()], wire.length);
    const parked = bytes.slice(L.parkDataOffset(0), L.parkDataOffset(0) + wire.length);
    assert.deepEqual([...parked], [...wire], `${proto}: the packet as on the wire, checksum ${proto === 'tcp' ? '0' : '0xffff'}`);
  }
  // The same TCP segment described from its destination port on (completed in software on
  // arrival, then parked): its checksum 0 stays 0 there too.
  const p = setup('tcp', true);
  const pkt = zeroChecksum(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_ACK, payload: payload(30) }));
  const wire = pkt.slice();
  P.put16(pkt, 20 + P.TCP_CSUM, P.fold16(pseudo(pkt) + P.u16(pkt, 20)));
  assert.equal(p.run(framed(pkt, { flags: P.VNET_F_NEEDS_CSUM, start: 22, offset: P.TCP_CSUM - 2 })).v, DROP);
  assert.equal(p.counters[L.C_PARKED], 1);
  const at = L.parkDataOffset(0);
  assert.deepEqual([...new Uint8Array(p.ring!).slice(at, at + wire.length)], [...wire]);
});

test('every generated packet gets a plain virtio header, whatever the output region held', () => {
  const p = setup();
  for (const [what, pkt] of [
    ['RST to a segment of no flow', tcp({ src: CLIENT, dst: VIP, sport: 41000, flags: TCPF_ACK })],
    ['RST from a VIP port without a service', tcp({ src: CLIENT, dst: VIP, dport: 81, sport: 41000, flags: TCPF_SYN })],
  ] as const) {
    p.out.fill(0xa5);
    const r = p.run(partial(pkt));
    assert.equal(r.v, REPLY, what);
    assert.equal(r.outs.length, 1);
    assert.deepEqual([...r.outs[0]!.subarray(0, V)], new Array(V).fill(0), what);
    assert.ok(checksumsValid(r.outs[0]!.subarray(V)), what);
  }
});
