/** rr and wrr: the kernel's sequences, driven through the -a/-d/-e hook sequence. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { picks, server, service } from '../helpers/sched';

test('rr picks the newest real server first: A, B, C added give C, B, A, C', () => {
  const m = service('rr', [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }]);
  assert.deepEqual(picks(m, 4), ['10.0.0.3', '10.0.0.2', '10.0.0.1', '10.0.0.3']);
});

test('rr skips weight 0 and OVERLOAD, re-picks a single eligible server, and gives none when all are 0', () => {
  const m = service('rr', [{ address: '10.0.0.1' }, { address: '10.0.0.2', weight: 0 }, { address: '10.0.0.3', weight: 0 }]);
  assert.deepEqual(picks(m, 3), ['10.0.0.1', '10.0.0.1', '10.0.0.1']);
  m.edit(server(m, '10.0.0.1'), 0, 0, 0);
  assert.deepEqual(picks(m, 2), [null, null]);
});

test('rr: deleting the server under the cursor makes the one after it next', () => {
  const m = service('rr', [{ address: '10.0.0.1' }, { address: '10.0.0.2' }, { address: '10.0.0.3' }]);
  assert.deepEqual(picks(m, 2), ['10.0.0.3', '10.0.0.2']);
  m.del(server(m, '10.0.0.2'));
  assert.deepEqual(picks(m, 3), ['10.0.0.1', '10.0.0.3', '10.0.0.1']);
});

test('wrr with A=4, B=3, C=2 added C, B, A runs one plain pass A B C, then A A B A B C A B C repeating', () => {
  const m = service('wrr', [
    { address: '10.0.0.3', weight: 2 },
    { address: '10.0.0.2', weight: 3 },
    { address: '10.0.0.1', weight: 4 },
  ]);
  const name = (k: string | null) => ({ '10.0.0.1': 'A', '10.0.0.2': 'B', '10.0.0.3': 'C' })[k!];
  assert.equal(
    picks(m, 3 + 18)
      .map(name)
      .join(''),
    'ABC' + 'AABABCABC'.repeat(2),
  );
});

test('wrr with A=4, B=2 (gcd 2, max 3) runs A B, then A A B repeating', () => {
  const m = service('wrr', [
    { address: '10.0.0.2', weight: 2 },
    { address: '10.0.0.1', weight: 4 },
  ]);
  assert.deepEqual(picks(m, 8), ['10.0.0.1', '10.0.0.2', '10.0.0.1', '10.0.0.1', '10.0.0.2', '10.0.0.1', '10.0.0.1', '10.0.0.2']);
});

test('wrr restarts at the head after an edit and never picks weight 0', () => {
  const m = service('wrr', [
    { address: '10.0.0.2', weight: 1 },
    { address: '10.0.0.1', weight: 1 },
  ]);
  assert.deepEqual(picks(m, 1), ['10.0.0.1']);
  m.edit(server(m, '10.0.0.1'), 0, 0, 0);
  assert.deepEqual(picks(m, 3), ['10.0.0.2', '10.0.0.2', '10.0.0.2']);
});
