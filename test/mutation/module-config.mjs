// Writes reports/cfg/NAME.json: stryker.config.json narrowed to some modules, with its own
// incremental file and JSON report (reports/mutation/NAME.json), so each module is measured, and
// re-measured incrementally, on its own (test/mutation/REPORT.md):
//   node test/mutation/module-config.mjs health control/health.ts
//   nohup npx stryker run reports/cfg/health.json > reports/health.log 2>&1 &
//   node test/mutation/summarize.mjs reports/mutation --survivors
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
mkdirSync('reports/cfg', { recursive: true });
writeFileSync(`reports/cfg/${name}.json`, JSON.stringify(c, null, 1));
console.log(`reports/cfg/${name}.json: ${mutate.join(' ')}`);
