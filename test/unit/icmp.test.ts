/**
 * ICMP errors about tracked flows are translated as ip_vs_in_icmp / ip_vs_out_icmp do (ICMPv6:
 * icmp6.test.ts), a damaged one is dropped rather than given a fresh checksum, a translated one
 * counts in the service's out counters, and a DF packet larger than the route to its real server
 * is answered with fragmentation needed from the VIP (path-MTU discovery through uvs).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { parseIPv4 } from '../../net/addr';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, field, tcp, udp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const ROUTER = '192.168.7.1';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function setup(forwarding: 'masq' | 'tunnel' | 'fullnat', protocol: 'tcp' | 'udp') {
  return makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1', fullnat: { addresses: ['10.2.0.1'] } },
    services: [
      {
        protocol,
        address: VIP,
        port: 80,
        scheduler: 'rr',
        forwarding,
        realServers: RS.map((a) => (forwarding === 'tunnel' ? { address: a } : { address: a, port: 8080 })),
      },
    ],
  });
}

/** An ICMP error from `src` to `dst` quoting `about` (its IP header + 8 bytes, RFC 792). */
function icmpError(src: string, dst: string, type: number, code: number, about: Uint8Array, mtu = 0): Uint8Array {
  const quoted = about.subarray(0, Math.min(about.length, ((about[0]! & 15) << 2) + 8));
  const b = new Uint8Array(28 + quoted.length);
  b[0] = 0x45;
  P.put16(b, P.IP_TOTLEN, b.length);
  b[P.IP_TTL] = 64;
  b[P.IP_PROTO] = P.IPPROTO_ICMP;
  P.put32(b, P.IP_SRC, parseIPv4(src)!);
  P.put32(b, P.IP_DST, parseIPv4(dst)!);
  P.put16(b, P.IP_CSUM, P.checksum(b, 0, 20, 0));
  b[20] = type;
  b[21] = code;
  P.put32(b, 24, mtu);
  b.set(quoted, 28);
  P.put16(b, 22, P.checksum(b, 20, b.length - 20, 0));
  return b;
}

/** The quoted packet inside an ICMP error, as fields. */
function quoted(b: Uint8Array) {
  return field(b.subarray(28));
}
const quotedHeaderValid = (b: Uint8Array) => P.sum16(b, 28, 20, 0) === 0xffff;

test('masq: an error from the client side about a reply goes to the real server, as if about its own packet', () => {
  const { run } = setup('masq', 'tcp');
  const syn = run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }));
  const rip = field(syn.pkt).dst;
  const reply = run(tcp({ src: rip, dst: CLIENT, sport: 8080, dport: 40000, flags: TCPF_SYN | TCPF_ACK, payload: new Uint8Array(1400) }));
  assert.equal(reply.v, FORWARD);
  // A router on the client's path cannot take 1440 bytes: fragmentation needed, to the VIP.
  const err = run(icmpError(ROUTER, VIP, P.ICMP_DEST_UNREACH, P.ICMP_FRAG_NEEDED, reply.pkt, 1400));
  assert.equal(err.v, FORWARD);
  const f = field(err.pkt);
  assert.deepEqual([f.src, f.dst, f.icmpType, f.icmpCode], [ROUTER, rip, 3, 4]);
  const q = quoted(err.pkt);
  assert.deepEqual([q.src, q.sport, q.dst, q.dport], [rip, 8080, CLIENT, 40000], "the quoted packet is the server's own");
  assert.equal(P.u16(err.pkt, 26), 1400, 'next-hop MTU unchanged');
  assert.ok(checksumsValid(err.pkt), 'outer header and ICMP checksums');
  assert.ok(quotedHeaderValid(err.pkt), 'quoted IP header checksum');
});

