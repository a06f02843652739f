/**
 * lblcr's destination set (kernel ip_vs_lblcr.c): which member ip_vs_dest_set_min uses, which one
 * ip_vs_dest_set_max drops once the set is older than 24 h, ip_vs_dest_set_insert's check and
 * order, the entry per destination address, the collector. Four servers A, B, C, D added in that
 * order (kernel list D, C, B, A); sets are built by picks, as the kernel builds them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SCHED_LOCK } from '../../conntrack/layout';
import { LBLCR_SET_CAPACITY, lblcrSet } from '../../schedulers/lblcr';
import { input, load, pick, server, service, type ServerSpec } from '../helpers/sched';
import type { SchedModel } from '../../control/sched-model';

const A = '10.0.0.1';
const B = '10.0.0.2';
const C = '10.0.0.3';
const D = '10.0.0.4';
const DAY = 86_400_000;
const MIN = 60_000;
const VIP2 = '10.96.0.20';

const at = (ms: number, vaddr?: string) => input('192.168.1.100', 0, ms, vaddr);
const vip = (vaddr?: string) => at(0, vaddr).vaddr;

function abcd(weights: Partial<Record<string, number>> = {}): SchedModel {
  return service(
    'lblcr',
    [A, B, C, D].map((address): ServerSpec => ({ address, weight: weights[address] ?? 1 })),
  );
}

/** The set for `vaddr` (default the service's address) as server addresses, newest member first. */
function set(m: SchedModel, vaddr?: string): string[] {
  return lblcrSet(m.state, m.base, vip(vaddr)).map((slot) => m.server(slot).key.replace(/:80$/, ''));
}

/** Sets every server's load: [active, inactive] by address, the others idle. */
function loads(m: SchedModel, l: Record<string, [number, number]>): void {
  for (const s of m.servers.values()) load(m, s.key, ...(l[s.key.replace(/:80$/, '')] ?? [0, 0]));
}

/**
 * Builds the set by picks at time t: each server of `joins` in turn is the only idle one while the
 * members so far are overloaded in lblc's sense (ActiveConn > weight), so wlc picks it and it
 * joins. Ends with every server idle; the set is then `joins` reversed.
 */
function grow(m: SchedModel, joins: string[], t: number, vaddr?: string): void {
  const members: string[] = [];
  for (const s of joins) {
    for (const x of m.servers.values()) load(m, x.key, 0, 1000);
    for (const x of members) load(m, x, server(m, x).weight + 1, 1000);
    load(m, s, 0, 0);
    assert.equal(pick(m, at(t, vaddr)), s);
    members.push(s);
  }
  loads(m, {});
  assert.deepEqual(set(m, vaddr), members.reverse());
}

/** Runs the 60-s collector runs `from`..`to` (run k at k minutes). */
function collect(m: SchedModel, from: number, to: number): void {
  for (let k = from; k <= to; k++) m.scheduler.tick!(m.svc, m.state, m.base, m.rs, k * MIN);
}

test('lblcr uses the least loaded member of the set, not the least loaded server of the service', () => {
  const m = abcd();
  grow(m, [B, D], 0); // set [D, B]; D is also the head of the list
  loads(m, { [D]: [0, 3], [B]: [0, 5] }); // A and C idle: wlc would say C
  assert.equal(pick(m, at(1)), D);
  loads(m, { [D]: [0, 5], [B]: [0, 3] });
  assert.equal(pick(m, at(2)), B);
  assert.deepEqual(set(m), [D, B]);
});

test('lblcr: of equally loaded members the newest one is used (strict comparison)', () => {
  const m = abcd();
  grow(m, [B, D], 0);
  loads(m, { [D]: [0, 4], [B]: [0, 4], [A]: [0, 10], [C]: [0, 10] });
  assert.equal(pick(m, at(1)), D);
});

test('lblcr compares members by overhead per weight: loh·w > doh·lw', () => {
  // D weight 2, B weight 4. 8/2 > 12/4: B; 4/2 < 12/4: D.
  const m = abcd({ [D]: 2, [B]: 4 });
  grow(m, [B, D], 0);
  loads(m, { [D]: [0, 8], [B]: [0, 12], [A]: [0, 100], [C]: [0, 100] });
  assert.equal(pick(m, at(1)), B);
  loads(m, { [D]: [0, 4], [B]: [0, 12], [A]: [0, 100], [C]: [0, 100] });
  assert.equal(pick(m, at(2)), D);
});

