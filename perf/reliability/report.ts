/**
 * The pure part of the reliability run: what the clients printed → figures, and figures →
 * RELIABILITY.md. No I/O, no clocks: test/unit/reliability-report.test.ts checks it on data.
 */
import { GEN_KIND_NAMES, GEN_REFUSES } from '../../conntrack/layout';

/** One connect-probe attempt (perf/reliability/client.ts): start, connect ms, answer ms, error. */
export interface Attempt {
  t: number;
  c: number | null;
  d: number | null;
  e: string | null;
}

/** One api-probe sample: sent at, latency (null = failed), error, time taken either way. */
export interface ApiSample {
  t: number;
  ms: number | null;
  e: string | null;
  took: number;
}

export type Value = number | string | boolean | null;

export interface Figure {
  label: string;
  value: Value;
  unit?: string;
  /** What a reliable load balancer shows, e.g. "0", "≤ 100 ms"; with ok, whether this run did. */
  expect?: string;
  ok?: boolean | null;
}

export interface Table {
  title: string;
  columns: string[];
  rows: Value[][];
}

export interface ScenarioResult {
  key: string;
  title: string;
  how: string;
  figures: Figure[];
  tables: Table[];
  notes: string[];
  seconds: number;
  /** Set when the scenario could not finish: what it measured until then is still shown. */
  error?: string;
}

export interface ReliabilityReport {
  tool: string;
  generatedAt: string;
  mode: 'full' | 'quick' | 'custom';
  command: string;
  wallSeconds: number;
  machine: Record<string, Value>;
  method: string[];
  scenarios: ScenarioResult[];
  leftBehind: string[];
}

/** Parses JSON lines, skipping anything that is not a JSON object. */
export function parseJsonLines<T>(text: string): T[] {
  const outp: T[] = [];
  for (const l of text.split('\n')) {
    const s = l.trim();
    if (!s.startsWith('{')) continue;
    try {
      outp.push(JSON.parse(s) as T);
    } catch {
      /* a cut line */
    }
  }
  return outp;
}

/** Nearest-rank percentile (p in 0..100) of the finite values; null when there are none. */
export function percentile(values: number[], p: number): number | null {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const rank = Math.max(1, Math.ceil((p / 100) * v.length));
  return v[Math.min(rank, v.length) - 1]!;
}

