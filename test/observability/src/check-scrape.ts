/**
 * `pnpm exec tsx test/observability/src/check-scrape.ts <url>…`: scrapes each URL (a service's
 * `/metrics`, e.g. under `pnpm demo --keep`) and lists what the Grafana dashboard's queries and the
 * alert rules in docs/ read that it lacks: metrics with no sample, labels no sample carries. Prints
 * the outbox families it found with their sample counts. Exit 0 when nothing is missing, 1 otherwise.
 */
import { dashboardAndAlertQueries } from './dashboard-queries.js';
import { parsePrometheusText } from './prometheus-text.js';
import { scrapeGaps } from './scrape-coverage.js';

const urls = process.argv.slice(2);
if (urls.length === 0) {
  console.error('usage: check-scrape.ts <metrics url>…');
  process.exit(2);
}
let missing = 0;
for (const url of urls) {
  const scrape = parsePrometheusText(await (await fetch(url)).text());
  const outbox = [...scrape.families.keys()].filter((name) => name.startsWith('outbox_'));
  console.log(
    `${url}: ${outbox.length} outbox families, ${scrape.samples.filter((s) => s.name.startsWith('outbox_')).length} samples`,
  );
  const gaps = scrapeGaps(dashboardAndAlertQueries(), scrape);
  for (const gap of gaps) console.log(`  missing: ${gap}`);
  missing += gaps.length;
}
process.exit(missing === 0 ? 0 : 1);
