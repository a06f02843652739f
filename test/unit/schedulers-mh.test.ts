/**
 * mh: the Maglev table as the kernel builds it (§11 vectors), its promises (balance, minimal
 * disruption), last_weight, the weight shift and the table sizes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fold, parseInet } from '../../net/addr';
import { MH_PRIMES, mhHash1, mhSlots } from '../../schedulers/mh';
import { input, load, pick, server, service } from '../helpers/sched';
import type { SchedModel } from '../../control/sched-model';

const ABC = [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }];

/** Slot count per server address. */
function counts(m: SchedModel): Map<string, number> {
  const list = m.listed();
  const c = new Map<string, number>();
  for (const p of mhSlots(m.svc.data!)) {
    const k = p < 0 ? 'empty' : list[p]!.key.replace(/:80$/, '');
    c.set(k, (c.get(k) ?? 0) + 1);
  }
  return c;
}

function owners(m: SchedModel): (string | null)[] {
  const list = m.listed();
  return Array.from(mhSlots(m.svc.data!), (p) => (p < 0 ? null : list[p]!.key));
}

test('three equal servers added A, B, C share 4093 slots 1365/1364/1364, the first in list order (C) getting the extra one', () => {
  const m = service('mh', ABC);
  assert.deepEqual(
    m.listed().map((s) => s.key),
    ['10.0.0.3:80', '10.0.0.2:80', '10.0.0.1:80'],
  );
  const c = counts(m);
  assert.equal(c.get('10.0.0.3'), 1365);
  assert.equal(c.get('10.0.0.2'), 1364);
  assert.equal(c.get('10.0.0.1'), 1364);
});

test('clients map to the reference slots: 192.168.1.100 → B, .101 → C, 172.16.0.5 → C, with mh-port :40000 → C', () => {
  const m = service('mh', ABC);
  assert.equal(pick(m, input('192.168.1.100')), '10.0.0.2');
  assert.equal(pick(m, input('192.168.1.101')), '10.0.0.3');
  assert.equal(pick(m, input('172.16.0.5')), '10.0.0.3');
  const p = service('mh', ABC, 2);
  assert.equal(pick(p, input('192.168.1.100', 40000)), '10.0.0.3');
  // without mh-port the source port is ignored
  assert.equal(pick(m, input('192.168.1.100', 40000)), '10.0.0.2');
});

test('weight 0 leaves the table unchanged and returns none without mh-fallback, the re-hashed server with it', () => {
  const m = service('mh', ABC);
  const before = owners(m);
  m.edit(server(m, '10.0.0.2'), 0, 0, 0);
  assert.deepEqual(owners(m), before);
  assert.equal(pick(m, input('192.168.1.100')), null);
  const f = service('mh', ABC, 1);
  f.edit(server(f, '10.0.0.2'), 0, 0, 0);
  assert.equal(pick(f, input('192.168.1.100')), '10.0.0.1'); // first probe roffset 1341 → slot 2215 → A
});

test('OVERLOAD makes a slot unavailable like weight 0', () => {
  const m = service('mh', ABC);
  load(m, '10.0.0.2', 0, 0, true);
  assert.equal(pick(m, input('192.168.1.100')), null);
});

test('weights C=3, B=2, A=1 give 2047/1364/682 slots', () => {
  const m = service('mh', [
    { address: '10.0.0.1', weight: 1 },
    { address: '10.0.0.2', weight: 2 },
    { address: '10.0.0.3', weight: 3 },
  ]);
  const c = counts(m);
  assert.deepEqual([c.get('10.0.0.3'), c.get('10.0.0.2'), c.get('10.0.0.1')], [2047, 1364, 682]);
});

test('deleting B rebuilds the table moving only 4 of the slots C and A owned', () => {
  const m = service('mh', ABC);
  const before = owners(m);
  m.del(server(m, '10.0.0.2'));
  const after = owners(m);
  let moved = 0;
  before.forEach((k, i) => {
    if (k !== '10.0.0.2:80' && after[i] !== k) moved++;
  });
  assert.equal(moved, 4);
  assert.ok(after.every((k) => k === '10.0.0.1:80' || k === '10.0.0.3:80'));
});

