/**
 * ICMPv6 errors about tracked flows (icmp.test.ts has IPv4), as ip_vs_in_icmp_v6 /
 * ip_vs_out_icmp_v6 handle them: translated through the full-NAT pool address both ways,
 * carried unchanged in ip6ip6 to the real server of a tunnelled flow, and dropped when their
 * checksum does not verify rather than forwarded with a fresh one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid6, field6, icmp6, udp6 } from '../helpers/packets';
import { CLIENT6, payload, setup6, VIP6 } from '../helpers/processor';

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
  const stray = icmp6({
    src: '2001:db8:7::1',
    dst: VIP6,
    type: P.ICMP6_DST_UNREACH,
    code: 0,
    payload: udp6({ src: VIP6, dst: CLIENT6, sport: 80, dport: 6009, payload: payload(10) }),
  });
  assert.equal(tun.run(stray).v, DROP, 'an error about no tracked flow is not tunnelled anywhere');
});

test('ICMPv6 errors with a bad checksum are dropped too', () => {
  const { run } = setup6('masq', 'udp', false);
  const q = run(udp6({ src: CLIENT6, dst: VIP6, sport: 5353, dport: 80, payload: payload(10) }));
  const sent = field6(q.pkt);
  const err = icmp6({ src: sent.dst, dst: sent.src, type: P.ICMP6_DST_UNREACH, code: 4, payload: q.pkt.slice() });
  err[err.length - 1]! ^= 0x55;
  assert.equal(run(err).v, DROP);
});
