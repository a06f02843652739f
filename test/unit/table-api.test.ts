/**
 * The connection table's smaller promises, one by one (conntrack/table.ts): what create() accepts,
 * when touch() asks for a Redis write, the chain-walk counters, the locks a dead owner leaves,
 * what remove() refuses, persistence templates (reserve, control, re-arm, invalidation,
 * ASSURED), the OVERLOAD rules, shadow refreshes, full-NAT out-keys, the PROXY protocol words,
 * IPv6 keys and the control thread's accessors. Written against the surviving mutants of
 * test/mutation/table-survivors.md: each asserts what a caller sees.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import {
  CHAIN_ALARM,
  CHAIN_LIMIT,
  ConnTable,
  createRealServerRegion,
  entryAddr,
  FLOW_HIT,
  FLOW_MISS,
  FLOW_REUSE,
  LOCK_STUCK_MS,
  LOOKUP_NEW,
  SPH_HELD,
  SPH_REFUSED,
  SPH_RESEND,
} from '../../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCP_CLOSE, TCP_ESTABLISHED, TCP_TIME_WAIT, TCPF_ACK, TCPF_FIN, TCPF_SYN } from '../../conntrack/state';
import { SCTP_S_CLOSED, SCTP_S_ESTABLISHED } from '../../conntrack/sctp-state';
import { FlowView, newFlow } from '../../conntrack/flow';
import { parseIPv6 } from '../../net/addr';
import { Worker } from 'node:worker_threads';
import { findIn, findOut, FLOW, freshTable, key, TABLE_TIMEOUTS } from '../helpers/table';

const timeouts = TABLE_TIMEOUTS;

const fresh = (capacity = 1024) => freshTable(capacity, true);

const { C, V, D, P, CP, DP } = FLOW;

/** A connection C→V (or another client, laddr = the client) to D, the ports CP/DP, real server rs. */
const conn = (proto: number, caddr: number, rs: number, now: number) =>
  newFlow({ proto, caddr, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: caddr, rs, now });
/** A persistence template (no local address) of a client to V/D. */
const template = (o: { proto: number; caddr: number; cports: number; dports: number; rs: number; ms: number; now: number }) =>
  newFlow({
    proto: o.proto,
    caddr: o.caddr,
    cports: o.cports,
    vaddr: V,
    daddr: D,
    dports: o.dports,
    laddr: 0,
    rs: o.rs,
    flags: L.F_TEMPLATE,
    templateMs: o.ms,
    now: o.now,
  });

function findTemplate(t: ConnTable, proto: number, c: number, vport: number, v: number): number {
  const b = t.bucket(proto, c, vport, v);
  t.lockBucket(b);
  const e = t.findTemplate(b, proto, c, vport, v);
  t.unlockBucket(b);
  return e;
}

test('create() takes only a power of two ≥ 16; a buffer that is no table is refused', () => {
  for (const c of [0, 8, 15, 17, 24, 1000, 16.5, -16]) assert.throws(() => ConnTable.create(c, timeouts), RangeError, `capacity ${c}`);
  const t = new ConnTable(ConnTable.create(16, timeouts), createRealServerRegion(1), L.OWNER_CONTROL);
  assert.deepEqual([t.capacity, t.mask, t.count(), t.shadows()], [16, 15, 0, 0]);
  assert.throws(() => new ConnTable(new SharedArrayBuffer(L.tableBytes(16)), createRealServerRegion(1), 1), /not a uvs connection table/);
});

test('a new table: every entry free, the SYN proxy off with its default options, no cookie sent, the whole hold area free', () => {
  const { t } = fresh(16);
  const a = t.i32;
  let free = 0;
  for (let ref = a[L.H_FREE_HEAD]!; ref !== 0 && free <= 16; ref = a[t.base(ref - 1) + L.E_NEXT_IN]!) free++;
  assert.equal(free, 16, 'the free list holds every entry once');
  assert.equal(t.synProxyOn(), false);
  assert.deepEqual([a[L.H_SP_MSS4], a[L.H_SP_MSS6], a[L.H_SP_WSCALE]], [1460, 1440, 7]);
  assert.ok(((t.now() - a[L.H_SP_LAST]!) | 0) > 120_000, 'the last cookie is long ago: ACKs are not checked');
  const h = L.holdOffset(16);
  let slots = 0;
  for (
    let ref = a[h + L.HOLD_FREE]!;
    ref !== 0 && slots <= L.HOLD_SLOTS;
    ref = a[h + L.HOLD_HDR_WORDS + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT]!
  )
    slots++;
  assert.equal(slots, L.HOLD_SLOTS, 'the hold free list holds every slot once');
  assert.equal(t.holdUsed(), 0);
  // now() counts from the table's epoch, the same in every view of it.
  const other = new ConnTable(t.sab, createRealServerRegion(1), 3);
  assert.equal(other.epoch, t.epoch);
  assert.ok(Math.abs(t.now() - (Date.now() - t.epoch)) < 50);
  assert.ok(Math.abs(t.epoch - Date.now()) < 60_000, 'the epoch is when the table was made');
});

test('setTimeouts: every TCP state, UDP, SCTP (the kernel defaults when absent); a missing state is 0', () => {
  const { t } = fresh(16);
  const a = t.i32;
  t.setTimeouts({ tcp: [1, 2, 3], udp: 4.5, sctp: [7] });
  assert.deepEqual([...a.subarray(L.H_TIMEOUTS, L.H_TIMEOUTS + 4)], [1000, 2000, 3000, 0]);
  assert.equal(a[L.H_TIMEOUTS + 10], 0);
  assert.equal(a[L.H_TIMEOUTS + L.TIMEOUT_UDP], 4500);
  assert.deepEqual(
    [a[L.H_TIMEOUTS + L.TIMEOUT_SCTP], a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + 1], a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + 13]],
    [7000, 0, 0],
  );
  t.setTimeouts(timeouts);
  assert.ok(a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + SCTP_S_ESTABLISHED]! > 0, 'kernel SCTP defaults');
});

test('sync on: a client packet asks for a Redis write at packet 3, then every 50th; a reply never counts; half the timeout idle writes again; sync off never', () => {
  const { t } = fresh();
  const now = t.now();
  const e = t.insert(conn(17, C, 1, now));
  assert.equal(t.touch(e, DIR_INPUT, 0, now), false, 'sync off');
  t.i32[t.base(e) + L.E_IN_PKTS] = 0;
  t.setSync(true);
  const writes: number[] = [];
  for (let i = 1; i <= 160; i++) if (t.touch(e, DIR_INPUT, 0, now)) writes.push(i);
  assert.deepEqual(writes, [3, 53, 103, 153]);
  for (let i = 0; i < 60; i++) assert.equal(t.touch(e, DIR_OUTPUT, 0, now), false, 'replies count no packet');
  assert.equal(t.i32[t.base(e) + L.E_IN_PKTS], 160);
  // UDP: 300 s, so a write is due once more than 150 s passed since the last one.
  assert.equal(t.touch(e, DIR_OUTPUT, 0, now + 150_000), false);
  assert.equal(t.touch(e, DIR_OUTPUT, 0, now + 150_001), true);
  assert.equal(t.touch(e, DIR_OUTPUT, 0, now + 150_002), false, 'written just now');
  t.setSync(false);
  for (let i = 0; i < 60; i++) assert.equal(t.touch(e, DIR_INPUT, 0, now + 900_000), false, 'sync off: nothing is written');
  // TCP: a state change is written at once, even the first packet.
  t.setSync(true);
  const s = t.insert(conn(6, C, 1, now));
  assert.equal(t.touch(s, DIR_INPUT, TCPF_SYN, now), true, 'NONE → SYN_RECV');
  assert.equal(t.touch(s, DIR_INPUT, TCPF_SYN, now), false, 'packet 2, no change');
});

test('the client packet count saturates at 2^31 − 1', () => {
  const { t } = fresh();
  const now = t.now();
  const e = t.insert(conn(17, C, 1, now));
  const o = t.base(e);
  t.i32[o + L.E_IN_PKTS] = 0x7ffffffe;
  t.touch(e, DIR_INPUT, 0, now);
  assert.equal(t.i32[o + L.E_IN_PKTS], 0x7fffffff);
  t.touch(e, DIR_INPUT, 0, now);
  assert.equal(t.i32[o + L.E_IN_PKTS], 0x7fffffff);
});

/** n keys (client address varying) whose client→server key shares one bucket. */
function collidingIn(t: ConnTable, n: number): number[] {
  const target = t.bucket(6, 0x0b000000, CP, V);
  const out: number[] = [];
  for (let c = 0x0b000000; out.length < n; c++) if (t.bucket(6, c, CP, V) === target) out.push(c);
  return out;
}

