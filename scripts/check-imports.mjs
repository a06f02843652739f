#!/usr/bin/env node
// Import structure of the product modules (part of `npm run lint`). Rules:
//   1. No import cycle among product modules. Type-only imports count: a circle of types is still
//      a circle of concepts (api ↔ daemon ↔ metrics was one), and breaking it later is harder.
//   2. Layers: `net/` imports nothing from the other product folders; `conntrack/` imports only
//      `conntrack/` and `net/` (the connection table knows addresses and packet bytes, not the
//      packet path, the control plane or the schedulers).
//   3. The product build ships no test code: a product module imports nothing from `test/`, unless
//      tsconfig.build.json's "exclude" names it (perf/packet-path.ts, the benchmark built on the
//      tests' packet builders, compiles with the tests). Exclude entries are exact paths here.
// Tests (`test/`) may import anything and are not walked. Imports of node built-ins and npm
// packages are ignored. Static imports, `export … from`, `import type`, dynamic `import()` and
// `require()` all count. Uses the TypeScript parser the build already has (no extra dependency).
//
// The rules hold on main with no exception (issue 14). scripts/import-allowlist.txt, absent, may
// name a violation to tolerate while its fix is being merged; an allowlisted violation that no
// longer occurs is an error too, so such a list can only shrink. Keep the file absent.
//
// Usage: node scripts/check-imports.mjs [--graph] [--root DIR]
//   --graph prints every product edge; --root checks another tree (the unit test's fixtures).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const rootArg = process.argv.indexOf('--root');
const ROOT =
  rootArg > 0 && process.argv[rootArg + 1] ? resolve(process.argv[rootArg + 1]) : resolve(dirname(fileURLToPath(import.meta.url)), '..');
const PRODUCT = ['lb', 'conntrack', 'schedulers', 'control', 'net', 'lab', 'perf'];
const ALLOWED_FOLDERS = {
  net: ['net'],
  conntrack: ['conntrack', 'net'],
};
const ALLOWLIST = join(ROOT, 'scripts', 'import-allowlist.txt');

/** tsconfig.build.json's "exclude": product files compiled with the tests only. */
function buildExcluded() {
  const file = join(ROOT, 'tsconfig.build.json');
  if (!existsSync(file)) return new Set();
  const { config, error } = ts.readConfigFile(file, ts.sys.readFile);
  if (error) throw new Error(`tsconfig.build.json: ${ts.flattenDiagnosticMessageText(error.messageText, ' ')}`);
  return new Set(config.exclude ?? []);
}
const BUILD_EXCLUDED = buildExcluded();

/** Every .ts file under the product folders, as repository-relative paths with '/' separators. */
function productFiles() {
  const out = [];
  const walk = (dir) => {
    for (const name of readdirSync(join(ROOT, dir)).sort()) {
      const rel = `${dir}/${name}`;
      const st = statSync(join(ROOT, rel));
      if (st.isDirectory()) walk(rel);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(rel);
    }
  };
  for (const d of PRODUCT) if (existsSync(join(ROOT, d))) walk(d);
  return out;
}

/** Module specifiers of one file: [specifier, typeOnly, line]. */
function importsOf(file) {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const found = [];
  const add = (lit, typeOnly) => {
    if (lit && ts.isStringLiteralLike(lit)) {
      found.push([lit.text, typeOnly, sf.getLineAndCharacterOfPosition(lit.getStart(sf)).line + 1]);
    }
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const typeOnly =
        !!clause &&
        (clause.isTypeOnly ||
          (!clause.name &&
            !!clause.namedBindings &&
            ts.isNamedImports(clause.namedBindings) &&
            clause.namedBindings.elements.length > 0 &&
            clause.namedBindings.elements.every((e) => e.isTypeOnly)));
      add(node.moduleSpecifier, typeOnly);
    } else if (ts.isExportDeclaration(node)) {
      if (node.moduleSpecifier) add(node.moduleSpecifier, node.isTypeOnly);
    } else if (ts.isImportEqualsDeclaration(node)) {
      if (ts.isExternalModuleReference(node.moduleReference)) add(node.moduleReference.expression, node.isTypeOnly);
    } else if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const isImport = callee.kind === ts.SyntaxKind.ImportKeyword;
      const isRequire = ts.isIdentifier(callee) && callee.text === 'require';
      if ((isImport || isRequire) && node.arguments.length === 1) add(node.arguments[0], false);
    } else if (ts.isImportTypeNode(node)) {
      // `import('./x').T` in a type position
      const arg = node.argument;
      if (ts.isLiteralTypeNode(arg)) add(arg.literal, true);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

/** Resolves a relative specifier to a product file, or null (package, built-in, non-product). */
function resolveSpec(from, spec) {
  if (!spec.startsWith('.')) return null;
  const base = join(dirname(join(ROOT, from)), spec);
  for (const cand of [base, `${base}.ts`, join(base, 'index.ts')]) {
    if (cand.endsWith('.ts') && existsSync(cand)) return relative(ROOT, cand).split('\\').join('/');
  }
  if (spec.endsWith('.js')) {
    const ts_ = `${base.slice(0, -3)}.ts`;
    if (existsSync(ts_)) return relative(ROOT, ts_).split('\\').join('/');
  }
  return undefined; // relative but not found: reported
}

const folderOf = (file) => file.split('/')[0];

/** Strongly connected components (Tarjan, iterative) with more than one file, or a self-import. */
function cycles(nodes, edges) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const onStack = new Set();
  const stack = [];
  const out = [];
  for (const root of nodes) {
    if (idx.has(root)) continue;
    const work = [[root, 0]];
    idx.set(root, index);
    low.set(root, index);
    index++;
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const [v, i] = frame;
      const succ = [...(edges.get(v)?.keys() ?? [])];
      if (i < succ.length) {
        frame[1]++;
        const w = succ[i];
        if (!idx.has(w)) {
          idx.set(w, index);
          low.set(w, index);
          index++;
          stack.push(w);
          onStack.add(w);
          work.push([w, 0]);
        } else if (onStack.has(w)) {
          low.set(v, Math.min(low.get(v), idx.get(w)));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1][0];
        low.set(parent, Math.min(low.get(parent), low.get(v)));
      }
      if (low.get(v) === idx.get(v)) {
        const comp = [];
        let w;
        do {
          w = stack.pop();
          onStack.delete(w);
          comp.push(w);
        } while (w !== v);
        if (comp.length > 1 || edges.get(v)?.has(v)) out.push(comp.sort());
      }
    }
  }
  return out;
}

