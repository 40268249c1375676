import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { parse, stringify } from 'yaml';
import { ALERTS, dashboardAndAlertQueries, readAlertRules, readDashboard } from './dashboard-queries.js';
import { documentedInstruments } from './instrument-table.js';
import { parsePrometheusText } from './prometheus-text.js';
import { promqlLabelNames, promqlMetricNames } from './promql-names.js';
import { scrapeGaps } from './scrape-coverage.js';

const ALERT_TESTS = join(import.meta.dirname, 'outbox-alerts.promtool.yml');

const instruments = documentedInstruments();
/** Every series name Prometheus has for the documented instruments (a histogram's three), by the instrument. */
const seriesOf = new Map(
  instruments.flatMap((i) =>
    i.kind === 'histogram'
      ? ['_bucket', '_sum', '_count'].map((s) => [i.prometheus + s, i.name] as const)
      : [[i.prometheus, i.name] as const],
  ),
);

const dashboard = readDashboard();
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
const queries = panels.flatMap((p) => (p.targets ?? []).map((target) => ({ panel: p.title, expr: target.expr })));
const rules = readAlertRules();

/** `promtool`'s path when it is installed (`apt-get install prometheus` on Debian). */
const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' }).status === 0 ? 'promtool' : undefined;
const scratch = mkdtempSync(join(tmpdir(), 'outbox-promtool-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const runPromtool = (...args: string[]) => spawnSync(promtool as string, args, { encoding: 'utf8' });

describe('promqlMetricNames', () => {
  test('finds the metrics an expression reads, not its functions, label names, values or ranges', () => {
    expect(
      promqlMetricNames(
        'histogram_quantile(0.99, sum by (le, outbox_table) (rate(outbox_drainer_claim_duration_bucket{outbox_table=~"$table"}[$__rate_interval])))',
      ),
    ).toEqual(['outbox_drainer_claim_duration_bucket']);
    expect(
      promqlMetricNames(
        'max by (outbox_table) (outbox_intent_poisoned) - on (outbox_table) group_left max by (outbox_table) (outbox_intent_superseded) > bool 0',
      ),
    ).toEqual(['outbox_intent_poisoned', 'outbox_intent_superseded']);
    expect(promqlMetricNames('sum(rate(x_total{a="b or c"}[5m] offset 1h)) / sum without (instance) (y)')).toEqual([
      'x_total',
      'y',
    ]);
  });
});

describe('promqlLabelNames', () => {
  test('finds the labels an expression matches on, groups and joins by, not label values or metric names', () => {
    expect(
      promqlLabelNames(
        'histogram_quantile(0.5, sum by (le, outbox_table) (rate(x_bucket{outbox_table=~"$table", a!="b=c"}[5m])))',
      ),
    ).toEqual(['a', 'le', 'outbox_table']);
    expect(promqlLabelNames('max by(t) (x) - on (t) group_left (mode) max by (t, mode) (y) > bool 0')).toEqual([
      'mode',
      't',
    ]);
    expect(promqlLabelNames('sum(rate(x_total[5m]))')).toEqual([]);
  });
});

describe('scrapeGaps', () => {
  const scrape = parsePrometheusText(
    [
      '# TYPE a_total counter',
      'a_total{outbox_table="t",kind="x"} 1',
      '# TYPE h histogram',
      'h_bucket{outbox_table="t",le="+Inf"} 1',
      'h_count{outbox_table="t"} 1',
    ].join('\n'),
  );
  test('names each metric a query reads that the scrape lacks, and each label none of its metrics carries', () => {
    expect(
      scrapeGaps(
        [
          {
            source: 'panel "A"',
            expr: 'sum by (outbox_table, kind) (rate(a_total{outbox_table=~"$table"}[5m]))',
            shownLabels: ['outbox_table'],
          },
          {
            source: 'panel "H"',
            expr: 'histogram_quantile(0.5, sum by (le, outbox_table) (rate(h_bucket[5m]))) / sum(h_count)',
            shownLabels: [],
          },
        ],
        scrape,
      ),
    ).toEqual([]); // `le` is on the buckets only, as it should be
    expect(
      scrapeGaps([{ source: 'alert X', expr: 'max by (outbox_table) (g) > 0', shownLabels: ['mode'] }], scrape),
    ).toEqual(['alert X: no g in the scrape']);
    expect(scrapeGaps([{ source: 'alert Y', expr: 'a_total / h_count > 0', shownLabels: ['mode'] }], scrape)).toEqual([
      'alert Y: no sample of a_total, h_count has the label mode',
    ]);
  });

  test('reads every panel target, the table variable and every alert rule', () => {
    const sources = dashboardAndAlertQueries().map((q) => q.source);
    expect(sources).toContain('variable $table');
    expect(sources).toContain('panel "Commit → delivered"');
    expect(sources.filter((s) => s.startsWith('alert '))).toEqual(rules.map((r) => `alert ${r.alert}`));
    expect(sources.filter((s) => s.startsWith('panel '))).toHaveLength(queries.length);
  });
});

describe('the instrument table of docs/metrics.md', () => {
  test('names each instrument once, and its Prometheus name as the exporter renders it (dots to underscores, _total on counters)', () => {
    expect(instruments.length).toBeGreaterThan(0);
    expect(new Set(instruments.map((i) => i.name)).size).toBe(instruments.length);
    for (const i of instruments) {
      expect(i.prometheus, i.name).toBe(i.name.replaceAll('.', '_') + (i.kind === 'counter' ? '_total' : ''));
      expect(['counter', 'gauge', 'histogram'], i.name).toContain(i.kind);
      expect(i.attributes[0], i.name).toBe('outbox.table');
    }
  });
});

describe('the Grafana dashboard (docs/grafana/outbox-dashboard.json)', () => {
  test('reads only metrics the libraries emit, and shows every one of them', () => {
    const unknown = queries.flatMap(({ panel, expr }) =>
      promqlMetricNames(expr)
        .filter((name) => !seriesOf.has(name))
        .map((name) => `${panel}: ${name}`),
    );
    expect(unknown).toEqual([]);
    const shown = new Set(queries.flatMap(({ expr }) => promqlMetricNames(expr).map((name) => seriesOf.get(name))));
    expect(instruments.map((i) => i.name).filter((name) => !shown.has(name))).toEqual([]);
    // The table selector lists the tables that report a gauge.
    expect(dashboard.templating.list.find((v) => v.name === 'table')?.definition).toBe(
      'label_values(outbox_intent_pending, outbox_table)',
    );
    expect(seriesOf.has('outbox_intent_pending')).toBe(true);
  });

  test('has unique panel ids, and every query on the selected Prometheus data source', () => {
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    expect(dashboard.templating.list.find((v) => v.name === 'datasource')).toMatchObject({ type: 'datasource' });
    for (const p of panels.filter((p) => p.type !== 'row')) {
      expect(p.datasource?.uid, p.title).toBe('${datasource}');
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
    }
  });

  test.skipIf(!promtool)('has queries that parse as PromQL (promtool, on recording rules made of them)', () => {
    const asRules = {
      groups: [
        {
          name: 'dashboard',
          rules: queries.map((q, i) => ({
            record: `dashboard:query_${i}`,
            expr: q.expr.replaceAll('$__rate_interval', '5m').replaceAll('$table', '.*'),
          })),
        },
      ],
    };
    const file = join(scratch, 'dashboard-queries.yml');
    writeFileSync(file, stringify(asRules));
    const checked = runPromtool('check', 'rules', file);
    expect(checked.stdout + checked.stderr).toMatch(/SUCCESS: \d+ rules found/);
    expect(checked.status).toBe(0);
  });
});

describe('the alerting rules (docs/prometheus/outbox-alerts.yml)', () => {
  test('each names its severity, says what happened and what to do, and reads only metrics the libraries emit', () => {
    expect(rules.map((r) => r.alert)).toEqual([
      'OutboxOldestDeliverableAgeHigh',
      'OutboxPoisoned',
      'OutboxDrift',
      'OutboxRepairRefused',
      'OutboxDrainPassesFailing',
      'OutboxReconcilerPassesFailing',
      'OutboxVacuumHeldBack',
    ]);
    for (const rule of rules) {
      expect(['warning', 'critical'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toMatch(/\{\{ \$labels\.outbox_table \}\}/);
      expect(rule.annotations?.description?.length, rule.alert).toBeGreaterThan(40);
      if (rule.for !== undefined) expect(rule.for, rule.alert).toMatch(/^\d+[smh]$/);
      const names = promqlMetricNames(rule.expr);
      expect(names.length, rule.alert).toBeGreaterThan(0);
      expect(
        names.filter((name) => !seriesOf.has(name)),
        rule.alert,
      ).toEqual([]);
    }
  });

  test.skipIf(!promtool)('pass promtool check rules', () => {
    const checked = runPromtool('check', 'rules', ALERTS);
    expect(checked.stdout).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(checked.status).toBe(0);
  });

  test.skipIf(!promtool)('fire on synthetic series after their `for` and not before (promtool test rules)', () => {
    const tested = runPromtool('test', 'rules', ALERT_TESTS);
    expect(tested.stdout + tested.stderr).toContain('SUCCESS');
    expect(tested.status).toBe(0);
    // Every alert is exercised.
    const exercised = new Set(
      (
        parse(readFileSync(ALERT_TESTS, 'utf8')) as { tests: Array<{ alert_rule_test: Array<{ alertname: string }> }> }
      ).tests.flatMap((t) => t.alert_rule_test.map((a) => a.alertname)),
    );
    expect(rules.map((r) => r.alert).filter((name) => !exercised.has(name))).toEqual([]);
  });
});
