/** PromQL's words that look like metric names: aggregation modifiers, vector matching, set operators. */
const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'and',
  'or',
  'unless',
  'offset',
  'inf',
  'nan',
]);

/** `expr` with every string literal emptied (label values, a label_replace's arguments): nothing in one is a name. */
const blankStrings = (expr: string) => expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');

/**
 * The metric names a PromQL expression reads, for checking dashboards and rules against the
 * instruments that exist. Grafana's `$variables` may stand in label values and ranges.
 * @example
 * promqlMetricNames('sum by (outbox_table) (rate(outbox_drainer_delivered_total{outbox_table=~"$table"}[$__rate_interval]))');
 * // ['outbox_drainer_delivered_total']
 */
export function promqlMetricNames(expr: string): string[] {
  const bare = blankStrings(expr)
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

/**
 * The label names a PromQL expression relies on: those it matches on (`{outbox_table=~"…"}`) and
 * those it groups or joins by (`by`, `on`, `ignoring`, `group_left`, `group_right`).
 * @example
 * promqlLabelNames('sum by (le, outbox_table) (rate(x_bucket{outbox_table=~"$table"}[5m]))'); // ['le', 'outbox_table']
 */
export function promqlLabelNames(expr: string): string[] {
  const bare = blankStrings(expr);
  const names = new Set<string>();
  for (const [, matchers] of bare.matchAll(/\{([^}]*)\}/g)) {
    for (const [, label] of (matchers as string).matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g))
      names.add(label as string);
  }
  for (const [, list] of bare.matchAll(/\b(?:by|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
    for (const label of (list as string).split(',').map((l) => l.trim())) if (label !== '') names.add(label);
  }
  return [...names].sort();
}
