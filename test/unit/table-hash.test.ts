/**
 * Hash flooding: the connection table's bucket hash is HalfSipHash-1-3 under a per-table random
 * key over every bit of the key (both IPv6 addresses in full, both ports, the protocol), and its
 * chains are capped. The spread tests are statistical with bounds far in the tails (each fails
 * by chance with a probability below 1e-5), so they are not flaky.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { CHAIN_ALARM, CHAIN_LIMIT, ConnTable, createRealServerRegion } from '../../conntrack/table';
import { TCP_DEFAULT_TIMEOUTS, TCPF_SYN } from '../../conntrack/state';
import { HalfSipHash } from '../../net/siphash';
import { DROP, FORWARD } from '../../lb/verdict';
import { parseIPv4 } from '../../net/addr';
import { tcp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';
import { newFlow } from '../../conntrack/flow';

const timeouts = { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300 };
const fresh = (capacity: number) => new ConnTable(ConnTable.create(capacity, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);

// lib/siphash_kunit.c, BITS_PER_LONG != 64: hsiphash (HalfSipHash-1-3) of bytes 00 01 … n−1
// under the key 03020100 07060504, for n = 0..63.
const KERNEL_HSIPHASH32 = [
  0x5814c896, 0xe7e864ca, 0xbc4b0e30, 0x01539939, 0x7e059ea6, 0x88e3d89b, 0xa0080b65, 0x9d38d9d6, 0x577999b1, 0xc839caed, 0xe4fa32cf,
  0x959246ee, 0x6b28096c, 0x66dd9cd6, 0x16658a7c, 0xd0257b04, 0x8b31d501, 0x2b1cd04b, 0x06712339, 0x522aca67, 0x911bb605, 0x90a65f0e,
  0xf826ef7b, 0x62512deb, 0x57150ad7, 0x5d473507, 0x1ec47442, 0xab64afd3, 0x0a4100d0, 0x6d2ce652, 0x2331b6a3, 0x08d8791a, 0xbc6dda8d,
  0xe0f6c934, 0xb0652033, 0x9b9851cc, 0x7c46fb7f, 0x732ba8cb, 0xf142997a, 0xfcc9aa1b, 0x05327eb2, 0xe110131c, 0xf9e5e7c0, 0xa7d708a6,
  0x11795ab1, 0x65671619, 0x9f5fff91, 0xd89c5267, 0x007783eb, 0x95766243, 0xab639262, 0x9c7e1390, 0xc368dda6, 0x38ddc455, 0xfa13d379,
  0x979ea4e8, 0x53ecd77e, 0x2ee80657, 0x33dbb66a, 0xae3f0577, 0x88b4c4cc, 0x3e7f480b, 0x74c1ebf8, 0x87178304,
];

test('HalfSipHash-1-3 matches all 64 self-test vectors of the kernel hsiphash on 32-bit machines', () => {
  const h = new HalfSipHash();
  for (let n = 0; n < 64; n++) {
    h.begin(0x03020100, 0x07060504);
    let i = 0;
    for (; i + 4 <= n; i += 4) h.word(i | ((i + 1) << 8) | ((i + 2) << 16) | ((i + 3) << 24));
    let b = n << 24;
    for (let j = 0; i + j < n; j++) b |= (i + j) << (8 * j);
    assert.equal(h.end(b), KERNEL_HSIPHASH32[n], `length ${n}`);
  }
});

/** Largest bucket and number of empty buckets of n keys. */
function spread(n: number, buckets: number, bucketOf: (i: number) => number): { max: number; empty: number } {
  const load = new Int32Array(buckets);
  for (let i = 0; i < n; i++) load[bucketOf(i)]!++;
  let max = 0;
  let empty = 0;
  for (const x of load) {
    if (x > max) max = x;
    if (x === 0) empty++;
  }
  return { max, empty };
}

/**
 * n = buckets = 65536 uniformly hashed keys: the load of a bucket is ~Poisson(1). Empty buckets:
 * mean n/e = 24109, standard deviation ~125 — ±1000 is 8 σ. Largest bucket ≥ 13: probability
 * ~65536 · e⁻¹ / 13! ≈ 4e-6.
 */
function assertUniform(s: { max: number; empty: number }, what: string): void {
  assert.ok(s.max <= 12, `${what}: longest chain ${s.max}`);
  assert.ok(Math.abs(s.empty - 65536 / Math.E) < 1000, `${what}: ${s.empty} empty buckets, ~24109 expected`);
}

test('65 536 IPv6 clients of one /64 that the old fold sent to one chain spread evenly over the buckets', () => {
  const t = fresh(65536);
  const hi = new Int32Array(L.HI_WORDS);
  // Client fd00:1:2:3:<x>:<y>; VIP fd00:96::10 port 80. The old hash folded the high words into
  // the low one (hi[2] rotated by 22): choosing y = rotl(x, 22) ^ c gave every key the same fold.
  hi.set([0xfd000001 | 0, 0x00020003, 0, 0xfd000096 | 0, 0, 0]);
  const vlo = 0x10;
  const cports = (40000 << 16) | 80;
  let seed = 12345;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) | 0);
  const s = spread(65536, 65536, () => {
    const x = next();
    hi[2] = x;
    const y = ((x << 22) | (x >>> 10)) ^ 0x5a5a5a5a;
    return t.bucketIn(6 | L.PROTO_V6, y, cports, vlo, hi);
  });
  assertUniform(s, 'IPv6 /64');
});