export interface LatencyStats {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

export function latencyStats(values: number[]): LatencyStats {
  const v = values.filter((x) => Number.isFinite(x));
  return { n: v.length, p50: percentile(v, 50), p99: percentile(v, 99), max: v.length ? Math.max(...v) : null };
}

export interface AttemptStats {
  attempts: number;
  ok: number;
  /** ok / attempts, 0..1; null without attempts. */
  okRate: number | null;
  connectP50: number | null;
  connectP99: number | null;
  /** Connect time of the failed ones counted as the timeout: what a user waited. */
  errors: Record<string, number>;
}

/** Attempts that started in [from, to): how many got an answer, and their connect times. */
export function attemptStats(all: Attempt[], from: number, to: number): AttemptStats {
  const a = all.filter((x) => x.t >= from && x.t < to);
  const ok = a.filter((x) => x.d !== null && x.e === null);
  const errors: Record<string, number> = {};
  for (const x of a) if (x.e !== null) errors[x.e] = (errors[x.e] ?? 0) + 1;
  const c = ok.map((x) => x.c!).filter((x) => x !== null);
  return {
    attempts: a.length,
    ok: ok.length,
    okRate: a.length ? ok.length / a.length : null,
    connectP50: percentile(c, 50),
    connectP99: percentile(c, 99),
    errors,
  };
}

/**
 * Recovery after an attack stopped at stopAt: from stopAt to the start of the first attempt after
 * which every attempt (that started after stopAt) was answered with a connect time ≤ slowMs. 0 when
 * no attempt after stopAt was bad; null when the last attempt was still bad (not recovered within
 * the observation), or there were none.
 */
export function recoveryMs(all: Attempt[], stopAt: number, slowMs: number): number | null {
  const a = all.filter((x) => x.t >= stopAt).sort((x, y) => x.t - y.t);
  if (a.length === 0) return null;
  const good = (x: Attempt) => x.d !== null && x.e === null && x.c !== null && x.c <= slowMs;
  let lastBad = -1;
  a.forEach((x, i) => {
    if (!good(x)) lastBad = i;
  });
  if (lastBad === -1) return 0;
  if (lastBad === a.length - 1) return null;
  return a[lastBad + 1]!.t - stopAt;
}

/** True once the attempts after `since` end with `n` good ones in a row (the watcher's stop rule). */
export function recovered(all: Attempt[], since: number, slowMs: number, n: number): boolean {
  const a = all.filter((x) => x.t >= since).sort((x, y) => x.t - y.t);
  if (a.length < n) return false;
  return a.slice(-n).every((x) => x.d !== null && x.e === null && x.c !== null && x.c <= slowMs);
}

/** The packet counters of GET /v1/stats this run reads (others are kept as they come). */
export interface StatsLike {
  packets: Record<string, number>;
  drops: Record<string, number>;
  /** Generated packets by kind and result: { reset: { sent, … }, … }. */
  generated?: Record<string, Record<string, number>>;
  parked?: number;
  parkFull?: number;
  /** SYN proxy: client packets held while their server's handshake was pending (GET /v1/stats synProxyHeld). */
  synProxyHeld?: number;
  table?: { entries: number; capacity: number };
  workers?: { restarts: number }[];
}

export interface Balance {
  received: number;
  counted_drops: number;
  parked: number;
  park_full: number;
  /** SYN proxy: held while the server's handshake was pending; their replay is written as extra. */
  held: number;
  /** Packets the dataplane generated, by kind (`generated.<kind>.sent`), and their sum. */
  generated: Record<string, number>;
  generated_total: number;
  /** Of those, answers to packets that are no drop (echo requests: turned around in place). */
  answered_in_place: number;
  /** Packets written to the device: forwarded, generated, segments beyond one. */
  written: number;
  write_errors: number;
  /** Written beyond one per packet handled (packets.txExtra: GSO segments, PROXY header segments). */
  extra: number;
  /** Forwarded, counted on the read side: received − counted drops − parked − park full − held − answered in place. */
  forwarded_read: number;
  /** Forwarded, counted on the write side: written + write errors − generated − extra. */
  forwarded_written: number;
  /** forwarded_read − forwarded_written: 0 when every packet is counted once on each side. */
  difference: number;
}

/**
 * Two-sided accounting. Every packet a worker reads ends as exactly one of: a counted drop (its
 * reason), parked (or refused by a full park ring, counted), held by the SYN proxy, forwarded, or
 * answered in place without a drop (an echo request, a SYN answered with a cookie). Every packet
 * a worker writes (or fails to write: a write error) is one of: a forwarded packet, a generated
 * one (RST, unreachable, echo reply, too big, cookie SYN-ACK — `generated.*.sent`; a refusal that
 * is answered is a drop on the read side and a generated packet on the write side), or one beyond
 * the first for a packet (packets.txExtra: segments, PROXY header segments, held packets replayed
 * behind the SYN proxy's ACK). So
 *
 *   received = counted drops + parked + park full + held + forwarded + answered in place
 *   written + write errors = forwarded + generated + extra
 *
 * and the two counts of forwarded must agree (difference 0): a packet read and never counted, or
 * counted twice, or one written without a counter (a loop), shows there. `refuses` says per kind
 * whether the packet answered is also a drop (conntrack/layout.ts GEN_REFUSES).
 */
export function balance(before: StatsLike, after: StatsLike, refuses: Record<string, boolean> = GEN_REFUSES_BY_NAME): Balance {
  const d = (a: number | undefined, b: number | undefined) => (b ?? 0) - (a ?? 0);
  let drops = 0;
  for (const k of new Set([...Object.keys(before.drops), ...Object.keys(after.drops)])) drops += d(before.drops[k], after.drops[k]);
  const generated: Record<string, number> = {};
  let generatedTotal = 0;
  let inPlace = 0;
  for (const k of new Set([...Object.keys(before.generated ?? {}), ...Object.keys(after.generated ?? {})])) {
    const n = d(before.generated?.[k]?.sent, after.generated?.[k]?.sent);
    generated[k] = n;
    generatedTotal += n;
    if (refuses[k] === false) inPlace += n;
  }
  const b: Balance = {
    received: d(before.packets.rxPackets, after.packets.rxPackets),
    counted_drops: drops,
    parked: d(before.parked, after.parked),
    park_full: d(before.parkFull, after.parkFull),
    held: d(before.synProxyHeld, after.synProxyHeld),
    generated,
    generated_total: generatedTotal,
    answered_in_place: inPlace,
    written: d(before.packets.txPackets, after.packets.txPackets),
    write_errors: d(before.packets.txErrors, after.packets.txErrors),
    extra: d(before.packets.txExtra, after.packets.txExtra),
    forwarded_read: 0,
    forwarded_written: 0,
    difference: 0,
  };
  b.forwarded_read = b.received - b.counted_drops - b.parked - b.park_full - b.held - b.answered_in_place;
  b.forwarded_written = b.written + b.write_errors - b.generated_total - b.extra;
  b.difference = b.forwarded_read - b.forwarded_written;
  return b;
}

/** conntrack/layout.ts GEN_REFUSES by kind name. */
export const GEN_REFUSES_BY_NAME: Record<string, boolean> = Object.fromEntries(GEN_KIND_NAMES.map((k, i) => [k, GEN_REFUSES[i]!]));

/** One request of lab/tools.ts `load` (perf/failures.ts LoadRecord): the times it moved. */
export interface LoadProgress {
  start: number;
  end: number;
  connected?: number | null;
  answered?: number | null;
}

/**
 * A request that moved (started, connected, answered) this close before a node died was on its
 * normal course then; one quiet for longer had lost a packet before: the minimum TCP
 * retransmission timeout.
 */
export const IN_FLIGHT_MS = 200;

/** The last moment a load request made progress: its start, its connect or its answer's headers. */
export function lastMove(x: LoadProgress): number {
  return Math.max(x.start, x.connected ?? 0, x.answered ?? 0);
}

/**
 * Whether a request was in flight at time t and on its normal course until then: started before,
 * not finished, and moved within IN_FLIGHT_MS before it. Its fate is t's (a failover), not that of
 * the phase it started in.
 */
export function inFlightAt(x: LoadProgress, t: number): boolean {
  return x.start < t && x.end > t && lastMove(x) >= t - IN_FLIGHT_MS;
}

/** Numeric leaves of a JSON value as "a.b.c" → number. */
export function flatten(v: unknown, prefix = '', outp: Record<string, number> = {}): Record<string, number> {
  if (typeof v === 'number') outp[prefix] = v;
  else if (typeof v === 'boolean') outp[prefix] = v ? 1 : 0;
  else if (Array.isArray(v)) v.forEach((x, i) => flatten(x, prefix ? `${prefix}.${i}` : String(i), outp));
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) flatten(x, prefix ? `${prefix}.${k}` : k, outp);
  return outp;
}

