/**
 * Floods of spoofed SYNs from the client's side of the lab (relgen on the client's veth, to the
 * LB node's MAC, routed into uvsd's device like real traffic), while real clients keep opening
 * connections and established streams keep echoing:
 *
 *   synflood   several rates up to relgen's limit, against the default table (65,536 entries,
 *              SYN_RECV 60 s): what real clients see during the flood, and how long after it
 *              stops new connections work again; then a burst that fills the table while 100
 *              established connections sit idle: every one must still carry bytes both ways
 *              once drop_entry stands down (issue 25: the kernel's todrop_entry took 36 of 100)
 *   hashflood  40,000 IPv6 SYNs at 2,000/s from one /64 against the same from random addresses:
 *              uvsd's CPU, a legitimate request's p99 and the API's latency, side by side
 *   tablefull  a 256-entry table filled by a flood: refusals counted, established streams
 *              untouched, and recovery without anyone stepping in
 *   steerflood SYN floods from sources aimed at one queue by someone who knows the steering
 *              algorithm but not its key (low source ports; one /64 with one 32-bit fold),
 *              against random sources: how the workers share the packets read
 *
 * The SYN-flood defense (drop_entry / secure_tcp / amemthresh, per-source caps) is left at
 * whatever defaults the configuration has; the settings found are listed in the report.
 */