test('one client address with 65 536 source ports spreads evenly, and so do destination ports', () => {
  const t = fresh(65536);
  const c = parseIPv4('192.168.1.100')!;
  const v = parseIPv4('10.96.0.10')!;
  assertUniform(
    spread(65536, 65536, (i) => t.bucket(6, c, (i << 16) | 80, v)),
    'source ports',
  );
  assertUniform(
    spread(65536, 65536, (i) => t.bucket(6, c, (40000 << 16) | i, v)),
    'destination ports',
  );
  // IPv4 clients of one /16 with one port: the address words alone.
  assertUniform(
    spread(65536, 65536, (i) => t.bucket(17, (c & 0xffff0000) | i, (40000 << 16) | 53, v)),
    'IPv4 /16',
  );
});

test('each table has its own key, kept in its header: the same keys land elsewhere in another table, alike in every view of one', () => {
  const a = ConnTable.create(65536, timeouts);
  const t1 = new ConnTable(a, createRealServerRegion(8), 1);
  const t1b = new ConnTable(a, createRealServerRegion(8), 2); // another thread's view of the same table
  const t2 = fresh(65536);
  let same = 0;
  for (let i = 0; i < 1000; i++) {
    const k = [6, 0x0a000000 + i, (40000 << 16) | 80, 0x0a600001] as const;
    assert.equal(t1.bucket(...k), t1b.bucket(...k));
    if (t1.bucket(...k) === t2.bucket(...k)) same++;
  }
  // Independent keys agree by chance 1 time in 65536: ~0.015 of 1000.
  assert.ok(same < 5, `${same} of 1000 keys in the same bucket in two tables`);
  const h1 = new Int32Array(a);
  assert.ok(h1[L.H_SALT] !== 0 || h1[L.H_HASH_K1] !== 0, 'a key is set');
});

/** Keys (client address varying) that share the in-bucket of the first one. */
function colliding(t: ConnTable, n: number, v: number, cports: number): number[] {
  const target = t.bucket(6, 0x0b000000, cports, v);
  const out: number[] = [];
  for (let c = 0x0b000000; out.length < n; c++) if (t.bucket(6, c, cports, v) === target) out.push(c);
  return out;
}

test('an insert into a chain already CHAIN_LIMIT long is refused (−3) and long walks are counted', () => {
  const t = fresh(256);
  const v = 0x0a600001;
  const cports = (40000 << 16) | 80;
  const keys = colliding(t, CHAIN_LIMIT + 1, v, cports);
  for (let i = 0; i < CHAIN_LIMIT; i++) {
    // Out-keys spread by their own (random) address, so only the in-chain is long.
    assert.ok(
      t.insert(
        newFlow({
          proto: 6,
          caddr: keys[i]!,
          cports,
          vaddr: v,
          daddr: 0x0a0b0000 + i * 7919,
          dports: (8080 << 16) | 40000,
          laddr: keys[i]!,
          rs: 1,
          now: t.now(),
        }),
      ) >= 0,
      `insert ${i}`,
    );
  }
  assert.equal(
    t.insert(
      newFlow({
        proto: 6,
        caddr: keys[CHAIN_LIMIT]!,
        cports,
        vaddr: v,
        daddr: 0x0a0c0001,
        dports: (8080 << 16) | 40000,
        laddr: keys[CHAIN_LIMIT]!,
        rs: 1,
        now: t.now(),
      }),
    ),
    -3,
  );
  assert.equal(t.count(), CHAIN_LIMIT);
  assert.ok(t.longestWalk() >= CHAIN_LIMIT, `peak ${t.longestWalk()}`);
  assert.ok(t.longWalks() > 0 && CHAIN_ALARM < CHAIN_LIMIT);
  // Every entry of the long chain is still found.
  const b = t.bucket(6, keys[0]!, cports, v);
  t.lockBucket(b);
  for (let i = 0; i < CHAIN_LIMIT; i++) assert.ok(t.findIn(b, 6, keys[i]!, cports, v) >= 0);
  t.unlockBucket(b);
});

test('the processor refuses a new flow into a full chain as chain_full and forwards the rest', () => {
  const { run, table, drops } = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'] },
      services: [{ protocol: 'tcp', address: '10.96.0.10', port: 80, scheduler: 'rr', realServers: [{ address: '10.0.0.1', port: 8080 }] }],
    },
    { capacity: 256 },
  );
  const v = parseIPv4('10.96.0.10')!;
  const cports = (40000 << 16) | 80;
  const keys = colliding(table, CHAIN_LIMIT + 1, v, cports);
  const ip = (a: number) => `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`;
  const verdicts = keys.map((c) => run(tcp({ src: ip(c), dst: '10.96.0.10', sport: 40000, dport: 80, flags: TCPF_SYN })).v);
  assert.deepEqual(verdicts.slice(0, CHAIN_LIMIT), new Array(CHAIN_LIMIT).fill(FORWARD));
  assert.equal(verdicts[CHAIN_LIMIT], DROP);
  assert.equal(drops('chain_full'), 1);
  assert.equal(drops('table_full'), 0);
});
