/**
 * The connection table's shadow, insert and remove paths (conntrack/table.ts putShadow, link,
 * pushFree, remove, unlink, entryBucketOut, entryAddr), one promise at a time. Written against
 * the survivors of lines 1250–1622 (test/mutation/table-survivors.md): each asserts what a caller
 * sees — the return value, the counters, what stays findable, the words a worker reads.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { ConnTable, createRealServerRegion, entryAddr, SPH_HELD } from '../../conntrack/table';
import { DIR_INPUT, TCP_ESTABLISHED, TCP_SYN_RECV, TCP_TIME_WAIT, TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { FlowView, newFlow } from '../../conntrack/flow';
import { parseIPv6 } from '../../net/addr';
import { findOut, FLOW, freshTable, key } from '../helpers/table';

const fresh = (capacity = 1024) => freshTable(capacity, true);

const { C, V, D, P, CP, DP } = FLOW;

/** A connection C→V (laddr = the client) to D, the ports CP/DP, real server rs; `more` sets any other field. */
const conn = (proto: number, caddr: number, rs: number, now: number, cports = CP, more: Partial<Parameters<typeof newFlow>[0]> = {}) =>
  newFlow({ proto, caddr, cports, vaddr: V, daddr: D, dports: DP, laddr: caddr, rs, now, ...more });

/** A connection between the four IPv6 addresses of v6Words() (high words w.hi unless `more` says), real server 1. */
const conn6 = (w: ReturnType<typeof v6Words>, proto: number, now: number, more: Partial<Parameters<typeof newFlow>[0]> = {}) =>
  newFlow({ proto, caddr: w.c, cports: CP, vaddr: w.v, daddr: w.d, dports: DP, laddr: w.l, rs: 1, now, hi: w.hi, ...more });

/** Twelve high words, every one distinct and non-zero: client, virtual, server, local (3 each). */
function v6Words(): { hi: number[]; c: number; v: number; d: number; l: number } {
  const c = parseIPv6('2001:db8:1:2:3:4:5:6')!,
    v = parseIPv6('fd00:96:7:8:9:a:b:c')!,
    d = parseIPv6('fd00:10:d:e:f:11:12:13')!,
    l = parseIPv6('fd00:20:14:15:16:17:18:19')!;
  return {
    hi: [c[0]!, c[1]!, c[2]!, v[0]!, v[1]!, v[2]!, d[0]!, d[1]!, d[2]!, l[0]!, l[1]!, l[2]!],
    c: c[3]!,
    v: v[3]!,
    d: d[3]!,
    l: l[3]!,
  };
}

test('putShadow says −1 for every insert it could not make: a full table, a full-NAT pool key already taken (−2 from insert)', () => {
  const { t } = fresh(16);
  const now = t.now();
  const shadow = (c: number, flags = 0) => conn(6, c, 1, now, CP, { laddr: P, flags, state: 3, expires: (now + 10_000) | 0 });
  assert.ok(t.insert(conn(6, C, 1, now, CP, { laddr: P, flags: L.FWD_FULLNAT })) >= 0);
  const r = shadow(C + 1, L.FWD_FULLNAT);
  assert.equal(t.putShadow(r), -1, 'its pool address and port are a local flow’s');
  assert.equal(r.created, false);
  assert.deepEqual([t.count(), t.shadows()], [1, 0]);
  for (let i = 0; i < 15; i++) assert.ok(t.insert(conn(17, C + 100 + i, 1, now)) >= 0);
  assert.equal(t.count(), 16, 'the table is full');
  assert.equal(t.putShadow(shadow(C + 2)), -1, 'no slot');
  assert.deepEqual([t.count(), t.shadows()], [16, 0]);
});

