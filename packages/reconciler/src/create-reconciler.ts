import {
  OutboxConfigError,
  verifyOutboxTable,
  type OutboxActionTrace,
  type OutboxSpec,
  type AnyKysely,
  type MeterOptions,
} from '@outbox/outbox';
import { integerInRange, MAX_TIMER_MS, RepeatedLines, resolveIntervalMs } from '@outbox/outbox/protocol';
import { closePoisoned } from './close-poisoned.js';
import { compactOutbox, type CompactOptions, type CompactionResult } from './compact.js';
import { consoleLogger, type Logger } from './console-logger.js';
import { reconcilerWorkMetrics } from './reconciler-metrics.js';
import {
  redrivePoisoned,
  type PassContext,
  type RedriveOptions,
  type RedriveResult,
  type RedrivenIntent,
} from './redrive.js';
import { verifyCoverageSql } from './verify-coverage.js';

/** A pass's report that repeats the previous one word for word is logged again after an hour (a timer pass would repeat it every interval). */
const REPORT_REMINDER_MS = 3_600_000;

/** The spacing between revivals of one refused row: `baseMs · 2^n` after its n-th, at most `maxMs`. */
export interface RevivalBackoff {
  /** Default 60000: a model fixed in two tries within a minute still gets its second try a minute later. */
  readonly baseMs?: number;
  /** Default 86400000 (a day): a row that keeps being refused costs at most one write a day, whatever asks. */
  readonly maxMs?: number;
}

/** {@link compactOutbox} on the reconciler's timer, e.g. `{ intervalMs: 3_600_000, retentionMs: 30 * 86_400_000 }`. */
export interface CompactionSchedule extends Pick<CompactOptions, 'retentionMs' | 'closedRetentionMs' | 'batchSize'> {
  /** Milliseconds between runs. Default 3600000: the ledger grows by the hour, not by the second. */
  readonly intervalMs?: number;
}

/** What `createReconciler` takes, e.g. `{ db, spec: iamOutbox, intervalMs: 60_000 }`; `meter` or `meterProvider` for its metrics (docs/metrics.md). */
export interface ReconcilerConfig extends MeterOptions {
  readonly db: AnyKysely;
  /** The spec shared with the writer and the drainer: one partition column for both halves of the ordering rule. */
  readonly spec: OutboxSpec;
  /** Where the reconciler logs. Default: console, warnings (superseded intents) and errors only. */
  readonly logger?: Logger;
  /** Milliseconds between scheduled passes. Default 300000: an outage's rows come back within minutes of it ending. */
  readonly intervalMs?: number;
  /** @deprecated The old name of `intervalMs`, still accepted; giving both is a config error. */
  readonly interval?: number;
  /** Most rows a pass revives (and reports per list). Default 500, at most 1000: one advisory lock per partition, in a shared lock table. */
  readonly batchSize?: number;
  /** How long a pass waits for drainers' and enqueues' locks. Default 5000 ms; past it, only the held partitions are deferred. */
  readonly lockTimeoutMs?: number;
  /** The spacing between revivals of one refused row. Default `{ baseMs: 60000, maxMs: 86400000 }`. */
  readonly revivalBackoff?: RevivalBackoff;
  /** The model in force, asked before each scheduled pass; a change asks refused rows to retry. Default none (call `redrivePoisoned({ refused })`). */
  readonly modelId?: () => string | undefined | Promise<string | undefined>;
  /** Compaction on a timer. Default off: deleting history is the owner's choice. */
  readonly compaction?: CompactionSchedule | false;
}