test('walks: longestWalk is the window peak, chainWindow returns and resets it, longWalks counts walks over CHAIN_ALARM', () => {
  const t = new ConnTable(ConnTable.create(256, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);
  const keys = collidingIn(t, CHAIN_ALARM + 2);
  const ins = (i: number) =>
    t.insert(
      newFlow({ proto: 6, caddr: keys[i]!, cports: CP, vaddr: V, daddr: D + i * 7919, dports: DP, laddr: keys[i]!, rs: 1, now: t.now() }),
    );
  for (let i = 0; i < CHAIN_ALARM; i++) assert.ok(ins(i) >= 0);
  t.chainWindow();
  assert.equal(t.longestWalk(), 0, 'a new window');
  const long0 = t.longWalks();
  // New entries go to the head: keys[0] is the last of CHAIN_ALARM.
  assert.ok(findIn(t, 6, keys[0]!, CP, V) >= 0);
  assert.equal(t.longestWalk(), CHAIN_ALARM);
  assert.equal(t.longWalks(), long0, 'a walk of exactly CHAIN_ALARM is no alarm');
  assert.ok(findIn(t, 6, keys[CHAIN_ALARM - 1]!, CP, V) >= 0);
  assert.equal(t.longestWalk(), CHAIN_ALARM, 'a shorter walk keeps the peak');
  assert.equal(t.chainWindow(), CHAIN_ALARM);
  assert.equal(t.longestWalk(), 0);
  assert.ok(findIn(t, 6, keys[CHAIN_ALARM - 1]!, CP, V) >= 0);
  assert.equal(t.longestWalk(), 1, 'found at the head');
  assert.ok(ins(CHAIN_ALARM) >= 0);
  assert.equal(t.longWalks(), long0, "the insert's miss walked CHAIN_ALARM entries");
  assert.ok(findIn(t, 6, keys[0]!, CP, V) >= 0);
  assert.equal(t.longWalks(), long0 + 1);
  assert.equal(t.longestWalk(), CHAIN_ALARM + 1);
  assert.equal(findIn(t, 6, keys[CHAIN_ALARM + 1]!, CP, V), -1);
  assert.equal(t.longWalks(), long0 + 2, 'a miss walks the whole chain');
  // Templates are walked over too.
  const b = t.bucket(6, keys[0]!, CP, V);
  t.lockBucket(b);
  assert.equal(t.findTemplate(b, 6, keys[0]!, CP, V), -1);
  t.unlockBucket(b);
  assert.equal(t.longWalks(), long0 + 3);
});

test('an insert whose server→client chain already holds CHAIN_LIMIT entries is refused (−3), its slot given back', () => {
  const t = new ConnTable(ConnTable.create(256, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);
  const target = t.bucket(6, 0x0d000000, DP, P);
  const ds: number[] = [];
  for (let d = 0x0d000000; ds.length < CHAIN_LIMIT + 1; d++) if (t.bucket(6, d, DP, P) === target) ds.push(d);
  for (let i = 0; i < CHAIN_LIMIT; i++)
    assert.ok(
      t.insert(
        newFlow({ proto: 6, caddr: C + i * 7919, cports: CP, vaddr: V, daddr: ds[i]!, dports: DP, laddr: P, rs: 1, now: t.now() }),
      ) >= 0,
    );
  const r = newFlow({
    proto: 6,
    caddr: C + 1_000_003,
    cports: CP,
    vaddr: V,
    daddr: ds[CHAIN_LIMIT]!,
    dports: DP,
    laddr: P,
    rs: 1,
    now: t.now(),
  });
  assert.equal(t.insert(r), -3);
  assert.equal(r.created, false);
  assert.equal(t.count(), CHAIN_LIMIT);
  for (let i = 0; i < CHAIN_LIMIT; i++) assert.ok(findOut(t, 6, ds[i]!, DP, P) >= 0);
  // The refused slot is free again: every slot is live or on the free list.
  let free = 0;
  for (let ref = t.i32[L.H_FREE_HEAD]!; ref !== 0 && free <= 256; ref = t.i32[t.base(ref - 1) + L.E_NEXT_IN]!) free++;
  assert.equal(free, 256 - CHAIN_LIMIT);
  // One entry fewer on the chain: the same insert goes in.
  assert.equal(t.remove(findOut(t, 6, ds[5]!, DP, P), false, t.now()), true);
  assert.ok(t.insert(r) >= 0);
  assert.equal(r.created, true);
});

test('releaseLocksOf counts and frees bucket, entry, allocation and hold-area locks of that owner only', () => {
  const { t } = fresh(64);
  const a = t.i32;
  const locks = L.bucketLocksOffset(64);
  a[locks + 3] = 7;
  a[t.base(5) + L.E_LOCK] = 7;
  a[t.base(63) + L.E_LOCK] = 7;
  a[L.H_ALLOC_LOCK] = 7;
  a[L.holdOffset(64) + L.HOLD_LOCK] = 7;
  a[t.base(6) + L.E_LOCK] = 8;
  a[locks + 63] = 8;
  assert.equal(t.releaseLocksOf(7), 5);
  assert.deepEqual(
    [a[locks + 3], a[t.base(5) + L.E_LOCK], a[t.base(63) + L.E_LOCK], a[L.H_ALLOC_LOCK], a[L.holdOffset(64) + L.HOLD_LOCK]],
    [0, 0, 0, 0, 0],
  );
  assert.deepEqual([a[t.base(6) + L.E_LOCK], a[locks + 63]], [8, 8], "another owner's locks stay");
  assert.equal(t.releaseLocksOf(7), 0);
});

test('remove() with the key a worker found: another key, a template or another state is left alone; not due is kept', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const e = t.insert(conn(6, C, 1, now));
  t.touch(e, DIR_INPUT, TCPF_SYN, now); // SYN_RECV (3), active
  assert.equal(t.remove(e, false, now, 17, C, CP), false, 'protocol');
  assert.equal(t.remove(e, false, now, 6, C + 1, CP), false, 'client address');
  assert.equal(t.remove(e, false, now, 6, C, CP + 1), false, 'ports');
  assert.equal(t.remove(e, false, now, 6, C, CP, 1), false, 'state');
  const expires = t.i32[t.base(e) + L.E_EXPIRES]!;
  assert.equal(t.remove(e, true, (expires - 1) | 0, 6, C, CP, 3), false, 'not due');
  assert.equal(t.count(), 1);
  assert.equal(t.remove(e, true, expires, 6, C, CP, 3), true);
  assert.equal(t.count(), 0);
  assert.deepEqual([rs[1 * L.RS_WORDS + L.RS_ACTIVE], rs[1 * L.RS_WORDS + L.RS_INACTIVE]], [0, 0], 'an active entry leaves ActiveConn');
  assert.equal(t.remove(e, false, now), false, 'already gone');
  assert.equal(findIn(t, 6, C, CP, V), -1);
  assert.equal(findOut(t, 6, D, DP, C), -1);
  // A template is never removed by a connection's key.
  const tp = t.insert(template({ proto: 6, caddr: C, cports: 80, dports: 8080 << 16, rs: 1, ms: 1000, now }));
  assert.equal(t.remove(tp, false, now, 6, C, 80), false);
  assert.equal(t.remove(tp, false, now), true);
  assert.equal(rs[1 * L.RS_WORDS + L.RS_PERSIST], 0);
});

test('remove() unlinks an entry from the middle of both chains and leaves the others findable', () => {
  const t = new ConnTable(ConnTable.create(256, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);
  const keys = collidingIn(t, 5);
  const es = keys.map((c) => t.insert(conn(6, c, 1, t.now())));
  assert.equal(t.remove(es[2]!, false, t.now()), true);
  for (let i = 0; i < 5; i++) {
    assert.equal(findIn(t, 6, keys[i]!, CP, V), i === 2 ? -1 : es[i], `in ${i}`);
    assert.equal(findOut(t, 6, D, DP, keys[i]!), i === 2 ? -1 : es[i], `out ${i}`);
  }
  assert.equal(t.remove(es[4]!, false, t.now()), true, 'the head');
  assert.equal(t.remove(es[0]!, false, t.now()), true, 'the tail');
  assert.equal(findIn(t, 6, keys[1]!, CP, V), es[1]);
  assert.equal(findIn(t, 6, keys[3]!, CP, V), es[3]);
  assert.equal(t.count(), 2);
});

test('persistence templates: PersistConn, matched only by findTemplate/templateFor, reserved, re-armed while they control, ASSURED on ESTABLISHED', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const Cm = C & ~0xff;
  const v = new FlowView();
  const tr = newFlow({
    proto: 6,
    caddr: Cm,
    cports: 80,
    vaddr: V,
    daddr: D,
    dports: 8080 << 16,
    laddr: 0,
    rs: 1,
    flags: L.F_TEMPLATE,
    templateMs: 360_000,
    pp: 77,
    ppSeq: 99,
    now,
  });
  const tp = t.insertTemplate(tr, v);
  assert.ok(tp >= 0);
  const ot = t.base(tp);
  assert.deepEqual([rs[1 * L.RS_WORDS + L.RS_PERSIST], rs[1 * L.RS_WORDS + L.RS_INACTIVE]], [1, 0]);
  assert.deepEqual([v.entry, v.rs, v.daddr], [tp, 1, D], 'copied into the view');
  assert.equal(t.i32[ot + L.E_NCONTROL], 1, 'insertTemplate reserves it');
  assert.equal(t.i32[ot + L.E_EXPIRES], (now + 360_000) | 0, 'its own timer');
  assert.equal(findIn(t, 6, Cm, 80, V), -1, 'packets never match a template');
  assert.equal(findTemplate(t, 6, Cm, 80, V), tp);
  assert.equal(findTemplate(t, 6, Cm + 1, 80, V), -1);
  const k = key(6, Cm, 80, V);
  const v2 = new FlowView();
  assert.equal(t.templateFor(k, v2, false), tp);
  assert.equal(k.bucket, t.bucket(6, Cm, 80, V));
  assert.deepEqual([v2.entry, v2.rs], [tp, 1]);
  assert.equal(t.i32[ot + L.E_NCONTROL], 2);
  t.unreserve(tp);
  assert.equal(t.i32[ot + L.E_NCONTROL], 1);
  // The connection made through it.
  const c = t.insert(conn(6, C, 1, now));
  t.control(c, tp, now + 1000);
  assert.equal(t.i32[ot + L.E_EXPIRES], (now + 361_000) | 0, 're-armed by its own timeout');
  t.touch(c, DIR_INPUT, TCPF_SYN, now);
  t.touch(c, DIR_OUTPUT, TCPF_SYN | TCPF_ACK, now);
  assert.equal(t.i32[ot + L.E_STATE]! & L.CTPL_ASSURED, 0);
  t.touch(c, DIR_INPUT, TCPF_ACK, now); // ESTABLISHED
  assert.equal(t.i32[ot + L.E_STATE]! & L.CTPL_ASSURED, L.CTPL_ASSURED);
  // Due while it still controls a connection: 60 s more, as often as needed.
  assert.equal(t.expire(now + 361_000), 0);
  assert.equal(t.i32[ot + L.E_EXPIRES], (now + 421_000) | 0);
  assert.equal(t.i32[ot + L.E_TIMEOUT], L.TEMPLATE_REARM_MS);
  assert.equal(t.remove(tp, true, now + 421_000), false);
  assert.equal(t.i32[ot + L.E_EXPIRES], (now + 481_000) | 0);
  // A TIME_WAIT connection it controls is not reused by a new SYN.
  t.i32[t.base(c) + L.E_STATE] = 5;
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_SYN, LOOKUP_NEW, now), FLOW_HIT);
  assert.equal(t.remove(c, false, now), true);
  assert.equal(t.i32[ot + L.E_NCONTROL], 0, 'the connection gave its control back');
  assert.equal(t.expire(now + 481_000), 1, 'controlling nothing, it goes at its timer');
  assert.equal(rs[1 * L.RS_WORDS + L.RS_PERSIST], 0);
  assert.equal(t.count(), 0);
});

test('templateFor: a template whose server left is invalidated for good; a quiesced one only with expire_quiescent', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const v = new FlowView();
  const mk = (c: number, r: number) => t.insert(template({ proto: 6, caddr: c, cports: 80, dports: 8080 << 16, rs: r, ms: 360_000, now }));
  const a = mk(C, 1);
  const b = mk(C + 256, 2);
  rs[1 * L.RS_WORDS + L.RS_FLAGS] = 0; // left the service
  assert.equal(t.templateFor(key(6, C, 80, V), v, false), -1);
  assert.equal(t.i32[t.base(a) + L.E_NCONTROL], 0, 'not reserved');
  rs[1 * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE; // back again
  assert.equal(t.templateFor(key(6, C, 80, V), v, false), -1, 'invalidated: never matched again');
  assert.equal(findTemplate(t, 6, C, 80, V), -1);
  assert.equal(t.count(), 2, 'it dies at its timer, not now');
  rs[2 * L.RS_WORDS + L.RS_WEIGHT] = 0; // quiesced
  assert.equal(t.templateFor(key(6, C + 256, 80, V), v, false), b, 'quiesced, expire_quiescent off: still used');
  t.unreserve(b);
  assert.equal(t.templateFor(key(6, C + 256, 80, V), v, true), -1, 'expire_quiescent on');
  rs[2 * L.RS_WORDS + L.RS_WEIGHT] = 1;
  assert.equal(t.templateFor(key(6, C + 256, 80, V), v, false), -1, 'invalidated');
  // A new template for the key is made beside the invalid one.
  const c = mk(C, 1);
  assert.ok(c >= 0 && c !== a);
  assert.equal(findTemplate(t, 6, C, 80, V), c);
  assert.equal(t.expire(now + 360_000), 3);
});

test('UDP: a reply assures the controlling template, a client packet does not; an unassured template stays so', () => {
  const { t } = fresh();
  const now = t.now();
  const tp = t.insert(template({ proto: 17, caddr: C, cports: 53, dports: 53 << 16, rs: 1, ms: 60_000, now }));
  const u = t.insert(
    newFlow({ proto: 17, caddr: C, cports: (5000 << 16) | 53, vaddr: V, daddr: D, dports: (53 << 16) | 5000, laddr: C, rs: 1, now }),
  );
  const w = t.insert(
    newFlow({
      proto: 17,
      caddr: C + 1,
      cports: (5000 << 16) | 53,
      vaddr: V,
      daddr: D,
      dports: (53 << 16) | 5000,
      laddr: C + 1,
      rs: 1,
      now,
    }),
  );
  t.touch(w, DIR_OUTPUT, 0, now); // no template: nothing to assure
  t.reserve(tp);
  t.control(u, tp, now);
  t.touch(u, DIR_INPUT, 0, now);
  assert.equal(t.i32[t.base(tp) + L.E_STATE]! & L.CTPL_ASSURED, 0);
  t.touch(u, DIR_OUTPUT, 0, now);
  assert.equal(t.i32[t.base(tp) + L.E_STATE]! & L.CTPL_ASSURED, L.CTPL_ASSURED);
  t.touch(u, DIR_OUTPUT, 0, now);
  assert.equal(t.i32[t.base(tp) + L.E_STATE], L.CTPL_ASSURED, 'set once, nothing else');
});

test('OVERLOAD: at the upper threshold; without a lower one cleared below 3/4 of the upper; without thresholds cleared on any unbind', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const o = 4 * L.RS_WORDS;
  rs[o + L.RS_UTHRESH] = 4;
  const es: number[] = [];
  for (let i = 0; i < 4; i++) {
    assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0, `${i} entries`);
    es.push(t.insert(conn(6, C + i, 4, now)));
  }
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, L.RSF_OVERLOAD);
  t.touch(es[0]!, DIR_INPUT, TCPF_SYN, now); // active now: still 4 in all
  t.remove(es[1]!, false, now);
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, L.RSF_OVERLOAD, '3 · 4 is not below 4 · 3');
  t.remove(es[0]!, false, now);
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0, '2 · 4 < 4 · 3');
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [0, 2]);
  // A template counts in PersistConn, not towards the threshold.
  rs[o + L.RS_UTHRESH] = 3;
  t.insert(template({ proto: 6, caddr: C, cports: 80, dports: 8080 << 16, rs: 4, ms: 1000, now }));
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0, 'PersistConn is not a connection');
  assert.equal(rs[o + L.RS_PERSIST], 1);
  // No thresholds: any unbind clears a flag set by hand.
  const n = 5 * L.RS_WORDS;
  const x = t.insert(conn(6, C + 9, 5, now));
  assert.equal(rs[n + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0, 'no upper threshold: never overloaded');
  rs[n + L.RS_FLAGS] = rs[n + L.RS_FLAGS]! | L.RSF_OVERLOAD;
  t.remove(x, false, now);
  assert.equal(rs[n + L.RS_FLAGS], L.RSF_AVAILABLE, 'cleared, AVAILABLE kept');
  // A lower threshold: cleared only below it.
  const m = 6 * L.RS_WORDS;
  rs[m + L.RS_UTHRESH] = 3;
  rs[m + L.RS_LTHRESH] = 2;
  const ys = [0, 1, 2].map((i) => t.insert(conn(6, C + 20 + i, 6, now)));
  assert.equal(rs[m + L.RS_FLAGS]! & L.RSF_OVERLOAD, L.RSF_OVERLOAD);
  t.remove(ys[0]!, false, now);
  assert.equal(rs[m + L.RS_FLAGS]! & L.RSF_OVERLOAD, L.RSF_OVERLOAD, '2 is not below 2 (3/4 of 3 would have cleared it)');
  t.remove(ys[1]!, false, now);
  assert.equal(rs[m + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0);
});

test('adopt: counted active or inactive as synced, OVERLOAD at the upper threshold; lookupIn and lookupOut adopt on the way', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const o = 3 * L.RS_WORDS;
  rs[o + L.RS_UTHRESH] = 2;
  const sh = (c: number, flags = 0) =>
    t.putShadow(
      newFlow({
        proto: 6,
        caddr: c,
        cports: CP,
        vaddr: V,
        daddr: D,
        dports: DP,
        laddr: c,
        rs: 3,
        flags,
        state: 1,
        expires: (now + 500_000) | 0,
      }),
    );
  const a = sh(C);
  const b = sh(C + 1);
  const c = sh(C + 2, L.F_INACTIVE);
  assert.equal(t.shadows(), 3);
  const v = new FlowView();
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_ACK, 0, now), FLOW_HIT);
  assert.equal(v.adopted, true);
  assert.equal(v.entry, a);
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE], rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD], [1, 0, 0]);
  assert.equal(t.i32[t.base(a) + L.E_SYNCED], now, 'ours to sync from now on');
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_ACK, 0, now), FLOW_HIT);
  assert.equal(v.adopted, false, 'adopted once');
  assert.equal(t.lookupOut(key(6, D, DP, C + 1), v, TCPF_ACK, now), true);
  assert.deepEqual([v.adopted, v.entry], [true, b]);
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD], [2, L.RSF_OVERLOAD]);
  assert.equal(t.adopt(c, now), true);
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [2, 1]);
  assert.equal(t.shadows(), 0);
  // No upper threshold: never overloaded.
  const n = 4 * L.RS_WORDS;
  const d = t.putShadow(
    newFlow({
      proto: 6,
      caddr: C + 3,
      cports: CP,
      vaddr: V,
      daddr: D,
      dports: DP,
      laddr: C + 3,
      rs: 4,
      state: 1,
      expires: (now + 500_000) | 0,
    }),
  );
  assert.equal(t.adopt(d, now), true);
  assert.equal(rs[n + L.RS_FLAGS], L.RSF_AVAILABLE);
  assert.equal(t.readFlow(key(6, C + 3, CP, V), false, v), true);
  assert.equal(v.adopted, false);
});

