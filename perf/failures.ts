/**
 * Failure figures (`--failures`), measured with real clients in the labs the reliability tests
 * use (lab/lab.ts, lab/failover-lab.ts, the clients of lab/tools.ts and lab/clients.ts):
 *
 *   drain    a real server removed from the configuration (graceful termination) under an HTTP
 *            load of one-connection requests, some of them held open 1.5 s: requests that failed
 *            out of all, connections that were open on it and completed, new ones that reached it
 *   rsKill   one real server's HTTP server SIGKILLed under the same load, with the health check
 *            the README shows (`{ type: http, path: /healthz }`, defaults 2 s / 1 s / rise 2 /
 *            fall 3): requests broken in flight, new connections that still reached it and for
 *            how long (client side), when uvsd's check marked it down (server side)
 *   lbKill   two LB nodes sharing flows through Redis; lb1, carrying N rate-limited downloads, a
 *            UDP probe every 10 ms and a TCP echo line every 20 ms, is SIGKILLed and traffic moves
 *            to lb2 (keepalived moves the router's next hop and the servers' gateway): downloads broken
 *            out of N (checked byte for byte), and the takeover blackout seen by the client — from
 *            the kill to the end of the largest gap in UDP answers, and in TCP echoes
 *
 * Every figure is per round; the report takes the median over rounds. Nothing here changes uvs.
 */
import { apiCall } from '../control/client';
import { blobDownload, runTool } from '../lab/clients';
import { FailoverLab, type LbNode } from '../lab/failover-lab';
import { LAB_VIP, type Lab } from '../lab/lab';
import { summarize, type Summary } from './summary';
import { sleep } from './exec';

export interface FailureFigure {
  key: string;
  label: string;
  unit: string;
  better: 'higher' | 'lower' | null;
  value: Summary | null;
}

export interface FailureScenarioResult {
  key: 'drain' | 'rsKill' | 'lbKill';
  title: string;
  how: string;
  figures: FailureFigure[];
  /** Not measured (with the reason), or errors of single rounds. */
  notes: string[];
}

export interface FailureFigures {
  measured: boolean;
  note: string;
  rounds?: number;
  scenarios?: FailureScenarioResult[];
}

export interface FailureEnv {
  lab: Lab;
  /** The two-node lab, or null with the reason it cannot run. */
  flab: FailoverLab | { missing: string };
  rounds: number;
  workers: number;
  log: (s: string) => void;
}

/** The lab's tools.ts `load` output. */
export interface LoadRecord {
  start: number;
  end: number;
  server: string | null;
  error: string | null;
  hold: boolean;
  /** lab/tools.ts load: the source port, when it was connected and answered (epoch ms; null: not that far). */
  port?: number | null;
  connected?: number | null;
  answered?: number | null;
}

type Defs = Record<string, { label: string; unit: string; better: 'higher' | 'lower' | null }>;

const DRAIN: Defs = {
  failed: { label: 'requests failed (reset, refused, timed out, not 200)', unit: '', better: 'lower' },
  requests: { label: 'requests (one TCP connection each)', unit: '', better: null },
  inFlight: { label: 'connections open on the removed server at the removal', unit: '', better: null },
  inFlightCompleted: { label: 'of those, completed', unit: '', better: 'higher' },
  newToRemoved: { label: 'new connections that reached the removed server after it', unit: '', better: 'lower' },
};
const RS_KILL: Defs = {
  failed: { label: 'requests failed in all', unit: '', better: 'lower' },
  requests: { label: 'requests (one TCP connection each)', unit: '', better: null },
  brokenInFlight: { label: 'connections open on the killed server, broken', unit: '', better: 'lower' },
  failedNew: { label: 'new connections sent to the dead server (refused)', unit: '', better: 'lower' },
  lastToDeadMs: { label: 'last new connection to the dead server, after the kill (client side)', unit: 'ms', better: 'lower' },
  detectMs: { label: 'health check marked it down, after the kill (uvsd)', unit: 'ms', better: 'lower' },
};
const LB_KILL: Defs = {
  streamsBroken: { label: 'downloads broken (cut or corrupted)', unit: '', better: 'lower' },
  streams: { label: 'downloads running through lb1 at the kill', unit: '', better: null },
  blackoutUdpMs: { label: 'blackout, UDP: kill → first answer after the largest gap in answers', unit: 'ms', better: 'lower' },
  udpAfterSwitchMs: { label: 'of which after keepalived made lb2 master', unit: 'ms', better: 'lower' },
  blackoutTcpMs: { label: 'blackout, TCP: kill → first echo after the largest gap in echoes', unit: 'ms', better: 'lower' },
  tcpAfterSwitchMs: { label: 'of which after keepalived made lb2 master', unit: 'ms', better: 'lower' },
  udpLost: { label: 'UDP probes unanswered (one every 10 ms)', unit: '', better: 'lower' },
  echoBroken: { label: 'TCP echo connection broken', unit: '', better: 'lower' },
  switchMs: { label: 'keepalived on lb2 MASTER for both families (VRRP timeout), after the kill', unit: 'ms', better: 'lower' },
  adoptedMs: {
    label: "lb2's adoptions reached the number of downloads, after the kill (uvsd; any flow counts)",
    unit: 'ms',
    better: 'lower',
  },
  adopted: { label: 'flows lb2 adopted in all (downloads, echo, UDP when carried over)', unit: '', better: null },
};

