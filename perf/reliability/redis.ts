/**
 * Redis killed and hung under load, then a failover, in the two-node lab (lab/failover-lab.ts):
 * uvsd on lb1 carries the traffic and shares its flows through redis-server with lb2. Under a
 * load of HTTP requests, echo streams and rate-limited downloads, and a flood of mid-flow ACKs
 * that no flow owns (each one a Redis lookup on lb1), Redis is SIGKILLed for a while and
 * restarted, then SIGSTOPped for as long and continued. Downloads start before, during the kill
 * and during the hang; afterwards lb1 dies and traffic moves to lb2, which must carry every one of
 * them from the records lb1 wrote — including the ones it could write only after Redis came back.
 *
 * What a failure is put down to: each HTTP request counts in the phase it started in, except one
 * in flight at the failover (report.ts inFlightAt) or started between lb1's kill signal and its
 * exit, which counts with it; every failure is listed
 * with its source port, how far it got and lb1's counters around it, beside the phase timeline,
 * lb1's packets the kernel dropped on their way to uvsd, and the kernel TCP counters of the client
 * and the servers. With --capture, tcpdump records the clients' packets at each hop.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { ConnectionsResponse, DrainsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { runTool } from '../../lab/clients';
import { LAB_VIP, LAB_VIP_CIDR } from '../../lab/lab';
import { REDIS_ADDR, type FailoverLab, type LbNode } from '../../lab/failover-lab';
import { run, sleep, spawnTracked } from '../exec';
import type { LoadRecord } from '../failures';
import { parseSnmp } from '../probe';
import {
  blackholeSpoofed,
  client,
  devStats,
  download,
  getStats,
  relgen,
  round,
  RssWatch,
  stopEchoes,
  waitFor,
  waitWorkers,
  echoFailure,
  type Ctx,
  type EchoResult,
  type Stats,
} from './common';
import { flatten, IN_FLIGHT_MS, inFlightAt, lastMove, numericDiff, type ScenarioResult, type Value } from './report';

type Download = ReturnType<typeof download>;

/** The HTTP load's loops: at most this many requests are in flight at any moment. */
const LOAD_LOOPS = 2;
export async function redisScenario(ctx: Ctx, flab: FailoverLab, r: ScenarioResult): Promise<void> {
  const outS = ctx.quick ? 5 : 30;
  const ackPps = ctx.quick ? 5000 : 20000;
  const rateKiB = 128;
  r.how = `Two-node lab: client → router → lb1 (active) or lb2, real servers and redis-server on a shared switch; uvsd on both nodes (${ctx.workers} workers, Redis sync, counts every 0.5 s, parked-packet timeout 1 s). Load through lb1 for the whole run: lab/tools.js \`load\` (${LOAD_LOOPS} loops of one-connection HTTP requests to ${LAB_VIP}:80), 2 TCP echo streams (a line every 100 ms), downloads read at ${rateKiB} KiB/s (client.ts download) (3 started before the outages, 3 during the kill, 3 during the hang; checked with sha256), and relgen writing ${ackPps.toLocaleString('en-US')} mid-flow TCP ACKs/s from random sources into lb1's device during both outages (no flow has them: with sync on, each is parked for a Redis lookup). Redis is SIGKILLed, restarted after ${outS} s; then SIGSTOPped for ${outS} s and continued. "Caught up" = lb1 reconnected and then reported a finished catch-up (GET /v1/stats redis.catchUps moved, catchingUp false: every record queued before its reconnect, and every record of the walk it called for, written — docs/redis.md "Caught up"), polled every 100 ms; not "its queue empty", which new flows under load rarely allow. Then lb1's uvsd is SIGKILLed and keepalived (its track script) moves the router's next hop and the servers' gateway to lb2. lb1's RSS is sampled every 200 ms, its counters (GET /v1/stats, and \`ip -s link\` of its devices) every 500 ms. An HTTP request counts in the phase it started in — except one still in flight when lb1's uvsd is killed that moved (started, connected, answered) within ${IN_FLIGHT_MS} ms before, or one started between the kill's signal and the moment the harness saw lb1's uvsd exit (the process dies when the kernel next runs each of its threads: its handshake may still have been forwarded by lb1): that one counts with the failover (the ${LOAD_LOOPS} loops have at most ${LOAD_LOOPS} in flight at the signal). "Started after the failover" means after that exit. Such a flow is younger than its first write to Redis (a request takes a few ms; a flow is queued on its 3rd packet and written within a 50 ms period), so lb2 finds no record: it parks the flow's packets, the lookup misses and they are dropped until the client gives up after 10 s (ETIMEDOUT) — a flow moves only once its record has left its node (docs/failover.md; the kernel's sync daemon has the same window, wider). Counted by start alone, these were the 2 failures "from the first outage to the failover" of an earlier run (2 of 137,358, the run's 2 loops; lb2 parked 14 packets across that failover, 9 of its lookups missed and 5 answers were not installed).`;
  flab.up();
  await flab.waitServers();
  await blackholeSpoofed(flab.nodeNs('lb1'));
  await blackholeSpoofed(flab.nodeNs('lb2'));
  const services = [
    {
      name: 'http',
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      scheduler: 'rr',
      realServers: flab.rsAddrs.map((address) => ({ address, port: 8080 })),
    },
    {
      name: 'echo',
      protocol: 'tcp',
      address: LAB_VIP,
      port: 7,
      scheduler: 'rr',
      realServers: flab.rsAddrs.map((address) => ({ address, port: 9007 })),
    },
  ];
  const cfg = (n: LbNode) =>
    flab.config(n, services, {
      log: { level: 'warn' },
      dataplane: { device: 'uvs0', vipCidrs: [LAB_VIP_CIDR], workers: ctx.workers, tableSize: 65536 },
    });
  const lb1 = await flab.startUvsd('lb1', cfg('lb1'));
  await flab.startUvsd('lb2', cfg('lb2'));
  await waitWorkers(flab.socket('lb1'), ctx.workers);
  await waitWorkers(flab.socket('lb2'), ctx.workers);
  const connected = (n: LbNode) =>
    waitFor(async () => (await getStats(flab.socket(n)).catch(() => null))?.redis?.connected === true, 15000);
  await connected('lb1');
  await connected('lb2');
  // keepalived (VRRPv3) holds the pair's addresses on lb1; the failover below kills lb1's uvsd and
  // its track script moves them to lb2, as a deployment would.
  await flab.startVrrp('lb1');
  const rss = new RssWatch(lb1.pid!);
  // The evidence for any request that fails: lb1's counters every 500 ms, the kernel's TCP
  // counters of the client and the servers, and (--capture) the real clients' packets on their
  // way: leaving the client, through lb1's device, to the servers, and through lb2's device.
  const sampler = new Sampler(flab.socket('lb1'), flab.nodeNs('lb1'), ['uvs0', flab.frontDev('lb1'), flab.backDev('lb1')]);
  const captures = ctx.capture
    ? [
        new Capture('client', join(ctx.capture, 'redis-client.pcap'), flab.ns.cl, `${flab.prefix}c0`, 'tcp port 80'),
        new Capture('lb1 uvs0', join(ctx.capture, 'redis-lb1-uvs0.pcap'), flab.nodeNs('lb1'), 'uvs0', `tcp and host ${flab.clientAddr}`),
        new Capture(
          'lb1 to the servers',
          join(ctx.capture, 'redis-lb1-back.pcap'),
          flab.nodeNs('lb1'),
          flab.backDev('lb1'),
          'tcp port 8080',
        ),
        new Capture('lb2 uvs0', join(ctx.capture, 'redis-lb2-uvs0.pcap'), flab.nodeNs('lb2'), 'uvs0', `tcp and host ${flab.clientAddr}`),
      ]
    : [];
  const kernelNs = [flab.ns.cl, ...flab.ns.rs];
  const phases: Phase[] = [];
  const phase = (name: string, at = Date.now()) => phases.push({ name, at });
  // The timeline (planned; downloads are sized to run ~10 s past the failover).
  const plannedFailoverS = 3 + outS + 4 + 2 + outS + 4 + 3;
  const spanS = plannedFailoverS + 12;
  const t0 = Date.now();
  phase('load started');
  const dl = (seed: number): Download => {
    const left = Math.max(10, plannedFailoverS + 10 - (Date.now() - t0) / 1000);
    return download(flab.ns.cl, LAB_VIP, 80, Math.round(rateKiB * 1024 * left), seed, rateKiB * 1024, spanS + 90);
  };
  type Out = { requests: number; errors: number; records: LoadRecord[] };
  const load = runTool<Out>(flab.ns.cl, ['load', LAB_VIP, '80', String(spanS), String(LOAD_LOOPS), '0', '0'], (spanS + 60) * 1000).result;
  const echoes = [0, 1].map(() => client<EchoResult>(flab.ns.cl, ['echo', LAB_VIP, '7', String(spanS), '100'], (spanS + 90) * 1000));
  const downloads: { d: Download; phase: string }[] = [0, 1, 2].map((i) => ({ d: dl(200 + i), phase: 'before' }));
  const running = downloads.map(() => true);
  downloads.forEach((x, i) => void x.d.result.then(() => (running[i] = false)));
  const track = (d: Download, phase: string) => {
    const i = downloads.push({ d, phase }) - 1;
    running[i] = true;
    void d.result.then(() => (running[i] = false));
  };
  await sleep(3000);
  const rssLoad = rss.phasePeak(); // under load, before the outages
  const s0 = await getStats(flab.socket('lb1'));
  const k0 = await Promise.all(kernelNs.map((ns) => kernelTcp(ns).catch(() => ({}) as Record<string, number>)));
  phase('ACK flood started');
  const ack = relgen(
    ctx,
    flab.nodeNs('lb1'),
    { mode: 'ack4', if: 'uvs0', vip4: LAB_VIP, port: 80, pps: ackPps, seconds: 2 * outS + 8 },
    (2 * outS + 8) * 1000,
  ).catch((e: Error) => ({ sent: 0, refused: 0, ms: 0, kinds: {}, error: e.message }));

  // Killed.
  const tKill = Date.now();
  ctx.log(`redis: SIGKILL redis-server for ${outS} s`);
  flab.killRedis();
  phase('Redis killed', tKill);
  for (let i = 0; i < 3; i++) track(dl(300 + i), 'during the kill');
  await sleep(outS * 1000);
  // Caught up: connected again (noted as a phase when first seen), and uvsd has finished a catch-up
  // since — every record queued before its reconnect, and every record of the walk that reconnect
  // called for, written (redis-sync.ts checkCaughtUp; docs/redis.md "Caught up"). Not "the queue
  // empty": under load new flows keep it busy, so an empty queue at a 100 ms poll is luck.
  const catchUpsBefore = async (n: LbNode) => (await getStats(flab.socket(n)).catch(() => null))?.redis?.catchUps ?? 0;
  const caughtUp = (n: LbNode, what: string, before: number, took: { s: number | null }) => {
    let seen = false;
    return async () => {
      const s = await getStats(flab.socket(n)).catch(() => null);
      if (!seen && s?.redis?.connected === true) {
        seen = true;
        phase(`${n} reconnected ${what}`);
      }
      const r = s?.redis;
      const ok = r?.connected === true && r.catchUps > before && !r.catchingUp;
      if (ok) {
        took.s = r.lastCatchUpSeconds;
        phase(`${n} caught up ${what} (its own figure: ${round(took.s, 2)} s from its reconnect)`);
      }
      return ok;
    };
  };
  const tookKill = { s: null as number | null };
  const beforeKill = await catchUpsBefore('lb1');
  flab.startRedis();
  await flab.waitRedis();
  const tBack = Date.now();
  phase('Redis restarted (answers PING)', tBack);
  const catchUpKill = await waitFor(caughtUp('lb1', 'after the kill', beforeKill, tookKill), 30000);
  await sleep(2000);
  const rssKill = rss.phasePeak(); // the kill and the catch-up after it

  // Hung.
  const redisPid = Number(execFileSync('ip', ['netns', 'pids', flab.ns.rd], { encoding: 'utf8' }).trim().split('\n')[0]);
  const tStop = Date.now();
  ctx.log(`redis: SIGSTOP redis-server (pid ${redisPid}) for ${outS} s`);
  process.kill(redisPid, 'SIGSTOP');
  phase('Redis stopped (SIGSTOP)', tStop);
  for (let i = 0; i < 3; i++) track(dl(400 + i), 'during the hang');
  const tookHang = { s: null as number | null };
  let beforeHang = 0;
  try {
    await sleep(outS * 1000);
    beforeHang = await catchUpsBefore('lb1');
  } finally {
    process.kill(redisPid, 'SIGCONT');
  }
  const tCont = Date.now();
  phase('Redis continued (SIGCONT)', tCont);
  const catchUpHang = await waitFor(caughtUp('lb1', 'after the hang', beforeHang, tookHang), 30000);
  const ackOut = await ack;
  phase('ACK flood ended');
  await sleep(3000); // the last records written and published
  const s1 = await getStats(flab.socket('lb1'));
  const lb2Before = await getStats(flab.socket('lb2'));
  const lb1Alive = lb1.exitCode === null && lb1.signalCode === null;
  const rssHang = rss.phasePeak(); // the hang and the catch-up after it
  rss.stop();
  const k1 = await Promise.all(kernelNs.map((ns) => kernelTcp(ns).catch(() => ({}) as Record<string, number>)));
  // lb1's entry for each client port, as it is just before the failover.
  const lb1Flows = new Map<number, string>();
  const conns = await apiCall<ConnectionsResponse>(flab.socket('lb1'), 'GET', '/v1/connections?limit=200000').catch(() => null);
  for (const c of conns?.status === 200 ? conns.body.connections : []) {
    const [addr, port] = [c.client.slice(0, c.client.lastIndexOf(':')), Number(c.client.slice(c.client.lastIndexOf(':') + 1))];
    if (c.protocol === 'TCP' && addr === flab.clientAddr && c.virtual.endsWith(':80'))
      lb1Flows.set(port, `${c.state}${c.shadow ? ' (shadow)' : ''} → ${c.realServer}, expires in ${c.expiresIn} s`);
  }
  await sampler.stop();
  // Failover.
  const runningAtFailover = running.filter(Boolean).length;
  const tFail = Date.now();
  phase('failover: lb1 uvsd killed', tFail);
  ctx.log(`redis: failover to lb2 with ${runningAtFailover} downloads running`);
  // tDead: lb1's uvsd certainly dead (its exit seen; the signal is sent just after tFail, and the
  // process dies when the kernel next runs each of its threads, ms later on a loaded machine). A
  // request started between the two may have had its handshake forwarded by lb1 and its flow not
  // yet written to Redis: it is in flight at the failover, not after it.
  const { deadAt: tDead } = await flab.failover('uvsd');
  const results = await Promise.all(downloads.map((x) => x.d.result));
  const echo = await stopEchoes(echoes);
  const ld = await load;
  const lb2After = await getStats(flab.socket('lb2')).catch(() => null);
  await flab.stopUvsd('lb2').catch(() => undefined);
  for (const c of captures) await c.stop();

  const records = ld.out?.records ?? [];
  // A request still waiting when lb1 was killed, and moving until just before (started, connected
  // or answered within one minimum TCP retransmission timeout of the kill), failed because of the
  // failover, whatever the time it started: it belongs to the failover's figures, not the outages'.
  const atFailover = (x: LoadRecord) => inFlightAt(x, tFail) || (x.start >= tFail && x.start < tDead);
  const failedIn = (a: number, b: number) =>
    records.filter((x) => x.error !== null && x.start >= a && x.start < b && !atFailover(x)).length;
  const inFlight = records.filter(atFailover);
  const inFlightFailed = inFlight.filter((x) => x.error !== null).length;
  const after = records.filter((x) => x.start >= tDead);
  const afterFailed = after.filter((x) => x.error !== null).length;
  const brokenBy = (phase: string) => downloads.filter((x, i) => x.phase === phase && !results[i]!.ok).length;
  const broken = results.filter((x) => !x.ok).length;
  const diff = numericDiff(s0, s1);
  // The control thread's retained heap (control/memory.ts: read after each full collection).
  // Only collections made inside the window count: a value carried from before it says nothing
  // about the window (a leak below V8's growth margin may trigger none at all: the RSS bound then).
  const retained = (a: number, b: number) => {
    const before = sampler.samples.filter((x) => x.t < a && x.v['memory.fullGcs'] !== undefined).at(-1)?.v['memory.fullGcs'] ?? 0;
    const xs = sampler.samples.filter(
      (x) => x.t >= a && x.t < b && x.v['memory.heapAfterFullGc'] !== undefined && x.v['memory.fullGcs']! > before,
    );
    return xs.length ? Math.max(...xs.map((x) => x.v['memory.heapAfterFullGc']!)) / 2 ** 20 : null;
  };
  const retainedPeak = retained(tKill, tFail);
  r.figures.push(
    {
      label: `HTTP requests failed while Redis was down (${outS} s)`,
      value: failedIn(tKill, tBack),
      expect: '0',
      ok: failedIn(tKill, tBack) === 0,
    },
    {
      label: `HTTP requests failed while Redis was hung (${outS} s)`,
      value: failedIn(tStop, tCont),
      expect: '0',
      ok: failedIn(tStop, tCont) === 0,
    },
    {
      label: 'HTTP requests failed from the first outage to the failover (those in flight at it: below)',
      value: failedIn(tKill, tFail),
      expect: '0',
      ok: failedIn(tKill, tFail) === 0,
    },
    { label: 'HTTP requests in that time', value: records.filter((x) => x.start >= tKill && x.start < tFail && !atFailover(x)).length },
    {
      label: "HTTP requests in flight when lb1's uvsd was killed (the failover), or started before its exit was seen",
      value: inFlight.length,
      unit: `(the load's ${LOAD_LOOPS} loops)`,
    },
    { label: "lb1's uvsd exit seen, after the kill signal", value: tDead - tFail, unit: 'ms' },
    {
      label: '— of those failed (a flow lb1 had not written to Redis yet cannot move: lb2 parks its packets, the lookup misses)',
      value: inFlightFailed,
    },
    {
      label: 'HTTP requests started after the failover, failed',
      value: afterFailed,
      unit: `of ${after.length}`,
      expect: '0',
      ok: afterFailed === 0,
    },
    { label: 'uvsd on lb1 alive through both outages', value: lb1Alive, expect: 'yes', ok: lb1Alive },
    { label: 'lb1 uvsd RSS before the outages', value: round(rss.firstMb, 0), unit: 'MB' },
    {
      label: 'lb1 uvsd peak RSS',
      value: round(rss.peakMb, 0),
      unit: 'MB',
      expect: `≤ start + ${RSS_SLACK_MB} MB (V8 sizes the control thread's heap to its churn, garbage included: what it retains is the next figure)`,
      ok: rss.firstMb !== null ? rss.peakMb <= rss.firstMb + RSS_SLACK_MB : null,
    },
    {
      label: 'lb1 control-thread heap retained (just after a full collection), highest from the first outage to the failover',
      value: retainedPeak === null ? 'no full collection in that window' : round(retainedPeak, 0),
      unit: retainedPeak === null ? undefined : 'MB',
      expect: `≤ ${RETAINED_BOUND_MB} MB (bounded: uvsd's own ~25 MB, the write queue at its 100 000 flows ~8 MB, lookups and parked packets ~1 MB)`,
      ok: retainedPeak === null ? null : retainedPeak <= RETAINED_BOUND_MB,
    },
    { label: 'mid-flow ACKs written into lb1 during the outages', value: ackOut.sent },
    {
      label: 'sync caught up after the kill (Redis back → every record owed since written)',
      value: catchUpKill === null ? 'not within 30 s' : round(catchUpKill / 1000, 1),
      unit: catchUpKill === null ? undefined : 's',
      expect: `≤ ${CATCH_UP_BOUND_S} s (${CATCH_UP_WHY})`,
      ok: catchUpKill !== null && catchUpKill <= CATCH_UP_BOUND_S * 1000,
    },
    { label: "— of that, from lb1 reconnected to caught up (uvsd's redis.lastCatchUpSeconds)", value: round(tookKill.s, 2), unit: 's' },
    {
      label: 'sync caught up after the hang (continued → every record owed since written)',
      value: catchUpHang === null ? 'not within 30 s' : round(catchUpHang / 1000, 1),
      unit: catchUpHang === null ? undefined : 's',
      expect: `≤ ${CATCH_UP_BOUND_S} s`,
      ok: catchUpHang !== null && catchUpHang <= CATCH_UP_BOUND_S * 1000,
    },
    { label: "— of that, from lb1 reconnected to caught up (uvsd's redis.lastCatchUpSeconds)", value: round(tookHang.s, 2), unit: 's' },
    { label: 'downloads running through lb1 at the failover', value: runningAtFailover, unit: `of ${downloads.length}` },
    { label: 'downloads broken (cut or corrupted), in all', value: broken, unit: `of ${downloads.length}`, expect: '0', ok: broken === 0 },
    { label: '— of those started before the outages', value: brokenBy('before'), unit: 'of 3' },
    {
      label: '— started while Redis was down (their records written after it came back)',
      value: brokenBy('during the kill'),
      unit: 'of 3',
    },
    { label: '— started while Redis was hung', value: brokenBy('during the hang'), unit: 'of 3' },
    { label: 'echo streams broken (across the outages and the failover), of 2', value: echo.broken, expect: '0', ok: echo.broken === 0 },
    { label: "longest wait for an echo (the failover's blackout included)", value: echo.maxGapMs, unit: 'ms' },
    { label: "flows lb2 held from lb1's records before the failover (shadows)", value: lb2Before.shadows },
    {
      label: 'flows lb2 adopted after the failover',
      value: lb2After ? Number(lb2After.adopted ?? 0) - Number(lb2Before.adopted ?? 0) : null,
    },
  );
  r.tables.push({
    title: 'lb1 counters that moved from the first outage to the failover (GET /v1/stats)',
    columns: ['counter', 'change'],
    rows: Object.entries(diff)
      .filter(([k]) => /^(redis\.|parked|parkFull|syncRingFull|adopted|drops\.)/.test(k) && !/lagSeconds|resyncing/.test(k))
      .map(([k, v]) => [k, v]),
  });
  if (lb2After) {
    r.tables.push({
      title: 'lb2 counters that moved across the failover (GET /v1/stats)',
      columns: ['counter', 'change'],
      rows: Object.entries(numericDiff(lb2Before, lb2After))
        .filter(([k, v]) => v !== 0 && /^(redis\.(lookups|refused|superseded|received)|parked|parkFull|adopted|shadows)/.test(k))
        .map(([k, v]) => [k, v]),
    });
  }
  r.notes.push(
    `lb1 uvsd peak RSS by phase: under load before the outages ${round(rssLoad, 0)} MB; Redis killed and the catch-up after it ${round(rssKill, 0)} MB; hung and the catch-up after it ${round(rssHang, 0)} MB.`,
  );
  // Where the RSS went: the control thread's V8 heap (write queue, lookups, their garbage) or
  // outside it (workers' heaps, native, the shared table), from GET /v1/stats' memory.
  const memPeak = (a: number, b: number) => {
    const mb = (k: string) =>
      Math.max(
        0,
        ...sampler.samples.filter((x) => x.t >= a && x.t < b && x.v[`memory.${k}`] !== undefined).map((x) => x.v[`memory.${k}`]!),
      ) /
      2 ** 20;
    return `RSS ${round(mb('rss'), 0)} MB, control-thread heap used ${round(mb('heapUsed'), 0)} of ${round(mb('heapTotal'), 0)} MB (retained after a full collection: ${mb('heapAfterFullGc') > 0 ? `${round(mb('heapAfterFullGc'), 0)} MB` : 'no full collection yet'}), external ${round(mb('external'), 0)} MB (array buffers ${round(mb('arrayBuffers'), 0)} MB)`;
  };
  r.notes.push(
    `lb1 uvsd memory, highest 500 ms sample of each figure by phase (GET /v1/stats memory; each figure's own maximum): before the outages ${memPeak(t0, tKill)}; Redis killed and the catch-up after it ${memPeak(tKill, tStop)}; hung and the catch-up after it ${memPeak(tStop, tFail)}.`,
  );
  const dlErrs = results.filter((x) => !x.ok).map((x) => `${x.error} after ${x.bytes} bytes`);
  if (dlErrs.length) r.notes.push(`Broken downloads: ${dlErrs.join('; ')}.`);
  const errs = records.filter((x) => x.error !== null && x.start >= tKill && x.start < tFail && !atFailover(x)).map((x) => x.error);
  if (errs.length)
    r.notes.push(
      `HTTP errors before the failover: ${[...new Set(errs)].map((e) => `${e} ×${errs.filter((x) => x === e).length}`).join(', ')}.`,
    );
  // Each request that failed after the failover, with its course relative to lb1's kill: whether it
  // reached a server before (connected) and when it gave up — the story a "NO" needs.
  const rel = (t: number | null | undefined) => (t == null ? '—' : `${t - tFail >= 0 ? '+' : ''}${t - tFail} ms`);
  const afterErrs = after.filter((x) => x.error !== null);
  if (afterErrs.length)
    r.notes.push(
      `HTTP requests failed after the failover (times from lb1's kill signal; its exit seen at ${rel(tDead)}): ${afterErrs
        .map(
          (x) =>
            `${x.error} (client port ${x.port ?? '—'}; started ${rel(x.start)}, connected ${rel(x.connected)}, answered ${rel(x.answered)}, ended ${rel(x.end)})`,
        )
        .join('; ')}.`,
    );
  if ('error' in ackOut) r.notes.push(`The ACK generator failed: ${String((ackOut as { error: string }).error)}.`);
  await evidence(ctx, r, {
    records,
    atFailover,
    phases,
    vrrp: flab.nodes.flatMap((n) =>
      (flab.events[n] ?? [])
        .filter((e) => e.kind === 'GROUP' && e.at >= t0 && e.at <= tFail)
        .map((e) => ({ name: `${n} VRRP ${e.state}`, at: e.at })),
    ),
    tKill,
    tFail,
    sampler,
    lb1Flows,
    kernel: kernelNs.map((ns, i) => ({ ns, moved: numericDiff(k0[i], k1[i]) })),
    captures,
  });
}