import { writeFileSync } from 'node:fs';
import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import type { ConnectionStatus, ConnectionsResponse, DefenseResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { idleConnections } from '../../lab/clients';
import { LAB_VIP, LAB_VIP6 } from '../../lab/lab';
import { sleep } from '../exec';
import { attemptStats, defenseSettings, latencyStats, numericDiff, recovered, recoveryMs, type ScenarioResult, type Value } from './report';
import {
  apiProbe,
  blackholeSpoofed,
  connectProbe,
  CpuWatch,
  devStats,
  echoFailure,
  getStats,
  labConfig,
  labServices,
  linkMac,
  relgen,
  round,
  startEchoes,
  startUvsd,
  stopEchoes,
  type Ctx,
  type EchoResult,
  type GenResult,
  type Stats,
} from './common';
import { Capture } from './redis';

const SLOW_MS = 1000; // a connect slower than this waited for a SYN retransmission (1 s): not served

async function defenseNote(ctx: Ctx): Promise<string> {
  const c = await apiCall<{ effective?: unknown; document?: unknown }>(ctx.lab.socket, 'GET', '/v1/config').catch(() => null);
  const s = defenseSettings(c?.body?.effective ?? c?.body?.document ?? null);
  return s.length
    ? `Defense settings in effect (the configuration's defaults, nothing set by this run): ${s.map((x) => `\`${x}\``).join(', ')}.`
    : 'No SYN-flood defense settings were found in the effective configuration (GET /v1/config): this uvsd has no such defense, or names it in a way this run does not recognise.';
}

/** Peak table entries, sampled every 500 ms until stop() (off the event loop's critical path). */
class EntriesWatch {
  peak = 0;
  last: Stats | null = null;
  private stopped = false;
  private done: Promise<void>;
  constructor(socket: string) {
    this.done = (async () => {
      while (!this.stopped) {
        const s = await getStats(socket).catch(() => null);
        if (s) {
          this.last = s;
          this.peak = Math.max(this.peak, s.table.entries);
        }
        await sleep(500);
      }
    })();
  }
  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

function dropsMoved(before: Stats, after: Stats | null): string {
  if (!after) return '—';
  const d = Object.entries(numericDiff(before.drops, after.drops)).sort((a, b) => b[1] - a[1]);
  return d.length ? d.map(([k, v]) => `${k} ${v.toLocaleString('en-US')}`).join('; ') : 'none';
}

/** Counters outside packets/drops/workers that moved (a defense's own counters, whatever their names). */
function otherCounters(before: Stats, after: Stats | null): string {
  if (!after) return '';
  const skip = /^(uptime|memory\.|packets\.|drops\.|workers\.|table\.|redis\.)/;
  const d = Object.entries(numericDiff(before, after)).filter(([k]) => !skip.test(k));
  return d.map(([k, v]) => `${k} ${v > 0 ? '+' : ''}${v.toLocaleString('en-US')}`).join('; ');
}

interface FloodRound {
  gen: GenResult;
  floodStart: number;
  floodStop: number;
  before: Stats;
  atStop: Stats | null;
  peakEntries: number;
  cpuPct: number | null;
  attempts: import('./report').Attempt[];
  echoBroken: number;
  /** What each broken echo stream printed (null: nothing), and its packets when captured. */
  echoFailed: (EchoResult | null)[];
  echoPackets: string | null;
  echoMaxGapMs: number;
  recoveryMs: number | null;
  postBoundS: number;
  /** Packets the TUN device dropped during the flood (its queues full: uvsd did not read them). */
  devDrops: number | null;
}

/**
 * One flood against a fresh uvsd: 3 s of normal traffic, the flood, then until new connections
 * have worked 2 s in a row (or postBoundS). Real clients: a connect-probe every intervalMs and
 * `echoes` echo streams through port 7. With --capture, the echo streams' packets are recorded
 * leaving the client and reaching the real servers (`name`-client.pcap, `name`-rsN.pcap), and a
 * broken stream's packets written to `name`-echo-failures.txt (echoPackets).
 */
async function floodRound(
  ctx: Ctx,
  o: {
    cfg: Record<string, unknown>;
    gen: Record<string, string | number>;
    floodS: number;
    postBoundS: number;
    intervalMs: number;
    echoes: number;
    v6?: boolean;
    /** The round's name in capture files. */
    name: string;
  },
): Promise<FloodRound> {
  const lab = ctx.lab;
  const pid = await startUvsd(ctx, o.cfg);
  const captures = ctx.capture
    ? [
        new Capture('client', join(ctx.capture, `${o.name}-client.pcap`), lab.clientNs, `${lab.prefix}c0`, 'tcp port 7'),
        ...lab.rsNs.map(
          (ns, i) =>
            new Capture(
              `real server ${i + 1}`,
              join(ctx.capture!, `${o.name}-rs${i + 1}.pcap`),
              ns,
              `${lab.prefix}r${i + 1}b`,
              'tcp port 9007',
            ),
        ),
      ]
    : [];
  const vip = o.v6 ? LAB_VIP6 : LAB_VIP;
  const mac = await linkMac(lab.lbNs, `${lab.prefix}c1`);
  const total = 3 + o.floodS + o.postBoundS + 5;
  const echoes = await startEchoes(lab.clientNs, vip, 7, o.echoes, total + 10);
  const probe = connectProbe(lab.clientNs, vip, 80, total, o.intervalMs);
  await sleep(3000);
  const before = await getStats(lab.socket);
  const dev0 = await devStats(lab.lbNs, 'uvs0');
  const watch = new EntriesWatch(lab.socket);
  const cpu = new CpuWatch(pid, ctx.hz);
  const floodStart = Date.now();
  const gen = await relgen(
    ctx,
    lab.clientNs,
    { if: `${lab.prefix}c0`, mac, vip4: LAB_VIP, vip6: LAB_VIP6, port: 80, seconds: o.floodS, ...o.gen },
    o.floodS * 1000,
  );
  const floodStop = Date.now();
  const cpuPct = cpu.read();
  const atStop = await getStats(lab.socket).catch(() => null);
  const dev1 = await devStats(lab.lbNs, 'uvs0');
  const entriesAtStop = captures.length ? await echoEntries(lab.socket) : [];
  const slowAfter = Math.ceil(2000 / o.intervalMs); // 2 s of good attempts in a row
  const deadline = floodStop + o.postBoundS * 1000;
  while (Date.now() < deadline && !recovered(probe.lines, floodStop, SLOW_MS, slowAfter)) await sleep(200);
  await watch.stop();
  const attempts = await probe.stop();
  const entriesAtEnd = captures.length ? await echoEntries(lab.socket) : [];
  const echo = await stopEchoes(echoes);
  for (const c of captures) await c.stop();
  let echoPackets: string | null = null;
  if (captures.length && echo.failed.length) {
    const lines: string[] = [];
    for (const f of echo.failed) {
      lines.push(`== ${echoFailure(f)}`);
      if (f?.port == null) continue;
      const mine = (xs: ConnectionStatus[]) =>
        JSON.stringify(
          xs.filter((x) => x.client.endsWith(`:${f.port}`)).map(({ state, expiresIn, realServer }) => ({ state, expiresIn, realServer })),
        );
      lines.push(`-- uvsd's entry when the flood stopped: ${mine(entriesAtStop)}; before the streams were stopped: ${mine(entriesAtEnd)}`);
      for (const c of captures) {
        lines.push(`-- ${c.name} (${c.file})`);
        lines.push(...(await c.port(f.port, 100000).catch((err: Error) => [`tcpdump: ${err.message}`])));
      }
    }
    echoPackets = join(ctx.capture!, `${o.name}-echo-failures.txt`);
    writeFileSync(echoPackets, `${lines.join('\n')}\n`);
  }
  return {
    gen,
    floodStart,
    floodStop,
    before,
    atStop,
    peakEntries: Math.max(watch.peak, atStop?.table.entries ?? 0),
    cpuPct,
    attempts,
    echoBroken: echo.broken,
    echoFailed: echo.failed,
    echoPackets,
    echoMaxGapMs: echo.maxGapMs,
    recoveryMs: recoveryMs(attempts, floodStop, SLOW_MS),
    postBoundS: o.postBoundS,
    devDrops: dev0 && dev1 ? dev1.txDropped - dev0.txDropped : null,
  };
}

/** The table's entries for port 7 (the echo streams'), for a broken stream's evidence. */
async function echoEntries(socket: string): Promise<ConnectionStatus[]> {
  const r = await apiCall<ConnectionsResponse>(socket, 'GET', '/v1/connections?limit=100000').catch(() => null);
  return (r?.body?.connections ?? []).filter((x) => x.virtual.endsWith(':7'));
}

