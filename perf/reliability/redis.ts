/**
 * Redis killed and hung under load, then a failover, in the two-node lab (lab/failover-lab.ts):
 * uvsd on lb1 carries the traffic and shares its flows through redis-server with lb2. Under a
 * load of HTTP requests, echo streams and rate-limited downloads, and a flood of mid-flow ACKs
 * that no flow owns (each one a Redis lookup on lb1), Redis is SIGKILLed for a while and
 * restarted, then SIGSTOPped for as long and continued. Downloads start before, during the kill
 * and during the hang; afterwards lb1 dies and traffic moves to lb2, which must carry every one of
 * them from the records lb1 wrote — including the ones it could write only after Redis came back.
 */
import { execFileSync } from 'node:child_process';
import { runTool } from '../../lab/clients';
import { LAB_VIP, LAB_VIP_CIDR } from '../../lab/lab';
import type { FailoverLab, LbNode } from '../../lab/failover-lab';
import { sleep } from '../exec';
import type { LoadRecord } from '../failures';
import {
  blackholeSpoofed,
  client,
  download,
  getStats,
  relgen,
  round,
  RssWatch,
  stopEchoes,
  waitFor,
  waitWorkers,
  type Ctx,
  type EchoResult,
} from './common';
import { numericDiff, type ScenarioResult } from './report';

type Download = ReturnType<typeof download>;