/**
 * Every request that failed before the failover, against the timeline (phases and VRRP state
 * changes) and what lb1 counted around it: when it started and in which phase, how far it got
 * (connected? answered?), its source port and lb1's entry for that port just before the
 * failover, and which of lb1's packet counters moved from the sample before it started to the one
 * after it ended — next to what they moved on average over windows as long in the whole run.
 * With --capture, each failure's packets as the client, lb1's device and the servers' link saw
 * them go to redis-failures.txt beside the captures.
 */
async function evidence(
  ctx: Ctx,
  r: ScenarioResult,
  e: {
    records: LoadRecord[];
    atFailover: (x: LoadRecord) => boolean;
    phases: Phase[];
    vrrp: Phase[];
    tKill: number;
    tFail: number;
    sampler: Sampler;
    lb1Flows: Map<number, string>;
    kernel: { ns: string; moved: Record<string, number> }[];
    captures: Capture[];
  },
): Promise<void> {
  const rel = (t: number) => round((t - e.tKill) / 1000, 1);
  const timeline = [...e.phases, ...e.vrrp].sort((a, b) => a.at - b.at);
  r.tables.push({ title: 'Timeline (s from the kill of Redis)', columns: ['s', 'event'], rows: timeline.map((p) => [rel(p.at), p.name]) });
  const kernelRows: Value[][] = [];
  for (const k of e.kernel)
    for (const [name, v] of Object.entries(k.moved)) if (KERNEL_TCP.test(name)) kernelRows.push([k.ns.replace(/^.*-/, ''), name, v]);
  if (kernelRows.length)
    r.tables.push({
      title: "The kernel's TCP counters that moved from the ACK flood's start to the failover (client cl, servers rs1–rs3)",
      columns: ['namespace', 'counter', 'change'],
      rows: kernelRows,
    });
  // lb1's device and uvsd, from the kill to the failover: what the kernel queued for uvsd and
  // dropped because a queue was full, what uvsd read and wrote, what the kernel took back.
  const whole = e.sampler.between(e.tKill, e.tFail);
  if (whole) {
    const m = (k: string) => whole.moved[k] ?? 0;
    r.tables.push({
      title: "lb1's packets from the kill to the failover: its TUN device (uvs0) and uvsd",
      columns: ['', 'packets'],
      rows: [
        ['queued by the kernel for uvsd (uvs0 tx)', m('dev.uvs0.txPackets')],
        ["dropped by the kernel: uvsd's queue full (uvs0 tx dropped)", m('dev.uvs0.txDropped')],
        ['read by uvsd', m('packets.rxPackets')],
        ['written by uvsd', m('packets.txPackets')],
        ['not taken by the device (uvsd write errors)', m('packets.txErrors')],
        ['taken by the kernel from uvsd (uvs0 rx)', m('dev.uvs0.rxPackets')],
        ['dropped by the kernel on the way in (uvs0 rx dropped)', m('dev.uvs0.rxDropped')],
      ],
    });
    // Every 0.5 s sample in which a packet was lost on lb1 outside uvsd's own drop counters.
    const lossRows: Value[][] = [];
    const ss = e.sampler.samples.filter((x) => Object.keys(x.v).length);
    const loss = /^(dev\.[^.]+\.(tx|rx)Dropped|packets\.txErrors)$/;
    for (let i = 1; i < ss.length; i++) {
      const a = ss[i - 1]!;
      const b = ss[i]!;
      const lost = Object.keys(b.v).filter((k) => loss.test(k) && b.v[k]! - (a.v[k] ?? 0) > 0);
      if (!lost.length) continue;
      const w = Object.keys(b.v)
        .filter((k) => /^workers\.\d+\.rxPackets$/.test(k))
        .map((k) => b.v[k]! - (a.v[k] ?? 0));
      lossRows.push([
        rel(a.t),
        round((b.t - a.t) / 1000, 1),
        phaseAt(e.phases, a.t)?.name ?? 'before',
        lost.map((k) => `${k} +${b.v[k]! - (a.v[k] ?? 0)}`).join('; '),
        w.join(' / '),
      ]);
    }
    if (m('dev.uvs0.txDropped') > 0) {
      // How long a worker may fall behind before its queue of 500 fills, at this run's rate.
      const perWorker = m('packets.rxPackets') / (whole.ms / 1000) / Math.max(1, ctx.workers);
      r.notes.push(
        `lb1's TUN device dropped ${m('dev.uvs0.txDropped').toLocaleString('en-US')} packets on their way to uvsd from the kill to the failover, a worker's queue full: it holds 500 packets (the kernel's default for a TUN device; uvsd does not set it), ${Math.round((500 / perWorker) * 1000)} ms of this run's traffic per worker (${Math.round(perWorker).toLocaleString('en-US')} packets/s), and the 2 CPUs are shared by uvsd on both nodes, the ACK generator, the clients, the servers and Redis. Most are the generator's ACKs; a real client's packet among them is retransmitted by TCP. No uvsd counter can see these: the kernel's (\`ip -s link\`, tx dropped) does.`,
      );
    }
    if (lossRows.length)
      r.tables.push({
        title: 'When lb1 lost packets outside its drop counters (0.5 s samples)',
        columns: ['from (s from the kill)', 'for (s)', 'phase', 'lost', 'packets read per worker'],
        rows: lossRows,
      });
  }
  const failed = e.records.filter((x) => x.error !== null && x.start < e.tFail);
  if (!failed.length) return;
  const rows: Value[][] = failed.map((x) => {
    const w = e.sampler.between(x.start - 500, x.end + 500);
    const moved = w
      ? Object.entries(w.moved)
          .filter(([k]) => !/^packets\.|Packets$|Bytes$|^redis\.lookups\.|^dev\.[^.]+\.(rx|tx)(Packets)?$/.test(k))
          .map(([k, v]) => {
            const avg = whole && whole.ms > 0 ? ((whole.moved[k] ?? 0) * w.ms) / whole.ms : null;
            return `${k} +${v}${avg === null ? '' : ` (run average ${round(avg, 1)})`}`;
          })
          .join('; ') || 'nothing beyond packets in and out'
      : e.atFailover(x)
        ? "none: lb1's uvsd was killed meanwhile (lb2's counters above)"
        : 'no samples';
    return [
      rel(x.start),
      phaseAt(e.phases, x.start)?.name ?? 'before',
      e.atFailover(x) ? `yes: moved ${e.tFail - lastMove(x)} ms before` : 'no',
      x.error,
      x.port ?? null,
      x.connected == null ? 'never' : `after ${x.connected - x.start} ms`,
      x.answered == null ? 'never' : `after ${x.answered - x.start} ms`,
      round((x.end - x.start) / 1000, 1),
      x.port == null ? null : (e.lb1Flows.get(x.port) ?? 'none'),
      moved,
    ];
  });
  r.tables.push({
    title: 'HTTP requests that failed, started before the failover',
    columns: [
      'started (s from the kill)',
      'phase',
      "in flight when lb1's uvsd was killed",
      'error',
      'source port',
      'connected',
      'answer headers',
      'failed after (s)',
      "lb1's entry for the port before the failover",
      "lb1's counters that moved from 0.5 s before it to 0.5 s after it",
    ],
    rows,
  });
  if (!e.captures.length) return;
  const lines: string[] = [];
  for (const x of failed) {
    lines.push(`== ${JSON.stringify(x)} (started ${rel(x.start)} s after the kill)`);
    if (x.port == null) continue;
    for (const c of e.captures) {
      lines.push(`-- ${c.name} (${c.file})`);
      lines.push(...(await c.port(x.port).catch((err: Error) => [`tcpdump: ${err.message}`])));
    }
  }
  const file = join(ctx.capture!, 'redis-failures.txt');
  writeFileSync(file, `${lines.join('\n')}\n`);
  r.notes.push(
    `Packet captures of the real clients' traffic: ${e.captures.map((c) => c.file).join(', ')}; each failed request's packets in ${file}.`,
  );
}

