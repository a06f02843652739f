/**
 * The overload defenses (conntrack/defense.ts): the kernel's level transitions, drop_entry and
 * todrop_entry, secure_tcp's table and short half-open timers, drop_packet, the per-source
 * half-open limit and full-NAT pools under a flood — on the real table and packet path.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { autoDropRate, Defense, defenseStep, type DefenseSettings } from '../../conntrack/defense';
import { SCTP_S_COOKIE_ECHOED, SCTP_S_ESTABLISHED, SCTP_S_INIT, SCTP_S_INIT1 } from '../../conntrack/sctp-state';
import {
  DIR_INPUT,
  DIR_INPUT_ONLY,
  DIR_OUTPUT,
  TCP_DEFAULT_TIMEOUTS,
  TCP_STATE_COUNT,
  TCP_STATE_NAMES,
  TCP_TRANSITIONS,
  TCP_TRANSITIONS_DOS,
  TCPF_ACK,
  TCPF_FIN,
  TCPF_RST,
  TCPF_SYN,
} from '../../conntrack/state';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';
import { validateConfig } from '../../control/config';
import { parseArgs } from '../../control/ipvsadm/parse';
import { formatDefense } from '../../control/ipvsadm/format';
import { UvsError } from '../../control/errors';
import { parseIPv6 } from '../../net/addr';
import { DROP, FORWARD } from '../../lb/verdict';
import { FULLNAT_FULL_MS } from '../../lb/xmit';
import { tcp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';
import { newFlow } from '../../conntrack/flow';

const timeouts = { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300 };
const C = 0x0a000002,
  V = 0x0a600001,
  D = 0x0a0b0002;
const DP = (8080 << 16) | 40000;
const state = (t: ConnTable, e: number) => TCP_STATE_NAMES[t.i32[t.base(e) + L.E_STATE]!];

function fresh(capacity = 1024) {
  const rs = createRealServerRegion(8);
  const t = new ConnTable(ConnTable.create(capacity, timeouts), rs, L.OWNER_CONTROL);
  return { t, rs: new Int32Array(rs) };
}

function settings(o: Partial<DefenseSettings> = {}): DefenseSettings {
  return {
    amemthresh: 64,
    amDroprate: 10,
    dropEntry: 0,
    dropEntryScope: 'halfOpen',
    dropPacket: 0,
    secureTcp: 0,
    secureTcpTimeout: 10,
    halfOpenPerSource: 0,
    maxHalfOpenPerSource: 256,
    holdTime: 0,
    synProxy: 0,
    synProxyWscale: 7,
    ...o,
  };
}

/** A TCP flow from client c:port, touched by `flags` in order (each [dir, flags]) at `at`. */
function flow(t: ConnTable, c: number, port: number, at: number, steps: [number, number][], fwd = 0) {
  const e = t.insert(
    newFlow({ proto: 6, caddr: c, cports: (port << 16) | 80, vaddr: V, daddr: D, dports: DP, laddr: c, flags: fwd, rs: 1, now: at }),
  );
  assert.ok(e >= 0);
  for (const [dir, f] of steps) t.touch(e, dir, f, at);
  return e;
}

/** Live entries (not templates) whose client address is c. */
function liveFrom(t: ConnTable, c: number): number {
  let n = 0;
  for (let e = 0; e < t.capacity; e++) {
    const o = t.base(e);
    if ((t.i32[o + L.E_FLAGS]! & (L.F_IN_USE | L.F_TEMPLATE)) === L.F_IN_USE && t.i32[o + L.E_CADDR] === (c | 0)) n++;
  }
  return n;
}

// ── level transitions (update_defense_level) ────────────────────────────────────────────────
test('each defense follows the kernel sysctl modes: 0 off, 1 → 2 under pressure and back, 3 always', () => {
  const cases: [number, boolean, number, boolean][] = [
    // mode, nomem → next mode, acts
    [0, false, 0, false],
    [0, true, 0, false],
    [1, false, 1, false],
    [1, true, 2, true],
    [2, true, 2, true],
    [2, false, 1, false],
    [3, false, 3, true],
    [3, true, 3, true],
  ];
  for (const [mode, nomem, next, active] of cases)
    assert.deepEqual(defenseStep(mode, nomem), { mode: next, active }, `mode ${mode}, nomem ${nomem}`);
});

test("drop_packet's automatic rate is amemthresh / (amemthresh − free), 1 when nothing is free", () => {
  assert.equal(autoDropRate(1024, 1024), 0);
  assert.equal(autoDropRate(1024, 2000), 0);
  assert.equal(autoDropRate(1024, 1000), 42);
  assert.equal(autoDropRate(1024, 512), 2);
  assert.equal(autoDropRate(1024, 0), 1);
});