function figures(defs: Defs, values: Record<string, number[]>): FailureFigure[] {
  return Object.entries(defs).map(([key, d]) => ({ key, ...d, value: summarize(values[key] ?? []) }));
}

/**
 * The takeover blackout from the client's side: among the gaps between consecutive arrivals
 * (answers, echoes) that end after the kill and begin no later than 50 ms after it, the largest;
 * its end minus the kill. Null when nothing arrived after the kill.
 */
export function blackout(arrivals: number[], tKill: number): { blackoutMs: number; gapMs: number } | null {
  const a = [...arrivals].sort((x, y) => x - y);
  let best: { blackoutMs: number; gapMs: number } | null = null;
  for (let i = 0; i + 1 < a.length; i++) {
    const s = a[i]!;
    const e = a[i + 1]!;
    if (e <= tKill || s > tKill + 50) continue;
    if (!best || e - s > best.gapMs) best = { blackoutMs: e - tKill, gapMs: e - s };
  }
  return best;
}

/** Load records around an event at t (ms) on server `name`: what the figures count. */
export function classifyLoad(records: LoadRecord[], name: string, tBefore: number, tAfter: number) {
  const inFlight = records.filter(
    (r) => r.start < tBefore && r.end > tAfter && (r.server === name || (r.server === null && r.error !== null)),
  );
  const after = records.filter((r) => r.start > tAfter + 20); // the request's own connect
  return {
    requests: records.length,
    failed: records.filter((r) => r.error !== null).length,
    inFlight: inFlight.length,
    inFlightCompleted: inFlight.filter((r) => r.error === null).length,
    brokenInFlight: inFlight.filter((r) => r.error !== null).length,
    newToName: after.filter((r) => r.server === name).length,
    failedNew: after.filter((r) => r.error !== null),
  };
}

async function waitWorkers(socket: string, workers: number): Promise<void> {
  const deadline = Date.now() + 10000;
  for (;;) {
    const st = await apiCall<{ workers: { ready: boolean }[] }>(socket, 'GET', '/v1/stats').catch(() => null);
    if (st?.status === 200 && st.body.workers.length === workers && st.body.workers.every((w) => w.ready)) return;
    if (Date.now() > deadline) throw new Error('uvsd workers not ready after 10 s');
    await sleep(50);
  }
}

const web = (rs: string[], extra: Record<string, unknown> = {}) => [
  {
    name: 'http',
    protocol: 'tcp',
    address: LAB_VIP,
    port: 80,
    scheduler: 'rr',
    realServers: rs.map((address) => ({ address, port: 8080 })),
    ...extra,
  },
];
/** Short TIME_WAIT and a 1 s drain check, as the graceful-termination tests use. */
const FAST = {
  timeouts: { tcpFin: 2, tcpStates: { TIME_WAIT: 2, CLOSE: 2, CLOSE_WAIT: 2, LAST_ACK: 2 } },
  gracefulTermination: { checkInterval: 1 },
};

async function startUvsd(env: FailureEnv, services: unknown[], extra: Record<string, unknown> = {}): Promise<string> {
  const lab = env.lab;
  const file = lab.writeConfig(
    lab.config(services, { log: { level: 'warn' }, dataplane: { workers: env.workers }, ...extra }),
    'uvs-failures.yaml',
  );
  await lab.startUvsd(file);
  await waitWorkers(lab.socket, env.workers);
  return file;
}

/**
 * The load: 6 loops of one-connection requests, every 4th held open 1.5 s (the graceful test's
 * load: connections open at any moment), and 1 loop of short requests only. The first alone
 * comes in bursts (its loops end up waiting on their held requests together, for up to 1.5 s);
 * the second keeps a new connection starting every few ms, so the figures about new connections
 * have that resolution.
 */