export async function redisScenario(ctx: Ctx, flab: FailoverLab, r: ScenarioResult): Promise<void> {
  const outS = ctx.quick ? 5 : 30;
  const ackPps = ctx.quick ? 5000 : 20000;
  const rateKiB = 128;
  r.how = `Two-node lab: client → router → lb1 (active) or lb2, real servers and redis-server on a shared switch; uvsd on both nodes (${ctx.workers} workers, Redis sync, counts every 0.5 s, parked-packet timeout 1 s). Load through lb1 for the whole run: lab/tools.js \`load\` (2 loops of one-connection HTTP requests to ${LAB_VIP}:80), 2 TCP echo streams (a line every 100 ms), downloads read at ${rateKiB} KiB/s (client.ts download) (3 started before the outages, 3 during the kill, 3 during the hang; checked with sha256), and relgen writing ${ackPps.toLocaleString('en-US')} mid-flow TCP ACKs/s from random sources into lb1's device during both outages (no flow has them: with sync on, each is parked for a Redis lookup). Redis is SIGKILLed, restarted after ${outS} s; then SIGSTOPped for ${outS} s and continued. "Caught up" = lb1 reconnected and its write queue empty again. Then lb1 is SIGKILLed and the router and the servers' gateway move to lb2 (what keepalived does, done by \`ip\`). lb1's RSS is sampled every 200 ms.`;
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
  // The timeline (planned; downloads are sized to run ~10 s past the failover).
  const plannedFailoverS = 3 + outS + 4 + 2 + outS + 4 + 3;
  const spanS = plannedFailoverS + 12;
  const t0 = Date.now();
  const dl = (seed: number): Download => {
    const left = Math.max(10, plannedFailoverS + 10 - (Date.now() - t0) / 1000);
    return download(flab.ns.cl, LAB_VIP, 80, Math.round(rateKiB * 1024 * left), seed, rateKiB * 1024, spanS + 90);
  };
  type Out = { requests: number; errors: number; records: LoadRecord[] };
  const load = runTool<Out>(flab.ns.cl, ['load', LAB_VIP, '80', String(spanS), '2', '0', '0'], (spanS + 60) * 1000).result;
  const echoes = [0, 1].map(() => client<EchoResult>(flab.ns.cl, ['echo', LAB_VIP, '7', String(spanS), '100'], (spanS + 60) * 1000));
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
  for (let i = 0; i < 3; i++) track(dl(300 + i), 'during the kill');
  await sleep(outS * 1000);
  flab.startRedis();
  await flab.waitRedis();
  const tBack = Date.now();
  const caughtUp = (n: LbNode) => async () => {
    const s = await getStats(flab.socket(n)).catch(() => null);
    return s?.redis?.connected === true && s.redis.queueDepth === 0;
  };
  const catchUpKill = await waitFor(caughtUp('lb1'), 30000);
  await sleep(2000);
  const rssKill = rss.phasePeak(); // the kill and the catch-up after it

  // Hung.
  const redisPid = Number(execFileSync('ip', ['netns', 'pids', flab.ns.rd], { encoding: 'utf8' }).trim().split('\n')[0]);
  const tStop = Date.now();
  ctx.log(`redis: SIGSTOP redis-server (pid ${redisPid}) for ${outS} s`);
  process.kill(redisPid, 'SIGSTOP');
  for (let i = 0; i < 3; i++) track(dl(400 + i), 'during the hang');
  try {
    await sleep(outS * 1000);
  } finally {
    process.kill(redisPid, 'SIGCONT');
  }
  const tCont = Date.now();
  const catchUpHang = await waitFor(caughtUp('lb1'), 30000);
  const ackOut = await ack;
  await sleep(3000); // the last records written and published
  const s1 = await getStats(flab.socket('lb1'));
  const lb2Before = await getStats(flab.socket('lb2'));
  const lb1Alive = lb1.exitCode === null && lb1.signalCode === null;
  const rssHang = rss.phasePeak(); // the hang and the catch-up after it
  rss.stop();

  // Failover.
  const runningAtFailover = running.filter(Boolean).length;
  const tFail = Date.now();
  ctx.log(`redis: failover to lb2 with ${runningAtFailover} downloads running`);
  await flab.failover('uvsd');
  const results = await Promise.all(downloads.map((x) => x.d.result));
  const echo = await stopEchoes(echoes);
  const ld = await load;
  const lb2After = await getStats(flab.socket('lb2')).catch(() => null);
  await flab.stopUvsd('lb2').catch(() => undefined);

  const records = ld.out?.records ?? [];
  const failedIn = (a: number, b: number) => records.filter((x) => x.error !== null && x.start >= a && x.start < b).length;
  const brokenBy = (phase: string) => downloads.filter((x, i) => x.phase === phase && !results[i]!.ok).length;
  const broken = results.filter((x) => !x.ok).length;
  const diff = numericDiff(s0, s1);
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
      label: 'HTTP requests failed from the first outage to the failover',
      value: failedIn(tKill, tFail),
      expect: '0',
      ok: failedIn(tKill, tFail) === 0,
    },
    { label: 'HTTP requests in that time', value: records.filter((x) => x.start >= tKill && x.start < tFail).length },
    { label: 'uvsd on lb1 alive through both outages', value: lb1Alive, expect: 'yes', ok: lb1Alive },
    { label: 'lb1 uvsd RSS before the outages', value: round(rss.firstMb, 0), unit: 'MB' },
    {
      label: 'lb1 uvsd peak RSS',
      value: round(rss.peakMb, 0),
      unit: 'MB',
      expect: '≤ start + 100 MB (bounded)',
      ok: rss.firstMb !== null ? rss.peakMb <= rss.firstMb + 100 : null,
    },
    { label: 'mid-flow ACKs written into lb1 during the outages', value: ackOut.sent },
    {
      label: 'sync caught up after the kill (Redis back → queue empty)',
      value: catchUpKill === null ? 'not within 30 s' : round(catchUpKill / 1000, 1),
      unit: catchUpKill === null ? undefined : 's',
      expect: '≤ 5 s',
      ok: catchUpKill !== null && catchUpKill <= 5000,
    },
    {
      label: 'sync caught up after the hang (continued → queue empty)',
      value: catchUpHang === null ? 'not within 30 s' : round(catchUpHang / 1000, 1),
      unit: catchUpHang === null ? undefined : 's',
      expect: '≤ 5 s',
      ok: catchUpHang !== null && catchUpHang <= 5000,
    },
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
  const dlErrs = results.filter((x) => !x.ok).map((x) => `${x.error} after ${x.bytes} bytes`);
  if (dlErrs.length) r.notes.push(`Broken downloads: ${dlErrs.join('; ')}.`);
  const errs = records.filter((x) => x.error !== null && x.start >= tKill && x.start < tFail).map((x) => x.error);
  if (errs.length)
    r.notes.push(
      `HTTP errors before the failover: ${[...new Set(errs)].map((e) => `${e} ×${errs.filter((x) => x === e).length}`).join(', ')}.`,
    );
  if ('error' in ackOut) r.notes.push(`The ACK generator failed: ${String((ackOut as { error: string }).error)}.`);
  r.notes.push(
    `HTTP requests failed after the failover (lb1 killed mid-request, the switch): ${failedIn(tFail, Infinity)} of ${records.filter((x) => x.start >= tFail).length}.`,
  );
}