test('putShadow: a refresh takes the record (state, expiry, inactive, PROXY words, SYN proxy words); mayInsert only limits new shadows', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const rec = (over: Partial<Parameters<typeof newFlow>[0]> = {}) =>
    newFlow({
      proto: 6,
      caddr: C,
      cports: CP,
      vaddr: V,
      daddr: D,
      dports: DP,
      laddr: C,
      rs: 2,
      state: 3,
      expires: (now + 10_000) | 0,
      ...over,
    });
  assert.equal(t.putShadow(rec(), false), -1, 'the cap: no new shadow');
  assert.equal(t.count(), 0);
  const e = t.putShadow(rec({ flags: L.F_INACTIVE }));
  assert.ok(e >= 0);
  const o = t.base(e);
  assert.ok(t.i32[o + L.E_FLAGS]! & L.F_INACTIVE);
  assert.equal(
    t.putShadow(
      rec({ state: 1, expires: (now + 20_000) | 0, pp: 0x1234, ppSeq: 555, sp: 1, spDelta: 11, spTsDelta: 22, spOpts: 33 }),
      false,
    ),
    e,
    'a refresh is no new shadow',
  );
  assert.deepEqual([t.i32[o + L.E_STATE], t.i32[o + L.E_EXPIRES], t.i32[o + L.E_FLAGS]! & L.F_INACTIVE], [1, (now + 20_000) | 0, 0]);
  assert.deepEqual(t.spRecordWords(e), [11, 22, 33]);
  const v = new FlowView();
  assert.equal(t.readFlow(key(6, C, CP, V), false, v), true);
  assert.deepEqual([v.pp, v.ppSeq, v.sp, v.spDelta, v.spTsDelta, v.spOpts], [0x1234, 555, L.F_SYNPROXY, 11, 22, 33]);
  assert.ok(t.i32[o + L.E_FLAGS]! & L.F_SHADOW, 'still a shadow');
  assert.equal(t.putShadow(rec({ flags: L.F_INACTIVE, state: 2 })), e);
  assert.ok(t.i32[o + L.E_FLAGS]! & L.F_INACTIVE, 'inactive again');
  assert.equal(t.putShadow(rec({ dports: DP + 1, state: 7 })), -1, 'another server port: not this flow');
  assert.equal(t.putShadow(rec({ daddr: D + 1, state: 7 })), -1, 'another server: not this flow');
  assert.equal(t.i32[o + L.E_STATE], 2);
  assert.deepEqual([t.shadows(), t.count()], [1, 1]);
  // The sweeper removes it at its synced expiry; nothing was counted, nothing is uncounted.
  assert.equal(t.expire(now + 9_999), 0);
  assert.equal(t.expire((now + 10_000) | 0), 1);
  assert.deepEqual([t.shadows(), t.count(), rs[2 * L.RS_WORDS + L.RS_ACTIVE], rs[2 * L.RS_WORDS + L.RS_INACTIVE]], [0, 0, 0, 0]);
  // A new shadow with SYN proxy words.
  const s = t.putShadow(rec({ sp: 1, spDelta: -5, spTsDelta: 7, spOpts: 9 }));
  assert.deepEqual(t.spRecordWords(s), [-5, 7, 9]);
  assert.ok(t.i32[t.base(s) + L.E_FLAGS]! & L.F_SYNPROXY);
  assert.equal(t.i32[t.base(s) + L.E_SYNCED], (now + 10_000) | 0, 'not ours to sync: its synced time is its expiry');
});

test('full-NAT: an insert whose pool address and port are taken is refused (−2), its slot given back; outKeyInUse tells', () => {
  const { t, rs } = fresh(16);
  const now = t.now();
  const fn = (c: number) =>
    newFlow({ proto: 6, caddr: c, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: P, rs: 1, flags: L.FWD_FULLNAT, now });
  assert.equal(t.outKeyInUse(fn(C)), false);
  assert.ok(t.insert(fn(C)) >= 0);
  assert.equal(t.outKeyInUse(fn(C + 1)), true);
  assert.equal(t.outKeyInUse(newFlow({ proto: 6, daddr: D, dports: DP + 1, laddr: P })), false);
  const r = fn(C + 1);
  assert.equal(t.insert(r), -2);
  assert.equal(r.created, false);
  assert.deepEqual([t.count(), rs[1 * L.RS_WORDS + L.RS_INACTIVE]], [1, 1]);
  const v = new FlowView();
  assert.equal(t.readFlow(key(6, D, DP, P), true, v), true);
  assert.equal(v.caddr, C, 'the first flow keeps the key');
  for (let i = 0; i < 15; i++) assert.ok(t.insert(conn(17, C + 100 + i, 1, now)) >= 0, `slot ${i}`);
  assert.equal(t.count(), 16, 'the refused slot was given back');
});

test('readFlow copies a flow by either key without touching it', () => {
  const { t } = fresh();
  const now = t.now();
  const e = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: P, rs: 1, svc: 4, now }));
  const o = t.base(e);
  const before = [...t.i32.subarray(o, o + L.ENTRY_WORDS)];
  const v = new FlowView();
  v.adopted = true;
  v.sync = true;
  assert.equal(t.readFlow(key(6, C, CP, V), false, v), true);
  assert.deepEqual(
    [v.entry, v.caddr, v.cports, v.vaddr, v.daddr, v.dports, v.laddr, v.rs, v.svc, v.adopted, v.sync],
    [e, C, CP, V, D, DP, P, 1, 4, false, false],
  );
  const w = new FlowView();
  assert.equal(t.readFlow(key(6, D, DP, P), true, w), true);
  assert.equal(w.entry, e);
  assert.equal(t.readFlow(key(6, D, DP, P), false, w), false, 'the out-key is no in-key');
  assert.equal(t.readFlow(key(6, C, CP, V), true, w), false, 'the in-key is no out-key');
  assert.deepEqual([w.entry, w.caddr, w.rs, w.svc], [e, C, 1, 4], "a miss leaves the caller's view alone");
  assert.deepEqual([...t.i32.subarray(o, o + L.ENTRY_WORDS)], before, 'untouched');
  assert.equal(t.i32[L.bucketLocksOffset(1024) + t.bucket(6, C, CP, V)], 0, 'lock released');
});

test('lookupIn with LOOKUP_NEW: a TCP flow in TIME_WAIT or an SCTP one CLOSED may be replaced; other states, or without LOOKUP_NEW, go on', () => {
  const { t } = fresh();
  const now = t.now();
  const v = new FlowView();
  const e = t.insert(conn(6, C, 1, now));
  t.touch(e, DIR_INPUT, TCPF_SYN, now);
  t.touch(e, DIR_INPUT, TCPF_FIN, now); // SYN_RECV + client FIN → TIME_WAIT
  assert.equal(t.i32[t.base(e) + L.E_STATE], 5);
  const pk = t.i32[t.base(e) + L.E_IN_PKTS];
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_SYN, LOOKUP_NEW, now), FLOW_REUSE);
  assert.equal(v.entry, e);
  assert.equal(t.i32[t.base(e) + L.E_IN_PKTS], pk, 'not touched');
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_ACK, 0, now), FLOW_HIT);
  const s = t.insert(conn(132, C, 1, now));
  t.i32[t.base(s) + L.E_STATE] = SCTP_S_CLOSED;
  assert.equal(t.lookupIn(key(132, C, CP, V), v, 1, LOOKUP_NEW, now), FLOW_REUSE);
  t.i32[t.base(s) + L.E_STATE] = 5; // TIME_WAIT's number is no SCTP state to reuse
  assert.equal(t.lookupIn(key(132, C, CP, V), v, 1, LOOKUP_NEW, now), FLOW_HIT);
  const u = t.insert(conn(6, C + 1, 1, now));
  t.i32[t.base(u) + L.E_STATE] = SCTP_S_CLOSED; // 13 is no TCP state to reuse
  assert.equal(t.lookupIn(key(6, C + 1, CP, V), v, TCPF_SYN, LOOKUP_NEW, now), FLOW_HIT);
  assert.equal(t.lookupIn(key(6, C + 2, CP, V), v, TCPF_SYN, LOOKUP_NEW, now), FLOW_MISS);
});

test('PROXY protocol words: kept from the record, marks only add bits, a restart clears them and moves the sequence number', () => {
  const { t } = fresh();
  const now = t.now();
  const pp = (2 << L.PP_VER_SHIFT) | 28;
  const e = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, pp, ppSeq: 1001, now }));
  const v = new FlowView();
  t.touchIn(e, v, TCPF_SYN, now);
  assert.deepEqual([v.pp, v.ppSeq, v.state], [pp, 1001, 3]);
  t.ppMark(e, L.PP_SENT);
  t.ppMark(e, L.PP_DATA);
  t.readFlow(key(6, C, CP, V), false, v);
  assert.equal(v.pp, pp | L.PP_SENT | L.PP_DATA);
  t.ppRestart(e, 5001);
  t.readFlow(key(6, C, CP, V), false, v);
  assert.deepEqual([v.pp, v.ppSeq], [pp, 5001]);
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 60_000) | 0, 'touchIn re-armed the timer (SYN_RECV)');
});

test('IPv6 keys: every high word counts on both chains; the view carries all 12; entryAddr prints each address', () => {
  const { t } = fresh();
  const now = t.now();
  const c = parseIPv6('2001:db8:1:2::5')!,
    v6 = parseIPv6('fd00:96::10')!,
    d = parseIPv6('fd00:10::1')!,
    l = parseIPv6('fd00:ff::7')!;
  const hi = [c[0]!, c[1]!, c[2]!, v6[0]!, v6[1]!, v6[2]!, d[0]!, d[1]!, d[2]!, l[0]!, l[1]!, l[2]!];
  const proto = 6 | L.PROTO_V6;
  const e = t.insert(newFlow({ proto, caddr: c[3]!, cports: CP, vaddr: v6[3]!, daddr: d[3]!, dports: DP, laddr: l[3]!, rs: 1, hi, now }));
  assert.ok(e >= 0);
  assert.equal(findIn(t, proto, c[3]!, CP, v6[3]!, hi), e);
  assert.equal(findOut(t, proto, d[3]!, DP, l[3]!, hi), e);
  for (let i = 0; i < 12; i++) {
    const h = [...hi];
    h[i] = h[i]! ^ 0x100;
    // Look in the right chain (the original key's bucket), so only the comparison can miss.
    const bi = t.bucketIn(proto, c[3]!, CP, v6[3]!, hi);
    const bo = t.bucketOut(proto, d[3]!, DP, l[3]!, hi);
    t.lockBucket(bi);
    const fi = t.findIn(bi, proto, c[3]!, CP, v6[3]!, h);
    t.unlockBucket(bi);
    t.lockBucket(bo);
    const fo = t.findOut(bo, proto, d[3]!, DP, l[3]!, h);
    t.unlockBucket(bo);
    assert.equal(fi, i < 6 ? -1 : e, `in-key, high word ${i}`);
    assert.equal(fo, i >= 6 ? -1 : e, `out-key, high word ${i}`);
  }
  const k = key(proto, c[3]!, CP, v6[3]!);
  k.hi.set(hi);
  const view = new FlowView();
  assert.equal(t.lookupIn(k, view, TCPF_SYN, LOOKUP_NEW, now), FLOW_HIT);
  assert.deepEqual([...view.hi], hi);
  const o = t.base(e);
  assert.deepEqual([...t.entryHi(o)], hi);
  assert.equal(entryAddr(t.i32, o, L.E_CADDR), '2001:db8:1:2::5');
  assert.equal(entryAddr(t.i32, o, L.E_VADDR), 'fd00:96::10');
  assert.equal(entryAddr(t.i32, o, L.E_DADDR), 'fd00:10::1');
  assert.equal(entryAddr(t.i32, o, L.E_LADDR), 'fd00:ff::7');
  const e4 = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: P, rs: 1, now }));
  assert.deepEqual(
    [L.E_CADDR, L.E_VADDR, L.E_DADDR, L.E_LADDR].map((f) => entryAddr(t.i32, t.base(e4), f)),
    ['10.0.0.2', '10.96.0.1', '10.11.0.2', '10.12.0.1'],
  );
  // The sweeper finds it by its full key.
  assert.equal(t.remove(e, false, now), true);
  assert.equal(findIn(t, proto, c[3]!, CP, v6[3]!, hi), -1);
});

test('the control thread reads the defenses and route MTUs the table carries', () => {
  const { t, rs } = fresh(16);
  t.i32[L.H_DROP_RATE] = 7;
  t.i32[L.H_SRC_LIMIT] = 12;
  t.i32[L.H_SYNPROXY] = 1;
  rs[3 * L.RS_WORDS + L.RS_MTU] = 1400;
  assert.deepEqual([t.dropRate(), t.sourceLimit(), t.synProxyOn(), t.routeMtu(3), t.routeMtu(2)], [7, 12, true, 1400, 0]);
});

