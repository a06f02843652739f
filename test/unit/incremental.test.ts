/**
 * Changes that cost their own size (issue 37), each checked against a full rebuild over random
 * sequences of configurations.
 *
 * The masq reply elements: ServiceModel.replyChanges() hands out only what changed. Over random sequences of configurations
 * (services and servers added and removed, forwarding switched between masq and tunnel,
 * connections that keep removed TCP servers draining or in the trash, drains and the trash
 * collected), the elements handed out so far must always equal a full rebuild's: one
 * (protocol, address, port) and one ICMP address for every masq server listed or in the trash.
 */
import { test } from 'node:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { createRealServerRegion } from '../../conntrack/table';
import { validateConfig, validateRemembering } from '../../control/config';
import { applyPatch, makePatch, packPatch, runJob, unpackSteps } from '../../control/offload-jobs';
import { sameValue, ServiceModel, serviceKey } from '../../control/services';
import { ruleKey } from '../../lb/nftables';
import { applyDelta, buildLookup, type Snapshot, sameService, snapshotDelta } from '../../lb/snapshot';

const SLOTS = 64;
const SERVICES = [
  { protocol: 'tcp', address: '10.96.0.10', port: 80 },
  { protocol: 'udp', address: '10.96.0.10', port: 80 },
  { protocol: 'sctp', address: '10.96.0.11', port: 80 },
  { protocol: 'tcp', address: '10.96.0.12', port: 80 },
];
const ADDRS = ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.5'];
const PORTS = [80, 8080];

function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
}

/** A random configuration of SERVICES' services over ADDRS × PORTS, masq or tunnel. */
function randomServices(r: () => number) {
  return SERVICES.filter(() => r() < 0.8).map((s) => {
    const servers = new Map<string, { address: string; port: number; forwarding: string; weight: number }>();
    for (const a of ADDRS) {
      if (r() < 0.5) continue;
      const port = PORTS[Math.floor(r() * PORTS.length)]!;
      const f = r();
      const forwarding = port === s.port && f < 0.3 ? 'tunnel' : s.protocol === 'tcp' && f > 0.7 ? 'fullnat' : 'masq';
      const pp = forwarding === 'fullnat' ? [undefined, 'v1', 'v2'][Math.floor(r() * 3)] : undefined;
      servers.set(`${a}:${port}`, { address: a, port, forwarding, weight: Math.floor(r() * 3), ...(pp ? { proxyProtocol: pp } : {}) });
    }
    return {
      ...s,
      scheduler: ['rr', 'mh', 'wrr', 'sh'][Math.floor(r() * 4)]!,
      persistence: r() < 0.2 ? 60 : 0,
      realServers: [...servers.values()],
    };
  });
}

/** The dataplane section of every configuration here: a tunnel source and a full-NAT pool, so every forwarding is valid. */
const DATAPLANE = {
  vipCidrs: ['10.96.0.0/24'],
  maxRealServers: SLOTS,
  maxServices: 8,
  tunnelSource: '10.0.0.254',
  fullnat: { addresses: ['10.0.0.200'] },
};

const config = (services: unknown[]) =>
  validateConfig({
    dataplane: { ...DATAPLANE },
    services,
  });

/** Snapshot.proxyProtocol built from every listed server, as snapshot() built it before it kept it up to date. */
function wholePp(m: ServiceModel): Uint8Array {
  const pp = new Uint8Array(SLOTS);
  for (const l of m.compiledWhole()) if (l) for (const d of l.dests) pp[d.rs] = d.pp;
  return pp;
}