/**
 * Packets each worker read during the flood, and its share. The device spreads flows over its
 * queues by their hash, a random-source flood evenly: a worker that read less than its share
 * lost more at its queue, and so did every flow hashed to it (an echo stream among them).
 */
function perWorker(before: Stats, after: Stats | null): string {
  if (!after) return '—';
  const rx = (s: Stats, id: number) => s.workers.find((w) => w.id === id)?.rxPackets ?? 0;
  const d = after.workers.map((w) => rx(after, w.id) - rx(before, w.id));
  const sum = d.reduce((a, b) => a + b, 0);
  return d.map((x) => `${x.toLocaleString('en-US')} (${sum ? Math.round((x / sum) * 100) : 0} %)`).join(' / ');
}

/** A flood's failed connections by the client's error (timeout: no answer within 5 s; ECONNRESET: a RST), most first. */
function failures(errors: Record<string, number>): string {
  const e = Object.entries(errors).sort((a, b) => b[1] - a[1]);
  return e.length ? e.map(([k, v]) => `${k} ${v.toLocaleString('en-US')}`).join('; ') : '—';
}

const pct = (x: number | null) => (x === null ? null : Math.round(x * 1000) / 10);

/** The idle-connections round: how many, how long idle before the burst, the burst. */
const IDLE_CONNS = 100;
// The kernel's todrop_entry takes an established entry idle 60 s; drop_entry acts until holdTime
// (60 s) after the last shortage: idle 35 s before, the connections are exposed ≥ 40 s of it.
const IDLE_BEFORE_S = 35;
const BURST_PPS = 20_000; // what uvsd read in full in the lab: the table fills in ~3.3 s
const BURST_COUNT = 120_000;
const STAND_DOWN_S = 150;

interface IdleRound {
  gen: GenResult;
  ready: number;
  ok: number;
  failed: string[];
  pressed: DefenseResponse | null;
  after: DefenseResponse | null;
  standDownS: number | null;
}

/**
 * IDLE_CONNS echo connections (lab/tools.ts idle-echo) exchange a line and go silent; after
 * IDLE_BEFORE_S, relgen sends BURST_COUNT spoofed SYNs at BURST_PPS (more than the default table
 * holds); when drop_entry has stood down (holdTime after the last shortage, at most
 * STAND_DOWN_S), each connection sends another line and must get it back within 10 s.
 */
async function idleRound(ctx: Ctx): Promise<IdleRound> {
  const lab = ctx.lab;
  await startUvsd(ctx, labConfig(ctx, labServices(lab)));
  const mac = await linkMac(lab.lbNs, `${lab.prefix}c1`);
  const idle = idleConnections(lab.clientNs, LAB_VIP, 7, IDLE_CONNS, IDLE_BEFORE_S + BURST_COUNT / BURST_PPS + STAND_DOWN_S + 60);
  try {
    const ready = (await idle.ready).ready;
    await sleep(IDLE_BEFORE_S * 1000);
    const gen = await relgen(
      ctx,
      lab.clientNs,
      { mode: 'syn4', if: `${lab.prefix}c0`, mac, vip4: LAB_VIP, port: 80, pps: BURST_PPS, count: BURST_COUNT },
      (BURST_COUNT / BURST_PPS) * 1000 + 10000,
    );
    const defense = async () => (await apiCall<DefenseResponse>(lab.socket, 'GET', '/v1/defense').catch(() => null))?.body ?? null;
    const pressed = await defense();
    const t0 = Date.now();
    let after = pressed;
    while (after?.defenses.find((d) => d.name === 'dropEntry')?.active && Date.now() - t0 < STAND_DOWN_S * 1000) {
      await sleep(1000);
      after = await defense();
    }
    const standing = after?.defenses.find((d) => d.name === 'dropEntry')?.active ?? true;
    const results = await idle.check();
    return {
      gen,
      ready,
      ok: results.filter((r) => r.ok).length,
      failed: results.filter((r) => !r.ok).map((r) => `port ${r.port} (${r.server || '—'}): ${r.error}`),
      pressed,
      after,
      standDownS: standing ? null : round((Date.now() - t0) / 1000),
    };
  } finally {
    idle.child.kill('SIGKILL');
  }
}

