/**
 * uvsadm -R and -S: restore input becomes one batch of operations (line numbers kept for errors),
 * what -S prints restores to the same table, -E keeps uvs's own settings, and refusals get
 * ipvsadm's messages.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateService } from '../../control/config';
import { applyEdits, type EditOp } from '../../control/edits';
import { classicError, keepUvsSettings } from '../../control/ipvsadm/answers';
import { parseRestore } from '../../control/ipvsadm/restore';
import { formatSave, type FmtService } from '../../control/ipvsadm/format';

const vip = { protocol: 'tcp', address: '10.200.0.10', port: 80 };

test('-R: one operation per command, a leading ipvsadm/uvsadm word dropped, blank and # lines skipped', () => {
  const r = parseRestore(
    [
      '-C',
      'ipvsadm -A -t 10.200.0.10:80 -s rr',
      '',
      '# the web servers',
      'uvsadm -a -t 10.200.0.10:80 -r 10.200.11.2:8080 -m -w 2',
      '\t-a  -t 10.200.0.10:80   -r 10.200.12.2:8080 -w 1\r',
      '--set 900 0 0',
      '-e -t 10.200.0.10:80 -r 10.200.12.2:8080 -w 0',
      '-d -t 10.200.0.10:80 -r 10.200.11.2:8080',
      '-E -t 10.200.0.10:80 -s wlc',
      '-D -t 10.200.0.10:80',
    ].join('\n'),
  );
  assert.ok(r.ok);
  assert.deepEqual(
    r.ops.map((o) => o.op),
    [
      'clear',
      'addService',
      'addRealServer',
      'addRealServer',
      'setTimeouts',
      'editRealServer',
      'deleteRealServer',
      'editService',
      'deleteService',
    ],
  );
  assert.deepEqual(r.ops[3], { op: 'addRealServer', ref: vip, realServer: { address: '10.200.12.2', port: 8080, weight: 1 } });
  assert.deepEqual(
    r.lines.map((l) => l.line),
    [1, 2, 5, 6, 7, 8, 9, 10, 11],
  );
  assert.equal(r.lines[1]!.text, 'ipvsadm -A -t 10.200.0.10:80 -s rr');
});

test("-R: the first bad line stops everything, with ipvsadm's message and status", () => {
  const r = parseRestore('-A -t 10.200.0.10:80\n-a -t 10.200.0.10:80 -r 10.200.11.2 -w 70000\n-A -t 10.200.0.11:80\n');
  assert.deepEqual(r, { ok: false, stderr: 'illegal weight specified\n', exit: 2, line: 2 });
  const nested = parseRestore('-A -t 10.200.0.10:80\n-R\n');
  assert.deepEqual(nested, { ok: false, stderr: "Try `uvsadm -h' or 'uvsadm --help' for more information.\n", exit: 255, line: 2 });
  const list = parseRestore('-L -n\n');
  assert.equal(list.ok, false);
  assert.match(!list.ok ? list.stderr : '', /line 1: only -A -E -D -C -a -e -d and --set can be restored/);
  assert.deepEqual(parseRestore(''), { ok: true, ops: [], lines: [] });
});

/** Applies ops to a document and reads it back as -S would (through the config schema). */
function tableOf(ops: EditOp[]): FmtService[] {
  const doc: Record<string, unknown> = {};
  applyEdits(doc, ops);
  const zero = { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0 };
  return ((doc.services as unknown[]) ?? []).map((s, i) => {
    const c = validateService(s, `services[${i}]`);
    return {
      ...c,
      persistence: c.persistence ?? 0,
      stats: zero,
      realServers: c.realServers.map((r) => ({ ...r, activeConns: 0, inactConns: 0, stats: zero })),
    };
  });
}

