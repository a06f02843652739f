/**
 * dashboards/uvs.json queries only what uvsd exports: a real uvsd in the namespace lab, with
 * services, real servers and a real redis-server (so the uvs_redis_* family exists), is scraped, and
 * every metric each dashboard expression reads must have samples carrying every label the
 * expression groups by, matches on or prints in its legend. Metrics the dashboard does not query
 * are not checked (other features add their own).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';
import { dashboardQueries, loadDashboard, parseMetrics } from '../helpers/dashboard';

const isRoot = process.getuid?.() === 0;
const hasRedis = (() => {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() !== '';
  } catch {
    return false;
  }
})();

describe('the Grafana dashboard against a live uvsd', {
  skip: !isRoot ? 'integration tests need root (network namespaces, TUN)' : !hasRedis ? 'redis-server missing' : false,
  timeout: 300_000,
}, () => {
  const lab = new Lab({ prefix: `uvg${process.pid % 100000}` });
  const scrape = () => lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);

  before(async () => {
    lab.up();
    await lab.waitServers();
    // Redis on the lb namespace's own loopback: private to this lab, gone with it.
    lab.spawn(lab.lbNs, 'redis-server', ['--port', '6379', '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']).unref();
    const services = [
      { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
      { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 5353 })) },
    ];
    await lab.startUvsd(lab.writeConfig(lab.config(services, { redis: { url: 'redis://127.0.0.1:6379', nodeId: 'dash' } })));
    const deadline = Date.now() + 60_000;
    while (!/^uvs_redis_connected 1$/m.test(safe(scrape))) {
      if (Date.now() > deadline) throw new Error('uvsd did not connect to Redis');
      await sleep(200);
    }
    // Some traffic, so the counters move (their samples exist at 0 already).
    lab.exec(lab.clientNs, 'sh', ['-c', `for i in 1 2 3 4 5 6; do curl -s -m 5 http://${LAB_VIP}/ >/dev/null; done`], 60_000);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('every metric the dashboard queries has samples with every label the query uses', () => {
    const live = parseMetrics(scrape());
    const missing: string[] = [];
    const queries = dashboardQueries(loadDashboard());
    assert.ok(queries.length >= 30);
    for (const q of queries) {
      for (const m of q.metrics) {
        const labels = live.get(m);
        if (!labels) {
          missing.push(`${q.where}: no samples of ${m}`);
          continue;
        }
        for (const l of q.labels) if (!labels.has(l)) missing.push(`${q.where}: ${m} has no label ${l}`);
      }
    }
    assert.deepEqual(missing, []);
  });

  test('the check can fail: a metric or label uvsd does not export is reported', () => {
    const live = parseMetrics(scrape());
    assert.equal(live.get('uvs_no_such_metric_total'), undefined);
    assert.equal(live.get('node_ipvs_backend_weight')?.has('no_such_label'), false);
    assert.deepEqual([...(live.get('uvs_drops_total') ?? [])], ['reason']);
  });
});

function safe(f: () => string): string {
  try {
    return f();
  } catch {
    return '';
  }
}