export async function synFloodScenario(ctx: Ctx, r: ScenarioResult): Promise<void> {
  const lab = ctx.lab;
  const rates = ctx.quick ? [3000, 0] : [1000, 3000, 10000, 0];
  const floodS = ctx.quick ? 5 : 30;
  const postBoundS = ctx.quick ? 10 : 75;
  r.how = `For each rate, a fresh uvsd (${ctx.workers} workers, the default table of 65,536 entries, default timeouts: SYN_RECV 60 s) with the lab's services. Real clients: a new connection with one HTTP GET to ${LAB_VIP}:80 every 50 ms (connect-probe) and 3 TCP echo streams through port 7, from 3 s before the flood. relgen sends TCP SYNs (with an MSS option, valid checksums) to ${LAB_VIP}:80 from random sources in 198.18.0.0/15 and random ports for ${floodS} s at each rate (0 = as fast as it can), from the client's veth to the LB node. "During the flood" = connections started while it ran; a connect slower than ${SLOW_MS} ms waited for a SYN retransmission. Recovery = from the end of the flood to the first connection after which every new one worked within ${SLOW_MS} ms (observed for at most ${postBoundS} s after the flood). Then the idle burst, against another fresh uvsd with the default configuration: ${IDLE_CONNS} TCP echo connections to ${LAB_VIP}:7 (lab/tools.ts idle-echo) exchange one line and go silent; ${IDLE_BEFORE_S} s later relgen sends ${BURST_COUNT.toLocaleString('en-US')} SYNs at ${BURST_PPS.toLocaleString('en-US')}/s as above (the table fills in ~3.3 s); once drop_entry has stood down (GET /v1/defense polled every second, at most ${STAND_DOWN_S} s), each connection sends another line and must get its echo within 10 s. (The kernel's todrop_entry takes established entries idle 60 s with 1–8 client packets; idle ${IDLE_BEFORE_S} s before the burst, they are exposed for the last ≥ 40 s of drop_entry's hold.)`;
  await blackholeSpoofed(lab.lbNs);
  const rows: Value[][] = [];
  let worstOk: number | null = null;
  /** Answered share at the rates where the device dropped packets before uvsd could read them. */
  let saturatedOk: number | null = null;
  let worstP99: number | null = null;
  /** p99 connect at the rates where the device dropped packets before uvsd could read them (queue full). */
  let saturatedP99: number | null = null;
  let saturatedRates = '';
  let broken = 0;
  /** The longest wait for an echo on any stream, broken or not (a stall TCP recovered from shows here). */
  let longestEchoWait = 0;
  /** Each broken echo stream, as it ended. */
  const echoNotes: string[] = [];
  let worstRecovery: number | null = 0;
  let notRecovered = false;
  let defense = '';
  for (const rate of rates) {
    const label = rate ? `${rate.toLocaleString('en-US')}/s` : 'max';
    ctx.log(`synflood: ${label} for ${floodS} s`);
    const fr = await floodRound(ctx, {
      cfg: labConfig(ctx, labServices(lab)),
      gen: { mode: 'syn4', pps: rate },
      floodS,
      postBoundS,
      intervalMs: 50,
      echoes: 3,
      name: `synflood-${rate || 'max'}`,
    });
    if (!defense) defense = await defenseNote(ctx);
    await ctx.lab.stopUvsd();
    const during = attemptStats(fr.attempts, fr.floodStart, fr.floodStop);
    const achieved = fr.gen.sent / ((fr.floodStop - fr.floodStart) / 1000);
    rows.push([
      label,
      Math.round(achieved),
      fr.gen.sent,
      fr.peakEntries,
      fr.devDrops,
      perWorker(fr.before, fr.atStop),
      pct(during.okRate),
      failures(during.errors),
      during.connectP50,
      during.connectP99,
      fr.echoBroken,
      fr.echoMaxGapMs,
      fr.recoveryMs === null ? `> ${fr.postBoundS} s` : round(fr.recoveryMs / 1000, 1),
      round(fr.cpuPct),
      dropsMoved(fr.before, fr.atStop),
      otherCounters(fr.before, fr.atStop) || '—',
    ]);
    // A real client's SYN that the TUN device drops (its queue full: more offered than uvsd reads) is
    // never seen by uvs; the client retransmits it after 1 s. So "no SYN retransmission" — and
    // "answered" — can be asked of uvs only at the rates it read in full; the saturated ones are
    // reported beside it (their answered share follows the device's drop share: docs/defense.md).
    // Device counters unreadable (null): the rate is neither judged nor called saturated.
    const readInFull = fr.devDrops === 0;
    const saturated = fr.devDrops !== null && fr.devDrops > 0;
    if (saturated) saturatedRates += `${saturatedRates ? ', ' : ''}${label} (${fr.devDrops!.toLocaleString('en-US')} dropped)`;
    if (during.okRate !== null) {
      if (readInFull) worstOk = worstOk === null ? during.okRate : Math.min(worstOk, during.okRate);
      else if (saturated) saturatedOk = saturatedOk === null ? during.okRate : Math.min(saturatedOk, during.okRate);
    }
    if (during.connectP99 !== null) {
      if (readInFull) worstP99 = Math.max(worstP99 ?? 0, during.connectP99);
      else if (saturated) saturatedP99 = Math.max(saturatedP99 ?? 0, during.connectP99);
    }
    longestEchoWait = Math.max(longestEchoWait, fr.echoMaxGapMs);
    broken += fr.echoBroken;
    for (const f of fr.echoFailed) echoNotes.push(`${label}: ${echoFailure(f)}.`);
    if (fr.echoPackets) echoNotes.push(`${label}: the broken streams' packets (client and real servers) are in ${fr.echoPackets}.`);
    if (fr.recoveryMs === null) notRecovered = true;
    else if (worstRecovery !== null) worstRecovery = Math.max(worstRecovery, fr.recoveryMs);
    ctx.log(
      `synflood: ${label}: ${Math.round(achieved)} SYN/s sent, peak ${fr.peakEntries} entries, real clients ${pct(during.okRate)} % ok, p99 connect ${during.connectP99} ms, recovery ${fr.recoveryMs === null ? 'not seen' : `${fr.recoveryMs} ms`}`,
    );
  }
  ctx.log(`synflood: ${IDLE_CONNS} idle connections, ${IDLE_BEFORE_S} s, then ${BURST_COUNT} SYNs at ${BURST_PPS}/s`);
  const ir = await idleRound(ctx);
  await ctx.lab.stopUvsd();
  ctx.log(
    `synflood: idle connections: ${ir.ok} of ${IDLE_CONNS} carried bytes both ways after the burst (${ir.failed.length} failed), drop_entry stood down after ${ir.standDownS ?? '—'} s`,
  );
  r.figures.push(
    {
      label: "real clients' new connections answered during the flood, worst rate that uvsd read in full (no drops at the device)",
      value: worstOk === null ? 'no rate was read in full' : pct(worstOk),
      unit: worstOk === null ? undefined : '%',
      expect: '≥ 99 % (and at least one rate read in full)',
      ok: worstOk !== null && worstOk >= 0.99,
    },
    {
      label: `real clients' new connections answered at the rates the device could not pass in full (${saturatedRates || 'none'})`,
      value: pct(saturatedOk),
      unit: saturatedOk === null ? undefined : '%',
      expect: "reported: a SYN the device drops never reaches uvs; the share answered follows the device's drop share",
    },
    {
      label: "real clients' p99 connect time during the flood, worst rate that uvsd read in full (no drops at the device)",
      value: worstP99,
      unit: 'ms',
      expect: `< ${SLOW_MS} ms (no SYN retransmission)`,
      ok: worstP99 === null ? null : worstP99 < SLOW_MS,
    },
    {
      label: `real clients' p99 connect time at the rates the device could not pass in full (its queue full before uvsd: ${saturatedRates || 'none'})`,
      value: saturatedP99,
      unit: saturatedP99 === null ? undefined : 'ms',
      expect: 'reported: a SYN the device drops is retransmitted by the client after 1 s',
    },
    { label: 'established echo streams broken (3 per rate)', value: broken, expect: '0', ok: broken === 0 },
    {
      label: 'longest wait for an echo, any stream at any rate (a stall TCP recovered from included)',
      value: longestEchoWait,
      unit: 'ms',
      expect: 'reported: a stream whose packets the device dropped waits for its retransmission (per rate in the table)',
    },
    {
      label: 'recovery after the flood, worst rate',
      value: notRecovered ? `not within ${postBoundS} s` : round((worstRecovery ?? 0) / 1000, 1),
      unit: notRecovered ? undefined : 's',
      expect: '≤ 5 s',
      ok: !notRecovered && (worstRecovery ?? 0) <= 5000,
    },
    {
      label: `idle burst: ticks the table was short of room (below amemthresh) after ${ir.gen.sent.toLocaleString('en-US')} SYNs at ${BURST_PPS.toLocaleString('en-US')}/s`,
      value: ir.pressed?.nomemTicks ?? null,
      expect: '> 0: the burst filled the table',
      ok: ir.pressed ? ir.pressed.nomemTicks > 0 : null,
    },
    {
      label: `idle burst: established connections (idle ${IDLE_BEFORE_S} s before it) that still carried bytes both ways once drop_entry stood down`,
      value: `${ir.ok} of ${IDLE_CONNS}`,
      expect: `${IDLE_CONNS} of ${IDLE_CONNS}, and drop_entry stood down within ${STAND_DOWN_S} s`,
      ok: ir.ready === IDLE_CONNS && ir.ok === IDLE_CONNS && ir.standDownS !== null,
    },
    {
      label: 'idle burst: entries drop_entry gave up, half-open / idle (todrop_entry); secure_tcp shortened',
      value: ir.after
        ? `${ir.after.droppedHalfOpen.toLocaleString('en-US')} / ${ir.after.droppedIdle} ; ${ir.after.secureTcpShortened.toLocaleString('en-US')}`
        : null,
      expect: `reported (drop_entry scope: ${ir.after?.dropEntryScope ?? '—'}); idle 0 with the default scope`,
    },
    {
      label: 'idle burst: drop_entry stood down after the burst',
      value: ir.standDownS === null ? `not within ${STAND_DOWN_S} s` : ir.standDownS,
      unit: ir.standDownS === null ? undefined : 's',
      expect: 'reported (holdTime, 60 s, after the last tick short of room)',
    },
  );
  r.tables.push({
    title: 'Per rate',
    columns: [
      'offered',
      'sent SYN/s',
      'SYNs sent',
      'peak table entries',
      'dropped at the device (queue full)',
      "read by each worker (its queue's share)",
      'real clients answered during the flood (%)',
      'the others, by how they failed',
      'connect p50 (ms)',
      'connect p99 (ms)',
      'echo streams broken',
      'longest echo wait (ms)',
      'recovery (s)',
      'uvsd CPU (% of one CPU)',
      'drops counted during the flood',
      'other counters that moved',
    ],
    rows,
  });
  r.notes.push(defense);
  if (echoNotes.length) r.notes.push(`Echo streams broken: ${echoNotes.join(' ')}`);
  if (ir.ready !== IDLE_CONNS) r.notes.push(`Idle burst: only ${ir.ready} of ${IDLE_CONNS} connections made their first exchange.`);
  if (ir.failed.length) r.notes.push(`Idle burst: connections that failed after it: ${ir.failed.join('; ')}.`);
}

