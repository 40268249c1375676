import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

const DOCS = join(import.meta.dirname, '..', '..', '..', 'docs');
/** docs/grafana/outbox-dashboard.json. */
export const DASHBOARD = join(DOCS, 'grafana', 'outbox-dashboard.json');
/** docs/prometheus/outbox-alerts.yml. */
export const ALERTS = join(DOCS, 'prometheus', 'outbox-alerts.yml');

/** A panel of the dashboard (a row holds panels of its own when collapsed). */
export interface DashboardPanel {
  readonly id: number;
  readonly type: string;
  readonly title: string;
  readonly datasource?: { readonly uid: string };
  readonly targets?: ReadonlyArray<{
    readonly expr: string;
    readonly legendFormat?: string;
    readonly datasource?: { readonly uid: string };
  }>;
  readonly panels?: readonly DashboardPanel[];
}

/** The parts of the dashboard JSON the checks read. */
export interface Dashboard {
  readonly panels: readonly DashboardPanel[];
  readonly templating: {
    readonly list: ReadonlyArray<{ readonly name: string; readonly type: string; readonly definition?: string }>;
  };
}

/** An alerting rule of docs/prometheus/outbox-alerts.yml. */
export interface AlertRule {
  readonly alert: string;
  readonly expr: string;
  readonly for?: string;
  readonly labels?: Record<string, string>;
  readonly annotations?: Record<string, string>;
}

/** One PromQL query of the dashboard or the rules, and the labels its legend or annotations show. */
export interface DashboardQuery {
  /** Where it is, e.g. `panel "Backlog"` or `alert OutboxPoisoned`. */
  readonly source: string;
  readonly expr: string;
  /** Labels named by `{{label}}` in a legend, or `$labels.label` in an annotation. */
  readonly shownLabels: readonly string[];
}

export const readDashboard = (): Dashboard => JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;
export const readAlertRules = (): AlertRule[] =>
  (parse(readFileSync(ALERTS, 'utf8')) as { groups: Array<{ rules: AlertRule[] }> }).groups.flatMap((g) => g.rules);

const legendLabels = (text = '') =>
  [...text.matchAll(/\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}/g)].map((m) => m[1] as string);
const annotationLabels = (text = '') =>
  [...text.matchAll(/\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)/g)].map((m) => m[1] as string);

/**
 * Every query of the dashboard (each panel's targets, and the `label_values(metric, label)` of its
 * variables) and of the alerting rules.
 */
export function dashboardAndAlertQueries(dashboard = readDashboard(), rules = readAlertRules()): DashboardQuery[] {
  const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const targets = panels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({
      source: `panel "${p.title}"`,
      expr: t.expr,
      shownLabels: legendLabels(t.legendFormat),
    })),
  );
  const variables = dashboard.templating.list.flatMap((v) => {
    const values = /^label_values\(\s*([^,\s]+)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$/.exec(v.definition ?? '');
    return values
      ? [{ source: `variable $${v.name}`, expr: values[1] as string, shownLabels: [values[2] as string] }]
      : [];
  });
  const alerts = rules.map((r) => ({
    source: `alert ${r.alert}`,
    expr: r.expr,
    shownLabels: Object.values(r.annotations ?? {}).flatMap(annotationLabels),
  }));
  return [...targets, ...variables, ...alerts];
}
