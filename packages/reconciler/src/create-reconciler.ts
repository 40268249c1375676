import { OutboxConfigError, verifyOutboxTable, type OutboxSpec, type AnyKysely, type MeterOptions } from '@outbox/outbox';
import { consoleLogger, type Logger } from './logger.js';
import { redriveMetrics } from './reconciler-metrics.js';
import { redrivePoisoned, type RedriveResult, type RedrivenIntent } from './redrive.js';
import { retireSuperseded } from './retire.js';
import { verifyCoverageSql } from './verify-coverage.js';

/**
 * What `createReconciler` takes; `meter` or `meterProvider` for its metrics (docs/metrics.md).
 *
 * @example
 * const config: ReconcilerConfig = { db, spec: iamOutbox, interval: 60_000, batchSize: 200 };
 */
export interface ReconcilerConfig extends MeterOptions {
  readonly db: AnyKysely;
  /** The outbox spec shared with the writer and the drainer: one partition column for both halves of the ordering rule. */
  readonly spec: OutboxSpec;
  /** Where the reconciler logs. Default: console, warnings (superseded intents) and errors only. */
  readonly logger?: Logger;
  /**
   * Milliseconds between scheduled passes (`start()`). Default 300000 (5 min), at most 2147483647
   * (Node's timer limit: a longer delay would silently become 1 ms). Poisoned rows are
   * rare, so a pass mostly finds nothing; an intent poisoned by an outage is retried within minutes
   * of the outage ending, while one poisoned for good costs one delivery attempt per interval.
   */
  readonly interval?: number;
  /**
   * Most poisoned rows one pass revives (and, separately, most superseded rows it reports).
   * Default 500, at most 1000: a pass holds one advisory lock per partition it revives, and the
   * Postgres lock table is shared (~6.4k slots by default) with every enqueue.
   */
  readonly batchSize?: number;
  /**
   * How long a pass waits for the row and partition locks of its candidates' partitions (held by a
   * drainer delivering them, or an enqueue). Default 5000 ms. Waiting is what lets the pass see every
   * delivery in flight; past this, the pass rolls back and defers its candidates to the next one,
   * so a stuck drainer cannot freeze the pass — nor, through the rows it had locked, other
   * partitions — for as long as its delivery deadline.
   */
  readonly lockTimeoutMs?: number;
}

/**
 * The reconciler of one outbox table.
 *
 * @example
 * const reconciler: Reconciler = createReconciler({ db, spec: vpcOutbox });
 * await reconciler.start();
 */
export interface Reconciler {
  /**
   * One pass: revives poisoned intents that no delivered successor supersedes, reports the
   * superseded ones. Passes of this process run one after another; a pass in another process makes
   * this one return `skipped: true`.
   */
  redrivePoisoned(): Promise<RedriveResult>;
  /**
   * Closes superseded intents with a reason (`retired_at`, `retired_reason`), all or nothing.
   * Throws a {@link RetireRefusedError} naming every id that is not superseded (and an
   * `OutboxConfigError` naming `reason` or `ids` when those are missing). Returns the rows retired.
   */
  retire(ids: readonly (string | number | bigint)[], reason: string): Promise<readonly RedrivenIntent[]>;
  /** Verifies the table and the coverage SQL, then runs a pass every `interval`. */
  start(): Promise<void>;
  /** Stops the timer and waits for a pass in flight. */
  stop(): Promise<void>;
}

const MAX_BATCH_SIZE = 1_000;
/** Node's timers take at most 2^31 - 1 ms: a longer delay is silently replaced by 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;

function positiveInteger(field: string, value: number | undefined, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  const result = value ?? fallback;
  if (!Number.isInteger(result) || result < 1 || result > max) {
    throw new OutboxConfigError(field, `expected an integer from 1 to ${max}, got ${String(value)}`);
  }
  return result;
}

/**
 * Creates the reconciler of one outbox table (DESIGN §6): it resets poisoned intents to claimable,
 * but never one that a later, delivered intent of its partition supersedes (replaying an old
 * "register" over a delivered "deregister" would resurrect revoked access). Run it on a timer for a
 * register-outbox, or call `redrivePoisoned()` when something changes (iam: a new authorization model).
 *
 * @example
 * const reconciler = createReconciler({ db, spec: vpcOutbox, logger });
 * await reconciler.start(); // verifies the table, then a pass every 5 minutes
 * // iam, on an authorization-model change:
 * const { revived, superseded } = await reconciler.redrivePoisoned();
 * // a human, after reviewing the WARN:
 * await reconciler.retire(superseded.map((s) => s.id), 'deregistered before the outage ended');
 * await reconciler.stop();
 */
export function createReconciler(config: ReconcilerConfig): Reconciler {
  if (!config || typeof config !== 'object') throw new OutboxConfigError('config', 'expected { db, spec }');
  if (!config.db) throw new OutboxConfigError('db', 'a Kysely instance is required');
  if (!config.spec || typeof config.spec.partitionColumn !== 'string') {
    throw new OutboxConfigError('spec', 'expected the OutboxSpec from defineOutbox()');
  }
  const { db, spec } = config;
  const interval = positiveInteger('interval', config.interval, 300_000, MAX_TIMER_MS);
  const batchSize = positiveInteger('batchSize', config.batchSize, 500, MAX_BATCH_SIZE);
  const lockTimeoutMs = positiveInteger('lockTimeoutMs', config.lockTimeoutMs, 5_000, MAX_TIMER_MS);
  const logger = config.logger ?? consoleLogger;
  const metrics = redriveMetrics(config);

  let verified: Promise<void> | undefined;
  const verify = () =>
    (verified ??= (async () => {
      await verifyOutboxTable(db, spec);
      await verifyCoverageSql(db, spec);
    })().catch((error: unknown) => {
      verified = undefined; // a later call checks again (the migration may not have run yet)
      throw error;
    }));

  // Passes of this process run one at a time: each waits for the previous one.
  let queue: Promise<unknown> = Promise.resolve();
  const enqueuePass = <T>(work: () => Promise<T>): Promise<T> => {
    const next = queue.then(async () => {
      await verify();
      return work();
    });
    queue = next.catch(() => undefined);
    return next;
  };
  const redrive = () => metrics.pass(spec.table, () => enqueuePass(() => redrivePoisoned(db, spec, batchSize, logger, lockTimeoutMs)));

  let timer: ReturnType<typeof setTimeout> | undefined;
  let generation = 0; // bumped by stop(): a tick of an earlier start() must not reschedule

  const schedule = (own: number) => {
    timer = setTimeout(() => {
      timer = undefined;
      void redrive()
        .catch((error: unknown) => logger.error('redrive pass failed; retrying at the next interval', { table: spec.table, error }))
        .finally(() => {
          if (own === generation) schedule(own);
        });
    }, interval);
    timer.unref(); // the reconciler alone must not keep a process alive
  };

  return {
    redrivePoisoned: redrive,
    retire: (ids, reason) => enqueuePass(() => retireSuperseded(db, spec, ids, reason)),
    async start() {
      await verify();
      if (timer !== undefined) return;
      generation += 1;
      schedule(generation);
    },
    async stop() {
      generation += 1;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      await queue;
    },
  };
}
