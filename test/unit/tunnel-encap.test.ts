/**
 * The outer headers the tunnel method writes (lb/tunnel.ts; ip_vs_tunnel_xmit, RFC 2003 §3.1):
 * every field of the outer IPv4 header (TOS copied, DF only when the route's MTU is known, TTL
 * 64, a fresh ID per packet — the outer packets may be fragmented), the ip6ip6 header, the size
 * limits (65535, the output region), and the segments of a GSO super-packet (CWR on the first
 * only, a bare super-packet as one segment, their virtio headers, nothing written at or past the
 * region's end — lb/verdict.ts OutRegion). The output region is filled with garbage before each
 * packet, so a field the code forgets to write shows.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_CWR, TCPF_PSH, TCPF_SYN } from '../../conntrack/state';
import { DROP, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, checksumsValid6, complete, field, field6, partial, tcp, tcp6 } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const V = P.VNET_HLEN;
const TCPF_ECE = 0x40;
const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = '10.0.0.1';

function setup(o: { offload?: boolean; outBytes?: number } = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1' },
      services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding: 'tunnel', realServers: [{ address: RS }] }],
    },
    { offload: o.offload ?? false, outBytes: o.outBytes ?? 1 << 18 },
  );
}

/** A client TCP packet with the given TOS and DF, its header checksum redone. */
function client(o: { sport?: number; flags?: number; tos?: number; df?: boolean; n?: number; seq?: number }): Uint8Array {
  const pkt = tcp({
    src: CLIENT,
    dst: VIP,
    sport: o.sport ?? 40000,
    flags: o.flags ?? TCPF_SYN,
    seq: o.seq,
    payload: payload(o.n ?? 10),
    frag: o.df === false ? 0 : 0x4000,
  });
  pkt[1] = o.tos ?? 0;
  P.put16(pkt, P.IP_CSUM, 0);
  P.put16(pkt, P.IP_CSUM, P.checksum(pkt, 0, 20, 0));
  return pkt;
}

test('the outer IPv4 header: 4 in protocol, the inner TOS, TTL 64, DF clear while the route MTU is unknown, a new ID per packet', () => {
  const p = setup();
  const ids: number[] = [];
  for (const [k, tos] of [0xb8, 0x02, 0x00].entries()) {
    p.out.fill(0xa5);
    const inner = client({ sport: 40000 + k, tos });
    const r = p.run(inner.slice());
    assert.equal(r.v, REPLY);
    const o = r.reply!;
    assert.equal(o[0], 0x45);
    assert.equal(o[1], tos, 'TOS of the inner packet');
    assert.equal(P.u16(o, P.IP_TOTLEN), 20 + inner.length);
    assert.equal(P.u16(o, P.IP_FRAG), 0, 'DF clear (the inner one is set), no fragment bits');
    assert.equal(o[P.IP_TTL], 64);
    assert.equal(o[P.IP_PROTO], 4);
    assert.deepEqual([field(o).src, field(o).dst], ['10.1.1.1', RS]);
    assert.equal(P.sum16(o, 0, 20, 0), 0xffff);
    assert.deepEqual([...o.subarray(20)], [...inner]);
    ids.push(P.u16(o, P.IP_ID));
  }
  assert.equal(new Set(ids).size, 3, `outer IDs differ: ${ids}`);
});

test('with the route MTU known the outer header takes the inner DF (after the path-MTU check)', () => {
  const p = setup();
  p.setMtu(9000);
  for (const df of [true, false]) {
    p.out.fill(0xa5);
    const r = p.run(client({ sport: df ? 40010 : 40011, df }));
    assert.equal(r.v, REPLY);
    assert.equal(P.u16(r.reply!, P.IP_FRAG), df ? P.IP_DF : 0, `inner DF ${df}`);
    assert.equal(P.sum16(r.reply!, 0, 20, 0), 0xffff);
  }
  // A super-packet's segments take it too (each segment passed the check).
  const g = setup({ offload: true });
  g.setMtu(9000);
  assert.equal(g.run(partial(client({ sport: 40012 }))).v, REPLY);
  const segs = g.run(partial(client({ sport: 40012, flags: TCPF_ACK, n: 3000 }), 1448));
  assert.equal(segs.outs.length, 3);
  for (const s of segs.outs) assert.equal(P.u16(s, V + P.IP_FRAG), P.IP_DF);
});

