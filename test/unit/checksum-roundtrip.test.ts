/**
 * Checksums through the rewrite paths, with IPv6 extension headers in the way: random flows in
 * both families, masq and full-NAT, with full and partial (offloaded) checksums and, for IPv6,
 * sometimes a destination-options header before the transport header — every packet and its
 * reply valid after the rewrite; and one partial checksum behind a destination-options header
 * through full-NAT. IPv6 validity is checked with a sum written here that steps over the header.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { FORWARD } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, complete, field, field6, partial, tcp, tcp6, udp, udp6 } from '../helpers/packets';
import { CLIENT6, makeProcessor, payload, RS6, setup6, VIP6 } from '../helpers/processor';

const V = P.VNET_HLEN;

/** IPv6 TCP/UDP with a destination-options header (8 bytes) before the transport header. */
function withDstOpts(pkt: Uint8Array): Uint8Array {
  const b = new Uint8Array(pkt.length + 8);
  b.set(pkt.subarray(0, 40), 0);
  b.set(pkt.subarray(40), 48);
  b[48 - 8] = pkt[P.IP6_NEXT]!;
  b[48 - 7] = 0; // 8 bytes
  b[48 - 6] = 1; // PadN
  b[48 - 5] = 4;
  b[P.IP6_NEXT] = 60;
  P.put16(b, P.IP6_PLEN, P.u16(pkt, P.IP6_PLEN) + 8);
  return b;
}
function plainFrame(q: Uint8Array): Uint8Array {
  const b = new Uint8Array(V + q.length);
  b.set(q, V);
  return b;
}
function valid6x(b: Uint8Array): boolean {
  const hasOpt = b[P.IP6_NEXT] === 60;
  const l4 = hasOpt ? 48 : 40;
  const next = hasOpt ? b[40]! : b[P.IP6_NEXT]!;
  const l4len = 40 + P.u16(b, P.IP6_PLEN) - l4;
  return P.sum16(b, l4, l4len, P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, next, l4len)) === 0xffff;
}

