/**
 * Three (then four) LB nodes active-active behind a router that spreads the VIP ranges over them by
 * an L4 ECMP hash (lab/ecmp-lab.ts): real BGP sessions (BIRD 2 on the router and on every node,
 * BFD), the router's own kernel multipath route, IPIP / ip6ip6 with direct return, mh with
 * mh-fallback and mh-port, one Redis (and the three-master Cluster). Every scenario runs long TCP
 * echo streams (lab/tools.ts `streams`: every byte checked) that are running at the event, and
 * checks that none is lost, that the flows the router moved were adopted by the nodes they moved
 * to, and — the control — that without Redis the same event does lose them.
 *
 * Which node carries a flow is asked of the router's kernel (`ip route get … sport … dport …`, the
 * forwarding path's own multipath hash), before and after each event: the flows that moved and
 * where to. Figures go to the test output as `# ecmp …` lines (README, perf/FAILURES.md).
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { MaintenanceResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { echoStreams, type EchoStream } from '../../lab/clients';
import { EcmpLab, ECMP_REDIS } from '../../lab/ecmp-lab';
import { hasCommand, LAB_VIP, LAB_VIP6, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const isRoot = process.getuid?.() === 0;
const skip = !isRoot
  ? 'integration tests need root'
  : !hasCommand('redis-server')
    ? 'redis-server missing'
    : !EcmpLab.available()
      ? 'BIRD 2 missing (apt-get install bird2)'
      : false;
const PORT = 9007; // the lab servers' TCP echo

describe('ECMP: LB nodes active-active behind BGP multipath, flows carried across re-hashes', { skip, timeout: 900_000 }, () => {
  const lab = new EcmpLab(`uve${process.pid % 10000}`);
  const killed = new Set<number>();
  const service = (vip: string, rs: string[]) => ({
    protocol: 'tcp',
    address: vip,
    port: PORT,
    scheduler: 'mh',
    schedFlags: ['mh-fallback', 'mh-port'],
    forwarding: 'tunnel',
    realServers: rs.map((a) => ({ address: a })),
  });
  const services = () => [service(LAB_VIP, lab.rsAddrs), service(LAB_VIP6, lab.rsAddrs6)];
  const stats = async (k: number) => (await apiCall<StatsResponse>(lab.socket(k), 'GET', '/v1/stats')).body;
  const figures: string[] = [];
  const figure = (s: string) => {
    figures.push(s);
    console.log(`# ecmp ${s}`);
  };

  /** uvsd on nodes ks (in parallel), each connected to Redis, and the router spreading over them. */
  const startNodes = async (
    ks: number[],
    o: { cluster?: boolean; redis?: boolean; extra?: Record<string, unknown>; sloppy?: boolean } = {},
  ) => {
    const svcs = o.sloppy === undefined ? services() : services().map((x) => ({ ...x, sloppy: o.sloppy }));
    await Promise.all(ks.map((k) => lab.startUvsd(k, { ...lab.config(k, svcs, o), ...o.extra })));
    for (const k of ks) {
      const deadline = Date.now() + 10000;
      while (o.redis !== false && !(await stats(k)).redis?.connected) {
        if (Date.now() > deadline) throw new Error(`lb${k} did not connect to Redis`);
        await sleep(100);
      }
    }
    const all = [...lab.nodes].filter((k) => lab.uvsdRunning(k));
    await lab.waitNexthops(all);
    await lab.waitNexthops(all, true);
  };

  /**
   * Every node in ks holds an entry for each of `count` streams — its own or a shadow from Redis
   * (each flow is written at its 3rd packet and pre-loaded by the others): what a test waits for
   * before a node may die. Replaces a fixed 2 s sleep; fails with what each node held.
   */
  const everyNodeHolds = async (ks: number[], count: number, timeoutMs = 20_000) => {
    const deadline = Date.now() + timeoutMs;
    let held: number[] = [];
    for (;;) {
      held = await Promise.all(ks.map(async (k) => (await stats(k)).table.entries));
      if (held.every((n) => n >= count)) return;
      if (Date.now() > deadline) throw new Error(`nodes ${ks.join(',')} hold ${held.join(',')} entries, not ${count} each`);
      await sleep(50);
    }
  };

  const adoptedBy = async (ks: number[]) =>
    Object.fromEntries(await Promise.all(ks.map(async (k) => [k, (await stats(k)).adopted] as const))) as Record<number, number>;

  /** Flows per node (the router's hash), and the flows that moved between two such maps, by destination. */
  const perNode = (nodes: number[]) => {
    const m: Record<number, number> = {};
    for (const k of nodes) m[k] = (m[k] ?? 0) + 1;
    return m;
  };
  const movedTo = (before: number[], after: number[]) => {
    const m: Record<number, number> = {};
    before.forEach((b, i) => {
      if (after[i] !== b) m[after[i]!] = (m[after[i]!] ?? 0) + 1;
    });
    return m;
  };
  const sum = (m: Record<number, number>) => Object.values(m).reduce((a, b) => a + b, 0);

  /** The streams' verdict: lost ones, and whether every stream was mid-flight across [t0, t1]. */
  const verdict = (ss: EchoStream[], t0: number, t1: number) => {
    const lost = ss.filter((s) => s.error !== null || s.bad !== 0 || s.echoed !== s.sent);
    const notSpanning = ss.filter((s) => !(s.firstAt > 0 && s.firstAt < t0 && s.lastAt > t1));
    return { lost, notSpanning };
  };

  /**
   * Blackout of the flows that moved: each one's longest silence that began from just before the
   * event to 5 s after it (median and max over them; 0 = none longer than 1.5 sending intervals,
   * 150 ms). Each stream sends every 100 ms, so that is the resolution.
   */
  const blackout = (ss: EchoStream[], moved: boolean[], t0: number) => {
    const gaps = ss
      .filter((_s, i) => moved[i])
      .map((s) => Math.max(0, ...s.gaps.filter(([at]) => at >= t0 - 300 && at <= t0 + 5000).map(([, ms]) => ms)))
      .sort((a, b) => a - b);
    return gaps.length ? { median: gaps[Math.floor(gaps.length / 2)]!, max: gaps[gaps.length - 1]! } : { median: 0, max: 0 };
  };

  const redisCmdstats = (): Record<string, number> => {
    const text = lab.exec(lab.ns.rd, 'redis-cli', ['-h', ECMP_REDIS, 'info', 'commandstats']);
    const out: Record<string, number> = {};
    for (const m of text.matchAll(/cmdstat_(\w+):calls=(\d+)/g)) out[m[1]!] = Number(m[2]);
    return out;
  };

  const uvsadm = (k: number, args: string[]): { code: number; out: string } => {
    try {
      return {
        code: 0,
        out: execFileSync(process.execPath, [join(ROOT, 'dist', 'control', 'uvsadm.js'), '--socket', lab.socket(k), ...args], {
          encoding: 'utf8',
          timeout: 60000,
        }),
      };
    } catch (e) {
      const x = e as { status: number; stdout: string; stderr: string };
      return { code: x.status, out: x.stdout + x.stderr };
    }
  };

  before(async () => {
    lab.up(3);
    await lab.waitServers();
    for (const k of [1, 2, 3]) lab.startBird(k);
  });

  beforeEach(async () => {
    for (const k of killed) await lab.killNode(k); // a frozen node is killed for good first
    for (const k of [...lab.nodes]) await lab.stopUvsd(k);
    if (lab.nodes.has(4)) await lab.removeNode(4);
    for (const k of killed) {
      lab.reviveNode(k);
      lab.startBird(k);
    }
    killed.clear();
    lab.setHashPolicy('l4');
    lab.exec(lab.ns.rd, 'redis-cli', ['-h', ECMP_REDIS, 'flushall']);
  });

  after(async () => {
    for (const f of figures) console.log(`# ecmp summary: ${f}`);
    lab.down();
  });

  /**
   * The kill scenario, shared by (a), (c), (e) and the Cluster variant: `count` streams over the
   * VIP, node `victim` dies (links down, then SIGKILL of uvsd and BIRD); returns what was measured.
   */
  const killScenario = async (o: {
    label: string;
    count: number;
    v6?: boolean;
    victim: number;
    how?: 'node' | 'freeze' | 'uvsd';
    seconds?: number;
    beforeKill?: () => Promise<void>;
  }) => {
    const v6 = o.v6 ?? false;
    const seconds = o.seconds ?? 12;
    const st = echoStreams(lab.ns.cl, v6 ? LAB_VIP6 : LAB_VIP, PORT, o.count, seconds);
    const ready = await st.ready;
    assert.equal(ready.ready, o.count, 'every stream connected and got its banner');
    await everyNodeHolds([1, 2, 3], o.count); // every flow past its 3rd packet: in Redis, and a shadow on the other nodes
    const before = await lab.carriers([1, 2, 3], ready.ports);
    // IPv4: the router's hash, asked of its kernel, is what the nodes see. (IPv6's `ip route get`
    // hashes another way than forwarding does on this kernel: the nodes' view only.)
    if (!v6)
      assert.deepEqual(lab.nodeOfFlows(ready.ports, PORT), before, "the router's kernel and the nodes agree on who carries each flow");
    assert.ok((perNode(before)[o.victim] ?? 0) > 0, 'the victim carries some of the streams');
    await o.beforeKill?.();
    const survivors = [1, 2, 3].filter((k) => k !== o.victim);
    const adopted0 = await adoptedBy(survivors);
    const t0 = Date.now();
    const how = o.how ?? 'node';
    if (how === 'freeze') lab.freezeNode(o.victim);
    else if (how === 'uvsd') await lab.killUvsd(o.victim);
    else await lab.killNode(o.victim);
    if (how !== 'uvsd') killed.add(o.victim);
    const converged = await lab.waitNexthops(survivors, v6);
    const tConv = Date.now();
    await sleep(1000); // the moved flows' next packets (TCP retransmissions) have come
    const after = await lab.carriers(survivors, ready.ports);
    if (!v6) assert.deepEqual(lab.nodeOfFlows(ready.ports, PORT), after, 'after the kill too');
    const moved = movedTo(before, after);
    const ss = await st.done;
    const adopted1 = await adoptedBy(survivors);
    const v = verdict(ss, t0, tConv + 2000);
    const adopted = Object.fromEntries(survivors.map((k) => [k, adopted1[k]! - adopted0[k]!]));
    const b = blackout(
      ss,
      before.map((x, i) => x !== after[i]),
      t0,
    );
    figure(
      `${o.label}: ${o.count} streams, ${how === 'uvsd' ? `node ${o.victim}'s uvsd killed` : `node ${o.victim} ${how === 'freeze' ? 'frozen' : 'killed'}`}, carrying ${perNode(before)[o.victim]}; kept ${ss.length - v.lost.length}, lost ${v.lost.length}; ` +
        `flows per node before ${JSON.stringify(perNode(before))} after ${JSON.stringify(perNode(after))}; moved to ${JSON.stringify(moved)}; adopted ${JSON.stringify(adopted)}; ` +
        `router converged ${converged} ms after the ${how === 'freeze' ? 'freeze' : 'kill'}; blackout of moved flows median ${b.median} ms, max ${b.max} ms`,
    );
    assert.deepEqual(
      v.lost.map((s) => ({ port: s.port, error: s.error, bad: s.bad })),
      [],
      'no stream lost',
    );
    assert.deepEqual(
      v.notSpanning.map((s) => s.port),
      [],
      'every stream was running before the kill and after the router converged',
    );
    assert.ok(
      after.every((k) => survivors.includes(k)),
      `every flow is carried by a surviving node now: ${JSON.stringify(perNode(after))}`,
    );
    for (const k of survivors)
      assert.ok(adopted[k]! >= (moved[k] ?? 0), `node ${k} adopted the ${moved[k] ?? 0} flows that moved to it (adopted ${adopted[k]})`);
    assert.ok(sum(moved) >= (perNode(before)[o.victim] ?? 0), "at least the dead node's flows moved");
    return { ss, before, after, ready };
  };

  test('(a) kill one of three nodes under 100 long streams: none lost, the surviving nodes adopt what moved to them', async () => {
    await startNodes([1, 2, 3]);
    // Redis commands per new connection: those of the 100 streams' first ~2.5 s (3rd packet, state
    // changes; no 50th packet yet at ~10 packets/s), less the nodes' own periodic commands
    // (counts, heartbeats) at the rate measured over the 1.5 s before.
    const at = () => ({ t: Date.now(), c: redisCmdstats() });
    const s0 = at();
    await sleep(1500);
    const s1 = at();
    let s2 = s1;
    await killScenario({ label: '(a) kill 1 of 3', count: 100, victim: 1, beforeKill: async () => void (s2 = at()) });
    const per = (cmd: string) => {
      const idle = (((s1.c[cmd] ?? 0) - (s0.c[cmd] ?? 0)) * (s2.t - s1.t)) / (s1.t - s0.t);
      return (((s2.c[cmd] ?? 0) - (s1.c[cmd] ?? 0) - idle) / 100).toFixed(2);
    };
    figure(
      `Redis commands per new connection (single server, 3 nodes, first ${((s2.t - s1.t) / 1000).toFixed(1)} s of each flow): SET ${per('set')}, PUBLISH ${per('publish')}, GET ${per('get')}`,
    );
  });

  test('(b) a fourth node joins mid-stream: the router re-hashes flows onto it, it adopts them, none lost', async () => {
    await startNodes([1, 2, 3]);
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, 60, 12);
    const ready = await st.ready;
    assert.equal(ready.ready, 60);
    await everyNodeHolds([1, 2, 3], 60);
    const before = lab.nodeOfFlows(ready.ports, PORT);
    const adopted0 = await adoptedBy([1, 2, 3]);
    const t0 = Date.now();
    lab.addNode(4);
    lab.startBird(4);
    await lab.startUvsd(4, lab.config(4, services()));
    const converged = await lab.waitNexthops([1, 2, 3, 4]);
    const tConv = Date.now();
    await lab.waitNexthops([1, 2, 3, 4], true);
    const after = lab.nodeOfFlows(ready.ports, PORT);
    const moved = movedTo(before, after);
    const ss = await st.done;
    const adopted1 = await adoptedBy([1, 2, 3]);
    const s4 = await stats(4);
    const adopted: Record<number, number> = {
      ...Object.fromEntries([1, 2, 3].map((k) => [k, adopted1[k]! - adopted0[k]!])),
      4: s4.adopted,
    };
    const v = verdict(ss, t0, tConv + 2000);
    const b = blackout(
      ss,
      before.map((x, i) => x !== after[i]),
      tConv,
    );
    figure(
      `(b) node 4 joins: 60 streams; kept ${ss.length - v.lost.length}, lost ${v.lost.length}; flows per node before ${JSON.stringify(perNode(before))} after ${JSON.stringify(perNode(after))}; ` +
        `moved to ${JSON.stringify(moved)}; adopted ${JSON.stringify(adopted)} (node 4: ${s4.redis!.lookups.hit} by Redis lookup); announced ${converged} ms after uvsd started; blackout of moved flows median ${b.median} ms, max ${b.max} ms`,
    );
    assert.deepEqual(
      v.lost.map((s) => ({ port: s.port, error: s.error })),
      [],
    );
    assert.deepEqual(
      v.notSpanning.map((s) => s.port),
      [],
      'every stream ran across the join',
    );
    assert.ok((moved[4] ?? 0) > 0, 'the router moved flows onto node 4');
    for (const k of [1, 2, 3, 4])
      assert.ok(adopted[k]! >= (moved[k] ?? 0), `node ${k} adopted the ${moved[k] ?? 0} flows that moved to it (${adopted[k]})`);
  });

  test('(c) a real server drained to weight 0 before the kill: its streams survive the re-hash too, new ones avoid it', async () => {
    await startNodes([1, 2, 3]);
    const drained = lab.rsAddrs[0]!;
    const { ss } = await killScenario({
      label: '(c) weight 0 then kill',
      count: 60,
      victim: 2,
      beforeKill: async () => {
        for (const k of [1, 2, 3]) {
          const r = await apiCall(lab.socket(k), 'PUT', `/v1/services/tcp/${LAB_VIP}/${PORT}/realservers/${drained}/${PORT}`, {
            weight: 0,
          });
          assert.equal(r.status, 200, JSON.stringify(r.body));
        }
        // New flows now avoid rs1 on every node (mh rebuilt without it).
        const fresh = echoStreams(lab.ns.cl, LAB_VIP, PORT, 12, 1);
        const f = await fresh.ready;
        await fresh.done;
        assert.ok(!f.servers.includes('rs1'), `new connections after weight 0 avoid rs1: ${f.servers.join(' ')}`);
      },
    });
    const onDrained = ss.filter((s) => s.server === 'rs1');
    figure(`(c) streams on the weight-0 server rs1: ${onDrained.length}, all completed byte-identical`);
    assert.ok(onDrained.length >= 5, `some streams were on rs1 (mh-port spreads them): ${onDrained.length}`);
  });

  test('(h) a server removed gracefully while its idle flows sit on the node that dies: the drain waits for them, none lost', async () => {
    // kube-proxy's graceful termination with a short check (1 s). Every stream opens through lb2
    // alone, then goes idle; lb1 and lb3 join (idle flows do not move: they hold shadows only,
    // which no count includes), the server is removed everywhere, lb2 dies. Before issue 33's fix
    // the survivors deleted the server 1.6–2.9 s after the kill and the moved flows hung.
    const extra = { gracefulTermination: { checkInterval: 1 } };
    const victim = 2;
    const survivors = [1, 3];
    await startNodes([victim], { extra });
    // 30 streams: they send for 2 s, are idle for 16 s (joins, removal, kill and drain checks fall here), then send again.
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, 30, 22, 100, 500, { from: 2, seconds: 16 });
    const ready = await st.ready;
    assert.equal(ready.ready, 30, 'every stream connected');
    const x = 'rs1';
    const xStreams = ready.servers.filter((s) => s === x).length;
    assert.ok(xStreams > 0, `some streams go to ${x}: ${ready.servers.join(' ')}`);
    // Past their 3rd packet: in Redis (the joiners, which missed the change stream, look them up).
    const until = Date.now() + 20_000;
    while (((await stats(victim)).redis?.written ?? 0) < 30) {
      if (Date.now() > until) throw new Error(`lb${victim} did not write the 30 flows to Redis`);
      await sleep(50);
    }
    await startNodes(survivors, { extra });
    for (const k of survivors) {
      const until = Date.now() + 10_000;
      while (!(await stats(k)).redis?.nodes.includes(`lb${victim}`)) {
        if (Date.now() > until) throw new Error(`lb${k} never read lb${victim}'s counts`);
        await sleep(100);
      }
    }
    for (const k of [1, 2, 3]) {
      const r = await apiCall(lab.socket(k), 'DELETE', `/v1/services/tcp/${LAB_VIP}/${PORT}/realservers/${lab.rsAddrs[0]}/${PORT}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    await lab.killNode(victim);
    killed.add(victim);
    await lab.waitNexthops(survivors);
    await sleep(4000); // several drain checks on the survivors while the flows are idle
    for (const k of survivors) {
      const d = await apiCall<{ draining: { realServer: string }[] }>(lab.socket(k), 'GET', '/v1/drains');
      const s = await stats(k);
      assert.ok(
        d.body.draining.some((r) => r.realServer.startsWith(`${lab.rsAddrs[0]}:`)),
        `lb${k} still drains ${x}: ${JSON.stringify(d.body)}`,
      );
      assert.ok(s.redis?.heldNodes.includes(`lb${victim}`), `lb${k} holds lb${victim}'s counts: ${JSON.stringify(s.redis?.heldNodes)}`);
    }
    const ss = await st.done;
    const lost = ss.filter((s) => s.error !== null || s.bad !== 0 || s.echoed !== s.sent);
    figure(
      `(h) graceful removal of ${x} (check every 1 s), lb${victim} killed while carrying all 30 idle streams, ${xStreams} of them to ${x}: kept ${ss.length - lost.length} of ${ss.length}`,
    );
    assert.deepEqual(
      lost.map((s) => ({ port: s.port, server: s.server, error: s.error })),
      [],
      'no stream lost',
    );
  });

  test('(d) maintenance: a node withdraws, its flows move by adoption, it stops, restarts and rejoins; none lost', async () => {
    await startNodes([1, 2, 3]);
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, 60, 20);
    const ready = await st.ready;
    assert.equal(ready.ready, 60);
    await everyNodeHolds([1, 2, 3], 60);
    const before = lab.nodeOfFlows(ready.ports, PORT);
    const adopted0 = await adoptedBy([1, 3]);
    const t0 = Date.now();
    const on = await apiCall<MaintenanceResponse>(lab.socket(2), 'PUT', '/v1/maintenance', { enabled: true });
    assert.equal(on.status, 200, JSON.stringify(on.body));
    assert.deepEqual([on.body.maintenance, on.body.announced], [true, false]);
    const withdrawn = await lab.waitNexthops([1, 3]);
    await lab.waitNexthops([1, 3], true);
    const during = lab.nodeOfFlows(ready.ports, PORT);
    const status = uvsadm(2, ['--maintenance', 'status']);
    assert.equal(status.code, 1, `status exits 1 in maintenance: ${status.out}`);
    assert.match(status.out, /maintenance on since .*; not announced \(table 4712\)/);
    const tWait = Date.now();
    const wait = uvsadm(2, ['--maintenance', 'wait']);
    assert.equal(wait.code, 0, `the node went idle: ${wait.out}`);
    const idleAfter = Date.now() - tWait;
    await lab.stopUvsd(2);
    const tStart = Date.now();
    await lab.startUvsd(2, lab.config(2, services()));
    const rejoined = await lab.waitNexthops([1, 2, 3]);
    const tRejoin = Date.now();
    await lab.waitNexthops([1, 2, 3], true);
    const back = lab.nodeOfFlows(ready.ports, PORT);
    const ss = await st.done;
    const adopted1 = await adoptedBy([1, 2, 3]);
    const v = verdict(ss, t0, tRejoin + 2000);
    const movedAway = movedTo(before, during);
    const movedBack = movedTo(during, back);
    figure(
      `(d) maintenance of node 2: 60 streams; kept ${ss.length - v.lost.length}, lost ${v.lost.length}; withdrawn from the router ${withdrawn} ms after the API call; ` +
        `flows per node before ${JSON.stringify(perNode(before))}, in maintenance ${JSON.stringify(perNode(during))}, after the rejoin ${JSON.stringify(perNode(back))}; ` +
        `idle (uvsadm --maintenance wait) after ${idleAfter} ms; announced again ${tRejoin - tStart} ms after uvsd started (Redis first); adopted by 1, 3 during maintenance ${adopted1[1]! - adopted0[1]!}, ${adopted1[3]! - adopted0[3]!}; by the restarted node 2 ${adopted1[2]}`,
    );
    assert.deepEqual(
      v.lost.map((s) => ({ port: s.port, error: s.error })),
      [],
    );
    assert.deepEqual(
      v.notSpanning.map((s) => s.port),
      [],
      'every stream ran across maintenance, stop, restart and rejoin',
    );
    assert.equal(during.filter((k) => k === 2).length, 0, 'in maintenance the router sends node 2 nothing');
    for (const k of [1, 3]) assert.ok(adopted1[k]! - adopted0[k]! >= (movedAway[k] ?? 0), `node ${k} adopted what moved to it`);
    assert.ok(
      (movedBack[2] ?? 0) > 0 && adopted1[2]! >= movedBack[2]!,
      `the restarted node 2 adopted the ${movedBack[2]} flows that came back (${adopted1[2]})`,
    );
    assert.ok(rejoined >= 0);
  });

  test('(e) IPv6: kill one of three nodes under long ip6ip6 streams: none lost', async () => {
    await startNodes([1, 2, 3]);
    await killScenario({ label: '(e) IPv6 kill 1 of 3', count: 60, v6: true, victim: 3 });
  });

  test('(f) the three-master Redis Cluster as the store, and a node that hangs (links up: only BFD notices): none lost', async () => {
    await lab.startRedisCluster();
    await startNodes([1, 2, 3], { cluster: true });
    await killScenario({
      label: '(f) Redis Cluster, node hangs (SIGSTOP)',
      count: 60,
      victim: 1,
      how: 'freeze',
      beforeKill: async () => {
        const keys = lab.clusterPorts.map((p) => lab.redisKeys(p));
        assert.ok(
          keys.every((n) => n > 0),
          `flow keys on every master: ${keys.join(', ')}`,
        );
      },
    });
  });

  test('uvsd alone dies (SIGKILL; node, links and BIRD live): its device goes, BIRD withdraws the node, none lost', async () => {
    await startNodes([1, 2, 3]);
    await killScenario({ label: 'uvsd alone killed', count: 40, victim: 3, how: 'uvsd' });
    assert.equal(
      lab.birdc(3, ['show', 'route', 'table', 'master4', 'count']).match(/(\d+) of \d+ routes/)?.[1],
      '0',
      "node 3's BIRD has nothing left to announce",
    );
  });

  test("(g) the router hashing with policy 1 as configured (in a lab: the socket's own hash, re-drawn at each timeout): none lost", async () => {
    lab.setHashPolicy('policy1');
    await startNodes([1, 2, 3]);
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, 40, 10);
    const ready = await st.ready;
    assert.equal(ready.ready, 40);
    await everyNodeHolds([1, 2, 3], 40);
    const own0 = await Promise.all([1, 2, 3].map(async (k) => (await stats(k)).table.entries - (await stats(k)).shadows));
    const adopted0 = await adoptedBy([2, 3]);
    const t0 = Date.now();
    await lab.killNode(1);
    killed.add(1);
    await lab.waitNexthops([2, 3]);
    const tConv = Date.now();
    const ss = await st.done;
    const adopted1 = await adoptedBy([2, 3]);
    const v = verdict(ss, t0, tConv + 2000);
    const adopted = adopted1[2]! - adopted0[2]! + adopted1[3]! - adopted0[3]!;
    figure(
      `(g) policy 1: 40 streams, node 1 killed carrying ${own0[0]}; kept ${ss.length - v.lost.length}, lost ${v.lost.length}; adopted by nodes 2 and 3: ${adopted}`,
    );
    assert.deepEqual(
      v.lost.map((s) => ({ port: s.port, error: s.error })),
      [],
    );
    assert.deepEqual(
      v.notSpanning.map((s) => s.port),
      [],
    );
    assert.ok(own0[0]! > 0 && adopted >= own0[0]!, `nodes 2 and 3 adopted at least node 1's ${own0[0]} flows (${adopted})`);
  });

  /** Without Redis: `count` streams, node `victim` killed; what moved and what was lost. */
  const killWithoutRedis = async (count: number, sloppy?: boolean) => {
    await startNodes([1, 2, 3], { redis: false, ...(sloppy === undefined ? {} : { sloppy }) });
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, count, 8);
    const ready = await st.ready;
    assert.equal(ready.ready, count);
    await sleep(1000); // the streams are under way on their nodes (no Redis to wait for)
    const before = lab.nodeOfFlows(ready.ports, PORT);
    const sloppy0 = await Promise.all([2, 3].map(async (k) => (await stats(k)).sloppyConnections));
    await lab.killNode(1);
    killed.add(1);
    await lab.waitNexthops([2, 3]);
    const after = lab.nodeOfFlows(ready.ports, PORT);
    const ss = await st.done;
    const sloppy1 = await Promise.all([2, 3].map(async (k) => (await stats(k)).sloppyConnections));
    const movedPorts = ready.ports.filter((_p, i) => before[i] !== after[i]).sort();
    const lostPorts = ss
      .filter((s) => s.error !== null || s.echoed !== s.sent)
      .map((s) => s.port)
      .sort();
    return { movedPorts, lostPorts, sloppy: sloppy1[0]! - sloppy0[0]! + sloppy1[1]! - sloppy0[1]! };
  };

  test('without Redis, mh with sloppy_tcp (auto, the default): a node killed under 100 streams loses none, the survivors start the moved ones', async () => {
    const r = await killWithoutRedis(100);
    figure(
      `without Redis, sloppy: 100 streams, ${r.movedPorts.length} moved by the kill, ${r.lostPorts.length} lost, ${r.sloppy} started sloppily`,
    );
    assert.ok(r.movedPorts.length > 0);
    assert.deepEqual(r.lostPorts, [], 'no stream lost: the survivors send each moved one to the server mh gave it');
    assert.ok(r.sloppy >= r.movedPorts.length, `every moved stream started on a survivor by a mid-flow packet (${r.sloppy})`);
  });

  test('without Redis, sloppy: a fourth node joining mid-stream takes over its share of 100 streams, none lost', async () => {
    await startNodes([1, 2, 3], { redis: false });
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, 100, 8);
    const ready = await st.ready;
    assert.equal(ready.ready, 100);
    await sleep(1000);
    const before = lab.nodeOfFlows(ready.ports, PORT);
    lab.addNode(4);
    lab.startBird(4);
    await lab.startUvsd(4, lab.config(4, services(), { redis: false }));
    await lab.waitNexthops([1, 2, 3, 4]);
    const after = lab.nodeOfFlows(ready.ports, PORT);
    const ss = await st.done;
    const lost = ss.filter((s) => s.error !== null || s.echoed !== s.sent);
    const toNode4 = after.filter((k, i) => k === 4 && before[i] !== 4).length;
    const s4 = await stats(4);
    figure(
      `without Redis, sloppy: node 4 joins under 100 streams, ${toNode4} moved to it, ${lost.length} lost, ${s4.sloppyConnections} started sloppily there`,
    );
    assert.ok(toNode4 > 0, 'the router moved some streams to node 4');
    assert.deepEqual(
      lost.map((s) => s.port),
      [],
    );
    assert.ok(s4.sloppyConnections >= toNode4);
  });

  test('control: without Redis and with sloppyTcp off, the same kill loses exactly the flows the router moved', async () => {
    const r = await killWithoutRedis(40, false);
    figure(`control without Redis, sloppy off: 40 streams, ${r.movedPorts.length} moved by the kill, ${r.lostPorts.length} lost`);
    assert.ok(r.movedPorts.length > 0);
    assert.deepEqual(r.lostPorts, r.movedPorts, 'the moved flows, and only they, are lost: what Redis or sloppy saves in the tests above');
    assert.equal(r.sloppy, 0);
  });
});
