/**
 * The state file is untrusted input (issue 12, defect 11): every drain entry is checked as the
 * configuration is; bad ones are skipped with their index and reason, the rest restored.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateConfig } from '../../control/config';
import { validateStateDrains } from '../../control/state-file';

const cfg = validateConfig({ dataplane: { vipCidrs: ['10.96.0.0/24'] } });
const good = (port = 80, vip = '10.96.0.10') => ({
  service: `tcp ${vip}:${port}`,
  realServer: '10.0.0.1:8080',
  protocol: 'tcp',
  since: 1700000000000,
  deadline: null,
  serviceConfig: { protocol: 'tcp', address: vip, port, scheduler: 'rr' },
  realServerConfig: { address: '10.0.0.1', port: 8080, weight: 1 },
});

test('a state file of the wrong shape restores nothing and says why, without throwing', () => {
  for (const [doc, path] of [
    [[], ''],
    ['x', ''],
    [null, ''],
    [{ draining: {} }, 'draining'],
    [{ draining: 'all' }, 'draining'],
  ] as const) {
    const r = validateStateDrains(doc, cfg);
    assert.deepEqual(r.drains, []);
    assert.equal(r.skipped.length, 1, JSON.stringify(doc));
    assert.equal(r.skipped[0]!.path, path);
  }
  assert.deepEqual(validateStateDrains({ version: 1 }, cfg), { drains: [], skipped: [] }, 'no drain list: nothing to do');
});

test('each bad entry is skipped with its index and reason; good ones are kept', () => {
  const r = validateStateDrains(
    {
      draining: [
        good(80),
        null,
        { ...good(81), serviceConfig: { ...good(81).serviceConfig, address: '192.168.1.1' }, service: 'tcp 192.168.1.1:81' },
        { ...good(82), serviceConfig: good(83).serviceConfig },
        { ...good(84), realServerConfig: { address: '10.0.0.1', port: 8080, weight: 70000 } },
        { ...good(85), since: 'yesterday' },
        { ...good(86), protocol: 'icmp' },
        { ...good(87), realServer: '10.0.0.2:8080' },
        good(80),
        good(88),
      ],
    },
    cfg,
  );
  assert.deepEqual(
    r.drains.map((d) => d.service),
    ['tcp 10.96.0.10:80', 'tcp 10.96.0.10:88'],
  );
  const why = Object.fromEntries(r.skipped.map((s) => [s.path, s.reason]));
  assert.deepEqual(Object.keys(why), [
    'draining[1]',
    'draining[2]',
    'draining[3]',
    'draining[4]',
    'draining[5]',
    'draining[6]',
    'draining[7]',
    'draining[8]',
  ]);
  assert.match(why['draining[2]']!, /not inside dataplane.vipCidrs/);
  assert.match(why['draining[3]']!, /serviceConfig is tcp 10.96.0.10:83/);
  assert.match(why['draining[4]']!, /realServerConfig.weight: must be between 0 and 65535/);
  assert.match(why['draining[8]']!, /listed twice/);
  assert.equal(r.drains[0]!.serviceConfig.scheduler, 'rr', 'restored entries carry validated configurations (defaults filled)');
  assert.equal(r.drains[0]!.realServerConfig.forwarding, 'masq');
});
