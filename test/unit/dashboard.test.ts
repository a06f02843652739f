/**
 * dashboards/uvs.json is importable as is (Grafana's export form: a DS_PROMETHEUS input that every
 * query uses, a schemaVersion, unique panel ids, panels inside the 24-column grid without
 * overlap) and its PromQL is sound for the metric types: rate() and increase() only on counters.
 * That every metric and label it queries exists in a live uvsd's /metrics is
 * test/integration/dashboard.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { allPanels, dashboardQueries, loadDashboard } from '../helpers/dashboard';

const dash = loadDashboard();
const metricsSource = readFileSync(join(__dirname, '..', '..', '..', 'control', 'metrics.ts'), 'utf8');

test('the dashboard has the export form Grafana imports: a Prometheus input, schemaVersion, no fixed id', () => {
  assert.deepEqual(
    dash.__inputs.map((i: { name: string; type: string; pluginId: string }) => [i.name, i.type, i.pluginId]),
    [['DS_PROMETHEUS', 'datasource', 'prometheus']],
  );
  assert.ok(Number.isInteger(dash.schemaVersion) && dash.schemaVersion >= 36, `schemaVersion ${dash.schemaVersion}`);
  assert.equal(dash.id, null, 'an imported dashboard gets its id from Grafana');
  assert.equal(typeof dash.uid, 'string');
  assert.equal(typeof dash.title, 'string');
});

test('every panel, query and variable uses the ${DS_PROMETHEUS} input; ids are unique; the grid has no overlap', () => {
  const panels = allPanels(dash);
  const ids = panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'unique panel ids');
  const cells = new Set<string>();
  for (const p of panels) {
    const g = p.gridPos;
    assert.ok(g.x >= 0 && g.w > 0 && g.x + g.w <= 24, `${p.title}: inside the 24 columns`);
    for (let x = g.x; x < g.x + g.w; x++) {
      for (let y = g.y; y < g.y + g.h; y++) {
        assert.ok(!cells.has(`${x},${y}`), `${p.title} overlaps another panel at ${x},${y}`);
        cells.add(`${x},${y}`);
      }
    }
    if (p.type === 'row') continue;
    assert.equal(p.datasource.uid, '${DS_PROMETHEUS}', p.title);
    assert.ok(p.targets.length > 0, `${p.title} has queries`);
    for (const t of p.targets) assert.equal(t.datasource.uid, '${DS_PROMETHEUS}', `${p.title} ${t.refId}`);
  }
  for (const v of dash.templating.list) assert.equal(v.datasource.uid, '${DS_PROMETHEUS}', v.name);
});

test('every query reads at least one uvs metric, every one of them registered by control/metrics.ts', () => {
  const qs = dashboardQueries(dash);
  assert.ok(qs.length >= 30);
  for (const q of qs) {
    assert.ok(q.metrics.length > 0, `${q.where}: ${q.expr}`);
    for (const m of q.metrics) assert.ok(metricsSource.includes(`'${m}'`), `${q.where}: ${m} is not a metric uvsd registers`);
  }
});

test('rate() and increase() are applied to counters (_total) only, gauges are read as they are', () => {
  for (const q of dashboardQueries(dash)) {
    for (const m of q.expr.matchAll(/\b(rate|increase|irate)\(\s*([A-Za-z0-9_]+)/g))
      assert.match(m[2]!, /_total$/, `${q.where}: ${m[1]}(${m[2]})`);
    for (const m of q.metrics) if (!m.endsWith('_total')) assert.doesNotMatch(q.expr, new RegExp(`(rate|increase)\\(\\s*${m}\\b`), q.where);
  }
});

test('the dashboard covers what an IPVS operator watches', () => {
  const all = dashboardQueries(dash).flatMap((q) => q.metrics);
  for (const m of [
    'node_ipvs_connections_total',
    'uvs_service_packets_total',
    'uvs_service_bytes_total',
    'uvs_backend_packets_total',
    'uvs_backend_bytes_total',
    'node_ipvs_backend_connections_active',
    'node_ipvs_backend_connections_inactive',
    'uvs_drain_list_size',
    'uvs_drains_total',
    'uvs_redis_sync_lag_seconds',
    'uvs_adoptions_total',
    'uvs_drops_total',
    'uvs_worker_packets_total',
    'uvs_connection_table_entries',
    'uvs_connection_table_capacity',
  ]) {
    assert.ok(all.includes(m), m);
  }
});