/** The reconciler of one outbox table (see {@link createReconciler}). */
export interface Reconciler {
  /** One pass (one at a time per process; `skipped` when another process's runs): revives, reports superseded and waiting rows. */
  redrivePoisoned(options?: RedriveOptions): Promise<RedriveResult>;
  /**
   * Closes superseded intents with a reason, all or nothing; a {@link RetireRefusedError} names every id refused.
   * `record` (a `traceOutboxAction` of `retire` with the same reason) writes the actions log's row in the same transaction.
   */
  retire(
    ids: readonly (string | number | bigint)[],
    reason: string,
    options?: { readonly record?: OutboxActionTrace },
  ): Promise<readonly RedrivenIntent[]>;
  /**
   * Closes poisoned intents NOT superseded, with a reason: their tuples are never written (logged at WARN). {@link DiscardRefusedError} names refusals.
   * `record` (a `traceOutboxAction` of `discard` with the same reason) writes the actions log's row in the same transaction.
   */
  discardPoisoned(options: {
    readonly ids: readonly (string | number | bigint)[];
    readonly reason: string;
    readonly record?: OutboxActionTrace;
  }): Promise<readonly RedrivenIntent[]>;
  /** One compaction run now, with the schedule's settings unless overridden. */
  compact(options?: Omit<CompactOptions, 'db' | 'spec'>): Promise<CompactionResult>;
  /** Verifies the table and the coverage SQL, then starts the timers. */
  start(): Promise<void>;
  /** Stops the timers and waits for a pass or compaction in flight. */
  stop(): Promise<void>;
}

const MAX_BATCH_SIZE = 1_000;

