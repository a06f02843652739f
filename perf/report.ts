/**
 * The report: medians with min–max over rounds, ratios, the markdown page, the JSON file and an
 * SVG chart (drawn here, no dependency).
 */
import type { FailureFigures } from './failures';
import type { Summary } from './summary';
import type { MeasurementName, TargetName } from './targets';

export interface MetricDef {
  key: string;
  label: string;
  unit: string;
  better: 'higher' | 'lower' | null;
  /** Shown in the main table and the ratio tables. */
  headline: boolean;
}

const cpu = (suffix: string, unit: string, per: string): MetricDef[] => [
  { key: `lbCpu${suffix}`, label: `LB CPU per ${per} (process + extra softirq)`, unit, better: 'lower', headline: true },
  { key: `lbProc${suffix}`, label: `LB processes' CPU per ${per}`, unit, better: 'lower', headline: false },
  { key: `softirq${suffix}`, label: `machine softirq per ${per}`, unit, better: 'lower', headline: false },
  { key: `busy${suffix}`, label: `machine CPU per ${per} (everything)`, unit, better: 'lower', headline: false },
];

/** What an LB does around each unit of work (measure.ts ioMetrics): LB processes only. */
const io = (per: 'Pkt' | 'Conn', what: string): MetricDef[] => [
  { key: `syscallsPer${per}`, label: `LB syscalls per ${what}`, unit: '', better: 'lower', headline: false },
  { key: `wakeupsPer${per}`, label: `LB wake-ups per ${what} (voluntary context switches)`, unit: '', better: 'lower', headline: false },
  { key: `switchesPer${per}`, label: `LB context switches per ${what}`, unit: '', better: 'lower', headline: false },
];

const rrMetrics: MetricDef[] = [
  { key: 'p50Us', label: 'round trip p50', unit: 'µs', better: 'lower', headline: true },
  { key: 'p99Us', label: 'round trip p99', unit: 'µs', better: 'lower', headline: true },
  { key: 'p999Us', label: 'round trip p99.9', unit: 'µs', better: 'lower', headline: true },
  { key: 'avgUs', label: 'round trip mean', unit: 'µs', better: 'lower', headline: false },
  { key: 'tps', label: 'transactions/s (one in flight)', unit: '/s', better: 'higher', headline: false },
  ...cpu('NsPerPkt', 'ns', 'packet'),
  ...io('Pkt', 'packet'),
];

export const MEASUREMENTS: Record<MeasurementName, { title: string; tool: string; metrics: MetricDef[] }> = {
  udp_pps: {
    title: 'UDP flood, 64 B payload, 1 flow',
    tool: 'sockperf throughput --mps=max -m 64',
    metrics: [
      { key: 'pps', label: 'packets/s reaching the real servers', unit: 'pkt/s', better: 'higher', headline: true },
      { key: 'sentPps', label: 'packets/s sent by sockperf', unit: 'pkt/s', better: null, headline: false },
      { key: 'lossPct', label: 'lost between client and real servers', unit: '%', better: 'lower', headline: false },
      ...cpu('NsPerPkt', 'ns', 'packet'),
      ...io('Pkt', 'packet'),
    ],
  },
  udp_rr: { title: 'UDP request/response, 64 B', tool: 'sockperf ping-pong --full-rtt -m 64', metrics: rrMetrics },
  tcp_rr: { title: 'TCP request/response, 64 B, one connection', tool: 'sockperf ping-pong --tcp --full-rtt -m 64', metrics: rrMetrics },
  tcp_cps: {
    title: 'TCP connections/s (HTTP, Connection: close)',
    tool: 'wrk -H "Connection: close"',
    metrics: [
      { key: 'cps', label: 'connections/s (= requests/s)', unit: '/s', better: 'higher', headline: true },
      { key: 'errors', label: 'socket errors + non-2xx', unit: '', better: 'lower', headline: false },
      {
        key: 'synRetransPerK',
        label: "client's SYN retransmits per 1000 connections (each waits ≥ 1 s)",
        unit: '',
        better: 'lower',
        headline: false,
      },
      {
        key: 'pawsRejectsPerK',
        label: 'packets the real servers rejected in TIME_WAIT for an old timestamp (PAWS) per 1000 connections',
        unit: '',
        better: 'lower',
        headline: false,
      },
      ...cpu('UsPerConn', 'µs', 'connection'),
      ...io('Conn', 'connection'),
      ...io('Pkt', 'packet'),
    ],
  },
  tcp_bulk: {
    title: 'Bulk TCP, one stream',
    tool: 'iperf3 -t',
    metrics: [
      { key: 'gbps', label: 'throughput', unit: 'Gb/s', better: 'higher', headline: true },
      { key: 'retransmits', label: 'retransmits', unit: '', better: 'lower', headline: false },
      ...cpu('MsPerGB', 'ms', 'GB'),
    ],
  },
};

