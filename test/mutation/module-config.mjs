// Writes reports/cfg/NAME.json: stryker.config.json narrowed to some modules, with its own
// incremental file and JSON report (reports/mutation/NAME.json), so each module is measured, and
// re-measured incrementally, on its own (test/mutation/REPORT.md):
//   node test/mutation/module-config.mjs health control/health.ts
//   nohup npx stryker run reports/cfg/health.json > reports/health.log 2>&1 &
//   node test/mutation/summarize.mjs reports/mutation --survivors
// TIMEOUT_MS=n overrides timeoutMS (stryker.config.json's 60000) for a module whose endless-loop
// mutants are not stopped by Stryker's hit limit; TEST_FILES="a.test.js b.test.js" (under
// dist/test/unit/) runs only those test files instead of all: a mutant only the others would kill
// then counts as surviving, so the score is a lower bound (schedulers/mh.ts: test/mutation/REPORT.md).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';

const [name, ...mutate] = process.argv.slice(2);
if (!name || mutate.length === 0) {
  console.error('usage: node test/mutation/module-config.mjs NAME FILE-OR-GLOB...');
  process.exit(2);
}
const c = JSON.parse(readFileSync('stryker.config.json', 'utf8'));
c.mutate = mutate;
c.incrementalFile = `reports/incremental-${name}.json`;
c.reporters = ['clear-text', 'progress-append-only', 'json'];
c.jsonReporter = { fileName: `reports/mutation/${name}.json` };
delete c.htmlReporter;
if (process.env.TIMEOUT_MS) c.timeoutMS = Number(process.env.TIMEOUT_MS);
if (process.env.TEST_FILES)
  c.tap.testFiles = process.env.TEST_FILES.split(/\s+/)
    .filter(Boolean)
    .map((f) => `dist/test/unit/${f}`);
mkdirSync('reports/cfg', { recursive: true });
writeFileSync(`reports/cfg/${name}.json`, JSON.stringify(c, null, 1));
console.log(`reports/cfg/${name}.json: ${mutate.join(' ')}`);
