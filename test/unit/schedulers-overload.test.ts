/**
 * OVERLOAD (the upper connection threshold, -x) in the schedulers that do not weigh connections:
 * rr, wrr, sh and dh. The flag is set on the real server itself (RS_FLAGS), as the table sets it,
 * and each expected sequence is derived in the comment from the kernel's rule (ip_vs_rr.c,
 * ip_vs_wrr.c, ip_vs_sh.c, ip_vs_dh.c: a server with IP_VS_DEST_F_OVERLOAD is skipped or
 * "unavailable"). lc/wlc/sed/nq/fo/ovf: schedulers-least.test.ts; mh: schedulers-mh.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { input, load, pick, picks, service } from '../helpers/sched';

const A = '10.0.0.1';
const B = '10.0.0.2';
const C = '10.0.0.3';
// Added A, B, C: the kernel list is C, B, A.
const ABC = [{ address: A }, { address: B }, { address: C }];

test('rr skips an OVERLOADed server and takes it back once the flag clears', () => {
  const m = service('rr', ABC);
  load(m, B, 0, 0, true);
  // Plain rr is C B A C …; with B skipped: C A C A.
  assert.deepEqual(picks(m, 4), [C, A, C, A]);
  load(m, B, 0, 0, false);
  // The cursor is on A (the last pick): next in list order is C, then B again.
  assert.deepEqual(picks(m, 3), [C, B, A]);
  for (const k of [A, B, C]) load(m, k, 0, 0, true);
  assert.deepEqual(picks(m, 2), [null, null], 'every server overloaded: no destination');
});

test('wrr skips an OVERLOADed server whatever its weight, and gives none when all are overloaded', () => {
  // Added B=1 then A=2: list A, B; gcd 1, max weight 2. The hooks leave the current weight at 1
  // (set to B's 1 when B was added, kept when A came), so one plain pass A B, then A at cw 2.
  const m = service('wrr', [
    { address: B, weight: 1 },
    { address: A, weight: 2 },
  ]);
  assert.deepEqual(picks(m, 3), [A, B, A]);
  load(m, A, 0, 0, true);
  // A is skipped at every current weight; B (weight 1) qualifies only at cw = 1: B every time.
  assert.deepEqual(picks(m, 3), [B, B, B]);
  load(m, B, 0, 0, true);
  assert.deepEqual(picks(m, 2), [null, null]);
  load(m, A, 0, 0, false);
  assert.deepEqual(picks(m, 2), [A, A], 'A alone: chosen at every current weight');
});

test('wrr: a pick that finds every server OVERLOADed leaves the cursor where the kernel does', () => {
  // Weights 1 (di 1, mw 1), list C, B, A. From the head (right after the last add) the one pass
  // finds nothing: the cursor stays at the head, so once the flags clear the next pick is C.
  const fromHead = service('wrr', ABC);
  for (const x of [A, B, C]) load(fromHead, x, 0, 0, true);
  assert.equal(pick(fromHead), null);
  for (const x of [A, B, C]) load(fromHead, x, 0, 0, false);
  assert.deepEqual(picks(fromHead, 2), [C, B]);
  // After C, B the cursor is on B (position 1). The walk goes A, restarts at cw 1 with stop = B,
  // finds nothing up to B and leaves the cursor on B (err_over: mark->cl = dest): next is A.
  const fromB = service('wrr', ABC);
  assert.deepEqual(picks(fromB, 2), [C, B]);
  for (const x of [A, B, C]) load(fromB, x, 0, 0, true);
  assert.equal(pick(fromB), null);
  for (const x of [A, B, C]) load(fromB, x, 0, 0, false);
  assert.deepEqual(picks(fromB, 2), [A, C]);
});

test('sh: the bucket of an OVERLOADed server gives none, or a re-hash with sh-fallback', () => {
  // 192.168.1.100 hashes to bucket 89; list C, B, A with weight 1 → bucket b is list index b % 3 → A.
  const client = '192.168.1.100';
  const plain = service('sh', ABC);
  const fallback = service('sh', ABC, 1);
  for (const m of [plain, fallback]) assert.equal(pick(m, input(client)), A);
  for (const m of [plain, fallback]) load(m, A, 0, 0, true);
  assert.equal(pick(plain, input(client)), null);
  // sh-fallback: first probe bucket (89 + 89) & 255 = 178 → index 178 % 3 = 1 → B.
  assert.equal(pick(fallback, input(client)), B);
  load(plain, B, 0, 0, true);
  assert.equal(pick(plain, input(client)), null, 'still none: the bucket belongs to A');
  load(plain, A, 0, 0, false);
  assert.equal(pick(plain, input(client)), A, 'the flag cleared: the bucket is usable again');
});

test("dh: the server of the virtual address's bucket, when OVERLOADed, gives none for every client", () => {
  // dh hashes the VIP 10.96.0.10 to bucket 242 → list index 242 % 3 = 2 → A.
  const m = service('dh', ABC);
  assert.equal(pick(m, input('1.2.3.4')), A);
  load(m, B, 0, 0, true);
  assert.equal(pick(m, input('1.2.3.4')), A, "another server's OVERLOAD does not matter");
  load(m, A, 0, 0, true);
  assert.deepEqual(
    ['1.2.3.4', '192.168.1.100'].map((c) => pick(m, input(c))),
    [null, null],
  );
});