export interface ScalingRun {
  group: 'workers' | 'flows' | 'table';
  label: string;
  workers: number;
  tableSize: number;
  flows: number;
  generator: 'sockperf' | 'trafgen';
  metrics: Record<string, Summary>;
}

export interface MemoryRow {
  workers: number;
  tableSize: number;
  rssIdleMb: Summary | null;
  rssAfterMb: Summary | null;
  hwmMb: Summary | null;
}

export interface ReportData {
  tool: string;
  generatedAt: string;
  mode: 'default' | 'quick' | 'custom';
  command: string;
  wallSeconds: number;
  options: {
    rounds: number;
    duration: number;
    targets: TargetName[];
    measurements: MeasurementName[];
    workers: number;
    conns: number;
    scaling: string[];
    flows: number[];
    tables: number[];
    uvsIo?: string;
    uvsSteering?: string;
  };
  machine: Record<string, string | number>;
  tools: Record<string, string>;
  method: string[];
  results: Partial<Record<MeasurementName, Partial<Record<TargetName, Record<string, Summary>>>>>;
  notMeasured: { target: string; measurement: string; reason: string }[];
  ratios: {
    /** target ÷ direct, per measurement and metric (medians). */
    vsDirect: Partial<Record<MeasurementName, Partial<Record<TargetName, Record<string, number>>>>>;
    /** uvs ÷ peer. */
    uvsVs: Partial<Record<MeasurementName, Partial<Record<TargetName, Record<string, number>>>>>;
  };
  lbRssMb: Partial<Record<TargetName, Summary>>;
  scaling: { runs: ScalingRun[]; memory: MemoryRow[] };
  failures: FailureFigures;
  errors: { round: number; target: string; measurement: string; error: string }[];
}

/**
 * Ratios of medians. None where the denominator was zero in some round: a figure that is zero
 * within its noise (nftables' softirq above direct, say) makes a ratio of nothing but noise.
 */
export function computeRatios(results: ReportData['results'], targets: TargetName[]): ReportData['ratios'] {
  const vsDirect: ReportData['ratios']['vsDirect'] = {};
  const uvsVs: ReportData['ratios']['uvsVs'] = {};
  for (const [m, byT] of Object.entries(results) as [MeasurementName, Partial<Record<TargetName, Record<string, Summary>>>][]) {
    const d = byT.direct;
    const u = byT.uvs;
    for (const t of targets) {
      const x = byT[t];
      if (!x) continue;
      if (d && t !== 'direct') {
        for (const [k, s] of Object.entries(x)) {
          const base = d[k];
          if (base && base.min > 0) ((vsDirect[m] ??= {})[t] ??= {})[k] = s.median / base.median;
        }
      }
      if (u && t !== 'uvs') {
        for (const [k, s] of Object.entries(u)) {
          const base = x[k];
          if (base && base.min > 0) ((uvsVs[m] ??= {})[t] ??= {})[k] = s.median / base.median;
        }
      }
    }
  }
  return { vsDirect, uvsVs };
}