test('with equal weights slot counts differ by at most one, for every table size', () => {
  for (const M of MH_PRIMES) {
    const servers = Array.from({ length: 7 }, (_, i) => ({ address: `10.1.0.${i + 1}` }));
    const c = [...counts(service('mh', servers, 0, M)).values()];
    assert.equal(
      c.reduce((a, b) => a + b, 0),
      M,
    );
    assert.ok(Math.max(...c) - Math.min(...c) <= 1, `M=${M}: ${c.join(',')}`);
  }
});

test('removing one of N servers moves about 1/N of the slots: its own, plus a few percent of the rest', () => {
  for (const n of [5, 10, 20]) {
    const servers = Array.from({ length: n }, (_, i) => ({ address: `10.2.0.${i + 1}` }));
    const m = service('mh', servers, 0, 65521);
    const before = owners(m);
    m.del(server(m, '10.2.0.3'));
    const after = owners(m);
    const moved = before.filter((k, i) => after[i] !== k).length / before.length;
    // Its own share must move; Maglev moves a small extra fraction of other slots (NSDI'16 §5.3).
    assert.ok(moved >= 1 / n - 0.001, `N=${n}: moved ${moved}`);
    assert.ok(moved < (1 / n) * 1.35, `N=${n}: moved ${moved}`);
  }
});

test('the table depends on list order: the same servers added in reverse order differ in a few slots', () => {
  const a = owners(service('mh', ABC));
  const b = owners(service('mh', [...ABC].reverse()));
  const diff = a.filter((k, i) => b[i] !== k).length;
  assert.ok(diff > 0 && diff < 50, `${diff} slots differ`);
});

test('large weights are shifted down by fls(max/gcd) − (index of the prime + 8)/2 bits', () => {
  // M = 251 (index 0): 4 bits. Weights 1000 and 1: fls(1000) = 10 → shift 6 → turns 15 and 1.
  // Rounds of 16 slots: 15 full rounds = 240, then the first server (the 1000, added last) takes 11.
  const m = service(
    'mh',
    [
      { address: '10.0.0.1', weight: 1 },
      { address: '10.0.0.2', weight: 1000 },
    ],
    0,
    251,
  );
  const c = counts(m);
  assert.equal(c.get('10.0.0.2'), 15 * 15 + 11);
  assert.equal(c.get('10.0.0.1'), 15);
  // M = 131071 (index 9): 8 bits, so 1000 is shifted by 2 → 250 turns against 1.
  const big = counts(
    service(
      'mh',
      [
        { address: '10.0.0.1', weight: 1 },
        { address: '10.0.0.2', weight: 1000 },
      ],
      0,
      131071,
    ),
  );
  assert.equal(big.get('10.0.0.1'), Math.floor(131071 / 251));
});

test('the table is built from last_weight: weight 0 keeps the weight-2 table, weight 5 rebuilds with 5', () => {
  // List .2 (w1), .1 (w2): rounds of 3 slots, 1364 rounds + 1 slot for the first in list.
  const m = service('mh', [
    { address: '10.0.0.1', weight: 2 },
    { address: '10.0.0.2', weight: 1 },
  ]);
  const s = server(m, '10.0.0.1');
  assert.equal(counts(m).get('10.0.0.1'), 2 * 1364);
  const before = owners(m);
  m.edit(s, 0, 0, 0);
  assert.equal(s.lastWeight, 2);
  assert.deepEqual(owners(m), before);
  m.edit(s, 5, 0, 0);
  assert.equal(s.lastWeight, 5);
  // rounds of 6: 682 rounds = 4092 slots, the 4093rd to the first in list (.2)
  assert.equal(counts(m).get('10.0.0.1'), 5 * 682);
});

