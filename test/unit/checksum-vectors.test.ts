/**
 * net/packet.ts's checksums against answers that do not come from net/packet.ts: the RFC 1071 §3
 * and RFC 1624 §4 worked examples, packets whose checksums the Linux kernel computed
 * (test/fixtures/kernel-packets.json, captured from a TUN device without offloads by
 * test/fixtures/capture-kernel-packets.sh), and a naive reference written here with a different
 * method (one plain sum, then mod 0xffff, instead of folding carries as packet.ts does).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as P from '../../net/packet';

// ── The reference ─────────────────────────────────────────────────────────────────────────────

/**
 * One's-complement sum of big-endian 16-bit words (an odd last byte is the high byte of a word
 * padded with zero, RFC 1071 §4.1). End-around carry is the same as taking the plain sum mod
 * 0xffff, with a non-zero multiple of 0xffff giving 0xffff (-0) — RFC 1071 §2(B).
 */
function refSum(bytes: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < bytes.length; i += 2) total += bytes[i]! * 256 + (i + 1 < bytes.length ? bytes[i + 1]! : 0);
  if (total === 0) return 0;
  const r = total % 0xffff;
  return r === 0 ? 0xffff : r;
}
const refChecksum = (bytes: ArrayLike<number>) => 0xffff - refSum(bytes);

/** RFC 768 / RFC 793 pseudo-header: source, destination, zero, protocol, L4 length. */
function pseudo4(src: Uint8Array, dst: Uint8Array, proto: number, len: number): number[] {
  return [...src, ...dst, 0, proto, len >> 8, len & 255];
}
/** RFC 8200 §8.1 pseudo-header: source, destination, 32-bit length, 3 zero bytes, next header. */
function pseudo6(src: Uint8Array, dst: Uint8Array, next: number, len: number): number[] {
  return [...src, ...dst, (len >>> 24) & 255, (len >>> 16) & 255, (len >>> 8) & 255, len & 255, 0, 0, 0, next];
}
const withZeroAt = (b: Uint8Array, at: number) => {
  const c = Uint8Array.from(b);
  c[at] = 0;
  c[at + 1] = 0;
  return c;
};
const hexBytes = (h: string) => Uint8Array.from(h.match(/../g)!.map((x) => parseInt(x, 16)));

// ── Worked examples from the RFCs ─────────────────────────────────────────────────────────────

test('RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2 (checksum 0x220d)', () => {
  const b = Uint8Array.of(0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7);
  assert.equal(refSum(b), 0xddf2);
  assert.equal(P.sum16(b, 0, 8, 0), 0xddf2);
  assert.equal(P.checksum(b, 0, 8, 0), 0x220d);
  // The same words at an odd offset inside a larger buffer, and with the initial value carried in.
  const big = new Uint8Array(11);
  big.set(b, 3);
  assert.equal(P.sum16(big, 3, 8, 0), 0xddf2);
  assert.equal(P.sum16(b, 2, 6, 0x0001), 0xddf2);
});

test('RFC 1624 §4: m 0x5555 → 0x3285 with the rest summing to 0xCD7A takes HC 0xDD2F to 0x0000 (eqn. 3), not 0xFFFF (eqn. 2)', () => {
  const before = Uint8Array.of(0xcd, 0x7a, 0x55, 0x55);
  const after = Uint8Array.of(0xcd, 0x7a, 0x32, 0x85);
  assert.equal(refChecksum(before), 0xdd2f);
  assert.equal(refChecksum(after), 0x0000);
  assert.equal(P.checksum(before, 0, 4, 0), 0xdd2f);
  assert.equal(P.csumReplace16(0xdd2f, 0x5555, 0x3285), 0x0000);
  const field = Uint8Array.of(0xdd, 0x2f);
  P.fix16(field, 0, 0x5555, 0x3285);
  assert.deepEqual([...field], [0x00, 0x00]);
  // The same change as half of a 32-bit value (csumReplace32 is two 16-bit replacements).
  assert.equal(P.csumReplace32(0xdd2f, 0x00005555, 0x00003285), 0x0000);
  assert.equal(P.csumReplace32(0xdd2f, 0x55550000, 0x32850000), 0x0000);
});

test('RFC 1624 eqn. 3 folds twice: a checksum 0x0000 with a field 0x0000 → 0x0001 becomes 0xfffe, as recomputing gives', () => {
  // ~HC + ~m + m' = 0xffff + 0xffff + 1 = 0x1ffff: one fold leaves 0x10000, the second gives 1.
  const h = Uint8Array.of(0xff, 0xff, 0x00, 0x00);
  assert.equal(refChecksum(h), 0x0000);
  h[3] = 1;
  assert.equal(refChecksum(h), 0xfffe);
  assert.equal(P.csumReplace16(0x0000, 0x0000, 0x0001), 0xfffe);
  assert.equal(P.csumReplace32(0x0000, 0x00000000, 0x00000001), 0xfffe);
});