test('lblcr skips a member with OVERLOAD, a deleted member and a first member of weight 0', () => {
  const over = abcd();
  grow(over, [B, D], 0);
  loads(over, { [B]: [0, 5], [A]: [0, 10], [C]: [0, 10] });
  load(over, D, 0, 0, true);
  assert.equal(pick(over, at(1)), B);

  const deleted = abcd();
  grow(deleted, [B, D], 0);
  loads(deleted, { [B]: [0, 5], [A]: [0, 10], [C]: [0, 10] });
  deleted.del(server(deleted, D));
  assert.equal(pick(deleted, at(1)), B);
  assert.deepEqual(set(deleted), [D, B]); // still a member (the kernel keeps it in the trash)

  const quiesced = abcd();
  grow(quiesced, [B, D], 0);
  quiesced.edit(server(quiesced, D), 0, 0, 0);
  loads(quiesced, { [B]: [0, 5], [C]: [0, 2], [A]: [0, 10] }); // D idle; wlc would say C
  assert.equal(pick(quiesced, at(1)), B);
});

test('lblcr uses its only member when it is the head of the list, and wlc when no member is usable', () => {
  const m = abcd();
  grow(m, [D], 0);
  loads(m, { [D]: [1, 0] }); // 1 active ≤ weight 1: not overloaded; wlc would say C
  assert.equal(pick(m, at(1)), D);
  m.del(server(m, D));
  assert.equal(pick(m, at(2)), C); // no usable member: wlc, and C joins
  assert.deepEqual(set(m), [C, D]);
});

test('lblcr: an overloaded member sends the flow to wlc, whose pick may be the head of the list', () => {
  const m = abcd();
  grow(m, [B], 0);
  loads(m, { [B]: [2, 0], [A]: [0, 9], [C]: [0, 9] }); // B: 2 > 1 while D is idle
  assert.equal(pick(m, at(1)), D);
  assert.deepEqual(set(m), [D, B]);
});

test('lblcr gives no server when no server is available, and leaves the set as it is', () => {
  const m = abcd();
  grow(m, [B], 0);
  for (const s of [A, B, C, D]) m.edit(server(m, s), 0, 0, 0);
  assert.equal(pick(m, at(1)), null);
  assert.deepEqual(set(m), [B]);
});

test('lblcr does not add a member twice, and keeps the set time when wlc picks a member', () => {
  const m = abcd();
  grow(m, [B, D], 0);
  // B, the least loaded member, is overloaded (2 > 1 while A and C have no active connection),
  // and wlc picks B again: a member already.
  loads(m, { [B]: [2, 0], [D]: [3, 0], [A]: [0, 1000], [C]: [0, 1000] });
  assert.equal(pick(m, at(1000)), B);
  assert.deepEqual(set(m), [D, B]);
  // Set last changed at 0, not 1000: a hit just over 24 h after 0 drops the most loaded member.
  loads(m, { [D]: [0, 9], [B]: [0, 5] });
  assert.equal(pick(m, at(DAY + 500)), B);
  assert.deepEqual(set(m), [B]);
});

test('lblcr inserts the newest member first, whichever its real-server slot', () => {
  const m = abcd();
  grow(m, [D, A, C], 0); // A has slot 0
  assert.deepEqual(set(m), [C, A, D]);
});

test(`lblcr's set holds at most ${LBLCR_SET_CAPACITY} members: a server beyond is used but not added`, () => {
  const addrs = Array.from({ length: LBLCR_SET_CAPACITY + 2 }, (_, i) => `10.0.1.${i + 1}`);
  const m = service(
    'lblcr',
    addrs.map((address) => ({ address })),
  );
  grow(m, addrs.slice(0, LBLCR_SET_CAPACITY), 0);
  const full = set(m);
  for (const x of m.servers.values()) load(m, x.key, 0, 1000);
  for (const x of full) load(m, x, 2, 1000);
  const extra = addrs[LBLCR_SET_CAPACITY]!;
  load(m, extra, 0, 0);
  assert.equal(pick(m, at(1)), extra);
  assert.deepEqual(set(m), full);
});

test('lblcr drops the most loaded member, the first one of equals, once the set is older than 24 h', () => {
  // The set [D, B] last changed at 0; the hit at 24 h + 1 ms drops a member, then uses the least loaded.
  // A and C, not members, are busier than both: they play no part.
  const cases: { l: Record<string, [number, number]>; w?: Record<string, number>; use: string; left: string[] }[] = [
    { l: { [D]: [0, 9], [B]: [0, 5] }, use: B, left: [B] },
    { l: { [D]: [0, 5], [B]: [0, 9] }, use: D, left: [D] },
    { l: { [D]: [0, 7], [B]: [0, 7] }, use: D, left: [B] },
    // Per weight: D 8/2 > B 12/4: D dropped; D 4/2 < B 12/4: B dropped.
    { l: { [D]: [0, 8], [B]: [0, 12] }, w: { [D]: 2, [B]: 4 }, use: B, left: [B] },
    { l: { [D]: [0, 4], [B]: [0, 12] }, w: { [D]: 2, [B]: 4 }, use: D, left: [D] },
  ];
  for (const c of cases) {
    const m = abcd(c.w);
    grow(m, [B, D], 0);
    loads(m, { ...c.l, [A]: [0, 20], [C]: [0, 20] });
    assert.equal(pick(m, at(DAY + 1)), c.use, JSON.stringify(c));
    assert.deepEqual(set(m), c.left, JSON.stringify(c));
  }
});

