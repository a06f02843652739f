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
import { mulberry32 } from '../helpers/rng';

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

/** A number in [0, 1) per call, seeded. */
function rng(seed: number): () => number {
  const next = mulberry32(seed);
  return () => next() / 4294967296;
}

/** yaml's whole parse, or its error message. */
function wholeParse(text: string): { value?: unknown; error?: string } {
  try {
    return { value: parse(text) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

function ours(text: string): { value?: unknown; error?: string } {
  try {
    return { value: parseConfigYaml(text) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

test('a file changed a little at a time gives the whole parse’s value or error after every change (500 random sequences)', () => {
  // Edits a reload sees (a weight, a server added or removed, a service added or removed, a key
  // after the services) and edits that break the cut (a line out of the sequence, an anchor, a
  // tab, a flow item, a comment, an unterminated bracket, characters anywhere).
  const pieces = ['- ', '-', '  ', ' ', '\n', ': ', '#', '&a ', '*a', '\t', '[', ']', '{', '}', 'x', '7', "'", '"', 'log: {level: warn}\n'];
  for (let seed = 1; seed <= 500; seed++) {
    const r = rng(seed);
    const doc = {
      dataplane: { vipCidrs: ['10.0.0.0/16'] },
      services: Array.from({ length: 3 + Math.floor(r() * 6) }, (_, i) => ({
        protocol: 'tcp',
        address: '10.0.0.1',
        port: 1000 + i,
        realServers: Array.from({ length: 1 + Math.floor(r() * 3) }, (_, j) => ({ address: `10.1.0.${j + 1}`, weight: 1 })),
      })),
      ...(r() < 0.5 ? { log: { level: 'info' } } : {}),
    };
    let text = stringify(doc, { indent: 2, indentSeq: r() < 0.5 });
    assert.deepEqual(ours(text), wholeParse(text), `seed ${seed}: the first text`);
    for (let step = 0; step < 12; step++) {
      const k = r();
      if (k < 0.4) {
        // A structural edit through the value: a weight, a server, a service.
        const v = wholeParse(text).value as typeof doc | undefined;
        if (!v || !Array.isArray(v.services) || v.services.length === 0) break;
        const s = v.services[Math.floor(r() * v.services.length)]!;
        if (!s || !Array.isArray(s.realServers)) break;
        const w = r();
        if (w < 0.4 && s.realServers[0]) s.realServers[0].weight = Math.floor(r() * 9);
        else if (w < 0.6) s.realServers.push({ address: `10.2.0.${Math.floor(r() * 250)}`, weight: 2 });
        else if (w < 0.75) s.realServers.pop();
        else if (w < 0.9) v.services.splice(Math.floor(r() * v.services.length), 0, { ...s, port: 2000 + Math.floor(r() * 999) });
        else v.services.splice(Math.floor(r() * v.services.length), 1);
        text = stringify(v, { indent: 2, indentSeq: r() < 0.5 });
      } else {
        // A few characters put in or taken out anywhere.
        const at = Math.floor(r() * (text.length + 1));
        text =
          r() < 0.6
            ? text.slice(0, at) + pieces[Math.floor(r() * pieces.length)]! + text.slice(at)
            : text.slice(0, at) + text.slice(at + 1 + Math.floor(r() * 3));
      }
      assert.deepEqual(ours(text), wholeParse(text), `seed ${seed} step ${step}:\n${text}`);
      assert.deepEqual(ours(text), wholeParse(text), `seed ${seed} step ${step}, the same text again`);
    }
  }
});

test('a small change re-parses only the items it touches; the others and the rest keep their values', () => {
  const doc = (w: number) => ({
    dataplane: { vipCidrs: ['10.0.0.0/16'] },
    services: Array.from({ length: 40 }, (_, i) => ({
      protocol: 'tcp',
      address: '10.0.0.1',
      port: 1000 + i,
      realServers: [{ address: '10.1.0.1', weight: i === 20 ? w : 1 }],
    })),
    log: { level: 'info' },
  });
  const a = parseConfigYaml(stringify(doc(1))) as { services: unknown[]; dataplane: unknown };
  const b = parseConfigYaml(stringify(doc(3))) as { services: unknown[]; dataplane: unknown };
  assert.deepEqual(b, doc(3));
  assert.equal(b.dataplane, a.dataplane, 'the rest of the file: its value from the last parse');
  assert.equal(b.services[0], a.services[0]);
  assert.equal(b.services[39], a.services[39]);
  assert.notEqual(b.services[20], a.services[20], 'the changed item: parsed again');
  assert.notEqual(b.services, a.services, 'a list of its own');
});

test('nesting too deep inside a changed item is refused as in a whole parse', () => {
  const base = 'services:\n  - port: 1\n  - port: 2\n    x: 1\n  - port: 3\nlog: {level: info}\n';
  parseConfigYaml(base);
  const deep = base.replace('x: 1', `x: ${'['.repeat(200)}${']'.repeat(200)}`);
  assert.throws(() => parseConfigYaml(deep), /nested more than 64 levels/);
});

test('a large file (many compare chunks): changes near its start, middle and end give the whole parse’s value', () => {
  const doc = {
    dataplane: { vipCidrs: ['10.0.0.0/16'] },
    services: Array.from({ length: 1500 }, (_, i) => ({
      protocol: 'tcp',
      address: '10.0.0.1',
      port: 1000 + i,
      realServers: [{ address: '10.1.0.1', weight: 1 }],
    })),
    log: { level: 'info' },
  };
  parseConfigYaml(stringify(doc));
  for (const i of [0, 1, 700, 749, 750, 1498, 1499]) {
    doc.services[i]!.realServers[0]!.weight = 2 + (i % 7);
    const text = stringify(doc);
    assert.ok(text.length > 3 * 32768, 'several 64 KB chunks of UTF-16');
    assert.deepEqual(parseConfigYaml(text), parse(text), `service ${i} changed`);
  }
});
