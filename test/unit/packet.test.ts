import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as P from '../../net/packet';
import { checksumsValid, tcp, udp } from '../helpers/packets';
import { mulberry32 } from '../helpers/rng';

const rng = mulberry32;

test('an incremental address and port update gives the same checksum as a full recomputation', () => {
  const r = rng(7);
  for (let i = 0; i < 2000; i++) {
    const payload = new Uint8Array(r() % 64);
    for (let j = 0; j < payload.length; j++) payload[j] = r() & 255;
    const isTcp = (r() & 1) === 1;
    const spec = { src: '192.168.1.100', dst: '10.0.0.1', sport: r() & 0xffff, dport: r() & 0xffff, payload };
    const pkt = isTcp ? tcp(spec) : udp(spec);
    const newDst = r() | 0;
    const newPort = r() & 0xffff;
    const oldDst = P.u32(pkt, P.IP_DST);
    const oldPort = P.u16(pkt, 22);
    P.put32(pkt, P.IP_DST, newDst);
    P.fix32(pkt, P.IP_CSUM, oldDst, newDst);
    P.put16(pkt, 22, newPort);
    const c = isTcp ? 20 + P.TCP_CSUM : 20 + P.UDP_CSUM;
    let v = P.csumReplace32(P.u16(pkt, c), oldDst, newDst);
    v = P.csumReplace16(v, oldPort, newPort);
    P.put16(pkt, c, !isTcp && v === 0 ? 0xffff : v);
    assert.ok(checksumsValid(pkt), `packet ${i} (${isTcp ? 'tcp' : 'udp'}) has a bad checksum after the update`);
  }
});

test('the RFC 1071 checksum of a region that includes its checksum sums to 0xffff', () => {
  const pkt = tcp({ src: '1.2.3.4', dst: '5.6.7.8', payload: new Uint8Array([1, 2, 3]) });
  assert.equal(P.sum16(pkt, 0, 20, 0), 0xffff);
  assert.ok(checksumsValid(pkt));
  pkt[30]! ^= 0x40;
  assert.ok(!checksumsValid(pkt), 'a flipped bit must be detected');
});

test('u32 and put32 round-trip addresses with the top bit set', () => {
  const b = new Uint8Array(4);
  P.put32(b, 0, 0xc0a80101 | 0);
  assert.deepEqual([...b], [192, 168, 1, 1]);
  assert.equal(P.u32(b, 0), 0xc0a80101 | 0);
});

test('ip6Upper steps over hop-by-hop, routing and destination options to the upper layer; a longer or cut chain is −1', () => {
  // 40-byte base header, then `exts` extension headers of 8 bytes each, each naming the next.
  const pkt = (first: number, exts: number[], last: number, cut = 0) => {
    const b = new Uint8Array(40 + 8 * exts.length + 20 - cut);
    b[0] = 0x60;
    b[P.IP6_NEXT] = exts.length ? first : last;
    exts.forEach((_, i) => (b[40 + 8 * i] = i + 1 < exts.length ? exts[i + 1]! : last));
    return b;
  };
  const { IPPROTO_HOPOPTS: H, IPPROTO_ROUTING: R, IPPROTO_DSTOPTS: D, IPPROTO_FRAGMENT: F } = P;
  assert.equal(P.ip6Upper(pkt(0, [], 6), 0, 60), (40 << 8) | 6, 'no extension header');
  const chain = pkt(H, [H, R, D], 17);
  assert.equal(P.ip6Upper(chain, 0, chain.length), (64 << 8) | 17, 'three of them');
  // An extension header of 16 bytes (length field 1).
  const long = new Uint8Array(76);
  long[P.IP6_NEXT] = D;
  long[40] = 6;
  long[41] = 1;
  assert.equal(P.ip6Upper(long, 0, long.length), (56 << 8) | 6, 'lengths are in 8-byte units beyond the first 8');
  assert.equal(P.ip6Upper(pkt(H, [H, F], 6), 0, 76), (48 << 8) | F, 'a fragment header ends the walk');
  const nine = pkt(D, Array(9).fill(D), 6);
  assert.equal(P.ip6Upper(nine, 0, nine.length), -1, 'more than 8');
  const eight = pkt(D, Array(8).fill(D), 6);
  assert.equal(P.ip6Upper(eight, 0, eight.length), (104 << 8) | 6, '8 pass');
  assert.equal(P.ip6Upper(chain, 0, 60), -1, 'an extension header cut by the end');
  // At an offset inside a larger buffer.
  const at = new Uint8Array(10 + chain.length);
  at.set(chain, 10);
  assert.equal(P.ip6Upper(at, 10, at.length), (64 << 8) | 17);
});
