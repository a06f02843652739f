/**
 * The plain-subset parser (control/yaml-plain.ts) against the `yaml` library: wherever it gives a
 * value it must be the library's, over hand-picked corners, random documents written by the
 * library in several styles, and those texts with random characters put in or taken out. Where
 * the library refuses a text, the subset parser must give nothing (the library then reports it).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parse, stringify } from 'yaml';
import { parsePlainItem } from '../../control/yaml-plain';
import { mulberry32 } from '../helpers/rng';

/** The library's value of a one-item sequence, or 'error'. */
function library(text: string): { value: unknown } | 'error' {
  try {
    const v = parse(text) as unknown;
    return Array.isArray(v) && v.length === 1 ? { value: v[0] } : 'error';
  } catch {
    return 'error';
  }
}

/** Checks one text: returns whether the subset parser took it. */
function check(text: string, where: string): boolean {
  const mine = parsePlainItem(text);
  if (mine === undefined) return false;
  const lib = library(text);
  assert.notEqual(lib, 'error', `${where}: the library refuses what the subset parser took:\n${text}`);
  assert.deepEqual(mine, (lib as { value: unknown }).value, `${where}:\n${text}`);
  return true;
}

const SCALARS = [
  '~',
  'null',
  'Null',
  'NULL',
  'true',
  'True',
  'TRUE',
  'false',
  'FALSE',
  'yes',
  'no',
  'on',
  'off',
  '0',
  '-0',
  '+1',
  '007',
  '0o17',
  '0o9',
  '0x1F',
  '0xg',
  '1e3',
  '1E-2',
  '.5',
  '5.',
  '1.50',
  '2.5',
  '-.inf',
  '.Inf',
  '.nan',
  '.NaN',
  '1_000',
  '12345678901234567890',
  '10.0.0.1',
  '10.0.0.1:80',
  'fd00::1',
  '::1',
  'a#b',
  'a #b',
  'a: b',
  'a:b',
  'x:',
  "'q'",
  "it's",
  '"dq"',
  'a b',
  ' lead',
  'trail ',
  '-',
  '- x',
  '-5',
  '?',
  '? x',
  '@at',
  '`t`',
  '%p',
  '&a',
  '*a',
  '!t',
  '[1]',
  '{a: 1}',
  '|',
  '>',
  '#c',
  '',
  'tcp',
  'rr',
  'masq',
  '/healthz',
  'http://x/y',
  'ünïcode',
];
const KEYS = [
  'address',
  'port',
  'weight',
  'realServers',
  'healthCheck',
  'a-b',
  'a.b',
  'a/b',
  '_x',
  'true',
  'null',
  '1',
  'a b',
  'x:y',
  "q'",
];

function randomValue(r: () => number, depth: number): unknown {
  const k = r();
  if (depth > 3 || k < 0.45) {
    const s = SCALARS[Math.floor(r() * SCALARS.length)]!;
    const t = r();
    return t < 0.6 ? s : t < 0.8 ? Number(s.replace(/[^0-9.-]/g, '') || 0) : t < 0.9 ? r() < 0.5 : null;
  }
  if (k < 0.7) return Array.from({ length: Math.floor(r() * 4) }, () => randomValue(r, depth + 1));
  const o: Record<string, unknown> = {};
  for (let i = Math.floor(r() * 5); i > 0; i--) o[KEYS[Math.floor(r() * KEYS.length)]!] = randomValue(r, depth + 1);
  return o;
}

function rng(seed: number): () => number {
  const next = mulberry32(seed);
  return () => next() / 4294967296;
}

test('hand-picked corners: the library’s value wherever the subset parser gives one', () => {
  const texts = [
    '- protocol: tcp\n  address: 10.0.0.1\n  port: 80\n  realServers:\n  - address: 10.1.0.1\n    port: 8080\n    weight: 0\n',
    '  - protocol: tcp\n    realServers:\n      - address: 10.1.0.1\n        weight: 3 # heavy\n    # a comment\n\n    healthCheck:\n      type: http\n      path: /healthz\n',
    "- name: 'it''s'\n  x: \"dq\"\n  y: 'a # b'   # c\n",
    '- a:\n  b:\n  c: ~\n',
    '-\n  a: 1\n',
    '- # a comment\n  a: 1\n',
    '- a: 1\n   b: 2\n',
    '- a: 1\n  a: 2\n',
    '- a: b: c\n',
    '- a: - x\n',
    '- - x\n',
    '- a: [1, 2]\n',
    '- a: |\n    text\n',
    '- a: plain\n    continued\n',
    "- a: 'open\n    closed'\n",
    '- a: "x\\ty"\n',
    '- a: &x 1\n  b: *x\n',
    '- a: !!str 1\n',
    '- ? a\n  : b\n',
    '- a:\n  - x\n  - y\n  b: 1\n',
    '- a:\n    - x\n  b: 1\n',
    '- a:\n  - x\n   - y\n',
    '- true: 1\n',
    '- __proto__: 1\n',
    '- a:1\n',
    '- a : 1\n',
    ...SCALARS.map((s) => `- k: ${s}\n`),
    ...SCALARS.map((s) => `- ${s}\n`),
  ];
  let taken = 0;
  for (const t of texts) if (check(t, 'corner')) taken++;
  assert.ok(taken > 40, `the subset covers the plain corners (${taken} of ${texts.length})`);
  assert.ok(check(texts[0]!, 'a service') && check(texts[1]!, 'an indented service'), 'a usual services item is in the subset');
});

test('random documents written by the library, and the same texts with characters put in or taken out (3000 each)', () => {
  const pieces = ['- ', '-', '  ', ' ', '\n', ': ', ':', '#', ' #', "'", '"', 'x', '7', '.', '[', '{', '~', '\t', '\r'];
  let taken = 0;
  for (let seed = 1; seed <= 3000; seed++) {
    const r = rng(seed);
    const value = randomValue(r, 0);
    const text = stringify([value], {
      indent: r() < 0.5 ? 2 : 4,
      indentSeq: r() < 0.5,
      lineWidth: 0,
      defaultStringType: (['PLAIN', 'QUOTE_SINGLE', 'QUOTE_DOUBLE'] as const)[Math.floor(r() * 3)]!,
    });
    const indent = r() < 0.5 ? '' : '  ';
    const t0 = text
      .split('\n')
      .map((l) => (l ? indent + l : l))
      .join('\n');
    if (check(t0, `seed ${seed}`)) taken++;
    let t = t0;
    for (let m = 0; m < 3; m++) {
      const at = Math.floor(r() * (t.length + 1));
      t =
        r() < 0.6
          ? t.slice(0, at) + pieces[Math.floor(r() * pieces.length)]! + t.slice(at)
          : t.slice(0, at) + t.slice(at + 1 + Math.floor(r() * 2));
      check(t, `seed ${seed} mutation ${m}`);
    }
  }
  assert.ok(taken > 1000, `most written documents are in the subset (${taken} of 3000)`);
});