// ── formatting ──────────────────────────────────────────────────────────────────────────────
export function fmt(v: number | undefined | null): string {
  if (v === undefined || v === null || !Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(a >= 1e7 ? 1 : 2)} M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(a >= 1e5 ? 0 : 1)} k`;
  if (a >= 100 || Number.isInteger(v)) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  if (a === 0) return '0';
  return v.toPrecision(2);
}

function cell(s: Summary | null | undefined): string {
  if (!s) return '—';
  if (s.n === 1 || s.min === s.max) return fmt(s.median);
  return `${fmt(s.median)} (${fmt(s.min)}–${fmt(s.max)})`;
}

function ratio(r: number | undefined): string {
  if (r === undefined || !Number.isFinite(r)) return '—';
  return r >= 100 ? `${r.toFixed(0)}×` : r >= 10 ? `${r.toFixed(1)}×` : `${r.toFixed(2)}×`;
}

const arrow = (d: Pick<MetricDef, 'better'>) => (d.better === 'higher' ? ' ↑' : d.better === 'lower' ? ' ↓' : '');
const unit = (d: MetricDef) => (d.unit ? ` (${d.unit})` : '');

/**
 * Syscalls, wake-ups and context switches per unit of work of each target with LB processes, with
 * the syscalls that make up most of it (issue 16: what an LB does around each packet).
 */
function syscallSection(r: ReportData): string[] {
  const rows: string[] = [];
  for (const m of r.options.measurements) {
    const per = m === 'tcp_cps' ? 'Conn' : m === 'tcp_bulk' ? null : 'Pkt';
    if (!per) continue;
    for (const t of r.options.targets) {
      const x = r.results[m]?.[t];
      if (!x || (!x[`syscallsPer${per}`] && !x[`wakeupsPer${per}`])) continue;
      const parts = Object.entries(x)
        .filter(([k]) => k.startsWith('sys_') && k.endsWith(`Per${per}`))
        .map(([k, s]) => [k.slice(4, -`Per${per}`.length), s.median] as const)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 5)
        .map(([n, v]) => `${n} ${fmt(v)}`);
      rows.push(
        `| ${MEASUREMENTS[m].title} | per ${per === 'Pkt' ? 'packet' : 'connection'} | ${t} | ${cell(x[`syscallsPer${per}`])} | ${parts.join(', ') || '—'} | ${cell(x[`wakeupsPer${per}`])} | ${cell(x[`switchesPer${per}`])} |`,
      );
    }
  }
  if (!rows.length) return [];
  return [
    '## Syscalls, wake-ups and context switches',
    '',
    "Of the LB processes' threads (direct and nftables have none): syscalls from `perf stat` on the syscall tracepoints over the whole generator run, wake-ups (voluntary context switches: a thread that went to sleep and was woken) and all context switches from `/proc/<pid>/task/*/status` over the active window. Per packet on the client's veth (request/response), per packet reaching the real servers (UDP flood), per connection the client opened (connections/s). Counts, not times: they do not depend on how loaded the machine is." +
      (r.options.uvsIo ? ` uvsd ran with \`dataplane.io: ${r.options.uvsIo}\`.` : '') +
      (r.options.uvsSteering ? ` uvsd ran with \`dataplane.steering: ${r.options.uvsSteering}\`.` : ''),
    '',
    '| Measurement | unit | target | syscalls ↓ | largest parts | wake-ups ↓ | context switches ↓ |',
    '|---|---|---|---:|---|---:|---:|',
    ...rows,
    '',
  ];
}

export function renderMarkdown(r: ReportData): string {
  const L: string[] = [];
  const T = r.options.targets;
  const M = r.options.measurements;
  const date = r.generatedAt.replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  L.push('# uvs benchmark report', '');
  L.push(
    `Generated ${date} by \`${r.command}\` — mode **${r.mode}**: ${r.options.rounds} round${r.options.rounds > 1 ? 's' : ''}, ${r.options.duration} s per run, targets interleaved in every round; the whole run took ${Math.round(r.wallSeconds)} s.`,
    `Machine: ${r.machine.cpuModel}, ${r.machine.nproc} CPUs, ${r.machine.memGiB} GiB, Linux ${r.machine.kernel}, Node.js ${r.machine.node}. uvs, HAProxy and nginx each ran with ${r.options.workers} worker thread(s)/process(es).`,
    '',
    "Every figure is the **median over rounds, with the min–max in parentheses**. ↑ higher is better, ↓ lower is better, — not measured (see the end). The generators are third-party tools (sockperf, wrk, iperf3, trafgen); generator, LB and real servers all share this machine's CPUs, so these are figures for *this* machine, not the LBs' ceilings. How each figure is made: [Method](#method) and `perf/README.md`.",
    '',
    '![results chart](report.svg)',
    '',
    '## Results',
    '',
  );
  if (!T.length) L.push('No comparison targets in this run.');
  else L.push(`| Measurement | Metric | ${T.join(' | ')} |`, `|---|---|${T.map(() => '---:').join('|')}|`);
  for (const m of T.length ? M : []) {
    const def = MEASUREMENTS[m];
    const byT = r.results[m] ?? {};
    let first = true;
    for (const d of def.metrics) {
      if (!T.some((t) => byT[t]?.[d.key])) continue;
      const name = first ? `**${def.title}** <br><sub>${def.tool}</sub>` : '';
      first = false;
      const label = d.headline ? `**${d.label}**${unit(d)}${arrow(d)}` : `${d.label}${unit(d)}${arrow(d)}`;
      L.push(`| ${name} | ${label} | ${T.map((t) => cell(byT[t]?.[d.key])).join(' | ')} |`);
    }
  }
  if (Object.keys(r.lbRssMb).length) {
    L.push(`| **LB memory** | RSS after the runs (MB; nginx: master + workers summed) | ${T.map((t) => cell(r.lbRssMb[t])).join(' | ')} |`);
  }
  L.push('');

  // Ratios
  const peers = T.filter((t) => t !== 'uvs');
  if (T.includes('uvs') && peers.length) {
    L.push(
      '## Ratios',
      '',
      '### uvs ÷ each peer',
      '',
      "Medians divided. For ↑ metrics above 1× means uvs is ahead; for ↓ metrics (latency, CPU) below 1× means uvs is ahead. — where the peer's figure was zero in some round (within the noise: no ratio can be made of it).",
      '',
    );
    L.push(`| Measurement | Metric | ${peers.map((p) => `uvs ÷ ${p}`).join(' | ')} |`, `|---|---|${peers.map(() => '---:').join('|')}|`);
    for (const m of M) {
      for (const d of MEASUREMENTS[m].metrics.filter((x) => x.headline)) {
        const row = peers.map((p) => ratio(r.ratios.uvsVs[m]?.[p]?.[d.key]));
        if (row.every((x) => x === '—')) continue;
        L.push(`| ${MEASUREMENTS[m].title} | ${d.label}${arrow(d)} | ${row.join(' | ')} |`);
      }
    }
    L.push('');
  }
  if (T.includes('uvs') && T.includes('ctun')) {
    // Issue 8's CPU goal: LB CPU per packet within 2× of the minimal C TUN forwarder.
    const rows: string[] = [];
    for (const m of ['udp_pps', 'udp_rr', 'tcp_rr'] as const) {
      if (!M.includes(m)) continue;
      const u = r.results[m]?.uvs;
      const c = r.results[m]?.ctun;
      for (const [k, what] of [
        ['lbCpuNsPerPkt', 'LB CPU (process + extra softirq)'],
        ['lbProcNsPerPkt', 'LB process only'],
      ] as const) {
        const q = r.ratios.uvsVs[m]?.ctun?.[k];
        if (!u?.[k] && !c?.[k]) continue;
        const verdict =
          q === undefined
            ? "— (no ratio: ctun's figure was 0 in some round)"
            : q <= 2
              ? `${ratio(q)} — within 2×`
              : `${ratio(q)} — not within 2×`;
        rows.push(`| ${MEASUREMENTS[m].title} | ${what} | ${cell(u?.[k])} | ${cell(c?.[k])} | ${verdict} |`);
      }
    }
    if (rows.length) {
      L.push(
        '### uvs against the C TUN forwarder: CPU per packet',
        '',
        "`ctun` (perf/peers/ctun.c) is the minimal TUN-based forwarder: stateless NAT in C, one packet per 1500-byte read() and write(). The goal (issue 8) is uvs's LB CPU per packet within 2× of it.",
        '',
        '| Measurement | CPU per packet (ns) ↓ | uvs | ctun | uvs ÷ ctun |',
        '|---|---|---:|---:|---|',
        ...rows,
        '',
      );
    }
  }
  L.push(...syscallSection(r));

  const others = T.filter((t) => t !== 'direct');
  if (T.includes('direct') && others.length) {
    L.push(
      '### Each target ÷ direct',
      '',
      "`direct` is the client talking to the real server itself, routed by the LB node's kernel with nothing else in the path: the physical limit of the lab's path. LB CPU figures have no ratio to `direct` (its LB CPU is zero by definition).",
      '',
    );
    L.push(
      `| Measurement | Metric | ${others.map((p) => `${p} ÷ direct`).join(' | ')} |`,
      `|---|---|${others.map(() => '---:').join('|')}|`,
    );
    for (const m of M) {
      for (const d of MEASUREMENTS[m].metrics.filter((x) => x.headline && !x.key.startsWith('lbCpu'))) {
        const row = others.map((p) => ratio(r.ratios.vsDirect[m]?.[p]?.[d.key]));
        if (row.every((x) => x === '—')) continue;
        L.push(`| ${MEASUREMENTS[m].title} | ${d.label}${arrow(d)} | ${row.join(' | ')} |`);
      }
    }
    L.push('');
  }

  // Scaling
  if (r.scaling.runs.length) {
    L.push(
      '## uvs alone: workers, concurrent flows, table size, memory',
      '',
      "UDP, 64-byte payloads, to a uvs UDP service balanced rr over the three real servers: trafgen writes N flows (source ports cycling over N values) as fast as one CPU can from the client's veth (the main table's sockperf flood is one flow from one socket, at the pace of the socket API). Packets/s = datagrams that reached the real servers. LB CPU = uvsd's own CPU time (all threads) per forwarded packet.",
      '',
    );
    const row = (x: ScalingRun) =>
      `| ${x.workers} | ${x.tableSize.toLocaleString('en-US')} | ${x.flows.toLocaleString('en-US')} | ${x.generator} | ${cell(x.metrics.pps)} | ${cell(x.metrics.sentPps)} | ${cell(x.metrics.lossPct)} | ${cell(x.metrics.lbProcNsPerPkt)} | ${cell(x.metrics.tableEntries)} | ${cell(x.metrics.rssMb)} |`;
    const head = [
      '| workers | tableSize | flows | generator | packets/s at real servers ↑ | packets/s sent | lost (%) ↓ | uvsd CPU ns/packet ↓ | table entries after | uvsd RSS after (MB) |',
      '|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|',
    ];
    for (const [g, title] of [
      ['workers', 'Worker threads'],
      ['flows', 'Concurrent flows'],
      ['table', 'Connection-table size'],
    ] as const) {
      const runs = r.scaling.runs.filter((x) => x.group === g);
      if (!runs.length) continue;
      L.push(`### ${title}`, '', ...head, ...runs.map(row), '');
    }
    if (r.scaling.memory.length) {
      L.push(
        '### Memory (uvsd RSS)',
        '',
        '| workers | tableSize | RSS idle, after start (MB) | RSS after its runs (MB) | peak RSS, VmHWM (MB) |',
        '|---:|---:|---:|---:|---:|',
      );
      for (const x of r.scaling.memory)
        L.push(
          `| ${x.workers} | ${x.tableSize.toLocaleString('en-US')} | ${cell(x.rssIdleMb)} | ${cell(x.rssAfterMb)} | ${cell(x.hwmMb)} |`,
        );
      L.push('');
    }
  }

  L.push(...renderFailures(r.failures));
  L.push(
    '## Machine',
    '',
    '| | |',
    '|---|---|',
    ...Object.entries(r.machine).map(([k, v]) => `| ${k} | ${String(v).replace(/\|/g, '\\|')} |`),
    ...Object.entries(r.tools).map(([k, v]) => `| ${k} | ${v.replace(/\|/g, '\\|')} |`),
    '',
    '## Method',
    '',
    ...r.method.map((x) => `- ${x}`),
    '',
  );
  L.push('## Not measured, and errors', '');
  if (!r.notMeasured.length && !r.errors.length) L.push('Everything selected was measured in every round.');
  for (const n of r.notMeasured) L.push(`- **${n.target} / ${n.measurement}**: not measured — ${n.reason}`);
  for (const e of r.errors) L.push(`- round ${e.round}, **${e.target} / ${e.measurement}** failed: ${e.error.replace(/\n/g, ' ')}`);
  L.push('');
  return L.join('\n');
}

function renderFailures(f: FailureFigures): string[] {
  const L: string[] = [];
  if (!f.scenarios) return ['## Failure figures — not measured in this run', '', `> ${f.note}`, ''];
  L.push(
    '## Failure figures',
    '',
    `With real clients in the labs of the reliability tests (lab/lab.ts, lab/failover-lab.ts), ${f.rounds} round${f.rounds === 1 ? '' : 's'}; every figure is the median over rounds with the min–max in parentheses. ${f.note}`,
    '',
    '| Scenario | Figure | value |',
    '|---|---|---:|',
  );
  for (const s of f.scenarios) {
    s.figures.forEach((x, i) => {
      const name = i === 0 ? `**${s.title}**` : '';
      L.push(`| ${name} | ${x.label}${x.unit ? ` (${x.unit})` : ''}${arrow(x)} | ${cell(x.value)} |`);
    });
  }
  L.push('');
  for (const s of f.scenarios) {
    L.push(`- **${s.title}.** ${s.how}`);
    for (const n of s.notes) L.push(`  - ${n}`);
  }
  L.push('');
  return L;
}

// ── SVG ──────────────────────────────────────────────────────────────────────────────────────
export const TARGET_COLORS: Record<string, string> = {
  direct: '#7f7f7f',
  uvs: '#d62728',
  ctun: '#ff7f0e',
  nftables: '#1f77b4',
  haproxy: '#2ca02c',
  nginx: '#9467bd',
};
const SERIES_COLORS = ['#d62728', '#ff9896', '#1f77b4', '#aec7e8'];

interface Series {
  name: string;
  color?: string;
  values: (Summary | null | undefined)[];
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function niceMax(v: number): number {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function panel(
  x: number,
  y: number,
  w: number,
  h: number,
  title: string,
  unitLabel: string,
  cats: string[],
  series: Series[],
  colorByCat: boolean,
  log = false,
): string {
  const out: string[] = [];
  const padL = 52;
  const padR = 8;
  const padT = 34;
  const padB = 34;
  const pw = w - padL - padR;
  const ph = h - padT - padB;
  const all = series.flatMap((s) => s.values.flatMap((v) => (v ? [v.min, v.median, v.max] : [])));
  const top = Math.max(0, ...all);
  let Y: (v: number) => number;
  let ticks: number[];
  if (log) {
    const lo = 10 ** Math.floor(Math.log10(Math.max(1e-9, Math.min(...all.filter((v) => v > 0), top || 1))));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(lo * 10, top * 1.05)));
    const span = Math.log10(hi) - Math.log10(lo);
    Y = (v: number) => y + padT + ph - (ph * (Math.log10(Math.max(v, lo)) - Math.log10(lo))) / span;
    ticks = [];
    for (let d = lo; d <= hi * 1.0001; d *= 10) ticks.push(d);
  } else {
    const ymax = niceMax(top * 1.08);
    Y = (v: number) => y + padT + ph - (ph * v) / ymax;
    ticks = [0, 1, 2, 3, 4].map((i) => (ymax * i) / 4);
  }
  const base = Y(log ? ticks[0]! : 0);
  out.push(`<g>`);
  out.push(`<rect x="${x + 0.5}" y="${y + 0.5}" width="${w - 1}" height="${h - 1}" fill="#fff" stroke="#ddd"/>`);
  out.push(`<text x="${x + 8}" y="${y + 16}" font-size="12.5" font-weight="bold">${esc(title)}</text>`);
  out.push(`<text x="${x + 8}" y="${y + 29}" font-size="10" fill="#666">${esc(unitLabel)}${log ? ' — log scale' : ''}</text>`);
  ticks.forEach((v, i) => {
    const yy = Y(v);
    out.push(
      `<line x1="${x + padL}" x2="${x + padL + pw}" y1="${yy.toFixed(1)}" y2="${yy.toFixed(1)}" stroke="${i === 0 ? '#999' : '#eee'}"/>`,
    );
    out.push(`<text x="${x + padL - 4}" y="${(yy + 3).toFixed(1)}" font-size="9.5" text-anchor="end" fill="#555">${esc(fmt(v))}</text>`);
  });
  const gw = pw / Math.max(1, cats.length);
  const bw = Math.min(34, (gw * 0.74) / Math.max(1, series.length));
  cats.forEach((c, ci) => {
    const gx = x + padL + gw * ci + (gw - bw * series.length) / 2;
    series.forEach((s, si) => {
      const v = s.values[ci];
      const bx = gx + si * bw;
      const color = colorByCat ? (TARGET_COLORS[c] ?? '#888') : (s.color ?? SERIES_COLORS[si % SERIES_COLORS.length]!);
      if (!v) {
        out.push(
          `<text x="${(bx + bw / 2).toFixed(1)}" y="${(base - 4).toFixed(1)}" font-size="9" text-anchor="middle" fill="#999">${si === 0 || colorByCat ? 'n/a' : ''}</text>`,
        );
        return;
      }
      const yTop = Y(v.median);
      out.push(
        `<rect x="${bx.toFixed(1)}" y="${yTop.toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${Math.max(0, base - yTop).toFixed(1)}" fill="${color}"><title>${esc(`${c} ${s.name}: ${fmt(v.median)} (${fmt(v.min)}–${fmt(v.max)})`)}</title></rect>`,
      );
      if (v.n > 1 && v.max > v.min) {
        const cx = bx + (bw - 2) / 2;
        out.push(
          `<line x1="${cx.toFixed(1)}" x2="${cx.toFixed(1)}" y1="${Y(v.min).toFixed(1)}" y2="${Y(v.max).toFixed(1)}" stroke="#222" stroke-width="1"/>`,
        );
        for (const yy of [Y(v.min), Y(v.max)])
          out.push(
            `<line x1="${(cx - 3).toFixed(1)}" x2="${(cx + 3).toFixed(1)}" y1="${yy.toFixed(1)}" y2="${yy.toFixed(1)}" stroke="#222"/>`,
          );
      }
      out.push(
        `<text x="${(bx + (bw - 2) / 2).toFixed(1)}" y="${(Math.min(yTop, Y(v.max)) - 3).toFixed(1)}" font-size="9" text-anchor="middle" fill="#222">${esc(fmt(v.median))}</text>`,
      );
    });
    out.push(
      `<text x="${(x + padL + gw * ci + gw / 2).toFixed(1)}" y="${(y + padT + ph + 14).toFixed(1)}" font-size="10" text-anchor="middle">${esc(c)}</text>`,
    );
  });
  if (series.length > 1) {
    let lx = x + w - padR;
    for (let si = series.length - 1; si >= 0; si--) {
      const s = series[si]!;
      const tw = 8 + s.name.length * 5.6;
      lx -= tw + 12;
      out.push(
        `<rect x="${lx.toFixed(1)}" y="${y + 8}" width="9" height="9" fill="${s.color ?? SERIES_COLORS[si % SERIES_COLORS.length]}"/>`,
      );
      out.push(`<text x="${(lx + 12).toFixed(1)}" y="${y + 16}" font-size="10">${esc(s.name)}</text>`);
    }
  }
  out.push('</g>');
  return out.join('\n');
}

export function renderSvg(r: ReportData): string {
  const T = r.options.targets;
  const get = (m: MeasurementName, k: string) => T.map((t) => r.results[m]?.[t]?.[k] ?? null);
  const panels: { title: string; unit: string; cats: string[]; series: Series[]; byCat: boolean; span?: number; log?: boolean }[] = [];
  const M = r.options.measurements;
  if (M.includes('udp_pps'))
    panels.push({
      title: 'UDP 64 B packets/s at real servers ↑',
      unit: 'packets/s, sockperf, 1 flow',
      cats: T,
      series: [{ name: 'pps', values: get('udp_pps', 'pps') }],
      byCat: true,
    });
  if (M.includes('tcp_cps'))
    panels.push({
      title: 'TCP connections/s ↑',
      unit: 'wrk, Connection: close',
      cats: T,
      series: [{ name: 'cps', values: get('tcp_cps', 'cps') }],
      byCat: true,
    });
  if (M.includes('tcp_bulk'))
    panels.push({
      title: 'Bulk TCP Gb/s ↑',
      unit: 'iperf3, 1 stream',
      cats: T,
      series: [{ name: 'Gb/s', values: get('tcp_bulk', 'gbps') }],
      byCat: true,
    });
  const latency = (m: 'udp_rr' | 'tcp_rr') => {
    if (!M.includes(m)) return;
    panels.push({
      title: `${m === 'udp_rr' ? 'UDP' : 'TCP'} request/response round trip ↓`,
      unit: 'µs, sockperf ping-pong, 64 B',
      cats: T,
      series: [
        { name: 'p50', color: '#4c72b0', values: get(m, 'p50Us') },
        { name: 'p99', color: '#dd8452', values: get(m, 'p99Us') },
        { name: 'p99.9', color: '#c44e52', values: get(m, 'p999Us') },
      ],
      byCat: false,
      span: 2,
      log: true,
    });
  };
  latency('udp_rr');
  if (M.includes('udp_pps') || M.includes('tcp_rr')) {
    const s: Series[] = [];
    if (M.includes('udp_pps')) s.push({ name: 'UDP flood', color: '#4c72b0', values: get('udp_pps', 'lbCpuNsPerPkt') });
    if (M.includes('tcp_rr')) s.push({ name: 'TCP RR', color: '#dd8452', values: get('tcp_rr', 'lbCpuNsPerPkt') });
    panels.push({ title: 'LB CPU per packet ↓', unit: 'ns, LB processes + softirq above direct', cats: T, series: s, byCat: false });
  }
  latency('tcp_rr');
  const runs = r.scaling.runs;
  const flows = runs.filter((x) => x.group === 'flows');
  if (flows.length)
    panels.push({
      title: 'uvs: concurrent UDP flows ↑',
      unit: 'packets/s at real servers, trafgen',
      cats: flows.map((x) => `${x.flows.toLocaleString('en-US')}`),
      series: [{ name: 'pps', color: '#d62728', values: flows.map((x) => x.metrics.pps) }],
      byCat: false,
    });
  const workers = runs.filter((x) => x.group === 'workers');
  if (workers.length) {
    const ws = [...new Set(workers.map((x) => x.workers))].sort((a, b) => a - b);
    const fl = [...new Set(workers.map((x) => x.flows))].sort((a, b) => a - b);
    panels.push({
      title: 'uvs: worker threads ↑',
      unit: 'packets/s at real servers',
      cats: ws.map((w) => `${w} worker${w > 1 ? 's' : ''}`),
      series: fl.map((f, i) => ({
        name: `${f.toLocaleString('en-US')} flow${f > 1 ? 's' : ''}`,
        color: SERIES_COLORS[(i * 2) % SERIES_COLORS.length],
        values: ws.map((w) => workers.find((x) => x.workers === w && x.flows === f)?.metrics.pps ?? null),
      })),
      byCat: false,
    });
  }
  const tables = runs.filter((x) => x.group === 'table');
  if (tables.length) {
    const mem = r.scaling.memory;
    panels.push({
      title: 'uvs: table size ↑ / RSS',
      unit: 'packets/s (k) and uvsd RSS (MB)',
      cats: tables.map((x) =>
        x.tableSize >= 1 << 20 ? `${x.tableSize / (1 << 20)}Mi` : x.tableSize >= 1024 ? `${x.tableSize / 1024}Ki` : String(x.tableSize),
      ),
      series: [
        { name: 'kpps', color: '#d62728', values: tables.map((x) => scale(x.metrics.pps, 1e-3)) },
        {
          name: 'RSS MB',
          color: '#8c8c8c',
          values: tables.map((x) => mem.find((m) => m.tableSize === x.tableSize && m.workers === x.workers)?.rssAfterMb ?? null),
        },
      ],
      byCat: false,
    });
  }
  const cols = 3;
  const pw = 340;
  const phh = 250;
  const gap = 10;
  // Flow layout: a panel spans 1 or 2 columns; a row wraps when the next one does not fit.
  const place: { col: number; row: number }[] = [];
  let col = 0;
  let row = 0;
  for (const p of panels) {
    const span = p.span ?? 1;
    if (col + span > cols) {
      row++;
      col = 0;
    }
    place.push({ col, row });
    col += span;
  }
  const rows = row + 1;
  const W = cols * pw + (cols + 1) * gap;
  const H = 44 + rows * phh + (rows + 1) * gap + 18;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif">`,
  );
  out.push(`<rect width="${W}" height="${H}" fill="#f7f7f7"/>`);
  out.push(
    `<text x="${gap}" y="24" font-size="16" font-weight="bold">uvs benchmark — ${esc(r.generatedAt.slice(0, 10))}, ${esc(String(r.machine.nproc))} CPUs, ${esc(String(r.machine.cpuModel))}, Linux ${esc(String(r.machine.kernel))}</text>`,
  );
  out.push(
    `<text x="${gap}" y="40" font-size="11" fill="#555">median of ${r.options.rounds} round(s), ${r.options.duration} s each; whiskers: min–max over rounds; ${esc(T.join(', '))}</text>`,
  );
  panels.forEach((p, i) => {
    const span = p.span ?? 1;
    const cx = gap + place[i]!.col * (pw + gap);
    const cy = 44 + gap + place[i]!.row * (phh + gap);
    out.push(panel(cx, cy, span * pw + (span - 1) * gap, phh, p.title, p.unit, p.cats, p.series, p.byCat, p.log ?? false));
  });
  out.push(
    `<text x="${gap}" y="${H - 8}" font-size="10" fill="#777">Failure figures: ${r.failures.scenarios ? 'in REPORT.md and report.json' : 'not measured in this run (--failures)'}. Generated by uvs perf (perf/run.ts).</text>`,
  );
  out.push('</svg>');
  return out.join('\n') + '\n';
}

function scale(s: Summary | undefined | null, k: number): Summary | null {
  if (!s) return null;
  return { median: s.median * k, min: s.min * k, max: s.max * k, n: s.n, values: s.values.map((v) => v * k) };
}
