/**
 * control/memory.ts: the heap retained after a full collection is read by a gc observer; before
 * the first one it is unknown (null), and it follows what is retained, not the garbage.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { memoryView, stopWatchingGcs, watchFullGcs } from '../../control/memory';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const settle = () => new Promise((r) => setTimeout(r, 50)); // the observer's callback comes later

test('heapAfterFullGc: null before a full collection is seen, then what survived it (kept data in, garbage out)', async () => {
  assert.equal(memoryView().heapAfterFullGc, null);
  watchFullGcs();
  try {
    gc();
    await settle();
    const base = memoryView().heapAfterFullGc;
    assert.ok(base !== null && base > 0, 'read after a full collection');
    // ~40 MB kept, ~40 MB of garbage: only the kept part shows after the next collection.
    const kept = Array.from({ length: 20 }, () =>
      'k'
        .repeat(1 << 20)
        .split('')
        .join(''),
    );
    for (let i = 0; i < 20; i++)
      'g'
        .repeat(1 << 20)
        .split('')
        .join('');
    gc();
    await settle();
    const after = memoryView().heapAfterFullGc!;
    assert.ok(after - base > 15 << 20, `kept strings show: +${((after - base) / 2 ** 20).toFixed(1)} MB`);
    assert.ok(after - base < 60 << 20, `garbage does not: +${((after - base) / 2 ** 20).toFixed(1)} MB`);
    assert.equal(kept.length, 20);
    const m = memoryView();
    for (const k of ['rss', 'heapUsed', 'heapTotal', 'external', 'arrayBuffers'] as const) assert.ok(m[k] > 0, k);
  } finally {
    stopWatchingGcs();
  }
});
