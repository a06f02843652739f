/** The disruption preview: moved slots and flows for a proposed change, without making it. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PreviewError, previewDisruption, previewServices, type PreviewService } from '../../control/disruption';

const servers = (n: number) => Array.from({ length: n }, (_, i) => ({ address: `10.0.0.${n - i}`, port: 80, weight: 1 }));
const svc = (scheduler: string, n: number, extra: Partial<PreviewService> = {}): PreviewService => ({
  address: '10.96.0.10',
  port: 80,
  scheduler,
  realServers: servers(n),
  ...extra,
});

test('removing one of ten mh servers moves about a tenth of the slots', () => {
  const p = previewDisruption(svc('mh', 10, { mhTableSize: 65521 }), { delete: ['10.0.0.4:80'] });
  assert.equal(p.slots, 65521);
  assert.ok(p.slotsMoved! >= 0.1 && p.slotsMoved! < 0.13, `${p.slotsMoved}`);
  assert.equal(p.flows, 0);
  assert.equal(p.flowsMoved, 0);
});

test('adding an eleventh mh server takes about an eleventh of the slots', () => {
  const p = previewDisruption(svc('mh', 10), { add: [{ address: '10.0.0.11', port: 80, weight: 1 }] });
  assert.ok(p.slotsMoved! >= 1 / 11 - 0.005 && p.slotsMoved! < 0.12, `${p.slotsMoved}`);
});

test('quiescing an mh server moves no slot; the flows on it would move, the others stay', () => {
  const flows = [
    { client: '192.168.1.100', clientPort: 0, realServer: '10.0.0.2:80' }, // mh sends it to B (§11)
    { client: '192.168.1.101', clientPort: 0, realServer: '10.0.0.3:80' }, // → C
  ];
  const p = previewDisruption(svc('mh', 3), { setWeight: [{ realServer: '10.0.0.2:80', weight: 0 }] }, flows);
  assert.equal(p.slotsMoved, 0);
  assert.equal(p.flowsChanged, 1);
  assert.equal(p.flowsMoved, 0.5);
});

test('sh re-deals its 256 buckets on any change: one removal out of four moves most of them', () => {
  const p = previewDisruption(svc('sh', 4), { delete: ['10.0.0.1:80'] });
  assert.equal(p.slots, 256);
  assert.ok(p.slotsMoved! > 0.5, `${p.slotsMoved}`);
});

test('stateful schedulers report no slots and count only flows whose real server leaves', () => {
  const flows = [
    { client: '1.1.1.1', clientPort: 1, realServer: '10.0.0.1:80' },
    { client: '1.1.1.1', clientPort: 2, realServer: '10.0.0.2:80' },
    { client: '1.1.1.1', clientPort: 3, realServer: '10.0.0.2:80' },
    { client: '1.1.1.1', clientPort: 4, realServer: '10.0.0.3:80' },
  ];
  const p = previewDisruption(svc('wlc', 3), { delete: ['10.0.0.2:80'] }, flows);
  assert.equal(p.slotsMoved, null);
  assert.equal(p.flowsMoved, 0.5);
});

test('a scheduler change is previewed on the same list; slots compare only between identical tables', () => {
  const flows = [{ client: '192.168.1.100', clientPort: 0, realServer: '10.0.0.2:80' }];
  const p = previewDisruption(svc('rr', 3), { scheduler: 'mh' }, flows);
  assert.equal(p.scheduler, 'mh');
  assert.equal(p.slotsMoved, null);
  assert.equal(p.flowsMoved, 0); // mh would keep it on 10.0.0.2
  const resize = previewDisruption(svc('mh', 3), { mhTableSize: 8191 });
  assert.equal(resize.slotsMoved, null);
});

test('unknown real servers and bad weights are reported with their path', () => {
  assert.throws(
    () => previewDisruption(svc('mh', 3), { delete: ['10.0.0.9:80'] }),
    (e: unknown) => e instanceof PreviewError && e.path === 'change.delete[0]',
  );
  assert.throws(
    () => previewDisruption(svc('mh', 3), { add: [{ address: '10.0.0.1', port: 80, weight: 1 }] }),
    (e: unknown) => e instanceof PreviewError && /already/.test(e.message),
  );
  assert.throws(
    () =>
      previewServices([
        { service: svc('mh', 3), change: {} },
        { service: svc('mh', 3), change: { setWeight: [{ realServer: '10.0.0.1:80', weight: 1e6 }] } },
      ]),
    (e: unknown) => e instanceof PreviewError && e.path === '[1].change.setWeight[0].weight',
  );
});
