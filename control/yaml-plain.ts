/**
 * A parser for the plain subset of YAML a configuration's services are written in — block
 * mappings and sequences of identifier keys and one-line scalars — giving exactly the value the
 * `yaml` library's parse() gives (YAML 1.2, core schema), or `undefined` for anything outside
 * the subset, which the caller then parses with the library. The library reads about 2 MB/s:
 * a reload that replaces one real server in each of 10,000 services spent 3 s of its 4.4 s
 * parsing the changed items (perf/SCALE.md, issue 37); this reads the same items ~20× faster.
 *
 * The subset, everything else refused (undefined):
 *  - lines indented with spaces only; no tab or carriage return anywhere; `#` comment lines and
 *    blank lines anywhere; a comment after a value (` #…`);
 *  - block sequences (`- x`, `-` with the item below), a mapping starting on a dash's line
 *    (`- key: v`), a key's sequence at the key's column or deeper;
 *  - keys made of letters, digits, `_`, `.`, `/` and `-`, starting with a letter or `_`, that the
 *    core schema reads as strings (not `true`, `null`, numbers), each once per mapping;
 *  - one-line scalars: plain (no indicator first, no `: ` inside, not ending in `:`), single
 *    quoted (`''` inside), double quoted without a backslash; resolved as the core schema does
 *    (null, bool, the three int forms, the three float forms, else a string).
 * Refused among others: flow collections (`[a, b]`, `{}`), block scalars (`|`, `>`), multi-line
 * plain or quoted scalars, anchors, aliases, tags, `?` keys, nested compact sequences (`- - x`).
 * test/unit/yaml-plain.test.ts checks it against the library over random documents and texts.
 */

interface Line {
  indent: number;
  text: string;
}

/** Thrown inside: the text is outside the subset. */
class Outside extends Error {}

const out = (): never => {
  throw new Outside();
};

