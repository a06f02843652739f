/**
 * Node maintenance's configuration and command line: the announcement table is validated like
 * the reply table, and `uvsadm --maintenance` takes exactly on, off, status or wait.
 * (The behaviour — routes withdrawn, BGP next hop gone, flows adopted — is in
 * test/integration/ecmp.test.ts.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateConfig } from '../../control/config';
import { UvsError } from '../../control/errors';
import { parseArgs } from '../../control/ipvsadm/parse';

const base = (dp: Record<string, unknown>) => ({ dataplane: { vipCidrs: ['10.96.0.0/24'], ...dp } });

function rejects(doc: unknown, reason: RegExp): void {
  assert.throws(
    () => validateConfig(doc),
    (e: unknown) =>
      e instanceof UvsError && e.code === 'UVS_ERR_CONFIG_INVALID' && e.path === 'dataplane.announceTable' && reason.test(e.message),
  );
}

test('announceTable defaults to 0 (announce nothing) and takes any other table id', () => {
  assert.equal(validateConfig(base({})).dataplane.announceTable, 0);
  assert.equal(validateConfig(base({ announceTable: 4712 })).dataplane.announceTable, 4712);
});

test('announceTable is refused when it is a reserved table, the reply table, or not an integer', () => {
  rejects(base({ announceTable: 254 }), /253–255/);
  rejects(base({ announceTable: 4711 }), /must differ from dataplane.routeTable \(4711\)/);
  rejects(base({ announceTable: 99, routeTable: 99 }), /routeTable \(99\)/);
  rejects(base({ announceTable: -1 }), /between 0 and/);
  rejects(base({ announceTable: '4712' }), /must be an integer/);
});

test('uvsadm --maintenance takes on, off, status or wait and nothing else', () => {
  for (const action of ['on', 'off', 'status', 'wait']) {
    const r = parseArgs(['--maintenance', action]);
    assert.deepEqual(r, { ok: true, command: { kind: 'maintenance', action } });
  }
  const bad = parseArgs(['--maintenance', 'maybe']);
  assert.equal(bad.ok, false);
  assert.ok(!bad.ok && bad.exit === 2 && /illegal maintenance parameter `maybe'/.test(bad.stderr), JSON.stringify(bad));
  const none = parseArgs(['--maintenance']);
  assert.equal(none.ok, false);
  const extra = parseArgs(['--maintenance', 'on', '-t', '10.0.0.1:80']);
  assert.ok(!extra.ok && /Illegal 'service-address' option with the 'maintenance' command/.test(extra.stderr), JSON.stringify(extra));
});

test('uvsadm --help documents --maintenance', () => {
  const r = parseArgs(['-h']);
  assert.ok(r.ok && r.command.kind === 'help' && r.command.text.includes('--maintenance on|off|status|wait'));
});