test('a server added with weight 0 owns no slot; all last weights 0 leave every slot empty', () => {
  const m = service('mh', [{ address: '10.0.0.1', weight: 0 }]);
  assert.equal(counts(m).get('empty'), 4093);
  assert.equal(pick(m), null);
  m.add(parseInet('10.0.0.2')!, 80, 1);
  assert.deepEqual([...counts(m).keys()], ['10.0.0.2']);
});

test('more servers than slots: the previous table is kept, as the kernel refuses the rebuild', () => {
  const servers = Array.from({ length: 251 }, (_, i) => ({ address: `10.3.${i >> 8}.${i & 255}` }));
  const m = service('mh', servers, 0, 251);
  const before = owners(m);
  m.add(parseInet('10.4.0.1')!, 80, 1);
  assert.deepEqual(owners(m), before);
  assert.equal(m.listed().length, 252);
});

test('a server deleted while the table is kept owns no slot any more (uvs returns none where the kernel would use the trashed dest)', () => {
  const servers = Array.from({ length: 251 }, (_, i) => ({ address: `10.3.${i >> 8}.${i & 255}` }));
  const m = service('mh', servers, 0, 251);
  const before = owners(m);
  m.add(parseInet('10.4.0.1')!, 80, 1);
  m.add(parseInet('10.4.0.2')!, 80, 1); // 253 servers: the 251-server table is kept
  const gone = '10.3.0.7:80';
  m.del(server(m, gone)); // 252, still more than 251: kept, without the deleted server
  const after = owners(m);
  assert.equal(after.length, 251);
  assert.ok(before.includes(gone));
  before.forEach((k, i) => assert.equal(after[i], k === gone ? null : k, `slot ${i}`));
  // every other server is still found at its (new) list position
  assert.equal(counts(m).get('empty'), before.filter((k) => k === gone).length);
  m.add(parseInet('10.4.0.3')!, 80, 1); // kept again: the emptied slots stay empty
  assert.deepEqual(owners(m), after);
});

test('mh-fallback stops at an empty slot of a kept table: none, as at a slot the kernel never filled', () => {
  // 251 slots; X (weight 1000) and Y (500) added last take 15 and 7 slots (shift 6), 229 others one each.
  const servers = Array.from({ length: 251 }, (_, i) => ({ address: `10.3.${i >> 8}.${i & 255}` }));
  const m = service('mh', servers, 1, 251);
  m.add(parseInet('10.5.0.1')!, 80, 1000);
  m.add(parseInet('10.5.0.2')!, 80, 500);
  // 253 servers: the 251-server table is kept; two old ones deleted (251): rebuilt with X and Y.
  m.del(server(m, '10.3.0.0'));
  m.del(server(m, '10.3.0.1'));
  m.add(parseInet('10.4.0.1')!, 80, 1);
  const c = counts(m);
  assert.deepEqual([c.get('10.5.0.1'), c.get('10.5.0.2')], [15, 7]);
  m.add(parseInet('10.4.0.2')!, 80, 1); // 253
  m.del(server(m, '10.5.0.1')); // 252, kept: X's 15 slots emptied
  m.edit(server(m, '10.5.0.2'), 0, 0, 0); // Y quiesced: its clients fall back
  const table = owners(m);
  const y = table.flatMap((k, i) => (k === '10.5.0.2:80' ? [i] : []));
  assert.equal(y.length, 7);
  // A client whose slot is Y's and whose first fallback probe (roffset = its slot) is an empty slot.
  let found = 0;
  for (let n = 1; n < 200_000 && found < 3; n++) {
    const caddr = fold(parseInet(`172.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`)!);
    const ihash = mhHash1(caddr, 0, 0) % 251;
    if (table[ihash] !== '10.5.0.2:80' || table[mhHash1(caddr, 0, ihash) % 251] !== null) continue;
    found++;
    assert.equal(m.schedule(input(`172.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`)), null);
  }
  assert.equal(found, 3);
});

test('an mh table size that is not one of the kernel primes is refused', () => {
  assert.throws(() => service('mh', ABC, 0, 4096), /^Error: mh table size 4096 is not one of 251, 509, 1021, .*, 131071$/);
});
