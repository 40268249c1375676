import {
  metrics,
  ValueType,
  type Attributes,
  type BatchObservableCallback,
  type Meter,
  type MeterProvider,
  type ObservableCounter,
  type ObservableGauge,
} from '@opentelemetry/api';
import { sql } from 'kysely';
import manifest from '../package.json' with { type: 'json' };
import { OUTBOX_ACTIONS } from './schema/actions-log-ddl.js';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError } from './errors.js';
import { integerInRange } from './integer-in-range.js';
import type { Logger } from './logger.js';
import { countedMaxAttemptsSql } from './max-attempts.js';
import { rowStates } from './protocol/row-states.js';
import { outboxStatsQuery } from './stats.js';
import { tableNames } from './table-names.js';
import { XMIN_HOLDERS_SQL } from './protocol/xmin-holders.js';

/**
 * Where an @outbox library records its metrics (docs/metrics.md). Both unset: the global meter
 * provider of `@opentelemetry/api`, a no-op until the application installs an OpenTelemetry SDK —
 * so metrics cost nothing unless asked for. Install the SDK before creating drainers and observers:
 * a meter taken from the no-op provider stays a no-op.
 */
export interface MeterOptions {
  /** The meter to record on. Default: `meterProvider`'s meter for the library's name and version. */
  readonly meter?: Meter;
  /** Where to get the meter when `meter` is not given. Default: the global provider; for tests and applications that keep no global. */
  readonly meterProvider?: MeterProvider;
}

/** The attribute naming the outbox table (`spec.table`) on every instrument of the @outbox libraries. */
export const OUTBOX_TABLE_ATTRIBUTE = 'outbox.table';
/**
 * Runs `add` (a counter's `add(0, …)` for each attribute set it will count under), ignoring a meter
 * that throws. A series that starts at 0 has a sample before its first increment, without which
 * Prometheus' `rate()` and `increase()` miss that increment, and a dashboard shows no data for 0.
 */
export function startAtZero(add: () => void): void {
  try {
    add();
  } catch {
    // a broken meter must not stop a drainer or reconciler from being created
  }
}

/** The attribute splitting `outbox.intent.poisoned` by why the rows are poisoned (`poison_cause`: `exhausted`, `refused`). */
const POISON_CAUSE_ATTRIBUTE = 'outbox.poison.cause';
/** The attribute splitting `outbox.actions` by what an operator did (`redrive`, `retire`, `discard`, `repair`, `compact`). */
const ACTION_ATTRIBUTE = 'outbox.action';

/** The meter of the library `scope` for `options`; a `meter` or `meterProvider` that is not one is an OutboxConfigError. */
export function resolveMeter(options: MeterOptions, scope: { readonly name: string; readonly version: string }): Meter {
  const { meter, meterProvider } = options;
  if (meter !== undefined) {
    if (typeof meter?.createCounter !== 'function')
      throw new OutboxConfigError('meter', 'expected an OpenTelemetry Meter');
    return meter;
  }
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') {
    throw new OutboxConfigError('meterProvider', 'expected an OpenTelemetry MeterProvider');
  }
  return (meterProvider ?? metrics).getMeter(scope.name, scope.version);
}

/** What {@link observeOutbox} takes. */
export interface ObserveOutboxOptions extends MeterOptions {
  readonly db: AnyKysely;
  readonly spec: OutboxSpec;
  /**
   * Milliseconds one read of the table serves collections for. Default 10000: below the usual 15–60 s
   * scrape interval, so each scrape of one Prometheus reads the table afresh, while a burst of
   * collections (an HA pair of Prometheus, several readers, a curl loop) costs one query.
   */
  readonly minIntervalMs?: number;
  /** Told (WARN) when a read fails; the gauges observe nothing in that collection. Default: console. */
  readonly logger?: Pick<Logger, 'warn'>;
}

/** A running {@link observeOutbox}. */
export interface OutboxObserver {
  /** Unregisters the gauges' callback: later collections no longer read the table (the JS SDK goes on exporting the last values, opentelemetry-js#4096). */
  stop(): void;
}

/** One row of {@link outboxGaugesQuery}: the counts of outboxStats, the oldest deliverable row's age, the actions log's rows by action. */
type GaugeRow = Record<string, string | number | null> & { actions?: Record<string, number | string> | null };

