/**
 * uvs's nftables table and its mark bits (lb/nftables.ts, lb/marks.ts, docs/node-resources.md):
 * the bit allocation, the elements a reply rule becomes, the change lines, and the check that
 * tells a complete table from a damaged one — against `nft`'s own listing when nft and a network
 * namespace are at hand (root), since nft prints rules back in its own words.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { DEFAULT_MARK_MASK, validateConfig } from '../../control/config';
import { hexMark, intoDeviceBit, maskBits } from '../../lb/marks';
import { element, elementLines, nftTableName, type ReplyRule, tableComplete, tableScript, tableShape } from '../../lb/nftables';

test('mark bits: lowest first; the default shares no bit with kube-proxy, Calico, Cilium, Weave, Tailscale, Istio or wg-quick', () => {
  assert.deepEqual(maskBits(0x1082), [0x2, 0x80, 0x1000]);
  assert.deepEqual(maskBits(0x80000000), [0x80000000]);
  assert.equal(intoDeviceBit(0x1082), 0x2);
  assert.equal(intoDeviceBit(0xf0000000), 0x10000000);
  assert.throws(() => intoDeviceBit(0));
  assert.equal(hexMark(0x1000), '0x1000');
  for (const [who, mask] of [
    ['kube-proxy', 0xc000],
    ['Calico', 0xffff0000],
    ['Cilium', 0xffff0f00],
    ['Weave', 0x60000],
    ['Tailscale', 0xff0000],
    ['Istio', 0x539],
    ['wg-quick', 51820],
  ] as const) {
    assert.equal((DEFAULT_MARK_MASK & mask) >>> 0, 0, who);
  }
});

test('dataplane.replayMark is refused with what replaced it; markMask must have a bit', () => {
  const base = { dataplane: { vipCidrs: ['10.200.0.0/24'] }, services: [] };
  assert.throws(
    () => validateConfig({ ...base, dataplane: { ...base.dataplane, replayMark: 0x75 } }),
    /dataplane\.replayMark: replaced by dataplane\.markMask/,
  );
  assert.throws(() => validateConfig({ ...base, dataplane: { ...base.dataplane, markMask: 0 } }), /dataplane\.markMask: must be between 1/);
  assert.equal(validateConfig(base).dataplane.markMask, 0x1082);
});

const RULES: ReplyRule[] = [
  { addr: '10.0.0.1', port: 80, proto: 'tcp' },
  { addr: '10.0.0.1', port: 0, proto: 'icmp' },
  { addr: 'fd00::1', port: 53, proto: 'udp' },
  { addr: 'fd00::1', port: 0, proto: 'icmp' },
  { addr: '10.0.0.2', port: 3868, proto: 'sctp' },
];

test('a reply rule is one element of the set of its family and kind', () => {
  assert.deepEqual(RULES.map(element), [
    { set: 'replies4', text: '10.0.0.1 . tcp . 80' },
    { set: 'icmp4', text: '10.0.0.1' },
    { set: 'replies6', text: 'fd00::1 . udp . 53' },
    { set: 'icmp6', text: 'fd00::1' },
    { set: 'replies4', text: '10.0.0.2 . sctp . 3868' },
  ]);
  assert.equal(nftTableName('uvs-0.a'), 'uvs_uvs_0_a');
});

test('element lines: one per set, at most 1,000 elements a line', () => {
  const many: ReplyRule[] = Array.from({ length: 2500 }, (_, i) => ({ addr: `10.1.${i >> 8}.${i & 255}`, port: 80, proto: 'tcp' }));
  const lines = elementLines('delete', 't', [...many, RULES[1]!]);
  assert.equal(lines.length, 4);
  assert.match(lines[0]!, /^delete element inet t replies4 \{ 10\.1\.0\.0 \. tcp \. 80, /);
  assert.equal(lines[0]!.split(', ').length, 1000);
  assert.equal(lines[2]!.split(', ').length, 500);
  assert.equal(lines[3], 'delete element inet t icmp4 { 10.0.0.1 }');
  assert.deepEqual(elementLines('add', 't', []), []);
});

const canNft = process.getuid?.() === 0 && spawnSync('nft', ['--version']).status === 0;

test('the table script loads into nft, and the check knows a complete table from a damaged one', {
  skip: !canNft && 'needs root and nft',
}, () => {
  const ns = `uvnft${process.pid % 100000}`;
  const inNs = (args: string[], input?: string) => spawnSync('ip', ['netns', 'exec', ns, ...args], { encoding: 'utf8', input });
  spawnSync('ip', ['netns', 'add', ns]);
  try {
    const load = inNs(['nft', '-f', '-'], tableScript('uvs-0', 0x2, RULES));
    assert.equal(load.status, 0, load.stderr);
    const listing = () => inNs(['nft', '-t', 'list', 'table', 'inet', 'uvs_uvs_0']).stdout;
    const shape = () =>
      tableShape(
        inNs(['nft', '-j', 'list', 'chains', 'inet']).stdout,
        inNs(['nft', '-j', '-t', 'list', 'sets', 'inet']).stdout,
        'uvs_uvs_0',
      );
    assert.ok(tableComplete(listing(), 'uvs-0', 0x2), listing());
    assert.ok(shape(), 'the cheap check sees the chains and sets');
    assert.equal(tableComplete(listing(), 'uvs-0', 0x80), false, 'another bit');
    assert.equal(tableComplete(listing(), 'uvs-1', 0x2), false, 'another device');
    const elems = inNs(['nft', '-j', 'list', 'set', 'inet', 'uvs_uvs_0', 'replies4']).stdout;
    assert.equal((JSON.parse(elems).nftables[1].set.elem as unknown[]).length, 2);
    // The script replaces a table that is there, atomically, with the elements given.
    const again = inNs(['nft', '-f', '-'], tableScript('uvs-0', 0x2, RULES.slice(0, 2)));
    assert.equal(again.status, 0, again.stderr);
    assert.equal(
      (JSON.parse(inNs(['nft', '-j', 'list', 'set', 'inet', 'uvs_uvs_0', 'replies4']).stdout).nftables[1].set.elem as unknown[]).length,
      1,
    );
    // A chain emptied, a chain deleted, the table gone: each is incomplete.
    inNs(['nft', 'flush', 'chain', 'inet', 'uvs_uvs_0', 'output']);
    assert.equal(tableComplete(listing(), 'uvs-0', 0x2), false, 'flushed chain');
    inNs(['nft', '-f', '-'], tableScript('uvs-0', 0x2, RULES));
    inNs(['nft', 'delete', 'chain', 'inet', 'uvs_uvs_0', 'prerouting']);
    assert.equal(tableComplete(listing(), 'uvs-0', 0x2), false, 'deleted chain');
    assert.equal(shape(), false, 'the cheap check sees a deleted chain');
    inNs(['nft', 'flush', 'ruleset']);
    assert.equal(tableComplete(listing(), 'uvs-0', 0x2), false, 'no table');
    assert.equal(shape(), false, 'the cheap check sees no table');
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
  }
});