// ── the failures' evidence ────────────────────────────────────────────────────────────────
/** A moment of the scenario's timeline (epoch ms). */
interface Phase {
  name: string;
  at: number;
}

/** The phase a moment falls in: the last one that began at or before it. */
function phaseAt(phases: Phase[], t: number): Phase | null {
  let p: Phase | null = null;
  for (const x of phases) if (x.at <= t && (p === null || x.at >= p.at)) p = x;
  return p;
}

/**
 * How long a catch-up may take, from Redis answering again (docs/redis.md "Caught up"): the
 * reconnect comes within RECONNECT_MAX_MS (0.5 s) of it; then every record owed — the backlog
 * queued while Redis was away and the walk's — is one of this lab's ≤ 65,536 live flows (its
 * tableSize), and they are written at least as fast as the walk's pace of 1000 records every 50 ms
 * (backlog rounds follow each other at once), the walk adding one 50 ms round per 262,144 slots:
 * 0.5 s + 50 ms × (1 + 65,536 / 1000) = 3.8 s. Plus the 100 ms poll and a loaded machine's slack.
 */
const CATCH_UP_BOUND_S = 5;
const CATCH_UP_WHY = 'Redis answering → reconnect ≤ 0.5 s, then ≤ 65,536 owed records at ≥ 20,000/s: ≤ 3.8 s';
/**
 * What the control thread may retain through Redis outages: its own code and state (~25 MB in a
 * heap snapshot under this load), the write queue at redis.maxQueue (100 000 flows: a Map of entry
 * indexes, 8.3 MB measured), lookups and parked packets (capped: ~1 MB) — with room to spare.
 */
