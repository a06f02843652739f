/**
 * Device offloads over IPv6 (offload.test.ts has IPv4): partial TCP/UDP checksums and GSO
 * super-packets through masq and full-NAT in both directions, and through the ip6ip6 tunnel,
 * where the partial checksum is described after the outer header and a super-packet is cut into
 * segments — every result completed as the device would and its checksums checked.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_FIN, TCPF_PSH, TCPF_SYN } from '../../conntrack/state';
import { FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid6, complete, field6, partial, tcp6, udp6 } from '../helpers/packets';
import { CLIENT6, payload, RS6, setup6, VIP6 } from '../helpers/processor';

const V = P.VNET_HLEN;

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
  const { run } = setup6('tunnel');
  const syn = partial(tcp6({ src: CLIENT6, dst: VIP6, sport: 40002, flags: TCPF_SYN, payload: payload(10) }));
  const inner = complete(syn);
  const r = run(syn);
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, 1);
  const framed = r.outs[0]!;
  assert.equal(P.le16(framed, P.VNET_CSUM_START), 80);
  const outer = complete(framed);
  assert.equal(outer[P.IP6_NEXT], 41);
  assert.ok(RS6.includes(field6(outer).dst));
  assert.deepEqual([...outer.subarray(40)], [...inner]);
  const data = payload(5000);
  const seq = 0xfffff000;
  const segs = run(
    partial(tcp6({ src: CLIENT6, dst: VIP6, sport: 40002, flags: TCPF_ACK | TCPF_PSH | TCPF_FIN, seq, payload: data }), 1400),
  );
  assert.equal(segs.v, REPLY);
  assert.equal(segs.outs.length, 4);
  const got: number[] = [];
  for (let k = 0; k < segs.outs.length; k++) {
    const seg = complete(segs.outs[k]!);
    assert.equal(40 + P.u16(seg, P.IP6_PLEN), seg.length);
    const i = seg.subarray(40);
    assert.equal(40 + P.u16(i, P.IP6_PLEN), i.length);
    assert.ok(checksumsValid6(i), `segment ${k}`);
    got.push(...i.subarray(60));
  }
  assert.deepEqual(got, [...data]);
});