test('a worker patched by snapshot deltas holds what a whole snapshot holds, after every step of 300 random sequences', () => {
  for (let seed = 1; seed <= 300; seed++) {
    const r = rng(seed);
    const rsSab = createRealServerRegion(SLOTS);
    const rs = new Int32Array(rsSab);
    const m = new ServiceModel(rsSab, new SharedArrayBuffer(8 * L.SCHED_WORDS * 4), SLOTS, 8);
    m.clock = () => 1_000_000;
    let published = m.apply(config([]));
    let worker: Snapshot = structuredClone(published);
    let raw: ReturnType<typeof randomServices> = [];
    for (let step = 0; step < 10; step++) {
      // Half the steps keep some services' mappings (the same objects, as the control worker's
      // document does): validation that remembers gives their same configuration objects, which
      // the model takes as unchanged by identity; the others are compared by key and value.
      const fresh = randomServices(r);
      const keep = r() < 0.5;
      const before = new Map(raw.map((x) => [serviceKey(x), x]));
      raw = fresh.map((x) => (keep && r() < 0.6 ? before.get(serviceKey(x)) : undefined) ?? x);
      const dataplane = { ...DATAPLANE };
      const cfg = keep ? validateRemembering({ dataplane, services: raw }) : config(raw);
      const next = m.apply(cfg);
      // The model holds what the configuration says: its services (those not configured only drain)
      // and, in each, every configured server with its configured weight where nothing quiesced it.
      const listed = m.list().filter((x) => !x.removing);
      assert.deepEqual(listed.map((x) => x.key).sort(), cfg.services.map(serviceKey).sort(), `seed ${seed} step ${step}: services`);
      for (const c of cfg.services) {
        const x = listed.find((l) => l.key === serviceKey(c))!;
        for (const rc of c.realServers) {
          const v = x.realServers.find((y) => y.address === rc.address && y.port === rc.port);
          assert.ok(v, `seed ${seed} step ${step}: ${serviceKey(c)} lists ${rc.address}:${rc.port}`);
          assert.equal(v.configuredWeight, rc.weight, `seed ${seed} step ${step}: ${serviceKey(c)} ${rc.address}:${rc.port} weight`);
        }
      }
      // Only the changed services are copied into a snapshot: it must hold what a whole copy holds.
      assert.deepEqual(next.services, m.compiledWhole(), `seed ${seed} step ${step}: the snapshot against a whole rebuild`);
      assert.deepEqual(next.proxyProtocol, wholePp(m), `seed ${seed} step ${step}: PROXY protocol by slot`);
      assert.deepEqual(next.lookup, buildLookup(m.compiledWhole()).lookup, `seed ${seed} step ${step}: the service index`);
      // postMessage clones: the worker never shares objects with the control thread.
      worker = applyDelta(worker, structuredClone(snapshotDelta(published, next)));
      published = next;
      const where = `seed ${seed} step ${step}`;
      assert.equal(worker.version, next.version, where);
      assert.equal(worker.services.length, next.services.length, `${where}: services length`);
      for (let i = 0; i < next.services.length; i++) {
        const a = worker.services[i];
        const b = next.services[i];
        assert.equal(a === undefined, b === undefined, `${where}: slot ${i} present in one only`);
        if (a && b) assert.deepEqual(a, b, `${where}: slot ${i}`);
      }
      assert.deepEqual(worker.lookup, next.lookup, `${where}: the service index`);
      assert.deepEqual(worker.proxyProtocol, next.proxyProtocol, where);
      // An unchanged configuration: nothing to send.
      const same = m.snapshot();
      const d = snapshotDelta(published, same);
      assert.deepEqual([d.set.length, d.clear.length], [0, 0], `${where}: a delta of nothing`);
      published = same;
      worker = applyDelta(worker, structuredClone(d));
      for (const s of next.services) if (s) assert.ok(sameService(s, same.services[s.slot]!), where);
      // Changes between configurations: health verdicts, and connections on some servers so that
      // the next configuration leaves removed TCP servers draining, which a later step deletes.
      for (const s of m.list())
        for (const x of s.realServers) {
          if (r() < 0.3) m.setHealthy(s.key, `${x.address}:${x.port}`, r() < 0.5);
          rs[x.slot * L.RS_WORDS + L.RS_ACTIVE] = r() < 0.3 ? 1 : 0;
        }
      if (r() < 0.5) {
        for (let i = 0; i < SLOTS; i++) rs[i * L.RS_WORDS + L.RS_ACTIVE] = 0;
        m.checkDrains();
        m.collectTrash();
      }
      const between = m.snapshot();
      assert.deepEqual(between.services, m.compiledWhole(), `${where}: after verdicts and drains`);
      assert.deepEqual(between.proxyProtocol, wholePp(m), `${where}: PROXY protocol by slot after verdicts and drains`);
      assert.deepEqual(between.lookup, buildLookup(m.compiledWhole()).lookup, `${where}: the service index after verdicts and drains`);
      worker = applyDelta(worker, structuredClone(snapshotDelta(published, between)));
      published = between;
      for (let i = 0; i < between.services.length; i++) assert.deepEqual(worker.services[i], between.services[i], `${where}: slot ${i}`);
    }
  }
});