const RETAINED_BOUND_MB = 64;
/**
 * The process's RSS may grow by this much over its start: the control thread's heap as V8 sizes
 * it under an outage's churn (heap total up to ~125 MB where 26 MB were retained), the workers'
 * heaps and native memory. It catches growth outside the control thread's heap, which the
 * retained-heap figure cannot see.
 */
const RSS_SLACK_MB = 200;

/** Counters that say where a packet went: uvsd's and its devices'. */
const EVIDENCE = /^(drops\.|parked$|parkFull$|syncRingFull$|packets\.(rxPackets|txPackets|txErrors)$|generated\.|dev\.|redis\.lookups\.)/;

/**
 * A node's counters every 500 ms: GET /v1/stats (its numeric leaves) and the ip -s counters of
 * some of its devices — for uvs0, tx = what the kernel handed to uvsd's queues, txDropped = what
 * it dropped because a queue was full; rx = what uvsd wrote.
 */
class Sampler {
  readonly samples: { t: number; v: Record<string, number> }[] = [];
  private stopped = false;
  private readonly done: Promise<void>;
  constructor(socket: string, ns: string, devs: string[], intervalMs = 500) {
    this.done = (async () => {
      while (!this.stopped) {
        const t = Date.now();
        const st = await getStats(socket).catch(() => null);
        const v: Record<string, number> = st ? flatten(st) : {};
        for (const d of devs) {
          const x = await devStats(ns, d);
          if (x) for (const [k, n] of Object.entries(x)) v[`dev.${d}.${k}`] = n;
        }
        this.samples.push({ t, v });
        await sleep(Math.max(0, intervalMs - (Date.now() - t)));
      }
    })();
  }
  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
  /**
   * What moved from the last sample at or before a to the first at or after b (the last one, when
   * sampling stopped before b: lb1 is killed at the failover), and over how long (ms).
   */
  between(a: number, b: number): { ms: number; moved: Record<string, number> } | null {
    let x: { t: number; v: Record<string, number> } | null = null;
    let y: { t: number; v: Record<string, number> } | null = null;
    let last: { t: number; v: Record<string, number> } | null = null;
    for (const s of this.samples) {
      if (!Object.keys(s.v).length) continue;
      if (s.t <= a) x = s;
      if (s.t >= b && y === null) y = s;
      last = s;
    }
    y ??= last;
    if (!x || !y || y.t <= x.t) return null;
    const moved: Record<string, number> = {};
    for (const [k, n] of Object.entries(y.v)) {
      if (!EVIDENCE.test(k)) continue;
      const d = n - (x.v[k] ?? 0);
      if (d !== 0) moved[k] = d;
    }
    return { ms: y.t - x.t, moved };
  }
}

