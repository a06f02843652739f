/**
 * A reload parses only the services it has not seen (control/yaml-items.ts, issue 37): whatever
 * the file, the value is the one yaml's whole parse gives — items cut out and cached, or the
 * fallback to a whole parse where a cut could be wrong.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { cutServices, parseConfigYaml } from '../../control/yaml-items';

const ROOT = join(__dirname, '..', '..', '..');

const FILES: [string, string, boolean][] = [
  ['the example configuration', readFileSync(join(ROOT, 'uvs.example.yaml'), 'utf8'), true],
  [
    'items indented, comments and blank lines between and inside, keys after',
    'dataplane:\n  vipCidrs: [10.0.0.0/24]\nservices:   # the services\n  - protocol: tcp\n    address: 10.0.0.1\n\n    # a comment\n    port: 80\n    realServers:\n      - address: 10.1.0.1\n        port: 8080\n  # between\n  - protocol: udp\n    address: 10.0.0.1\n    port: 53\n    realServers: []\nlog:\n  level: info\n',
    true,
  ],
  ['items at column 0', 'services:\n- protocol: tcp\n  port: 1\n- protocol: udp\n  port: 2\napi: {socket: /x}\n', true],
  ['a multi-line string in an item', 'services:\n  - name: |\n      first line\n      - not an item\n    port: 1\n  - port: 2\n', true],
  ['anchors and aliases: whole parse', 'hc: &hc {type: tcp}\nservices:\n  - healthCheck: *hc\n  - healthCheck: *hc\n', false],
  ['a flow sequence: whole parse', 'services: [{port: 1}, {port: 2}]\n', false],
  ['no services', 'dataplane:\n  vipCidrs: [10.0.0.0/24]\n', false],
  ['a tag: whole parse', 'services:\n  - port: !!str 80\n', false],
];

test('the value is the whole parse’s, cut or not', () => {
  for (const [what, text, cut] of FILES) {
    assert.equal(cutServices(text) !== null, cut, `${what}: cut`);
    assert.deepEqual(parseConfigYaml(text), parse(text), what);
    assert.deepEqual(parseConfigYaml(text), parse(text), `${what}, from the cache`);
  }
});

test('a changed item is parsed again; unchanged ones come from the last parse', () => {
  const doc = (w: number) => ({
    dataplane: { vipCidrs: ['10.0.0.0/16'] },
    services: Array.from({ length: 50 }, (_, i) => ({
      protocol: 'tcp',
      address: '10.0.0.1',
      port: 1000 + i,
      realServers: [{ address: '10.1.0.1', port: 80, weight: i === 7 ? w : 1 }],
    })),
  });
  const a = parseConfigYaml(stringify(doc(1))) as { services: unknown[] };
  const b = parseConfigYaml(stringify(doc(5))) as { services: { realServers: { weight: number }[] }[] };
  assert.deepEqual(b, doc(5));
  assert.equal(b.services[0], a.services[0], 'an unchanged item: the value parsed last time');
  assert.notEqual(b.services[7], a.services[7], 'the changed item: parsed again');
  assert.equal(b.services[7]!.realServers[0]!.weight, 5);
});

test('an item that does not parse: the whole parse’s error, with the file’s line numbers', () => {
  const text = 'services:\n  - port: 1\n  - port: [1, 2\n    x: 3\n';
  let whole = '';
  try {
    parse(text);
  } catch (e) {
    whole = (e as Error).message;
  }
  assert.ok(whole, 'yaml refuses it');
  assert.throws(
    () => parseConfigYaml(text),
    (e: Error) => e.message === whole,
  );
});
