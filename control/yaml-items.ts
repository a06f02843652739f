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
 * Anything this cannot cut with certainty falls back to one whole parse, as before: anchors or
 * aliases (`&x`, `*x`: an item could refer to another), tags, several documents, a flow sequence
 * (`services: [...]`), tabs in indentation, or an item that does not parse alone (the whole
 * parse then reports the error with the file's own line numbers). The cache keeps only the last
 * parse's items; a cached value is shared by reloads, so nothing may change it in place (the
 * configuration is validated into new objects, and edits work on copies).
 */
import { parse } from 'yaml';

interface Cut {
  head: string;
  items: string[];
}

/** Lines that could make a cut wrong: anchors, aliases, tags, directives, document markers. */
const UNSAFE = /(^|[\s[{,:-])[&*!][^\s]|^%|^---|^\.\.\.|\t/m;

/** The services items of `text`, or null when the fast path does not apply. */
export function cutServices(text: string): Cut | null {
  if (UNSAFE.test(text)) return null;
  const m = /^services:[ ]*(#.*)?\n/m.exec(text);
  if (!m) return null;
  const start = m.index + m[0].length;
  const lines = text.slice(start).split('\n');
  let col = -1;
  let end = 0; // lines of the sequence
  const items: string[] = [];
  let cur: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i]!;
    const t = l.trimStart();
    if (t === '' || t.startsWith('#')) {
      if (cur.length) cur.push(l);
      continue;
    }
    const indent = l.length - t.length;
    if (col < 0) {
      if (!t.startsWith('- ') && t !== '-') return null; // not a block sequence (flow, or empty)
      col = indent;
    }
    if (indent < col || (indent === col && !t.startsWith('- ') && t !== '-')) break; // the next key
    if (indent === col) {
      if (cur.length) items.push(cur.join('\n'));
      cur = [l];
    } else cur.push(l);
    end = i + 1;
  }
  if (cur.length) items.push(cur.join('\n'));
  if (items.length === 0) return null;
  // Trailing blank and comment lines of the last item belong to the text after it: harmless either way.
  const tail = lines.slice(end).join('\n');
  return { head: `${text.slice(0, start)}${tail.length ? `\n${tail}` : ''}`, items };
}

let last = new Map<string, unknown>();

/** yaml's parse() of a configuration file, parsing only the services items it has not seen. */
export function parseConfigYaml(text: string): unknown {
  const cut = cutServices(text);
  if (!cut) return parse(text);
  let rest: unknown;
  const values: unknown[] = [];
  const next = new Map<string, unknown>();
  try {
    rest = parse(cut.head);
    if (rest === null || typeof rest !== 'object' || Array.isArray(rest)) return parse(text);
    const r = rest as Record<string, unknown>;
    if (r.services !== null && r.services !== undefined) return parse(text); // `services:` twice, or a value on its line
    for (const item of cut.items) {
      let v = next.get(item) ?? last.get(item);
      if (v === undefined) {
        const one = parse(item) as unknown;
        if (!Array.isArray(one) || one.length !== 1) return parse(text);
        v = one[0];
      }
      next.set(item, v);
      values.push(v);
    }
    r.services = values;
  } catch {
    return parse(text); // its error, with the file's line numbers
  }
  last = next;
  return rest;
}
