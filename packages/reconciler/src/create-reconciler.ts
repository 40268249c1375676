import { OutboxConfigError, verifyOutboxTable, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { closePoisoned } from './close-poisoned.js';
import { compactOutbox, type CompactOptions, type CompactionResult } from './compact.js';
import { consoleLogger, type Logger } from './logger.js';
import { redrivePoisoned, type PassContext, type RedriveOptions, type RedriveResult, type RedrivenIntent } from './redrive.js';
import { verifyCoverageSql } from './verify-coverage.js';

/**
 * The spacing between revivals of one refused row: `baseMs · 2^n` after its n-th, at most `maxMs`.
 *
 * @example
 * const revivalBackoff: RevivalBackoff = { baseMs: 60_000, maxMs: 86_400_000 };
 */
export interface RevivalBackoff {
  /** Default 60000: a model fixed in two tries within a minute still gets its second try a minute later. */
  readonly baseMs?: number;
  /** Default 86400000 (a day): a row that keeps being refused costs at most one write a day, whatever asks. */
  readonly maxMs?: number;
}

/**
 * Compaction on the reconciler's own timer (see {@link compactOutbox}).
 *
 * @example
 * createReconciler({ db, spec, compaction: { intervalMs: 3_600_000, retentionMs: 30 * 86_400_000 } });
 */
export interface CompactionSchedule extends Pick<CompactOptions, 'retentionMs' | 'closedRetentionMs' | 'batchSize'> {
  /** Milliseconds between runs. Default 3600000: the ledger grows by the hour, not by the second. */
  readonly intervalMs?: number;
}

/**
 * What `createReconciler` takes.
 *
 * @example
 * const config: ReconcilerConfig = { db, spec: iamOutbox, interval: 60_000, batchSize: 200 };
 */
export interface ReconcilerConfig {
  readonly db: AnyKysely;
  /** The outbox spec shared with the writer and the drainer: one partition column for both halves of the ordering rule. */
  readonly spec: OutboxSpec;
  /** Where the reconciler logs. Default: console, warnings (superseded intents) and errors only. */
  readonly logger?: Logger;
  /**
   * Milliseconds between scheduled passes (`start()`). Default 300000 (5 min), at most 2147483647
   * (Node's timer limit: a longer delay silently becomes 1 ms). An intent poisoned by an outage is
   * retried within minutes of it ending; one refused for good is not retried until asked.
   */
  readonly interval?: number;
  /**
   * Most poisoned rows one pass revives (and, separately, reports superseded or waiting). Default
   * 500, at most 1000: a pass holds an advisory lock per partition, in a lock table (~6.4k slots by
   * default) shared with every enqueue.
   */
  readonly batchSize?: number;
  /**
   * How long a pass waits for the locks drainers and enqueues hold on its candidates' partitions.
   * Default 5000 ms; past it the pass defers what it could not lock, so a stuck drainer delays only
   * its own partition.
   */
  readonly lockTimeoutMs?: number;
  /** The spacing between revivals of one refused row. Default `{ baseMs: 60000, maxMs: 86400000 }`. */
  readonly revivalBackoff?: RevivalBackoff;
  /**
   * The authorization model in force, asked before each scheduled pass: when it differs from the
   * last answer, refused rows are asked to retry (`model-change`). Default none: call
   * `redrivePoisoned({ refused: true, reason })` yourself. A change while no reconciler runs is not seen.
   */
  readonly modelId?: () => string | undefined | Promise<string | undefined>;
  /** Run {@link compactOutbox} on a timer (started by `start()`). Default off: deleting history is the owner's choice. */
  readonly compaction?: CompactionSchedule | false;
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
   * One pass: revives poisoned intents that no delivered successor supersedes (refused ones only
   * when asked), reports the superseded and waiting ones. Passes of this process run one after
   * another; a pass in another process makes this one return `skipped: true`.
   */
  redrivePoisoned(options?: RedriveOptions): Promise<RedriveResult>;
  /**
   * Closes superseded intents with a reason (`retired_at`, `retired_reason`), all or nothing.
   * Throws a {@link RetireRefusedError} naming every id that is not superseded (and an
   * `OutboxConfigError` naming `reason` or `ids` when those are missing). Returns the rows retired.
   */
  retire(ids: readonly (string | number | bigint)[], reason: string): Promise<readonly RedrivenIntent[]>;
  /**
   * Closes poisoned intents that are NOT superseded, with a reason: the decision that their tuples
   * will never be written (an under-grant), logged at WARN and kept as evidence. All or nothing; a
   * {@link DiscardRefusedError} names every id refused (superseded ones go to `retire`).
   */
  discardPoisoned(options: { readonly ids: readonly (string | number | bigint)[]; readonly reason: string }): Promise<readonly RedrivenIntent[]>;
  /** One compaction run now, with the schedule's settings unless overridden. */
  compact(options?: Omit<CompactOptions, 'db' | 'spec'>): Promise<CompactionResult>;
  /** Verifies the table and the coverage SQL, then runs a pass every `interval` (and compaction, when scheduled). */
  start(): Promise<void>;
  /** Stops the timers and waits for a pass or compaction in flight. */
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
 * Creates the reconciler of one outbox table (docs/design.md §6, §10): it revives poisoned intents
 * — never one a later, delivered intent of its partition supersedes — closes them on request, and
 * can compact the ledger. On a timer for every outbox; on demand after a model change.
 *
 * @example
 * const reconciler = createReconciler({ db, spec: vpcOutbox, logger });
 * await reconciler.start(); // verifies the table, then a pass every 5 minutes
 * // on an authorization-model change:
 * await reconciler.redrivePoisoned({ refused: true, reason: 'model-change' });
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
  if (config.modelId !== undefined && typeof config.modelId !== 'function') throw new OutboxConfigError('modelId', 'expected a function');
  const { db, spec } = config;
  const interval = positiveInteger('interval', config.interval, 300_000, MAX_TIMER_MS);
  const logger = config.logger ?? consoleLogger;
  const spacing = {
    baseMs: positiveInteger('revivalBackoff.baseMs', config.revivalBackoff?.baseMs, 60_000),
    maxMs: positiveInteger('revivalBackoff.maxMs', config.revivalBackoff?.maxMs, 86_400_000),
  };
  const ctx: PassContext = {
    db,
    spec,
    batchSize: positiveInteger('batchSize', config.batchSize, 500, MAX_BATCH_SIZE),
    lockTimeoutMs: positiveInteger('lockTimeoutMs', config.lockTimeoutMs, 5_000, MAX_TIMER_MS),
    spacing,
    logger,
  };
  const compaction = config.compaction || undefined;
  const compactEvery = compaction ? positiveInteger('compaction.intervalMs', compaction.intervalMs, 3_600_000, MAX_TIMER_MS) : undefined;

  let verified: Promise<void> | undefined;
  const verify = () =>
    (verified ??= (async () => {
      await verifyOutboxTable(db, spec);
      await verifyCoverageSql(db, spec);
    })().catch((error: unknown) => {
      verified = undefined; // a later call checks again (the migration may not have run yet)
      throw error;
    }));

  // Passes, retire and discard of this process run one at a time: each waits for the previous one.
  let queue: Promise<unknown> = Promise.resolve();
  const enqueuePass = <T>(work: () => Promise<T>): Promise<T> => {
    const next = queue.then(async () => {
      await verify();
      return work();
    });
    queue = next.catch(() => undefined);
    return next;
  };

  // The model id last seen, and whether a change still has to reach the table (a pass that failed or skipped).
  let model: { id: string | undefined; changed: boolean } | undefined;
  const readModel = async () => {
    if (!config.modelId) return;
    try {
      const id = await config.modelId();
      if (id === undefined) return;
      if (model !== undefined && model.id !== id) logger.info('authorization model changed: refused intents will be retried', { table: spec.table, from: model.id, to: id });
      model = { id, changed: model?.changed === true || (model !== undefined && model.id !== id) };
    } catch (error) {
      logger.warn('could not read the authorization model id; refused intents wait for the next pass that can', { table: spec.table, error });
    }
  };
  const scheduledPass = async () => {
    await readModel();
    const changed = model?.changed === true;
    const result = await enqueuePass(() => redrivePoisoned(ctx, changed ? { refused: true, reason: 'model-change' } : {}));
    if (changed && !result.skipped && model) model.changed = false;
  };
  const passes = repeating(interval, () =>
    scheduledPass().catch((error: unknown) => logger.error('redrive pass failed; retrying at the next interval', { table: spec.table, error })),
  );

  const compact = (options: Omit<CompactOptions, 'db' | 'spec'> = {}) => verify().then(() => compactOutbox({ ...compaction, logger, ...options, db, spec }));
  let stopping = new AbortController(); // ends a scheduled compaction between two batches
  const compactions =
    compactEvery === undefined
      ? undefined
      : repeating(compactEvery, () =>
          compact({ signal: stopping.signal }).catch((error: unknown) => logger.error('compaction failed; retrying at the next interval', { table: spec.table, error })),
        );

  return {
    redrivePoisoned: (options) => enqueuePass(() => redrivePoisoned(ctx, options)),
    retire: (ids, reason) => enqueuePass(() => closePoisoned(db, spec, 'retired', ids, reason, logger)),
    discardPoisoned: (options) => enqueuePass(() => closePoisoned(db, spec, 'discarded', options?.ids, options?.reason, logger)),
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