test('putShadow refreshes by the server: IPv4 ignores leftover high words, IPv6 compares each of the server’s three; no SYN proxy unless the record has it', () => {
  const { t } = fresh();
  const now = t.now();
  t.insert(conn(17, C + 50, 1, now)); // entry 0 taken: the shadows sit at entries > 0
  const rec4 = (state: number, hi: number[] | null) =>
    newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 2, state, expires: (now + 10_000) | 0, hi });
  const e4 = t.putShadow(rec4(3, null));
  assert.ok(e4 > 0);
  // A control thread's scratch record reused after an IPv6 flow: its high words mean nothing here.
  const junk = Array.from({ length: L.HI_WORDS }, (_, i) => 0x1000 + i);
  assert.equal(t.putShadow(rec4(1, junk)), e4, 'the same IPv4 server refreshes');
  assert.equal(t.i32[t.base(e4) + L.E_STATE], 1);
  assert.equal(t.i32[t.base(e4) + L.E_FLAGS]! & L.F_SYNPROXY, 0, 'a record without SYN proxy words leaves it unproxied');
  const v = new FlowView();
  assert.ok(t.readFlow(key(6, C, CP, V), false, v));
  assert.equal(v.sp, 0);

  const w = v6Words();
  const proto = 6 | L.PROTO_V6;
  const rec6 = (hi: number[], state: number) => conn6(w, proto, now, { state, expires: (now + 10_000) | 0, hi });
  const e6 = t.putShadow(rec6(w.hi, 3));
  assert.ok(e6 > 0);
  for (const j of [6, 7, 8]) {
    const h = [...w.hi];
    h[j] = h[j]! ^ 0x100;
    assert.equal(t.putShadow(rec6(h, 4)), -1, `server high word ${j - 6}: another server`);
  }
  assert.equal(t.i32[t.base(e6) + L.E_STATE], 3);
  assert.equal(t.putShadow(rec6(w.hi, 1)), e6, 'the same IPv6 server refreshes');
  assert.equal(t.i32[t.base(e6) + L.E_STATE], 1);
});

test('an insert given r.inBucket (bucket 0 too) does not hash the client key again; without one it does, once', () => {
  const { t } = fresh(16);
  const now = t.now();
  let hashed = 0;
  const bucketIn = t.bucketIn.bind(t);
  let zero = -1,
    other = -1;
  for (let port = 1; zero < 0 || other < 0; port++) {
    const b = bucketIn(6, C, (port << 16) | 80, V, null);
    if (b === 0 && zero < 0) zero = port;
    else if (b !== 0 && other < 0) other = port;
  }
  t.bucketIn = (...args: Parameters<ConnTable['bucketIn']>) => {
    hashed++;
    return bucketIn(...args);
  };
  for (const port of [zero, other]) {
    const r = conn(6, C, 1, now, (port << 16) | 80);
    r.inBucket = bucketIn(6, C, r.cports, V, null);
    hashed = 0;
    const e = t.insert(r);
    assert.ok(e >= 0 && r.created);
    assert.equal(hashed, 0, `bucket ${r.inBucket}: the caller's bucket is used`);
    assert.equal(r.inBucket, -1, 'and spent');
    const v = new FlowView();
    assert.ok(t.readFlow(key(6, C, r.cports, V), false, v));
    assert.equal(v.entry, e, 'found by its key');
  }
  hashed = 0;
  assert.ok(t.insert(conn(6, C + 1, 1, now)) >= 0);
  assert.equal(hashed, 1);
});

test('an IPv6 insert writes its own entry only: a lock another thread holds on the next entry stays held', () => {
  const { t } = fresh(16);
  const w = v6Words();
  const o1 = t.base(1);
  t.i32[o1 + L.E_LOCK] = 5; // a worker (owner 5) holds entry 1's lock
  const e = t.insert(conn6(w, 17 | L.PROTO_V6, t.now()));
  assert.equal(e, 0);
  assert.equal(t.i32[o1 + L.E_LOCK], 5);
  assert.equal(t.releaseLocksOf(5), 1);
});

test('insertIn of a key already in the table touches that flow and releases both bucket locks', () => {
  const { t } = fresh(16);
  const now = t.now();
  let cports = CP;
  for (let port = 1; t.bucketIn(6, C, cports, V, null) === t.bucketOut(6, D, DP, C, null); port++) cports = (port << 16) | 80;
  const v = new FlowView();
  const r1 = conn(6, C, 1, now, cports);
  const e = t.insertIn(r1, v, TCPF_SYN, now);
  assert.ok(e >= 0 && r1.created);
  const r2 = conn(6, C, 1, now, cports);
  assert.equal(t.insertIn(r2, v, TCPF_ACK, now), e, 'the flow already there');
  assert.equal(r2.created, false);
  assert.equal(v.state, TCP_ESTABLISHED, 'touched with the packet');
  const locks = L.bucketLocksOffset(16);
  assert.deepEqual([...t.i32.subarray(locks, locks + 16)], new Array(16).fill(0), 'no bucket lock left held');
  assert.equal(t.count(), 1);
});

