import type { Attributes, MeterProvider as ApiMeterProvider } from '@opentelemetry/api';
import { DataPointType, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';

/** A histogram's data point, as the SDK aggregates it (explicit buckets). */
export interface HistogramValue {
  readonly count: number;
  readonly sum: number;
  /** Bucket upper bounds (the last bucket, to +Inf, has none). */
  readonly boundaries: readonly number[];
  /** Per bucket, not cumulative: `boundaries.length + 1` of them. */
  readonly counts: readonly number[];
}

/** One data point of one instrument, from a collection. */
export interface MetricPoint {
  readonly scope: string;
  readonly name: string;
  readonly unit: string;
  readonly kind: 'counter' | 'up-down-counter' | 'gauge' | 'histogram';
  readonly attributes: Attributes;
  readonly value: number | HistogramValue;
}

/** A reader that exports nowhere: the test calls `collect()` when it wants to look. */
class PullReader extends MetricReader {
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** A real OpenTelemetry SDK meter provider, read on demand. */
export interface TestMeterProvider {
  readonly meterProvider: ApiMeterProvider;
  /** Runs a collection (observable callbacks included) and returns every data point. */
  collect(): Promise<MetricPoint[]>;
  shutdown(): Promise<void>;
}

/**
 * A MeterProvider of the real SDK with a reader the test pulls from: what an application's SDK
 * does at each export or scrape, without a global.
 * @example
 * const sdk = testMeterProvider();
 * const drainer = createDrainer({ db, spec, sink, meterProvider: sdk.meterProvider });
 * expect(pointValue(await sdk.collect(), 'outbox.drainer.delivered', { 'outbox.table': spec.table })).toBe(3);
 */
export function testMeterProvider(): TestMeterProvider {
  const reader = new PullReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    meterProvider,
    async collect() {
      const { resourceMetrics, errors } = await reader.collect();
      if (errors.length > 0) throw new AggregateError(errors, 'the collection failed');
      return resourceMetrics.scopeMetrics.flatMap(({ scope, metrics }) =>
        metrics.flatMap((metric): MetricPoint[] => {
          const base = { scope: scope.name, name: metric.descriptor.name, unit: metric.descriptor.unit };
          switch (metric.dataPointType) {
            case DataPointType.SUM:
              return metric.dataPoints.map((p) => ({
                ...base,
                kind: metric.isMonotonic ? 'counter' : 'up-down-counter',
                attributes: p.attributes,
                value: p.value,
              }));
            case DataPointType.GAUGE:
              return metric.dataPoints.map((p) => ({
                ...base,
                kind: 'gauge',
                attributes: p.attributes,
                value: p.value,
              }));
            case DataPointType.HISTOGRAM:
              return metric.dataPoints.map((p) => ({
                ...base,
                kind: 'histogram',
                attributes: p.attributes,
                value: {
                  count: p.value.count,
                  sum: p.value.sum ?? 0,
                  boundaries: p.value.buckets.boundaries,
                  counts: p.value.buckets.counts,
                },
              }));
            default:
              throw new Error(`${metric.descriptor.name}: an exponential histogram, which no @outbox instrument is`);
          }
        }),
      );
    },
    shutdown: () => meterProvider.shutdown(),
  };
}

/** The points of instrument `name` whose attributes include `attributes`. */
export function pointsOf(points: readonly MetricPoint[], name: string, attributes: Attributes = {}): MetricPoint[] {
  return points.filter(
    (p) => p.name === name && Object.entries(attributes).every(([key, value]) => p.attributes[key] === value),
  );
}

/** The one point of `name` with exactly `attributes`, or undefined; several is an error (the test's attributes are not specific enough). */
function onePoint(points: readonly MetricPoint[], name: string, attributes: Attributes): MetricPoint | undefined {
  const exact = pointsOf(points, name, attributes).filter(
    (p) => Object.keys(p.attributes).length === Object.keys(attributes).length,
  );
  if (exact.length > 1)
    throw new Error(`${exact.length} points of ${name} have the attributes ${JSON.stringify(attributes)}`);
  return exact[0];
}

/** The value of the point of counter or gauge `name` with exactly `attributes`; undefined when there is none. */
export function pointValue(points: readonly MetricPoint[], name: string, attributes: Attributes): number | undefined {
  const value = onePoint(points, name, attributes)?.value;
  if (typeof value === 'object') throw new Error(`${name} is a histogram: use histogramValue`);
  return value;
}

/** The point of histogram `name` with exactly `attributes`; undefined when there is none. */
export function histogramValue(
  points: readonly MetricPoint[],
  name: string,
  attributes: Attributes,
): HistogramValue | undefined {
  const value = onePoint(points, name, attributes)?.value;
  if (typeof value === 'number') throw new Error(`${name} is not a histogram: use pointValue`);
  return value;
}