/** The kernel's TCP counters in a namespace (/proc/net/snmp and /proc/net/netstat, Tcp and TcpExt). */
async function kernelTcp(ns: string): Promise<Record<string, number>> {
  const r = await run('cat', ['/proc/net/snmp', '/proc/net/netstat'], { ns, timeoutMs: 5000 });
  const p = parseSnmp(r.stdout);
  const out: Record<string, number> = {};
  for (const g of ['Tcp', 'TcpExt']) for (const [k, v] of Object.entries(p[g] ?? {})) if (Number.isFinite(v)) out[`${g}.${k}`] = v;
  return out;
}

/** Kernel TCP counters worth showing when they move: drops, overflows, retransmissions, timeouts. */
const KERNEL_TCP =
  /^(Tcp\.(AttemptFails|EstabResets|RetransSegs|InErrs|OutRsts)|TcpExt\.(ListenOverflows|ListenDrops|TCPSynRetrans|TCPTimeouts|TCPAbortOnTimeout|TCPBacklogDrop|TCPReqQFullDrop|TCPReqQFullDoCookies|TW|TWRecycled|TWKilled|TCPTimeWaitOverflow|PAWSEstab|PAWSActive|TCPChallengeACK|TCPSYNChallenge|TCPAbortOnData|TCPAbortOnClose|TCPRcvQDrop|TCPZeroWindowDrop|TCPMinTTLDrop|TCPBacklogCoalesce))$/;