test('the per-source half-open count: new TCP and SCTP flows only, never a template or a shadow', () => {
  const { t } = fresh();
  const now = t.now();
  t.i32[L.H_SRC_LIMIT] = 100;
  const slot = t.sourceSlot(false, C, 0, 0);
  const tpl = newFlow({
    proto: 6,
    caddr: C,
    cports: 80,
    vaddr: V,
    daddr: D,
    dports: DP,
    laddr: 0,
    rs: 1,
    flags: L.F_TEMPLATE,
    templateMs: 300_000,
    now,
  });
  assert.ok(t.insert(tpl) >= 0);
  assert.equal(t.halfOpenAt(slot), 0, 'a template');
  const sh = newFlow({
    proto: 6,
    caddr: C,
    cports: CP + 1,
    vaddr: V,
    daddr: D,
    dports: DP,
    laddr: C,
    rs: 1,
    state: 0,
    expires: (now + 10_000) | 0,
  });
  assert.ok(t.putShadow(sh) >= 0);
  assert.equal(t.halfOpenAt(slot), 0, 'a shadow');
  assert.ok(t.insert(conn(17, C, 1, now)) >= 0);
  assert.equal(t.halfOpenAt(slot), 0, 'UDP');
  const e = t.insert(conn(132, C, 1, now));
  assert.ok(e >= 0);
  assert.equal(t.halfOpenAt(slot), 1, 'SCTP');
  assert.ok(t.insert(conn(6, C, 1, now)) >= 0);
  assert.equal(t.halfOpenAt(slot), 2, 'TCP');
  assert.equal(t.remove(e, false, now), true);
  assert.equal(t.halfOpenAt(slot), 1);
});

test('freeing an entry leaves its neighbour’s words alone: its local address and its last Redis write', () => {
  const { t } = fresh();
  const now = 1_000_000; // table time far from 0: a synced time lost would show as "idle long"
  const w = v6Words();
  const proto = 17 | L.PROTO_V6;
  const a = t.insert(conn6(w, proto, now));
  assert.equal(a, 0);
  const b = t.insert(conn(17, C, 1, now));
  assert.equal(b, 1);
  // A failed insert frees its slot (entry 2) too.
  assert.equal(t.insert(conn(17, C, 1, now)), b, 'the same key: the slot taken goes back');
  assert.equal(t.remove(b, false, now), true);
  const o = t.base(a);
  assert.equal(entryAddr(t.i32, o, L.E_LADDR), 'fd00:20:14:15:16:17:18:19');
  assert.equal(findOut(t, proto, w.d, DP, w.l, w.hi), a, 'found by its server→client key');
  t.setSync(true);
  assert.equal(t.touch(a, DIR_INPUT, 0, now + 1000), false, 'packet 1, a second after its insert: no Redis write');
  assert.equal(t.touch(a, DIR_INPUT, 0, now + 2000), false);
});

test('remove() with a worker’s key: protocol 0 matches no flow, and state 0 (NONE) is a state like the others', () => {
  const { t } = fresh();
  const now = t.now();
  const e = t.insert(conn(6, C, 1, now));
  assert.equal(t.remove(e, false, now, 0, C, CP), false, 'protocol 0');
  t.touch(e, DIR_INPUT, TCPF_SYN, now);
  t.touch(e, DIR_INPUT, TCPF_ACK, now);
  assert.equal(t.i32[t.base(e) + L.E_STATE], TCP_ESTABLISHED);
  assert.equal(t.remove(e, false, now, 6, C, CP, 0), false, 'expected NONE, it is ESTABLISHED');
  assert.equal(t.count(), 1);
  assert.equal(t.remove(e, false, now, 6, C, CP, TCP_ESTABLISHED), true);
  assert.equal(t.count(), 0);
});

