/**
 * Runtime edits on the configuration document (control/edits.ts), indexed by key since issue 12
 * (defect 10): the order of services and real servers, conflicts and not-found answers are those of
 * applying the operations one by one to the lists.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyEdits, type EditOp } from '../../control/edits';
import { UvsError } from '../../control/errors';
import { validateConfig } from '../../control/config';

const ref = (port: number, address = '10.96.0.1') => ({ protocol: 'tcp', address, port });
const doc = () => ({
  services: [
    { protocol: 'tcp', address: '10.96.0.1', port: 80, realServers: [{ address: '10.0.0.1' }, { address: '10.0.0.2', port: 8080 }] },
    { protocol: 'tcp', address: 'fd00::1', port: 80, realServers: [] },
    { protocol: 'tcp', address: '10.96.0.1', port: 81 },
  ],
});

function code(d: Record<string, unknown>, ops: EditOp[]): [string, string | undefined] {
  try {
    applyEdits(d, ops);
  } catch (e) {
    assert.ok(e instanceof UvsError);
    return [e.code, e.path];
  }
  return ['ok', undefined];
}

test('deletes keep everyone else in order; a deleted and re-added entry goes to the end', () => {
  const d: Record<string, unknown> = doc();
  applyEdits(d, [
    { op: 'deleteService', ref: ref(80) },
    { op: 'addService', service: ref(80) },
  ]);
  assert.deepEqual(
    (d.services as { address: string; port: number }[]).map((s) => `${s.address}:${s.port}`),
    ['fd00::1:80', '10.96.0.1:81', '10.96.0.1:80'],
  );
  const e: Record<string, unknown> = doc();
  applyEdits(e, [
    { op: 'deleteRealServer', ref: ref(80), address: '10.0.0.1', port: 80 },
    { op: 'addRealServer', ref: ref(80), realServer: { address: '10.0.0.3' } },
    { op: 'addRealServer', ref: ref(80), realServer: { address: '10.0.0.1', weight: 5 } },
    { op: 'editRealServer', ref: ref(80), realServer: { address: '10.0.0.2', port: 8080, weight: 2 } },
  ]);
  assert.deepEqual((e.services as { realServers: unknown[] }[])[0]!.realServers, [
    { address: '10.0.0.2', port: 8080, weight: 2 },
    { address: '10.0.0.3' },
    { address: '10.0.0.1', weight: 5 },
  ]);
});

test('IPv6 references match in any spelling; conflicts and unknown entries are named by operation', () => {
  assert.deepEqual(code(doc(), [{ op: 'addRealServer', ref: ref(80, 'FD00:0:0::1'), realServer: { address: 'fd00::2' } }]), [
    'ok',
    undefined,
  ]);
  assert.deepEqual(code(doc(), [{ op: 'addService', service: ref(80, 'fd00:0::1') }]), ['UVS_ERR_API_CONFLICT', 'ops[0].service']);
  assert.deepEqual(code(doc(), [{ op: 'addRealServer', ref: ref(80), realServer: { address: '10.0.0.1', port: 80 } }]), [
    'UVS_ERR_API_CONFLICT',
    'ops[0].realServer',
  ]);
  assert.deepEqual(
    code(doc(), [
      { op: 'deleteService', ref: ref(81) },
      { op: 'editService', service: ref(81) },
    ]),
    ['UVS_ERR_API_NOT_FOUND', 'ops[1].service'],
  );
  assert.deepEqual(
    code(doc(), [
      { op: 'deleteRealServer', ref: ref(80), address: '10.0.0.2', port: 8080 },
      { op: 'deleteRealServer', ref: ref(80), address: '10.0.0.2', port: 8080 },
    ]),
    ['UVS_ERR_API_NOT_FOUND', 'ops[1]'],
  );
  assert.deepEqual(code(doc(), [{ op: 'clear' }, { op: 'addRealServer', ref: ref(80), realServer: { address: '10.0.0.1' } }]), [
    'UVS_ERR_API_NOT_FOUND',
    'ops[1].ref',
  ]);
});

test('an edit replacing the real-server list is indexed afresh', () => {
  const d: Record<string, unknown> = doc();
  applyEdits(d, [
    { op: 'editService', service: { ...ref(80), realServers: [{ address: '10.0.0.7' }] } },
    { op: 'addRealServer', ref: ref(80), realServer: { address: '10.0.0.1' } },
  ]);
  assert.deepEqual((d.services as { realServers: unknown[] }[])[0]!.realServers, [{ address: '10.0.0.7' }, { address: '10.0.0.1' }]);
  assert.deepEqual(
    code(doc(), [
      { op: 'editService', service: { ...ref(80), realServers: [{ address: '10.0.0.7' }] } },
      { op: 'addRealServer', ref: ref(80), realServer: { address: '10.0.0.7' } },
    ]),
    ['UVS_ERR_API_CONFLICT', 'ops[1].realServer'],
  );
});

test('proxyProtocol through the API operations: uvsadm -a/-e bodies set it, -e without it keeps it, validation names the field', () => {
  const d: Record<string, unknown> = {
    dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'] } },
    services: [{ protocol: 'tcp', address: '10.96.0.1', port: 80, forwarding: 'fullnat', realServers: [] }],
  };
  applyEdits(d, [
    {
      op: 'addRealServer',
      ref: ref(80),
      realServer: { address: '10.0.0.1', port: 8080, weight: 1, forwarding: 'fullnat', proxyProtocol: 'v2' },
    },
  ]);
  applyEdits(d, [
    {
      op: 'editRealServer',
      ref: ref(80),
      realServer: { address: '10.0.0.1', port: 8080, weight: 3, forwarding: 'fullnat', upperThreshold: 0, lowerThreshold: 0 },
    },
  ]);
  const rs = validateConfig(d).services[0]!.realServers[0]!;
  assert.deepEqual([rs.weight, rs.proxyProtocol], [3, 'v2']);
  applyEdits(d, [
    {
      op: 'editRealServer',
      ref: ref(80),
      realServer: { address: '10.0.0.1', port: 8080, weight: 3, forwarding: 'masq', upperThreshold: 0, lowerThreshold: 0 },
    },
  ]);
  assert.throws(
    () => validateConfig(d),
    (e: unknown) =>
      e instanceof UvsError && e.path === 'services[0].realServers[0].proxyProtocol' && /needs forwarding fullnat/.test(e.message),
  );
});