/** The numeric leaves that changed between two JSON values (after − before), zeros left out. */
export function numericDiff(before: unknown, after: unknown): Record<string, number> {
  const a = flatten(before);
  const b = flatten(after);
  const outp: Record<string, number> = {};
  for (const k of Object.keys(b)) {
    const x = b[k]! - (a[k] ?? 0);
    if (x !== 0) outp[k] = x;
  }
  return outp;
}

/**
 * Settings in a configuration document whose names belong to a SYN-flood / table defense
 * (IPVS's drop_entry, secure_tcp, amemthresh, a per-source half-open cap, …), as "path = value".
 * The run names the knobs the daemon it measured had, whatever they are called.
 */
export function defenseSettings(doc: unknown): string[] {
  const re = /defen[cs]e|drop_?entry|secure_?tcp|amemthresh|half_?open|syn_?flood|synFlood|perSource|chain/i;
  const outp: string[] = [];
  const walk = (v: unknown, path: string, inside: boolean) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k, x] of Object.entries(v)) walk(x, path ? `${path}.${k}` : k, inside || re.test(k));
    } else if (inside && path && !/^services\./.test(path)) outp.push(`${path} = ${JSON.stringify(v)}`);
  };
  walk(doc, '', false);
  return outp;
}

// ── rendering ─────────────────────────────────────────────────────────────────────────────
export function fmtValue(v: Value, unit?: string): string {
  if (v === null) return '—';
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v === 'string') return v;
  let s: string;
  if (!Number.isFinite(v)) s = String(v);
  else if (Number.isInteger(v)) s = Math.abs(v) >= 10000 ? v.toLocaleString('en-US') : String(v);
  else s = Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
  return unit ? (unit === '%' ? `${s} %` : `${s} ${unit}`) : s;
}