export async function hashFloodScenario(ctx: Ctx, r: ScenarioResult): Promise<void> {
  const lab = ctx.lab;
  const count = ctx.quick ? 10000 : 40000;
  const rate = 2000;
  const floodS = count / rate;
  r.how = `The IPv6 hash-flooding pattern: ${count.toLocaleString('en-US')} TCP SYNs at ${rate.toLocaleString('en-US')}/s to [${LAB_VIP6}]:80 from one /64 (2001:db8:1:2::/64, random interface identifiers and ports), against the same number from random addresses all over 2001:db8::/32 — each against a fresh uvsd (${ctx.workers} workers, default table). Meanwhile a real client opens a new IPv6 connection with one HTTP GET every 100 ms (its time to the answer is the "legitimate request" figure) and api-probe asks GET /v1/info every 20 ms. uvsd CPU = its process's CPU time over the flood.`;
  await blackholeSpoofed(lab.lbNs);
  const res: Record<
    string,
    {
      cpu: number | null;
      legit: ReturnType<typeof latencyStats>;
      ok: number | null;
      api: ReturnType<typeof latencyStats>;
      devDrops: number | null;
      peak: number;
      drops: string;
    }
  > = {};
  for (const [name, mode] of [
    ['random', 'syn6'],
    ['one /64', 'syn6net'],
  ] as const) {
    ctx.log(`hashflood: ${name}, ${count} SYNs at ${rate}/s`);
    const pid = await startUvsd(ctx, labConfig(ctx, labServices(lab)));
    const mac = await linkMac(lab.lbNs, `${lab.prefix}c1`);
    const probe = connectProbe(lab.clientNs, LAB_VIP6, 80, floodS + 8, 100);
    const api = apiProbe(lab.socket, lab.lbNs, floodS + 8);
    await sleep(2000);
    const before = await getStats(lab.socket);
    const dev0 = await devStats(lab.lbNs, 'uvs0');
    const cpu = new CpuWatch(pid, ctx.hz);
    const t0 = Date.now();
    await relgen(
      ctx,
      lab.clientNs,
      { mode, if: `${lab.prefix}c0`, mac, vip6: LAB_VIP6, port: 80, pps: rate, count },
      floodS * 1000 + 10000,
    );
    const t1 = Date.now();
    const cpuPct = cpu.read();
    const after = await getStats(lab.socket).catch(() => null);
    const dev1 = await devStats(lab.lbNs, 'uvs0');
    const attempts = await probe.stop();
    const samples = await api.stop();
    await ctx.lab.stopUvsd();
    const during = attempts.filter((a) => a.t >= t0 && a.t < t1);
    res[name] = {
      cpu: cpuPct,
      legit: latencyStats(during.map((a) => (a.d !== null ? a.d : 5000))), // a failed request counts as the 5 s it was given
      ok: attemptStats(attempts, t0, t1).okRate,
      api: latencyStats(samples.filter((s) => s.t >= t0 && s.t < t1).map((s) => s.took)),
      devDrops: dev0 && dev1 ? dev1.txDropped - dev0.txDropped : null,
      peak: after?.table.entries ?? 0,
      drops: dropsMoved(before, after),
    };
  }
  const a = res['one /64'];
  const b = res.random;
  const within = (x: number | null | undefined, y: number | null | undefined, slack: number) =>
    x == null || y == null ? null : x <= y * 1.5 + slack;
  r.tables.push({
    title: 'One /64 against random addresses',
    columns: [
      'sources',
      'uvsd CPU (% of one CPU)',
      'legitimate request p50 (ms)',
      'p99 (ms)',
      'max (ms)',
      'answered (%)',
      'API p50 (ms)',
      'API p99 (ms)',
      'API max (ms)',
      'dropped at the device',
      'table entries after',
      'drops counted',
    ],
    rows: ['random', 'one /64'].map((k) => {
      const x = res[k]!;
      return [
        k,
        round(x.cpu),
        x.legit.p50,
        x.legit.p99,
        x.legit.max,
        pct(x.ok),
        x.api.p50,
        x.api.p99,
        x.api.max,
        x.devDrops,
        x.peak,
        x.drops,
      ];
    }),
  });
  r.figures.push(
    {
      label: 'uvsd CPU, one /64 (random addresses)',
      value: `${round(a?.cpu ?? null)} % (${round(b?.cpu ?? null)} %)`,
      expect: 'within 1.5× + 10 points',
      ok: within(a?.cpu, b?.cpu, 10),
    },
    {
      label: 'legitimate request p99, one /64 (random addresses)',
      value: `${a?.legit.p99 ?? '—'} ms (${b?.legit.p99 ?? '—'} ms)`,
      expect: 'within 1.5× + 20 ms',
      ok: within(a?.legit.p99, b?.legit.p99, 20),
    },
    {
      label: 'API p99, one /64 (random addresses)',
      value: `${a?.api.p99 ?? '—'} ms (${b?.api.p99 ?? '—'} ms)`,
      expect: 'within 1.5× + 20 ms',
      ok: within(a?.api.p99, b?.api.p99, 20),
    },
    {
      label: 'packets dropped at the device, one /64 (random addresses)',
      value: `${a?.devDrops ?? '—'} (${b?.devDrops ?? '—'})`,
      expect: '0 (0)',
      ok: a && b ? a.devDrops === 0 && b.devDrops === 0 : null,
    },
  );
}

