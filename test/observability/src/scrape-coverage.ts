import type { DashboardQuery } from './dashboard-queries.js';
import type { PrometheusScrape } from './prometheus-text.js';
import { promqlLabelNames, promqlMetricNames } from './promql-names.js';

/**
 * What `queries` read that `scrape` does not have: each metric no sample is of, and each label a
 * query matches, groups by or shows that no sample of any of its metrics carries (a label may
 * belong to one of them only, as `le` to a histogram's buckets). Empty when every panel and alert
 * would find its series and labels in a Prometheus that scraped this.
 * @example
 * const gaps = scrapeGaps(dashboardAndAlertQueries(), parsePrometheusText(await (await fetch(`${url}/metrics`)).text()));
 * // ['panel "Drift found and repaired": no outbox_repair_drift_repaired_total in the scrape']
 */
export function scrapeGaps(queries: readonly DashboardQuery[], scrape: PrometheusScrape): string[] {
  const labelsOf = new Map<string, Set<string>>();
  for (const sample of scrape.samples) {
    const labels = labelsOf.get(sample.name) ?? new Set<string>();
    for (const label of Object.keys(sample.labels)) labels.add(label);
    labelsOf.set(sample.name, labels);
  }
  const gaps = new Set<string>();
  for (const query of queries) {
    const names = promqlMetricNames(query.expr);
    const found = names.filter((name) => labelsOf.has(name));
    for (const name of names.filter((n) => !labelsOf.has(n))) gaps.add(`${query.source}: no ${name} in the scrape`);
    if (found.length === 0) continue;
    for (const label of new Set([...promqlLabelNames(query.expr), ...query.shownLabels])) {
      if (!found.some((name) => labelsOf.get(name)?.has(label)))
        gaps.add(`${query.source}: no sample of ${found.join(', ')} has the label ${label}`);
    }
  }
  return [...gaps];
}