function cell(v: Value): string {
  return fmtValue(v).replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function mark(ok: boolean | null | undefined): string {
  return ok === true ? 'yes' : ok === false ? '**NO**' : '';
}

export function renderMarkdown(r: ReliabilityReport): string {
  const L: string[] = [];
  L.push('# uvs reliability run');
  L.push('');
  L.push(`Generated by \`${r.command}\` (perf/reliability/) on ${r.generatedAt}, mode **${r.mode}**, in ${Math.round(r.wallSeconds)} s.`);
  L.push(
    'Every figure below is from this one run. Regenerate with `npm run reliability` (as root, alone on the machine); `--quick` scales every count down for development and its figures are not the ones to quote.',
  );
  L.push('');
  const checks = r.scenarios.flatMap((s) => s.figures.filter((f) => f.ok !== undefined && f.ok !== null).map((f) => ({ s, f })));
  const failed = checks.filter((x) => x.f.ok === false);
  L.push('## Summary');
  L.push('');
  L.push('| scenario | checks met | time | |');
  L.push('|---|---|---|---|');
  for (const s of r.scenarios) {
    const c = s.figures.filter((f) => f.ok === true || f.ok === false);
    const ok = c.filter((f) => f.ok).length;
    L.push(
      `| [${s.title}](#${anchor(s.title)}) | ${c.length ? `${ok} of ${c.length}` : '—'} | ${Math.round(s.seconds)} s | ${s.error ? `did not finish: ${cell(s.error)}` : ''} |`,
    );
  }
  L.push('');
  if (failed.length) {
    L.push('Not met in this run:');
    L.push('');
    for (const { s, f } of failed) L.push(`- ${s.title}: ${f.label} — ${fmtValue(f.value, f.unit)} (expected ${f.expect ?? '?'})`);
    L.push('');
  }
  if (r.leftBehind.length) L.push(`**Namespaces left behind:** ${r.leftBehind.join(' ')}`, '');
  for (const s of r.scenarios) {
    L.push(`## ${s.title}`);
    L.push('');
    L.push(s.how);
    L.push('');
    if (s.error) L.push(`**Did not finish:** ${s.error}`, '');
    if (s.figures.length) {
      L.push('| figure | value | expected | met |');
      L.push('|---|---|---|---|');
      for (const f of s.figures)
        L.push(`| ${cell(f.label)} | ${cell(fmtValue(f.value, f.unit))} | ${f.expect ? cell(f.expect) : ''} | ${mark(f.ok)} |`);
      L.push('');
    }
    for (const t of s.tables) {
      L.push(`**${t.title}**`);
      L.push('');
      L.push(`| ${t.columns.join(' | ')} |`);
      L.push(`|${t.columns.map(() => '---').join('|')}|`);
      for (const row of t.rows) L.push(`| ${row.map(cell).join(' | ')} |`);
      L.push('');
    }
    if (s.notes.length) {
      for (const n of s.notes) L.push(`- ${n}`);
      L.push('');
    }
  }
  L.push('## Machine');
  L.push('');
  L.push('| | |');
  L.push('|---|---|');
  for (const [k, v] of Object.entries(r.machine)) L.push(`| ${k} | ${cell(v)} |`);
  L.push('');
  L.push('## Method');
  L.push('');
  for (const m of r.method) L.push(`- ${m}`);
  L.push('');
  return L.join('\n');
}

/** GitHub's heading anchor. */
export function anchor(title: string): string {
  return title
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}