export async function tableFullScenario(ctx: Ctx, r: ScenarioResult): Promise<void> {
  const lab = ctx.lab;
  const tableSize = 256;
  const floodS = ctx.quick ? 3 : 6;
  const rate = 500;
  const postBoundS = ctx.quick ? 10 : 80;
  r.how = `uvsd with a ${tableSize}-entry table (TIME_WAIT, CLOSE and FIN_WAIT 2 s so that the real clients' own closed connections do not fill it; SYN_RECV at its default) and 8 established TCP echo streams. relgen sends ${rate} SYN/s for ${floodS} s from random sources (${(rate * floodS).toLocaleString('en-US')} SYNs: far more than the table holds); a real client opens a new connection with one HTTP GET every 200 ms throughout. Recovery = from the end of the flood to the first connection after which every new one worked within ${SLOW_MS} ms, observed for at most ${postBoundS} s — nobody steps in.`;
  await blackholeSpoofed(lab.lbNs);
  const cfg = labConfig(ctx, labServices(lab), {
    dataplane: { tableSize },
    timeouts: { tcpFin: 2, tcpStates: { TIME_WAIT: 2, CLOSE: 2, CLOSE_WAIT: 2, LAST_ACK: 2 } },
  });
  const fr = await floodRound(ctx, {
    cfg,
    gen: { mode: 'syn4', pps: rate },
    floodS,
    postBoundS,
    intervalMs: 200,
    echoes: 8,
    name: 'tablefull',
  });
  r.notes.push(await defenseNote(ctx));
  const refusals = fr.atStop ? (fr.atStop.drops.table_full ?? 0) - (fr.before.drops.table_full ?? 0) : null;
  const during = attemptStats(fr.attempts, fr.floodStart, fr.floodStop);
  r.figures.push(
    { label: 'SYNs sent', value: fr.gen.sent },
    { label: 'peak table entries', value: fr.peakEntries, unit: `of ${tableSize}` },
    { label: 'dropped at the device (queue full)', value: fr.devDrops },
    {
      label: 'refusals counted (drops table_full)',
      value: refusals,
      expect: '> 0: the flood was refused, counted',
      ok: refusals === null ? null : refusals > 0,
    },
    { label: 'established echo streams broken (of 8)', value: fr.echoBroken, expect: '0', ok: fr.echoBroken === 0 },
    { label: 'longest wait for an echo on them', value: fr.echoMaxGapMs, unit: 'ms' },
    { label: 'real clients answered during the flood', value: pct(during.okRate), unit: '%' },
    {
      label: 'recovery after the flood',
      value: fr.recoveryMs === null ? `not within ${postBoundS} s` : round(fr.recoveryMs / 1000, 1),
      unit: fr.recoveryMs === null ? undefined : 's',
      expect: `automatic, ≤ 61 s (SYN_RECV 60 s + a sweep)`,
      ok: fr.recoveryMs !== null ? fr.recoveryMs <= 61000 : postBoundS >= 61 ? false : null,
    },
    { label: 'drops counted during the flood', value: dropsMoved(fr.before, fr.atStop) },
  );
  const other = otherCounters(fr.before, fr.atStop);
  if (other) r.notes.push(`Other counters that moved during the flood: ${other}.`);
  if (fr.echoFailed.length) r.notes.push(`Echo streams broken: ${fr.echoFailed.map((f) => `${echoFailure(f)}.`).join(' ')}`);
  if (fr.echoPackets) r.notes.push(`Their packets (client and real servers): ${fr.echoPackets}.`);
}

