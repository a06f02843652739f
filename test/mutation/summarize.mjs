// Prints a Markdown summary of Stryker JSON reports (reports/mutation/*.json, written by
// `npm run test:mutation` or the per-module runs): the score per file and every survivor with
// its line and replacement, for test/mutation/REPORT.md.
// Score = (killed + timed out) / (all valid mutants), as Stryker's "mutation score";
// "covered" leaves out the mutants no unit test reaches at all.
//   --judged FILE: a TSV of survivors judged by hand, one a line (# comments):
//     file:line:column <TAB> replacement <TAB> equivalent|open <TAB> why
//   adds the verdict to each survivor listed, an "equivalent" count per file and the score with the
//   equivalent ones left out (they cannot be killed: no observable behaviour differs). "open" is a
//   survivor left on purpose, with the reason (no document defines the behaviour, or a follow-up).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2] ?? 'reports/mutation';
const judgedAt = process.argv.indexOf('--judged');
/** "file:line:column replacement" → { verdict, why } */
const judged = new Map();
if (judgedAt > 0) {
  for (const l of readFileSync(process.argv[judgedAt + 1], 'utf8').split('\n')) {
    if (l.trim() === '' || l.startsWith('#')) continue;
    const [loc, replacement, verdict, why] = l.split('\t');
    if (verdict !== 'equivalent' && verdict !== 'open') throw new Error(`--judged: bad verdict in: ${l}`);
    judged.set(`${loc} ${replacement}`, { verdict, why, used: false });
  }
}
const rows = [];
const survivors = [];
for (const f of readdirSync(dir)
  .filter((x) => x.endsWith('.json'))
  .sort()) {
  const report = JSON.parse(readFileSync(join(dir, f), 'utf8'));
  for (const [file, r] of Object.entries(report.files)) {
    const n = { Killed: 0, Timeout: 0, Survived: 0, NoCoverage: 0, other: 0, equivalent: 0 };
    for (const m of r.mutants) {
      if (m.status in n) n[m.status]++;
      else n.other++;
      if (m.status === 'Survived' || m.status === 'NoCoverage') {
        const line = r.source.split('\n')[m.location.start.line - 1] ?? '';
        const j = judged.get(`${file}:${m.location.start.line}:${m.location.start.column} ${(m.replacement ?? '').replace(/\s+/g, ' ')}`);
        if (j) j.used = true;
        if (j?.verdict === 'equivalent') n.equivalent++;
        survivors.push({
          file,
          status: m.status,
          line: m.location.start.line,
          column: m.location.start.column,
          judged: j,
          mutator: m.mutatorName,
          replacement: (m.replacement ?? '').replace(/\s+/g, ' ').slice(0, 60),
          code: line.trim().slice(0, 90),
        });
      }
    }
    const valid = n.Killed + n.Timeout + n.Survived + n.NoCoverage;
    const detected = n.Killed + n.Timeout;
    rows.push({
      file,
      valid,
      detected,
      ...n,
      score: valid ? (100 * detected) / valid : 100,
      covered: valid - n.NoCoverage ? (100 * detected) / (valid - n.NoCoverage) : NaN,
      net: valid - n.equivalent ? (100 * detected) / (valid - n.equivalent) : 100,
    });
  }
}
const total = rows.reduce(
  (a, r) => ({
    valid: a.valid + r.valid,
    detected: a.detected + r.detected,
    noCov: a.noCov + r.NoCoverage,
    survived: a.survived + r.Survived,
    killed: a.killed + r.Killed,
    timeout: a.timeout + r.Timeout,
    equivalent: a.equivalent + r.equivalent,
  }),
  { valid: 0, detected: 0, noCov: 0, survived: 0, killed: 0, timeout: 0, equivalent: 0 },
);
const pct = (x) => `${x.toFixed(1)} %`;
const withJudged = judged.size > 0;
console.log(
  `| file | mutants | killed | timed out | survived | no coverage | score | score (covered) |${withJudged ? ' judged equivalent | score without them |' : ''}`,
);
console.log(`|---|---|---|---|---|---|---|---|${withJudged ? '---|---|' : ''}`);
for (const r of rows)
  console.log(
    `| ${r.file} | ${r.valid} | ${r.Killed} | ${r.Timeout} | ${r.Survived} | ${r.NoCoverage} | ${pct(r.score)} | ${Number.isNaN(r.covered) ? '—' : pct(r.covered)} |${withJudged ? ` ${r.equivalent} | ${pct(r.net)} |` : ''}`,
  );
console.log(
  `| **all** | ${total.valid} | ${total.killed} | ${total.timeout} | ${total.survived} | ${total.noCov} | **${pct((100 * total.detected) / total.valid)}** | ${pct((100 * total.detected) / (total.valid - total.noCov))} |${withJudged ? ` ${total.equivalent} | ${pct((100 * total.detected) / (total.valid - total.equivalent))} |` : ''}`,
);
if (process.argv.includes('--survivors')) {
  console.log(
    `\n| file:line:column | status | mutator | replacement | code |${withJudged ? ' verdict: why |' : ''}\n|---|---|---|---|---|${withJudged ? '---|' : ''}`,
  );
  const esc = (x) => x.replace(/\|/g, '\\|');
  for (const s of survivors)
    console.log(
      `| ${s.file}:${s.line}:${s.column} | ${s.status} | ${s.mutator} | \`${esc(s.replacement)}\` | \`${esc(s.code)}\` |${withJudged ? ` ${s.judged ? `${s.judged.verdict}: ${esc(s.judged.why)}` : 'not judged'} |` : ''}`,
    );
}
for (const [k, j] of judged) if (!j.used) console.error(`--judged: no survivor ${k} in these reports (killed since, or moved?)`);
