/**
 * Reloads and a worker crash under load: while downloads (checked byte for byte), TCP echo
 * streams (IPv4 and IPv6) and a loop of one-connection HTTP requests run through uvsd, the
 * configuration file changes ten times — weights, the scheduler of the service carrying the load,
 * services added and removed — each applied with POST /v1/reload; then every worker thread is
 * killed in turn (POST /v1/workers/N/kill) and restarted by uvsd. Counted: streams broken.
 */
import { apiCall } from '../../control/client';
import { runTool } from '../../lab/clients';
import { LAB_VIP, LAB_VIP6 } from '../../lab/lab';
import { sleep } from '../exec';
import type { LoadRecord } from '../failures';
import { download, getStats, labConfig, labServices, startEchoes, startUvsd, stopEchoes, waitWorkers, type Ctx } from './common';
import type { ScenarioResult } from './report';

interface Variant {
  what: string;
  scheduler?: string;
  weights?: number[];
  extra?: 'udp' | 'tcp';
}

/** Ten changes; each is a whole new file, as an operator or kube-proxy would write it. */
const VARIANTS: Variant[] = [
  { what: 'weights of the HTTP service 2/1/1', weights: [2, 1, 1] },
  { what: 'scheduler of the HTTP services rr → wlc', scheduler: 'wlc', weights: [2, 1, 1] },
  { what: 'a UDP service added (VIP:54)', scheduler: 'wlc', weights: [2, 1, 1], extra: 'udp' },
  { what: 'scheduler → sh', scheduler: 'sh', weights: [2, 1, 1], extra: 'udp' },
  { what: 'weights 1/1/3', scheduler: 'sh', weights: [1, 1, 3], extra: 'udp' },
  { what: 'the UDP service removed', scheduler: 'sh', weights: [1, 1, 3] },
  { what: 'scheduler → mh', scheduler: 'mh', weights: [1, 1, 3] },
  { what: 'a TCP service added (VIP:81)', scheduler: 'mh', weights: [1, 1, 3], extra: 'tcp' },
  { what: 'scheduler → wrr, weights 1/2/1', scheduler: 'wrr', weights: [1, 2, 1], extra: 'tcp' },
  { what: 'the TCP service removed, back to rr 1/1/1' },
];