async function load(lab: Lab, seconds: number): Promise<LoadRecord[]> {
  type Out = { requests: number; errors: number; records: LoadRecord[] };
  const runs = [
    runTool<Out>(lab.clientNs, ['load', LAB_VIP, '80', String(seconds), '6', '4', '1500'], (seconds + 30) * 1000).result,
    runTool<Out>(lab.clientNs, ['load', LAB_VIP, '80', String(seconds), '1', '0', '0'], (seconds + 30) * 1000).result,
  ];
  const outs = await Promise.all(runs);
  if (outs.some((o) => !o.out?.records?.length)) throw new Error('a load client printed nothing');
  return outs.flatMap((o) => o.out!.records);
}

/** (a) One real server removed from the configuration under load. */
async function drainRound(env: FailureEnv): Promise<Record<string, number>> {
  const lab = env.lab;
  const rs = lab.rsAddrs;
  await startUvsd(env, web(rs), FAST);
  try {
    const result = load(lab, 7);
    await sleep(2500);
    const tBefore = Date.now();
    lab.writeConfig(
      lab.config(web(rs.slice(1)), { log: { level: 'warn' }, dataplane: { workers: env.workers }, ...FAST }),
      'uvs-failures.yaml',
    );
    const r = await apiCall(lab.socket, 'POST', '/v1/reload');
    const tAfter = Date.now();
    if (r.status !== 200) throw new Error(`reload refused: ${JSON.stringify(r.body)}`);
    const c = classifyLoad(await result, 'rs1', tBefore, tAfter);
    return {
      requests: c.requests,
      failed: c.failed,
      inFlight: c.inFlight,
      inFlightCompleted: c.inFlightCompleted,
      newToRemoved: c.newToName,
    };
  } finally {
    await lab.stopUvsd();
  }
}

/** (b) One real server's HTTP server killed under load; health checks as the README shows. */
async function rsKillRound(env: FailureEnv): Promise<Record<string, number>> {
  const lab = env.lab;
  const rs = lab.rsAddrs;
  await startUvsd(env, web(rs, { healthCheck: { type: 'http', path: '/healthz' } }));
  try {
    const result = load(lab, 12);
    await sleep(3000);
    const tKill = Date.now();
    lab.stopServer(0);
    let detectMs = NaN;
    const deadline = tKill + 15000;
    while (Date.now() < deadline) {
      const h = await apiCall<{ checks: { realServer: string; healthy: boolean }[] }>(lab.socket, 'GET', '/v1/health').catch(() => null);
      if (h?.body.checks.some((c) => c.realServer.startsWith(`${rs[0]}:`) && !c.healthy)) {
        detectMs = Date.now() - tKill;
        break;
      }
      await sleep(100);
    }
    // After the kill only rs1 fails: a failed request that started after it went to rs1.
    const c = classifyLoad(await result, 'rs1', tKill, tKill);
    const lastToDead = c.failedNew.reduce((m, r) => Math.max(m, r.start - tKill), 0);
    return {
      requests: c.requests,
      failed: c.failed,
      brokenInFlight: c.brokenInFlight,
      failedNew: c.failedNew.length,
      lastToDeadMs: lastToDead,
      detectMs,
    };
  } finally {
    lab.startServer(0);
    await lab.waitServers().catch((e) => env.log(`rs1 did not come back: ${(e as Error).message}`));
    await lab.stopUvsd();
  }
}

interface FoStats {
  adopted: number;
  redis: { connected: boolean; written: number } | null;
}

