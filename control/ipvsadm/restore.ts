/** uvsadm -R: ipvsadm's restore_table() over config_stream.c's line splitting, as one batch. */
import type { EditOp } from '../edits';
import type { ParseEnv } from './command';
import { parseArgs } from './parse';
import { PROGRAM } from './tables';

export interface RestoreLine {
  /** 1-based line number in the input. */
  line: number;
  text: string;
}
export type RestoreResult = { ok: true; ops: EditOp[]; lines: RestoreLine[] } | { ok: false; stderr: string; exit: number; line: number };

/**
 * -R: each line is split on blanks into a command line (config_stream.c), a leading
 * ipvsadm/uvsadm word is dropped, and the editing commands become ONE list of operations — sent
 * as one batch, so a restore is applied whole or not at all (ipvsadm applies line by line and
 * stops at the first failure). `lines[i]` is the line of `ops[i]`.
 */
export function parseRestore(input: string, env: ParseEnv = {}): RestoreResult {
  const ops: EditOp[] = [];
  const lines: RestoreLine[] = [];
  const text = input.split('\n');
  for (let n = 0; n < text.length; n++) {
    const raw = text[n]!;
    const words = raw.split(/[ \t\r]+/).filter((w) => w !== '');
    if (words[0] === 'ipvsadm' || words[0] === PROGRAM) words.shift();
    if (words.length === 0 || words[0]!.startsWith('#')) continue;
    const r = parseArgs(words, { ...env, readingStdin: true });
    if (!r.ok) return { ok: false, stderr: r.stderr, exit: r.exit, line: n + 1 };
    if (r.command.kind !== 'edit') {
      return {
        ok: false,
        stderr: `${PROGRAM}: -R: line ${n + 1}: only -A -E -D -C -a -e -d and --set can be restored (in one atomic batch): ${raw.trim()}\n`,
        exit: 2,
        line: n + 1,
      };
    }
    for (const op of r.command.ops) {
      ops.push(op);
      lines.push({ line: n + 1, text: raw.trim() });
    }
  }
  return { ok: true, ops, lines };
}