test('the automatic defenses switch on when free entries fall below amemthresh and off when room is back', () => {
  const { t } = fresh(1024);
  const d = new Defense(
    t,
    settings({ amemthresh: 64, dropEntry: 1, dropPacket: 1, secureTcp: 1, halfOpenPerSource: 1, maxHalfOpenPerSource: 5 }),
  );
  const now = t.now();
  const udp: number[] = [];
  for (let i = 0; i < 960; i++)
    udp.push(
      t.insert(newFlow({ proto: 17, caddr: C + i, cports: (1000 << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: C + i, rs: 1, now })),
    );
  d.update();
  assert.equal(d.freeEntries, 64);
  assert.equal(d.nomem, false, '64 free is not below 64');
  assert.deepEqual(d.modes, { dropEntry: 1, dropPacket: 1, secureTcp: 1, halfOpenPerSource: 1, synProxy: 0 });
  t.insert(newFlow({ proto: 17, caddr: C + 5000, cports: (1000 << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: C + 5000, rs: 1, now }));
  d.update();
  assert.equal(d.nomem, true);
  assert.deepEqual(d.modes, { dropEntry: 2, dropPacket: 2, secureTcp: 2, halfOpenPerSource: 2, synProxy: 0 });
  assert.deepEqual(d.active, { dropEntry: true, dropPacket: true, secureTcp: true, halfOpenPerSource: true, synProxy: false });
  assert.equal(t.i32[L.H_SECURE_TCP], 1);
  assert.equal(t.i32[L.H_SECURE_TCP_MS], 10_000);
  assert.equal(t.i32[L.H_DROP_RATE], 64, '64 / (64 − 63)');
  assert.equal(t.i32[L.H_SRC_LIMIT], 5);
  for (let i = 0; i < 100; i++) t.remove(udp[i]!, false, now);
  d.update();
  assert.equal(d.nomem, false);
  assert.deepEqual(d.modes, { dropEntry: 1, dropPacket: 1, secureTcp: 1, halfOpenPerSource: 1, synProxy: 0 });
  assert.deepEqual([t.i32[L.H_SECURE_TCP], t.i32[L.H_DROP_RATE], t.i32[L.H_SRC_LIMIT]], [0, 0, 0]);
});

test('with a hold, an automatic defense stays on until no tick has been short of room for holdTime; drop_packet follows the room at once', () => {
  const { t } = fresh(1024);
  const now = t.now();
  const udp: number[] = [];
  for (let i = 0; i < 1000; i++)
    udp.push(
      t.insert(newFlow({ proto: 17, caddr: C + i, cports: (1000 << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: C + i, rs: 1, now })),
    );
  const d = new Defense(t, settings({ amemthresh: 64, dropEntry: 1, dropPacket: 1, secureTcp: 1, halfOpenPerSource: 1, holdTime: 60 }));
  d.update(now);
  assert.deepEqual(d.modes, { dropEntry: 2, dropPacket: 2, secureTcp: 2, halfOpenPerSource: 2, synProxy: 0 });
  for (const e of udp) t.remove(e, false, now);
  d.update(now + 1000);
  assert.deepEqual(
    d.modes,
    { dropEntry: 2, dropPacket: 1, secureTcp: 2, halfOpenPerSource: 2, synProxy: 0 },
    'room is back: held, but drop_packet',
  );
  d.update(now + 59_999);
  assert.equal(d.modes.secureTcp, 2);
  d.update(now + 60_000);
  assert.deepEqual(d.modes, { dropEntry: 1, dropPacket: 1, secureTcp: 1, halfOpenPerSource: 1, synProxy: 0 }, '60 s without a shortage');
  assert.equal(t.i32[L.H_SECURE_TCP], 0);
});

test('mode 3 acts with room to spare (drop_packet at am_droprate), mode 0 never, and a rewritten mode takes effect at once', () => {
  const { t } = fresh(1024);
  const d = new Defense(t, settings({ dropPacket: 3, amDroprate: 7, secureTcp: 0 }));
  assert.equal(d.nomem, false);
  assert.equal(t.i32[L.H_DROP_RATE], 7);
  assert.equal(t.i32[L.H_SECURE_TCP], 0);
  d.configure(settings({ dropPacket: 0, secureTcp: 3 }));
  assert.equal(t.i32[L.H_DROP_RATE], 0);
  assert.equal(t.i32[L.H_SECURE_TCP], 1);
  assert.equal(d.modes.secureTcp, 3);
});

// ── drop_entry, dropEntryScope kernel (ip_vs_random_dropentry, todrop_entry) ────────────────
test('the kernel drop_entry removes half-open TCP and SCTP INIT entries, never templates, established flows in use or UDP seen lately', () => {
  const { t, rs } = fresh(1024);
  const now = t.now();
  const synRecv = flow(t, C + 1, 1001, now, [[DIR_INPUT, TCPF_SYN]]);
  const synAck = flow(t, C + 2, 1002, now, [[DIR_INPUT, TCPF_SYN]]);
  t.i32[t.base(synAck) + L.E_STATE] = 10; // SYNACK, as secure_tcp makes it
  const established = flow(t, C + 3, 1003, now, [
    [DIR_INPUT, TCPF_SYN],
    [DIR_OUTPUT, TCPF_SYN | TCPF_ACK],
    [DIR_INPUT, TCPF_ACK],
  ]);
  const finWait = flow(t, C + 4, 1004, now, [
    [DIR_INPUT, TCPF_SYN],
    [DIR_OUTPUT, TCPF_SYN | TCPF_ACK],
    [DIR_INPUT, TCPF_ACK],
    [DIR_OUTPUT, TCPF_FIN | TCPF_ACK],
  ]);
  const tmpl = t.insert(
    newFlow({
      proto: 6,
      caddr: C + 5,
      cports: 80,
      vaddr: V,
      daddr: D,
      dports: 8080 << 16,
      laddr: C + 5,
      flags: L.F_TEMPLATE,
      rs: 1,
      now,
      templateMs: 300_000,
    }),
  );
  const udp = t.insert(
    newFlow({ proto: 17, caddr: C + 6, cports: (1006 << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: C + 6, rs: 1, now }),
  );
  t.touch(udp, DIR_INPUT, 0, now);
  const sctpInit = t.insert(
    newFlow({ proto: 132, caddr: C + 7, cports: (1007 << 16) | 80, vaddr: V, daddr: D, dports: DP, laddr: C + 7, rs: 1, now }),
  );
  t.i32[t.base(sctpInit) + L.E_STATE] = SCTP_S_INIT1;
  const sctpInit2 = t.insert(
    newFlow({ proto: 132, caddr: C + 8, cports: (1008 << 16) | 80, vaddr: V, daddr: D, dports: DP, laddr: C + 8, rs: 1, now }),
  );
  t.i32[t.base(sctpInit2) + L.E_STATE] = SCTP_S_INIT;
  const sctpCookie = t.insert(
    newFlow({ proto: 132, caddr: C + 9, cports: (1009 << 16) | 80, vaddr: V, daddr: D, dports: DP, laddr: C + 9, rs: 1, now }),
  );
  t.i32[t.base(sctpCookie) + L.E_STATE] = SCTP_S_COOKIE_ECHOED;
  const d = new Defense(t, settings({ dropEntry: 3, dropEntryScope: 'kernel' }));
  // Every live entry sits in slots 0..9: one scan of capacity/32 = 32 slots from slot 0 sees all.
  assert.equal(
    d.randomDropEntry(now + 1000, () => 0),
    4,
  );
  const live = (e: number) => (t.i32[t.base(e) + L.E_FLAGS]! & L.F_IN_USE) !== 0;
  assert.deepEqual([synRecv, synAck, sctpInit, sctpInit2].map(live), [false, false, false, false]);
  assert.deepEqual([established, finWait, tmpl, udp, sctpCookie].map(live), [true, true, true, true, true]);
  assert.equal(d.counts.droppedHalfOpen, 4);
  assert.equal(rs[1 * L.RS_WORDS + L.RS_ACTIVE]! + rs[1 * L.RS_WORDS + L.RS_INACTIVE]!, 4, 'dropped entries are unbound from their server');
});

test('the kernel todrop_entry drops flows idle for 60 s with 1–8 client packets, every n-th of those with n, and keeps the rest', () => {
  const { t } = fresh(1024);
  const now = t.now();
  const long = now - 70_000; // last packet 70 s ago: idle long enough
  const mk = (i: number, pkts: number, at: number) => {
    const e = t.insert(
      newFlow({ proto: 17, caddr: C + i, cports: ((2000 + i) << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: C + i, rs: 1, now: at }),
    );
    for (let k = 0; k < pkts; k++) t.touch(e, DIR_INPUT, 0, at);
    return e;
  };
  const one = [mk(0, 1, long), mk(1, 1, long)];
  const two = [mk(2, 2, long), mk(3, 2, long), mk(4, 2, long)];
  const nine = mk(5, 9, long);
  const recent = mk(6, 1, now - 30_000);
  const est = flow(t, C + 7, 1007, long, [
    [DIR_INPUT, TCPF_SYN],
    [DIR_OUTPUT, TCPF_SYN | TCPF_ACK],
    [DIR_INPUT, TCPF_ACK],
    [DIR_INPUT, TCPF_ACK],
  ]);
  const d = new Defense(t, settings({ dropEntry: 3, dropEntryScope: 'kernel' }));
  d.randomDropEntry(now, () => 0);
  const live = (e: number) => (t.i32[t.base(e) + L.E_FLAGS]! & L.F_IN_USE) !== 0;
  assert.deepEqual(one.map(live), [false, false], '1 packet: every one');
  assert.deepEqual(two.map(live), [false, true, false], '2 packets: the counter starts at 0, then every 2nd');
  assert.equal(live(nine), true, 'more than 8 packets: kept');
  assert.equal(live(recent), true, 'refreshed 30 s ago: kept');
  assert.equal(live(est), false, 'an ESTABLISHED flow idle 70 s with 3 client packets is a candidate too');
  assert.equal(d.counts.droppedIdle, 5);
});

test('the kernel drop_entry scans capacity/32 slots a tick from a random start; automatic, it stops once free entries reach amemthresh', () => {
  for (const mode of [1, 3]) {
    const { t } = fresh(1024);
    const now = t.now();
    for (let i = 0; i < 1024; i++) flow(t, C + i, 3000, now, [[DIR_INPUT, TCPF_SYN]]);
    assert.equal(
      t.insert(newFlow({ proto: 6, caddr: 0x0b000001, cports: 1 << 16, vaddr: V, daddr: D, dports: DP, laddr: 0x0b000001, rs: 1, now })),
      -1,
      'full',
    );
    const d = new Defense(t, settings({ dropEntry: mode, dropEntryScope: 'kernel', amemthresh: 64 }));
    assert.equal(d.modes.dropEntry, mode === 1 ? 2 : 3);
    let seq = 0;
    const next = () => ((seq++ * 32) % 1024) / 1024;
    d.tick(now, next);
    assert.equal(t.count(), 1024 - 32, 'one tick: 32 slots');
    assert.ok(
      t.insert(newFlow({ proto: 6, caddr: 0x0b000001, cports: 1 << 16, vaddr: V, daddr: D, dports: DP, laddr: 0x0b000001, rs: 1, now })) >=
        0,
      'a new client finds room',
    );
    for (let i = 0; i < 31; i++) d.tick(now, next);
    if (mode === 3) assert.equal(t.count(), 1, 'always on: 32 ticks cover the table; only the new client (state NONE) is left');
    else {
      // Free entries after each tick: 0 → 32 (31 with the new client) → 63 → 95 ≥ 64: three ticks drop.
      assert.equal(t.count(), 1024 - 3 * 32 + 1, 'automatic: it drops until amemthresh entries are free, then idles');
      assert.equal(d.modes.dropEntry, 1);
    }
  }
});

// ── drop_entry, dropEntryScope halfOpen (the default) ──────────────────────────────────────
/**
 * Every kind of entry a table holds, the flows past their handshake idle 70 s with 1–8 client
 * packets (what the kernel's todrop_entry takes): `halfOpen` the ones whose handshake never
 * completed, `kept` every other one.
 */
function mixedTable(t: ConnTable, now: number): { halfOpen: number[]; kept: number[]; idleEstablished: number[] } {
  const long = now - 70_000;
  const halfOpen: number[] = [];
  const idleEstablished: number[] = [];
  const kept: number[] = [];
  let c = C;
  const sctp = (state: number, at: number, pkts: number) => {
    c++;
    const e = t.insert(
      newFlow({ proto: 132, caddr: c, cports: (5000 << 16) | 80, vaddr: V, daddr: D, dports: DP, laddr: c, rs: 1, now: at }),
    );
    for (let k = 0; k < pkts; k++) t.touch(e, DIR_INPUT, 0, at);
    t.i32[t.base(e) + L.E_STATE] = state;
    return e;
  };
  const handshake: [number, number][] = [
    [DIR_INPUT, TCPF_SYN],
    [DIR_OUTPUT, TCPF_SYN | TCPF_ACK],
    [DIR_INPUT, TCPF_ACK],
  ];
  for (let i = 0; i < 40; i++) idleEstablished.push(flow(t, ++c, 1000 + i, long, [...handshake, [DIR_INPUT, TCPF_ACK]]));
  for (let i = 0; i < 10; i++) {
    const e = t.insert(
      newFlow({ proto: 17, caddr: ++c, cports: (2000 << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: c, rs: 1, now: long }),
    );
    t.touch(e, DIR_INPUT, 0, long);
    kept.push(e);
  }
  for (let i = 0; i < 5; i++) kept.push(sctp(SCTP_S_ESTABLISHED, long, 2), sctp(SCTP_S_COOKIE_ECHOED, long, 2));
  kept.push(flow(t, ++c, 3000, long, [...handshake, [DIR_OUTPUT, TCPF_FIN | TCPF_ACK]])); // FIN_WAIT
  kept.push(flow(t, ++c, 3001, long, [[DIR_OUTPUT, TCPF_SYN]])); // SYN_SENT
  kept.push(
    t.insert(
      newFlow({
        proto: 6,
        caddr: ++c,
        cports: 80,
        vaddr: V,
        daddr: D,
        dports: 8080 << 16,
        laddr: c,
        flags: L.F_TEMPLATE,
        rs: 1,
        now,
        templateMs: 300_000,
      }),
    ),
  );
  // A SYN-proxied flow waiting for its server: its client answered a cookie.
  const pending = t.insert(
    newFlow({
      proto: 6,
      caddr: ++c,
      cports: (3002 << 16) | 80,
      vaddr: V,
      daddr: D,
      dports: DP,
      laddr: c,
      flags: L.F_SYNPROXY | L.F_SP_PENDING,
      rs: 1,
      now: long,
    }),
  );
  t.i32[t.base(pending) + L.E_STATE] = TCP_STATE_NAMES.indexOf('SYN_RECV');
  kept.push(pending);
  for (let i = 0; i < 30; i++) halfOpen.push(flow(t, ++c, 4000 + i, now - i * 1000, [[DIR_INPUT, TCPF_SYN]]));
  for (let i = 0; i < 10; i++) {
    const e = flow(t, ++c, 5000 + i, now - i * 1000, [[DIR_INPUT, TCPF_SYN]]);
    t.i32[t.base(e) + L.E_STATE] = TCP_STATE_NAMES.indexOf('SYNACK');
    halfOpen.push(e);
  }
  for (let i = 0; i < 3; i++) halfOpen.push(sctp(SCTP_S_INIT1, now, 1), sctp(SCTP_S_INIT, now, 1));
  for (const e of [...halfOpen, ...kept, ...idleEstablished]) assert.ok(e >= 0);
  return { halfOpen, kept, idleEstablished };
}

const live = (t: ConnTable, e: number) => (t.i32[t.base(e) + L.E_FLAGS]! & L.F_IN_USE) !== 0;

test('the default drop_entry gives up half-open entries only: never an established flow, idle or not, a UDP flow, a template or a pending proxied flow', () => {
  const { t } = fresh(1024);
  const now = t.now();
  const m = mixedTable(t, now);
  // Short of room by far (amemthresh = capacity): every candidate goes at the first tick.
  const d = new Defense(t, settings({ dropEntry: 3, amemthresh: 1024 }));
  assert.equal(d.settings.dropEntryScope, 'halfOpen');
  for (let i = 0; i < 64; i++) d.tick(now + i * 1000);
  assert.deepEqual(
    m.halfOpen.filter((e) => live(t, e)),
    [],
    'TCP SYN_RECV/SYNACK, SCTP INIT1/INIT: gone',
  );
  assert.deepEqual(
    [...m.idleEstablished, ...m.kept].filter((e) => !live(t, e)),
    [],
    'every other entry kept, through 64 ticks (two passes of the kernel scan)',
  );
  assert.deepEqual([d.counts.droppedHalfOpen, d.counts.droppedIdle], [m.halfOpen.length, 0]);
  // The kernel's scope, on the same table, takes idle established and UDP flows: the test above
  // would see them go.
  const k = fresh(1024);
  const km = mixedTable(k.t, now);
  const kd = new Defense(k.t, settings({ dropEntry: 3, amemthresh: 1024, dropEntryScope: 'kernel' }));
  let seq = 0;
  for (let i = 0; i < 64; i++) kd.tick(now + i * 1000, () => ((seq++ * 32) % 1024) / 1024);
  assert.ok(km.idleEstablished.filter((e) => !live(k.t, e)).length > 0, 'the kernel scope drops idle established flows');
  assert.ok(kd.counts.droppedIdle > km.idleEstablished.filter((e) => !live(k.t, e)).length - 1);
});

test('the default drop_entry takes the half-open entries nearest their timer first, as many as bring free entries back to amemthresh', () => {
  const { t } = fresh(1024);
  const now = t.now();
  // A full table of SYN_RECV entries whose last packet was 0–49 s ago (i % 50): time left 11–60 s.
  const age = new Map<number, number>();
  for (let i = 0; i < 1024; i++) age.set(flow(t, C + i, 6000, now - (i % 50) * 1000, [[DIR_INPUT, TCPF_SYN]]), i % 50);
  const d = new Defense(t, settings({ dropEntry: 1, amemthresh: 64 }));
  const gone = () =>
    [...age]
      .filter(([e]) => !live(t, e))
      .map(([, a]) => a)
      .sort((a, b) => b - a);
  d.tick(now);
  // 64 short (free 0 of amemthresh 64) beats the kernel's share (1024 / 32 = 32): the oldest 64 —
  // 20 each of ages 49, 48 and 47 (i % 50 = 47…49 for i < 1024), then 4 of age 46.
  const first = gone();
  assert.equal(first.length, 64);
  assert.deepEqual(first.slice(0, 60), [...Array(20).fill(49), ...Array(20).fill(48), ...Array(20).fill(47)]);
  assert.deepEqual(first.slice(60), [46, 46, 46, 46]);
  assert.equal(d.freeEntries, 0, 'measured before the drop');
  assert.equal(t.capacity - t.count(), 64, 'free entries back at amemthresh');
  // Room again but held (holdTime 0 here: automatic, off at once) — mode 3 keeps it acting: then
  // only the kernel's share, 960 / 32 = 30, the next oldest.
  d.configure(settings({ dropEntry: 3, amemthresh: 64 }));
  d.tick(now);
  const second = gone().slice(64);
  assert.deepEqual(second, [...Array(16).fill(46), ...Array(14).fill(45)]);
  assert.equal(d.counts.droppedHalfOpen, 94);
  assert.equal(d.counts.droppedIdle, 0);
});

test('with room and few half-open entries the default drop_entry drops nothing (the kernel share of 20 is 0)', () => {
  const { t } = fresh(1024);
  const now = t.now();
  const es = Array.from({ length: 20 }, (_, i) => flow(t, C + i, 7000, now - 50_000, [[DIR_INPUT, TCPF_SYN]]));
  const d = new Defense(t, settings({ dropEntry: 3, amemthresh: 64 }));
  // From slot 0 the kernel scope's 32-slot scan would cover all 20 (they sit in slots 0–19).
  for (let i = 0; i < 5; i++) d.tick(now, () => 0);
  assert.equal(es.filter((e) => live(t, e)).length, 20);
  assert.equal(d.counts.droppedHalfOpen, 0);
});

test('on a table larger than one window the default drop_entry works a window a tick, with its share of the shortfall', () => {
  const cap = 1 << 19; // two windows of 2^18 slots
  const { t } = fresh(cap);
  const now = t.now();
  // 1000 half-open entries, all in the first window (the free list hands out slots from 0).
  const es = Array.from({ length: 1000 }, (_, i) => flow(t, C + i, 8000, now - (i % 40) * 1000, [[DIR_INPUT, TCPF_SYN]]));
  assert.ok(es.every((e) => e < cap >> 1));
  // 500 short: each window is half the table, so it takes half of that, 250.
  const d = new Defense(t, settings({ dropEntry: 3, amemthresh: cap - 1000 + 500 }));
  d.tick(now);
  assert.equal(d.counts.droppedHalfOpen, 250);
  d.tick(now);
  assert.equal(d.counts.droppedHalfOpen, 250, 'the second window holds none');
  d.tick(now);
  assert.equal(d.counts.droppedHalfOpen, 375, 'back at the first window: half of the 250 still short');
});

// ── secure_tcp (tcp_states_dos + short half-open timers) ───────────────────────────────────
test("secure_tcp's table is the kernel's tcp_states_dos: exactly the 15 cells it changes", () => {
  const S = Object.fromEntries(TCP_STATE_NAMES.map((n, i) => [n, i])) as Record<string, number>;
  const idx = (dir: number, ev: number, st: number) => (dir * 5 + ev) * TCP_STATE_COUNT + st;
  const expected = new Map<number, number>([
    [idx(0, 0, S.SYNACK!), S.SYNACK!],
    [idx(0, 1, S.SYNACK!), S.SYNACK!],
    [idx(0, 2, S.SYN_RECV!), S.SYN_RECV!],
    [idx(0, 2, S.SYNACK!), S.SYNACK!],
    [idx(0, 3, S.SYNACK!), S.CLOSE!],
    [idx(1, 0, S.SYN_RECV!), S.SYNACK!],
    [idx(1, 0, S.SYNACK!), S.SYNACK!],
    ...['NONE', 'FIN_WAIT', 'TIME_WAIT', 'CLOSE', 'CLOSE_WAIT', 'LAST_ACK', 'LISTEN', 'SYNACK'].map(
      (n) => [idx(2, 0, S[n]!), S.SYNACK!] as [number, number],
    ),
  ]);
  let differ = 0;
  for (let i = 0; i < TCP_TRANSITIONS.length; i++) {
    if (TCP_TRANSITIONS_DOS[i] !== TCP_TRANSITIONS[i]) {
      differ++;
      assert.equal(TCP_TRANSITIONS_DOS[i], expected.get(i), `cell ${i}`);
    }
  }
  assert.equal(differ, 15);
});

test('under secure_tcp a masq flow is ESTABLISHED only once the server speaks after the handshake, and half-open states get the short timer', () => {
  const { t } = fresh();
  new Defense(t, settings({ secureTcp: 3, secureTcpTimeout: 10 }));
  const now = t.now();
  const e = flow(t, C, 1000, now, [[DIR_INPUT, TCPF_SYN]]);
  const exp = () => t.i32[t.base(e) + L.E_EXPIRES]! - now;
  assert.deepEqual([state(t, e), exp()], ['SYN_RECV', 10_000]);
  t.touch(e, DIR_INPUT, TCPF_ACK, now);
  assert.equal(state(t, e), 'SYN_RECV', 'a client ACK without the server stays SYN_RECV (normal table: ESTABLISHED)');
  t.touch(e, DIR_OUTPUT, TCPF_SYN | TCPF_ACK, now);
  assert.deepEqual([state(t, e), exp()], ['SYNACK', 10_000], "SYNACK's 120 s become 10 s");
  t.touch(e, DIR_OUTPUT, TCPF_SYN | TCPF_ACK, now + 3_000);
  assert.equal(exp(), 10_000, "the server's retransmitted SYN-ACK does not re-arm it: only the client does");
  t.touch(e, DIR_INPUT, TCPF_ACK, now + 4_000);
  assert.deepEqual([state(t, e), exp()], ['SYNACK', 14_000]);
  t.touch(e, DIR_OUTPUT, TCPF_ACK, now);
  assert.deepEqual([state(t, e), exp()], ['ESTABLISHED', 900_000]);
  // One-way (tunnel): SYN → SYNACK, the client's ACK → ESTABLISHED.
  const u = flow(t, C + 1, 1001, now, [[DIR_INPUT, TCPF_SYN]], L.FWD_TUNNEL | L.F_NOOUTPUT);
  assert.equal(state(t, u), 'SYNACK');
  t.touch(u, DIR_INPUT, TCPF_ACK, now);
  assert.equal(state(t, u), 'ESTABLISHED');
  void DIR_INPUT_ONLY;
});

test('secure_tcp shortens entries already half-open, counted from their last packet; a packet that re-arms meanwhile wins', () => {
  const { t } = fresh();
  const now = t.now();
  const old = flow(t, C, 1000, now - 15_000, [[DIR_INPUT, TCPF_SYN]]); // SYN_RECV, 45 s left
  const young = flow(t, C + 1, 1001, now - 4_000, [[DIR_INPUT, TCPF_SYN]]); // 56 s left
  const est = flow(t, C + 2, 1002, now - 15_000, [
    [DIR_INPUT, TCPF_SYN],
    [DIR_OUTPUT, TCPF_SYN | TCPF_ACK],
    [DIR_INPUT, TCPF_ACK],
  ]);
  const d = new Defense(t, settings({ secureTcp: 3 }));
  d.tick(now, () => 0.5);
  assert.equal(d.counts.secureTcpShortened, 2);
  assert.equal(t.i32[t.base(young) + L.E_EXPIRES], (now + 6_000) | 0);
  assert.equal(t.i32[t.base(est) + L.E_EXPIRES], (now - 15_000 + 900_000) | 0, 'ESTABLISHED untouched');
  assert.equal(t.i32[t.base(old) + L.E_FLAGS]! & L.F_IN_USE, 0, 'the SYN_RECV whose 10 s are over is gone at once');
  assert.equal(t.count(), 2);
  d.tick(now, () => 0.5);
  assert.equal(d.counts.secureTcpShortened, 2, 'timers armed under secure_tcp are never shortened twice');
});

test('secure_tcp never shortens an entry a worker armed under it after the tick read its clock (a real client’s fresh SYN)', () => {
  const { t } = fresh();
  const now = t.now();
  const d = new Defense(t, settings({ secureTcp: 3 }));
  // A worker's batch clock 5 ms ahead of the tick's: it read the clock later (Date.now() ms), and
  // armed the entry with the short timer — 10 005 ms from the tick's now, not the normal 60 s.
  const e = flow(t, C, 1000, now + 5, [[DIR_INPUT, TCPF_SYN]]);
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 10_005) | 0);
  d.tick(now);
  assert.ok(live(t, e), 'kept: not mistaken for an entry the normal table armed 50 s ago');
  assert.equal(t.i32[t.base(e) + L.E_EXPIRES], (now + 10_005) | 0);
  assert.equal(d.counts.secureTcpShortened, 0);
});

// ── per-source half-open counters ───────────────────────────────────────────────────────────
test("a source's half-open count follows its entries: +1 at insert, −1 on ESTABLISHED or removal, an IPv6 /64 is one source", () => {
  const { t } = fresh();
  t.i32[L.H_SRC_LIMIT] = 256; // the per-source limit is on: its counts are kept
  const now = t.now();
  const slot = t.sourceSlot(false, C, 0, 0);
  const e1 = flow(t, C, 1000, now, [[DIR_INPUT, TCPF_SYN]]);
  const e2 = flow(t, C, 1001, now, [[DIR_INPUT, TCPF_SYN]]);
  t.insert(newFlow({ proto: 17, caddr: C, cports: (1002 << 16) | 53, vaddr: V, daddr: D, dports: DP, laddr: C, rs: 1, now }));
  assert.equal(t.halfOpenAt(slot), 2, 'UDP is never half-open');
  t.touch(e1, DIR_OUTPUT, TCPF_SYN | TCPF_ACK, now);
  t.touch(e1, DIR_INPUT, TCPF_ACK, now);
  assert.equal(t.halfOpenAt(slot), 1, 'ESTABLISHED leaves the count');
  t.touch(e1, DIR_INPUT, TCPF_RST, now);
  assert.equal(t.halfOpenAt(slot), 1, 'CLOSE is not half-open either');
  assert.ok(t.remove(e2, false, now));
  assert.ok(t.remove(e1, false, now));
  assert.equal(t.halfOpenAt(slot), 0);
  const a = parseIPv6('2001:db8:1:2::10')!;
  const b = parseIPv6('2001:db8:1:2:ffff::99')!;
  assert.equal(t.sourceSlot(true, a[3]!, a[0]!, a[1]!), t.sourceSlot(true, b[3]!, b[0]!, b[1]!), 'one /64, one counter');
  const hi = new Int32Array(L.HI_WORDS);
  hi.set(a.subarray(0, 3), 0);
  const e6 = t.insert(
    newFlow({
      proto: 6 | L.PROTO_V6,
      caddr: a[3]!,
      cports: (1000 << 16) | 80,
      vaddr: V,
      daddr: D,
      dports: DP,
      laddr: a[3]!,
      rs: 1,
      now,
      hi,
    }),
  );
  assert.equal(t.halfOpenAt(t.sourceSlot(true, b[3]!, b[0]!, b[1]!)), 1);
  t.remove(e6, false, now);
  assert.equal(t.halfOpenAt(t.sourceSlot(true, b[3]!, b[0]!, b[1]!)), 0);
  void SCTP_S_ESTABLISHED;
});

test('half-open counts are kept only while the per-source limit is on; an entry counted then is uncounted once, whenever it leaves', () => {
  const { t } = fresh();
  const now = t.now();
  const slot = t.sourceSlot(false, C, 0, 0);
  const before = flow(t, C, 1000, now, [[DIR_INPUT, TCPF_SYN]]);
  assert.equal(t.halfOpenAt(slot), 0, 'limit off: a new half-open entry is not counted (no hash, no shared line per SYN)');
  t.i32[L.H_SRC_LIMIT] = 4;
  const during = flow(t, C, 1001, now, [[DIR_INPUT, TCPF_SYN]]);
  assert.equal(t.halfOpenAt(slot), 1, 'limit on: counted');
  assert.ok(t.remove(before, false, now));
  assert.equal(t.halfOpenAt(slot), 1, 'an entry made before the limit was on leaves without touching the count');
  t.i32[L.H_SRC_LIMIT] = 0;
  t.touch(during, DIR_OUTPUT, TCPF_SYN | TCPF_ACK, now);
  t.touch(during, DIR_INPUT, TCPF_ACK, now);
  assert.equal(t.halfOpenAt(slot), 0, 'an entry counted while on is uncounted after, whatever the limit is now');
});

// ── on the packet path ──────────────────────────────────────────────────────────────────────
const VIP = '10.96.0.10';
const svcDoc = (o: Record<string, unknown> = {}) => ({
  dataplane: { vipCidrs: ['10.96.0.0/24'], ...((o.dataplane as Record<string, unknown>) ?? {}) },
  services: [
    {
      protocol: 'tcp',
      address: VIP,
      port: 80,
      scheduler: 'rr',
      forwarding: o.forwarding ?? 'masq',
      realServers: [{ address: '10.1.0.1', port: 8080 }],
    },
  ],
  ...(o.defense ? { defense: o.defense } : {}),
});

test('a source at its half-open limit is refused (counted) while other sources and its established flows go on', () => {
  const { run, drops, table, cfg } = makeProcessor(svcDoc({ defense: { halfOpenPerSource: 3, maxHalfOpenPerSource: 4 } }));
  new Defense(table, cfg.defense);
  for (let p = 0; p < 4; p++) assert.equal(run(tcp({ src: '192.0.2.7', dst: VIP, sport: 40000 + p, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(run(tcp({ src: '192.0.2.7', dst: VIP, sport: 40010, flags: TCPF_SYN })).v, DROP);
  assert.equal(drops('half_open_per_source'), 1);
  assert.equal(run(tcp({ src: '192.0.2.8', dst: VIP, sport: 40000, flags: TCPF_SYN })).v, FORWARD, 'another source');
  // One of the four completes its handshake: the source has room for one more.
  assert.equal(run(tcp({ src: '10.1.0.1', dst: '192.0.2.7', sport: 8080, dport: 40000, flags: TCPF_SYN | TCPF_ACK })).v, FORWARD);
  assert.equal(run(tcp({ src: '192.0.2.7', dst: VIP, sport: 40000, flags: TCPF_ACK })).v, FORWARD);
  assert.equal(run(tcp({ src: '192.0.2.7', dst: VIP, sport: 40011, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(drops('half_open_per_source'), 1);
});

test('drop_packet refuses 1 of every am_droprate new flows (counted) and never a packet of an existing flow', () => {
  const { run, drops, table, cfg } = makeProcessor(svcDoc({ defense: { dropPacket: 3, amDroprate: 4 } }));
  new Defense(table, cfg.defense);
  const v = Array.from({ length: 12 }, (_, i) => run(tcp({ src: `192.0.2.${i + 1}`, dst: VIP, sport: 40000, flags: TCPF_SYN })).v);
  // The countdown starts at 0, as the kernel's drop_counter in mode 3: the first flow is refused.
  assert.deepEqual(v.map((x) => (x === DROP ? 'd' : 'f')).join(''), 'dfffdfffdfff');
  assert.equal(drops('defense_drop_packet'), 3);
  assert.equal(run(tcp({ src: '192.0.2.2', dst: VIP, sport: 40000, flags: TCPF_ACK })).v, FORWARD);
});

test('a SYN flood that exhausts a full-NAT pool is refused (counted) and drop_entry frees the pool ports for real clients', () => {
  const { run, drops, table, cfg, rs, setNow, now } = makeProcessor(
    svcDoc({
      forwarding: 'fullnat',
      dataplane: { fullnat: { addresses: ['10.99.0.1'], portMin: 20000, portMax: 20007 } },
      // The SYN proxy (on under pressure by default) would answer the retransmitted SYN itself:
      // this is about the pool ports drop_entry frees.
      defense: { holdTime: 0, synProxy: 0 },
    }),
  );
  // What uvsd feeds the defense: the server's entries against its 1 × 8 address:port pairs.
  const rsSlot = 0;
  const pools = () => [
    {
      realServer: 'tcp 10.1.0.1:8080',
      used: rs[rsSlot * L.RS_WORDS + L.RS_ACTIVE]! + rs[rsSlot * L.RS_WORDS + L.RS_INACTIVE]!,
      capacity: 8,
    },
  ];
  const d = new Defense(table, cfg.defense, pools);
  for (let i = 0; i < 8; i++) assert.equal(run(tcp({ src: `198.51.100.${i + 1}`, dst: VIP, sport: 1234, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(run(tcp({ src: '192.0.2.50', dst: VIP, sport: 40000, flags: TCPF_SYN })).v, DROP);
  assert.equal(drops('fullnat_ports_exhausted'), 1);
  assert.equal(table.count(), 8, 'the table itself has room: only the pool is full');
  d.tick(table.now(), () => 0);
  assert.equal(d.nomem, true, 'a full pool is a shortage');
  assert.equal(d.modes.dropEntry, 2);
  // The default scope takes the pool's shortfall: its share of amemthresh is 8 × 64 / 1024 → 1 pair.
  assert.equal(d.counts.droppedHalfOpen, 1);
  // The client retransmits its SYN after its RTO (1 s on Linux); the processor remembers a full
  // pool for FULLNAT_FULL_MS, far less than that.
  setNow(now() + Math.max(1000, FULLNAT_FULL_MS + 1));
  assert.equal(
    run(tcp({ src: '192.0.2.50', dst: VIP, sport: 40000, flags: TCPF_SYN })).v,
    FORWARD,
    "the client's retransmitted SYN gets a port",
  );
  // The pool is full again; the next tick (on the workers' clock) takes another flood entry, not
  // the client's (the youngest, its timer furthest away).
  d.tick(now());
  assert.equal(d.counts.droppedHalfOpen, 2);
  assert.equal(liveFrom(table, 0xc0000232), 1, "the client's half-open entry is kept");
  d.tick(now());
  assert.equal(d.modes.dropEntry, 1, 'room again: back to automatic-idle');
});

test('the kernel drop_entry frees an exhausted full-NAT pool too (its random 1/32 scan happens to cover all eight)', () => {
  const { run, table, cfg, rs } = makeProcessor(
    svcDoc({
      forwarding: 'fullnat',
      dataplane: { fullnat: { addresses: ['10.99.0.1'], portMin: 20000, portMax: 20007 } },
      defense: { holdTime: 0, synProxy: 0, dropEntryScope: 'kernel' },
    }),
  );
  const pools = () => [{ realServer: 'tcp 10.1.0.1:8080', used: rs[L.RS_ACTIVE]! + rs[L.RS_INACTIVE]!, capacity: 8 }];
  const d = new Defense(table, cfg.defense, pools);
  for (let i = 0; i < 8; i++) assert.equal(run(tcp({ src: `198.51.100.${i + 1}`, dst: VIP, sport: 1234, flags: TCPF_SYN })).v, FORWARD);
  d.tick(table.now(), () => 0);
  assert.equal(d.counts.droppedHalfOpen, 8);
});

// ── configuration ───────────────────────────────────────────────────────────────────────────
const pick = (d: DefenseSettings) => [d.dropEntry, d.dropEntryScope];

test('defense settings default to the automatic modes with amemthresh = tableSize/16, and bad values name the field', () => {
  const base = { dataplane: { vipCidrs: ['10.96.0.0/24'], tableSize: 4096 } };
  assert.deepEqual(validateConfig(base).defense, {
    amemthresh: 256,
    amDroprate: 10,
    dropEntry: 1,
    dropEntryScope: 'halfOpen',
    dropPacket: 0,
    secureTcp: 1,
    secureTcpTimeout: 10,
    halfOpenPerSource: 1,
    maxHalfOpenPerSource: 256,
    holdTime: 60,
    synProxy: 1,
    synProxyWscale: 7,
  });
  const bad = (defense: Record<string, unknown>, path: string) =>
    assert.throws(
      () => validateConfig({ ...base, defense }),
      (e: unknown) => e instanceof UvsError && e.path === path,
      path,
    );
  bad({ dropEntry: 4 }, 'defense.dropEntry');
  bad({ secureTcp: -1 }, 'defense.secureTcp');
  bad({ amemthresh: 5000 }, 'defense.amemthresh');
  bad({ secureTcpTimeout: '500ms' }, 'defense.secureTcpTimeout');
  bad({ maxHalfOpenPerSource: 0 }, 'defense.maxHalfOpenPerSource');
  bad({ amDroprate: 0 }, 'defense.amDroprate');
  bad({ dropentry: 1 }, 'defense.dropentry');
  bad({ holdTime: '2h' }, 'defense.holdTime');
  bad({ synProxy: 5 }, 'defense.synProxy');
  bad({ synProxyMss: 100 }, 'defense.synProxyMss');
  bad({ synProxyWscale: 15 }, 'defense.synProxyWscale');
  bad({ synProxyKey: 'short' }, 'defense.synProxyKey');
  bad({ dropEntryScope: 'established' }, 'defense.dropEntryScope');
  bad({ dropEntryScope: 1 }, 'defense.dropEntryScope');
  bad({ dropEntryScope: true }, 'defense.dropEntryScope');
  assert.throws(
    () => validateConfig({ ...base, defense: { dropEntryScope: 'all' } }),
    /defense\.dropEntryScope: must be halfOpen \(handshakes that never completed, nearest their timer first\) or kernel .*, got "all"/,
  );
  // Every value dropEntry took before the scope existed still parses, as the same mode, and
  // now drops half-open entries only; the kernel's choice is asked for by name.
  for (const m of [0, 1, 2, 3]) assert.deepEqual(pick(validateConfig({ ...base, defense: { dropEntry: m } }).defense), [m, 'halfOpen']);
  assert.deepEqual(pick(validateConfig({ ...base, defense: { dropEntry: 3, dropEntryScope: 'kernel' } }).defense), [3, 'kernel']);
  assert.equal(validateConfig({ ...base, defense: { secureTcpTimeout: '3s', dropPacket: 3 } }).defense.secureTcpTimeout, 3);
});

// ── uvsadm ──────────────────────────────────────────────────────────────────────────────────
test('uvsadm -L --defense (or --defense alone) lists the defenses as the kernel names its sysctls', () => {
  for (const argv of [['-L', '--defense'], ['--defense']]) {
    const r = parseArgs(argv);
    assert.ok(r.ok && r.command.kind === 'list' && r.command.what === 'defense', JSON.stringify(r));
  }
  const r = parseArgs(['-L', '--defense', '--stats']);
  assert.equal(r.ok, false, 'no statistics columns for it');
  const { t } = fresh(1024);
  const d = new Defense(t, settings({ dropEntry: 1, secureTcp: 3, amemthresh: 1024 }));
  const text = formatDefense({ ...d.view(), refused: { dropPacket: 0, halfOpenPerSource: 2, tableFull: 5, fullnatPortsExhausted: 0 } });
  assert.match(text, /^Overload defenses: 1024 of 1024 entries free, amemthresh 1024: room$/m);
  assert.match(text, /^drop_entry\s+1\s+1\s+no$/m);
  assert.match(text, /^secure_tcp\s+3\s+3\s+yes$/m);
  assert.match(text, /^half_open_per_source\s+0\s+0\s+no$/m);
  assert.match(text, /2 half-open limit, 5 table full/);
});
