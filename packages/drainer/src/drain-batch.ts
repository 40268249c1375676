import { backoffDelayMs } from './backoff.js';
import { claimBatch, claimHeadsById } from './claim.js';
import { applyOrdering, deliverBatch } from './deliver.js';
import type { HeadLimit } from './head-limit.js';
import type { PartitionFence } from './partition-fence.js';
import { recordOutcomes, type SettledPartitions } from './record-outcomes.js';
import type { ResolvedDrainerConfig } from './resolve-drainer-config.js';
import type { AnyKysely } from '@outbox/outbox';
import { assertRecordedMaxAttempts } from '@outbox/outbox/protocol';

/** Whatever the pool's default isolation: the claim, the settle and the reconciler rely on READ COMMITTED. */
export const BEGIN = 'begin isolation level read committed';
export const COMMIT_AND_BEGIN = `commit; ${BEGIN}`;
/** BEGIN with the durability the claim function sets when `synchronousCommit` is off, in one round trip. */
export const BEGIN_ASYNC_COMMIT = `${BEGIN}; set local synchronous_commit = off`;
/** What a chained settle, unread, is taken to say: a full run nearly always leaves a next head. */
const FULL_RUN_SETTLED: SettledPartitions = { partitions: 1, withNextHead: 1 };

/** The ids a batch delivered, and those it poisoned with their errors. */
export interface CommittedOutcomes {
  readonly delivered: readonly string[];
  readonly poisoned: ReadonlyArray<{ readonly id: string; readonly error: string }>;
}

/** What one batch did. */
export interface BatchResult {
  readonly claimed: number;
  readonly delivered: number;
  readonly retried: number;
  readonly poisoned: number;
  readonly released: number;
  /** Partition heads among the claimed intents. */
  readonly heads: number;
  readonly settled: SettledPartitions;
  /** The settle went out with the COMMIT and the next BEGIN. */
  readonly chained: boolean;
  /** What a waiting `flush` learns once the batch committed. */
  readonly recorded: CommittedOutcomes;
  /** Emits the outcome events; called once the batch committed. */
  readonly announce: () => void;
}

export interface BatchOptions {
  readonly config: ResolvedDrainerConfig;
  readonly limit: HeadLimit;
  readonly flushKeys: readonly string[];
  /**
   * Claim only those of these ids that are due heads (the write-through) instead of a batch, in a
   * transaction its caller opened with the claim function's durability ({@link BEGIN_ASYNC_COMMIT}).
   */
  readonly headIds?: readonly string[];
  /** Told the ids the sink took, before their outcomes are recorded (the write-through answers on it). */
  readonly onDelivered?: (ids: readonly string[]) => void;
  /** Send the COMMIT with the settle when every intent was delivered: the result is then `chained`. */
  readonly commitWithSettle?: boolean;
  /** Whether the pass would go on after this batch, the condition of chaining it. */
  readonly mayChain: () => boolean;
  /** This drainer's sink calls in flight by partition: the batch sends only once none holds its partitions. */
  readonly fence: PartitionFence;
  /**
   * Told what the claim took (intents, of which heads, in how long) before they are delivered: the
   * pass may open another batch meanwhile. What it answers is called once the delivery is over.
   */
  readonly onClaimed?: (claimed: {
    readonly count: number;
    readonly heads: number;
    readonly claimMs: number;
  }) => (() => void) | void;
}

/**
 * Claims, delivers and records one batch in the transaction open on `conn`; undefined when nothing
 * was claimable. The caller commits, unless a full one-partition run, all delivered, was `chained`.
 */
export async function runBatch(conn: AnyKysely, options: BatchOptions): Promise<BatchResult | undefined> {
  const { config, limit } = options;
  const { spec, batchSize, emit, logger } = config;
  const claimStarted = performance.now();
  const batch = options.headIds
    ? await claimHeadsById(conn, spec, options.headIds)
    : await claimBatch(conn, spec, batchSize, {
        headLimit: limit.heads,
        runs: limit.runs,
        synchronousCommit: config.synchronousCommit,
        flushKeys: options.flushKeys,
      });
  if (batch.intents.length === 0) return undefined;
  const claimMs = performance.now() - claimStarted;
  emit({ type: 'batch-claimed', table: spec.table, count: batch.intents.length, heads: batch.heads, claimMs });
  const deliveryOver = options.onClaimed?.({ count: batch.intents.length, heads: batch.heads, claimMs });
  const deliverStarted = performance.now();
  let outcomes;
  try {
    outcomes = await deliverBatch(config.sink, batch.intents, config.deliveryTimeoutMs, options.fence);
  } finally {
    deliveryOver?.();
  }
  const deliverMs = performance.now() - deliverStarted;
  const ordered = applyOrdering(batch.intents, outcomes);
  options.onDelivered?.(ordered.delivered.map((i) => i.id));
  // The write-through's claim skips the table's maxAttempts; a failure counts with it (a delivery
  // does not), so a spec changed under this drainer refuses the batch here, rolled back.
  if (options.headIds && ordered.delivered.length < batch.intents.length)
    await assertRecordedMaxAttempts(conn, spec, 'drainer');
  const fullRun = batch.heads === 1 && batch.intents.length === batchSize && options.mayChain();
  const sendWith = options.commitWithSettle ? 'commit' : fullRun ? COMMIT_AND_BEGIN : undefined;
  const recorded = await recordOutcomes(conn, spec, ordered, {
    delayMs: (intent) => backoffDelayMs(intent.attemptCount, config.backoff),
    ...(sendWith ? { sendWith } : {}),
    ...(config.lateWrites ? { verifyDelayMs: config.lateWrites.verifyDelayMs } : {}),
  });
  return {
    chained: recorded.settled === undefined,
    recorded: {
      delivered: recorded.delivered.map((i) => i.id),
      poisoned: recorded.poisoned.map((r) => ({ id: r.intent.id, error: r.error })),
    },
    heads: batch.heads,
    settled: recorded.settled ?? FULL_RUN_SETTLED,
    claimed: batch.intents.length,
    delivered: recorded.delivered.length,
    retried: recorded.retried.length,
    poisoned: recorded.poisoned.length,
    released: recorded.released.length,
    announce: () => {
      if (recorded.delivered.length > 0) {
        // Called right after the commit that recorded the deliveries: that is where each lag ends.
        const committed = performance.now();
        const lagMs = recorded.delivered.map((i) => committed - (batch.createdAt.get(i.id) as number));
        emit({ type: 'delivered', table: spec.table, ids: recorded.delivered.map((i) => i.id), lagMs, deliverMs });
      }
      if (recorded.retried.length > 0) {
        emit({
          type: 'retried',
          table: spec.table,
          ids: recorded.retried.map((r) => r.intent.id),
          errors: recorded.retried.map((r) => r.error),
        });
      }
      if (recorded.poisoned.length > 0) {
        const keys = recorded.poisoned.map((r) => r.intent.partitionKey);
        logger.warn(`poisoned ${recorded.poisoned.length} intent(s) of ${spec.table}`, {
          ids: recorded.poisoned.map((r) => r.intent.id),
          partitionKeys: keys,
        });
        emit({
          type: 'poisoned',
          table: spec.table,
          ids: recorded.poisoned.map((r) => r.intent.id),
          partitionKeys: keys,
          errors: recorded.poisoned.map((r) => r.error),
        });
      }
    },
  };
}
