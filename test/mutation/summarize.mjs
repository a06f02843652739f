// Prints a Markdown summary of Stryker JSON reports (reports/mutation/*.json, written by
// `npm run test:mutation` or the per-module runs): the score per file and every survivor with
// its line and replacement, for test/mutation/REPORT.md.
// Score = (killed + timed out) / (all valid mutants), as Stryker's "mutation score";
// "covered" leaves out the mutants no unit test reaches at all.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2] ?? 'reports/mutation';
const rows = [];
const survivors = [];
for (const f of readdirSync(dir)
  .filter((x) => x.endsWith('.json'))
  .sort()) {
  const report = JSON.parse(readFileSync(join(dir, f), 'utf8'));
  for (const [file, r] of Object.entries(report.files)) {
    const n = { Killed: 0, Timeout: 0, Survived: 0, NoCoverage: 0, other: 0 };
    for (const m of r.mutants) {
      if (m.status in n) n[m.status]++;
      else n.other++;
      if (m.status === 'Survived' || m.status === 'NoCoverage') {
        const line = r.source.split('\n')[m.location.start.line - 1] ?? '';
        survivors.push({
          file,
          status: m.status,
          line: m.location.start.line,
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
    });
  }
}
const total = rows.reduce((a, r) => ({ valid: a.valid + r.valid, detected: a.detected + r.detected, noCov: a.noCov + r.NoCoverage }), {
  valid: 0,
  detected: 0,
  noCov: 0,
});
console.log('| file | mutants | killed | timed out | survived | no coverage | score | score (covered) |');
console.log('|---|---|---|---|---|---|---|---|');
for (const r of rows)
  console.log(
    `| ${r.file} | ${r.valid} | ${r.Killed} | ${r.Timeout} | ${r.Survived} | ${r.NoCoverage} | ${r.score.toFixed(1)} % | ${Number.isNaN(r.covered) ? '—' : r.covered.toFixed(1) + ' %'} |`,
  );
console.log(
  `| **all** | ${total.valid} | | | | ${total.noCov} | **${((100 * total.detected) / total.valid).toFixed(1)} %** | ${((100 * total.detected) / (total.valid - total.noCov)).toFixed(1)} % |`,
);
if (process.argv.includes('--survivors')) {
  console.log('\n| file:line | status | mutator | replacement | code |\n|---|---|---|---|---|');
  for (const s of survivors)
    console.log(
      `| ${s.file}:${s.line} | ${s.status} | ${s.mutator} | \`${s.replacement.replace(/\|/g, '\\|')}\` | \`${s.code.replace(/\|/g, '\\|')}\` |`,
    );
}
