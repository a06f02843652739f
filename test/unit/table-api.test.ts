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
  LOOKUP_NEW,
} from '../../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCP_DEFAULT_TIMEOUTS, TCPF_ACK, TCPF_FIN, TCPF_SYN } from '../../conntrack/state';
import { SCTP_S_CLOSED, SCTP_S_ESTABLISHED } from '../../conntrack/sctp-state';
import { FlowKey, FlowView, newFlow } from '../../conntrack/flow';
import { parseIPv6 } from '../../net/addr';

const timeouts = { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300 };

function fresh(capacity = 1024) {
  const rs = createRealServerRegion(8);
  const t = new ConnTable(ConnTable.create(capacity, timeouts), rs, L.OWNER_CONTROL);
  const r = new Int32Array(rs);
  for (let s = 0; s < 8; s++) {
    r[s * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE;
    r[s * L.RS_WORDS + L.RS_WEIGHT] = 1;
  }
  return { t, rs: r };
}

const C = 0x0a000002,
  V = 0x0a600001,
  D = 0x0a0b0002,
  P = 0x0a0c0001;
const CP = (40000 << 16) | 80,
  DP = (8080 << 16) | 40000;

function key(proto: number, src: number, ports: number, dst: number): FlowKey {
  const k = new FlowKey();
  k.proto = proto;
  k.src = src;
  k.ports = ports;
  k.dst = dst;
  return k;
}

/** findIn under the bucket lock, as the control thread calls it. */
function findIn(t: ConnTable, proto: number, c: number, cp: number, v: number, hi: ArrayLike<number> | null = null): number {
  const b = t.bucketIn(proto, c, cp, v, hi);
  t.lockBucket(b);
  const e = t.findIn(b, proto, c, cp, v, hi);
  t.unlockBucket(b);
  return e;
}
function findOut(t: ConnTable, proto: number, d: number, dp: number, l: number, hi: ArrayLike<number> | null = null): number {
  const b = t.bucketOut(proto, d, dp, l, hi);
  t.lockBucket(b);
  const e = t.findOut(b, proto, d, dp, l, hi);
  t.unlockBucket(b);
  return e;
}
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
  for (let ref = a[h + L.HOLD_FREE]!; ref !== 0 && slots <= L.HOLD_SLOTS; ref = a[h + L.HOLD_HDR_WORDS + (ref - 1) * L.HOLD_SLOT_WORDS + L.HS_NEXT]!)
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
  assert.deepEqual([a[L.H_TIMEOUTS + L.TIMEOUT_SCTP], a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + 1], a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + 13]], [7000, 0, 0]);
  t.setTimeouts(timeouts);
  assert.ok(a[L.H_TIMEOUTS + L.TIMEOUT_SCTP + SCTP_S_ESTABLISHED]! > 0, 'kernel SCTP defaults');
});

test('sync on: a client packet asks for a Redis write at packet 3, then every 50th; a reply never counts; half the timeout idle writes again; sync off never', () => {
  const { t } = fresh();
  const now = t.now();
  const e = t.insert(newFlow({ proto: 17, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
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
  const s = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
  assert.equal(t.touch(s, DIR_INPUT, TCPF_SYN, now), true, 'NONE → SYN_RECV');
  assert.equal(t.touch(s, DIR_INPUT, TCPF_SYN, now), false, 'packet 2, no change');
});

test('the client packet count saturates at 2^31 − 1', () => {
  const { t } = fresh();
  const now = t.now();
  const e = t.insert(newFlow({ proto: 17, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
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
    t.insert(newFlow({ proto: 6, caddr: keys[i]!, cports: CP, vaddr: V, daddr: D + i * 7919, dports: DP, laddr: keys[i]!, rs: 1, now: t.now() }));
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
    assert.ok(t.insert(newFlow({ proto: 6, caddr: C + i * 7919, cports: CP, vaddr: V, daddr: ds[i]!, dports: DP, laddr: P, rs: 1, now: t.now() })) >= 0);
  const r = newFlow({ proto: 6, caddr: C + 1_000_003, cports: CP, vaddr: V, daddr: ds[CHAIN_LIMIT]!, dports: DP, laddr: P, rs: 1, now: t.now() });
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
  assert.deepEqual([a[locks + 3], a[t.base(5) + L.E_LOCK], a[t.base(63) + L.E_LOCK], a[L.H_ALLOC_LOCK], a[L.holdOffset(64) + L.HOLD_LOCK]], [0, 0, 0, 0, 0]);
  assert.deepEqual([a[t.base(6) + L.E_LOCK], a[locks + 63]], [8, 8], "another owner's locks stay");
  assert.equal(t.releaseLocksOf(7), 0);
});

test('remove() with the key a worker found: another key, a template or another state is left alone; not due is kept', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const e = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
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
  const tp = t.insert(newFlow({ proto: 6, caddr: C, cports: 80, vaddr: V, daddr: D, dports: 8080 << 16, laddr: 0, rs: 1, flags: L.F_TEMPLATE, templateMs: 1000, now }));
  assert.equal(t.remove(tp, false, now, 6, C, 80), false);
  assert.equal(t.remove(tp, false, now), true);
  assert.equal(rs[1 * L.RS_WORDS + L.RS_PERSIST], 0);
});

test('remove() unlinks an entry from the middle of both chains and leaves the others findable', () => {
  const t = new ConnTable(ConnTable.create(256, timeouts), createRealServerRegion(8), L.OWNER_CONTROL);
  const keys = collidingIn(t, 5);
  const es = keys.map((c) => t.insert(newFlow({ proto: 6, caddr: c, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: c, rs: 1, now: t.now() })));
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
  const tr = newFlow({ proto: 6, caddr: Cm, cports: 80, vaddr: V, daddr: D, dports: 8080 << 16, laddr: 0, rs: 1, flags: L.F_TEMPLATE, templateMs: 360_000, pp: 77, ppSeq: 99, now });
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
  const c = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
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
