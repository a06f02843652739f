/**
 * The hash functions of sh/dh/lblc (hash_32) and mh (hsiphash on a 64-bit kernel), against the
 * kernel's self-test vectors and values computed independently (docs/ipvs-semantics.md §11).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hsiphash4, sipInit } from '../../net/siphash';
import { hash32 } from '../../schedulers/hash';
import { mhHash1, mhHash2 } from '../../schedulers/mh';
import { fold, parseInet } from '../../net/addr';

const ip = (s: string) => fold(parseInet(s)!);

test('hsiphash of 4 bytes matches the 64-bit kernel self-test vector (lib/siphash_kunit.c)', () => {
  // key 00 01 … 0f, input bytes 00 01 02 03 → 0x88d38328
  const key = sipInit([0x07060504, 0x03020100, 0x0f0e0d0c, 0x0b0a0908]);
  assert.equal(hsiphash4(key, 0x03020100), 0x88d38328);
});

test('mh hashes real servers and clients with the kernel keys to the reference values', () => {
  assert.equal(mhHash1(ip('10.0.0.1'), 80, 0), 0x439c0cbe);
  assert.equal(mhHash2(ip('10.0.0.1'), 80), 0x97b3dc47);
  assert.equal(mhHash1(ip('10.0.0.2'), 80, 0), 0xa1cf683b);
  assert.equal(mhHash2(ip('10.0.0.2'), 80), 0xfa5d46df);
  assert.equal(mhHash1(ip('10.0.0.3'), 80, 0), 0x2cdf0afa);
  assert.equal(mhHash2(ip('10.0.0.3'), 80), 0xedeb33d0);
  assert.equal(mhHash1(ip('10.0.0.1'), 0, 0), 0x03080ce4);
  assert.equal(mhHash1(ip('192.168.1.100'), 0, 0), 0xc15d2cf8);
  // offset, skip of 10.0.0.1:80 in a 4093-slot table
  assert.equal(mhHash1(ip('10.0.0.1'), 80, 0) % 4093, 3167);
  assert.equal((mhHash2(ip('10.0.0.1'), 80) % 4092) + 1, 700);
});

test('the mh offset argument is added to the hashed value, as ip_vs_mh_hashkey does', () => {
  assert.equal(mhHash1(ip('10.0.0.1'), 0, 80), mhHash1(ip('10.0.0.1'), 80, 0));
});

test('hash_32 keeps the top bits of the product with the 32-bit golden ratio', () => {
  // (0xC0A80164 · 0x61C88647) mod 2^32 = 0x59…, computed independently
  assert.equal(hash32(ip('192.168.1.100'), 8), 89);
  assert.equal(hash32((ip('192.168.1.100') + 80) >>> 0, 8), 232);
  assert.equal(hash32(ip('10.96.0.10'), 10), 969);
  assert.equal(hash32(0, 8), 0);
});

test('IPv6 addresses fold to the XOR of their four 32-bit words', () => {
  assert.equal(fold(parseInet('2001:db8::1')!) >>> 0, 0x20010db9);
  assert.equal(fold(parseInet('::ffff:10.0.0.1')!) >>> 0, 0x0a00fffe);
});