/** A timer that runs `work` every `intervalMs`, never two at once; `stop` waits for the run in flight. */
function repeating(intervalMs: number, work: () => Promise<unknown>) {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let generation = 0; // bumped by stop(): a tick of an earlier start must not reschedule
  let running: Promise<unknown> = Promise.resolve();
  const schedule = (own: number) => {
    timer = setTimeout(() => {
      timer = undefined;
      running = work().finally(() => {
        if (own === generation) schedule(own);
      });
    }, intervalMs);
    timer.unref(); // the reconciler alone must not keep a process alive
  };
  return {
    start() {
      if (timer !== undefined) return;
      generation += 1;
      schedule(generation);
    },
    async stop() {
      generation += 1;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}

/**
 * The reconciler of one outbox (docs/design.md §6, §10): revives poisoned intents, never past a
 * delivered successor; retires, discards and compacts on request.
 *
 * @example
 * const reconciler = createReconciler({ db, spec: vpcOutbox, logger });
 * await reconciler.start();
 * await reconciler.redrivePoisoned({ refused: true, reason: 'model-change' });
 * await reconciler.retire(superseded.map((s) => s.id), 'deregistered before the outage ended');
 */
export function createReconciler(config: ReconcilerConfig): Reconciler {
  if (!config || typeof config !== 'object') throw new OutboxConfigError('config', 'expected { db, spec }');
  if (!config.db) throw new OutboxConfigError('db', 'a Kysely instance is required');
  if (!config.spec || typeof config.spec.partitionColumn !== 'string') {
    throw new OutboxConfigError('spec', 'expected the OutboxSpec from defineOutbox()');
  }
  if (config.modelId !== undefined && typeof config.modelId !== 'function')
    throw new OutboxConfigError('modelId', 'expected a function');
  const { db, spec } = config;
  const intervalMs = resolveIntervalMs(config, 300_000);
  const logger = config.logger ?? consoleLogger;
  const spacing = {
    baseMs: integerInRange('revivalBackoff.baseMs', config.revivalBackoff?.baseMs, { fallback: 60_000, min: 1 }),
    maxMs: integerInRange('revivalBackoff.maxMs', config.revivalBackoff?.maxMs, { fallback: 86_400_000, min: 1 }),
  };
  const ctx: PassContext = {
    db,
    spec,
    batchSize: integerInRange('batchSize', config.batchSize, { fallback: 500, min: 1, max: MAX_BATCH_SIZE }),
    lockTimeoutMs: integerInRange('lockTimeoutMs', config.lockTimeoutMs, {
      fallback: 5_000,
      min: 1,
      max: MAX_TIMER_MS,
    }),
    spacing,
    logger,
    repeats: new RepeatedLines(REPORT_REMINDER_MS),
  };
  const compaction = config.compaction || undefined;
  const compactEvery = compaction
    ? integerInRange('compaction.intervalMs', compaction.intervalMs, { fallback: 3_600_000, min: 1, max: MAX_TIMER_MS })
    : undefined;

  let verified: Promise<void> | undefined;
  const verify = () =>
    (verified ??= (async () => {
      await verifyOutboxTable(db, spec);
      await verifyCoverageSql(db, spec);
    })().catch((error: unknown) => {
      verified = undefined; // a later call checks again (the migration may not have run yet)
      throw error;
    }));

  // Passes, retire and discard of this process run one after another.
  let queue: Promise<unknown> = Promise.resolve();
  const metrics = reconcilerWorkMetrics(config, spec.table);
  const enqueuePass = <T>(work: () => Promise<T>): Promise<T> => {
    const next = queue.then(async () => {
      await verify();
      return work();
    });
    queue = next.catch(() => undefined);
    return next;
  };

  // The model last seen, and whether its change still has to reach the table (a pass failed or skipped).
  let model: { id: string | undefined; changed: boolean } | undefined;
  const readModel = async () => {
    if (!config.modelId) return;
    try {
      const id = await config.modelId();
      if (id === undefined) return;
      if (model !== undefined && model.id !== id)
        logger.info('authorization model changed: refused intents will be retried', {
          table: spec.table,
          from: model.id,
          to: id,
        });
      model = { id, changed: model?.changed === true || (model !== undefined && model.id !== id) };
    } catch (error) {
      logger.warn('could not read the authorization model id; refused intents wait for the next pass that can', {
        table: spec.table,
        error,
      });
    }
  };
  const scheduledPass = async () => {
    await readModel();
    const changed = model?.changed === true;
    const result = await metrics.pass(spec.table, () =>
      enqueuePass(() => redrivePoisoned(ctx, changed ? { refused: true, reason: 'model-change' } : {})),
    );
    if (changed && !result.skipped && model) model.changed = false;
  };
  const passes = repeating(intervalMs, () =>
    scheduledPass().catch((error: unknown) =>
      logger.error('redrive pass failed; retrying at the next interval', { table: spec.table, error }),
    ),
  );

  const compact = (options: Omit<CompactOptions, 'db' | 'spec'> = {}) =>
    verify().then(() => compactOutbox({ ...compaction, logger, ...options, db, spec }));
  let stopping = new AbortController(); // ends a scheduled compaction between two batches
  const compactions =
    compactEvery === undefined
      ? undefined
      : repeating(compactEvery, () =>
          compact({ signal: stopping.signal }).catch((error: unknown) =>
            logger.error('compaction failed; retrying at the next interval', { table: spec.table, error }),
          ),
        );

  return {
    // A dry run changes nothing, so it counts as no pass.
    redrivePoisoned: (options) =>
      options?.dryRun
        ? enqueuePass(() => redrivePoisoned(ctx, options))
        : metrics.pass(spec.table, () => enqueuePass(() => redrivePoisoned(ctx, options))),
    retire: (ids, reason, options) =>
      enqueuePass(() => closePoisoned(db, spec, 'retired', ids, reason, logger, options?.record)),
    discardPoisoned: (options) =>
      metrics.discard(spec.table, () =>
        enqueuePass(() => closePoisoned(db, spec, 'discarded', options?.ids, options?.reason, logger, options?.record)),
      ),
    compact,
    async start() {
      await verify();
      if (stopping.signal.aborted) stopping = new AbortController();
      await readModel();
      passes.start();
      compactions?.start();
    },
    async stop() {
      stopping.abort();
      await Promise.all([passes.stop(), compactions?.stop()]);
      await queue;
    },
  };
}
