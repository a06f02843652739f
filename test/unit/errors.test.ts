import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DROP_NAMES } from '../../conntrack/layout';
import { ERRORS } from '../../control/errors';

test('docs/errors.md lists every error code with its HTTP status, and nothing else', () => {
  const doc = readFileSync(join(__dirname, '..', '..', '..', 'docs', 'errors.md'), 'utf8');
  const rows = [...doc.matchAll(/^\| `(UVS_ERR_[A-Z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]);
  const expected = Object.entries(ERRORS).map(([code, e]) => [code, e.status]);
  assert.deepEqual(rows.sort(), expected.sort());
});

test('docs/errors.md lists every drop reason, in the order of the counters, and nothing else', () => {
  const doc = readFileSync(join(__dirname, '..', '..', '..', 'docs', 'errors.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Drop reasons'));
  const rows = [...section.matchAll(/^\| `([a-z0-9_]+)` \|/gm)].map((m) => m[1]);
  assert.deepEqual(rows, [...DROP_NAMES]);
});