/** (c) The active LB node SIGKILLed while it carries downloads and probes. */
async function lbKillRound(env: FailureEnv, flab: FailoverLab, notes: string[], round: number): Promise<Record<string, number>> {
  const stats = async (n: LbNode) => (await apiCall<FoStats>(flab.socket(n), 'GET', '/v1/stats')).body;
  await flab.reset();
  const services = [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: flab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: flab.rsAddrs.map((a) => ({ address: a, port: 5353 })) },
    { protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'rr', realServers: flab.rsAddrs.map((a) => ({ address: a, port: 9007 })) },
  ];
  try {
    for (const n of ['lb1', 'lb2'] as const) {
      const cfg = flab.config(n, services, { log: { level: 'warn' } });
      (cfg.dataplane as Record<string, unknown>).workers = env.workers;
      await flab.startUvsd(n, cfg);
    }
    for (const n of ['lb1', 'lb2'] as const) {
      const deadline = Date.now() + 8000;
      while (!(await stats(n).catch(() => null))?.redis?.connected) {
        if (Date.now() > deadline) throw new Error(`${n} did not connect to Redis`);
        await sleep(100);
      }
    }
    await flab.startVrrp('lb1');
    // 16 MB at 2 MB/s: 8 s, far more than a socket buffer holds after the kill at 2.5 s, so lb2
    // must carry every download to its end (the failover test's reasoning).
    const N = 6;
    const downloads = Array.from({ length: N }, (_, i) => blobDownload(flab.ns.cl, LAB_VIP, 80, 16 << 20, 500 + i, '2M', 40));
    const udp = runTool<{ sent: number; answered: number; probes: [number, number | null, string | null][] }>(
      flab.ns.cl,
      ['udp-probe', LAB_VIP, '53', '10', '10'],
      40000,
    ).result;
    const echo = runTool<{ error: string | null; times: number[] }>(flab.ns.cl, ['echo-probe', LAB_VIP, '7', '10', '20'], 40000).result;
    await sleep(2500);
    const { killedAt: tKill, vrrpMs: switchMs } = await flab.failover('node');
    let adoptedMs = NaN;
    while (Date.now() < tKill + 10000) {
      if (((await stats('lb2').catch(() => null))?.adopted ?? 0) >= N) {
        adoptedMs = Date.now() - tKill;
        break;
      }
      await sleep(50);
    }
    const dl = await Promise.all(downloads.map((d) => d.result));
    const ok = dl.map((d) => d.ok);
    const broken = dl.filter((d) => !d.ok);
    if (broken.length)
      notes.push(
        `round ${round}: ${broken.length} of ${N} downloads broken (curl exit ${broken.map((d) => d.curlExit ?? '?').join(', ')}; 18 = body cut short, 28 = timed out, 56 = connection reset, 0 = complete but different bytes)`,
      );
    const u = (await udp).out;
    const e = (await echo).out;
    const bu = u
      ? blackout(
          u.probes.flatMap((p) => (p[1] === null ? [] : [p[1]])),
          tKill,
        )
      : null;
    const bt = e ? blackout(e.times, tKill) : null;
    const adopted = (await stats('lb2').catch(() => null))?.adopted ?? NaN;
    const r: Record<string, number> = { streams: N, streamsBroken: ok.filter((x) => !x).length, switchMs, adoptedMs, adopted };
    if (bu) {
      r.blackoutUdpMs = bu.blackoutMs;
      r.udpAfterSwitchMs = bu.blackoutMs - switchMs;
    }
    if (u) r.udpLost = u.sent - u.answered;
    if (bt) {
      r.blackoutTcpMs = bt.blackoutMs;
      r.tcpAfterSwitchMs = bt.blackoutMs - switchMs;
    }
    if (e) r.echoBroken = e.error === null ? 0 : 1;
    env.log(
      `  lb kill: ${r.streamsBroken}/${N} downloads broken; blackout UDP ${bu ? `${bu.blackoutMs} ms (gap ${bu.gapMs} ms)` : 'not measured: no answer after the kill'}, TCP echo ${bt ? `${bt.blackoutMs} ms (gap ${bt.gapMs} ms)` : 'not measured: no echo after the kill'}; switch ${switchMs} ms; lb2 adopted all downloads after ${Number.isNaN(adoptedMs) ? '> 10 s' : `${adoptedMs} ms`}`,
    );
    return r;
  } finally {
    await flab.reset().catch(() => undefined);
  }
}

const TITLES = {
  drain: 'Drain: a real server removed under load',
  rsKill: 'Real-server kill under load (health-checked)',
  lbKill: 'LB-node kill, flows shared through Redis',
};