const ACTIONS_COUNTER = {
  name: 'outbox.actions',
  unit: '{action}',
  description:
    'Operator actions that changed the ledger, by outbox.action: the rows of the actions log, read from the table (every process reports the same: the CLI included).',
} as const;

const GAUGES = {
  pending: { name: 'outbox.intent.pending', unit: '{intent}', description: 'Intents not delivered and not retired.' },
  deliverable: {
    name: 'outbox.intent.deliverable',
    unit: '{intent}',
    description: 'Pending intents with attempts left: the drainer will deliver these.',
  },
  poisoned: {
    name: 'outbox.intent.poisoned',
    unit: '{intent}',
    description:
      'Pending intents with no attempts left, by outbox.poison.cause (exhausted, refused): waiting for the reconciler or a human.',
  },
  superseded: {
    name: 'outbox.intent.superseded',
    unit: '{intent}',
    description: 'Poisoned intents a delivered successor covers: to be retired, never revived.',
  },
  oldestPendingAge: {
    name: 'outbox.intent.oldest_pending_age',
    unit: 's',
    description: 'Age of the oldest pending intent (poisoned ones included).',
  },
  oldestDeliverableAge: {
    name: 'outbox.intent.oldest_deliverable_age',
    unit: 's',
    description: 'Age of the oldest deliverable intent: how far delivery lags.',
  },
  oldestXminAge: {
    name: 'outbox.database.oldest_xmin_age',
    unit: 's',
    description:
      "Age of the oldest transaction holding back vacuum in the outbox's database (a snapshot or a transaction id; prepared ones included): delivered rows' dead entries pile up in the claim index until it ends.",
  },
} as const;

type GaugeKey = keyof typeof GAUGES;

/**
 * What one collection reports, from the query's row: a gauge, its value, and the attributes beside
 * `outbox.table` (a state split further, e.g. poisoned rows by cause, is one attribute of its gauge).
 * An age is 0 while no row is in its state: nothing waits. (Left out instead, the JS SDK would go
 * on exporting the last age it saw, opentelemetry-js#4096, and an alert on it would never clear.)
 */
function observations(
  row: GaugeRow,
): Array<{ readonly gauge: GaugeKey; readonly value: number; readonly attributes?: Attributes }> {
  const value = (gauge: GaugeKey, column: string) => ({ gauge, value: Number(row[column] ?? 0) });
  const refused = Number(row.refused ?? 0);
  return [
    value('pending', 'pending'),
    value('deliverable', 'deliverable'),
    // Both causes, 0 included (as an age is); a NULL cause (poisoned before it was recorded) counts as exhausted, as in outboxStats.
    {
      gauge: 'poisoned',
      value: Number(row.poisoned ?? 0) - refused,
      attributes: { [POISON_CAUSE_ATTRIBUTE]: 'exhausted' },
    },
    { gauge: 'poisoned', value: refused, attributes: { [POISON_CAUSE_ATTRIBUTE]: 'refused' } },
    value('superseded', 'superseded'),
    value('oldestPendingAge', 'oldest_pending_age_seconds'),
    value('oldestDeliverableAge', 'oldest_deliverable_age_seconds'),
    value('oldestXminAge', 'oldest_xmin_age_seconds'),
  ];
}

/**
 * The statement behind {@link observeOutbox}: outboxStats' counts and, in the same round trip, the
 * age of the deliverable row with the smallest id — a walk of the pending index that stops at the
 * first row with attempts left, so it reads the poisoned rows before it, not the backlog — the
 * actions log's rows by action (a count of a table of operator actions: small), and the age of the
 * oldest transaction holding back vacuum (a read of pg_stat_activity and pg_prepared_xacts: memory,
 * one row per session).
 */
export function outboxGaugesQuery(spec: OutboxSpec) {
  const row = rowStates();
  return sql<GaugeRow>`
    select s.*, (
      select extract(epoch from now() - created_at) from ${sql.raw(tableNames(spec).table)}
      where ${row.deliverable(countedMaxAttemptsSql(spec))}
      order by id limit 1
    ) as oldest_deliverable_age_seconds, (
      select jsonb_object_agg(a.action, a.n) from (
        select action, count(*) as n from ${sql.raw(tableNames(spec).actionsTable)} group by action
      ) a
    ) as actions, (
      select greatest(0, coalesce(extract(epoch from now() - min(since)), 0)) from (${sql.raw(XMIN_HOLDERS_SQL)}) h
    ) as oldest_xmin_age_seconds
    from (${outboxStatsQuery(spec)}) s`;
}

