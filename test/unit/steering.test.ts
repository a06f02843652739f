/**
 * The queue-steering key (lb/steering.ts, the specification of lb/native/steer.c, which
 * test/integration/steering.test.ts holds to it) against an attacker who knows the algorithm but
 * not the 64-bit key drawn at start (docs/steering.md): sources chosen so that a weakly mixed or
 * folded hash — or a key they do not take part in — would put them all on one queue must spread
 * over the queues as random sources do, for every key. And the affinity the key exists for: both
 * directions of a masq connection on one queue.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { type SteeringKey, steeringKey, steeringPorts, steeringPrefix, steeringValue } from '../../lb/steering';
import { HalfSipHash } from '../../net/siphash';
import { put16, put32 } from '../../net/packet';

const VIP_CIDRS = ['10.200.0.0/24', 'fd00:200::/64'];
const POOL = ['10.200.99.1', 'fd00:200:99::1'];
const VIP4 = 0x0ac8000a; // 10.200.0.10
const VIP6 = [0xfd000200, 0, 0, 0x10];
const POOL4 = 0x0ac86301;
const SOURCES = 16384;
const KEYS = 64;
const QUEUES = [2, 3, 4, 8, 16];

function randomKey(): SteeringKey {
  return steeringKey(randomInt(0, 2 ** 32), randomInt(0, 2 ** 32), VIP_CIDRS, POOL);
}

/** An IPv4 TCP segment src:sport → dst:dport (only what the key reads is filled in). */
function tcp4(src: number, sport: number, dst: number, dport: number): Uint8Array {
  const b = new Uint8Array(40);
  b[0] = 0x45;
  b[9] = 6;
  put32(b, 12, src);
  put32(b, 16, dst);
  put16(b, 20, sport);
  put16(b, 22, dport);
  return b;
}

/** An IPv6 packet (next header `next`: TCP with ports, or ICMPv6 58) from the words src to dst. */
function pkt6(src: readonly number[], dst: readonly number[], next: number, sport = 0, dport = 0): Uint8Array {
  const b = new Uint8Array(60);
  b[0] = 0x60;
  b[6] = next;
  src.forEach((w, i) => put32(b, 8 + 4 * i, w));
  dst.forEach((w, i) => put32(b, 24 + 4 * i, w));
  put16(b, 40, sport);
  put16(b, 42, dport);
  return b;
}

/**
 * The attacker's classes (issue 25): each put every source on one queue, for every seed, under
 * the key before it — a multiply-and-shift of the address folded to 32 bits, on the endpoint
 * with the higher port.
 *  - IPv4 sources that differ only above bit 17 (the 2^14 of them), one source port: the low
 *    output bits of a multiplication never see the high input bits.
 *  - IPv6 sources in one /64 whose interface identifiers' two words xor to one value: equal under
 *    a 32-bit xor fold of the address, so equal under any hash of the fold.
 *  - the same as ICMPv6 (no ports: keyed on the address pair).
 *  - random IPv4 sources whose ports are below the service's (1–79 → VIP:80): the higher port is
 *    the VIP's, so every one of them was keyed on (VIP, 80).
 *  - the real servers' answers to them (three servers, port 8080 → those sources): keyed on the
 *    three servers' endpoints, so on at most three queues.
 *  - random IPv4 sources, ports below 40000, to one full-NAT pool address and port 40000: keyed
 *    on (pool address, 40000) the same way.
 */
