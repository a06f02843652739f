/**
 * Device offloads (IFF_VNET_HDR): packets carry a virtio_net_hdr, TCP/UDP checksums may be
 * partial (the pseudo-header sum, completed by the device) and TCP may arrive as a GSO
 * super-packet. The processor must keep partial checksums right through NAT, describe them after
 * IPIP encapsulation, and cut super-packets into segments for the tunnel.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_FIN, TCPF_PSH, TCPF_SYN } from '../../conntrack/state';
import { DROP, FORWARD, MAX_OUT, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, complete, field, icmpEcho, partial, tcp, udp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];
const V = P.VNET_HLEN;

function setup(forwarding: 'masq' | 'tunnel' | 'fullnat', protocol = 'tcp') {
  return makeProcessor(
    {
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
    },
    { offload: true, outBytes: 1 << 18 },
  );
}

const payload = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + 3) & 255);

test('masq keeps a partial TCP checksum partial and right: the device completes it to a valid one', () => {
  const { run } = setup('masq');
  const syn = partial(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN, payload: payload(33) }));
  assert.equal(run(syn).v, FORWARD);
  assert.equal(syn[P.VNET_FLAGS], P.VNET_F_NEEDS_CSUM, 'still left to the device');
  const f = field(syn.subarray(V));
  assert.ok(RS.includes(f.dst));
  assert.equal(f.dport, 8080);
  assert.ok(checksumsValid(complete(syn)), 'completed checksum is valid after the rewrite');
});

test('full-NAT rewrites both ends of a partial UDP datagram and its reply correctly', () => {
  const { run } = setup('fullnat', 'udp');
  const q = partial(udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 80, payload: payload(101) }));
  assert.equal(run(q).v, FORWARD);
  const f = field(q.subarray(V));
  assert.equal(f.src, '10.2.0.1');
  assert.ok(checksumsValid(complete(q)));
  const reply = partial(udp({ src: f.dst, dst: f.src, sport: f.dport, dport: f.sport, payload: payload(60) }));
  assert.equal(run(reply).v, FORWARD);
  const r = field(reply.subarray(V));
  assert.deepEqual([r.src, r.sport, r.dst, r.dport], [VIP, 80, CLIENT, 5000]);
  assert.ok(checksumsValid(complete(reply)));
});

test('a GSO super-packet is forwarded whole by masq, its virtio header untouched', () => {
  const { run } = setup('masq');
  assert.equal(run(partial(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_SYN }))).v, FORWARD);
  const big = partial(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_ACK, payload: payload(20000) }), 1448);
  const hdr = big.slice(0, V);
  assert.equal(run(big).v, FORWARD);
  assert.deepEqual([...big.subarray(0, V)], [...hdr]);
  assert.ok(checksumsValid(complete(big)));
});

test('tunnel: a partial checksum is described after the outer header; a super-packet is cut into valid segments', () => {
  const { run } = setup('tunnel');
  const syn = partial(tcp({ src: CLIENT, dst: VIP, sport: 40002, flags: TCPF_SYN, payload: payload(10) }));
  const inner = complete(syn);
  const r = run(syn);
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, 1);
  const framed = r.outs[0]!;
  assert.equal(P.le16(framed, P.VNET_CSUM_START), 40, 'csum_start moved past the outer header');
  const outer = complete(framed);
  assert.equal(field(outer).proto, 4);
  assert.deepEqual([...outer.subarray(20)], [...inner], 'completed inner packet = the original');

  const data = payload(5000);
  const seq = 0xfffff000; // wraps during the segments
  const plain = tcp({ src: CLIENT, dst: VIP, sport: 40002, flags: TCPF_ACK | TCPF_PSH | TCPF_FIN, seq, id: 0x7000, payload: data });
  const segs = run(partial(plain, 1448));
  assert.equal(segs.v, REPLY);
  assert.equal(segs.outs.length, 4, '5000 bytes in segments of 1448');
  const got: number[] = [];
  for (let k = 0; k < segs.outs.length; k++) {
    const seg = complete(segs.outs[k]!);
    const o = field(seg);
    assert.equal(o.proto, 4);
    assert.equal(P.u16(seg, P.IP_TOTLEN), seg.length);
    assert.equal(P.sum16(seg, 0, 20, 0), 0xffff, 'outer header checksum');
    const i = seg.subarray(20);
    assert.ok(checksumsValid(i), `segment ${k} checksums`);
    const fi = field(i);
    assert.equal(fi.seq, (seq + k * 1448) >>> 0);
    assert.equal(P.u16(i, P.IP_ID), 0x7000 + k);
    assert.equal(fi.flags & (TCPF_FIN | TCPF_PSH), k === 3 ? TCPF_FIN | TCPF_PSH : 0, 'FIN and PSH on the last segment only');
    assert.equal(P.u16(i, P.IP_TOTLEN), 40 + (k === 3 ? 5000 - 3 * 1448 : 1448));
    got.push(...i.subarray(40));
  }
  assert.deepEqual(got, [...data], 'the segments carry the payload in order');
});

test('offload metadata the dataplane cannot honour is dropped and counted', () => {
  const { run, drops } = setup('masq');
  const p = partial(tcp({ src: CLIENT, dst: VIP, sport: 40003, flags: TCPF_SYN, payload: payload(3000) }), 1448);
  p[P.VNET_GSO_TYPE] = 5; // UDP_L4 on a TCP packet
  assert.equal(run(p).v, DROP);
  assert.equal(drops('bad_offload'), 1);
  // A partial checksum anywhere but a TCP/UDP checksum field (here an ICMP echo's) is completed
  // in software, so the echo is checked and answered as usual.
  const echo = icmpEcho({ src: CLIENT, dst: VIP, payload: payload(24) });
  const q = new Uint8Array(V + echo.length);
  q.set(echo, V);
  P.put16(q, V + 22, 0); // ICMP has no pseudo-header: the partial sum is 0
  q[P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
  P.putLe16(q, P.VNET_CSUM_START, 20);
  P.putLe16(q, P.VNET_CSUM_OFFSET, 2);
  assert.equal(run(q).v, FORWARD);
  assert.equal(q[P.VNET_FLAGS], 0, 'nothing left for the device');
  const reply = q.subarray(V);
  assert.equal(field(reply).icmpType, P.ICMP_ECHOREPLY);
  assert.ok(checksumsValid(reply));
});

test('tunnel: a super-packet of MAX_OUT segments is segmented; one of more is dropped and counted (uvsd sets gso_max_segs so the kernel never sends one)', () => {
  // Measured on this kernel: without gso_max_segs a TUN with TSO hands over GSO packets of 742
  // segments at MSS 88 and 163 at MSS 400.
  const { run, drops } = setup('tunnel', 'tcp');
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
  const r = run(
    frame(tcp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 40000, flags: TCPF_ACK, payload: payload(MAX_OUT * 400) }), 400),
  );
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, MAX_OUT);
  const over = run(frame(tcp({ src: '192.168.1.100', dst: '10.96.0.10', sport: 40000, flags: TCPF_ACK, payload: payload(60000) }), 400));
  assert.equal(over.v, DROP, '150 segments: more than a worker can write for one packet');
  assert.equal(drops('output_full'), 1, 'output_full, not truncated: the packet was whole');
});