/** `read`, answered from its last result while that is younger than `minIntervalMs`; concurrent callers share one read. */
function throttled<T>(read: () => Promise<T>, minIntervalMs: number): () => Promise<T> {
  let last: { readonly at: number; readonly value: T } | undefined;
  let inFlight: Promise<T> | undefined;
  return () => {
    if (last !== undefined && performance.now() - last.at < minIntervalMs) return Promise.resolve(last.value);
    const at = performance.now();
    inFlight ??= read()
      .then((value) => {
        last = { at, value };
        return value;
      })
      .finally(() => {
        inFlight = undefined;
      });
    return inFlight;
  };
}

/**
 * Reports an outbox's state as OpenTelemetry gauges (docs/metrics.md): pending, deliverable, poisoned
 * (by cause) and superseded intents, the oldest pending and deliverable intent's age, and the age of
 * the oldest transaction holding back vacuum in its database, each with the `outbox.table` attribute; and the actions log's rows by action as the counter `outbox.actions`
 * (what operators did, wherever they ran it). A collection reads the table with ONE query for all of them (none while
 * no SDK is installed), and reuses it for `minIntervalMs`. Every process that observes a table
 * reports the same numbers: aggregate across instances with `max`, never `sum`.
 *
 * @example
 * const observer = observeOutbox({ db, spec: vpcOutbox }); // the global meter provider
 * // on shutdown:
 * observer.stop();
 */
export function observeOutbox(options: ObserveOutboxOptions): OutboxObserver {
  if (!options || typeof options !== 'object') throw new OutboxConfigError('options', 'expected { db, spec }');
  const { db, spec } = options;
  if (!db) throw new OutboxConfigError('db', 'a Kysely instance is required');
  if (!spec || typeof spec.partitionColumn !== 'string')
    throw new OutboxConfigError('spec', 'expected the OutboxSpec from defineOutbox()');
  const minIntervalMs = integerInRange('minIntervalMs', options.minIntervalMs, { fallback: 10_000, min: 0 });
  const logger = options.logger ?? {
    warn: (message: string, fields?: Record<string, unknown>) =>
      console.warn(`[outbox-metrics] ${message}`, fields ?? ''),
  };
  const meter = resolveMeter(options, { name: manifest.name, version: manifest.version });
  const gauges = Object.fromEntries(
    Object.entries(GAUGES).map(([key, g]) => [
      key,
      meter.createObservableGauge(g.name, {
        unit: g.unit,
        description: g.description,
        valueType: g.unit === 's' ? ValueType.DOUBLE : ValueType.INT,
      }),
    ]),
  ) as Record<GaugeKey, ObservableGauge>;
  const actions: ObservableCounter = meter.createObservableCounter(ACTIONS_COUNTER.name, {
    unit: ACTIONS_COUNTER.unit,
    description: ACTIONS_COUNTER.description,
    valueType: ValueType.INT,
  });
  const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: spec.table };
  const read = throttled(async () => (await outboxGaugesQuery(spec).execute(db)).rows[0], minIntervalMs);

  const callback: BatchObservableCallback = async (result) => {
    let row: GaugeRow | undefined;
    try {
      row = await read();
    } catch (error) {
      logger.warn(`reading ${spec.table} for its gauges failed`, { table: spec.table, error });
      return;
    }
    if (row === undefined) return;
    for (const o of observations(row)) result.observe(gauges[o.gauge], o.value, { ...attributes, ...o.attributes });
    // Every action, 0 included: a series that starts at its first action would hide that one from rate().
    for (const action of OUTBOX_ACTIONS)
      result.observe(actions, Number(row.actions?.[action] ?? 0), { ...attributes, [ACTION_ATTRIBUTE]: action });
  };
  const observables = [...Object.values(gauges), actions];
  meter.addBatchObservableCallback(callback, observables);
  return { stop: () => meter.removeBatchObservableCallback(callback, observables) };
}