test("masq: a real server's port unreachable about a UDP flow reaches the client from the VIP", () => {
  const { run } = setup('masq', 'udp');
  const q = run(udp({ src: CLIENT, dst: VIP, sport: 5353, dport: 80, payload: new Uint8Array(10) }));
  const rip = field(q.pkt).dst;
  const err = run(icmpError(rip, CLIENT, P.ICMP_DEST_UNREACH, P.ICMP_PORT_UNREACH, q.pkt));
  assert.equal(err.v, FORWARD);
  const f = field(err.pkt);
  assert.deepEqual([f.src, f.dst], [VIP, CLIENT]);
  const qq = quoted(err.pkt);
  assert.deepEqual([qq.src, qq.sport, qq.dst, qq.dport], [CLIENT, 5353, VIP, 80], 'quotes what the client sent');
  assert.ok(checksumsValid(err.pkt));
  assert.ok(quotedHeaderValid(err.pkt));
});

test('full-NAT: errors are translated through the pool address both ways', () => {
  const { run } = setup('fullnat', 'udp');
  const q = run(udp({ src: CLIENT, dst: VIP, sport: 5353, dport: 80, payload: new Uint8Array(10) }));
  const sent = field(q.pkt);
  assert.equal(sent.src, '10.2.0.1');
  const up = run(icmpError(sent.dst, sent.src, P.ICMP_DEST_UNREACH, P.ICMP_PORT_UNREACH, q.pkt));
  assert.equal(up.v, FORWARD);
  const f = field(up.pkt);
  assert.deepEqual([f.src, f.dst], [VIP, CLIENT]);
  const qq = quoted(up.pkt);
  assert.deepEqual([qq.src, qq.sport, qq.dst, qq.dport], [CLIENT, 5353, VIP, 80]);
  assert.ok(checksumsValid(up.pkt) && quotedHeaderValid(up.pkt));

  const reply = run(udp({ src: sent.dst, dst: sent.src, sport: 8080, dport: sent.sport, payload: new Uint8Array(10) }));
  assert.deepEqual([field(reply.pkt).src, field(reply.pkt).dst], [VIP, CLIENT]);
  const down = run(icmpError(ROUTER, VIP, P.ICMP_TIME_EXCEEDED, 0, reply.pkt));
  assert.equal(down.v, FORWARD);
  const g = field(down.pkt);
  assert.deepEqual([g.src, g.dst], ['10.2.0.1', sent.dst]);
  const qd = quoted(down.pkt);
  assert.deepEqual([qd.src, qd.sport, qd.dst, qd.dport], [sent.dst, 8080, '10.2.0.1', sent.sport]);
  assert.ok(checksumsValid(down.pkt) && quotedHeaderValid(down.pkt));
});

test('tunnel: an error about a flow is encapsulated to its real server unchanged', () => {
  const { run } = setup('tunnel', 'tcp');
  const syn = run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }));
  assert.ok(syn.reply);
  const rip = field(syn.reply).dst;
  // The server answered the client directly (VIP:80 → client); a router sends an error to the VIP.
  const direct = tcp({ src: VIP, dst: CLIENT, sport: 80, dport: 40000, flags: TCPF_SYN | TCPF_ACK });
  const icmp = icmpError(ROUTER, VIP, P.ICMP_DEST_UNREACH, 1, direct);
  const original = icmp.slice();
  const r = run(icmp);
  assert.equal(r.v, REPLY);
  assert.equal(field(r.reply!).proto, 4);
  assert.equal(field(r.reply!).dst, rip);
  assert.deepEqual([...r.reply!.subarray(20)], [...original]);
});

test('errors about no flow of ours: to a VIP dropped, from a server passed on, to a pool address dropped', () => {
  const { run, drops } = setup('fullnat', 'tcp');
  const stray = tcp({ src: VIP, dst: CLIENT, sport: 80, dport: 1, flags: TCPF_ACK });
  assert.equal(run(icmpError(ROUTER, VIP, P.ICMP_DEST_UNREACH, 1, stray)).v, DROP);
  assert.equal(drops('icmp_ignored'), 1);
  const own = tcp({ src: RS[0]!, dst: '172.16.0.9', sport: 22, dport: 5000, flags: TCPF_ACK });
  const pass = icmpError('172.16.0.9', RS[0]!, P.ICMP_DEST_UNREACH, 3, own);
  const before = pass.slice();
  assert.equal(run(pass).v, FORWARD);
  assert.deepEqual([...pass], [...before], 'untouched');
  assert.equal(
    run(icmpError(RS[0]!, '10.2.0.1', P.ICMP_DEST_UNREACH, 3, tcp({ src: '10.2.0.1', dst: RS[0]!, sport: 1, dport: 8080 }))).v,
    DROP,
  );
  assert.equal(drops('icmp_ignored'), 2);
});