test('-S output restores (-C; -R) to a table that saves identically, thresholds included', () => {
  const input = [
    '-A -u 10.200.0.10:53 -s wrr',
    '-a -u 10.200.0.10:53 -r 10.200.11.2:5353 -w 3',
    '-A -t 10.200.0.10:80 -s sh -b flag-2,flag-1',
    '-a -t 10.200.0.10:80 -r 10.200.13.2:8080 -w 1 -x 10 -y 5',
    '-a -t 10.200.0.10:80 -r 10.200.11.2:8080 -w 0',
    '-a -t 10.200.0.10:80 -r 10.200.12.2:8080 -w 65535',
    '-A -t 10.200.0.11:443 -s rr',
  ].join('\n');
  const first = parseRestore(input);
  assert.ok(first.ok);
  const saved = formatSave(tableOf(first.ops));
  assert.equal(
    saved,
    [
      '-A -t 10.200.0.10:80 -s sh -b sh-fallback,sh-port',
      '-a -t 10.200.0.10:80 -r 10.200.11.2:8080 -m -w 0',
      '-a -t 10.200.0.10:80 -r 10.200.12.2:8080 -m -w 65535',
      '-a -t 10.200.0.10:80 -r 10.200.13.2:8080 -m -w 1 -x 10 -y 5',
      '-A -t 10.200.0.11:443 -s rr',
      '-A -u 10.200.0.10:53 -s wrr',
      '-a -u 10.200.0.10:53 -r 10.200.11.2:5353 -m -w 3',
      '',
    ].join('\n'),
  );
  const again = parseRestore(`-C\n${saved}`);
  assert.ok(again.ok);
  assert.equal(formatSave(tableOf(again.ops)), saved);
});

test('-E keeps uvs-only settings of the running service; mhTableSize only while the scheduler stays mh', () => {
  const doc = {
    services: [
      {
        address: '10.200.0.10',
        port: 80,
        scheduler: 'mh',
        mhTableSize: 251,
        name: 'web',
        healthCheck: { type: 'http' },
        maxDrainTime: 30,
        schedFlags: ['mh-port'],
        realServers: [],
      },
      { protocol: 'udp', address: '10.200.0.10', port: 53, scheduler: 'rr' },
    ],
  };
  const ops: EditOp[] = [
    { op: 'editService', service: { ...vip, scheduler: 'mh' } },
    { op: 'editService', service: { protocol: 'udp', address: '10.200.0.10', port: 53, scheduler: 'wrr' } },
    { op: 'editService', service: { ...vip, port: 81, scheduler: 'rr' } },
  ];
  keepUvsSettings(ops, doc);
  assert.deepEqual(ops[0], {
    op: 'editService',
    service: { ...vip, scheduler: 'mh', name: 'web', healthCheck: { type: 'http' }, maxDrainTime: 30, mhTableSize: 251 },
  });
  assert.deepEqual(ops[1], { op: 'editService', service: { protocol: 'udp', address: '10.200.0.10', port: 53, scheduler: 'wrr' } });
  assert.deepEqual(ops[2], { op: 'editService', service: { ...vip, port: 81, scheduler: 'rr' } });
  const rr: EditOp[] = [{ op: 'editService', service: { ...vip, scheduler: 'rr' } }];
  keepUvsSettings(rr, doc);
  assert.equal((rr[0] as { service: Record<string, unknown> }).service.mhTableSize, undefined);
});

test("refusals get ipvs_strerror's words where ipvsadm has them", () => {
  const conflict = { code: 'UVS_ERR_API_CONFLICT', message: 'x already exists' };
  const noSvc = { code: 'UVS_ERR_API_NOT_FOUND', message: 'ops[0].ref: no service tcp 10.200.0.10:80' };
  const noRs = { code: 'UVS_ERR_API_NOT_FOUND', message: 'ops[0].realServer: no real server 10.200.11.2:80 in tcp 10.200.0.10:80' };
  assert.equal(classicError('addService', conflict), 'Service already exists');
  assert.equal(classicError('addRealServer', conflict), 'Destination already exists');
  assert.equal(classicError('editService', noSvc), 'No such service');
  assert.equal(classicError('deleteService', noSvc), 'No such service');
  assert.equal(classicError('zero', noSvc), 'No such service');
  assert.equal(classicError('addRealServer', noSvc), 'Service not defined');
  assert.equal(classicError('editRealServer', noRs), 'No such destination');
  assert.equal(classicError('deleteRealServer', noRs), 'No such destination');
  assert.equal(
    classicError('addService', {
      code: 'UVS_ERR_CONFIG_INVALID',
      path: 'ops[0].service.scheduler',
      message: 'ops[0].service.scheduler: unknown scheduler "xx"',
    }),
    'Scheduler or persistence engine not found',
  );
  assert.equal(classicError('addRealServer', { code: 'UVS_ERR_CONFIG_UNSUPPORTED', message: 'direct routing …' }), undefined);
});
