/**
 * scripts/check-imports.mjs (part of `npm run lint`) on small fixture trees: it refuses an import
 * cycle (type-only imports included) and an import out of conntrack/ or net/ into another product
 * folder, tolerates what the allowlist names, and refuses an allowlist line that no longer matches.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const SCRIPT = join(__dirname, '..', '..', '..', 'scripts', 'check-imports.mjs');

function check(files: Record<string, string>): { code: number | null; out: string } {
  const root = mkdtempSync(join(tmpdir(), 'uvs-check-imports-'));
  try {
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    const r = spawnSync(process.execPath, [SCRIPT, '--root', root], { encoding: 'utf8' });
    return { code: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const LAYERED = {
  'net/addr.ts': 'export const parse = (s: string) => s;\n',
  'conntrack/table.ts': "import { parse } from '../net/addr';\nexport const t = parse('x');\n",
  'lb/processor.ts': "import { t } from '../conntrack/table';\nimport { parse } from '../net/addr';\nexport const p = [t, parse('y')];\n",
  'control/daemon.ts': "import { p } from '../lb/processor';\nexport const d = () => import('../lab/cli').then(() => p);\n",
  'lab/cli.ts': "import { t } from '../conntrack/table';\nexport const c = t;\n",
};

test('a tree whose imports keep the layers and have no cycle passes', () => {
  const r = check(LAYERED);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /5 product files, no cycle, layers kept/);
});

test('conntrack/ importing lb/ and net/ importing conntrack/ are refused, with file and line', () => {
  const r = check({
    ...LAYERED,
    'conntrack/table.ts': "import { parse } from '../net/addr';\nimport type { p } from '../lb/processor';\nexport const t = parse('x');\n",
    'net/addr.ts': "export const parse = (s: string) => s;\nexport const v = require('../conntrack/layout');\n",
    'conntrack/layout.ts': 'export const E = 1;\n',
  });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /conntrack\/table\.ts:2: conntrack\/ may import only conntrack\/, net\/, not lb\/processor\.ts \(type-only import\)/);
  assert.match(r.out, /net\/addr\.ts:2: net\/ may import only net\/, not conntrack\/layout\.ts/);
});

test('an import cycle is refused even when one of its imports is type-only or dynamic', () => {
  const r = check({
    ...LAYERED,
    'lab/cli.ts': "import type { d } from '../control/daemon';\nexport type C = typeof d;\n",
  });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /import cycle among 2 file\(s\): control\/daemon\.ts, lab\/cli\.ts/);
});

test('allowlisted violations pass; an allowlist line that no longer matches fails', () => {
  const bad = {
    ...LAYERED,
    'conntrack/table.ts': "import { p } from '../lb/processor';\nexport const t = p;\n",
  };
  // conntrack/table → lb/processor → conntrack/table: one layer break and one cycle.
  const allow = 'edge conntrack/table.ts -> lb/processor.ts\ncycle lb/processor.ts conntrack/table.ts\n';
  const ok = check({ ...bad, 'scripts/import-allowlist.txt': `# temporary\n${allow}` });
  assert.equal(ok.code, 0, ok.out);
  assert.match(ok.out, /2 TEMPORARILY allowlisted/);
  const stale = check({ ...LAYERED, 'scripts/import-allowlist.txt': allow });
  assert.equal(stale.code, 1, stale.out);
  assert.match(stale.out, /allowlisted import no longer found.*edge conntrack\/table\.ts -> lb\/processor\.ts/);
  assert.match(stale.out, /allowlisted cycle no longer found/);
});

test('a product module importing test code is refused unless tsconfig.build.json excludes it from the product build', () => {
  const withBench = {
    ...LAYERED,
    'test/helpers/packets.ts': 'export const tcp = () => new Uint8Array(40);\n',
    'perf/bench.ts': "import { tcp } from '../test/helpers/packets';\nexport const b = tcp();\n",
  };
  const r = check(withBench);
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /perf\/bench\.ts:1: a product module imports test code \(test\/helpers\/packets\.ts\)/);
  const excluded = check({
    ...withBench,
    'tsconfig.build.json': '// the product\n{ "include": ["perf/**/*.ts"], "exclude": ["perf/bench.ts"] }\n',
  });
  assert.equal(excluded.code, 0, excluded.out);
});