function aimed(): { name: string; pkts: Uint8Array[] }[] {
  const fold = randomInt(0, 2 ** 32);
  const low = randomInt(0, 2 ** 18);
  const v4: Uint8Array[] = [];
  const v6: Uint8Array[] = [];
  const icmp6: Uint8Array[] = [];
  const lowPorts: Uint8Array[] = [];
  const answers: Uint8Array[] = [];
  const pool: Uint8Array[] = [];
  for (let i = 0; i < SOURCES; i++) {
    v4.push(tcp4(((i << 18) | low) >>> 0, 40000, VIP4, 80));
    const iid = randomInt(0, 2 ** 32);
    const src6 = [0x20010db8, 0x00010002, iid, (iid ^ fold) >>> 0];
    v6.push(pkt6(src6, VIP6, 6, 40000, 80));
    icmp6.push(pkt6(src6, VIP6, 58));
    const src = 0xc6120000 + randomInt(0, 2 ** 17);
    const sport = randomInt(1, 80);
    lowPorts.push(tcp4(src, sport, VIP4, 80));
    answers.push(tcp4(0x0a000001 + (i % 3), 8080, src, sport));
    pool.push(tcp4(0xc6120000 + randomInt(0, 2 ** 17), randomInt(1, 40000), POOL4, 40000));
  }
  return [
    { name: 'IPv4 sources differing only above bit 17', pkts: v4 },
    { name: 'IPv6 sources in one /64 with one 32-bit fold', pkts: v6 },
    { name: 'ICMPv6 from one /64 with one 32-bit fold', pkts: icmp6 },
    { name: 'IPv4 sources with ports below the service port', pkts: lowPorts },
    { name: "three real servers' answers to them", pkts: answers },
    { name: 'IPv4 sources to one full-NAT pool address and port, from lower ports', pkts: pool },
  ];
}

test('sources aimed at one queue without the key spread over every queue as random ones do, for every key', () => {
  for (const { name, pkts } of aimed()) {
    const total = QUEUES.map((n) => new Array<number>(n).fill(0));
    for (let s = 0; s < KEYS; s++) {
      const key = randomKey();
      const count = QUEUES.map((n) => new Array<number>(n).fill(0));
      for (const p of pkts) {
        const v = steeringValue(p, key);
        QUEUES.forEach((n, k) => count[k]![v % n]!++);
      }
      QUEUES.forEach((n, k) => {
        // Six binomial standard deviations of one queue's share over 16384 sources: 2.3 points
        // with 2 queues, 1.1 with 16. A uniform hash leaves it once in 10^9 checks.
        const p = 1 / n;
        const bound = 6 * Math.sqrt((p * (1 - p)) / pkts.length);
        for (let q = 0; q < n; q++) {
          const share = count[k]![q]! / pkts.length;
          assert.ok(
            Math.abs(share - p) <= bound,
            `${name}, ${n} queues, key ${key.k0}:${key.k1}: queue ${q} got ${(share * 100).toFixed(2)} % (1/N = ${(p * 100).toFixed(2)} %, bound ±${(bound * 100).toFixed(2)})`,
          );
          total[k]![q]! += count[k]![q]!;
        }
      });
    }
    // Over all keys (1 M packets): each queue within 3 % of 1/N (7.7 deviations with 16 queues).
    QUEUES.forEach((n, k) => {
      for (let q = 0; q < n; q++) {
        const share = total[k]![q]! / (pkts.length * KEYS);
        assert.ok(Math.abs(share * n - 1) <= 0.03, `${name}, ${n} queues, all keys: queue ${q} got ${(share * 100).toFixed(3)} %`);
      }
    });
  }
});

/**
 * Avalanche: flipping any one bit the key is made of — every address bit, every port bit —
 * flips each of the 16 bits the program returns with probability ½. 4000 samples per input bit:
 * ±0.05 is 6.3 standard deviations.
 */
function avalanche(name: string, base: () => Uint8Array, bits: readonly [number, number][]): void {
  const SAMPLES = 4000;
  const keys = Array.from({ length: 256 }, randomKey);
  for (const [byte, bit] of bits) {
    const flips = new Array<number>(16).fill(0);
    for (let i = 0; i < SAMPLES; i++) {
      const key = keys[i & 255]!;
      const p = base();
      const a = steeringValue(p, key);
      p[byte]! ^= 1 << bit;
      const d = a ^ steeringValue(p, key);
      for (let o = 0; o < 16; o++) flips[o]! += (d >>> o) & 1;
    }
    for (let o = 0; o < 16; o++) {
      const rate = flips[o]! / SAMPLES;
      assert.ok(Math.abs(rate - 0.5) <= 0.05, `${name}: input byte ${byte} bit ${bit} flips output bit ${o} at ${rate.toFixed(3)}`);
    }
  }
}
const range = (from: number, bytes: number): [number, number][] =>
  Array.from({ length: bytes * 8 }, (_, i) => [from + (i >> 3), i & 7] as [number, number]);