test('lblcr never drops a member of weight 0, but drops a deleted member by its last weight', () => {
  const last = abcd();
  grow(last, [B, D], 0);
  last.edit(server(last, B), 0, 0, 0);
  loads(last, { [D]: [0, 5], [B]: [0, 9], [A]: [0, 20], [C]: [0, 20] });
  assert.equal(pick(last, at(DAY + 1)), D);
  assert.deepEqual(set(last), [B]); // B (weight 0) is not "most loaded": D is dropped, and used

  const first = abcd();
  grow(first, [B, D], 0);
  first.edit(server(first, D), 0, 0, 0);
  loads(first, { [D]: [0, 9], [B]: [0, 5], [A]: [0, 20], [C]: [0, 20] });
  assert.equal(pick(first, at(DAY + 1)), B);
  assert.deepEqual(set(first), [D]);

  const none = abcd();
  grow(none, [B, D], 0);
  none.edit(server(none, B), 0, 0, 0);
  none.edit(server(none, D), 0, 0, 0);
  loads(none, { [C]: [0, 20], [A]: [0, 30] });
  assert.equal(pick(none, at(DAY + 1)), C); // no member with weight > 0: none dropped, none usable
  assert.deepEqual(set(none), [C, D, B]);

  const deleted = abcd({ [A]: 0 }); // A's weight differs from B's: B's own is read
  grow(deleted, [B, D], 0);
  deleted.del(server(deleted, B)); // in the trash with weight 1
  loads(deleted, { [D]: [0, 5], [B]: [0, 9], [A]: [0, 20], [C]: [0, 20] });
  assert.equal(pick(deleted, at(DAY + 1)), D);
  assert.deepEqual(set(deleted), [D]);
});

test('lblcr keeps a single-member set however old, and a drop is a set change', () => {
  const one = abcd();
  grow(one, [D], 0);
  assert.equal(pick(one, at(2 * DAY)), D);
  assert.deepEqual(set(one), [D]);

  const m = abcd();
  grow(m, [B, C, D], 0); // [D, C, B]
  loads(m, { [D]: [0, 5], [C]: [0, 9], [B]: [0, 7], [A]: [0, 20] });
  assert.equal(pick(m, at(DAY + 1)), D);
  assert.deepEqual(set(m), [D, B]); // the middle member dropped
  assert.equal(pick(m, at(DAY + 2)), D);
  assert.deepEqual(set(m), [D, B]); // changed 1 ms ago: nothing dropped
});

test('lblcr drops the first of five members and keeps the other four in order', () => {
  const E = '10.0.0.5';
  const m = service(
    'lblcr',
    [A, B, C, D, E].map((address) => ({ address })),
  );
  grow(m, [A, B, C, D, E], 0);
  loads(m, { [E]: [0, 9], [D]: [0, 5], [C]: [0, 6], [B]: [0, 7], [A]: [0, 8] });
  assert.equal(pick(m, at(DAY + 1)), D);
  assert.deepEqual(set(m), [D, C, B, A]);
});

test('lblcr keeps one set per destination address: another address gets its own wlc pick', () => {
  const m = abcd();
  grow(m, [B, D], 0);
  assert.deepEqual(set(m, VIP2), []);
  loads(m, { [D]: [0, 5], [B]: [0, 7], [A]: [0, 9] }); // the set says D, wlc says C
  assert.equal(pick(m, at(1, VIP2)), C);
  assert.deepEqual(set(m, VIP2), [C]);
});

test('the lblcr collector drops an entry only at a 30th run at least 24 h after its last use', () => {
  const m = abcd();
  m.state[SCHED_LOCK] = 0x51ed; // the slot's lock word: never a scheduler's to write
  loads(m, { [C]: [0, 1], [B]: [0, 1], [A]: [0, 1] });
  assert.equal(pick(m, at(10 * MIN)), D); // created at 10 min
  collect(m, 1, 1450); // full checks at runs 1410 and 1440 (age 23 h 50); run 1450 (24 h) is not one
  assert.deepEqual(set(m), [D]);
  collect(m, 1451, 1470); // full check at 24 h 20 min after the last use
  assert.deepEqual(set(m), []);
  assert.equal(pick(m, at(1475 * MIN)), D); // a new entry, used now
  assert.deepEqual(set(m), [D]);
  collect(m, 1471, 1500); // full check 25 min later: kept
  assert.deepEqual(set(m), [D]);
  assert.equal(m.state[SCHED_LOCK], 0x51ed);
});

test('an lblcr hit renews the entry: used at 12 h, it outlives the full check at 24 h', () => {
  const m = abcd();
  assert.equal(pick(m, at(0)), D);
  assert.equal(pick(m, at(DAY / 2)), D);
  collect(m, 1, 1440);
  assert.deepEqual(set(m), [D]);
});
