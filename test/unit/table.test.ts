import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import * as L from '../../conntrack/layout';
import {
  ConnTable,
  createRealServerRegion,
  FLOW_DEST_GONE,
  FLOW_HIT,
  FLOW_MISS,
  FLOW_REUSE,
  LOOKUP_EXPIRE_NODEST,
  LOOKUP_NEW,
} from '../../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCP_DEFAULT_TIMEOUTS, TCPF_ACK, TCPF_FIN, TCPF_SYN, TCP_STATE_NAMES } from '../../conntrack/state';
import { FlowKey, FlowView, newFlow } from '../../conntrack/flow';
import { freshTable, TABLE_TIMEOUTS } from '../helpers/table';

const timeouts = TABLE_TIMEOUTS;

const fresh = (capacity = 1024) => freshTable(capacity);

const C = 0x0a000002,
  V = 0x0a600001,
  D = 0x0a0b0002;
const CP = (40000 << 16) | 80,
  DP = (8080 << 16) | 40000;

test('both directions of a flow find the same entry', () => {
  const { t } = fresh();
  const e = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now: t.now() }));
  assert.ok(e >= 0);
  const b1 = t.bucket(6, C, CP, V);
  t.lockBucket(b1);
  assert.equal(t.findIn(b1, 6, C, CP, V), e);
  t.unlockBucket(b1);
  const b2 = t.bucket(6, D, DP, C);
  t.lockBucket(b2);
  assert.equal(t.findOut(b2, 6, D, DP, C), e);
  assert.equal(t.findOut(b2, 17, D, DP, C), -1, 'protocol is part of the key');
  t.unlockBucket(b2);
  assert.equal(t.count(), 1);
});

test('a new entry counts as InActConn until its first SYN makes it active, and FIN moves it back', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const e = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
  const o = 1 * L.RS_WORDS;
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [0, 1]);
  t.touch(e, DIR_INPUT, TCPF_SYN, now);
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [1, 0]);
  t.touch(e, DIR_OUTPUT, TCPF_SYN | TCPF_ACK, now);
  t.touch(e, DIR_INPUT, TCPF_ACK, now);
  assert.equal(TCP_STATE_NAMES[t.i32[t.base(e) + L.E_STATE]!], 'ESTABLISHED');
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 900_000) | 0, 'ESTABLISHED re-arms the timer to 900 s');
  t.touch(e, DIR_INPUT, TCPF_FIN | TCPF_ACK, now);
  assert.deepEqual([rs[o + L.RS_ACTIVE], rs[o + L.RS_INACTIVE]], [0, 1]);
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 60_000) | 0, 'CLOSE_WAIT times out in 60 s');
});

test('the sweeper removes an entry only once its timer is due and unbinds it', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const e = t.insert(newFlow({ proto: 17, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 2, now }));
  t.touch(e, DIR_INPUT, 0, now);
  assert.equal(t.expire(now + 299_999), 0);
  assert.equal(t.expire(now + 300_000), 1);
  assert.equal(t.count(), 0);
  assert.equal(rs[2 * L.RS_WORDS + L.RS_INACTIVE], 0);
});

test('a full table refuses new entries and keeps the existing ones', () => {
  const { t } = fresh(16);
  const now = t.now();
  for (let i = 0; i < 16; i++)
    assert.ok(t.insert(newFlow({ proto: 6, caddr: C + i, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C + i, rs: 0, now })) >= 0);
  assert.equal(t.insert(newFlow({ proto: 6, caddr: C + 100, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C + 100, rs: 0, now })), -1);
  assert.equal(t.count(), 16);
  const b = t.bucket(6, C + 5, CP, V);
  t.lockBucket(b);
  assert.ok(t.findIn(b, 6, C + 5, CP, V) >= 0);
  t.unlockBucket(b);
});

test('inserting a key that exists returns the existing entry and binds nothing', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const r1 = newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now });
  const e1 = t.insert(r1);
  assert.equal(r1.created, true);
  const r2 = newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D + 1, dports: DP, laddr: C, rs: 2, now });
  const e2 = t.insert(r2);
  assert.equal(e2, e1);
  assert.equal(r2.created, false, 'the record says the entry was found, not made');
  assert.equal(t.count(), 1);
  assert.equal(rs[2 * L.RS_WORDS + L.RS_INACTIVE], 0);
});

