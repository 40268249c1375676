export { documentedInstruments, METRICS_DOC, type DocumentedInstrument } from './instrument-table.js';
export {
  histogramValue,
  pointsOf,
  pointValue,
  testMeterProvider,
  type HistogramValue,
  type MetricPoint,
  type TestMeterProvider,
} from './metric-points.js';
export {
  parsePrometheusText,
  type PrometheusFamily,
  type PrometheusSample,
  type PrometheusScrape,
} from './prometheus-text.js';
export { promqlLabelNames, promqlMetricNames } from './promql-names.js';
export {
  ALERTS,
  DASHBOARD,
  dashboardAndAlertQueries,
  readAlertRules,
  readDashboard,
  type AlertRule,
  type Dashboard,
  type DashboardPanel,
  type DashboardQuery,
} from './dashboard-queries.js';
export { scrapeGaps } from './scrape-coverage.js';