/**
 * Queue steering under aimed floods (docs/steering.md, issue 25): sources chosen, knowing the
 * algorithm but not the key, so that the key before the keyed hash put them all on one queue —
 * IPv4 source ports below the service's (keyed on VIP:80 by the endpoint with the higher port)
 * and IPv6 sources of one /64 whose interface identifiers have one 32-bit xor fold — against
 * random sources. A flood a worker reads alone stalls every client on its queue at 1/N of the
 * rate a spread flood needs; spread, each worker reads about 1/N.
 */
export async function steerFloodScenario(ctx: Ctx, r: ScenarioResult): Promise<void> {
  const lab = ctx.lab;
  const count = ctx.quick ? 10000 : 40000;
  const rate = 4000;
  const n = ctx.workers;
  const slack = 0.05;
  r.how = `For each flood a fresh uvsd (${n} workers: ${n} device queues, steering at its default) with the lab's services; relgen sends ${count.toLocaleString('en-US')} TCP SYNs at ${rate.toLocaleString('en-US')}/s from the client's veth to the LB node: to ${LAB_VIP}:80 from random sources in 198.18.0.0/15 with random ports (control), and with source ports 1–79; to [${LAB_VIP6}]:80 from random sources all over 2001:db8::/32 (control), and from one /64 (2001:db8:1:2::/64) whose interface identifiers' two 32-bit words xor to one value, drawn per run, all from source port 40000. Each worker's packets read (GET /v1/stats workers[].rxPackets) over the flood, as a share of all of them. On main before issue 25 every SYN of either aimed flood went to one worker, whatever the key (and the IPv4 one's answers from the three real servers to at most three queues).`;
  await blackholeSpoofed(lab.lbNs);
  const floods = [
    { name: 'IPv4, random sources and ports (control)', mode: 'syn4' },
    { name: 'IPv4, source ports 1–79 to VIP:80', mode: 'syn4low' },
    { name: 'IPv6, random sources (control)', mode: 'syn6' },
    { name: 'IPv6, one /64 with one 32-bit fold, one source port', mode: 'syn6fold' },
  ] as const;
  const rows: Value[][] = [];
  let path = '';
  for (const f of floods) {
    ctx.log(`steerflood: ${f.name}, ${count} SYNs at ${rate}/s`);
    await startUvsd(ctx, labConfig(ctx, labServices(lab)));
    const mac = await linkMac(lab.lbNs, `${lab.prefix}c1`);
    await sleep(1000);
    const before = await getStats(lab.socket);
    const st = (before as { steering?: { path?: string; reason?: string | null } }).steering;
    if (!path && st) path = `${st.path ?? '?'}${st.reason ? ` (${st.reason})` : ''}`;
    const dev0 = await devStats(lab.lbNs, 'uvs0');
    const gen = await relgen(
      ctx,
      lab.clientNs,
      {
        mode: f.mode,
        if: `${lab.prefix}c0`,
        mac,
        vip4: LAB_VIP,
        vip6: LAB_VIP6,
        port: 80,
        sport: 40000,
        pps: rate,
        count,
        seed: randomInt(1, 2 ** 31),
      },
      (count / rate) * 1000 + 10000,
    );
    await sleep(500);
    const after = await getStats(lab.socket).catch(() => null);
    const dev1 = await devStats(lab.lbNs, 'uvs0');
    await ctx.lab.stopUvsd();
    const rx = (s: Stats, id: number) => s.workers.find((w) => w.id === id)?.rxPackets ?? 0;
    const d = after ? after.workers.map((w) => rx(after, w.id) - rx(before, w.id)) : [];
    const sum = d.reduce((a, b) => a + b, 0);
    const max = sum > 0 ? Math.max(...d) / sum : null;
    const ok = max === null ? null : max <= 1 / n + slack;
    rows.push([
      f.name,
      gen.sent,
      d.map((x) => `${x.toLocaleString('en-US')} (${sum ? round((x / sum) * 100, 1) : 0} %)`).join(' / ') || '—',
      max === null ? null : round(max * 100, 1),
      dev0 && dev1 ? dev1.txDropped - dev0.txDropped : null,
    ]);
    r.figures.push({
      label: `largest worker's share of the packets read, ${f.name}`,
      value: max === null ? '—' : round(max * 100, 1),
      unit: max === null ? undefined : '%',
      expect: `≤ ${round((1 / n + slack) * 100, 1)} % (1/N + ${slack * 100} points)`,
      ok,
    });
    ctx.log(
      `steerflood: ${f.name}: ${d.join(' / ')} packets read by the workers (largest share ${max === null ? '—' : round(max * 100, 1)} %)`,
    );
  }
  r.tables.push({
    title: 'Packets each worker read during the flood',
    columns: [
      'flood',
      'SYNs sent',
      "read by each worker (its queue's share)",
      "largest worker's share (%)",
      'dropped at the device (queue full)',
    ],
    rows,
  });
  r.notes.push(`Queue steering in effect (GET /v1/stats steering): ${path || 'not reported'}.`);
}