test('the IPv4 header example 4500 0030 4422 4000 8006 0000 8c7c 19ac ae24 1e2b has checksum 0x442e', () => {
  const h = hexBytes('45000030442240008006' + '0000' + '8c7c19acae241e2b');
  assert.equal(refChecksum(h), 0x442e);
  assert.equal(P.checksum(h, 0, 20, 0), 0x442e);
});

// ── Packets the kernel computed ───────────────────────────────────────────────────────────────

interface Captured {
  name: string;
  note: string;
  hex: string;
}
const FIXTURE = JSON.parse(readFileSync(join(__dirname, '..', '..', '..', 'test', 'fixtures', 'kernel-packets.json'), 'utf8')) as {
  kernel: string;
  packets: Captured[];
};

test('the fixture holds the packets the checksum tests need', () => {
  assert.deepEqual(
    FIXTURE.packets.map((p) => p.name),
    ['udp4-odd', 'udp6-odd', 'icmp4-echo', 'icmp6-echo', 'tcp4-syn', 'tcp4-ack', 'tcp4-data', 'tcp6-syn', 'tcp6-ack', 'tcp6-data'],
  );
});

/** The L4 region of a captured packet: offset, length, protocol and where its checksum is. */
function l4(b: Uint8Array) {
  const v6 = b[0]! >> 4 === 6;
  const off = v6 ? 40 : (b[0]! & 15) * 4;
  const proto = v6 ? b[P.IP6_NEXT]! : b[P.IP_PROTO]!;
  const len = b.length - off;
  const at = off + (proto === P.IPPROTO_TCP ? P.TCP_CSUM : proto === P.IPPROTO_UDP ? P.UDP_CSUM : P.ICMP_CSUM);
  return { v6, off, proto, len, at };
}

for (const pkt of FIXTURE.packets) {
  test(`kernel ${FIXTURE.kernel}, ${pkt.name} (${pkt.note}): the reference and packet.ts both give the kernel's checksums`, () => {
    const b = hexBytes(pkt.hex);
    const { v6, off, proto, len, at } = l4(b);
    const stored = P.u16(b, at);
    if (!v6) {
      assert.equal(P.u16(b, P.IP_TOTLEN), b.length, 'a whole packet');
      const ipStored = P.u16(b, P.IP_CSUM);
      assert.equal(refChecksum(withZeroAt(b.subarray(0, off), P.IP_CSUM)), ipStored, 'reference: IPv4 header');
      assert.equal(P.checksum(withZeroAt(b.subarray(0, off), P.IP_CSUM), 0, off, 0), ipStored, 'packet.ts: IPv4 header');
      assert.equal(P.sum16(b, 0, off, 0), 0xffff, 'packet.ts: a valid header sums to -0');
    } else {
      assert.equal(P.u16(b, P.IP6_PLEN), len, 'a whole packet');
    }
    const zeroed = withZeroAt(b, at).subarray(off);
    const src = b.subarray(v6 ? P.IP6_SRC : P.IP_SRC, v6 ? P.IP6_SRC + 16 : P.IP_SRC + 4);
    const dst = b.subarray(v6 ? P.IP6_DST : P.IP_DST, v6 ? P.IP6_DST + 16 : P.IP_DST + 4);
    const ph = proto === P.IPPROTO_ICMP ? [] : v6 ? pseudo6(src, dst, proto, len) : pseudo4(src, dst, proto, len);
    assert.equal(refChecksum([...ph, ...zeroed]), stored, 'reference: L4 checksum');
    const initial =
      proto === P.IPPROTO_ICMP
        ? 0
        : v6
          ? P.pseudoSum6(b, P.IP6_SRC, P.IP6_DST, proto, len)
          : P.pseudoSum(P.u32(b, P.IP_SRC), P.u32(b, P.IP_DST), proto, len);
    assert.equal(P.checksum(withZeroAt(b, at), off, len, initial), stored, 'packet.ts: L4 checksum');
    assert.equal(P.sum16(b, off, len, initial), 0xffff, "packet.ts: the kernel's packet verifies");
  });
}