test("insertIn: the lookup miss's bucket is reused, the new flow is touched under one lock, a lost race touches the winner", () => {
  const { t, rs } = fresh();
  const now = t.now();
  const locks = (t as unknown as { locks: number }).locks;
  rs[1 * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE;
  rs[1 * L.RS_WORDS + L.RS_WEIGHT] = 1;
  const k = new FlowKey();
  k.proto = 6;
  k.src = C;
  k.ports = CP;
  k.dst = V;
  const v = new FlowView();
  assert.equal(t.lookupIn(k, v, TCPF_SYN, LOOKUP_NEW, now), FLOW_MISS);
  const b = t.bucket(6, C, CP, V);
  assert.equal(k.bucket, b, 'the key carries the bucket its lookup hashed');
  const r = newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now });
  r.inBucket = k.bucket;
  const e = t.insertIn(r, v, TCPF_SYN, now);
  assert.ok(e >= 0);
  assert.equal(r.created, true);
  assert.equal(r.inBucket, -1, 'insert uses the bucket once');
  assert.deepEqual([v.entry, v.rs, TCP_STATE_NAMES[v.state]], [e, 1, 'SYN_RECV'], 'touched by the SYN and copied into the view');
  assert.equal(t.i32[locks + b], 0, 'the in-bucket lock is released');
  assert.equal(t.i32[locks + t.bucket(6, D, DP, C)], 0, 'and the out-bucket lock');
  assert.equal(t.lookupIn(k, v, TCPF_ACK, 0, now), FLOW_HIT, 'linked under the bucket the key hashes to');
  // Another worker's insert of the same key (other server) loses: the winner is touched and shown.
  const r2 = newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D + 1, dports: DP, laddr: C, rs: 2, now });
  const before = t.i32[t.base(e) + L.E_IN_PKTS]!;
  assert.equal(t.insertIn(r2, v, TCPF_ACK, now), e);
  assert.equal(r2.created, false);
  assert.deepEqual([v.entry, v.rs], [e, 1], 'the view shows the winner');
  assert.equal(t.i32[t.base(e) + L.E_IN_PKTS], before + 1, 'the winner counted the packet');
  assert.equal(rs[2 * L.RS_WORDS + L.RS_INACTIVE], 0, 'the loser bound nothing');
  assert.equal(t.i32[locks + b], 0);
  assert.equal(t.count(), 1);
});

test('the flow-level lookups: both directions fill the view under the lock, touch it, and tell a gone server or a reusable entry apart', () => {
  const { t, rs } = fresh();
  const now = t.now();
  rs[1 * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE;
  rs[1 * L.RS_WORDS + L.RS_WEIGHT] = 1;
  const e = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, svc: 3, now }));
  const k = new FlowKey();
  const v = new FlowView();
  k.proto = 6;
  k.src = C;
  k.ports = CP;
  k.dst = V;
  assert.equal(t.lookupIn(k, v, TCPF_SYN, LOOKUP_NEW, now), FLOW_HIT);
  assert.deepEqual([v.entry, v.daddr, v.dports, v.laddr, v.rs, v.svc, TCP_STATE_NAMES[v.state]], [e, D, DP, C, 1, 3, 'SYN_RECV']);
  const out = new FlowKey();
  out.proto = 6;
  out.src = D;
  out.ports = DP;
  out.dst = C;
  assert.equal(t.lookupOut(out, v, TCPF_SYN | TCPF_ACK, now), true);
  assert.equal(TCP_STATE_NAMES[v.state], 'SYN_RECV');
  out.ports = DP + 1;
  assert.equal(t.lookupOut(out, v, TCPF_ACK, now), false, 'another port is another key');
  // A new SYN on a quiesced server's entry may replace it only with expire_nodest_conn.
  rs[1 * L.RS_WORDS + L.RS_WEIGHT] = 0;
  assert.equal(t.lookupIn(k, v, TCPF_SYN, LOOKUP_NEW, now), FLOW_HIT);
  assert.equal(t.lookupIn(k, v, TCPF_SYN, LOOKUP_NEW | LOOKUP_EXPIRE_NODEST, now), FLOW_REUSE);
  assert.equal(t.lookupIn(k, v, TCPF_ACK, LOOKUP_EXPIRE_NODEST, now), FLOW_HIT, 'not a SYN: the flow goes on');
  rs[1 * L.RS_WORDS + L.RS_FLAGS] = 0;
  assert.equal(t.lookupIn(k, v, TCPF_ACK, 0, now), FLOW_DEST_GONE);
  assert.equal(v.entry, e);
  k.ports = CP + 1;
  assert.equal(t.lookupIn(k, v, TCPF_SYN, LOOKUP_NEW, now), FLOW_MISS);
});

