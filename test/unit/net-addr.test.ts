/**
 * net/addr.ts, the one address model: IPv4 and IPv6 text as RFC 4291 / RFC 5952 say, CIDRs of
 * each family, "host:port" and "[v6]:port" as the listeners, uvsadm and the simulator read them,
 * and the family-tagged Inet form of the tools.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateConfig } from '../../control/config';
import {
  canonAddr,
  fold,
  formatCidr,
  formatEndpoint,
  formatInet,
  formatIPv4,
  formatIPv6,
  hostPort,
  inAnyCidr,
  maskBits,
  maskPrefix,
  parseCidr,
  parseCidr6,
  parseEndpoint,
  parseInet,
  parseIPv4,
  parseIPv6,
  splitHostPort,
} from '../../net/addr';

test('IPv4 text: dotted quads only, no octet above 255 nor with a leading zero; signed words', () => {
  assert.equal(parseIPv4('10.1.2.3'), 0x0a010203);
  assert.equal(parseIPv4('255.255.255.255'), -1, 'the first octet in the top byte of a signed 32-bit word');
  assert.equal(formatIPv4(parseIPv4('192.168.0.1')!), '192.168.0.1');
  assert.equal(formatIPv4(0xc0a80001 >>> 0), '192.168.0.1', 'unsigned words print the same');
  for (const bad of ['256.0.0.1', '010.0.0.1', '1.2.3', '1.2.3.4.5', ' 1.2.3.4', '1.2.3.4 ', 'a.b.c.d', ''])
    assert.equal(parseIPv4(bad), null, bad);
});

test('IPv6 text forms parse and print as RFC 4291 / RFC 5952 say', () => {
  const cases: [string, string][] = [
    ['::', '::'],
    ['::1', '::1'],
    ['2001:DB8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['2001:db8::0:1', '2001:db8::1'],
    ['::ffff:192.0.2.33', '::ffff:192.0.2.33'],
    ['::ffff:c000:221', '::ffff:192.0.2.33'],
    ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'],
  ];
  for (const [inp, want] of cases) assert.equal(formatIPv6(parseIPv6(inp)!), want, inp);
  for (const bad of ['1::2::3', '1:2:3:4:5:6:7', '1:2:3:4:5:6:7:8:9', 'g::1', '12345::', '::1.2.3'])
    assert.equal(parseIPv6(bad), null, bad);
  assert.equal(canonAddr('FD00:0::1'), 'fd00::1');
  assert.equal(canonAddr('10.0.0.1'), '10.0.0.1');
});

test('CIDRs: prefix lengths 0–32 / 0–128 in decimal, the network part kept; netmasks must be contiguous', () => {
  assert.equal(formatCidr(parseCidr('10.1.2.3/8')!), '10.0.0.0/8');
  assert.equal(parseCidr('10.1.2.3')!.bits, 32);
  assert.equal(parseCidr('0.0.0.0/0')!.mask, 0);
  for (const bad of ['10.0.0.0/33', '10.0.0.0/-1', '10.0.0.0/', '10.0.0.0/8/8', '10.0.0.0/0x8', 'fd00::/64'])
    assert.equal(parseCidr(bad), null, bad);
  assert.equal(parseCidr6('fd00:96::10/64')!.bits, 64);
  assert.equal(formatIPv6(parseCidr6('fd00:96::10/64')!.net), 'fd00:96::');
  for (const bad of ['fd00::/129', 'fd00::/', '10.0.0.0/8']) assert.equal(parseCidr6(bad), null, bad);
  assert.equal(maskBits(parseIPv4('255.255.255.0')!), 24);
  assert.equal(maskBits(0), 0);
  assert.equal(maskBits(parseIPv4('255.0.255.0')!), null);
});

test('an address is matched against the CIDRs of its own family only (VIP ranges, kube-proxy excludeCIDRs)', () => {
  const cidrs = ['0.0.0.0/0', 'fd00:96::/64'];
  assert.equal(inAnyCidr('10.1.2.3', cidrs), true);
  assert.equal(inAnyCidr('fd00:96::10', cidrs), true);
  assert.equal(inAnyCidr('fd00:97::10', cidrs), false, 'an IPv4 0.0.0.0/0 does not take in IPv6 addresses');
  assert.equal(inAnyCidr('10.1.2.3', ['::/0']), false);
});

test('splitHostPort: host:port, IPv6 in brackets, port 0–65535', () => {
  assert.deepEqual(splitHostPort('127.0.0.1:10249'), { host: '127.0.0.1', port: 10249, bracketed: false });
  assert.deepEqual(splitHostPort('[::1]:10249'), { host: '::1', port: 10249, bracketed: true });
  assert.deepEqual(splitHostPort('localhost:0'), { host: 'localhost', port: 0, bracketed: false });
  assert.deepEqual(splitHostPort('[fe80::1%eth0]:80'), { host: 'fe80::1%eth0', port: 80, bracketed: true }, 'the host is not checked');
  for (const bad of ['::1:80', '127.0.0.1', '127.0.0.1:', ':80', '[::1]', '[::1]80', 'host:65536', 'host:-1', 'host:8o'])
    assert.equal(splitHostPort(bad), null, bad);
  // What uvsadm and the API print splits back.
  for (const [a, p] of [
    ['10.0.0.1', 80],
    ['fd00::1', 443],
    ['::ffff:10.0.0.1', 53],
  ] as const) {
    assert.deepEqual(splitHostPort(hostPort(a, p)), { host: a, port: p, bracketed: a.includes(':') });
  }
});

test('config listeners take host:port with IPv6 as hexadecimal [addr]:port; [::1] is loopback', () => {
  const base = { dataplane: { vipCidrs: ['10.96.0.0/24'] } };
  assert.equal(validateConfig({ ...base, metrics: { address: '[::1]:10249' } }).metrics.address, '[::1]:10249');
  assert.equal(validateConfig({ ...base, metrics: { address: 'localhost:10249' } }).metrics.address, 'localhost:10249');
  assert.throws(() => validateConfig({ ...base, metrics: { address: '[::]:10249' } }), /required when listening beyond loopback/);
  for (const bad of ['[fe80::1%eth0]:10249', '[::ffff:127.0.0.1]:10249', '::1:10249', '127.0.0.1:65536', '127.0.0.1']) {
    assert.throws(() => validateConfig({ ...base, metrics: { address: bad } }), /must be host:port \(IPv6 as \[addr\]:port\)/, bad);
  }
});

test('Inet endpoints: the family matches the form, at most five port digits; words are unsigned', () => {
  const e = parseEndpoint('[2001:DB8::1]:8080')!;
  assert.deepEqual(e, { addr: { family: 6, words: [0x20010db8, 0, 0, 1] }, port: 8080 });
  assert.equal(formatEndpoint(e.addr, e.port), '[2001:db8::1]:8080');
  assert.deepEqual(parseEndpoint('255.1.2.3:80'), { addr: { family: 4, words: [0xff010203] }, port: 80 });
  for (const bad of ['[1.2.3.4]:80', '::1:80', '1.2.3.4:000080', '1.2.3.4:65536', '1.2.3.4', '[::1]', 'host:80', '[::1]:80]:90'])
    assert.equal(parseEndpoint(bad), null, bad);
  assert.equal(parseInet('10.0.0.1:80'), null);
  assert.equal(formatInet(parseInet('::ffff:10.0.0.1')!), '::ffff:10.0.0.1');
});

test('Inet: the kernel fold (XOR of the words) and prefix masks of either family', () => {
  assert.equal(fold(parseInet('10.0.0.1')!), 0x0a000001);
  assert.equal(fold(parseInet('255.0.0.1')!), 0xff000001 | 0, 'as int32');
  assert.equal(fold(parseInet('2001:db8::1')!), (0x20010db8 ^ 1) | 0);
  assert.equal(formatInet(maskPrefix(parseInet('10.1.2.3')!, 20)), '10.1.0.0');
  assert.equal(formatInet(maskPrefix(parseInet('2001:db8:aaaa:bbbb::1')!, 40)), '2001:db8:aa00::');
  assert.equal(formatInet(maskPrefix(parseInet('2001:db8::1')!, 0)), '::');
  assert.equal(formatInet(maskPrefix(parseInet('2001:db8::1')!, 128)), '2001:db8::1');
});
