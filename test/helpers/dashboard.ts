/**
 * What dashboards/uvs.json asks of uvsd's /metrics: for every PromQL expression (panel targets and
 * template-variable queries), the metric names it reads and the labels it relies on — `by (…)` and
 * `without (…)` lists, label matchers in selectors, `{{label}}` in legends and label_values()'s
 * label. `instance` and `job` are excluded: Prometheus adds them when it scrapes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const DASHBOARD_FILE = join(__dirname, '..', '..', '..', 'dashboards', 'uvs.json');
export const SCRAPE_LABELS = new Set(['instance', 'job']);

export interface DashQuery {
  /** Panel title and refId, or the variable name. */
  where: string;
  expr: string;
  metrics: string[];
  labels: string[];
}

// biome-ignore lint/suspicious/noExplicitAny: the dashboard is Grafana's JSON, walked as loosely as it is written
type Json = any;

export function loadDashboard(): Json {
  return JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8'));
}

/** Every panel, rows' nested panels included. */
export function allPanels(dash: Json): Json[] {
  return (dash.panels as Json[]).flatMap((p) => [p, ...((p.panels as Json[] | undefined) ?? [])]);
}

function labelsOf(expr: string, legend = ''): string[] {
  const out = new Set<string>();
  for (const m of expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) for (const l of m[1]!.split(',')) if (l.trim()) out.add(l.trim());
  for (const sel of expr.matchAll(/\{([^}]*)\}/g))
    for (const m of sel[1]!.matchAll(/([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"/g)) out.add(m[1]!);
  for (const m of legend.matchAll(/\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g)) out.add(m[1]!);
  const lv = /label_values\((?:[^,()]*(?:\{[^}]*\})?\s*,\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)/.exec(expr);
  if (lv) out.add(lv[1]!);
  return [...out].filter((l) => !SCRAPE_LABELS.has(l));
}

export function dashboardQueries(dash: Json): DashQuery[] {
  const out: DashQuery[] = [];
  const add = (where: string, expr: string, legend?: string) =>
    out.push({
      where,
      expr,
      metrics: [...new Set(expr.match(/\b(?:node_ipvs|uvs)_[A-Za-z0-9_]+/g) ?? [])],
      labels: labelsOf(expr, legend),
    });
  for (const p of allPanels(dash))
    for (const t of (p.targets as Json[] | undefined) ?? [])
      add(`${p.title} ${t.refId}`, t.expr as string, t.legendFormat as string | undefined);
  for (const v of dash.templating.list as Json[])
    if (v.type === 'query') add(`$${v.name}`, typeof v.query === 'string' ? v.query : (v.query.query as string));
  return out;
}

/** Prometheus text → metric name → label names seen on its samples (names without a sample are absent). */
export function parseMetrics(text: string): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+\S+/.exec(line);
    if (!m) continue;
    const labels = out.get(m[1]!) ?? new Set<string>();
    for (const l of (m[2] ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="/g)) labels.add(l[1]!);
    out.set(m[1]!, labels);
  }
  return out;
}