test('a DNAT rewrite of each kernel IPv4 packet by fix32/fix16 gives the checksums a from-scratch reference computes', () => {
  for (const pkt of FIXTURE.packets) {
    const b = hexBytes(pkt.hex);
    const { v6, off, proto, at } = l4(b);
    const newPort = 0xfffe;
    if (v6) {
      // Port change only: IPv6 has no header checksum and packet.ts rewrites addresses word by word.
      if (proto === P.IPPROTO_ICMPV6) continue;
      const oldPort = P.u16(b, off + P.L4_DPORT);
      P.put16(b, off + P.L4_DPORT, newPort);
      P.fix16(b, at, oldPort, newPort);
      const src = b.subarray(P.IP6_SRC, P.IP6_SRC + 16);
      const dst = b.subarray(P.IP6_DST, P.IP6_DST + 16);
      assert.equal(P.u16(b, at), refChecksum([...pseudo6(src, dst, proto, b.length - 40), ...withZeroAt(b, at).subarray(40)]), pkt.name);
      continue;
    }
    const oldDst = P.u32(b, P.IP_DST);
    const newDst = 0xc0a8fe01 | 0; // 192.168.254.1: every word changes
    P.put32(b, P.IP_DST, newDst);
    P.fix32(b, P.IP_CSUM, oldDst, newDst);
    if (proto !== P.IPPROTO_ICMP) {
      P.fix32(b, at, oldDst, newDst);
      const oldPort = P.u16(b, off + P.L4_DPORT);
      P.put16(b, off + P.L4_DPORT, newPort);
      P.fix16(b, at, oldPort, newPort);
    }
    assert.equal(P.u16(b, P.IP_CSUM), refChecksum(withZeroAt(b.subarray(0, off), P.IP_CSUM)), `${pkt.name}: IPv4 header`);
    const ph = proto === P.IPPROTO_ICMP ? [] : pseudo4(b.subarray(12, 16), b.subarray(16, 20), proto, b.length - off);
    assert.equal(P.u16(b, at), refChecksum([...ph, ...withZeroAt(b, at).subarray(off)]), `${pkt.name}: L4`);
  }
});

// ── packet.ts against the reference on many inputs ───────────────────────────────────────────

/** A small deterministic generator (LCG), so a failure names a reproducible case. */
function lcg(seed: number) {
  let a = seed >>> 0;
  return () => (a = (Math.imul(a, 1664525) + 1013904223) >>> 0);
}

test('sum16 and checksum equal the reference on 5000 random regions: odd and even lengths and offsets, carried-in sums', () => {
  const rnd = lcg(17);
  const buf = new Uint8Array(1600);
  for (let k = 0; k < 5000; k++) {
    const off = rnd() % 64;
    // Lengths up to 1500, plus runs of 0xff bytes that push the sum across 0xffff many times.
    const len = k % 10 === 0 ? rnd() % 4 : rnd() % 1500;
    for (let i = 0; i < off + len; i++) buf[i] = k % 7 === 0 ? 0xff : rnd() >>> 24;
    const initial = k % 3 === 0 ? 0 : rnd() % 0x3ffff; // pseudo-header sums are unfolded, up to 18 bits
    const region = buf.subarray(off, off + len);
    const want = refSum([...splitWords(initial), ...region]);
    assert.equal(P.sum16(buf, off, len, initial), want, `case ${k}: off ${off} len ${len} initial ${initial}`);
    if (want !== 0) assert.equal(P.checksum(buf, off, len, initial), 0xffff - want, `case ${k}`);
  }
});

