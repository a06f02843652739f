/**
 * The packets the path generates (lb/icmp.ts tcpReset, icmpUnreach, icmp6Generate, ipHeader,
 * ip6Header), byte for byte against packets built here from the RFCs: RST (RFC 9293 §3.10.7.1:
 * to an ACK, seq = its ack; otherwise seq 0, ack = its seq + its length, SYN and FIN counted),
 * ICMP destination unreachable quoting the IP header plus 8 bytes (RFC 792; next-hop MTU for
 * fragmentation needed, RFC 1191), ICMPv6 errors quoting as much as fits in 1280 bytes (RFC 4443
 * §2.4; Packet Too Big never below 1280, RFC 8200 §5). IPv4 headers: DF, TTL 64, TOS 0; IPv6: hop
 * limit 64. The output region is filled with garbage first, so a field left unwritten shows. The
 * IPv4 ID is the one field not fixed here (a worker's counter): it must differ packet to packet.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_FIN, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { REPLY } from '../../lb/verdict';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import { tcp, tcp6, udp, udp6, withIpOptions } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const CLIENT = '192.168.1.100';
const CLIENT6 = '2001:db8:1::100';

function setup(outBytes = 1 << 16) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'] },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: '10.0.0.1', port: 8080 }] },
        { protocol: 'tcp', address: VIP6, port: 80, scheduler: 'rr', realServers: [{ address: 'fd00:2::1', port: 8080 }] },
      ],
    },
    { outBytes },
  );
}

const be16 = (v: number) => [(v >>> 8) & 255, v & 255];
const be32 = (v: number) => [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
const v4 = (a: string) => be32(parseIPv4(a)!);
const v6 = (a: string) => [...parseIPv6(a)!].flatMap(be32);

/** RFC 1071 sum of 16-bit words, folded. */
function sum(words: number[], initial = 0): number {
  let s = initial;
  for (let i = 0; i < words.length; i += 2) s += (words[i]! << 8) | (words[i + 1] ?? 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}
const csum = (bytes: number[], initial = 0) => ~sum(bytes, initial) & 0xffff;

/** An IPv4 packet as RFC 791 has it for a generated answer: DF, TTL 64, TOS 0, the given ID. */
function ipv4(src: string, dst: string, proto: number, body: number[], id: number): number[] {
  const h = [0x45, 0, ...be16(20 + body.length), ...be16(id), 0x40, 0, 64, proto, 0, 0, ...v4(src), ...v4(dst)];
  const c = csum(h);
  h[10] = c >>> 8;
  h[11] = c & 255;
  return [...h, ...body];
}

function ipv6(src: string, dst: string, next: number, body: number[]): number[] {
  return [0x60, 0, 0, 0, ...be16(body.length), next, 64, ...v6(src), ...v6(dst), ...body];
}

/** A TCP header of 20 bytes, its checksum over the pseudo-header of src/dst (4 or 16 bytes each). */
function tcpHdr(src: number[], dst: number[], sport: number, dport: number, seq: number, ack: number, flags: number): number[] {
  const t = [...be16(sport), ...be16(dport), ...be32(seq), ...be32(ack), 0x50, flags, 0, 0, 0, 0, 0, 0];
  const c = csum(t, sum([...src, ...dst, 0, 6, ...be16(20)]));
  t[16] = c >>> 8;
  t[17] = c & 255;
  return t;
}

function icmpMsg(type: number, code: number, rest: number, quoted: number[], pseudo = 0): number[] {
  const m = [type, code, 0, 0, ...be32(rest), ...quoted];
  const c = csum(m, pseudo);
  m[2] = c >>> 8;
  m[3] = c & 255;
  return m;
}

/** Runs a packet with the output region full of garbage; the one answer's bytes. */
function answer(p: ReturnType<typeof setup>, pkt: Uint8Array): number[] {
  p.out.fill(0xa5);
  const r = p.run(pkt);
  assert.equal(r.v, REPLY);
  return [...r.reply!];
}

test('IPv4 RSTs: to an ACK at its acknowledgement; to a SYN with data and FIN acknowledging all of it', () => {
  const p = setup();
  const ids: number[] = [];
  // A mid-flow ACK (no entry): RST, seq = its ack, no ACK bit.
  const a = answer(
    p,
    tcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: TCPF_ACK, seq: 111, ack: 0x89abcdef, payload: payload(9) }),
  );
  ids.push((a[4]! << 8) | a[5]!);
  assert.deepEqual(a, ipv4(VIP, CLIENT, 6, tcpHdr(v4(VIP), v4(CLIENT), 80, 40000, 0x89abcdef, 0, TCPF_RST), ids[0]!));
  // A SYN|FIN with 7 bytes to a port without a service: RST|ACK, ack = seq + 7 + 1 + 1.
  const s = answer(
    p,
    tcp({ src: CLIENT, dst: VIP, sport: 40001, dport: 81, flags: TCPF_SYN | TCPF_FIN, seq: 0xfffffffe, payload: payload(7) }),
  );
  ids.push((s[4]! << 8) | s[5]!);
  assert.deepEqual(
    s,
    ipv4(VIP, CLIENT, 6, tcpHdr(v4(VIP), v4(CLIENT), 81, 40001, 0, (0xfffffffe + 9) >>> 0, TCPF_RST | TCPF_ACK), ids[1]!),
  );
  // A bare segment without flags: ack = its seq + its payload.
  const n = answer(p, tcp({ src: CLIENT, dst: VIP, sport: 40002, dport: 80, flags: 0, seq: 5000, payload: payload(3) }));
  ids.push((n[4]! << 8) | n[5]!);
  assert.deepEqual(n, ipv4(VIP, CLIENT, 6, tcpHdr(v4(VIP), v4(CLIENT), 80, 40002, 0, 5003, TCPF_RST | TCPF_ACK), ids[2]!));
  assert.equal(new Set(ids).size, 3, `IDs differ: ${ids}`);
});

