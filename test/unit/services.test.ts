/** The service model: kernel list order, graceful termination, restarts, health quiescing. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { createRealServerRegion } from '../../conntrack/table';
import { validateConfig } from '../../control/config';
import { ServiceModel, type DrainEvent } from '../../control/services';

const VIP = '10.96.0.10';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function cfgWith(rsList: string[], opts: { protocol?: string; maxDrainTime?: number; weights?: number[]; services?: boolean } = {}) {
  return validateConfig({
    dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: 16, maxServices: 4 },
    gracefulTermination: opts.maxDrainTime ? { maxDrainTime: opts.maxDrainTime } : {},
    services:
      opts.services === false
        ? []
        : [
            {
              protocol: opts.protocol ?? 'tcp',
              address: VIP,
              port: 80,
              scheduler: 'rr',
              realServers: rsList.map((a, i) => ({ address: a, port: 8080, weight: opts.weights?.[i] ?? 1 })),
            },
          ],
  });
}

function model() {
  const rsSab = createRealServerRegion(16);
  const m = new ServiceModel(rsSab, new SharedArrayBuffer(4 * L.SCHED_WORDS * 4), 16, 4);
  const events: DrainEvent[] = [];
  m.onDrainEvent = (e) => events.push(e);
  let now = 1_000_000;
  m.clock = () => now;
  const rs = new Int32Array(rsSab);
  const view = () => m.list()[0]?.realServers ?? [];
  const slotOf = (addr: string) => view().find((r) => r.address === addr)!.slot;
  const setConns = (addr: string, active: number, inactive: number) => {
    const o = slotOf(addr) * L.RS_WORDS;
    rs[o + L.RS_ACTIVE] = active;
    rs[o + L.RS_INACTIVE] = inactive;
  };
  return { m, events, rs, view, setConns, advance: (ms: number) => (now += ms), slotOf };
}

test('real servers are listed newest first, as the kernel inserts them', () => {
  const { m, view } = model();
  m.apply(cfgWith(RS));
  assert.deepEqual(
    view().map((r) => r.address),
    [RS[2], RS[1], RS[0]],
  );
  m.apply(cfgWith([...RS, '10.0.0.4']));
  assert.equal(view()[0]!.address, '10.0.0.4');
});

test('removing a TCP real server without connections deletes it at once', () => {
  const { m, view, events } = model();
  m.apply(cfgWith(RS));
  m.apply(cfgWith([RS[0]!, RS[1]!]));
  assert.deepEqual(
    view()
      .map((r) => r.address)
      .sort(),
    [RS[0], RS[1]],
  );
  assert.equal(events.length, 0);
});

test('removing a TCP real server with connections drains it: weight 0, listed, deleted when its last connection is gone', () => {
  const { m, view, events, setConns } = model();
  m.apply(cfgWith(RS));
  setConns(RS[2]!, 1, 2);
  const snap = m.apply(cfgWith([RS[0]!, RS[1]!]));
  const d = view().find((r) => r.address === RS[2])!;
  assert.deepEqual([d.weight, d.configuredWeight, d.draining], [0, 1, true]);
  assert.equal(snap.services[0]!.dests.find((x) => x.rs === d.slot)!.weight, 0, 'the snapshot the workers get has weight 0');
  assert.deepEqual(
    events.map((e) => [e.action, e.activeConns, e.inactConns]),
    [['draining', 1, 2]],
  );
  assert.equal(m.checkDrains(), false, 'still has connections');
  setConns(RS[2]!, 0, 1);
  assert.equal(m.checkDrains(), false, 'inactive connections count too');
  setConns(RS[2]!, 0, 0);
  assert.equal(m.checkDrains(), true);
  assert.equal(
    view().find((r) => r.address === RS[2]),
    undefined,
  );
  assert.equal(events.at(-1)!.action, 'deleted');
  assert.equal(m.drains().length, 0);
});

test('a server already draining is never drained twice', () => {
  const { m, events, setConns } = model();
  m.apply(cfgWith(RS));
  setConns(RS[2]!, 1, 0);
  m.apply(cfgWith([RS[0]!, RS[1]!]));
  m.apply(cfgWith([RS[0]!, RS[1]!]));
  m.apply(cfgWith([RS[0]!]));
  assert.equal(events.filter((e) => e.action === 'draining' && e.realServer.startsWith(RS[2]!)).length, 1);
});

test('UDP real servers are deleted at once even with flows', () => {
  const { m, view, setConns, events } = model();
  m.apply(cfgWith(RS, { protocol: 'udp' }));
  setConns(RS[2]!, 0, 5);
  m.apply(cfgWith([RS[0]!, RS[1]!], { protocol: 'udp' }));
  assert.equal(
    view().find((r) => r.address === RS[2]),
    undefined,
  );
  assert.equal(events.length, 0);
  assert.equal(m.trash().length, 1, 'kept in the trash while its flows exist');
});

test('a server re-added while draining is deleted and added back with its configured weight', () => {
  const { m, view, setConns, events } = model();
  m.apply(cfgWith(RS, { weights: [1, 1, 5] }));
  const slot = view().find((r) => r.address === RS[2])!.slot;
  setConns(RS[2]!, 2, 0);
  m.apply(cfgWith([RS[0]!, RS[1]!]));
  m.apply(cfgWith(RS, { weights: [1, 1, 5] }));
  const back = view().find((r) => r.address === RS[2])!;
  assert.deepEqual([back.weight, back.draining, back.slot], [5, false, slot]);
  assert.equal(view()[0]!.address, RS[2], 'added back at the head of the list');
  assert.equal(back.activeConns, 2, 'revived from the trash with its counters');
  assert.equal(events.at(-1)!.action, 'resurrected');
});

test('the maximum drain time deletes a server with connections left', () => {
  const { m, view, setConns, events, advance } = model();
  m.apply(cfgWith(RS, { maxDrainTime: 30 }));
  setConns(RS[0]!, 1, 0);
  m.apply(cfgWith([RS[1]!, RS[2]!], { maxDrainTime: 30 }));
  advance(29_000);
  assert.equal(m.checkDrains(), false);
  advance(1_000);
  assert.equal(m.checkDrains(), true);
  assert.equal(
    view().find((r) => r.address === RS[0]),
    undefined,
  );
  assert.deepEqual([events.at(-1)!.action, events.at(-1)!.activeConns], ['deadline', 1]);
});

test('a removed TCP service stays, all weights 0, until its servers have drained', () => {
  const { m, setConns } = model();
  m.apply(cfgWith(RS));
  setConns(RS[1]!, 1, 0);
  const snap = m.apply(cfgWith([], { services: false }));
  assert.equal(snap.services.length, 1);
  assert.deepEqual(
    snap.services[0]!.dests.map((d) => d.weight),
    [0],
  );
  assert.equal(m.list()[0]!.removing, true);
  setConns(RS[1]!, 0, 0);
  assert.equal(m.checkDrains(), true);
  assert.equal(m.snapshot().services.length, 0);
});

test('drains survive a restart: the persisted list puts unconfigured servers back at weight 0, configured ones get their weight', () => {
  const a = model();
  a.m.apply(cfgWith(RS));
  a.setConns(RS[0]!, 1, 0);
  a.m.apply(cfgWith([RS[1]!, RS[2]!]));
  const persisted = JSON.parse(JSON.stringify(a.m.persistedDrains()));
  assert.equal(persisted.length, 1);

  const b = model();
  b.m.apply(cfgWith([RS[1]!, RS[2]!]));
  b.m.restoreDrains(persisted);
  const r0 = b.view().find((r) => r.address === RS[0])!;
  assert.deepEqual([r0.weight, r0.draining], [0, true]);
  assert.equal(b.m.drains()[0]!.since, persisted[0].since, 'the drain keeps its start time');
  assert.ok(
    b
      .view()
      .filter((r) => r.address !== RS[0])
      .every((r) => r.weight === 1),
  );
  assert.equal(b.m.checkDrains(), true, 'no connections on this node: deleted at the first check');

  const c = model();
  c.m.apply(cfgWith(RS));
  c.m.restoreDrains(persisted);
  assert.equal(c.view().find((r) => r.address === RS[0])!.weight, 1, 'configured again: its configured weight, not 0');
  assert.equal(c.m.drains().length, 0);
});

test('a failing health check quiesces a server (weight 0) and recovery restores its configured weight', () => {
  const { m, view } = model();
  m.apply(cfgWith(RS, { weights: [3, 1, 1] }));
  const key = m.list()[0]!.key;
  assert.equal(m.setHealthy(key, `${RS[0]}:8080`, false), true);
  assert.deepEqual([view().find((r) => r.address === RS[0])!.weight, view().find((r) => r.address === RS[0])!.healthy], [0, false]);
  assert.equal(m.setHealthy(key, `${RS[0]}:8080`, false), false, 'no change, no new snapshot');
  m.setHealthy(key, `${RS[0]}:8080`, true);
  assert.equal(view().find((r) => r.address === RS[0])!.weight, 3);
});

test('changing the scheduler rebinds it on the current list without touching the servers', () => {
  const { m, view } = model();
  m.apply(cfgWith(RS));
  const slots = view().map((r) => r.slot);
  const c = cfgWith(RS);
  c.services[0]!.scheduler = 'wrr';
  const snap = m.apply(c);
  assert.equal(snap.services[0]!.scheduler, 'wrr');
  assert.deepEqual(
    view().map((r) => r.slot),
    slots,
  );
  assert.ok(snap.services[0]!.data, 'wrr prepared its gcd/max weight');
});

test('SCTP real servers are deleted at once even with associations, like UDP (kube-proxy), and get sctp reply rules', () => {
  const { m, view, setConns, events } = model();
  m.apply(cfgWith(RS, { protocol: 'sctp' }));
  assert.deepEqual(
    m
      .replyRules()
      .filter((r) => r.proto !== 'icmp')
      .map((r) => [r.proto, r.port]),
    RS.map(() => ['sctp', 8080]),
    "the servers' SCTP replies are routed into the device like TCP and UDP ones",
  );
  setConns(RS[2]!, 3, 5);
  m.apply(cfgWith([RS[0]!, RS[1]!], { protocol: 'sctp' }));
  assert.equal(
    view().find((r) => r.address === RS[2]),
    undefined,
  );
  assert.equal(events.length, 0, 'never drained');
  assert.equal(m.trash().length, 1, 'kept in the trash while its associations exist');
  assert.ok(
    m.replyRules().some((r) => r.proto === 'sctp' && r.addr === RS[2] && r.port === 8080),
    'a trashed server keeps its sctp reply rule',
  );
});

test('with Redis, a server deleted by a drain is held for late records, and gives its slot up when a configuration needs it', () => {
  const { m, rs, advance } = model();
  m.remoteConns = () => [0, 0]; // Redis configured: no other node reports anything
  m.recordHold = () => 900_000;
  const first = Array.from({ length: 16 }, (_, i) => `10.0.1.${i + 1}`);
  m.apply(cfgWith(first));
  const slotOfFirst0 = m.realServerSlot(`tcp ${VIP}:80`, `${first[0]}:8080`)!.slot;
  // All 16 removed with no connection anywhere: deleted, but their records are still believed.
  m.apply(cfgWith([]));
  assert.ok(m.flowTarget(`tcp ${VIP}:80`, `${first[0]}:8080`) !== null, 'a late record is served');
  assert.ok((Atomics.load(rs, slotOfFirst0 * L.RS_WORDS + L.RS_FLAGS) & L.RSF_DRAINED) !== 0);
  assert.equal(m.collectTrash(), 0, 'held until its hold ends');
  // 16 other servers need every slot: the held ones give theirs up rather than refuse the change.
  const second = Array.from({ length: 16 }, (_, i) => `10.0.2.${i + 1}`);
  m.apply(cfgWith(second));
  assert.equal(m.list()[0]!.realServers.length, 16);
  assert.equal(m.flowTarget(`tcp ${VIP}:80`, `${first[0]}:8080`), null, 'its records are refused now');
  // A held server with an adopted flow is never evicted: the configuration is refused instead.
  m.apply(cfgWith(second.slice(0, 15)));
  const held = m.realServerSlot(`tcp ${VIP}:80`, `${second[15]}:8080`)!.slot;
  rs[held * L.RS_WORDS + L.RS_ACTIVE] = 1;
  assert.throws(() => m.apply(cfgWith([...second.slice(0, 15), '10.0.3.1'])), /not enough real-server slots: 1 needed, 0 free/);
  rs[held * L.RS_WORDS + L.RS_ACTIVE] = 0;
  advance(900_000);
  assert.equal(m.collectTrash(), 1, 'freed once the hold ended');
});
