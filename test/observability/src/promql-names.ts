/** PromQL's words that look like metric names: aggregation modifiers, vector matching, set operators. */
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset', 'inf', 'nan']);

/**
 * The metric names a PromQL expression reads, for checking dashboards and rules against the
 * instruments that exist. Grafana's `$variables` may stand in label values and ranges.
 * @example
 * promqlMetricNames('sum by (outbox_table) (rate(outbox_drainer_delivered_total{outbox_table=~"$table"}[$__rate_interval]))');
 * // ['outbox_drainer_delivered_total']
 */
export function promqlMetricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // strings: label values, a label_replace's arguments
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' '); // label lists
  const names = new Set<string>();
  for (const match of bare.matchAll(/(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g)) {
    const [, name, call] = match as unknown as [string, string, string | undefined];
    if (call === undefined && !KEYWORDS.has(name.toLowerCase())) names.add(name);
  }
  return [...names].sort();
}