test('reply changes handed out equal a full rebuild after every step of 300 random sequences', () => {
  for (let seed = 1; seed <= 300; seed++) {
    const r = rng(seed);
    const rsSab = createRealServerRegion(SLOTS);
    const rs = new Int32Array(rsSab);
    const m = new ServiceModel(rsSab, new SharedArrayBuffer(8 * L.SCHED_WORDS * 4), SLOTS, 8);
    let now = 1_000_000;
    m.clock = () => now;
    /** The forwarding each (service, server) was last configured with: what a trashed slot had. */
    const lastFwd = new Map<string, string>();
    const held = new Map<string, string>();
    const take = () => {
      const c = m.replyChanges();
      for (const x of c.gone) assert.ok(held.delete(ruleKey(x)), `seed ${seed}: removed ${ruleKey(x)}, never added`);
      for (const x of c.added) {
        assert.ok(!held.has(ruleKey(x)), `seed ${seed}: added ${ruleKey(x)} twice`);
        held.set(ruleKey(x), ruleKey(x));
      }
    };
    const rebuild = () => {
      const want = new Set<string>();
      const add = (proto: string, addr: string, port: number) => {
        want.add(ruleKey({ proto: proto as 'tcp', addr, port }));
        want.add(ruleKey({ proto: 'icmp', addr, port: 0 }));
      };
      for (const s of m.list()) {
        const proto = s.key.split(' ')[0]!;
        for (const x of s.realServers) if (x.forwarding === 'masq') add(proto, x.address, x.port);
      }
      for (const t of m.trash())
        if (lastFwd.get(`${t.svcKey}|${t.addr}:${t.port}`) === 'masq') add(t.svcKey.split(' ')[0]!, t.addr, t.port);
      return [...want].sort();
    };
    for (let step = 0; step < 12; step++) {
      const cfg = config(randomServices(r));
      // Connections on some servers: removed TCP ones drain, removed UDP/SCTP ones wait in the trash.
      for (const s of m.list())
        for (const x of s.realServers) if (r() < 0.3) rs[x.slot * L.RS_WORDS + L.RS_ACTIVE] = 1 + Math.floor(r() * 3);
      m.apply(cfg);
      for (const s of cfg.services)
        for (const x of s.realServers) lastFwd.set(`${s.protocol} ${s.address}:${s.port}|${x.address}:${x.port}`, x.forwarding);
      take();
      assert.deepEqual([...held.keys()].sort(), rebuild(), `seed ${seed} step ${step}: after the change`);
      // Connections end now and then: drains finish, the trash is collected.
      if (r() < 0.5) {
        for (let i = 0; i < SLOTS; i++) rs[i * L.RS_WORDS + L.RS_ACTIVE] = rs[i * L.RS_WORDS + L.RS_INACTIVE] = 0;
        now += 1000;
        m.checkDrains();
        m.collectTrash();
        take();
        assert.deepEqual([...held.keys()].sort(), rebuild(), `seed ${seed} step ${step}: after drains and the trash`);
      }
      assert.deepEqual(m.replyRules().map(ruleKey).sort(), [...held.keys()].sort(), `seed ${seed} step ${step}: replyRules()`);
    }
  }
});

