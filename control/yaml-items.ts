/**
 * A reload parses only the services that changed (issue 37). The `yaml` library took 1.5–3 s for
 * a file of 10,000 services × 10 real servers (6 MB), on every reload, however small the change.
 *
 * Most configurations hold `services:` as a block sequence at the top level: each item starts
 * with `- ` at one column and runs until the next such line or the next top-level key. Those
 * items are cut out of the text; an item whose text is the same as in the last parse gets the
 * value parsed then, the others are parsed alone (an indented sequence of one), and the rest of
 * the file is parsed with an empty `services:`. The value is the one a whole parse gives.
 *
 * A file that differs from the last one only inside its items (the usual reload: a weight, a
 * server, a service) is not even cut whole: the text both share at its start and at its end is
 * found (a native compare), and only the items the difference touches are cut and parsed again
 * — the others, and the rest of the file, keep their values and places. Cutting 6 MB, checking
 * its nesting depth and looking its 10,000 items up cost ~90 ms a reload; this costs the
 * compare. Only text that is parsed now is checked for depth and unsafe constructs: what is kept
 * passed those checks when it was parsed.
 *
 * Anything this cannot cut with certainty falls back to one whole parse, as before: anchors or
 * aliases (`&x`, `*x`: an item could refer to another), tags, several documents, a flow sequence
 * (`services: [...]`), tabs in indentation, or an item that does not parse alone (the whole
 * parse then reports the error with the file's own line numbers). The cache keeps only the last
 * parse's items; a cached value is shared by reloads, so nothing may change it in place (the
 * configuration is validated into new objects, and edits work on copies).
 */
import { parse } from 'yaml';
import { checkYamlDepth } from './yaml-limits';
import { parsePlainItem } from './yaml-plain';

interface Cut {
  head: string;
  items: string[];
}

