import type { MeterProvider as ApiMeterProvider } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createReconcilerMetrics, type ReconcilerMetrics } from '@outbox/reconciler';

/** What a service's `/metrics` route and its outbox's instruments share. */
export interface ServiceMetrics {
  /** Passed to the drainer, the reconciler and the gauges (docs/metrics.md), not set globally. */
  readonly meterProvider: ApiMeterProvider;
  /** Renders every instrument of the process in the Prometheus text format. */
  readonly exporter: PrometheusExporter;
  /** Told of every audit the services run: drift found and the drifted gauge (one per process and meter, as it keeps each table's last audit). */
  readonly agreement: ReconcilerMetrics;
}

let processMetrics: ServiceMetrics | undefined;

/**
 * The process's one Prometheus exporter and meter provider. One per process: the platform runs six
 * services in one, and a scrape of any of them shows all six tables (the `outbox_table` label tells
 * them apart). Not registered as the global provider, so an application's own SDK is left alone.
 */
export function serviceMetrics(): ServiceMetrics {
  if (!processMetrics) {
    const exporter = new PrometheusExporter({ preventServerStart: true });
    const meterProvider = new MeterProvider({ readers: [exporter] });
    processMetrics = { exporter, meterProvider, agreement: createReconcilerMetrics({ meterProvider }) };
  }
  return processMetrics;
}
