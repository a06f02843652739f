/**
 * YAML refused before it is built when it nests too deep. The `yaml` library composes nested
 * collections recursively: 20 KB of `[[[[…` or of ever deeper indentation make it recurse until
 * the stack overflows — 100 ms or more of the control thread before the error (a reload, or the
 * state of every API request waiting behind it). A uvs configuration nests a handful of levels.
 *
 * So the text is first bounded in one pass over its characters (depthBound: milliseconds per MB)
 * and, only when that bound exceeds the limit, run through the library's own lexer — linear, no
 * recursion, about a quarter of what parsing costs — with the nesting depth followed token by
 * token: flow collections by their brackets (exact: the lexer yields `[ ] { }` as tokens only
 * where they are indicators, never inside a quoted, plain or block scalar or a comment), block
 * collections by the columns of their indicators (`-`, `?`, and the start of a key before `:`),
 * as the parser nests them. The first token deeper than MAX_YAML_DEPTH stops the scan with an
 * error naming the limit, before anything is composed. Alias expansion ("billion laughs") stays
 * bounded by the library's maxAliasCount.
 */
import { Lexer, parse } from 'yaml';

/** Deepest nesting of collections accepted (a uvs configuration needs fewer than 10). */
export const MAX_YAML_DEPTH = 64;

const MAP = 0;
const SEQ = 1;

/** The nesting depth limit was exceeded; the message names it. */
export class YamlDepthError extends Error {}

/**
 * An upper bound of the nesting depth, from characters alone. Block collections still open on a
 * line have their columns at or left of its indentation, and one column holds at most two of them
 * (a mapping, and a sequence that is a key's value at the key's column: `key:\n- item`); those
 * opened on the line itself each take an indicator character (`-`, `?`, `:`). Flow collections
 * each take an opening bracket (`[]`, `{}` nest nothing). So: the largest 2 × (indentation + 1) +
 * indicator characters of any line, plus every opening bracket of the text. Characters inside
 * scalars and comments only make it larger. Stops as soon as the bound passes `stopAbove`.
 */
export function depthBound(text: string, stopAbove = Infinity): number {
  let flow = 0;
  let block = 0;
  let indent = 0;
  let marks = 0;
  let lineStart = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) {
      block = Math.max(block, 2 * (indent + 1) + marks);
      if (block + flow > stopAbove) return block + flow;
      indent = marks = 0;
      lineStart = true;
      continue;
    }
    if (lineStart) {
      if (c === 0x20) {
        indent++;
        continue;
      }
      lineStart = false;
    }
    if (c === 0x2d || c === 0x3f || c === 0x3a) marks++;
    else if ((c === 0x5b && text.charCodeAt(i + 1) !== 0x5d) || (c === 0x7b && text.charCodeAt(i + 1) !== 0x7d)) {
      if (++flow > stopAbove) return flow;
    }
  }
  return Math.max(block, 2 * (indent + 1) + marks) + flow;
}

/**
 * Throws YamlDepthError when the YAML text nests collections more than maxDepth deep. Cost linear
 * in the text (depthBound, then one lexer pass if needed), stopped at the first token past the limit. Malformed YAML is not
 * this function's business: it is left to the parser (an indicator where none may stand can only
 * make the count larger, never hide nesting).
 */
export function checkYamlDepth(text: string, maxDepth = MAX_YAML_DEPTH): void {
  if (depthBound(text, maxDepth) <= maxDepth) return;
  // Block collections open at the current point: indentation column and kind, innermost last.
  const cols: number[] = [];
  const kinds: number[] = [];
  let flow = 0;
  let col = 0;
  let lineNo = 1;
  /** Column where the node being read began (a key's first token, before its `:`), -1 until one does. */
  let nodeCol = -1;
  let atNodeStart = true;
  const fail = (): never => {
    throw new YamlDepthError(`line ${lineNo}: collections nested more than ${maxDepth} levels deep (the limit)`);
  };
  /** A block indicator of kind k at column c: close what ended, open a collection if it is new. */
  const block = (c: number, k: number): void => {
    let n = cols.length;
    while (n > 0 && cols[n - 1]! > c) n--;
    // A sequence ends where a key of the mapping around it starts, at the same column.
    if (n > 0 && cols[n - 1] === c && kinds[n - 1] === SEQ && k === MAP) n--;
    cols.length = kinds.length = n;
    // Same column and kind: the next item of the same collection. A sequence may stand at the
    // column of the key whose value it is (`key:\n- item`): nested, although not indented.
    if (n > 0 && cols[n - 1] === c && kinds[n - 1] === k) return;
    cols.push(c);
    kinds.push(k);
    if (cols.length + flow > maxDepth) fail();
  };
  for (const tok of new Lexer().lex(text)) {
    const ch = tok.charCodeAt(0);
    // Zero-width markers the lexer adds (document, scalar, flow error end): not in the text.
    if (tok.length === 1 && (ch === 0x02 || ch === 0x1f || ch === 0x18)) continue;
    if (tok === '' || tok === '\n' || tok === '\r\n') {
      col = 0;
      lineNo++;
      atNodeStart = true;
      nodeCol = -1;
      continue;
    }
    const start = col;
    const nl = tok.lastIndexOf('\n');
    if (nl >= 0) {
      col = tok.length - nl - 1;
      for (let i = 0; i < tok.length; i++) if (tok.charCodeAt(i) === 10) lineNo++;
    } else {
      col += tok.length;
    }
    if (ch === 0x20 || ch === 0x09 || ch === 0x23) continue; // space, tab, comment
    if (tok.length === 1) {
      if (ch === 0x5b || ch === 0x7b) {
        // [ {
        if (atNodeStart && flow === 0) nodeCol = start;
        if (++flow + cols.length > maxDepth) fail();
        atNodeStart = true;
        continue;
      }
      if (ch === 0x5d || ch === 0x7d) {
        // ] }
        if (flow > 0) flow--;
        atNodeStart = false;
        continue;
      }
      if (flow === 0 && (ch === 0x2d || ch === 0x3f)) {
        // - ?   (a block sequence item; an explicit mapping key)
        block(start, ch === 0x2d ? SEQ : MAP);
        atNodeStart = true;
        continue;
      }
      if (ch === 0x3a) {
        // :   (in block context: the key began at nodeCol; first on its line: an explicit key's value)
        if (flow === 0) block(nodeCol >= 0 ? nodeCol : start, MAP);
        atNodeStart = true;
        continue;
      }
    }
    if (tok === '---' || tok === '...') {
      cols.length = kinds.length = 0;
      flow = 0;
      atNodeStart = true;
      continue;
    }
    if (atNodeStart) {
      nodeCol = start;
      atNodeStart = false;
    }
  }
}

/** yaml's parse(), after checkYamlDepth: the same value, errors and warnings for what passes. */
export function parseYamlBounded(text: string, maxDepth = MAX_YAML_DEPTH): unknown {
  checkYamlDepth(text, maxDepth);
  return parse(text);
}