test('the control worker’s answer as a patch: applied to the running configuration it gives the new one, unchanged services kept', () => {
  for (let seed = 1; seed <= 200; seed++) {
    const r = rng(seed);
    const doc1 = {
      dataplane: { ...DATAPLANE },
      services: randomServices(r),
    };
    const cfg1 = validateConfig(doc1);
    const doc2 =
      r() < 0.2
        ? { log: { level: 'warn' }, ...structuredClone(doc1), services: randomServices(r) }
        : { ...structuredClone(doc1), services: r() < 0.5 ? randomServices(r) : structuredClone(doc1.services) };
    const cfg2 = validateConfig(doc2);
    const from = { doc: doc1 as Record<string, unknown>, cfg: cfg1 };
    // postMessage clones the patch: the control thread never shares the worker's objects.
    const patch = structuredClone(makePatch(from, doc2, cfg2));
    const got = applyPatch(from, patch);
    assert.deepEqual(got.doc, doc2, `seed ${seed}: document`);
    assert.deepEqual(Object.keys(got.doc), Object.keys(doc2), `seed ${seed}: key order`);
    assert.deepEqual(got.cfg, cfg2, `seed ${seed}: configuration`);
    const oldKeys = new Map(cfg1.services.map((s, i) => [serviceKey(s), i]));
    cfg2.services.forEach((s, i) => {
      const j = oldKeys.get(serviceKey(s));
      const same = j !== undefined && sameValue(cfg1.services[j], s) && sameValue(doc1.services[j], doc2.services[i]);
      assert.equal(
        patch.changed.some((c) => c.key === serviceKey(s)),
        !same,
        `seed ${seed}: ${serviceKey(s)} sent iff changed`,
      );
      if (same) assert.equal(got.cfg.services[i], cfg1.services[j!], `seed ${seed}: unchanged ${serviceKey(s)} keeps its object`);
    });
  }
});

test('validation that remembers services gives what a whole validation gives; other sections changed, it validates again', () => {
  for (let seed = 1; seed <= 100; seed++) {
    const r = rng(seed);
    const dataplane = { ...DATAPLANE };
    let services = randomServices(r) as unknown[];
    for (let step = 0; step < 5; step++) {
      // Keep some mappings (the same objects, as the control worker's document does), replace others.
      const mixed = (randomServices(r) as unknown[]).map((s, i) => (r() < 0.5 && services[i] ? services[i] : s));
      const byKey = new Map(
        mixed.map((s) => [
          JSON.stringify([(s as { protocol: string }).protocol, (s as { port: number }).port, (s as { address: string }).address]),
          s,
        ]),
      );
      services = [...byKey.values()];
      const doc = { dataplane: r() < 0.2 ? { ...dataplane, tunnelSource: '10.0.0.253' } : dataplane, services };
      assert.deepEqual(validateRemembering(doc), validateConfig(doc), `seed ${seed} step ${step}`);
    }
  }
  // The sections before `services` decide a service's defaults: a change of them is seen.
  const svc = { protocol: 'tcp', address: '10.96.0.10', port: 80, realServers: [{ address: '10.0.0.1', port: 80 }] };
  const a = validateRemembering({ dataplane: { vipCidrs: ['10.96.0.0/24'] }, services: [svc] });
  assert.throws(() => validateRemembering({ dataplane: { vipCidrs: ['10.97.0.0/24'] }, services: [svc] }), /not inside dataplane.vipCidrs/);
  const b = validateRemembering({ dataplane: { vipCidrs: ['10.96.0.0/24'] }, services: [svc] });
  assert.notEqual(b.services[0], a.services[0], 'the sections changed in between: validated again');
  assert.equal(
    validateRemembering({ dataplane: { vipCidrs: ['10.96.0.0/24'] }, services: [svc] }).services[0],
    b.services[0],
    'remembered',
  );
});

test('a refused edit leaves the control worker’s running configuration as it was (timeouts too)', () => {
  const doc = {
    dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: SLOTS, maxServices: 8 },
    timeouts: { tcp: 900 },
    services: [{ protocol: 'tcp', address: '10.96.0.10', port: 80, realServers: [{ address: '10.0.0.1' }] }],
  };
  const cfg = validateConfig(doc);
  const limits = { maxServices: 8, maxRealServers: SLOTS };
  const bad = runJob(
    { kind: 'edit', doc, ops: [{ op: 'setTimeouts', tcp: 99_999_999, tcpFin: 0, udp: 0 }], limits, base: { version: 7, next: 8, cfg } },
    null,
  );
  assert.equal(bad.ok, false, 'a TCP timeout beyond the table’s range is refused');
  assert.equal((bad as { stage: string }).stage, 'config');
  // The next edit names the same running version: it must start from tcp 900, not the refused value.
  const ok = runJob(
    { kind: 'edit', ops: [{ op: 'setTimeouts', tcp: 0, tcpFin: 0, udp: 40 }], limits, base: { version: 7, next: 9 } },
    null,
  );
  assert.ok(ok.ok && 'patch' in ok, JSON.stringify(ok));
  assert.deepEqual(ok.patch.docTop.timeouts, { tcp: 900, udp: 40 });
});