const HOW = {
  drain:
    'Single-node lab, uvsd with one HTTP service (rr over rs1–rs3, short TIME_WAIT, 1 s drain check). lab/tools.js `load`: 6 loops of one-connection HTTP requests for 7 s, every 4th held open 1.5 s, and 1 loop of short ones; after 2.5 s rs1 is removed from the configuration file and uvsd reloads it (graceful termination: weight 0, drained, then deleted).',
  rsKill:
    'Single-node lab, uvsd with the same service and the README\'s health check `{ type: http, path: /healthz }` (every 2 s, 1 s timeout, down after 3 failures). The same load for 12 s (the short loop starts a new connection every few ms: the resolution of the client-side figures); after 3 s rs1\'s HTTP server is SIGKILLed (the host stays up, so new connections to it are refused at once). A failed request that started after the kill went to rs1 (the others are healthy); "last new connection" is the start of the last of them.',
  lbKill:
    "Two-node lab (lab/failover-lab.ts): uvsd and keepalived on lb1 and lb2, one redis-server; keepalived (one VRRPv3 instance per family in a sync group, 100 ms adverts, a track script on uvsd's /healthz) holds the router's next hop for the VIP ranges and the servers' gateway on lb1. Six curl downloads of 16 MB at 2 MB/s (checked with sha256 against the generated bytes), a UDP probe every 10 ms (lab/tools.js udp-probe, one source port) and a TCP echo line every 20 ms (echo-probe) run through lb1; after 2.5 s lb1 dies whole: its links go down, then every process in it gets SIGKILL, and lb2's keepalived takes the addresses by VRRP timeout (3 adverts plus skew, about 330 ms for priority 190) and sends gratuitous ARP / unsolicited NA. \"keepalived MASTER\" is when lb2's notify FIFO reported both instances master. Blackout: from the kill to the end of the largest gap in arrivals (answers, echoes) that spans it, measured by the clients' own clocks. TCP's figure includes the senders' retransmission timeouts (at least 200 ms); UDP has none.",
};

/** Runs every scenario `rounds` times; per-round errors become notes, never exceptions. */
export async function runFailures(env: FailureEnv): Promise<FailureFigures> {
  const vals: Record<'drain' | 'rsKill' | 'lbKill', Record<string, number[]>> = { drain: {}, rsKill: {}, lbKill: {} };
  const notes: Record<'drain' | 'rsKill' | 'lbKill', string[]> = { drain: [], rsKill: [], lbKill: [] };
  const keep = (k: 'drain' | 'rsKill' | 'lbKill', r: Record<string, number>) => {
    for (const [m, v] of Object.entries(r)) if (Number.isFinite(v)) (vals[k][m] ??= []).push(v);
  };
  let flab: FailoverLab | null = null;
  if (env.flab instanceof FailoverLab) flab = env.flab;
  else notes.lbKill.push(`not measured: ${env.flab.missing}`);
  if (flab) {
    try {
      env.log(`failures: two-node lab ${flab.prefix} (router, lb1, lb2, three real servers, redis-server)`);
      flab.up();
      await flab.waitServers();
    } catch (e) {
      notes.lbKill.push(`not measured: the two-node lab did not come up: ${(e as Error).message}`);
      flab = null;
    }
  }
  for (let round = 1; round <= env.rounds; round++) {
    for (const [k, fn] of [
      ['drain', () => drainRound(env)],
      ['rsKill', () => rsKillRound(env)],
      ['lbKill', flab ? () => lbKillRound(env, flab!, notes.lbKill, round) : null],
    ] as const) {
      if (!fn) continue;
      try {
        const r = await fn();
        keep(k, r);
        if (k !== 'lbKill')
          env.log(
            `round ${round}/${env.rounds} · failures · ${k.padEnd(6)}  ${Object.entries(r)
              .map(([m, v]) => `${m} ${Number.isFinite(v) ? Math.round(v) : '—'}`)
              .join(', ')}`,
          );
        else env.log(`round ${round}/${env.rounds} · failures · lbKill done`);
      } catch (e) {
        const msg = (e as Error).message;
        notes[k].push(`round ${round} failed: ${msg}`);
        env.log(`round ${round}/${env.rounds} · failures · ${k}  FAILED: ${msg}`);
      }
    }
  }
  if (flab) flab.down();
  if (Object.keys(vals.rsKill).length && !vals.rsKill.detectMs)
    notes.rsKill.push('health check: uvsd did not mark rs1 down within 15 s in any round');
  const scenarios: FailureScenarioResult[] = [
    { key: 'drain', title: TITLES.drain, how: HOW.drain, figures: figures(DRAIN, vals.drain), notes: notes.drain },
    { key: 'rsKill', title: TITLES.rsKill, how: HOW.rsKill, figures: figures(RS_KILL, vals.rsKill), notes: notes.rsKill },
    { key: 'lbKill', title: TITLES.lbKill, how: HOW.lbKill, figures: figures(LB_KILL, vals.lbKill), notes: notes.lbKill },
  ];
  return {
    measured: scenarios.some((s) => s.figures.some((f) => f.value)),
    note: 'Not measured yet: a worker thread killed under load and a reload under load.',
    rounds: env.rounds,
    scenarios,
  };
}

/** The two-node lab's prefix for a run's prefix (FailoverLab takes at most 8 characters). */
export function failoverPrefix(prefix: string): string {
  return `${prefix.slice(0, 7)}f`;
}