test('an encapsulated IPv4 packet may reach 65535 bytes and no more; one the output region cannot hold is dropped as output_full', () => {
  const p = setup();
  const n = 65535 - 20 - 40;
  assert.equal(p.run(client({ sport: 40020, n })).v, REPLY, '65535 with the outer header');
  assert.equal(p.run(client({ sport: 40020, flags: TCPF_ACK, n: n + 1 })).v, DROP);
  assert.equal(p.drops('output_full'), 1);
  // A region of exactly the outer packet's size holds it; one byte less does not.
  const q = setup({ outBytes: 20 + 40 + 100 });
  assert.equal(q.run(client({ sport: 40021, n: 100 })).v, REPLY, 'exactly fits');
  assert.equal(q.run(client({ sport: 40021, flags: TCPF_ACK, n: 101 })).v, DROP);
  assert.equal(q.drops('output_full'), 1);
});

test('with offloads a packet whose checksum is whole gets a plain virtio header in the tunnel', () => {
  const p = setup({ offload: true });
  p.out.fill(0xa5);
  const pkt = new Uint8Array(V + 50);
  pkt.set(client({ sport: 40030 }), V);
  const r = p.run(pkt);
  assert.equal(r.v, REPLY);
  assert.deepEqual([...r.outs[0]!.subarray(0, V)], new Array(V).fill(0));
  assert.ok(checksumsValid(r.outs[0]!.subarray(V + 20)));
});

test('segments: CWR on the first only, the inner TOS on every outer header, plain fields of each virtio header zero', () => {
  const p = setup({ offload: true });
  assert.equal(p.run(partial(client({ sport: 40040 }))).v, REPLY);
  p.out.fill(0xa5);
  const r = p.run(partial(client({ sport: 40040, flags: TCPF_ACK | TCPF_CWR | TCPF_ECE | TCPF_PSH, tos: 0x2a, n: 4000 }), 1448));
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, 3);
  const ids = new Set<number>();
  for (const [k, s] of r.outs.entries()) {
    const h = [...s.subarray(0, V)];
    assert.deepEqual(h, [P.VNET_F_NEEDS_CSUM, 0, 0, 0, 0, 0, 40, 0, P.TCP_CSUM, 0], `segment ${k} virtio header`);
    const o = complete(s);
    assert.equal(o[1], 0x2a, 'outer TOS');
    assert.equal(o[21], 0x2a, 'inner TOS');
    assert.equal(o[P.IP_TTL], 64);
    ids.add(P.u16(o, P.IP_ID));
    const f = field(o.subarray(20)).flags;
    assert.equal(f & TCPF_CWR, k === 0 ? TCPF_CWR : 0, `CWR on segment ${k}`);
    assert.equal(f & TCPF_ECE, TCPF_ECE, 'ECE on every segment');
    assert.ok(checksumsValid(o.subarray(20)));
  }
  assert.equal(ids.size, 3, 'outer IDs differ');
});

test('a GSO-described segment without payload goes out as one segment, headers only', () => {
  const p = setup({ offload: true });
  assert.equal(p.run(partial(client({ sport: 40050 }))).v, REPLY);
  const bare = partial(client({ sport: 40050, flags: TCPF_ACK, n: 0 }), 1448);
  const r = p.run(bare);
  assert.equal(r.v, REPLY);
  assert.equal(r.outs.length, 1);
  const o = complete(r.outs[0]!);
  assert.equal(o.length, 20 + 40);
  assert.equal(P.u16(o, P.IP_TOTLEN), 60);
  assert.ok(checksumsValid(o.subarray(20)));
});