/** tcpdump of the real clients' traffic in a namespace (--capture): to a file, stopped with SIGINT. */
export class Capture {
  private readonly child: ChildProcess;
  private readonly exited: Promise<void>;
  constructor(
    readonly name: string,
    readonly file: string,
    ns: string,
    dev: string,
    filter: string,
  ) {
    this.child = spawnTracked('tcpdump', ['-i', dev, '-nn', '-s', '128', '-B', '16384', '-w', file, filter], ns);
    this.exited = new Promise((r) => this.child.once('exit', () => r()));
  }
  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGINT');
    await Promise.race([this.exited, sleep(10000)]);
  }
  /** The packets of one client port, as tcpdump prints them (absolute times), at most `max` lines. */
  async port(port: number, max = 60): Promise<string[]> {
    const r = await run('tcpdump', ['-nn', '-tt', '-r', this.file, `tcp port ${port}`], { timeoutMs: 60000 });
    return r.stdout.trim().split('\n').filter(Boolean).slice(0, max);
  }
}

// ── replayed records and a forged node list, with redis.recordKey ─────────────────────────
/** The client port both echo streams of the replay scenario use (below the ephemeral range). */
const REPLAY_PORT = 20123;
/** Members of the forged node list: more than the places read (redis.maxNodes, 64). */
const FAKE_NODES = 200;