const KEY = /^[A-Za-z_][A-Za-z0-9_./-]*$/;
const NULL = /^(?:~|[Nn]ull|NULL)?$/;
const BOOL = /^(?:[Tt]rue|TRUE|[Ff]alse|FALSE)$/;
const INT_OCT = /^0o[0-7]+$/;
const INT = /^[-+]?[0-9]+$/;
const INT_HEX = /^0x[0-9a-fA-F]+$/;
const FLOAT_NAN = /^(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/;
const FLOAT_EXP = /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$/;
const FLOAT = /^[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)$/;
/** Characters a plain scalar may not start with (`-`, `?`, `:` only before a space, refused here always). */
const PLAIN_FIRST_BAD = /^[-?:,[\]{}#&*!|>'"%@`]/;

/** A plain scalar's value under the core schema (the library's tag order). */
function resolvePlain(s: string): unknown {
  if (NULL.test(s)) return null;
  if (BOOL.test(s)) return s[0] === 't' || s[0] === 'T';
  if (INT_OCT.test(s)) return Number.parseInt(s.substring(2), 8);
  if (INT.test(s)) return Number.parseInt(s, 10);
  if (INT_HEX.test(s)) return Number.parseInt(s.substring(2), 16);
  if (FLOAT_NAN.test(s)) return s.slice(-3).toLowerCase() === 'nan' ? Number.NaN : s[0] === '-' ? -Infinity : Infinity;
  if (FLOAT_EXP.test(s) || FLOAT.test(s)) return Number.parseFloat(s);
  return s;
}

/** What may follow a closed quoted scalar on its line: spaces, then nothing or a comment. */
function restOk(rest: string): boolean {
  const t = rest.trimStart();
  return t === '' || (t[0] === '#' && t.length !== rest.length);
}

/** A one-line scalar (the text after `: ` or `- `, not empty), or Outside. */
function scalar(v: string): unknown {
  const c = v[0];
  if (c === "'") {
    let i = 1;
    let s = '';
    for (;;) {
      const j = v.indexOf("'", i);
      if (j < 0) return out(); // continues on the next line
      s += v.slice(i, j);
      if (v[j + 1] === "'") {
        s += "'";
        i = j + 2;
        continue;
      }
      return restOk(v.slice(j + 1)) ? s : out();
    }
  }
  if (c === '"') {
    const j = v.indexOf('"', 1);
    if (j < 0 || v.includes('\\')) return out();
    return restOk(v.slice(j + 1)) ? v.slice(1, j) : out();
  }
  if (PLAIN_FIRST_BAD.test(v)) return out();
  // A comment starts at ` #`; `: ` or a final `:` would make a mapping.
  const h = v.indexOf(' #');
  const s = (h >= 0 ? v.slice(0, h) : v).trimEnd();
  if (s.includes(': ') || s.endsWith(':')) return out();
  return resolvePlain(s);
}

/** Whether a value text (after `: `) is empty or only a comment. */
function noValue(v: string): boolean {
  return v === '' || v[0] === '#';
}

class Reader {
  i = 0;
  constructor(private readonly lines: Line[]) {}

  get done(): boolean {
    return this.i >= this.lines.length;
  }

  peek(): Line | undefined {
    return this.lines[this.i];
  }

  /** The node whose first line is the next one, at its own indentation. */
  block(): unknown {
    const l = this.peek()!;
    if (isItem(l.text)) return this.seq(l.indent);
    return this.map(l.indent, null);
  }

  /** The value of a key or dash with nothing after it: the deeper (or, for a key, same-column sequence) lines, else null. */
  below(col: number, sameColSeq: boolean): unknown {
    const n = this.peek();
    if (!n) return null;
    if (n.indent > col) return this.block();
    if (sameColSeq && n.indent === col && isItem(n.text)) return this.seq(col);
    return null;
  }

  seq(col: number): unknown[] {
    const items: unknown[] = [];
    for (let l = this.peek(); l && l.indent === col && isItem(l.text); l = this.peek()) {
      this.i++;
      const after = l.text.slice(1);
      const rest = after.trimStart();
      if (noValue(rest)) {
        items.push(this.below(col, false));
        continue;
      }
      if (isItem(rest)) return out(); // `- - x`
      const k = keyOf(rest);
      if (k !== null) items.push(this.map(col + 1 + (after.length - rest.length), rest));
      else {
        items.push(scalar(rest));
        if ((this.peek()?.indent ?? -1) > col) return out(); // a plain scalar going on below
      }
    }
    const n = this.peek();
    if (n && n.indent > col) return out();
    return items;
  }

  /** A block mapping at column `col`; `first`: its first entry's text when it starts on a dash's line. */
  map(col: number, first: string | null): Record<string, unknown> {
    const m: Record<string, unknown> = {};
    const seen = new Set<string>();
    let text = first;
    for (;;) {
      if (text === null) {
        const l = this.peek();
        if (!l || l.indent !== col || isItem(l.text)) break;
        this.i++;
        text = l.text;
      }
      const k = keyOf(text);
      if (k === null || seen.has(k.key)) return out();
      seen.add(k.key);
      if (noValue(k.value)) m[k.key] = this.below(col, true);
      else {
        m[k.key] = scalar(k.value);
        if ((this.peek()?.indent ?? -1) > col) return out(); // a plain scalar going on below
      }
      text = null;
    }
    const n = this.peek();
    if (n && n.indent > col) return out();
    return m;
  }
}

function isItem(t: string): boolean {
  return t[0] === '-' && (t.length === 1 || t[1] === ' ');
}

/** `key: value` or `key:` with a key of the subset: the key and the value's text (trimmed), else null. */
function keyOf(t: string): { key: string; value: string } | null {
  let j = t.indexOf(': ');
  let value: string;
  if (j < 0) {
    if (!t.endsWith(':')) return null;
    j = t.length - 1;
    value = '';
  } else value = t.slice(j + 2).trim();
  const key = t.slice(0, j);
  if (!KEY.test(key) || key === '__proto__' || typeof resolvePlain(key) !== 'string') return out();
  return { key, value };
}

/**
 * The value of a block sequence of exactly one item (a services item as control/yaml-items.ts
 * cuts it), as yaml's parse() gives it, or undefined outside the subset (then parse it with the
 * library: it also says what is wrong).
 */
export function parsePlainItem(text: string): unknown {
  if (text.includes('\t') || text.includes('\r')) return undefined;
  const lines: Line[] = [];
  for (const raw of text.split('\n')) {
    const t = raw.trimStart();
    if (t === '' || t[0] === '#') continue;
    lines.push({ indent: raw.length - t.length, text: t.trimEnd() });
  }
  if (lines.length === 0 || !isItem(lines[0]!.text)) return undefined;
  try {
    const r = new Reader(lines);
    const items = r.seq(lines[0]!.indent);
    return r.done && items.length === 1 ? items[0] : undefined;
  } catch (e) {
    if (e instanceof Outside) return undefined;
    throw e;
  }
}