test('segments that fit the output region exactly are written, and nothing at or past its end; one byte less is output_full', () => {
  const p = setup({ offload: true });
  assert.equal(p.run(partial(client({ sport: 40060 }))).v, REPLY);
  // Three segments of 1448: each slot is virtio + outer + inner headers + gso_size.
  const per = V + 20 + 40 + 1448;
  const seg = () => partial(client({ sport: 40060, flags: TCPF_ACK, n: 3 * 1448 - 100 }), 1448);
  for (const end of [3 * per, 3 * per - 1]) {
    p.out.fill(0xa5);
    p.region.off = V;
    p.region.end = end;
    const pkt = seg();
    const v = p.proc.process(pkt, V, pkt.length - V, p.region);
    assert.deepEqual(
      [...p.out.subarray(end, end + 2 * per)].filter((x) => x !== 0xa5),
      [],
      `nothing written past the region's end (${end})`,
    );
    if (end === 3 * per) {
      assert.equal(v, REPLY);
      assert.equal(p.region.count, 3);
    } else {
      assert.equal(v, DROP);
      assert.equal(p.drops('output_full'), 1);
    }
  }
});

test('ip6ip6: the outer header from tunnelSource6 to the real server (all of its words), hop limit 64; no IPv6 source, no tunnel', () => {
  const RS6 = 'fd00:10:0:1:2:3:4:1';
  const mk = () =>
    makeProcessor(
      {
        dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], tunnelSource: '10.1.1.1', tunnelSource6: 'fd00:1::1' },
        services: [
          { protocol: 'tcp', address: 'fd00:96::10', port: 80, scheduler: 'rr', forwarding: 'tunnel', realServers: [{ address: RS6 }] },
        ],
      },
      { outBytes: 1 << 18 },
    );
  const p = mk();
  p.out.fill(0xa5);
  const inner = tcp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 40070, flags: TCPF_SYN, payload: payload(20) });
  const r = p.run(inner.slice());
  assert.equal(r.v, REPLY);
  const o = r.reply!;
  assert.equal(P.u32(o, 0) >>> 0, 0x60000000);
  assert.equal(P.u16(o, P.IP6_PLEN), inner.length);
  assert.equal(o[P.IP6_NEXT], 41);
  assert.equal(o[P.IP6_HOPS], 64);
  assert.deepEqual([field6(o).src, field6(o).dst], ['fd00:1::1', RS6]);
  assert.deepEqual([...o.subarray(40)], [...inner]);
  assert.ok(checksumsValid6(o.subarray(40)));
  // A snapshot without tunnelSource6 (the IPv4 one set): the IPv6 flow has no tunnel source.
  const q = mk();
  q.proc.setSnapshot({ ...q.model.apply(q.cfg), tunnelSrc6: new Int32Array(4) });
  assert.equal(q.run(tcp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 40071, flags: TCPF_SYN })).v, DROP);
  assert.equal(q.drops('no_tunnel_source'), 1);
});

test('ip6ip6 carries an inner packet of up to 65535 bytes', () => {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['fd00:96::/64'], tunnelSource6: 'fd00:1::1' },
      services: [
        {
          protocol: 'tcp',
          address: 'fd00:96::10',
          port: 80,
          scheduler: 'rr',
          forwarding: 'tunnel',
          realServers: [{ address: 'fd00:10::1' }],
        },
      ],
    },
    { outBytes: 1 << 18 },
  );
  const n = 65535 - 60;
  const r = p.run(tcp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 40080, flags: TCPF_SYN, payload: payload(n) }));
  assert.equal(r.v, REPLY);
  assert.equal(P.u16(r.reply!, P.IP6_PLEN), 65535);
  const over = tcp6({ src: '2001:db8:1::100', dst: 'fd00:96::10', sport: 40080, flags: TCPF_ACK, payload: payload(n + 1) });
  assert.equal(p.run(over).v, DROP, 'an outer payload length cannot say 65536');
  assert.equal(p.drops('output_full'), 1);
});