test('remove() of a pending flow at entry > 0 gives its held packets back; a flow not pending leaves the pending gauge alone', () => {
  const { t } = fresh(64);
  const now = t.now();
  const plain = t.insert(conn(17, C + 9, 1, now)); // entry 0
  const r = conn(6, C, 1, now, CP, { flags: L.F_SYNPROXY | L.F_SP_PENDING });
  r.spHandshake = new Int32Array(L.SP_WORDS).fill(7);
  const e = t.insert(r);
  assert.ok(e > 0);
  assert.equal(t.spPending(), 1);
  const v = new FlowView();
  assert.ok(t.readFlow(key(6, C, CP, V), false, v));
  const worker = new ConnTable(t.sab, createRealServerRegion(8), 4);
  for (let i = 0; i < 2; i++)
    assert.equal(worker.spHold(v, true, new Uint8Array(40), 0, 40, 20, new Int32Array(L.SP_WORDS), 0x7fffffff, now), SPH_HELD);
  assert.equal(t.holdUsed(), 2);
  assert.equal(t.remove(plain, false, now), true);
  assert.equal(t.spPending(), 1, 'a plain flow removed: still one pending');
  assert.equal(t.remove(e, false, now), true);
  assert.deepEqual([t.spPending(), t.holdUsed(), t.count()], [0, 0, 0], 'its held packets given back');
});

test('remove() of IPv6 flows unlinks them from their server→client chain: removed, inserted again, removed, none is found', () => {
  const { t } = fresh(64);
  const now = t.now();
  t.insert(conn(17, C + 9, 1, now)); // entry 0 taken
  const base = v6Words();
  const proto = 6 | L.PROTO_V6;
  for (let k = 0; k < 4; k++) {
    const hi = base.hi.map((x, i) => (i >= 6 ? x + k : x));
    const f = () =>
      newFlow({
        proto,
        caddr: base.c,
        cports: CP + k,
        vaddr: base.v,
        daddr: base.d + k,
        dports: DP + k,
        laddr: base.l + k,
        rs: 1,
        now,
        hi,
      });
    for (let round = 0; round < 2; round++) {
      const e = t.insert(f());
      assert.ok(e > 0);
      assert.equal(findOut(t, proto, base.d + k, DP + k, base.l + k, hi), e);
      assert.equal(t.remove(e, false, now), true);
      assert.equal(findOut(t, proto, base.d + k, DP + k, base.l + k, hi), -1, `flow ${k}, round ${round}: gone from its out-chain`);
    }
  }
  assert.equal(t.count(), 1);
});

test('remove() refuses an entry marked in use that is on no chain (a corrupted word): nothing unlinked, nothing counted', () => {
  const { t, rs } = fresh(16);
  const now = t.now();
  const e = t.insert(conn(17, C, 1, now));
  const stray = 9; // a free entry
  t.i32[t.base(stray) + L.E_FLAGS] = L.F_IN_USE;
  assert.equal(t.remove(stray, false, now), false);
  assert.deepEqual([t.count(), rs[1 * L.RS_WORDS + L.RS_INACTIVE]], [1, 1]);
  t.i32[t.base(stray) + L.E_FLAGS] = 0;
  const v = new FlowView();
  assert.ok(t.readFlow(key(17, C, CP, V), false, v));
  assert.equal(v.entry, e);
  for (let i = 0; i < 15; i++) assert.ok(t.insert(conn(17, C + 1 + i, 1, now)) >= 0, `slot ${i}`);
  assert.equal(t.insert(conn(17, C + 100, 1, now)), -1, 'the free list holds each slot once');
});

test('a table whose every entry shares one client→server chain: the last of the chain is removed, no loop is seen', () => {
  const { t } = fresh(16);
  const now = t.now();
  const byBucket = new Map<number, number[]>();
  let clients: number[] = [];
  for (let c = C; clients.length < 16; c++) {
    const b = t.bucketIn(17, c, CP, V, null);
    const list = byBucket.get(b) ?? [];
    list.push(c);
    byBucket.set(b, list);
    if (list.length === 16) clients = list;
  }
  const es = clients.map((c) =>
    t.insert(newFlow({ proto: 17, caddr: c, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: P + (c & 0xfff), rs: 1, now })),
  );
  assert.ok(es.every((e) => e >= 0));
  assert.equal(t.count(), 16);
  assert.equal(t.remove(es[0]!, false, now), true, 'the first inserted: the chain’s 16th');
  assert.equal(t.remove(es[15]!, false, now), true, 'the chain’s head');
  assert.equal(t.count(), 14);
});