test('ICMP port unreachable quotes the IP header (options too) and 8 bytes; fragmentation needed carries the next-hop MTU', () => {
  const p = setup();
  const d = udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 53, payload: payload(40) });
  const u = answer(p, d.slice());
  const id = (u[4]! << 8) | u[5]!;
  assert.deepEqual(u, ipv4(VIP, CLIENT, 1, icmpMsg(3, 3, 0, [...d.subarray(0, 28)]), id));
  // With 4 bytes of IP options (NOPs) the quote is 24 + 8 bytes.
  const o = withIpOptions(d);
  const uo = answer(p, o.slice());
  assert.deepEqual(uo, ipv4(VIP, CLIENT, 1, icmpMsg(3, 3, 0, [...o.subarray(0, 32)]), (uo[4]! << 8) | uo[5]!));
  // Fragmentation needed: a DF segment of 1400 bytes, the route to the server 1300.
  assert.notEqual(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40010, flags: TCPF_SYN })).v, REPLY);
  p.setMtu(1300);
  const big = tcp({ src: CLIENT, dst: VIP, sport: 40010, flags: TCPF_ACK, payload: payload(1360) });
  const f = answer(p, big.slice());
  assert.deepEqual(f, ipv4(VIP, CLIENT, 1, icmpMsg(3, 4, 1300, [...big.subarray(0, 28)]), (f[4]! << 8) | f[5]!));
});

test('IPv6: RST, port unreachable quoting the whole small packet, up to 1232 bytes of a large one, no more than the region holds', () => {
  const p = setup();
  const a = answer(p, tcp6({ src: CLIENT6, dst: VIP6, sport: 40000, dport: 80, flags: TCPF_ACK, ack: 77, payload: payload(5) }));
  assert.deepEqual(a, ipv6(VIP6, CLIENT6, 6, tcpHdr(v6(VIP6), v6(CLIENT6), 80, 40000, 77, 0, TCPF_RST)));
  const ps = (plen: number) => sum([...v6(VIP6), ...v6(CLIENT6), 0, 0, ...be16(plen), 0, 0, 0, 58]);
  const small = udp6({ src: CLIENT6, dst: VIP6, sport: 5000, dport: 53, payload: payload(30) });
  const u = answer(p, small.slice());
  assert.deepEqual(u, ipv6(VIP6, CLIENT6, 58, icmpMsg(1, 4, 0, [...small], ps(8 + small.length))));
  const large = udp6({ src: CLIENT6, dst: VIP6, sport: 5000, dport: 53, payload: payload(1400) });
  const l = answer(p, large.slice());
  assert.equal(l.length, 1280, 'the error fits the IPv6 minimum MTU');
  assert.deepEqual(l, ipv6(VIP6, CLIENT6, 58, icmpMsg(1, 4, 0, [...large.subarray(0, 1232)], ps(8 + 1232))));
  // A region with room for 300 bytes of answer: the quote is cut to fit it.
  const q = setup();
  q.out.fill(0xa5);
  q.region.off = 0;
  q.region.end = 300;
  const pkt = large.slice();
  assert.equal(q.proc.process(pkt, 0, pkt.length, q.region), REPLY);
  assert.equal(q.region.lens[0], 300);
  const got = [...q.out.subarray(0, 300)];
  assert.deepEqual(got, ipv6(VIP6, CLIENT6, 58, icmpMsg(1, 4, 0, [...large.subarray(0, 252)], ps(8 + 252))));
  assert.deepEqual(
    [...q.out.subarray(300, 400)].filter((x) => x !== 0xa5),
    [],
    'nothing past the region',
  );
});

test('IPv6 Packet Too Big carries the route MTU, and never less than 1280', () => {
  for (const [mtu, size, says] of [
    [1400, 1500, 1400],
    [1000, 1100, 1280],
  ] as const) {
    const p = setup();
    assert.notEqual(p.run(tcp6({ src: CLIENT6, dst: VIP6, sport: 40020, flags: TCPF_SYN })).v, REPLY);
    p.setMtu(mtu);
    const big = tcp6({ src: CLIENT6, dst: VIP6, sport: 40020, flags: TCPF_ACK, payload: payload(size - 60) });
    const r = answer(p, big.slice());
    const quoted = Math.min(big.length, 1232);
    const ps = sum([...v6(VIP6), ...v6(CLIENT6), 0, 0, ...be16(8 + quoted), 0, 0, 0, 58]);
    assert.deepEqual(r, ipv6(VIP6, CLIENT6, 58, icmpMsg(2, 0, says, [...big.subarray(0, quoted)], ps)), `MTU ${mtu}`);
  }
});