test('OVERLOAD is set at the upper threshold and cleared below the lower one', () => {
  const { t, rs } = fresh();
  const o = 3 * L.RS_WORDS;
  rs[o + L.RS_UTHRESH] = 2;
  rs[o + L.RS_LTHRESH] = 1;
  const now = t.now();
  const a = t.insert(newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 3, now }));
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0);
  const b = t.insert(newFlow({ proto: 6, caddr: C + 1, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C + 1, rs: 3, now }));
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, L.RSF_OVERLOAD);
  t.remove(a, false, now);
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, L.RSF_OVERLOAD, 'total 1 is not below lower threshold 1');
  t.remove(b, false, now);
  assert.equal(rs[o + L.RS_FLAGS]! & L.RSF_OVERLOAD, 0);
});

test('four workers inserting, touching and removing the same keys leave a consistent table', async () => {
  const capacity = 4096;
  const rsSab = createRealServerRegion(8);
  const sab = ConnTable.create(capacity, timeouts);
  const keys = 3000;
  const results = await Promise.all(
    [0, 1, 2, 3].map(
      (id) =>
        new Promise<{ inserted: number; removed: number; full: number }>((resolve, reject) => {
          const w = new Worker(join(__dirname, '..', 'helpers', 'table-worker.js'), {
            workerData: { table: sab, rs: rsSab, id, ops: 40000, keys, seed: 1000 + id },
          });
          w.once('message', resolve);
          w.once('error', reject);
        }),
    ),
  );
  const t = new ConnTable(sab, rsSab, L.OWNER_CONTROL);
  const rs = new Int32Array(rsSab);
  const a = t.i32;
  let live = 0;
  const seen = new Set<string>();
  let active = 0;
  let inactive = 0;
  t.forEach((e, o) => {
    live++;
    const key = `${a[o + L.E_CADDR]}/${a[o + L.E_CPORTS]}`;
    assert.ok(!seen.has(key), `key ${key} is in the table twice`);
    seen.add(key);
    const b1 = t.bucket(6, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, a[o + L.E_VADDR]!);
    assert.equal(t.findIn(b1, 6, a[o + L.E_CADDR]!, a[o + L.E_CPORTS]!, a[o + L.E_VADDR]!), e, 'entry reachable by its client→server key');
    const b2 = t.bucket(6, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, a[o + L.E_LADDR]!);
    assert.equal(t.findOut(b2, 6, a[o + L.E_DADDR]!, a[o + L.E_DPORTS]!, a[o + L.E_LADDR]!), e, 'entry reachable by its server→client key');
    if (a[o + L.E_FLAGS]! & L.F_INACTIVE) inactive++;
    else active++;
  });
  assert.equal(t.count(), live, 'the live counter matches the entries in use');
  let rsActive = 0;
  let rsInactive = 0;
  for (let s = 0; s < 4; s++) {
    rsActive += rs[s * L.RS_WORDS + L.RS_ACTIVE]!;
    rsInactive += rs[s * L.RS_WORDS + L.RS_INACTIVE]!;
  }
  assert.equal(rsActive, active, 'ActiveConn sums match the active entries');
  assert.equal(rsInactive, inactive, 'InActConn sums match the inactive entries');
  let free = 0;
  for (let ref = a[L.H_FREE_HEAD]!; ref !== 0; ref = a[t.base(ref - 1) + L.E_NEXT_IN]!) free++;
  assert.equal(free + live, capacity, 'every slot is either live or on the free list');
  const totalInserted = results.reduce((s, r) => s + r.inserted, 0);
  assert.ok(totalInserted > 1000 && live > 100, `the workers really shared the table (inserted ${totalInserted}, live ${live})`);
  for (let b = 0; b < capacity; b++) assert.equal(a[L.bucketLocksOffset(capacity) + b], 0, 'no lock left held');
});

test('releaseLocksOf frees exactly the locks a dead owner held', () => {
  const { t } = fresh(64);
  const dead = new ConnTable(t.sab, new SharedArrayBuffer(8 * L.RS_WORDS * 4), 7);
  dead.lockBucket(3);
  dead.lockBucket(9);
  t.lockBucket(10);
  assert.equal(t.releaseLocksOf(7), 2);
  assert.equal(t.i32[L.bucketLocksOffset(64) + 10], L.OWNER_CONTROL, 'a live owner keeps its lock');
  t.unlockBucket(10);
});