test('entryAddr prints each address of an IPv6 entry from its own words', () => {
  const { t } = fresh();
  const now = t.now();
  t.insert(conn(17, C + 9, 1, now)); // entry 0 taken
  const w = v6Words();
  const e = t.insert(conn6(w, 17 | L.PROTO_V6, now));
  const o = t.base(e);
  assert.deepEqual(
    [L.E_CADDR, L.E_VADDR, L.E_DADDR, L.E_LADDR].map((f) => entryAddr(t.i32, o, f)),
    ['2001:db8:1:2:3:4:5:6', 'fd00:96:7:8:9:a:b:c', 'fd00:10:d:e:f:11:12:13', 'fd00:20:14:15:16:17:18:19'],
  );
});

test('putShadow that loses the race to a local flow of the same key (inserted between its lookup and its insert) says −1 and leaves that flow alone', () => {
  const { t } = fresh();
  const now = t.now();
  const insert = t.insert.bind(t);
  let local = -1;
  // A worker inserts the key just after putShadow's lookup under the bucket lock found nothing.
  t.insert = (r) => {
    if (r.flags & L.F_SHADOW && local < 0) local = insert(conn(6, C, 1, now));
    return insert(r);
  };
  const r = conn(6, C, 2, now, CP, { state: 3, expires: (now + 10_000) | 0 });
  assert.equal(t.putShadow(r), -1);
  assert.ok(local >= 0);
  assert.equal(r.created, false);
  assert.deepEqual([t.count(), t.shadows()], [1, 0]);
  assert.equal(t.i32[t.base(local) + L.E_FLAGS]! & L.F_SHADOW, 0, 'the local flow is no shadow');
});

test('an insert that finds another node’s flow under its key (installed since the lookup) adopts it before its packet moves the state: counted once, nothing left when it goes', () => {
  // Found by test/unit/table-model.test.ts: touched while still a shadow, the SYN moved the
  // server's InActConn to ActiveConn for a flow neither counted — ActiveConn 1, InActConn −1 for good.
  for (const fullnat of [false, true]) {
    const { t, rs } = fresh();
    const now = t.now();
    const o = 1 * L.RS_WORDS;
    const laddr = fullnat ? P : C;
    const fwd = fullnat ? L.FWD_FULLNAT : L.FWD_MASQ;
    // Another node's flow in TIME_WAIT (inactive there), learnt between a worker's lookup and its insert.
    const e = t.putShadow(conn(6, C, 1, now, CP, { laddr, flags: fwd | L.F_INACTIVE, state: TCP_TIME_WAIT, expires: (now + 120_000) | 0 }));
    assert.ok(e >= 0);
    const r = conn(6, C, 1, now, CP, { laddr, flags: fwd });
    const v = new FlowView();
    let ne: number;
    if (fullnat) {
      ne = t.insert(r); // core.ts insertFullnat, then touchIn
      t.touchIn(ne, v, TCPF_SYN, now);
    } else ne = t.insertIn(r, v, TCPF_SYN, now);
    const what = fullnat ? 'insert + touchIn' : 'insertIn';
    assert.deepEqual([ne, r.created], [e, false], `${what}: the flow already there`);
    assert.deepEqual([v.adopted, v.state], [true, TCP_SYN_RECV], `${what}: adopted, then moved by the SYN`);
    assert.deepEqual([t.shadows(), rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [0, 1, 0], `${what}: ours, counted once as active`);
    assert.equal(t.remove(e, false, now), true);
    assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [0, 0], `${what}: nothing left once it is gone`);
  }
});

test('insertIn touches the flow (new or already there) under the in-bucket lock, also when both keys share the one bucket', () => {
  const { t } = fresh(16);
  const now = t.now();
  let cports = CP;
  for (let port = 1; t.bucketIn(6, C, cports, V, null) !== t.bucketOut(6, D, DP, C, null); port++) cports = (port << 16) | 80;
  const b = t.bucketIn(6, C, cports, V, null);
  const lockWord = L.bucketLocksOffset(16) + b;
  const seen: number[] = [];
  const table = t as unknown as { firstTouch: (...args: unknown[]) => void };
  const firstTouch = table.firstTouch.bind(t);
  table.firstTouch = (...args: unknown[]) => {
    seen.push(t.i32[lockWord]!);
    firstTouch(...args);
  };
  const v = new FlowView();
  const e = t.insertIn(conn(6, C, 1, now, cports), v, TCPF_SYN, now);
  assert.ok(e >= 0);
  assert.equal(t.insertIn(conn(6, C, 1, now, cports), v, TCPF_ACK, now), e);
  assert.equal(v.state, TCP_ESTABLISHED);
  assert.deepEqual(seen, [L.OWNER_CONTROL, L.OWNER_CONTROL], 'held during both touches');
  assert.equal(t.i32[lockWord], 0, 'and released after');
});