/** Lines that could make a cut wrong: anchors, aliases, tags, directives, document markers. */
const UNSAFE = /(^|[\s[{,:-])[&*!][^\s]|^%|^---|^\.\.\.|\t/m;

/** Where a text's services items are: offsets of each item's first character, and where the sequence ends. */
interface Spans {
  /** Offset of the line after `services:`. */
  start: number;
  /** The items' columns. */
  col: number;
  /** starts[k]: item k's first character; the item's text runs to the newline before starts[k + 1] (or `end`). */
  starts: number[];
  /** Offset of the first line after the sequence (the next top-level key), or the text's length. */
  end: number;
}

/**
 * The items of the block sequence at column `col` (or the first item's, when -1) in
 * text[from, to): their starts, and the offset of the first line that ends the sequence. null
 * when the first non-blank line is not an item.
 */
function scan(text: string, from: number, to: number, col: number): { col: number; starts: number[]; end: number } | null {
  const starts: number[] = [];
  let pos = from;
  while (pos < to) {
    let nl = text.indexOf('\n', pos);
    if (nl < 0 || nl >= to) nl = to;
    let i = pos;
    while (i < nl && text.charCodeAt(i) === 0x20) i++;
    const indent = i - pos;
    const c = text.charCodeAt(i);
    const item = c === 0x2d && (i + 1 === nl || text.charCodeAt(i + 1) === 0x20); // `- ` or a bare `-`
    if (i === nl || c === 0x23) {
      // blank or comment: part of the item it follows
    } else {
      if (col < 0) {
        if (!item) return null; // not a block sequence (flow, or empty)
        col = indent;
      }
      if (indent < col || (indent === col && !item)) return { col, starts, end: pos }; // the next key
      if (indent === col) starts.push(pos);
    }
    pos = nl + 1;
  }
  return { col, starts, end: Math.min(pos, to) };
}

function spansOf(text: string): Spans | null {
  const m = /^services:[ ]*(#.*)?\n/m.exec(text);
  if (!m) return null;
  const start = m.index + m[0].length;
  const s = scan(text, start, text.length, -1);
  if (!s || s.starts.length === 0) return null;
  return { start, ...s };
}

/** Item k's text: from its start to the newline before the next item (or the sequence's end). */
function itemText(text: string, sp: { starts: number[]; end: number }, k: number): string {
  const e = k + 1 < sp.starts.length ? sp.starts[k + 1]! - 1 : sp.end > 0 && text.charCodeAt(sp.end - 1) === 0x0a ? sp.end - 1 : sp.end;
  return text.slice(sp.starts[k], e);
}

/** The services items of `text`, or null when the fast path does not apply. */
export function cutServices(text: string): Cut | null {
  if (UNSAFE.test(text)) return null;
  const sp = spansOf(text);
  if (!sp) return null;
  const items = sp.starts.map((_, k) => itemText(text, sp, k));
  return { head: `${text.slice(0, sp.start)}${sp.end < text.length ? `\n${text.slice(sp.end)}` : ''}`, items };
}

/** The last parse that was cut: its text, where its items are, their values, and the rest's value (services: null). */
interface Last {
  text: string;
  /** The text as UTF-16 code units, for the compare (made once per parse). */
  buf: Buffer;
  spans: Spans;
  values: unknown[];
  head: Record<string, unknown>;
}

let last: Last | null = null;

/** Item text → value of the last parse (the whole cut's cache), built from `last` when a whole cut needs it. */
function lastByText(): Map<string, unknown> {
  const m = new Map<string, unknown>();
  if (last) for (let k = 0; k < last.values.length; k++) m.set(itemText(last.text, last.spans, k), last.values[k]);
  return m;
}

/** One item parsed alone (the plain subset without the library: yaml-plain.ts), or undefined when it does not parse as exactly one item. */
function parseItem(item: string): unknown {
  const plain = parsePlainItem(item);
  if (plain !== undefined) return plain;
  const one = parse(item) as unknown;
  return Array.isArray(one) && one.length === 1 ? one[0] : undefined;
}

/** Bytes compared at once while looking for the first difference. */
const CHUNK = 1 << 16;

/** Length of the text a and b share at their start (or, with `fromEnd`, at their end), at most `max`. */
function shared(a: Buffer, b: Buffer, max: number, fromEnd: boolean): number {
  // Whether the first (last) n + m bytes are equal, knowing the first (last) n are: native compares.
  const same = (n: number, m: number) =>
    fromEnd ? a.compare(b, b.length - n - m, b.length - n, a.length - n - m, a.length - n) === 0 : a.compare(b, n, n + m, n, n + m) === 0;
  let n = 0;
  while (n < max) {
    const m = Math.min(CHUNK, max - n);
    if (same(n, m)) {
      n += m;
      continue;
    }
    // The difference is in this chunk: halve it.
    let lo = 0;
    let hi = m - 1;
    while (lo < hi) {
      const k = (lo + hi + 1) >>> 1;
      if (same(n, k)) lo = k;
      else hi = k - 1;
    }
    return n + lo;
  }
  return n;
}

/**
 * The value when `text` differs from the last parse's only inside its items, or null. The
 * compare runs on UTF-16 code units written as bytes two by two: a difference anywhere is seen,
 * and offsets stay those of the string.
 */
function parseChanged(text: string): unknown {
  const l = last;
  if (!l) return null;
  const a = l.buf;
  const b = Buffer.from(text, 'utf16le');
  const p = shared(a, b, Math.min(a.length, b.length), false) >>> 1;
  if (p === text.length && p === l.text.length) return { ...l.head, services: l.values.slice() }; // the same file
  const s = shared(a, b, Math.min(a.length, b.length) - p * 2, true) >>> 1;
  const oldEnd = l.text.length - s;
  const sp = l.spans;
  // Strictly inside the items: a change at their edges may touch `services:` or the key after.
  if (p <= sp.starts[0]! || oldEnd >= sp.end) return null;
  const delta = text.length - l.text.length;
  // The items the change touches, with one on each side (a change at an item's first character
  // may belong to the one before; one at its last newline, to the one after).
  let k0 = 0;
  while (k0 + 1 < sp.starts.length && sp.starts[k0 + 1]! <= p) k0++;
  let k1 = k0;
  while (k1 + 1 < sp.starts.length && sp.starts[k1 + 1]! <= oldEnd) k1++;
  k0 = Math.max(0, k0 - 1);
  k1 = Math.min(sp.starts.length - 1, k1 + 1);
  const from = sp.starts[k0]!;
  const oldTo = k1 + 1 < sp.starts.length ? sp.starts[k1 + 1]! : sp.end;
  const to = oldTo + delta;
  const piece = text.slice(from, to);
  if (UNSAFE.test(piece)) return null;
  // The touched items cut again at the sequence's column; the sequence must not end within them.
  const cut = scan(text, from, to, sp.col);
  if (!cut || cut.end !== to || cut.starts[0] !== from) return null;
  checkYamlDepth(piece); // only what is parsed now: the rest passed when it was
  const fresh: unknown[] = [];
  for (let k = 0; k < cut.starts.length; k++) {
    const v = parseItem(itemText(text, { starts: cut.starts, end: to }, k));
    if (v === undefined) return null;
    fresh.push(v);
  }
  const after = sp.starts.slice(k1 + 1).map((x) => x + delta);
  const spans: Spans = { start: sp.start, col: sp.col, starts: [...sp.starts.slice(0, k0), ...cut.starts, ...after], end: sp.end + delta };
  const values = [...l.values.slice(0, k0), ...fresh, ...l.values.slice(k1 + 1)];
  last = { text, buf: b, spans, values, head: l.head };
  return { ...l.head, services: values };
}

/**
 * A reload's parse run on a variant of the last text (a comment line put into its first item),
 * then the cache as it was: the diff path's code compiled before the first real reload (the
 * first reloads after a start took 3–4× the later ones). The variant's value, or null when the
 * last parse was not cut.
 */
export function warmVariant(): unknown {
  const saved = last;
  if (!saved || saved.spans.starts.length === 0) return null;
  const at = saved.text.indexOf('\n', saved.spans.starts[0]!) + 1;
  if (at <= 0 || at >= saved.spans.end) return null;
  try {
    return parseConfigYaml(`${saved.text.slice(0, at)}# uvs warm-up\n${saved.text.slice(at)}`);
  } catch {
    return null;
  } finally {
    last = saved;
  }
}

/**
 * yaml's parse() of a configuration file, parsing only the services items it has not seen, after
 * the nesting-depth check (control/yaml-limits.ts) of whatever it parses.
 */
export function parseConfigYaml(text: string): unknown {
  try {
    const changed = parseChanged(text);
    if (changed !== null) return changed;
  } catch {
    /* the whole path below decides, and reports an error with the file's own line numbers */
  }
  checkYamlDepth(text);
  const cut = cutServices(text);
  if (!cut) {
    last = null;
    return parse(text);
  }
  let rest: unknown;
  const values: unknown[] = [];
  const byText = lastByText();
  const next = new Map<string, unknown>();
  try {
    rest = parse(cut.head);
    if (rest === null || typeof rest !== 'object' || Array.isArray(rest)) return whole(text);
    const r = rest as Record<string, unknown>;
    if (r.services !== null && r.services !== undefined) return whole(text); // `services:` twice, or a value on its line
    for (const item of cut.items) {
      let v = next.get(item) ?? byText.get(item);
      if (v === undefined) {
        v = parseItem(item);
        if (v === undefined) return whole(text);
      }
      next.set(item, v);
      values.push(v);
    }
    last = { text, buf: Buffer.from(text, 'utf16le'), spans: spansOf(text)!, values, head: { ...r } };
    r.services = values;
  } catch {
    return whole(text); // its error, with the file's line numbers
  }
  return rest;
}

function whole(text: string): unknown {
  last = null;
  return parse(text);
}
