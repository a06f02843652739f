/**
 * perf/ecmp-model.ts: the share of flows an ECMP event moves (Linux hash-threshold multipath and
 * resilient groups), and the adoption cost that follows from the shadow cap. The ECMP lab checks
 * the same numbers on a real router: killing the first of three nodes moved 50 of 100 streams, a
 * fourth node joining moved about half.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_PARAMS, model, movedShare, owner } from '../../perf/ecmp-model';

const close = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-9, `${a} ≠ ${b}`);

test('hash-threshold: next hop i of n owns [i/n, (i+1)/n)', () => {
  assert.deepEqual(
    [0, 0.33, 0.34, 0.66, 0.67, 0.999].map((h) => owner(h, 3)),
    [0, 0, 1, 1, 2, 2],
  );
});

test('a dead middle node of three moves only its own third; the first or last moves half of all flows', () => {
  close(movedShare(3, 'kill', { victim: 1 }), 1 / 3);
  close(movedShare(3, 'kill', { victim: 0 }), 1 / 2);
  close(movedShare(3, 'kill', { victim: 2 }), 1 / 2);
});

test("a death never moves less than the dead node's share, a join never less than the newcomer's", () => {
  for (let n = 2; n <= 24; n++) {
    for (let v = 0; v < n; v++) assert.ok(movedShare(n, 'kill', { victim: v }) >= 1 / n - 1e-12, `n=${n} victim=${v}`);
    assert.ok(movedShare(n, 'join') >= 1 / (n + 1) - 1e-12);
  }
  close(movedShare(3, 'join'), 1 / 2);
});

test("resilient groups move exactly the dead node's or the newcomer's share", () => {
  for (const n of [3, 4, 10, 20]) {
    close(movedShare(n, 'kill', { resilient: true }), 1 / n);
    close(movedShare(n, 'join', { resilient: true }), 1 / (n + 1));
  }
});

test('with a table large enough for every shadow, no moved flow waits for Redis; with the default one at 1 M flows, most do', () => {
  const small = model({ ...DEFAULT_PARAMS, nodes: 10, flows: 1_000_000 });
  assert.equal(small.shadowsHeld, Math.floor(DEFAULT_PARAMS.tableSize * DEFAULT_PARAMS.maxShadowShare));
  assert.ok(small.lookupsOnKill > 0.9 * small.movedOnKill);
  assert.ok(small.beyondParkTimeoutOnKill > 0, 'a single Redis cannot answer them all within the park timeout');
  const sized = model({ ...DEFAULT_PARAMS, nodes: 10, flows: 1_000_000, tableSize: small.tableSizeForAllShadows });
  assert.equal(sized.lookupsOnKill, 0);
  assert.equal(sized.shadowsHeld, sized.shadowsWanted);
  assert.equal(sized.tableSize & (sized.tableSize - 1), 0, 'a power of two, as dataplane.tableSize must be');
});

test('the shipped ECMP examples are valid: the uvsd configuration, and both BIRD configurations when BIRD is installed', async () => {
  const { execFileSync } = await import('node:child_process');
  const { join } = await import('node:path');
  const { loadConfigFile } = await import('../../control/config');
  const dir = join(__dirname, '..', '..', '..', 'docs', 'examples');
  const cfg = loadConfigFile(join(dir, 'uvs-ecmp.yaml'));
  assert.equal(cfg.dataplane.announceTable, 4712);
  assert.ok(cfg.services.every((s) => s.scheduler === 'mh' && s.forwarding === 'tunnel'));
  let bird = '';
  try {
    bird = execFileSync('sh', ['-c', 'command -v bird'], { encoding: 'utf8' }).trim();
  } catch {
    /* not installed */
  }
  if (!bird) return;
  for (const f of ['bird-lb-node.conf', 'bird-router.conf']) execFileSync(bird, ['-p', '-c', join(dir, f)]); // parse only; throws on an error
});