test('a shadow entry carries its synced state and expiry from the start, is not counted, and is counted once adopted', () => {
  const { t, rs } = fresh();
  const now = t.now();
  const e = t.putShadow(
    newFlow({
      proto: 6,
      caddr: C,
      cports: CP,
      vaddr: V,
      daddr: D,
      dports: DP,
      laddr: C,
      rs: 2,
      state: 1 /* ESTABLISHED */,
      expires: (now + 500_000) | 0,
    }),
  );
  assert.ok(e >= 0);
  const o = t.base(e);
  assert.equal(t.i32[o + L.E_STATE], 1);
  assert.equal(t.i32[o + L.E_EXPIRES], (now + 500_000) | 0);
  assert.equal(t.shadows(), 1);
  assert.deepEqual(
    [rs[2 * L.RS_WORDS + L.RS_ACTIVE], rs[2 * L.RS_WORDS + L.RS_INACTIVE]],
    [0, 0],
    "another node's flow is not counted here",
  );
  assert.equal(t.expire(now + 499_999), 0, 'the sweeper keeps it until its synced expiry');
  assert.equal(
    t.putShadow(
      newFlow({
        proto: 6,
        caddr: C,
        cports: CP,
        vaddr: V,
        daddr: D,
        dports: DP,
        laddr: C,
        flags: L.F_INACTIVE,
        rs: 2,
        state: 5,
        expires: (now + 600_000) | 0,
      }),
    ),
    e,
    'a newer record refreshes it',
  );
  assert.equal(t.i32[o + L.E_STATE], 5);
  assert.equal(t.adopt(e, now), true);
  assert.equal(t.adopt(e, now), false, 'adopted once');
  assert.equal(t.shadows(), 0);
  assert.deepEqual([rs[2 * L.RS_WORDS + L.RS_ACTIVE], rs[2 * L.RS_WORDS + L.RS_INACTIVE]], [0, 1], 'counted as the record said (inactive)');
  assert.equal(
    t.putShadow(
      newFlow({ proto: 6, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 2, state: 1, expires: (now + 1000) | 0 }),
    ),
    -1,
    'a local entry wins over a record',
  );
});

test('SCTP timeouts have their own header slots: TCP and UDP slots stay where they were, all inside the header', () => {
  assert.ok(L.H_TIMEOUTS + L.TIMEOUT_SLOTS <= L.HDR_WORDS);
  assert.ok(L.H_SYNC_ON < L.H_TIMEOUTS && L.H_SHADOWS < L.H_TIMEOUTS);
  assert.ok(L.TIMEOUT_SCTP > L.TIMEOUT_UDP && L.TIMEOUT_SCTP + 14 <= L.TIMEOUT_SLOTS);
  const rs = createRealServerRegion(8);
  const sctp = Array.from({ length: 14 }, (_, i) => 1000 + i);
  const t = new ConnTable(ConnTable.create(64, { ...timeouts, sctp }), rs, L.OWNER_CONTROL);
  const a = t.i32;
  assert.deepEqual(
    [...a.subarray(L.H_TIMEOUTS, L.H_TIMEOUTS + 11)],
    TCP_DEFAULT_TIMEOUTS.map((s) => s * 1000),
  );
  assert.equal(a[L.H_TIMEOUTS + L.TIMEOUT_UDP], 300_000);
  assert.deepEqual(
    [...a.subarray(L.H_TIMEOUTS + L.TIMEOUT_SCTP, L.H_TIMEOUTS + L.TIMEOUT_SCTP + 14)],
    sctp.map((s) => s * 1000),
  );
  // An SCTP entry's timer comes from its state's slot; a UDP one's from the UDP slot.
  const now = t.now();
  const e = t.insert(newFlow({ proto: 132, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
  t.touch(e, DIR_INPUT, 1 /* SCTP_EV_INIT */, now);
  assert.equal(a[t.base(e) + L.E_EXPIRES], (now + 1_001_000) | 0, 'INIT1 (state 1)');
  const u = t.insert(newFlow({ proto: 17, caddr: C, cports: CP, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
  t.touch(u, DIR_INPUT, 0, now);
  assert.equal(a[t.base(u) + L.E_EXPIRES], (now + 300_000) | 0);
});