test('a patch of many changed services, packed in parts and read back in steps, gives the same configuration', () => {
  const svc = (i: number, w: number) => ({
    protocol: 'tcp',
    address: `10.96.${i >> 8}.${i & 255}`,
    port: 80,
    realServers: [{ address: '10.0.0.1', weight: w }],
  });
  const dataplane = { vipCidrs: ['10.96.0.0/16'], maxRealServers: 4096, maxServices: 4096 };
  const doc1 = { dataplane, services: Array.from({ length: 900 }, (_, i) => svc(i, 1)) };
  const doc2 = { dataplane, services: Array.from({ length: 900 }, (_, i) => (i % 3 === 0 ? doc1.services[i]! : svc(i, 2))) };
  const from = { doc: doc1 as Record<string, unknown>, cfg: validateConfig(doc1) };
  const cfg2 = validateConfig(doc2);
  const made = makePatch(from, doc2, cfg2);
  assert.equal(made.changed.length, 600);
  const packed = packPatch(made);
  assert.equal(packed.changed.length, 0, 'the changed services travel packed');
  assert.equal(packed.packed!.ends.length, 3, 'in parts of 200');
  const moved = structuredClone(packed, { transfer: [packed.packed!.bytes.buffer as ArrayBuffer] });
  let steps = 0;
  for (const _ of unpackSteps(moved)) steps++;
  assert.equal(steps, 3, 'one step a part');
  assert.equal(moved.packed, undefined);
  const got = applyPatch(from, moved);
  assert.deepEqual(got.cfg, cfg2);
  assert.deepEqual(got.doc, doc2);
});

test('the prime job (file parsed, edit and reload paths warmed) leaves the running configuration as it is', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uvs-prime-'));
  try {
    const file = join(dir, 'uvs.yaml');
    const doc = {
      dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: SLOTS, maxServices: 8 },
      services: [0, 1, 2].map((i) => ({
        protocol: 'tcp',
        address: `10.96.0.${10 + i}`,
        port: 80,
        realServers: [{ address: '10.0.0.1', weight: 1 + i }],
      })),
    };
    writeFileSync(file, stringify(doc));
    const cfg = validateConfig(doc);
    const limits = { maxServices: 8, maxRealServers: SLOTS };
    const primed = runJob({ kind: 'prime', file, doc, base: { version: 41, next: 41, cfg } }, null);
    assert.ok(primed.ok);
    // The same file again: nothing changed, every service named by its place.
    const same = runJob({ kind: 'file', file, base: { version: 41, next: 42 } }, null);
    assert.ok(same.ok && 'patch' in same, JSON.stringify(same));
    assert.deepEqual(same.patch.changed, []);
    assert.deepEqual([...same.patch.from], [0, 1, 2]);
    // One weight: one service, with the new weight and the others' as they were.
    const one = runJob(
      {
        kind: 'edit',
        ops: [
          {
            op: 'editRealServer',
            ref: { protocol: 'tcp', address: '10.96.0.11', port: 80 },
            realServer: { address: '10.0.0.1', weight: 9 },
          },
        ],
        limits,
        base: { version: 42, next: 43 },
      },
      null,
    );
    assert.ok(one.ok && 'patch' in one, JSON.stringify(one));
    assert.deepEqual(
      one.patch.changed.map((c) => [c.key, c.cfg.realServers[0]!.weight]),
      [['tcp 10.96.0.11:80', 9]],
    );
    const got = applyPatch({ doc: doc as Record<string, unknown>, cfg }, one.patch);
    assert.deepEqual(
      got.cfg.services.map((x) => x.realServers[0]!.weight),
      [1, 9, 3],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