test('a reused slot starts afresh: no packets, no template link, state NONE, a 2 s timer from its insert', () => {
  const { t, rs } = fresh(16);
  const now = t.now();
  t.setSync(true);
  const tp = t.insert(template({ proto: 17, caddr: C, cports: 53, dports: 53 << 16, rs: 1, ms: 60_000, now }));
  const e = t.insert(conn(17, C, 1, now));
  t.reserve(tp);
  t.control(e, tp, now);
  for (let i = 0; i < 5; i++) t.touch(e, DIR_INPUT, 0, now);
  assert.equal(t.remove(e, false, now), true);
  assert.equal(t.i32[t.base(tp) + L.E_NCONTROL], 0);
  t.reserve(tp); // held for another connection that is not linked yet
  const e2 = t.insert(conn(6, C + 1, 2, now + 10));
  assert.equal(e2, e, 'the freed slot is taken first');
  const o = t.base(e2);
  assert.deepEqual(
    [t.i32[o + L.E_IN_PKTS], t.i32[o + L.E_CONTROL], t.i32[o + L.E_STATE], t.i32[o + L.E_EXPIRES]],
    [0, 0, 0, (now + 2010) | 0],
  );
  assert.equal(t.expire((now + 2009) | 0), 0);
  assert.equal(t.expire((now + 2010) | 0), 1);
  assert.equal(t.i32[t.base(tp) + L.E_NCONTROL], 1, 'removing it gave back no control it never had');
  assert.deepEqual([rs[2 * L.RS_WORDS + L.RS_INACTIVE], rs[1 * L.RS_WORDS + L.RS_PERSIST]], [0, 1]);
  // A template is no connection: inserting the same template again finds it, a connection key does not.
  const r = newFlow({
    proto: 17,
    caddr: C,
    cports: 53,
    vaddr: V,
    daddr: D + 5,
    dports: 53 << 16,
    laddr: 0,
    rs: 3,
    flags: L.F_TEMPLATE,
    templateMs: 60_000,
    now,
  });
  assert.equal(t.insert(r), tp);
  assert.equal(r.created, false);
  const c = newFlow({ proto: 17, caddr: C, cports: 53, vaddr: V, daddr: D, dports: (53 << 16) | 7, laddr: C, rs: 1, now });
  assert.notEqual(t.insert(c), tp);
  assert.equal(c.created, true);
  // Removing a template that still controls a connection by hand (not expiry) removes it.
  assert.equal(t.remove(tp, false, now), true);
});

test('timers across the int32 wrap of table time', () => {
  const { t } = fresh(16);
  const now = 0x7fffffff - 1000;
  const e = t.insert(conn(17, C, 1, now));
  t.touch(e, DIR_INPUT, 0, now); // 300 s: expires past the wrap
  assert.ok(t.i32[t.base(e) + L.E_EXPIRES]! < 0);
  assert.equal(t.expire(now + 500), 0);
  assert.equal(t.expire((now + 299_999) | 0), 0);
  assert.equal(t.remove(e, true, (now + 299_999) | 0), false);
  assert.equal(t.expire((now + 300_000) | 0), 1);
});

test('the view: forwarding method, SYN proxy bits, and every key word; forEach sees live entries only', () => {
  const { t } = fresh(16);
  const now = t.now();
  const e = t.insert(
    newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: P, rs: 1, svc: 2, flags: L.FWD_FULLNAT, now }),
  );
  const x = t.insert(
    newFlow({ proto: 17, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, flags: L.FWD_DROUTE, now }),
  );
  const v = new FlowView();
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_SYN, LOOKUP_NEW, now), FLOW_HIT);
  assert.deepEqual([v.entry, v.proto, v.fwd, v.sp, v.svc], [e, 6, L.FWD_FULLNAT, 0, 2]);
  assert.equal(t.lookupOut(key(17, D, DP, C), v, 0, now), true);
  assert.deepEqual([v.entry, v.proto, v.fwd], [x, 17, L.FWD_DROUTE]);
  const seen: number[] = [];
  t.remove(x, false, now);
  t.forEach((i) => seen.push(i));
  assert.deepEqual(seen, [e]);
});

test('putShadow IPv6: a record whose server differs in any high word is another flow', () => {
  const { t } = fresh();
  const now = t.now();
  const c = parseIPv6('2001:db8::5')!,
    v6 = parseIPv6('fd00:96::10')!,
    d = parseIPv6('fd00:10::1')!;
  const hi = [c[0]!, c[1]!, c[2]!, v6[0]!, v6[1]!, v6[2]!, d[0]!, d[1]!, d[2]!, c[0]!, c[1]!, c[2]!];
  const proto = 6 | L.PROTO_V6;
  const rec = (h: number[], state: number) =>
    newFlow({
      proto,
      caddr: c[3]!,
      cports: CP,
      vaddr: v6[3]!,
      daddr: d[3]!,
      dports: DP,
      laddr: c[3]!,
      rs: 1,
      state,
      expires: (now + 10_000) | 0,
      hi: h,
    });
  const e = t.putShadow(rec(hi, 3));
  assert.ok(e >= 0);
  for (const j of [6, 7, 8]) {
    const h = [...hi];
    h[j] = h[j]! ^ 1;
    assert.equal(t.putShadow(rec(h, 4)), -1, `server high word ${j}`);
  }
  assert.equal(t.putShadow(rec(hi, 1)), e, 'the same server refreshes');
  assert.equal(t.i32[t.base(e) + L.E_STATE], 1);
});

test('keys that share a chain and differ in one field only are told apart, on both chains and for templates', () => {
  const { t } = fresh(16); // 16 buckets: a shared chain is easy to find
  const now = t.now();
  // Two keys differing in one word (index i of [proto, a1, ports, a2]) that share a bucket.
  const pair = (base: number[], i: number): number[][] => {
    for (let x = 1; x < 10_000; x++) {
      // Protocol: TCP and UDP, the ports moved until both land in one bucket; else field i moved.
      const k1 = i === 0 ? [6, base[1]!, base[2]! + x, base[3]!] : base;
      const k2 = i === 0 ? [17, base[1]!, base[2]! + x, base[3]!] : base.map((w, j) => (j === i ? w + x : w));
      if (t.bucket(k1[0]!, k1[1]!, k1[2]!, k1[3]!) === t.bucket(k2[0]!, k2[1]!, k2[2]!, k2[3]!)) return [k1, k2];
    }
    throw new Error('no pair');
  };
  for (let i = 0; i < 4; i++) {
    const [k1, k2] = pair([6, C + i * 1000, CP, V], i);
    const e1 = t.insert(
      newFlow({ proto: k1![0], caddr: k1![1], cports: k1![2], vaddr: k1![3], daddr: D + i * 2, dports: DP, laddr: P, rs: 1, now }),
    );
    const e2 = t.insert(
      newFlow({ proto: k2![0], caddr: k2![1], cports: k2![2], vaddr: k2![3], daddr: D + i * 2 + 1, dports: DP, laddr: P, rs: 1, now }),
    );
    assert.ok(e1 >= 0 && e2 >= 0 && e1 !== e2, `in-key field ${i}: two entries`);
    assert.equal(findIn(t, k1![0]!, k1![1]!, k1![2]!, k1![3]!), e1, `in-key field ${i}, first`);
    assert.equal(findIn(t, k2![0]!, k2![1]!, k2![2]!, k2![3]!), e2, `in-key field ${i}, second`);
    const [o1, o2] = pair([6, D + 100 + i * 1000, DP, P], i);
    const f1 = t.insert(
      newFlow({ proto: o1![0], caddr: C + 50 + i * 2, cports: CP, vaddr: V, daddr: o1![1], dports: o1![2], laddr: o1![3], rs: 1, now }),
    );
    const f2 = t.insert(
      newFlow({ proto: o2![0], caddr: C + 51 + i * 2, cports: CP, vaddr: V, daddr: o2![1], dports: o2![2], laddr: o2![3], rs: 1, now }),
    );
    assert.ok(f1 >= 0 && f2 >= 0 && f1 !== f2, `out-key field ${i}: two entries`);
    assert.equal(findOut(t, o1![0]!, o1![1]!, o1![2]!, o1![3]!), f1, `out-key field ${i}, first`);
    assert.equal(findOut(t, o2![0]!, o2![1]!, o2![2]!, o2![3]!), f2, `out-key field ${i}, second`);
    while (t.count() > 0) t.forEach((e) => t.remove(e, false, now));
    const [p1, p2] = pair([6, C & ~0xff, 80, V], i);
    const g1 = t.insert(
      newFlow({
        proto: p1![0],
        caddr: p1![1],
        cports: p1![2],
        vaddr: p1![3],
        daddr: D,
        dports: 8080 << 16,
        laddr: 0,
        rs: 1,
        flags: L.F_TEMPLATE,
        templateMs: 1000,
        now,
      }),
    );
    const g2 = t.insert(
      newFlow({
        proto: p2![0],
        caddr: p2![1],
        cports: p2![2],
        vaddr: p2![3],
        daddr: D,
        dports: 8080 << 16,
        laddr: 0,
        rs: 1,
        flags: L.F_TEMPLATE,
        templateMs: 1000,
        now,
      }),
    );
    assert.ok(g1 >= 0 && g2 >= 0 && g1 !== g2, `template field ${i}: two templates`);
    const b = t.bucket(p1![0]!, p1![1]!, p1![2]!, p1![3]!);
    t.lockBucket(b);
    assert.equal(t.findTemplate(b, p1![0]!, p1![1]!, p1![2]!, p1![3]!), g1, `template field ${i}, first`);
    assert.equal(t.findTemplate(b, p2![0]!, p2![1]!, p2![2]!, p2![3]!), g2, `template field ${i}, second`);
    t.unlockBucket(b);
    t.invalidate(g2);
    assert.equal(findTemplate(t, p2![0]!, p2![1]!, p2![2]!, p2![3]!), -1, 'an invalid template is passed over');
    assert.equal(findTemplate(t, p1![0]!, p1![1]!, p1![2]!, p1![3]!), g1);
    while (t.count() > 0) t.forEach((e) => t.remove(e, false, now));
  }
});

test('SCTP: the controlling template is ASSURED when the association reaches ESTABLISHED, not before', () => {
  const { t } = fresh();
  const now = t.now();
  const tp = t.insert(template({ proto: 132, caddr: C, cports: 80, dports: 80 << 16, rs: 1, ms: 60_000, now }));
  const e = t.insert(conn(132, C, 1, now));
  t.reserve(tp);
  t.control(e, tp, now);
  const steps: [number, number][] = [
    [DIR_INPUT, 1], // INIT → INIT1 (state 1, TCP's ESTABLISHED number)
    [DIR_OUTPUT, 2], // INIT_ACK
    [DIR_INPUT, 3], // COOKIE_ECHO
  ];
  for (const [dir, ev] of steps) {
    t.touch(e, dir, ev, now);
    assert.equal(t.i32[t.base(tp) + L.E_STATE]! & L.CTPL_ASSURED, 0, `state ${t.i32[t.base(e) + L.E_STATE]}`);
  }
  t.touch(e, DIR_OUTPUT, 4, now); // COOKIE_ACK → ESTABLISHED
  assert.equal(t.i32[t.base(e) + L.E_STATE], SCTP_S_ESTABLISHED);
  assert.equal(t.i32[t.base(tp) + L.E_STATE]! & L.CTPL_ASSURED, L.CTPL_ASSURED);
});

test('a flow that leaves half-open and comes back (RST, then a new SYN) is counted for its source again, once', () => {
  const { t } = fresh();
  const now = t.now();
  t.i32[L.H_SRC_LIMIT] = 100;
  const slot = t.sourceSlot(false, C, 0, 0);
  const e = t.insert(conn(6, C, 1, now));
  assert.equal(t.halfOpenAt(slot), 1);
  t.touch(e, DIR_INPUT, TCPF_SYN, now); // SYN_RECV: still the one count
  assert.equal(t.halfOpenAt(slot), 1);
  t.touch(e, DIR_INPUT, TCPF_ACK, now); // ESTABLISHED
  assert.equal(t.halfOpenAt(slot), 0);
  t.touch(e, DIR_INPUT, 0x04 /* RST */, now); // CLOSE
  assert.equal(t.halfOpenAt(slot), 0);
  t.touch(e, DIR_INPUT, TCPF_SYN, now); // SYN_RECV again
  assert.equal(t.i32[t.base(e) + L.E_STATE], 3);
  assert.equal(t.halfOpenAt(slot), 1);
  assert.equal(t.remove(e, false, now), true);
  assert.equal(t.halfOpenAt(slot), 0, 'uncounted once');
});

test('secure_tcp: a half-open timer is the shorter of its own and the secure one', () => {
  const { t } = fresh();
  const now = t.now();
  t.i32[L.H_SECURE_TCP] = 1;
  t.i32[L.H_SECURE_TCP_MS] = 100_000; // longer than SYN_RECV's 60 s
  const e = t.insert(conn(6, C, 1, now));
  t.touch(e, DIR_INPUT, TCPF_SYN, now);
  assert.equal(t.i32[t.base(e) + L.E_STATE], 3);
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 60_000) | 0);
  t.i32[L.H_SECURE_TCP_MS] = 5_000;
  t.touch(e, DIR_INPUT, TCPF_SYN, now + 1);
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 5_001) | 0);
});

test('a SYN-proxy pending flow: both lookups copy it without touching it, and say neither adopted nor sync', () => {
  const { t } = fresh();
  const now = t.now();
  t.setSync(true);
  const e = t.insert(
    newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, flags: L.F_SYNPROXY | L.F_SP_PENDING, now }),
  );
  t.touch(e, DIR_INPUT, TCPF_ACK, now); // its first touch (the cookie ACK)
  const o = t.base(e);
  const before = [...t.i32.subarray(o, o + L.ENTRY_WORDS)];
  const v = new FlowView();
  v.adopted = true;
  v.sync = true;
  assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_ACK, 0, now + 100_000), 4 /* FLOW_SP_PENDING */);
  assert.deepEqual([v.entry, v.adopted, v.sync, v.sp], [e, false, false, L.F_SYNPROXY | L.F_SP_PENDING]);
  v.adopted = true;
  v.sync = true;
  assert.equal(t.lookupOut(key(6, D, DP, C), v, TCPF_ACK, now + 100_000), true);
  assert.deepEqual([v.entry, v.adopted, v.sync], [e, false, false]);
  assert.deepEqual([...t.i32.subarray(o, o + L.ENTRY_WORDS)], before, 'state, timer and counts untouched');
  assert.equal(t.spPending(), 1);
});

