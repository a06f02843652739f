/**
 * mh with more real servers than its table has slots: the kernel's ip_vs_mh_reassign returns
 * -EINVAL (docs/ipvs-semantics.md §2.9), and uvs refuses the configuration, whichever way it comes:
 * the file (or a reload), an API batch, or uvsadm's commands (which become the same batch). The
 * daemon validates the edited copy of its document (Daemon.edit → applyDoc → validateConfig) and
 * keeps the running configuration when that throws, so these check validateConfig on the result.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateConfig, validateService } from '../../control/config';
import { applyEdits, type EditOp } from '../../control/edits';
import { UvsError } from '../../control/errors';
import { keepUvsSettings } from '../../control/ipvsadm/answers';
import { parseRestore } from '../../control/ipvsadm/restore';
import { ServiceModel } from '../../control/services';
import * as L from '../../conntrack/layout';
import { createRealServerRegion } from '../../conntrack/table';
import { mhSlots } from '../../schedulers/mh';

const vip = { protocol: 'tcp', address: '10.96.0.10', port: 80 };
const servers = (n: number) => Array.from({ length: n }, (_, i) => ({ address: `10.1.${i >> 8}.${i & 255}`, port: 8080 }));
const docOf = (svc: Record<string, unknown>) => ({
  dataplane: { vipCidrs: ['10.96.0.0/24'] },
  services: [{ ...vip, ...structuredClone(svc) }],
});

function refused(doc: unknown, slots: number, n: number): void {
  assert.throws(
    () => validateConfig(doc),
    (e: unknown) => {
      assert.ok(e instanceof UvsError);
      assert.equal(e.code, 'UVS_ERR_CONFIG_INVALID');
      assert.equal(e.path, 'services[0].realServers');
      assert.match(
        e.message,
        new RegExp(
          `^services\\[0\\]\\.realServers: scheduler mh has ${slots} table slots \\(mhTableSize\\) and cannot hold ${n} real servers$`,
        ),
      );
      return true;
    },
  );
}

test('a file with an mh service of more real servers than slots is refused; as many as slots, or another scheduler, is not', () => {
  refused(docOf({ scheduler: 'mh', mhTableSize: 251, realServers: servers(252) }), 251, 252);
  assert.equal(
    validateConfig(docOf({ scheduler: 'mh', mhTableSize: 251, realServers: servers(251) })).services[0]!.realServers.length,
    251,
  );
  assert.equal(validateConfig(docOf({ scheduler: 'mh', mhTableSize: 509, realServers: servers(252) })).services[0]!.mhTableSize, 509);
  assert.equal(validateConfig(docOf({ scheduler: 'rr', realServers: servers(252) })).services[0]!.scheduler, 'rr');
  // Without mhTableSize the table has the kernel's default 4093 slots.
  refused(docOf({ scheduler: 'mh', realServers: servers(4094) }), 4093, 4094);
  assert.equal(validateConfig(docOf({ scheduler: 'mh', realServers: servers(4093) })).services[0]!.realServers.length, 4093);
});

test('API batch: a service added with too many servers, a switch to mh or a smaller table, one server too many', () => {
  // addService with its servers: refused by the operation's own check, named by operation.
  assert.throws(
    () => validateService({ ...vip, scheduler: 'mh', mhTableSize: 251, realServers: servers(252) }, 'ops[0].service'),
    (e: unknown) => e instanceof UvsError && e.path === 'ops[0].service.realServers' && /251 table slots/.test(e.message),
  );
  const run = (svc: Record<string, unknown>, ops: EditOp[]) => {
    const d = docOf(svc);
    validateConfig(d); // the running configuration is valid
    applyEdits(d, ops);
    return d;
  };
  const rr = { scheduler: 'rr', realServers: servers(252) };
  refused(run(rr, [{ op: 'editService', service: { ...vip, scheduler: 'mh', mhTableSize: 251 } }]), 251, 252);
  const mh = { scheduler: 'mh', mhTableSize: 509, realServers: servers(252) };
  refused(run(mh, [{ op: 'editService', service: { ...vip, scheduler: 'mh', mhTableSize: 251 } }]), 251, 252);
  const full = { scheduler: 'mh', mhTableSize: 251, realServers: servers(251) };
  refused(run(full, [{ op: 'addRealServer', ref: vip, realServer: { address: '10.2.0.1', port: 8080 } }]), 251, 252);
  // One out, one in: still 251.
  const swap = run(full, [
    { op: 'deleteRealServer', ref: vip, address: '10.1.0.0', port: 8080 },
    { op: 'addRealServer', ref: vip, realServer: { address: '10.2.0.1', port: 8080 } },
  ]);
  assert.equal(validateConfig(swap).services[0]!.realServers.length, 251);
});

test('uvsadm: -a one server too many, -E -s mh over the default table, -A -s mh then -a past it', () => {
  const uvsadm = (svc: Record<string, unknown>, lines: string[]) => {
    const d = docOf(svc);
    validateConfig(d);
    const r = parseRestore(lines.join('\n'));
    assert.ok(r.ok);
    keepUvsSettings(r.ops, d);
    applyEdits(d, r.ops);
    return d;
  };
  refused(uvsadm({ scheduler: 'mh', mhTableSize: 251, realServers: servers(251) }, ['-a -t 10.96.0.10:80 -r 10.2.0.1:8080 -m']), 251, 252);
  // -E keeps mhTableSize while the scheduler stays mh (flags change only): still refused above it.
  const kept = { scheduler: 'mh', mhTableSize: 251, realServers: servers(251) };
  assert.equal(validateConfig(uvsadm(kept, ['-E -t 10.96.0.10:80 -s mh -b mh-port'])).services[0]!.mhTableSize, 251);
  refused(uvsadm({ scheduler: 'wlc', realServers: servers(4094) }, ['-E -t 10.96.0.10:80 -s mh']), 4093, 4094);
  const add = ['-D -t 10.96.0.10:80', '-A -t 10.96.0.10:80 -s mh'];
  for (let i = 0; i < 4094; i++) add.push(`-a -t 10.96.0.10:80 -r 10.1.${i >> 8}.${i & 255}:8080 -m`);
  refused(uvsadm({ scheduler: 'rr', realServers: [] }, add), 4093, 4094);
  assert.equal(validateConfig(uvsadm({ scheduler: 'rr', realServers: [] }, add.slice(0, -1))).services[0]!.realServers.length, 4093);
});

test('switching to mh while the same change removes servers down to the table builds the table on the final list', () => {
  // ServiceModel.editService binds the new scheduler on the current list (as -E comes before
  // the -d's), here 252 servers for 251 slots: no table yet, then each removal rebuilds.
  const m = new ServiceModel(createRealServerRegion(512), new SharedArrayBuffer(4 * L.SCHED_WORDS * 4), 512, 4);
  const cfg = (svc: Record<string, unknown>) =>
    validateConfig({ ...docOf(svc), dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: 512, maxServices: 4 } });
  m.apply(cfg({ protocol: 'udp', scheduler: 'rr', realServers: servers(252) }));
  const snap = m.apply(cfg({ protocol: 'udp', scheduler: 'mh', mhTableSize: 251, realServers: servers(251) }));
  const svc = snap.services[0]!;
  assert.equal(svc.dests.length, 251);
  const slots = mhSlots(svc.data!);
  assert.equal(slots.length, 251);
  assert.ok(
    slots.every((p) => p >= 0 && p < 251),
    'every slot names a server',
  );
});
