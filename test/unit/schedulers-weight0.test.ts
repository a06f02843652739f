/** Every scheduler: weight 0 is never chosen for a new flow, and all weights 0 means none. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { schedulerNames } from '../../schedulers/registry';
import { input, service } from '../helpers/sched';

const ALL = ['rr', 'wrr', 'lc', 'wlc', 'sed', 'nq', 'sh', 'dh', 'mh', 'lblc', 'lblcr', 'fo', 'ovf', 'twos'];

test('every kernel scheduler is registered', () => {
  assert.deepEqual([...schedulerNames()].sort(), [...ALL].sort());
});

for (const name of ALL) {
  test(`${name} never chooses a weight-0 server for a new flow, and none when all weights are 0`, () => {
    const m = service(name, [
      { address: '10.0.0.1', weight: 2 },
      { address: '10.0.0.2', weight: 0 },
      { address: '10.0.0.3', weight: 1 },
    ]);
    const zero = m.servers.get('10.0.0.2:80')!;
    let chosen = 0;
    for (let i = 0; i < 500; i++) {
      const s = m.schedule(input(`172.16.${i >> 8}.${i & 255}`, 1024 + i, i));
      assert.notEqual(s, zero);
      if (s) {
        chosen++;
        m.bind(s, L.RS_ACTIVE); // let the least-connection schedulers move on
      }
    }
    assert.ok(chosen > 0);
    const off = service(name, [
      { address: '10.0.0.1', weight: 0 },
      { address: '10.0.0.2', weight: 0 },
    ]);
    for (let i = 0; i < 50; i++) assert.equal(off.schedule(input(`172.16.0.${i}`, 1024 + i, i)), null);
  });
}