test('out-chain walks count too', () => {
  const t = new ConnTable(ConnTable.create(256, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);
  const target = t.bucket(6, 0x0d000000, DP, P);
  const ds: number[] = [];
  for (let d = 0x0d000000; ds.length < CHAIN_ALARM + 1; d++) if (t.bucket(6, d, DP, P) === target) ds.push(d);
  ds.forEach((d, i) =>
    t.insert(newFlow({ proto: 6, caddr: C + i * 7919, cports: CP, vaddr: V, daddr: d, dports: DP, laddr: P, rs: 1, now: t.now() })),
  );
  t.chainWindow();
  const long0 = t.longWalks();
  assert.ok(findOut(t, 6, ds[0]!, DP, P) >= 0);
  assert.equal(t.longestWalk(), CHAIN_ALARM + 1);
  assert.equal(t.longWalks(), long0 + 1);
});

test('adopt counts inactive entries towards the upper threshold too', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const o = 3 * L.RS_WORDS;
  rs[o + L.RS_UTHRESH] = 2;
  const sh = (c: number, flags: number) =>
    t.putShadow(
      newFlow({
        proto: 6,
        caddr: c,
        cports: CP,
        vaddr: V,
        daddr: D,
        dports: DP,
        laddr: c,
        rs: 3,
        flags,
        state: 2,
        expires: (now + 500_000) | 0,
      }),
    );
  const a = sh(C, L.F_INACTIVE);
  const b = sh(C + 1, 0);
  assert.equal(t.adopt(a, now), true);
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0);
  assert.equal(t.adopt(b, now), true);
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE], rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD], [1, 1, L.RSF_OVERLOAD]);
});

test('findOut never returns a template; IPv6 templates differing only in their high words are two templates', () => {
  const { t } = fresh(16);
  const now = t.now();
  const tp = t.insert(template({ proto: 6, caddr: C, cports: 80, dports: 8080 << 16, rs: 1, ms: 1000, now }));
  assert.ok(tp >= 0);
  assert.equal(findOut(t, 6, D, 8080 << 16, 0), -1);
  assert.equal(t.outKeyInUse(newFlow({ proto: 6, daddr: D, dports: 8080 << 16, laddr: 0 })), false);
  const proto = 6 | L.PROTO_V6;
  const hi1 = [0x20010db8, 1, 2, 0xfd000096 | 0, 0, 0, 0, 0, 0, 0, 0, 0];
  const b1 = t.bucketIn(proto, 5, 80, 0x10, hi1);
  let hi2: number[] = [];
  for (let x = 3; ; x++) {
    hi2 = [...hi1];
    hi2[2] = x;
    if (t.bucketIn(proto, 5, 80, 0x10, hi2) === b1) break;
  }
  const mk = (hi: number[]) =>
    t.insert(
      newFlow({
        proto,
        caddr: 5,
        cports: 80,
        vaddr: 0x10,
        daddr: D,
        dports: 8080 << 16,
        laddr: 0,
        rs: 1,
        flags: L.F_TEMPLATE,
        templateMs: 1000,
        hi,
        now,
      }),
    );
  const g1 = mk(hi1);
  const g2 = mk(hi2);
  assert.ok(g1 >= 0 && g2 >= 0 && g1 !== g2);
  t.lockBucket(b1);
  assert.equal(t.findTemplate(b1, proto, 5, 80, 0x10, hi1), g1);
  assert.equal(t.findTemplate(b1, proto, 5, 80, 0x10, hi2), g2);
  t.unlockBucket(b1);
});

/**
 * Distinct values of f(0..63), each checked to be a bucket (an integer in [0, n)). 64 keys hashed
 * into 1024 buckets give ~62 distinct ones; 16 or fewer has a probability far below 1e-30 for
 * a keyed hash, and a hash that ignores the varied input gives exactly 1.
 */
function spread(f: (x: number) => number, n = 1024): number {
  const seen = new Set<number>();
  for (let x = 0; x < 64; x++) {
    const b = f(x);
    assert.ok(Number.isInteger(b) && b >= 0 && b < n, `bucket ${b} out of [0, ${n})`);
    seen.add(b);
  }
  return seen.size;
}

test('the bucket hash reads every key word and the protocol byte: keys differing in one of them spread over the buckets', () => {
  const { t } = fresh(1024);
  assert.ok(spread((x) => t.bucket(6, C + x, CP, V)) > 16, 'first address');
  assert.ok(spread((x) => t.bucket(6, C, CP + x, V)) > 16, 'ports');
  assert.ok(spread((x) => t.bucket(6, C, CP, V + x)) > 16, 'second address');
  assert.ok(spread((x) => t.bucket(x, C, CP, V)) > 16, 'protocol');
  assert.equal(t.bucket(6 | L.PROTO_V6, C, CP, V), t.bucket(6, C, CP, V), 'only the protocol byte is hashed');
  assert.equal(t.bucket(6, C, CP, V), t.bucket(6, C, CP, V), 'the same key, the same bucket');
  // IPv6: each of the 9 words and the protocol; the words outside [i1, i1+3) and [i2, i2+3) are not read.
  const w = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22];
  const at = (i: number, x: number) => w.map((v, j) => (j === i ? v + x : v));
  for (const i of [1, 2, 3, 7, 8, 9]) assert.ok(spread((x) => t.bucket6(6, at(i, x), 1, C, CP, 7, V)) > 16, `high word ${i}`);
  for (const i of [0, 4, 5, 6, 10, 11])
    assert.equal(
      spread((x) => t.bucket6(6, at(i, x), 1, C, CP, 7, V)),
      1,
      `word ${i} is not read`,
    );
  assert.ok(spread((x) => t.bucket6(6, w, 1, C + x, CP, 7, V)) > 16, 'IPv6 first address, low word');
  assert.ok(spread((x) => t.bucket6(6, w, 1, C, CP + x, 7, V)) > 16, 'IPv6 ports');
  assert.ok(spread((x) => t.bucket6(6, w, 1, C, CP, 7, V + x)) > 16, 'IPv6 second address, low word');
  assert.ok(spread((x) => t.bucket6(x, w, 1, C, CP, 7, V)) > 16, 'IPv6 protocol');
  assert.equal(t.bucket6(6 | L.PROTO_V6, w, 1, C, CP, 7, V), t.bucket6(6, w, 1, C, CP, 7, V));
  // An IPv4 key and the IPv6 key of the same low words are hashed differently (length in the last word).
  const z = new Array<number>(12).fill(0);
  assert.notEqual(t.bucket6(6, z, 0, C, CP, 3, V), t.bucket(6, C, CP, V), 'zero high words are still an IPv6 key');
  // bucketIn: IPv6 takes hi[0..2] and hi[3..5]; bucketOut hi[6..8] and hi[9..11]; without hi, or IPv4, the IPv4 hash.
  const v6 = 6 | L.PROTO_V6;
  assert.equal(t.bucketIn(v6, C, CP, V, w), t.bucket6(v6, w, 0, C, CP, 3, V));
  assert.equal(t.bucketOut(v6, D, DP, P, w), t.bucket6(v6, w, 6, D, DP, 9, P));
  assert.equal(t.bucketIn(v6, C, CP, V, null), t.bucket(v6, C, CP, V));
  assert.equal(t.bucketOut(v6, D, DP, P, null), t.bucket(v6, D, DP, P));
  assert.equal(t.bucketIn(6, C, CP, V, w), t.bucket(6, C, CP, V), 'an IPv4 key ignores hi');
  assert.equal(t.bucketOut(6, D, DP, P, w), t.bucket(6, D, DP, P));
  for (const i of [0, 1, 2, 3, 4, 5]) {
    assert.ok(spread((x) => t.bucketIn(v6, C, CP, V, at(i, x))) > 16, `bucketIn hi[${i}]`);
    assert.equal(
      spread((x) => t.bucketOut(v6, D, DP, P, at(i, x))),
      1,
      `bucketOut ignores hi[${i}]`,
    );
  }
  for (const i of [6, 7, 8, 9, 10, 11]) {
    assert.ok(spread((x) => t.bucketOut(v6, D, DP, P, at(i, x))) > 16, `bucketOut hi[${i}]`);
    assert.equal(
      spread((x) => t.bucketIn(v6, C, CP, V, at(i, x))),
      1,
      `bucketIn ignores hi[${i}]`,
    );
  }
  // Two tables have two keys: a key's bucket in one says nothing about the other.
  const { t: u } = fresh(1024);
  let same = 0;
  for (let x = 0; x < 64; x++) if (u.bucket(6, C + x, CP, V) === t.bucket(6, C + x, CP, V)) same++;
  assert.ok(same < 16, `${same} of 64 keys in the same bucket in two tables`);
});

test('per-source counter slots: keyed by the IPv4 address, or by the /64 of an IPv6 client (both its high words)', () => {
  const { t } = fresh(1024);
  const n = 1024; // one counter per entry
  assert.ok(spread((x) => t.sourceSlot(false, C + x, 0, 0), n) > 16, 'IPv4 address');
  assert.equal(
    spread((x) => t.sourceSlot(false, C, x, x), n),
    1,
    'IPv4: the high words are not read',
  );
  assert.ok(spread((x) => t.sourceSlot(true, C, 0x20010db8 + x, 7), n) > 16, 'IPv6: first high word');
  assert.ok(spread((x) => t.sourceSlot(true, C, 0x20010db8, 7 + x), n) > 16, 'IPv6: second high word');
  assert.equal(
    spread((x) => t.sourceSlot(true, C + x, 0x20010db8, 7), n),
    1,
    'IPv6: the low word is not read',
  );
  // The two high words are not symmetric: (h0, h1) and (h1, h0) are two /64s.
  let swapped = 0;
  for (let x = 0; x < 64; x++)
    if (t.sourceSlot(true, 0, 0x20010db8 + x, 0x100 + x * 3) === t.sourceSlot(true, 0, 0x100 + x * 3, 0x20010db8 + x)) swapped++;
  assert.ok(swapped < 16, `${swapped} of 64 swapped /64s share a slot`);
});

test('a lock word held too long throws (lockStuck) instead of hanging its thread; one freed meanwhile is taken', async () => {
  assert.equal(LOCK_STUCK_MS, 5000);
  const region = createRealServerRegion(8);
  const sab = ConnTable.create(64, timeouts);
  const t = new ConnTable(sab, region, L.OWNER_CONTROL, 100);
  const a = t.i32;
  const locks = L.bucketLocksOffset(64);
  a[locks + 5] = 7;
  let t0 = Date.now();
  assert.throws(() => t.lockBucket(5), new RegExp(`lock word ${locks + 5} held by owner 7 for 100 ms; owner ${L.OWNER_CONTROL} gives up`));
  let took = Date.now() - t0;
  assert.ok(took >= 100 && took < 3000, `gave up after ${took} ms`);
  assert.equal(a[locks + 5], 7, 'a stuck lock is not taken');
  a[locks + 5] = 0;
  // An entry lock word (touch) and the allocation lock (insert) likewise.
  const e = t.insert(conn(6, C, 1, t.now()));
  assert.ok(e >= 0);
  a[t.base(e) + L.E_LOCK] = 8;
  t0 = Date.now();
  assert.throws(() => t.touch(e, DIR_INPUT, TCPF_SYN, t.now()), /held by owner 8 for 100 ms/);
  took = Date.now() - t0;
  assert.ok(took >= 100 && took < 3000, `gave up after ${took} ms`);
  a[L.H_ALLOC_LOCK] = 9;
  assert.throws(() => t.insert(conn(6, C + 1, 1, t.now())), /held by owner 9 for 100 ms/);
  // Held by another thread for 100 ms: the spinner waits and takes it.
  a[L.H_ALLOC_LOCK] = 0;
  a[locks + 5] = 0;
  Atomics.store(a, locks + 6, 0);
  const w = new Worker(
    `const { workerData: d, parentPort } = require('node:worker_threads');
     const a = new Int32Array(d.sab);
     Atomics.store(a, d.i, 42);
     parentPort.postMessage(0);
     Atomics.wait(a, d.go, 0); // until the main thread is about to spin
     const until = Date.now() + 50;
     while (Date.now() < until);
     Atomics.store(a, d.i, 0);`,
    { eval: true, workerData: { sab, i: locks + 6, go: locks + 7 } },
  );
  await new Promise((r) => w.once('message', r));
  assert.equal(Atomics.load(a, locks + 6), 42, 'held by the worker');
  const patient = new ConnTable(sab, region, 2);
  t0 = Date.now();
  Atomics.store(a, locks + 7, 1);
  Atomics.notify(a, locks + 7);
  patient.lockBucket(6);
  assert.equal(a[locks + 6], 2, 'taken once freed');
  assert.ok(Date.now() - t0 < 3000);
  patient.unlockBucket(6);
  a[locks + 7] = 0;
  await new Promise((r) => w.once('exit', r));
  // The default is LOCK_STUCK_MS (not waited for here: every mutant run of this file would wait too).
  assert.equal((new ConnTable(sab, region, 3) as unknown as { stuckMs: number }).stuckMs, LOCK_STUCK_MS);
});