test('remove() whose entry is freed and taken by another flow between hashing its keys and locking them removes that flow, from both its chains', () => {
  const { t } = fresh();
  const now = t.now();
  const tt = t as unknown as { lockPair: (b1: number, b2: number) => void };
  const lockPair = tt.lockPair.bind(t);
  // Another thread frees e and a new flow takes the slot just before remove() takes its locks.
  const raceOnce = (act: () => void) => {
    let armed = true;
    tt.lockPair = (b1, b2) => {
      if (armed) {
        armed = false;
        act();
      }
      lockPair(b1, b2);
    };
  };
  const flow = (caddr: number, daddr: number) =>
    newFlow({ proto: 6, caddr, cports: CP, vaddr: V, daddr, dports: DP, laddr: P, rs: 1, now });
  // The same client key to another server: only the out-bucket changes.
  let d2 = D + 1;
  while (t.bucketOut(6, d2, DP, P, null) === t.bucketOut(6, D, DP, P, null)) d2++;
  // Another client to the same server and pool key: only the in-bucket changes.
  let c2 = C + 1;
  while (t.bucketIn(6, c2, CP, V, null) === t.bucketIn(6, C, CP, V, null)) c2++;
  for (const [caddr, daddr, what] of [
    [C, d2, 'another server'],
    [c2, D, 'another client'],
  ] as const) {
    const e = t.insert(flow(C, D));
    raceOnce(() => {
      assert.equal(t.remove(e, false, now), true);
      assert.equal(t.insert(flow(caddr, daddr)), e, 'the slot taken again');
    });
    assert.equal(t.remove(e, false, now), true, what);
    assert.equal(t.count(), 0, what);
    const v = new FlowView();
    assert.equal(t.readFlow(key(6, caddr, CP, V), false, v), false, `${what}: gone from its client→server chain`);
    assert.equal(findOut(t, 6, daddr, DP, P), -1, `${what}: gone from its server→client chain`);
  }
});

test('the SYN proxy calls hold the locks of the flow’s buckets as they are once locked: a slot freed and taken by the same client key to another server meanwhile', () => {
  const { t } = fresh();
  const now = t.now();
  const tt = t as unknown as { lockPair: (b1: number, b2: number) => void; unlockPair: (b1: number, b2: number) => void };
  const lockPair = tt.lockPair.bind(t);
  const unlockPair = tt.unlockPair.bind(t);
  const proxied = (daddr: number) => {
    const r = newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr, dports: DP, laddr: C, rs: 1, now });
    r.sp = 1;
    r.spDelta = 5;
    return r;
  };
  const b1 = t.bucketIn(6, C, CP, V, null);
  const oldB2 = t.bucketOut(6, D, DP, C, null);
  let d2 = D + 1;
  for (let b = t.bucketOut(6, d2, DP, C, null); b === oldB2 || b === b1; b = t.bucketOut(6, d2, DP, C, null)) d2++;
  const newB2 = L.bucketLocksOffset(1024) + t.bucketOut(6, d2, DP, C, null);
  const e = t.insert(proxied(D));
  const v = new FlowView();
  assert.ok(t.readFlow(key(6, C, CP, V), false, v));
  let armed = true;
  tt.lockPair = (x, y) => {
    if (armed) {
      armed = false;
      // Another thread: the flow ends and its client's next connection, to another server, takes the slot.
      assert.equal(t.remove(e, false, now), true);
      assert.equal(t.insert(proxied(d2)), e);
    }
    lockPair(x, y);
  };
  const held: number[] = [];
  tt.unlockPair = (x, y) => {
    held.push(t.i32[newB2]!);
    unlockPair(x, y);
  };
  const w = new Int32Array(L.SP_WORDS);
  assert.equal(t.spRead(v, w), true, 'the same client key: still v’s flow');
  assert.equal(w[L.SP_DELTA], 5);
  assert.equal(held.at(-1), L.OWNER_CONTROL, 'its server→client bucket was locked while its words were read');
  assert.equal(t.i32[newB2], 0, 'and released after');
});
