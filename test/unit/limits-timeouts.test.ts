/**
 * Timeouts and persistence are bounded where the connection table can represent them (issue 12,
 * defect 7): entry times are signed 32-bit milliseconds, so anything above 2147483 s would read as
 * already past and be swept at once. The file, kube-proxy's ipvs: section and API edits (which
 * are validated by the same schema) all refuse it with the field and the reason.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';
import { DIR_INPUT, TCP_DEFAULT_TIMEOUTS, TCPF_ACK, TCPF_SYN, TCP_ESTABLISHED, TCP_STATE_NAMES } from '../../conntrack/state';
import { MAX_TIMEOUT, validateConfig } from '../../control/config';
import { applyEdits } from '../../control/edits';
import { tableTimeouts } from '../../control/daemon';
import { UvsError } from '../../control/errors';
import { newFlow } from '../../conntrack/flow';

const base = { dataplane: { vipCidrs: ['10.96.0.0/24'] } };
const svc = (extra: Record<string, unknown> = {}) => ({
  protocol: 'tcp',
  address: '10.96.0.10',
  port: 80,
  realServers: [{ address: '10.0.0.1' }],
  ...extra,
});

function refused(doc: unknown, path: string): void {
  assert.throws(
    () => validateConfig(doc),
    (e: unknown) =>
      e instanceof UvsError &&
      e.code === 'UVS_ERR_CONFIG_INVALID' &&
      e.path === path &&
      /at most|between 0 and 2147483 seconds/.test(e.message) &&
      /32-bit/.test(e.message),
    `${path} is refused with its path and the reason`,
  );
}

test('the longest timeout is the kernel INT_MAX / HZ at HZ=1000: 2147483 s', () => {
  assert.equal(MAX_TIMEOUT, 2147483);
  assert.ok(MAX_TIMEOUT * 1000 <= 0x7fffffff);
  assert.ok((MAX_TIMEOUT + 1) * 1000 > 0x7fffffff, 'one second more no longer fits');
});

test('timeouts above 24.8 days are refused in every place they can be set, naming the field', () => {
  refused({ ...base, timeouts: { tcp: '25d' } }, 'timeouts.tcp');
  refused({ ...base, timeouts: { tcpFin: 2147484 } }, 'timeouts.tcpFin');
  refused({ ...base, timeouts: { udp: '30d' } }, 'timeouts.udp');
  refused({ ...base, timeouts: { tcpStates: { TIME_WAIT: '25d' } } }, 'timeouts.tcpStates.TIME_WAIT');
  refused({ ...base, timeouts: { sctp: { ESTABLISHED: '25d' } } }, 'timeouts.sctp.ESTABLISHED');
  refused({ ...base, ipvs: { tcpTimeout: '600h' } }, 'ipvs.tcpTimeout');
  refused({ ...base, services: [svc({ persistence: '30d' })] }, 'services[0].persistence');
  refused({ ...base, services: [svc({ persistence: 2678400 })] }, 'services[0].persistence'); // ipvsadm's own maximum
});

test('PUT /v1/timeouts and uvsadm --set go through the same check (setTimeouts edit)', () => {
  const doc: Record<string, unknown> = { ...base };
  applyEdits(doc, [{ op: 'setTimeouts', tcp: 25 * 86400, tcpFin: 0, udp: 0 }]);
  refused(doc, 'timeouts.tcp');
});

test('the longest allowed timeout keeps an established entry and a template alive in the table', () => {
  const cfg = validateConfig({ ...base, timeouts: { tcp: MAX_TIMEOUT }, services: [svc({ persistence: MAX_TIMEOUT })] });
  assert.equal(cfg.timeouts.tcp.ESTABLISHED, MAX_TIMEOUT);
  assert.equal(cfg.services[0]!.persistence, MAX_TIMEOUT);
  const t = new ConnTable(ConnTable.create(64, tableTimeouts(cfg)), createRealServerRegion(4), L.OWNER_CONTROL);
  const now = t.now();
  const e = t.insert(
    newFlow({
      proto: 6,
      caddr: 0x0a000002,
      cports: (40000 << 16) | 80,
      vaddr: 0x0a60000a,
      daddr: 0x0a000001,
      dports: (80 << 16) | 40000,
      laddr: 0x0a000002,
      rs: 1,
      now,
    }),
  );
  t.touch(e, DIR_INPUT, TCPF_SYN, now);
  t.touch(e, DIR_INPUT, TCPF_ACK, now);
  assert.equal(TCP_STATE_NAMES[t.i32[t.base(e) + L.E_STATE]!], TCP_STATE_NAMES[TCP_ESTABLISHED]);
  const tmpl = t.insert(
    newFlow({
      proto: 6,
      caddr: 0x0a000002,
      cports: 80,
      vaddr: 0x0a60000a,
      daddr: 0x0a000001,
      dports: 80 << 16,
      laddr: 0x0a000002,
      flags: L.F_TEMPLATE,
      rs: 1,
      now,
      templateMs: cfg.services[0]!.persistence * 1000,
    }),
  );
  assert.ok(tmpl >= 0);
  assert.equal(t.expire(now + 1000), 0, 'nothing is swept a second later');
  assert.equal(t.expire(now + 20 * 86400 * 1000), 0, 'nor 20 days later');
  assert.equal(t.count(), 2);
  assert.equal(TCP_DEFAULT_TIMEOUTS[TCP_ESTABLISHED], 900);
});
