// Folds a re-run of some mutants (a config with `mutate` line ranges, run against the new test
// files alone) into the first run's report: a mutant the first run killed stays killed (tests are
// only added), a survivor becomes killed / timed out when the re-run detected the same mutant
// (file, start and end, mutator, replacement); otherwise it keeps its first status. Writes the merged report, for summarize.mjs:
//   node test/mutation/merge-rerun.mjs reports/mutation/core.json reports/rerun/core.json reports/merged/core.json
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

const [firstPath, rerunPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: node test/mutation/merge-rerun.mjs FIRST.json RERUN.json OUT.json');
  process.exit(2);
}
const first = JSON.parse(readFileSync(firstPath, 'utf8'));
const rerun = JSON.parse(readFileSync(rerunPath, 'utf8'));
const key = (file, m) =>
  `${file}:${m.location.start.line}:${m.location.start.column}-${m.location.end.line}:${m.location.end.column} ${m.mutatorName} ${m.replacement ?? ''}`;
const again = new Map();
for (const [file, r] of Object.entries(rerun.files)) for (const m of r.mutants) again.set(key(file, m), m);
let changed = 0;
let missing = 0;
for (const [file, r] of Object.entries(first.files)) {
  for (const m of r.mutants) {
    if (m.status !== 'Survived' && m.status !== 'NoCoverage') continue;
    const n = again.get(key(file, m));
    if (n === undefined) {
      missing++;
      continue;
    }
    // Only a detection counts: the re-run runs the new test files alone, so a NoCoverage there
    // says nothing about the other files.
    if (n.status === 'Killed' || n.status === 'Timeout') {
      m.status = n.status;
      m.killedBy = n.killedBy;
      m.statusReason = n.statusReason;
      changed++;
    }
  }
}
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, JSON.stringify(first));
console.log(`${outPath}: ${changed} survivor(s) now killed or timed out, ${missing} not in the re-run`);