test('a chain whose links loop throws (chainLoop) on a lookup, an insert and a removal instead of walking forever', () => {
  const t = new ConnTable(ConnTable.create(64, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);
  const a = t.i32;
  const now = t.now();
  const keys = collidingIn(t, 3);
  const e0 = t.insert(newFlow({ proto: 6, caddr: keys[0]!, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: keys[0]!, rs: 1, now }));
  // e1's server→client key on another out-chain than e0's.
  let d1 = D + 1;
  while (t.bucket(6, d1, DP, keys[1]!) === t.bucket(6, D, DP, keys[0]!)) d1++;
  const e1 = t.insert(newFlow({ proto: 6, caddr: keys[1]!, cports: CP, vaddr: V, daddr: d1, dports: DP, laddr: keys[1]!, rs: 1, now }));
  assert.ok(e0 >= 0 && e1 >= 0);
  const b = t.bucket(6, keys[0]!, CP, V);
  const head = L.inHeadsOffset() + b;
  assert.equal(a[head], e1 + 1, 'the newest entry first');
  assert.equal(a[t.base(e1) + L.E_NEXT_IN], e0 + 1);
  // A chain of exactly 64 links (every entry of the table) is walked; e0's link back to e1 loops.
  assert.equal(findIn(t, 6, keys[2]!, CP, V), -1);
  a[t.base(e0) + L.E_NEXT_IN] = e1 + 1;
  const loops = new RegExp(`chain at word ${head} has more links than the table has entries \\(64\\): it loops`);
  assert.throws(() => findIn(t, 6, keys[2]!, CP, V), loops);
  t.unlockBucket(b);
  assert.throws(() => {
    const bb = t.bucket(6, keys[2]!, CP, V);
    t.lockBucket(bb);
    try {
      t.findTemplate(bb, 6, keys[2]!, CP, V);
    } finally {
      t.unlockBucket(bb);
    }
  }, loops);
  assert.throws(
    () => t.insert(newFlow({ proto: 6, caddr: keys[2]!, cports: CP, vaddr: V, daddr: D + 2, dports: DP, laddr: keys[2]!, rs: 1, now })),
    loops,
  );
  for (let i = 0; i < 64; i++) a[L.bucketLocksOffset(64) + i] = 0;
  // remove() of an entry of that bucket that is not on the chain walks it to its end: it loops.
  const f = 40;
  const o = t.base(f);
  a[o + L.E_PROTO] = 6;
  a[o + L.E_CADDR] = keys[2]!;
  a[o + L.E_CPORTS] = CP;
  a[o + L.E_VADDR] = V;
  a[o + L.E_FLAGS] = L.F_IN_USE;
  assert.throws(() => t.remove(f, false, now), loops);
  for (let i = 0; i < 64; i++) a[L.bucketLocksOffset(64) + i] = 0;
  // Out-chains: findOut and the insert's chain length.
  a[t.base(e0) + L.E_NEXT_IN] = 0;
  a[o + L.E_FLAGS] = 0;
  const bo = t.bucket(6, D, DP, keys[0]!);
  const outHead = L.outHeadsOffset(64) + bo;
  assert.equal(a[outHead], e0 + 1);
  a[t.base(e0) + L.E_NEXT_OUT] = e0 + 1;
  const outLoops = new RegExp(`chain at word ${outHead} has more links than the table has entries \\(64\\): it loops`);
  assert.throws(() => t.findOut(bo, 6, D, DP, 0x0c0c0c0c), outLoops, 'a miss walks the whole chain');
  for (let i = 0; i < 64; i++) a[L.bucketLocksOffset(64) + i] = 0;
  assert.throws(
    () => t.insert(newFlow({ proto: 6, caddr: C + 99, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: keys[0]!, rs: 1, now })),
    outLoops,
  );
});

test('create() names the capacity it refuses; two tables have two source keys', () => {
  assert.throws(() => ConnTable.create(24, timeouts), /^RangeError: connection table capacity must be a power of two ≥ 16, got 24$/);
  const { t } = fresh(1024);
  const { t: u } = fresh(1024);
  let same = 0;
  for (let x = 0; x < 64; x++) if (t.sourceSlot(false, C + x, 0, 0) === u.sourceSlot(false, C + x, 0, 0)) same++;
  assert.ok(same < 16, `${same} of 64 sources on the same counter in two tables`);
});

test('every view of a table hashes sources alike, whatever the defense words say when it is made', () => {
  const region = createRealServerRegion(8);
  const sab = ConnTable.create(1024, timeouts);
  const first = new ConnTable(sab, region, L.OWNER_CONTROL);
  // What defense.ts and the config change at run time, in the header words next to the source key.
  first.i32[L.H_SRC_LIMIT] = 5;
  first.i32[L.H_DROP_RATE] = 10;
  first.i32[L.H_SECURE_TCP_MS] = 3000;
  const later = new ConnTable(sab, region, 2);
  for (let x = 0; x < 64; x++) {
    assert.equal(later.sourceSlot(false, C + x, 0, 0), first.sourceSlot(false, C + x, 0, 0));
    assert.equal(later.sourceSlot(true, C, 0x20010db8 + x, x), first.sourceSlot(true, C, 0x20010db8 + x, x));
  }
});

test('releaseLocksOf looks at lock words only: a source counter after the last entry equal to the owner id stays', () => {
  const { t } = fresh(64);
  const a = t.i32;
  const src = L.sourceCountersOffset(64);
  a[src] = 7;
  a[src + 63] = 7;
  a[t.base(63) + L.E_LOCK] = 7;
  a[L.bucketLocksOffset(64) + 63] = 7;
  assert.equal(t.releaseLocksOf(7), 2);
  assert.deepEqual([a[src], a[src + 63], a[t.base(63) + L.E_LOCK], a[L.bucketLocksOffset(64) + 63]], [7, 7, 0, 0]);
});

test('an insert takes its two bucket locks lower index first (one order for every thread: no deadlock)', () => {
  // Which is taken first shows when the other is held: the first is then held, the second not.
  for (const lowerIn of [true, false]) {
    for (const held of ['lower', 'higher'] as const) {
      const sab = ConnTable.create(64, timeouts);
      const t = new ConnTable(sab, createRealServerRegion(8), L.OWNER_CONTROL, 50);
      let c = C;
      let bi = 0;
      let bo = 0;
      for (; ; c++) {
        bi = t.bucket(6, c, CP, V);
        bo = t.bucket(6, D, DP, c);
        if (bi !== bo && bi < bo === lowerIn) break;
      }
      const lo = Math.min(bi, bo);
      const hi = Math.max(bi, bo);
      const locks = L.bucketLocksOffset(64);
      t.i32[locks + (held === 'lower' ? lo : hi)] = 7;
      assert.throws(
        () => t.insert(newFlow({ proto: 6, caddr: c, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: c, rs: 1, now: t.now() })),
        /held by owner 7/,
        `in-bucket ${lowerIn ? 'lower' : 'higher'}, ${held} held`,
      );
      if (held === 'lower') assert.equal(t.i32[locks + hi], 0, `in-bucket ${lowerIn ? 'lower' : 'higher'}: the higher one not taken first`);
      else assert.equal(t.i32[locks + lo], L.OWNER_CONTROL, `in-bucket ${lowerIn ? 'lower' : 'higher'}: the lower one taken first`);
    }
  }
});

test('a held-packet list whose links loop throws (holdLoop) when given back instead of freeing forever', () => {
  const { t } = fresh(64);
  const a = t.i32;
  const sh = L.holdOffset(64) + L.HOLD_HDR_WORDS;
  a[sh + L.HS_NEXT] = 2;
  a[sh + L.HOLD_SLOT_WORDS + L.HS_NEXT] = 1;
  assert.throws(
    () => t.holdRelease(1),
    new RegExp(`the held-packet list from slot 0 has more links than the area has slots \\(${L.HOLD_SLOTS}\\): it loops`),
  );
});

/** A SYN-proxied flow (F_SYNPROXY; pending too with `pending`) of client c, its SP words from a record or a handshake. */
function spFlow(t: ConnTable, c: number, o: { pending?: boolean; proto?: number; cports?: number; vaddr?: number; hi?: number[] } = {}) {
  const hs = new Int32Array(L.SP_WORDS);
  for (let i = 0; i < L.SP_HELD; i++) hs[i] = 1000 * (c & 0xff) + i + 1;
  const r = newFlow({
    proto: o.proto ?? 6,
    caddr: c,
    cports: o.cports ?? CP,
    vaddr: o.vaddr ?? V,
    daddr: D,
    dports: DP,
    laddr: c,
    rs: 1,
    flags: o.pending ? L.F_SYNPROXY | L.F_SP_PENDING : 0,
    now: t.now(),
    hi: o.hi ?? null,
  });
  if (o.pending) r.spHandshake = hs;
  else {
    r.sp = 1;
    r.spDelta = 11 * (c & 0xff);
    r.spTsDelta = 13 * (c & 0xff);
    r.spOpts = 7;
  }
  const e = t.insert(r);
  assert.ok(e >= 0 && r.created);
  const v = new FlowView();
  const k = key(o.proto ?? 6, c, o.cports ?? CP, o.vaddr ?? V);
  if (o.hi) for (let i = 0; i < 6; i++) k.hi[i] = o.hi[i]!;
  assert.ok(t.readFlow(k, false, v));
  assert.equal(v.entry, e);
  return { e, v, hs };
}

test('a view of a flow whose slot was freed, or reused by another flow differing in any key part, is refused by the SYN proxy calls', () => {
  const { t } = fresh(64);
  const w = new Int32Array(L.SP_WORDS);
  const b = new Uint8Array(64);
  const hi = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
  const variants: { name: string; o: Parameters<typeof spFlow>[2]; c?: number }[] = [
    { name: 'another client', o: {}, c: C + 1 },
    { name: 'another protocol', o: { proto: 132 } },
    { name: 'other client ports', o: { cports: CP + 1 } },
    { name: 'another virtual address', o: { vaddr: V + 1 } },
  ];
  for (const x of variants) {
    const { e, v } = spFlow(t, C, { pending: true });
    assert.equal(t.spRead(v, w), true, 'the live flow');
    assert.equal(t.remove(e, false, t.now()), true);
    assert.equal(t.spRead(v, w), false, `${x.name}: freed`);
    assert.equal(t.spBegin(e, v, 3000, t.now()), false, `${x.name}: freed`);
    assert.equal(t.spHold(v, true, b, 0, 60, 20, w, 0, t.now()), -1, `${x.name}: freed`);
    assert.equal(t.spComplete(v, 1, 2, 7, 0, w), -1, `${x.name}: freed`);
    const other = spFlow(t, x.c ?? C, { ...x.o, pending: true });
    assert.equal(other.e, e, 'the slot is reused');
    assert.equal(t.spRead(v, w), false, x.name);
    assert.equal(t.spBegin(e, v, 3000, t.now()), false, x.name);
    assert.equal(t.spHold(v, true, b, 0, 60, 20, w, 0, t.now()), -1, x.name);
    assert.equal(t.spComplete(v, 1, 2, 7, (other.hs[L.SP_ISN]! + 1) | 0, w), -1, x.name);
    assert.equal(t.holdUsed(), 0);
    assert.equal(t.remove(e, false, t.now()), true);
  }
  // A template in the slot; an IPv6 flow of other high words.
  const { e, v } = spFlow(t, C, { pending: true });
  t.remove(e, false, t.now());
  assert.equal(t.insert(template({ proto: 6, caddr: C, cports: CP, dports: DP, rs: 1, ms: 1000, now: t.now() })), e);
  assert.equal(t.spRead(v, w), false, 'a template');
  t.remove(e, false, t.now());
  const a6 = spFlow(t, C, { pending: true, proto: 6 | L.PROTO_V6, hi });
  assert.equal(t.spRead(a6.v, w), true);
  for (const i of [0, 1, 2, 3, 4, 5]) {
    a6.v.hi[i]! += 1;
    assert.equal(t.spRead(a6.v, w), false, `high word ${i}`);
    a6.v.hi[i]! -= 1;
  }
  assert.equal(t.spRead(a6.v, w), true);
  // Not SYN-proxied at all: spRead says so, spComplete −1.
  t.remove(a6.e, false, t.now());
  const plain = t.insert(conn(6, C + 5, 1, t.now()));
  const pv = new FlowView();
  assert.ok(t.readFlow(key(6, C + 5, CP, V), false, pv));
  assert.equal(pv.entry, plain);
  assert.equal(t.spRead(pv, w), false);
  assert.equal(t.spComplete(pv, 1, 2, 7, 0, w), -1);
  // An IPv4 view whose high words are left from an IPv6 flow: they are not compared.
  const q = spFlow(t, C + 6);
  q.v.hi.fill(9);
  assert.equal(t.spRead(q.v, w), true, 'IPv4: high words not compared');
  assert.equal(t.spHold(pv, true, b, 0, 60, 20, w, 0, t.now()), -1, 'not pending');
  assert.equal(t.spBegin(plain, pv, 3000, t.now()), false, 'not pending');
});

test('a pending flow at entry > 0: spBegin, three packets held in order and a fourth refused, our SYN due again, completion', () => {
  const { t } = fresh(64);
  t.insert(conn(17, C + 9, 1, t.now())); // entry 0 taken: SP words at e × SP_WORDS, e > 0
  const hi = [0x20010db8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
  const { e, v, hs } = spFlow(t, C, { pending: true, proto: 6 | L.PROTO_V6, hi });
  assert.ok(e > 0);
  assert.deepEqual([...v.hi], hi, 'the view carries the twelve high words');
  // Another pending flow's packet takes hold slot 0: this flow's list starts further on.
  const z = spFlow(t, C + 7, { pending: true });
  const worker = new ConnTable(t.sab, createRealServerRegion(8), 4);
  assert.equal(worker.spHold(z.v, true, new Uint8Array(40), 0, 40, 20, new Int32Array(L.SP_WORDS), 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(t.i32[L.holdOffset(64) + L.HOLD_HDR_WORDS + L.HS_OWNER], 0, 'attached to its flow: no owner');
  const o = t.base(e);
  const now = t.now();
  assert.equal(t.spBegin(e, v, 3000, now), true);
  assert.equal(t.i32[o + L.E_EXPIRES], (now + 3000) | 0, 'the pending timer');
  const w = new Int32Array(L.SP_WORDS);
  assert.equal(t.spRead(v, w), true);
  assert.deepEqual([...w.subarray(0, L.SP_HELD)], [...hs.subarray(0, L.SP_HELD)], 'the handshake, in its own words');
  // Packets of 60, 2048 (a full slot) and 100 bytes held; a fourth refused; the resend only when due.
  const lens = [60, L.HOLD_SLOT_BYTES, 100, 80];
  const src = t.sourceSlot(true, C, hi[0]!, hi[1]!) & (L.HOLD_SOURCES - 1);
  const res: number[] = [];
  for (let i = 0; i < 4; i++) {
    const b = new Uint8Array(L.HOLD_SLOT_BYTES + 8).fill(0x40 + i);
    res.push(t.spHold(v, true, b, 4, lens[i]!, 40, w, 10_000, (now + i) | 0));
  }
  assert.deepEqual(res, [SPH_HELD, SPH_HELD, SPH_HELD, SPH_REFUSED], 'three held, the fourth refused');
  assert.equal(t.holdUsed(), 4);
  const zSrc = t.sourceSlot(false, C + 7, 0, 0) & (L.HOLD_SOURCES - 1); // the other flow's (may be the same counter)
  assert.equal(t.holdAtSource(src), 3 + (zSrc === src ? 1 : 0), "counted for the client's /64");
  const held = t.i32[L.synproxyOffset(64) + e * L.SP_WORDS + L.SP_HELD]!;
  assert.equal(held >>> 16, 3, 'the count');
  let ref = held & 0xffff;
  for (let i = 0; i < 3; i++) {
    assert.ok(ref > 0, `packet ${i} on the list`);
    assert.deepEqual([t.holdLen(ref - 1), t.holdL4(ref - 1)], [lens[i], 40]);
    const at = t.holdAt(ref - 1);
    assert.equal(t.holdBytes[at], 0x40 + i);
    assert.equal(t.holdBytes[at + lens[i]! - 1], 0x40 + i);
    ref = t.holdNext(ref - 1);
  }
  assert.equal(ref, 0, 'three on the list');
  w.fill(0);
  const syn = hs[L.SP_SYN_AT]!; // when our SYN went (the handshake's word)
  assert.equal(t.spHold(v, false, new Uint8Array(60), 0, 60, 20, w, 50, syn + 49), 0, 'not due yet');
  assert.equal(w[L.SP_ISN], 0, 'w untouched');
  assert.equal(t.spHold(v, false, new Uint8Array(60), 0, 60, 20, w, 50, syn + 50), SPH_RESEND);
  assert.deepEqual([...w.subarray(0, L.SP_SYN_AT)], [...hs.subarray(0, L.SP_SYN_AT)], 'w gets the SP words');
  assert.equal(w[L.SP_SYN_AT], syn + 50, 'the resend time, now');
  assert.equal(w[L.SP_HELD], held, 'and the held list');
  assert.equal(t.spHold(v, false, new Uint8Array(60), 0, 60, 20, w, 50, syn + 99), 0, 'counted from the last resend');
  // The server's SYN-ACK: a wrong ack changes nothing; ours completes and gives the held list.
  assert.equal(t.spComplete(v, 5000, 6000, 3, hs[L.SP_ISN]!, w), -3);
  assert.equal(t.spPending(), 2, 'this flow and the other');
  const first = t.spComplete(v, 5000, 6000, 3, (hs[L.SP_ISN]! + 1) | 0, w);
  assert.equal(first, held & 0xffff);
  assert.equal(w[L.SP_HELD], held, 'w: the words as they were');
  assert.equal(t.spPending(), 1);
  assert.equal(t.spComplete(v, 5000, 6000, 3, (hs[L.SP_ISN]! + 1) | 0, w), -2, 'a retransmitted SYN-ACK');
  assert.equal(t.spRead(v, w), true);
  assert.equal(w[L.SP_HELD], 0, 'the list is off the flow');
  assert.equal(w[L.SP_DELTA], (hs[L.SP_COOKIE]! - 5000) | 0);
  assert.equal(w[L.SP_TSDELTA], (hs[L.SP_OURTS]! - 6000) | 0);
  assert.equal(t.spBegin(e, v, 9000, now), false, 'no longer pending');
  assert.equal(t.i32[o + L.E_EXPIRES], (now + 3000) | 0, 'its timer left alone');
  assert.equal(t.spHold(v, true, new Uint8Array(60), 0, 60, 20, w, 0, now), -1, 'no longer pending');
  // Given back: the area and the source counter are empty again.
  t.holdRelease(first);
  assert.equal(t.holdUsed(), 1, "the other flow's");
  assert.equal(t.holdAtSource(src), zSrc === src ? 1 : 0);
});

test('a pending flow whose held list loops throws (holdLoop) on the next packet instead of walking forever', () => {
  const { t } = fresh(64);
  const { e, v } = spFlow(t, C, { pending: true });
  const w = new Int32Array(L.SP_WORDS);
  assert.equal(t.spHold(v, true, new Uint8Array(40), 0, 40, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  const sw = L.synproxyOffset(64) + e * L.SP_WORDS + L.SP_HELD;
  const first = t.i32[sw]! & 0xffff;
  t.i32[L.holdOffset(64) + L.HOLD_HDR_WORDS + (first - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT] = first;
  assert.throws(
    () => t.spHold(v, true, new Uint8Array(40), 0, 40, 20, w, 0x7fffffff, t.now()),
    new RegExp(`the held-packet list from slot ${first - 1} has more links than the area has slots`),
  );
});

test('the hold area holds HOLD_SLOTS packets at most: the next one is refused (not for its source)', () => {
  const { t } = fresh(256);
  const w = new Int32Array(L.SP_WORDS);
  const pkt = new Uint8Array(40);
  let held = 0;
  for (let i = 0; held < L.HOLD_SLOTS; i++) {
    const { v } = spFlow(t, C + 0x100 * (i + 1), { pending: true });
    for (let k = 0; k < L.HOLD_PER_FLOW && held < L.HOLD_SLOTS; k++, held++)
      assert.equal(t.spHold(v, true, pkt, 0, 40, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  }
  assert.equal(t.holdUsed(), L.HOLD_SLOTS);
  const { v } = spFlow(t, 0x0c000001, { pending: true });
  const before = [...t.i32];
  assert.equal(t.spHold(v, true, pkt, 0, 40, 20, w, 0x7fffffff, t.now()), SPH_REFUSED);
  assert.deepEqual([...t.i32], before, 'nothing changed');
});

test('templateFor with expire_quiescent: a template of a server with weight is kept; insertTemplate into a full table changes nothing', () => {
  const { t } = fresh(16);
  const now = t.now();
  const g = t.insert(template({ proto: 6, caddr: C, cports: 80, dports: 8080 << 16, rs: 2, ms: 1000, now }));
  const v = new FlowView();
  assert.equal(t.templateFor(key(6, C, 80, V), v, true), g, 'weight 1, expire_quiescent on');
  t.unreserve(g);
  for (let i = 1; t.count() < 16; i++) t.insert(conn(17, C + i, 1, now));
  const before = [...t.i32];
  assert.equal(t.insertTemplate(template({ proto: 6, caddr: C + 99, cports: 80, dports: 8080 << 16, rs: 2, ms: 1000, now }), v), -1);
  assert.deepEqual([...t.i32], before, 'nothing changed');
});

test('a SYN-proxied flow past its handshake in TIME_WAIT or CLOSE is reused by a SYN even while a template controls it; ESTABLISHED is not', () => {
  for (const [st, want] of [
    [TCP_TIME_WAIT, FLOW_REUSE],
    [TCP_CLOSE, FLOW_REUSE],
    [TCP_ESTABLISHED, FLOW_HIT],
  ] as const) {
    const { t } = fresh(64);
    const now = t.now();
    const g = t.insert(template({ proto: 6, caddr: C, cports: 80, dports: 8080 << 16, rs: 1, ms: 60_000, now }));
    const { e } = spFlow(t, C);
    t.control(e, g, now);
    t.i32[t.base(e) + L.E_STATE] = st;
    const v = new FlowView();
    assert.equal(t.lookupIn(key(6, C, CP, V), v, TCPF_SYN, LOOKUP_NEW, now), want, `state ${st}`);
  }
});

test('a SYN-proxied record at entry > 0: its words reach the view, spRecordWords and spRead; a reused slot has no stale words', () => {
  const { t } = fresh(64);
  t.insert(conn(17, C + 9, 1, t.now()));
  const p = spFlow(t, C + 1, { pending: true });
  assert.ok(p.e > 0);
  t.remove(p.e, false, t.now());
  const { e, v } = spFlow(t, C + 2);
  assert.equal(e, p.e, 'the pending flow slot reused');
  assert.deepEqual([v.spDelta, v.spTsDelta, v.spOpts], [44, 52, 7]);
  assert.deepEqual(t.spRecordWords(e), [44, 52, 7]);
  const w = new Int32Array(L.SP_WORDS).fill(-1);
  assert.equal(t.spRead(v, w), true);
  const want = new Int32Array(L.SP_WORDS);
  want[L.SP_DELTA] = 44;
  want[L.SP_TSDELTA] = 52;
  want[L.SP_OPTS] = 7;
  assert.deepEqual([...w], [...want], 'the other words 0');
});

test("holdReclaim gives back exactly the slots a dead worker had in hand, leaves attached and others' slots, and recounts the area", () => {
  const { t, rs } = fresh(64);
  const region = rs.buffer as SharedArrayBuffer;
  const dead = new ConnTable(t.sab, region, 5);
  const alive = new ConnTable(t.sab, region, 6);
  const a = t.i32;
  const h = L.holdOffset(64);
  const sh = (slot: number) => h + L.HOLD_HDR_WORDS + slot * L.HOLD_SLOT_WORDS;
  const w = new Int32Array(L.SP_WORDS);
  const pkt = new Uint8Array(100);
  pkt[16] = 5; // a held packet's bytes may look like an owner id
  t.insert(conn(17, C + 30, 1, t.now())); // entry 0 taken
  // P: pending, two packets held by the dead worker (attached: no owner).
  const P = spFlow(t, C + 1, { pending: true });
  assert.equal(dead.spHold(P.v, true, pkt, 0, 100, 20, w, 0x7fffffff, t.now()) & SPH_HELD, SPH_HELD);
  assert.equal(dead.spHold(P.v, true, pkt, 0, 100, 20, w, 0x7fffffff, t.now()) & SPH_HELD, SPH_HELD);
  // R: pending, one packet attached by the dead worker but not yet disowned (its owner still 5).
  const R = spFlow(t, C + 2, { pending: true });
  assert.equal(dead.spHold(R.v, true, pkt, 0, 100, 20, w, 0x7fffffff, t.now()) & SPH_HELD, SPH_HELD);
  const rSlot = (a[L.synproxyOffset(64) + R.e * L.SP_WORDS + L.SP_HELD]! & 0xffff) - 1;
  a[sh(rSlot) + L.HS_OWNER] = 5;
  // Q: its server answered; the dead worker took its one packet off the flow (in hand) and died.
  const Q = spFlow(t, C + 3, { pending: true });
  assert.equal(dead.spHold(Q.v, true, pkt, 0, 100, 20, w, 0x7fffffff, t.now()) & SPH_HELD, SPH_HELD);
  const qFirst = dead.spComplete(Q.v, 1, 2, 3, (Q.hs[L.SP_ISN]! + 1) | 0, w);
  assert.ok(qFirst > 0);
  assert.equal(a[sh(qFirst - 1) + L.HS_OWNER], 5, 'detached: in the dead worker’s hands');
  // One slot taken by the dead worker and one by a live one, on no list.
  const src = t.sourceSlot(false, C + 1, 0, 0) & (L.HOLD_SOURCES - 1);
  const takenDead = (dead as unknown as { holdAlloc: (s: number) => number }).holdAlloc(src);
  const takenAlive = (alive as unknown as { holdAlloc: (s: number) => number }).holdAlloc(src);
  assert.ok(takenDead >= 0 && takenAlive >= 0);
  assert.equal(t.holdUsed(), 6);
  let counted = 0;
  for (let s = 0; s < L.HOLD_SOURCES; s++) counted += t.holdAtSource(s);
  assert.equal(counted, 6, 'each slot counted once, at its source');
  const pFirst = (a[L.synproxyOffset(64) + P.e * L.SP_WORDS + L.SP_HELD]! & 0xffff) - 1;
  assert.deepEqual([a[sh(pFirst) + L.HS_OWNER], a[sh(a[sh(pFirst) + L.HS_NEXT]! - 1) + L.HS_OWNER]], [0, 0], "P's slots: no owner");
  // Counters gone wrong meanwhile are recounted.
  a[h + L.HOLD_USED] = 99;
  a[h + L.HOLD_SRC_BASE + src] = 42;
  assert.equal(t.holdReclaim(5), 2, "Q's packet and the slot taken");
  assert.equal(t.holdUsed(), 4, "P's two, R's one, the live worker's one");
  // Expected per counter: P's two and the live worker's slot (P's source), R's one; Q's given back
  // (sources may share a counter: the keyed hash is folded to HOLD_SOURCES).
  const want = new Map<number, number>();
  const srcOf = (c: number) => t.sourceSlot(false, c, 0, 0) & (L.HOLD_SOURCES - 1);
  for (const [c, n] of [
    [C + 1, 3],
    [C + 2, 1],
    [C + 3, 0],
  ] as const)
    want.set(srcOf(c), (want.get(srcOf(c)) ?? 0) + n);
  for (const [s, n] of want) assert.equal(t.holdAtSource(s), n, `source counter ${s}`);
  assert.equal(a[sh(rSlot) + L.HS_OWNER], 0, "R's slot disowned, still on R's list");
  assert.equal(a[sh(takenAlive) + L.HS_OWNER], 6, "the live worker's slot stays in its hands");
  assert.equal(a[L.synproxyOffset(64) + R.e * L.SP_WORDS + L.SP_HELD]! & 0xffff, rSlot + 1);
  // The two given back are on the free list: every slot is free, held or in the live worker's hands.
  let free = 0;
  const seen = new Set<number>();
  for (let ref = a[h + L.HOLD_FREE]!; ref !== 0 && free <= L.HOLD_SLOTS; ref = a[sh(ref - 1) + L.HS_NEXT]!) {
    seen.add(ref - 1);
    free++;
  }
  assert.equal(free, L.HOLD_SLOTS - 4);
  assert.ok(seen.has(qFirst - 1) && seen.has(takenDead), 'both on the free list');
  assert.ok(!seen.has(rSlot) && !seen.has(takenAlive));
  for (let i = 0; i < L.HOLD_SLOTS; i++) assert.notEqual(a[sh(i) + L.HS_OWNER], 5, `slot ${i} still the dead worker's`);
  assert.equal(t.holdBytes[t.holdAt(pFirst) + 16], 5, "P's packet bytes intact");
  assert.equal(t.holdReclaim(5), 0, 'nothing left');
  assert.equal(t.holdUsed(), 4);
});

// ── The held-packet area's neighbours (test/mutation/table-survivors.md, "Open" of 745–1241) ──

/** Word offset of hold slot `slot`'s header in a table of `capacity`. */
const slotHdr = (capacity: number, slot: number) => L.holdOffset(capacity) + L.HOLD_HDR_WORDS + slot * L.HOLD_SLOT_WORDS;
/** Entry e's SP_HELD word: its first held slot + 1 (low 16 bits), the count << 16. */
const heldWord = (t: ConnTable, capacity: number, e: number) => t.i32[L.synproxyOffset(capacity) + e * L.SP_WORDS + L.SP_HELD]!;
/** The sum of all HOLD_SOURCES per-source counters. */
function sourceTotal(t: ConnTable): number {
  let n = 0;
  for (let s = 0; s < L.HOLD_SOURCES; s++) n += t.holdAtSource(s);
  return n;
}
/** The slots on the free list (0-based), walked from HOLD_FREE. */
function freeSlots(t: ConnTable, capacity: number): Set<number> {
  const a = t.i32;
  const seen = new Set<number>();
  for (
    let ref = a[L.holdOffset(capacity) + L.HOLD_FREE]!;
    ref !== 0 && seen.size <= L.HOLD_SLOTS;
    ref = a[slotHdr(capacity, ref - 1) + L.HS_NEXT]!
  )
    seen.add(ref - 1);
  return seen;
}
/** The first IPv4 client from 0x0b000001 on counted at held-slot source counter `counter`. */
function clientAt(t: ConnTable, counter: number): number {
  for (let c = 0x0b000001; c < 0x0b100000; c++) if ((t.sourceSlot(false, c, 0, 0) & (L.HOLD_SOURCES - 1)) === counter) return c;
  throw new Error(`no client at source counter ${counter}`);
}

test("a held packet of exactly HOLD_SLOT_BYTES fills its slot and not a byte more: the next slot's packet keeps its first byte", () => {
  const { t } = fresh(64);
  const w = new Int32Array(L.SP_WORDS);
  const A = spFlow(t, C + 1, { pending: true });
  const B = spFlow(t, C + 2, { pending: true });
  assert.equal(t.spHold(A.v, true, new Uint8Array(40).fill(0x11), 0, 40, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(t.spHold(B.v, true, new Uint8Array(40).fill(0x22), 0, 40, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.deepEqual([heldWord(t, 64, A.e) & 0xffff, heldWord(t, 64, B.e) & 0xffff], [1, 2], 'A in slot 0, B in slot 1');
  // A's server answers: its packet is replayed and given back; slot 0 is the first free one again.
  const aFirst = t.spComplete(A.v, 1, 2, 3, (A.hs[L.SP_ISN]! + 1) | 0, w);
  assert.equal(aFirst, 1);
  t.holdRelease(aFirst);
  // B's next packet fills a slot, from a buffer with more bytes after it: slot 0, right before B's first.
  assert.equal(t.holdAt(0) + L.HOLD_SLOT_BYTES, t.holdAt(1));
  const big = new Uint8Array(L.HOLD_SLOT_BYTES + 8).fill(0x33);
  assert.equal(t.spHold(B.v, true, big, 4, L.HOLD_SLOT_BYTES, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(t.holdNext(1), 1, "slot 0 follows slot 1 on B's list");
  const x = t.holdBytes;
  assert.deepEqual([...x.subarray(t.holdAt(1), t.holdAt(1) + 40)], new Array(40).fill(0x22), "B's first packet intact, its first byte too");
  assert.deepEqual([...x.subarray(t.holdAt(0), t.holdAt(0) + L.HOLD_SLOT_BYTES)], new Array(L.HOLD_SLOT_BYTES).fill(0x33));
});

test("a SYN-proxied record written into entry e leaves entry e + 1's words alone: the pending flow there keeps its handshake", () => {
  const { t } = fresh(64);
  const x = t.insert(conn(17, C + 9, 1, t.now()));
  const P = spFlow(t, C + 1, { pending: true });
  assert.equal(P.e, x + 1, 'the pending flow right after');
  assert.equal(t.remove(x, false, t.now()), true);
  const R = spFlow(t, C + 2); // a record with deltas (Redis, sync): spSet clears and writes its words
  assert.equal(R.e, x, 'the record takes the entry before');
  const w = new Int32Array(L.SP_WORDS);
  assert.equal(t.spRead(P.v, w), true);
  assert.deepEqual([...w.subarray(0, L.SP_HELD)], [...P.hs.subarray(0, L.SP_HELD)], 'the handshake, its ISN first');
  assert.equal(t.spComplete(P.v, 5000, 6000, 3, (P.hs[L.SP_ISN]! + 1) | 0, w), 0, "the server's SYN-ACK for our SYN completes it");
  assert.equal(t.spPending(), 0);
});

test("holdRelease disowns the slots it gives back and no other: a dead worker's slot in hand next to them is reclaimed, the counters exact", () => {
  const { t, rs } = fresh(64);
  const dead = new ConnTable(t.sab, rs.buffer as SharedArrayBuffer, 5);
  const a = t.i32;
  const w = new Int32Array(L.SP_WORDS);
  const pkt = new Uint8Array(100).fill(0x5a);
  const Q = spFlow(t, C + 1, { pending: true });
  const P = spFlow(t, C + 2, { pending: true });
  assert.equal(dead.spHold(Q.v, true, pkt, 0, 100, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(t.spHold(P.v, true, pkt, 0, 100, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  // Q's server answered: the worker took Q's packet (slot 0) off the flow, and died before replaying it.
  assert.equal(dead.spComplete(Q.v, 1, 2, 3, (Q.hs[L.SP_ISN]! + 1) | 0, w), 1);
  assert.equal(a[slotHdr(64, 0) + L.HS_OWNER], 5);
  // P's (slot 1) is replayed and given back by another thread meanwhile.
  const pFirst = t.spComplete(P.v, 1, 2, 3, (P.hs[L.SP_ISN]! + 1) | 0, w);
  assert.equal(pFirst, 2);
  assert.equal(a[slotHdr(64, 1) + L.HS_OWNER], L.OWNER_CONTROL, 'detached: in our hands');
  t.holdRelease(pFirst);
  assert.deepEqual([a[slotHdr(64, 0) + L.HS_OWNER], a[slotHdr(64, 1) + L.HS_OWNER]], [5, 0], 'only the slot given back is disowned');
  assert.equal(t.holdUsed(), 1);
  assert.equal(t.holdReclaim(5), 1, "the dead worker's slot given back");
  assert.equal(t.holdUsed(), 0);
  assert.equal(sourceTotal(t), 0, 'every per-source counter 0 after the recount');
  assert.equal(freeSlots(t, 64).size, L.HOLD_SLOTS);
});

test('the SYN proxy calls judge a flow by its own flags word: an entry before it ending in an address word with the template bit changes nothing', () => {
  const { t } = fresh(64);
  const c6 = parseIPv6('2001:db8::1000:0:1')!; // third word 0x1000 = F_TEMPLATE
  const v6 = parseIPv6('2001:db8::80')!;
  const d6 = parseIPv6('2001:db8:1::2')!;
  const x = t.insert(
    newFlow({
      proto: 6 | L.PROTO_V6,
      caddr: c6[3]!,
      cports: CP,
      vaddr: v6[3]!,
      daddr: d6[3]!,
      dports: DP,
      laddr: c6[3]!, // masq: the server replies to the client
      rs: 1,
      now: t.now(),
      hi: [c6[0]!, c6[1]!, c6[2]!, v6[0]!, v6[1]!, v6[2]!, d6[0]!, d6[1]!, d6[2]!, c6[0]!, c6[1]!, c6[2]!],
    }),
  );
  const P = spFlow(t, C + 1, { pending: true });
  assert.equal(P.e, x + 1);
  assert.equal(t.i32[t.base(P.e) - 1]! & L.F_TEMPLATE, L.F_TEMPLATE, "the word before P's entry has the template bit");
  const w = new Int32Array(L.SP_WORDS);
  assert.equal(t.spRead(P.v, w), true);
  assert.equal(t.spBegin(P.e, P.v, 3000, t.now()), true);
  assert.equal(t.spHold(P.v, true, new Uint8Array(40), 0, 40, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(heldWord(t, 64, P.e), 1 | (1 << 16), 'held in slot 0');
  assert.equal(t.spComplete(P.v, 1, 2, 3, (P.hs[L.SP_ISN]! + 1) | 0, w), 1, 'completed: its held list');
});

test("holdReclaim keeps a slot the dead worker attached second on a flow's list and had not yet disowned", () => {
  const { t, rs } = fresh(64);
  const dead = new ConnTable(t.sab, rs.buffer as SharedArrayBuffer, 5);
  const a = t.i32;
  const w = new Int32Array(L.SP_WORDS);
  const pkt = new Uint8Array(60).fill(1);
  // 64 entries count sources at counters 0..63: counter 504, the word before slot 0's header (where
  // a wrong link read would land), stays 0.
  const Z = spFlow(t, C + 1, { pending: true });
  const R = spFlow(t, C + 2, { pending: true });
  assert.equal(dead.spHold(Z.v, true, pkt, 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD); // slot 0
  assert.equal(dead.spHold(R.v, true, pkt, 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD); // slot 1
  assert.equal(dead.spHold(R.v, true, pkt, 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD); // slot 2
  assert.deepEqual([heldWord(t, 64, R.e), t.holdNext(1), t.holdNext(2)], [2 | (2 << 16), 3, 0], "R's list: slots 1, 2");
  a[slotHdr(64, 2) + L.HS_OWNER] = 5; // the worker died between attaching slot 2 and disowning it
  assert.equal(t.holdReclaim(5), 0, 'nothing in its hands: every slot is on a list');
  assert.equal(a[slotHdr(64, 2) + L.HS_OWNER], 0, 'disowned, kept');
  assert.deepEqual([heldWord(t, 64, R.e), t.holdNext(1), t.holdNext(2)], [2 | (2 << 16), 3, 0], "R's list unchanged");
  const free = freeSlots(t, 64);
  assert.equal(free.size, L.HOLD_SLOTS - 3);
  assert.ok(!free.has(0) && !free.has(1) && !free.has(2), 'no held slot on the free list');
  assert.equal(t.holdUsed(), 3);
  assert.equal(sourceTotal(t), 3);
});

test('holdReclaim: a pending flow that holds nothing marks no slot, whatever the words before the slot headers say', () => {
  const { t, rs } = fresh(1024); // sources counted at all HOLD_SOURCES counters
  const dead = new ConnTable(t.sab, rs.buffer as SharedArrayBuffer, 5);
  const w = new Int32Array(L.SP_WORDS);
  // Q's client is counted at 504, the word before slot 0's header: holding slot 0, it reads 1 = slot 0 + 1.
  const Q = spFlow(t, clientAt(t, 504), { pending: true });
  const P = spFlow(t, C + 1, { pending: true }); // pending, nothing held
  assert.equal(dead.spHold(Q.v, true, new Uint8Array(60), 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(dead.spComplete(Q.v, 1, 2, 3, (Q.hs[L.SP_ISN]! + 1) | 0, w), 1, 'slot 0 taken off Q by the dead worker');
  assert.equal(t.holdAtSource(504), 1);
  assert.equal(heldWord(t, 1024, P.e), 0);
  assert.equal(t.holdReclaim(5), 1, 'slot 0 given back');
  assert.deepEqual([t.holdUsed(), t.holdAtSource(504), sourceTotal(t)], [0, 0, 0]);
  assert.equal(freeSlots(t, 1024).size, L.HOLD_SLOTS);
});

test("holdReclaim walks a list to the area's last slot: one attached there and not yet disowned is kept", () => {
  const { t, rs } = fresh(64);
  const dead = new ConnTable(t.sab, rs.buffer as SharedArrayBuffer, 5);
  const a = t.i32;
  const w = new Int32Array(L.SP_WORDS);
  const take = (t as unknown as { holdAlloc: (s: number) => number }).holdAlloc.bind(t);
  for (let i = 0; i < L.HOLD_SLOTS - 1; i++) assert.equal(take(i % L.HOLD_SOURCES), i, `slot ${i} taken (our hands)`);
  const R = spFlow(t, C + 1, { pending: true });
  assert.equal(dead.spHold(R.v, true, new Uint8Array(60), 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(heldWord(t, 64, R.e) & 0xffff, L.HOLD_SLOTS, 'the last slot');
  a[slotHdr(64, L.HOLD_SLOTS - 1) + L.HS_OWNER] = 5; // died between attaching and disowning
  assert.equal(t.holdReclaim(5), 0);
  assert.equal(a[slotHdr(64, L.HOLD_SLOTS - 1) + L.HS_OWNER], 0, 'disowned, kept');
  assert.equal(heldWord(t, 64, R.e) & 0xffff, L.HOLD_SLOTS);
  assert.deepEqual([t.holdUsed(), freeSlots(t, 64).size], [L.HOLD_SLOTS, 0]);
});

test("holdReclaim does not follow a held-list link out of the area's range into the packet bytes", () => {
  const { t, rs } = fresh(64);
  const dead = new ConnTable(t.sab, rs.buffer as SharedArrayBuffer, 5);
  const a = t.i32;
  const w = new Int32Array(L.SP_WORDS);
  // Slot 0 holds a packet whose first word reads as a link to slot 1 (ref 2).
  const Z = spFlow(t, C + 1, { pending: true });
  const pkt = new Uint8Array(60);
  new DataView(pkt.buffer).setInt32(0, 2, true);
  assert.equal(t.spHold(Z.v, true, pkt, 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(a[L.holdDataOffset(64) / 4], 2);
  // Slot 1 in the dead worker's hands (taken off Q).
  const Q = spFlow(t, C + 2, { pending: true });
  assert.equal(dead.spHold(Q.v, true, new Uint8Array(60), 0, 60, 20, w, 0x7fffffff, t.now()), SPH_HELD);
  assert.equal(dead.spComplete(Q.v, 1, 2, 3, (Q.hs[L.SP_ISN]! + 1) | 0, w), 2);
  // A pending flow whose held word is corrupt: a first slot past the last (ref HOLD_SLOTS + 1).
  const P = spFlow(t, C + 3, { pending: true });
  a[L.synproxyOffset(64) + P.e * L.SP_WORDS + L.SP_HELD] = (L.HOLD_SLOTS + 1) | (1 << 16);
  assert.equal(t.holdReclaim(5), 1, "slot 1 given back: the packet's bytes are no link");
  assert.equal(t.holdUsed(), 1);
  assert.ok(freeSlots(t, 64).has(1));
});