test('a DF packet larger than the route to its real server gets fragmentation needed from the VIP', () => {
  for (const method of ['masq', 'tunnel'] as const) {
    const { run, drops, setMtu } = setup(method, 'tcp');
    setMtu(1400);
    run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN }));
    const big = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, payload: new Uint8Array(1400) });
    const r = run(big);
    assert.equal(r.v, REPLY, method);
    const f = field(r.reply!);
    assert.deepEqual([f.src, f.dst, f.icmpType, f.icmpCode], [VIP, CLIENT, 3, 4]);
    assert.equal(P.u16(r.reply!, 26), method === 'tunnel' ? 1380 : 1400, 'next-hop MTU (tunnel: room for the outer header)');
    const q = quoted(r.reply!);
    assert.deepEqual([q.src, q.dst, q.dport], [CLIENT, VIP, 80], 'quotes the packet as the client sent it');
    assert.ok(checksumsValid(r.reply!));
    assert.equal(drops('too_big'), 1);
    // What fits goes through; without DF the kernel may fragment, as IPVS lets it.
    const fits = run(
      tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, payload: new Uint8Array(method === 'tunnel' ? 1340 : 1360) }),
    );
    assert.notEqual(fits.v, DROP);
    assert.ok(fits.v === FORWARD || (fits.reply && field(fits.reply).proto === 4));
    const noDf = tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_ACK, payload: new Uint8Array(1400), frag: 0 });
    const nd = run(noDf);
    assert.ok(nd.v === FORWARD || (nd.reply && field(nd.reply).proto === 4), 'no DF: forwarded');
    assert.equal(drops('too_big'), 1);
  }
});

test('ICMP errors with a bad ICMP checksum are dropped, not re-checksummed into valid ones (ip_vs_in_icmp / handle_response_icmp)', () => {
  const { run } = setup('masq', 'udp');
  const q = run(udp({ src: CLIENT, dst: VIP, sport: 5353, dport: 80, payload: new Uint8Array(10) }));
  const f = field(q.pkt);
  const err = icmpError(f.dst, f.src, P.ICMP_DEST_UNREACH, P.ICMP_PORT_UNREACH, q.pkt);
  err[40]! ^= 0x55; // damage a quoted byte: the ICMP checksum no longer verifies
  assert.notEqual(P.sum16(err, 20, err.length - 20, 0), 0xffff);
  const r = run(err);
  assert.equal(r.v, DROP, 'a damaged ICMP error was forwarded with a freshly computed (valid) checksum');
});

test('a translated ICMP error from a real server counts in the service out counters too (ip_vs_out_stats)', () => {
  const { run, counters } = setup('masq', 'udp');
  const q = run(udp({ src: CLIENT, dst: VIP, sport: 5353, dport: 80, payload: new Uint8Array(10) }));
  const f = field(q.pkt);
  const err = icmpError(f.dst, f.src, P.ICMP_DEST_UNREACH, P.ICMP_PORT_UNREACH, q.pkt);
  assert.equal(run(err).v, FORWARD);
  // service slot 0 (the only one), maxRealServers 16
  const sb = L.svcCounterBase(16, 0);
  let rsOut = 0;
  for (let rs = 0; rs < 16; rs++) rsOut += counters[L.rsCounterBase(rs) + L.RSC_OUTPKTS]!;
  assert.equal(rsOut, 1, 'real server out packets');
  assert.equal(counters[sb + L.RSC_OUTPKTS], 1, 'service out packets');
});