export async function reloadScenario(ctx: Ctx, r: ScenarioResult): Promise<void> {
  const lab = ctx.lab;
  const gapMs = ctx.quick ? 500 : 2000;
  const spanS = Math.ceil((2000 + VARIANTS.length * gapMs + ctx.workers * 2500 + 3000) / 1000);
  const rateKiB = 256;
  const bytes = rateKiB * 1024 * (spanS + 2);
  r.how = `uvsd (${ctx.workers} workers) with the lab's services. Load for ${spanS} s: 4 downloads of ${(bytes / 2 ** 20).toFixed(1)} MiB read at ${rateKiB} KiB/s through ${LAB_VIP}:80 (client.ts download, checked with sha256), 4 TCP echo streams through ${LAB_VIP}:7 and 2 through [${LAB_VIP6}]:7 (a line every 100 ms each), and lab/tools.js \`load\`: 2 loops of one-connection HTTP requests. After 2 s, every ${gapMs / 1000} s a new configuration file is written and POST /v1/reload applies it — ${VARIANTS.map((v, i) => `(${i + 1}) ${v.what}`).join(', ')}; then each worker thread is killed in turn (POST /v1/workers/N/kill), ${2.5} s apart.`;
  const cfg = (v: Variant) =>
    labConfig(
      ctx,
      labServices(lab, {
        scheduler: v.scheduler,
        weights: v.weights,
        extra:
          v.extra === 'udp'
            ? [
                {
                  name: 'extra',
                  protocol: 'udp',
                  address: LAB_VIP,
                  port: 54,
                  scheduler: 'rr',
                  realServers: lab.rsAddrs.map((address) => ({ address, port: 5353 })),
                },
              ]
            : v.extra === 'tcp'
              ? [
                  {
                    name: 'extra',
                    protocol: 'tcp',
                    address: LAB_VIP,
                    port: 81,
                    scheduler: 'rr',
                    realServers: lab.rsAddrs.map((address) => ({ address, port: 8080 })),
                  },
                ]
              : [],
      }),
      {
        reload: { watch: false },
      },
    );
  await startUvsd(ctx, cfg({ what: 'start' }));
  const before = await getStats(lab.socket);
  const downloads = Array.from({ length: 4 }, (_, i) => download(lab.clientNs, LAB_VIP, 80, bytes, 100 + i, rateKiB * 1024, spanS + 60));
  const echoes = [
    ...(await startEchoes(lab.clientNs, LAB_VIP, 7, 4, spanS, 100)),
    ...(await startEchoes(lab.clientNs, LAB_VIP6, 7, 2, spanS, 100)),
  ];
  type Out = { requests: number; errors: number; records: LoadRecord[] };
  const load = runTool<Out>(lab.clientNs, ['load', LAB_VIP, '80', String(spanS - 1), '2', '0', '0'], (spanS + 30) * 1000).result;
  await sleep(2000);
  const reloads: { what: string; status: number; ms: number }[] = [];
  const tReload = Date.now();
  for (const v of VARIANTS) {
    lab.writeConfig(cfg(v), 'uvs-rel.yaml');
    const t = Date.now();
    const res = await apiCall(lab.socket, 'POST', '/v1/reload').catch((e: Error) => ({ status: 0, body: e.message }));
    reloads.push({ what: v.what, status: res.status, ms: Date.now() - t });
    await sleep(gapMs);
  }
  const tCrash = Date.now();
  const kills: { worker: number; status: number; readyMs: number | null }[] = [];
  for (let id = 0; id < ctx.workers; id++) {
    const t = Date.now();
    const k = await apiCall(lab.socket, 'POST', `/v1/workers/${id}/kill`).catch(() => ({ status: 0 }));
    let readyMs: number | null = null;
    await sleep(100);
    try {
      await waitWorkers(lab.socket, ctx.workers, 10000);
      readyMs = Date.now() - t;
    } catch {
      /* stays null */
    }
    kills.push({ worker: id, status: k.status, readyMs });
    await sleep(2400);
  }
  const tEnd = Date.now();
  const dl = await Promise.all(downloads.map((d) => d.result));
  const echo = await stopEchoes(echoes);
  const ld = await load;
  const after = await getStats(lab.socket).catch(() => null);
  const records = ld.out?.records ?? [];
  const failedIn = (a: number, b: number) => records.filter((x) => x.error !== null && x.end >= a && x.start < b).length;
  const restarts = after ? after.workers.reduce((s, w) => s + w.restarts, 0) - before.workers.reduce((s, w) => s + w.restarts, 0) : null;
  const dlBroken = dl.filter((x) => !x.ok).length;
  r.figures.push(
    {
      label: 'reloads applied (HTTP 200)',
      value: reloads.filter((x) => x.status === 200).length,
      unit: `of ${VARIANTS.length}`,
      expect: `${VARIANTS.length}`,
      ok: reloads.every((x) => x.status === 200),
    },
    { label: 'slowest reload (POST /v1/reload answered)', value: Math.max(...reloads.map((x) => x.ms)), unit: 'ms' },
    {
      label: 'workers killed and back (ready)',
      value: kills.filter((k) => k.status === 202 && k.readyMs !== null).length,
      unit: `of ${ctx.workers}`,
      expect: `${ctx.workers}`,
      ok: kills.every((k) => k.status === 202 && k.readyMs !== null),
    },
    { label: 'worker restarts counted by uvsd', value: restarts, expect: `${ctx.workers}`, ok: restarts === ctx.workers },
    { label: 'downloads broken (cut or corrupted), of 4', value: dlBroken, expect: '0', ok: dlBroken === 0 },
    { label: 'echo streams broken, of 6', value: echo.broken, expect: '0', ok: echo.broken === 0 },
    { label: 'longest wait for an echo', value: echo.maxGapMs, unit: 'ms' },
    { label: 'HTTP requests (one connection each)', value: records.length },
    {
      label: 'HTTP requests failed during the reloads',
      value: failedIn(tReload, tCrash),
      expect: '0',
      ok: failedIn(tReload, tCrash) === 0,
    },
    { label: 'HTTP requests failed during the worker kills', value: failedIn(tCrash, tEnd), expect: '0', ok: failedIn(tCrash, tEnd) === 0 },
    {
      label: 'HTTP requests failed in all',
      value: records.filter((x) => x.error !== null).length,
      expect: '0',
      ok: records.every((x) => x.error === null),
    },
  );
  r.tables.push({
    title: 'Reloads',
    columns: ['#', 'change', 'HTTP status', 'answered in (ms)'],
    rows: reloads.map((x, i) => [i + 1, x.what, x.status, x.ms]),
  });
  const errs = records.filter((x) => x.error !== null).map((x) => x.error);
  if (errs.length) r.notes.push(`HTTP errors: ${[...new Set(errs)].map((e) => `${e} ×${errs.filter((x) => x === e).length}`).join(', ')}.`);
  const dlErrs = dl.filter((x) => !x.ok).map((x) => `${x.error} after ${x.bytes} bytes`);
  if (dlErrs.length) r.notes.push(`Broken downloads: ${dlErrs.join('; ')}.`);
  if (echo.broken)
    r.notes.push(
      `Broken echo streams: ${echo.results
        .filter((x) => x.error !== null)
        .map((x) => `${x.server || '?'}: ${x.error}`)
        .join('; ')}.`,
    );
}