test('random flows, both families, masq and full-NAT, full and partial checksums: all valid both ways', () => {
  let seed = 12345;
  const rnd = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return seed >>> 0;
  };
  for (const fwd of ['masq', 'fullnat']) {
    for (const offload of [false, true]) {
      const { run } = makeProcessor(
        {
          dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], fullnat: { addresses: ['10.2.0.1', 'fd00:99::abcd:1'] } },
          services: [
            {
              protocol: 'tcp',
              address: 'fd00:96::10',
              port: 80,
              scheduler: 'rr',
              forwarding: fwd,
              realServers: RS6.map((a) => ({ address: a, port: 8080 })),
            },
            {
              protocol: 'udp',
              address: 'fd00:96::10',
              port: 80,
              scheduler: 'rr',
              forwarding: fwd,
              realServers: RS6.map((a) => ({ address: a, port: 8080 })),
            },
            {
              protocol: 'tcp',
              address: '10.96.0.10',
              port: 80,
              scheduler: 'rr',
              forwarding: fwd,
              realServers: [
                { address: '10.0.0.1', port: 8080 },
                { address: '10.0.0.2', port: 8081 },
              ],
            },
            {
              protocol: 'udp',
              address: '10.96.0.10',
              port: 80,
              scheduler: 'rr',
              forwarding: fwd,
              realServers: [{ address: '10.0.0.1', port: 8080 }],
            },
          ],
        },
        { offload, outBytes: 1 << 18, capacity: 4096 },
      );
      for (let i = 0; i < 300; i++) {
        const v6 = (rnd() & 1) === 1;
        const isUdp = (rnd() & 1) === 1;
        const sport = 1024 + (rnd() % 60000);
        const pl = payload(rnd() % 300);
        const opt = v6 && (rnd() & 1) === 1;
        if (v6) {
          const c = `2001:db8:${(rnd() & 0xffff).toString(16)}:${(rnd() & 0xffff).toString(16)}::${(rnd() & 0xffff).toString(16)}:${(rnd() & 0xffff).toString(16)}`;
          let q = (isUdp ? udp6 : tcp6)({ src: c, dst: VIP6, sport, dport: 80, flags: TCPF_SYN, payload: pl });
          if (opt) q = withDstOpts(q);
          const framed =
            offload && !opt
              ? partial(q)
              : offload
                ? (() => {
                    const b = new Uint8Array(V + q.length);
                    b.set(q, V);
                    return b;
                  })()
                : q;
          const r = run(framed);
          assert.equal(r.v, FORWARD, `${fwd} v6 ${i}`);
          const out = offload ? complete(framed) : framed;
          assert.ok(valid6x(out), `${fwd} v6 ${isUdp ? 'udp' : 'tcp'} opt=${opt} offload=${offload} in ${i}`);
          const f = field6(out, opt ? 8 : 0);
          const fa = field6(out);
          // reply
          let rp = (isUdp ? udp6 : tcp6)({
            src: fa.dst,
            dst: fa.src,
            sport: 8080,
            dport: P.u16(out, opt ? 48 : 40),
            flags: TCPF_SYN | TCPF_ACK,
            payload: pl,
          });
          if (opt) rp = withDstOpts(rp);
          const rf =
            offload && !opt
              ? partial(rp)
              : offload
                ? (() => {
                    const b = new Uint8Array(V + rp.length);
                    b.set(rp, V);
                    return b;
                  })()
                : rp;
          const rr = run(rf);
          assert.equal(rr.v, FORWARD, `${fwd} v6 reply ${i}`);
          const ro = offload ? complete(rf) : rf;
          assert.ok(valid6x(ro), `${fwd} v6 reply ${i}`);
          const g = field6(ro);
          assert.deepEqual([g.src, g.dst], [VIP6, c]);
          void f;
        } else {
          const c = `172.${rnd() & 255}.${rnd() & 255}.${rnd() & 255}`;
          const q = (isUdp ? udp : tcp)({
            src: c,
            dst: '10.96.0.10',
            sport,
            dport: 80,
            flags: TCPF_SYN,
            payload: pl,
            udpNoChecksum: isUdp && (rnd() & 3) === 0,
          });
          const qf = offload ? plainFrame(q) : q;
          const r = run(qf);
          assert.equal(r.v, FORWARD);
          q.set(qf.subarray(qf.length - q.length));
          assert.ok(checksumsValid(q), `${fwd} v4 ${i}`);
          const f = field(q);
          const rp = (isUdp ? udp : tcp)({
            src: f.dst,
            dst: f.src,
            sport: f.dport,
            dport: f.sport,
            flags: TCPF_SYN | TCPF_ACK,
            payload: pl,
          });
          const rpf = offload ? plainFrame(rp) : rp;
          assert.equal(run(rpf).v, FORWARD);
          rp.set(rpf.subarray(rpf.length - rp.length));
          assert.ok(checksumsValid(rp));
          assert.deepEqual([field(rp).src, field(rp).dst, field(rp).dport], ['10.96.0.10', c, sport]);
        }
      }
    }
  }
});

test('IPv6 with a destination-options header and a partial checksum: rewritten and valid', () => {
  const { run } = setup6('fullnat', 'tcp');
  const pkt = withDstOpts(tcp6({ src: CLIENT6, dst: VIP6, sport: 41000, flags: TCPF_SYN, payload: payload(50) }));
  const b = new Uint8Array(V + pkt.length);
  b.set(pkt, V);
  const l4len = P.u16(pkt, P.IP6_PLEN) - 8;
  P.put16(b, V + 48 + P.TCP_CSUM, P.fold16(P.pseudoSum6(pkt, P.IP6_SRC, P.IP6_DST, 6, l4len)));
  b[P.VNET_FLAGS] = P.VNET_F_NEEDS_CSUM;
  P.putLe16(b, P.VNET_CSUM_START, 48);
  P.putLe16(b, P.VNET_CSUM_OFFSET, P.TCP_CSUM);
  assert.equal(run(b).v, FORWARD);
  assert.equal(b[P.VNET_FLAGS], P.VNET_F_NEEDS_CSUM);
  assert.ok(valid6x(complete(b)));
  assert.equal(field6(b.subarray(V)).src, 'fd00:99::1');
});