/** One shortest circle through the component's first file, for the message. */
function circleIn(comp, edges) {
  const inComp = new Set(comp);
  const start = comp[0];
  const prev = new Map([[start, null]]);
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift();
    for (const w of edges.get(v)?.keys() ?? []) {
      if (!inComp.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let u = v; u !== start; u = prev.get(u)) path.splice(1, 0, u);
        return [...path, start];
      }
      if (!prev.has(w)) {
        prev.set(w, v);
        queue.push(w);
      }
    }
  }
  return comp;
}

function readAllowlist() {
  const edges = new Set();
  const cyc = new Set();
  if (!existsSync(ALLOWLIST)) return { edges, cyc };
  for (const raw of readFileSync(ALLOWLIST, 'utf8').split('\n')) {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') continue;
    const m = /^(edge|cycle)\s+(.+)$/.exec(line);
    if (!m) throw new Error(`${relative(ROOT, ALLOWLIST)}: cannot read line: ${raw}`);
    if (m[1] === 'edge') edges.add(m[2].replace(/\s+/g, ' '));
    else cyc.add(m[2].split(/\s+/).sort().join(' '));
  }
  return { edges, cyc };
}

const files = productFiles();
const edges = new Map(); // file → Map(target → {typeOnly, line})
const problems = [];
const testImports = []; // [file, target, line]: product modules importing test code
for (const f of files) {
  const m = new Map();
  for (const [spec, typeOnly, line] of importsOf(f)) {
    const target = resolveSpec(f, spec);
    if (target === null) continue;
    if (target === undefined) {
      problems.push(`${f}:${line}: import '${spec}' resolves to no .ts file`);
      continue;
    }
    if (folderOf(target) === 'test' && !BUILD_EXCLUDED.has(f)) testImports.push([f, target, line]);
    if (!PRODUCT.includes(folderOf(target))) continue;
    const had = m.get(target);
    m.set(target, { typeOnly: (had ? had.typeOnly : true) && typeOnly, line: had ? had.line : line });
  }
  edges.set(f, m);
}

if (process.argv.includes('--graph')) {
  for (const [f, m] of edges) for (const [t, e] of m) console.log(`${f} -> ${t}${e.typeOnly ? ' (type)' : ''}`);
}

const allow = readAllowlist();
const seenEdges = new Set();
const seenCycles = new Set();

for (const [f, m] of edges) {
  const allowed = ALLOWED_FOLDERS[folderOf(f)];
  if (!allowed) continue;
  for (const [t, e] of m) {
    if (allowed.includes(folderOf(t))) continue;
    const key = `${f} -> ${t}`;
    if (allow.edges.has(key)) {
      seenEdges.add(key);
      continue;
    }
    problems.push(
      `${f}:${e.line}: ${folderOf(f)}/ may import only ${allowed.map((a) => `${a}/`).join(', ')}, not ${t}${e.typeOnly ? ' (type-only import)' : ''}`,
    );
  }
}

for (const [f, t, line] of testImports) {
  const key = `${f} -> ${t}`;
  if (allow.edges.has(key)) {
    seenEdges.add(key);
    continue;
  }
  problems.push(`${f}:${line}: a product module imports test code (${t}), which tsconfig.build.json would then ship`);
}

for (const comp of cycles(files, edges)) {
  const key = comp.join(' ');
  if (allow.cyc.has(key)) {
    seenCycles.add(key);
    continue;
  }
  const circle = circleIn(comp, edges);
  const hops = [];
  for (let i = 0; i + 1 < circle.length; i++) {
    const e = edges.get(circle[i]).get(circle[i + 1]);
    hops.push(`${circle[i]}:${e.line}${e.typeOnly ? ' (type)' : ''}`);
  }
  problems.push(
    `import cycle among ${comp.length} file(s): ${comp.join(', ')}\n    e.g. ${hops.join(' -> ')} -> ${circle[0]}` +
      `\n    (to allowlist, temporarily: "cycle ${key}")`,
  );
}

for (const key of allow.edges)
  if (!seenEdges.has(key)) problems.push(`allowlisted import no longer found, remove it from scripts/import-allowlist.txt: edge ${key}`);
for (const key of allow.cyc)
  if (!seenCycles.has(key))
    problems.push(`allowlisted cycle no longer found as is, remove or update it in scripts/import-allowlist.txt: cycle ${key}`);

const nAllowed = seenEdges.size + seenCycles.size;
if (problems.length > 0) {
  for (const p of problems) console.error(p);
  console.error(
    `check-imports: ${problems.length} problem(s) in ${files.length} product files${nAllowed ? ` (${nAllowed} more allowlisted)` : ''}`,
  );
  process.exit(1);
}
console.log(
  `check-imports: ${files.length} product files, no cycle, layers kept${nAllowed ? ` (${nAllowed} TEMPORARILY allowlisted in scripts/import-allowlist.txt)` : ''}`,
);
