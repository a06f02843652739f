/**
 * control/ has no import circle. The imports of every module are read from the sources (with
 * TypeScript's own pre-parser, `import type` included: a reader follows those the same way) and
 * walked; no path may lead from a control/ module back to itself.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const ROOT = resolve(__dirname, '..', '..', '..');

/** The repo's .ts files under `dir` (repo-relative, '/'-separated). */
function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const rel = `${dir}/${name}`;
    if (statSync(join(ROOT, rel)).isDirectory()) return sources(rel);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [rel] : [];
  });
}

/** The repo files a source imports (relative specifiers only: packages cannot import back). */
function importsOf(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(join(ROOT, file), 'utf8'), true, true);
  const out: string[] = [];
  for (const { fileName } of info.importedFiles) {
    if (!fileName.startsWith('.')) continue;
    const base = resolve(ROOT, dirname(file), fileName);
    const hit = [`${base}.ts`, join(base, 'index.ts')].find((f) => existsSync(f));
    assert.ok(hit, `${file}: import '${fileName}' resolves to no .ts file`);
    out.push(relative(ROOT, hit).split('\\').join('/'));
  }
  return out;
}

/** Every module reachable from `roots`, with its imports. */
function importGraph(roots: string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const todo = [...roots];
  for (let f = todo.pop(); f !== undefined; f = todo.pop()) {
    if (graph.has(f)) continue;
    const deps = importsOf(f);
    graph.set(f, deps);
    todo.push(...deps);
  }
  return graph;
}

/** The import circles of a graph: one path per strongly connected set of modules (Tarjan), as `a → b → a`. */
function circles(graph: Map<string, string[]>): string[] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const set: string[] = [];
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      onStack.delete(w);
      set.push(w);
      if (w === v) break;
    }
    const self = (graph.get(v) ?? []).includes(v);
    if (set.length > 1 || self) found.push(pathThrough(graph, new Set(set), v));
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/** A shortest circle from `start` back to it inside one strongly connected set (breadth first). */
function pathThrough(graph: Map<string, string[]>, set: Set<string>, start: string): string {
  const from = new Map<string, string>();
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    const v = queue[i]!;
    for (const w of graph.get(v) ?? []) {
      if (w === start) {
        const path = [start];
        for (let x: string | undefined = v; x !== undefined && x !== start; x = from.get(x)) path.splice(1, 0, x);
        return [...path, start].join(' → ');
      }
      if (set.has(w) && !from.has(w)) {
        from.set(w, v);
        queue.push(w);
      }
    }
  }
  return start;
}

test('the circle finder finds circles and nothing else', () => {
  const g = new Map<string, string[]>([
    ['a', ['b', 'd']],
    ['b', ['c']],
    ['c', ['a']],
    ['d', ['e']],
    ['e', []],
    ['f', ['f']],
  ]);
  assert.deepEqual(circles(g).sort(), ['a → b → c → a', 'f → f']);
  assert.deepEqual(
    circles(
      new Map([
        ['x', ['y']],
        ['y', []],
      ]),
    ),
    [],
  );
});

test('control/ imports no module that imports it back (type-only imports included)', () => {
  const graph = importGraph(sources('control'));
  // The walk reads real imports (a walk that found none would find no circle either).
  assert.ok(graph.get('control/daemon.ts')?.includes('control/services.ts'));
  assert.ok(graph.get('control/api.ts')?.includes('control/daemon.ts'), 'type-only imports are edges too');
  const throughControl = circles(graph).filter((c) => c.split(' → ').some((f) => f.startsWith('control/')));
  assert.deepEqual(throughControl, [], `import circles:\n${throughControl.join('\n')}`);
});
