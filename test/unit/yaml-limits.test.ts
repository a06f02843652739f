import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { checkYamlDepth, depthBound, MAX_YAML_DEPTH, parseYamlBounded, YamlDepthError } from '../../control/yaml-limits';
import { loadConfigFile } from '../../control/config';
import { UvsError } from '../../control/errors';

/** Nesting depth of a parsed value: 0 for a scalar, 1 + the deepest child for a collection. */
const depthOf = (v: unknown): number => (v !== null && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(depthOf)) : 0);

/** Nested n deep, in each style the parser nests (the innermost holds a scalar). */
const styles: Record<string, (n: number) => string> = {
  flow: (n) => `services: ${'['.repeat(n - 1)}1${']'.repeat(n - 1)}\n`,
  'flow maps': (n) => `${'{a: '.repeat(n)}1${'}'.repeat(n)}\n`,
  'indented maps': (n) => Array.from({ length: n }, (_, i) => `${' '.repeat(i)}k${i}:`).join('\n') + ' 1\n',
  'compact sequences': (n) => `${'- '.repeat(n)}x\n`,
  // k0:\n- k1:\n  - k2: … — each sequence at the column of the key it belongs to.
  "sequences at their key's column": (n) => {
    const m = (n - 1) >> 1; // mappings k0…km: 2m + 1 deep
    const lines = ['k0:'];
    for (let i = 1; i <= m; i++) lines.push(`${' '.repeat(2 * (i - 1))}- k${i}:`);
    if (n % 2 === 0) lines.push(`${' '.repeat(2 * m)}- 1`);
    return lines.join('\n') + '\n';
  },
};

test('each style of nesting: MAX_YAML_DEPTH levels pass (and parse as before), one more is refused naming the limit', () => {
  for (const [name, make] of Object.entries(styles)) {
    const ok = make(MAX_YAML_DEPTH);
    assert.equal(depthOf(parse(ok)), MAX_YAML_DEPTH, `${name}: the fixture nests ${MAX_YAML_DEPTH} deep`);
    assert.deepEqual(parseYamlBounded(ok), parse(ok), `${name}: at the limit, parsed as yaml parses it`);
    const deep = make(MAX_YAML_DEPTH + 1);
    assert.equal(depthOf(parse(deep)), MAX_YAML_DEPTH + 1, `${name}: the fixture nests one more`);
    assert.throws(
      () => parseYamlBounded(deep),
      (e: Error) => e instanceof YamlDepthError && e.message.includes(`more than ${MAX_YAML_DEPTH} levels`),
      name,
    );
  }
});

test('thousands of levels deep are refused at once, whatever the style: the scan stops at the limit', (t) => {
  for (const [name, make] of Object.entries(styles)) {
    // 10,000 levels; 2,000 where each level indents further (already 2 M characters).
    const text = Buffer.from(make(name.includes('column') || name.includes('indented') ? 2000 : 10_000)).toString(); // one flat string, as read from a file
    const t0 = process.hrtime.bigint();
    // The scan stops within a line or two of the limit's level, before the rest of the text.
    assert.throws(
      () => checkYamlDepth(text),
      (e: Error) => e instanceof YamlDepthError && Number(/^line (\d+):/.exec(e.message)![1]) <= MAX_YAML_DEPTH + 2,
      name,
    );
    t.diagnostic(
      `${name}: refused in ${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(2)} ms (yaml's parse recurses until its stack overflows: ~100 ms)`,
    );
  }
});

test('brackets and indicators inside scalars, comments and block scalars are not nesting', () => {
  const brackets = '[{'.repeat(200);
  const text = [
    `a: "${brackets}"`,
    `b: '${brackets}'`,
    `c: x${brackets} # ${brackets}`,
    'd: |',
    ...Array.from({ length: 100 }, (_, i) => `${' '.repeat(2 + i)}- ${brackets}:`),
    `e: [ "${brackets}", '${']}'.repeat(200)}', { f: "${brackets}" } ]`,
    '',
  ].join('\n');
  assert.ok(depthBound(text) > MAX_YAML_DEPTH, 'the quick bound cannot tell: the token scan decides');
  assert.deepEqual(parseYamlBounded(text), parse(text));
  assert.equal(depthOf(parse(text)), 3);
});

test('a closing bracket inside a scalar does not hide nesting from the quick bound', () => {
  const text = `a: "${']'.repeat(200)}"\nb: ${'['.repeat(200)}${']'.repeat(200)}\n`;
  assert.ok(depthBound(text) > MAX_YAML_DEPTH);
  assert.throws(() => checkYamlDepth(text), YamlDepthError);
});

test('the example configuration and a large generated one pass; the quick bound spares the large one the token scan', () => {
  const example = readFileSync(join(__dirname, '..', '..', '..', 'uvs.example.yaml'), 'utf8');
  assert.deepEqual(parseYamlBounded(example), parse(example));
  const big = stringify({
    dataplane: { vipCidrs: ['10.96.0.0/16'] },
    services: Array.from({ length: 2000 }, (_, i) => ({
      protocol: 'tcp',
      address: `10.96.${i >> 8}.${i & 255}`,
      port: 80,
      scheduler: 'rr',
      realServers: [1, 2, 3].map((r) => ({ address: `10.1.${r}.${i & 255}`, port: 8080, weight: 1 })),
    })),
  });
  assert.ok(depthBound(big) <= MAX_YAML_DEPTH, `bound ${depthBound(big)}`);
  assert.deepEqual(parseYamlBounded(big), parse(big));
});

test('a configuration file nested too deep is a configuration read error naming the limit', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uvs-yaml-'));
  const f = join(dir, 'uvs.yaml');
  writeFileSync(f, styles.flow!(10_000));
  assert.throws(
    () => loadConfigFile(f),
    (e: Error) =>
      e instanceof UvsError &&
      e.code === 'UVS_ERR_CONFIG_READ' &&
      /not valid YAML: line 1: collections nested more than 64 levels deep \(the limit\)/.test(e.message),
  );
});
