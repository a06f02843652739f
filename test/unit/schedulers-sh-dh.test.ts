/** sh and dh: the 256-bucket tables, hash_32 lookups, sh-port and sh-fallback. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dhBucket } from '../../schedulers/dh';
import { shBucket } from '../../schedulers/sh';
import { fold, parseInet } from '../../net/addr';
import { input, pick, server, service, VIP } from '../helpers/sched';
import type { SchedModel } from '../../control/sched-model';

const ABC = [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }];

function bucketOwners(m: SchedModel): string[] {
  const list = m.listed();
  return Array.from(m.svc.data!, (p) => (p < 0 ? '-' : list[p]!.key.replace(/:80$/, '')));
}

/** A client address whose sh bucket is `b` (port 0). */
function clientInBucket(b: number): string {
  for (let i = 1; ; i++) {
    const a = `10.9.${i >> 8}.${i & 255}`;
    if (shBucket(fold(parseInet(a)!), 0, 0) === b) return a;
  }
}

test('sh buckets: each server takes weight consecutive buckets, a weight-0 server still one (C=3, B=1, A=0 → C C C B A C C C)', () => {
  const m = service('sh', [
    { address: '10.0.0.1', weight: 0 },
    { address: '10.0.0.2', weight: 1 },
    { address: '10.0.0.3', weight: 3 },
  ]);
  const C = '10.0.0.3',
    B = '10.0.0.2',
    A = '10.0.0.1';
  assert.deepEqual(bucketOwners(m).slice(0, 8), [C, C, C, B, A, C, C, C]);
  assert.equal(pick(m, input(clientInBucket(4))), null); // bucket of A (weight 0): none
  assert.equal(pick(m, input(clientInBucket(3))), B);
});

test('sh hashes the client with hash_32: 192.168.1.100 → bucket 89, with sh-port and source port 80 → 232', () => {
  assert.equal(shBucket(fold(parseInet('192.168.1.100')!), 0, 0), 89);
  assert.equal(shBucket(fold(parseInet('192.168.1.100')!), 80, 0), 232);
  // list C, B, A with weight 1: bucket b belongs to list index b % 3
  const m = service('sh', ABC);
  assert.equal(pick(m, input('192.168.1.100', 80)), '10.0.0.1'); // 89 % 3 = 2 → A; the port is ignored
  const p = service('sh', ABC, 2);
  assert.equal(pick(p, input('192.168.1.100', 80)), '10.0.0.2'); // 232 % 3 = 1 → B
  assert.equal(pick(p, input('192.168.1.100', 0)), '10.0.0.1');
});

test('sh-fallback re-hashes a client of an unavailable server from offset ihash onwards', () => {
  const m = service('sh', ABC, 1);
  const client = '192.168.1.100'; // bucket 89 → A
  m.edit(server(m, '10.0.0.1'), 0, 0, 0);
  // first probe: roffset 89 → bucket (89 + 89) & 255 = 178 → 178 % 3 = 1 → B
  assert.equal(pick(m, input(client)), '10.0.0.2');
  const plain = service('sh', ABC);
  plain.edit(server(plain, '10.0.0.1'), 0, 0, 0);
  assert.equal(pick(plain, input(client)), null);
});

test('sh with a weight covering every bucket gives the whole table to the first server in list order', () => {
  const m = service('sh', [
    { address: '10.0.0.1', weight: 1 },
    { address: '10.0.0.2', weight: 300 },
  ]);
  assert.ok(bucketOwners(m).every((k) => k === '10.0.0.2'));
});

test('dh hashes the destination (the virtual address): every client of the service gets the same server', () => {
  assert.equal(dhBucket(fold(parseInet(VIP)!)), 242);
  const m = service('dh', [
    { address: '10.0.0.1', weight: 1 },
    { address: '10.0.0.2', weight: 50 },
    { address: '10.0.0.3', weight: 1 },
  ]);
  // one bucket per server whatever the weights: bucket 242 → list index 242 % 3 = 2 → 10.0.0.1
  const chosen = new Set(['1.2.3.4', '192.168.1.100', '172.16.0.5'].map((c) => pick(m, input(c))));
  assert.deepEqual([...chosen], ['10.0.0.1']);
  m.edit(server(m, '10.0.0.1'), 0, 0, 0);
  assert.equal(pick(m, input('1.2.3.4')), null);
});