/**
 * Issue 25, item 4, from outside: an attacker who can read and write Redis (not the record key)
 * keeps a node's signed record of a flow, and publishes it again after the client has reused the
 * flow's port for a new flow to another server; meanwhile it fills the node list with members
 * fresher than the real nodes' heartbeats. The new flow must stay with its server through a
 * failover, and a server removed on lb2 must keep draining while lb1 still has that flow.
 */
export async function replayScenario(ctx: Ctx, flab: FailoverLab, r: ScenarioResult): Promise<void> {
  const recordKey = randomBytes(24).toString('hex');
  r.how = `Two-node lab (as the Redis scenario's) with \`redis.recordKey\` set on both nodes (counts every 0.5 s, drain checks every 0.5 s); one service, TCP echo on ${LAB_VIP}:7, round robin over three real servers; lb1 active (keepalived). A client opens echo stream 1 from port ${REPLAY_PORT}; once lb2 holds it, the attacker (redis-cli in the Redis namespace: it reads and writes Redis, it does not have the key) keeps its signed record. Stream 1 ends with a RST; once both nodes have let its entry expire (CLOSE, 10 s), the client opens stream 2 from the same port: lb1 schedules it to the next server. Then the attacker adds ${FAKE_NODES} members to the node list, each with a heartbeat 4 s ahead (the newest; within the 5 s of clock skew tolerated) and unsigned counts of 10⁶ connections to stream 2's server, and publishes an unsigned heartbeat for each, every 300 ms; stream 2's server is removed from lb2's configuration (lb2 has no connection to it; lb1 has stream 2); the attacker publishes stream 1's record again (as from lb1) and writes it under the flow's key; then lb1's uvsd is killed and keepalived moves the traffic to lb2. Before this release, lb2 put stream 1's record in place of stream 2's (its shadow pointed at stream 1's server) and read the 64 fake members' counts instead of lb1's (so it deleted the removed server at once): either breaks stream 2 at the failover.`;
  flab.up();
  await flab.waitServers();
  const services = (servers: readonly string[]) => [
    {
      name: 'echo',
      protocol: 'tcp',
      address: LAB_VIP,
      port: 7,
      scheduler: 'rr',
      realServers: servers.map((address) => ({ address, port: 9007 })),
    },
  ];
  const cfg = (n: LbNode, servers: readonly string[] = flab.rsAddrs) =>
    flab.config(n, services(servers), {
      log: { level: 'warn' },
      dataplane: { device: 'uvs0', vipCidrs: [LAB_VIP_CIDR], workers: ctx.workers, tableSize: 65536 },
      gracefulTermination: { checkInterval: 0.5 },
      redis: { url: `redis://${REDIS_ADDR}:6379`, nodeId: n, countsInterval: 0.5, parkTimeout: 1, recordKey },
    });
  await flab.startUvsd('lb1', cfg('lb1'));
  await flab.startUvsd('lb2', cfg('lb2'));
  for (const n of ['lb1', 'lb2'] as const) {
    await waitWorkers(flab.socket(n), ctx.workers);
    await waitFor(async () => (await getStats(flab.socket(n)).catch(() => null))?.redis?.connected === true, 15000);
  }
  await flab.startVrrp('lb1');
  /** A node's entry for the client port (its real server "addr:9007"), a shadow or not; null: none. */
  const entry = async (n: LbNode): Promise<string | null> =>
    (await flab.flows(n, true)).find((f) => f.includes(` ${flab.clientAddr}:${REPLAY_PORT}|`))?.split('|')[2] ?? null;
  const echo = (seconds: number, rst: boolean) =>
    client<EchoResult>(
      flab.ns.cl,
      ['echo', LAB_VIP, '7', String(seconds), '100', String(REPLAY_PORT), ...(rst ? ['rst'] : [])],
      (seconds + 90) * 1000,
    );
  /** Waits until lb1 carries the client port and lb2 holds it with the same server; that server. */
  const carried = async (what: string): Promise<string> => {
    let rs: string | null = null;
    const ok = await waitFor(async () => {
      rs = await entry('lb1');
      return rs !== null && (await entry('lb2')) === rs;
    }, 15000);
    if (ok === null || rs === null) throw new Error(`${what}: lb1 ${await entry('lb1')}, lb2 ${await entry('lb2')}`);
    return rs;
  };

  // Stream 1, and the attacker's copy of its record.
  const s1 = echo(120, true);
  const rs1 = await carried('stream 1 not carried by lb1 and held by lb2');
  let rec1: string | null = null;
  let key1: string | null = null;
  for (const k of flab.redisCli(['--scan', '--pattern', 'uvs:c:*']).split('\n').filter(Boolean)) {
    const v = flab.redisCli(['GET', k]);
    const f = v.split('|');
    if (Number(f[2]) >>> 16 === REPLAY_PORT && f[9] === rs1) [rec1, key1] = [v, k];
  }
  if (rec1 === null || key1 === null) throw new Error(`no record of stream 1 (client port ${REPLAY_PORT}, ${rs1}) in Redis`);
  const out1 = (await s1.stop()).at(-1);
  const gone = await waitFor(async () => (await entry('lb1')) === null && (await entry('lb2')) === null, 30000, 250);
  if (gone === null) throw new Error(`stream 1's entries did not expire: lb1 ${await entry('lb1')}, lb2 ${await entry('lb2')}`);

  // Stream 2 from the same port: another server.
  const s2 = echo(120, false);
  const rs2 = await carried('stream 2 not carried by lb1 and held by lb2');
  const rs2Addr = rs2.slice(0, rs2.lastIndexOf(':'));

  // The forged node list, kept fresh until the end.
  const fakeCounts = JSON.stringify({ [`tcp ${LAB_VIP}:7|${rs2}`]: [1_000_000, 0] });
  const cmds: (string | number)[][] = [];
  for (let i = 0; i < FAKE_NODES; i++) {
    cmds.push(['ZADD', 'uvs:nodes', '$now+4000', `fake${i}`]);
    cmds.push(['SET', `uvs:counts:fake${i}`, fakeCounts, 'PX', '5000']);
    cmds.push(['PUBLISH', 'uvs:nodes', `fake${i}\n${Date.now()}\n${'0'.repeat(32)}`]);
  }
  const cmdFile = join(flab.dir, 'replay-fake-nodes.json');
  writeFileSync(cmdFile, JSON.stringify(cmds));
  const before = await getStats(flab.socket('lb2'));
  const flood = client<{ ok: number; errors: number }>(flab.ns.rd, ['redis', `redis://${REDIS_ADDR}:6379`, cmdFile, '60', '300'], 150_000);
  await sleep(3000); // 6 count exchanges
  const during = await getStats(flab.socket('lb2'));
  const nodes = during.redis?.nodes ?? [];

  // Stream 2's server removed on lb2: it must drain while lb1 reports stream 2.
  writeFileSync(
    join(flab.dir, 'lb2.yaml'),
    stringify(
      cfg(
        'lb2',
        flab.rsAddrs.filter((a) => a !== rs2Addr),
      ),
    ),
  );
  await apiCall(flab.socket('lb2'), 'POST', '/v1/reload');
  await sleep(3000); // 6 drain checks
  const drains = await apiCall<DrainsResponse>(flab.socket('lb2'), 'GET', '/v1/drains');
  const draining = drains.body.draining?.some((d) => d.realServer === rs2) ?? false;

  // The replay: published as from lb1, and written back under the flow's key.
  const beforeReplay = await getStats(flab.socket('lb2'));
  flab.redisCli(['PUBLISH', 'uvs:flows', `lb1\n${rec1}`]);
  flab.redisCli(['SET', key1, rec1, 'PX', '600000']);
  await sleep(1000);
  const afterReplay = await getStats(flab.socket('lb2'));
  const lb2Entry = await entry('lb2');

  // The failover: stream 2 goes on through lb2.
  const tFail = Date.now();
  await flab.failover('uvsd');
  await sleep(5000);
  const out2 = (await s2.stop()).at(-1) ?? null;
  const end = await getStats(flab.socket('lb2')).catch(() => null);
  await flood.stop();
  await flab.stopUvsd('lb2').catch(() => undefined);
  flab.down();

  const d = (a: Stats | null, b: Stats | null, f: (x: NonNullable<Stats['redis']>) => number) =>
    a?.redis && b?.redis ? f(b.redis) - f(a.redis) : null;
  const stale = d(beforeReplay, afterReplay, (x) => x.refused.stale ?? 0);
  const ok2 = out2 !== null && out2.error === null && out2.bad === 0 && out2.echoed === out2.sent && out2.sent > 0;
  r.figures.push(
    { label: `stream 1's real server (client port ${REPLAY_PORT}), as lb1 chose it`, value: rs1 },
    { label: "stream 2's real server, same client port", value: rs2 },
    {
      label: "lb2: records refused as not newer than its shadow's (stale) when stream 1's record was published again",
      value: stale,
      expect: '≥ 1',
      ok: stale !== null && stale >= 1,
    },
    {
      label: "lb2's entry for the client port after the replay",
      value: lb2Entry,
      expect: `stream 2's server (${rs2})`,
      ok: lb2Entry === rs2,
    },
    {
      label: `nodes lb2 reads counts from, ${FAKE_NODES} unsigned members with fresher heartbeats in the node list`,
      value:
        nodes.length > 4
          ? `${nodes.length} nodes, ${nodes.includes('lb1') ? 'lb1 among them' : 'not lb1'}: ${nodes.slice(0, 4).join(', ')}, …`
          : nodes.join(', ') || 'none',
      expect: 'lb1',
      ok: nodes.length === 1 && nodes[0] === 'lb1',
    },
    {
      label: "— the fake members' counts lb2 refused meanwhile (auth: read in the places left)",
      value: d(before, during, (x) => x.countsRefused.auth),
    },
    { label: '— unsigned heartbeats lb2 refused meanwhile (auth)', value: d(before, during, (x) => x.nodesRefused.auth ?? 0) },
    {
      label: "stream 2's server removed from lb2's configuration while lb1 carries stream 2: still draining on lb2 3 s later",
      value: draining ? 'yes' : 'no (deleted)',
      expect: 'yes',
      ok: draining,
    },
    {
      label: 'stream 2 across the failover to lb2',
      value: ok2 ? 'unbroken' : echoFailure(out2),
      expect: 'unbroken',
      ok: ok2,
    },
    { label: "stream 2's longest wait for an echo (the failover included)", value: out2?.maxGapMs ?? null, unit: 'ms' },
    { label: "flows lb2 adopted after lb1's uvsd was killed", value: end ? Number(end.adopted) - Number(afterReplay.adopted) : null },
  );
  r.notes.push(
    `Stream 1 (ended with a RST on purpose): ${out1 ? (out1.error === null ? 'unbroken' : echoFailure(out1)) : 'no output'}. The failover began ${round((Date.now() - tFail) / 1000, 1)} s before the scenario's end; stream 2 was stopped 5 s after lb2 took over.`,
  );
}