/** A number < 2^32 as big-endian 16-bit words (summing them adds the number mod 0xffff). */
function splitWords(v: number): number[] {
  return [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
}

test('pseudoSum and pseudoSum6 equal the reference pseudo-headers on random addresses and lengths', () => {
  const rnd = lcg(99);
  for (let k = 0; k < 2000; k++) {
    const src = rnd() | 0;
    const dst = rnd() | 0;
    const proto = [P.IPPROTO_TCP, P.IPPROTO_UDP][k & 1]!;
    const len = rnd() % 65536;
    const s4 = Uint8Array.of(src >>> 24, (src >>> 16) & 255, (src >>> 8) & 255, src & 255);
    const d4 = Uint8Array.of(dst >>> 24, (dst >>> 16) & 255, (dst >>> 8) & 255, dst & 255);
    assert.equal(P.fold16(P.pseudoSum(src, dst, proto, len)) % 0xffff, refSum(pseudo4(s4, d4, proto, len)) % 0xffff, `v4 case ${k}`);
    const b = new Uint8Array(40);
    for (let i = 8; i < 40; i++) b[i] = rnd() >>> 24;
    const len6 = k % 5 === 0 ? 65536 + (rnd() % 100000) : len; // jumbogram lengths have a high word
    const ref6 = refSum(pseudo6(b.subarray(8, 24), b.subarray(24, 40), proto, len6));
    assert.equal(P.fold16(P.pseudoSum6(b, 8, 24, proto, len6)) % 0xffff, ref6 % 0xffff, `v6 case ${k}`);
  }
});

test('csumReplace16/32 and fix16/fix32 equal a from-scratch reference after random field changes', () => {
  const rnd = lcg(4242);
  const h = new Uint8Array(20);
  for (let k = 0; k < 5000; k++) {
    for (let i = 0; i < 20; i++) h[i] = rnd() >>> 24;
    if (k % 11 === 0) h.fill(0, 0, 20); // an all-zero header: the +0/-0 corner of RFC 1624 §3
    P.put16(h, 10, 0);
    P.put16(h, 10, refChecksum(h));
    const csum = P.u16(h, 10);
    const at = [0, 2, 4, 6, 8, 12, 16][k % 7]!;
    if (k & 1) {
      const from = P.u16(h, at);
      const to = k % 13 === 0 ? from : rnd() & 0xffff;
      P.put16(h, at, to);
      P.fix16(h, 10, from, to);
      if (to === from && (csum === 0 || csum === 0xffff)) {
        // RFC 1624 errata 4782: with the field unchanged, +0 and -0 may swap; both still verify.
        assert.equal(P.sum16(h, 0, 20, 0) % 0xffff, 0, `16-bit case ${k}: verifies`);
        continue;
      }
      assert.equal(P.u16(h, 10), refChecksum(withZeroAt(h, 10)), `16-bit case ${k} at ${at}`);
    } else {
      const at32 = at === 0 || at === 4 || at === 12 || at === 16 ? at : 12;
      const from = P.u32(h, at32);
      const to = rnd() | 0;
      P.put32(h, at32, to);
      P.fix32(h, 10, from, to);
      assert.equal(P.u16(h, 10), refChecksum(withZeroAt(h, 10)), `32-bit case ${k} at ${at32}`);
    }
  }
});

test('fold16 folds every carry: 0 → 0, 0xffff stays -0, 0x1fffe and 0x2fffd fold to 0xffff, 0x12345 to 0x2346', () => {
  assert.deepEqual([0, 0xffff, 0x1fffe, 0x2fffd, 0x12345, 0x7fff8000].map(P.fold16), [0, 0xffff, 0xffff, 0xffff, 0x2346, 0xffff]);
});

/**
 * A UDP/IPv4 datagram at offset `at` in a larger buffer, its checksum field holding the partial
 * (pseudo-header) sum as a device with checksum offload receives it; `tail` is the payload's end.
 */
function partialUdp(at: number, payload: number[]) {
  const len = 8 + payload.length;
  const b = new Uint8Array(at + 20 + len + 5).fill(0xee);
  const ip = Uint8Array.of(0x45, 0, 0, 20 + len, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2);
  P.put16(ip, 2, 20 + len);
  P.put16(ip, 10, refChecksum(ip));
  b.set(ip, at);
  const u = at + 20;
  b.set([0x9c, 0x40, 0x00, 0x35, len >> 8, len & 255, 0, 0, ...payload], u);
  const ph = pseudo4(ip.subarray(12, 16), ip.subarray(16, 20), 17, len);
  P.put16(b, u + 6, 0xffff - refChecksum(ph)); // the folded pseudo-header sum itself
  return { b, u, end: u + len, ph };
}

test('completeChecksum finishes a partial checksum where the L4 header starts past offset 0, as the reference computes it', () => {
  for (const at of [0, 14, 31]) {
    const { b, u, end, ph } = partialUdp(at, [1, 2, 3, 4, 5]);
    P.completeChecksum(b, u, end, u + 6, true);
    const want = refChecksum([...ph, ...withZeroAt(b.subarray(u, end), 6)]);
    assert.equal(P.u16(b, u + 6), want, `L4 at ${u}`);
    assert.equal(b[end], 0xee, 'nothing past the datagram was read into it or written');
  }
});

test('completeChecksum sends a computed UDP checksum of 0 as 0xffff (RFC 768), and leaves a TCP 0 as 0', () => {
  // Pick the last payload word so that the datagram's checksum comes out as 0.
  const { b, u, end, ph } = partialUdp(14, [0, 0]);
  const rest = refSum([...ph, ...withZeroAt(b.subarray(u, end), 6)]);
  P.put16(b, end - 2, 0xffff - rest);
  assert.equal(refChecksum([...ph, ...withZeroAt(b.subarray(u, end), 6)]), 0, 'the datagram sums to -0');
  const tcpCopy = b.slice();
  P.completeChecksum(b, u, end, u + 6, true);
  assert.equal(P.u16(b, u + 6), 0xffff);
  P.completeChecksum(tcpCopy, u, end, u + 6, false);
  assert.equal(P.u16(tcpCopy, u + 6), 0);
});