test('every address and port bit of the key changes every bit of the value half the time (IPv4 and IPv6 clients, a full-NAT reply)', () => {
  // A client's packet to a VIP: keyed on its source address and port.
  avalanche('IPv4 client', () => tcp4(randomInt(0, 2 ** 32), randomInt(0, 65536), VIP4, 80), [...range(12, 4), ...range(20, 2)]);
  avalanche(
    'IPv6 client',
    () =>
      pkt6(
        [0, 1, 2, 3].map(() => randomInt(0, 2 ** 32)),
        VIP6,
        6,
        randomInt(0, 65536),
        80,
      ),
    [...range(8, 16), ...range(40, 2)],
  );
  // A real server's reply to a full-NAT pool address: keyed on the 4-tuple.
  avalanche('IPv4 full-NAT reply', () => tcp4(randomInt(0, 2 ** 32), randomInt(0, 65536), POOL4, randomInt(0, 65536)), [
    ...range(12, 4),
    ...range(20, 4),
  ]);
});

test('both directions of a masq connection share a queue, whatever the ports: client → VIP and real server → client, IPv4 and IPv6', () => {
  const key = randomKey();
  for (let i = 0; i < 2000; i++) {
    const c = 0xc0a80000 + randomInt(1, 65535);
    // The client's port: ephemeral, or below the service's and the server's (a client bound to
    // port 80, 53 → 53, …): the key is the client's endpoint in both directions all the same.
    const cport = i % 4 ? randomInt(32768, 61000) : randomInt(1, 1024);
    const vport = i % 3 ? 80 : 8000;
    const rport = i % 2 ? 8080 : cport;
    const rs = 0x0a000001 + (i % 3);
    const fwd = steeringValue(tcp4(c, cport, VIP4, vport), key);
    assert.equal(steeringValue(tcp4(rs, rport, c, cport), key), fwd, `${c}:${cport} ↔ ${rport}`);
    const c6 = [0x20010db8, randomInt(0, 2 ** 32), randomInt(0, 2 ** 32), randomInt(0, 2 ** 32)];
    const fwd6 = steeringValue(pkt6(c6, VIP6, 17, cport, vport), key);
    assert.equal(steeringValue(pkt6([0xfd000010, 0, 0, 1 + (i % 3)], c6, 17, rport, cport), key), fwd6);
  }
});

test('a packet that is neither IPv4 nor IPv6 is queue 0', () => {
  const b = tcp4(1, 2, 3, 4);
  b[0] = 0x55;
  assert.equal(steeringValue(b, randomKey()), 0);
});

test("the full-NAT port choice's hash is the program's: steeringPorts on a prefix is the 4-tuple key's value, the prefix left as it was", () => {
  const key = randomKey();
  const prefix = new HalfSipHash();
  for (let i = 0; i < 200; i++) {
    const rs = randomInt(0, 2 ** 32);
    steeringPrefix(prefix, key.k0, key.k1, rs, POOL4, null);
    for (let t = 0; t < 4; t++) {
      const lport = randomInt(1024, 65536);
      const reply = tcp4(rs, 8080, POOL4, lport);
      assert.equal(steeringPorts(prefix, 8080, lport, false), steeringValue(reply, key));
    }
  }
  const hi = new Int32Array(12);
  for (let i = 0; i < 200; i++) {
    const rs = [0xfd000010, randomInt(0, 2 ** 32), randomInt(0, 2 ** 32), randomInt(0, 2 ** 32)];
    const pool = [0xfd000200, 0x00990000, 0, 1];
    hi.set([rs[0]!, rs[1]!, rs[2]!], 6);
    hi.set([pool[0]!, pool[1]!, pool[2]!], 9);
    steeringPrefix(prefix, key.k0, key.k1, rs[3]!, pool[3]!, hi);
    for (let t = 0; t < 4; t++) {
      const lport = randomInt(1024, 65536);
      assert.equal(steeringPorts(prefix, 443, lport, true), steeringValue(pkt6(rs, pool, 6, 443, lport), key));
    }
  }
});
