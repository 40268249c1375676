import { sql } from 'kysely';
import { BEGIN, BEGIN_ASYNC_COMMIT, COMMIT_AND_BEGIN, runBatch, type CommittedOutcomes } from './drain-batch.js';
import { initialHeadLimit, nextHeadLimit, type HeadLimit } from './head-limit.js';
import { checkLateWrites } from './late-write-check.js';
import type { ResolvedDrainerConfig } from './resolve-drainer-config.js';
import { PartitionFence } from './partition-fence.js';
import { ConnectionTurns, PassLanes } from './pass-lanes.js';
import { isSinkHalt } from './sink.js';
import type { AnyKysely } from '@outbox/outbox';
import { RepeatedLines } from '@outbox/outbox/protocol';

/** Counts of one `drainOnce()` pass. */
export interface DrainResult {
  readonly batches: number;
  readonly claimed: number;
  readonly delivered: number;
  readonly retried: number;
  readonly poisoned: number;
  readonly released: number;
  /** True when the pass stopped early because the sink halted (e.g. credentials refused). */
  readonly halted: boolean;
}

/** How long a lane keeps one pooled connection before handing it back between two batches. */
const SEGMENT_MS = 200;
/** A pass failing the same way as the last (a database down, credentials refused) is logged again after this. */
export const FAILURE_REMINDER_MS = 60_000;

export interface DrainPassOptions {
  readonly config: ResolvedDrainerConfig;
  /** Checks the table; inside the pass, so that a failed check is reported like any failed pass. */
  readonly verify: () => Promise<void>;
  readonly flushedPartitions: () => readonly string[];
  /** Told what each batch delivered and poisoned, right after its commit. */
  readonly committed: (recorded: CommittedOutcomes) => void;
  readonly stopping: () => boolean;
}

/** Rolls back a batch's transaction after a failure, whose error is the one reported. */
function rollbackQuietly(conn: AnyKysely): Promise<unknown> {
  return sql
    .raw('rollback')
    .execute(conn)
    .catch(() => undefined);
}

/** What a write-through did (`Drainer.writeThrough`). */
export interface WriteThroughResult {
  /** Ids the sink took: their tuples are in OpenFGA. Recorded as delivered once `settled` resolves. */
  readonly delivered: readonly string[];
  /** Ids it did not deliver: not heads, backing off, held by a drainer, or failed; the drainer's passes take them. */
  readonly deferred: readonly string[];
  /**
   * Resolves once the outcomes are committed: true, or false when the settle failed (logged; the
   * rows stay pending and a pass delivers them again, in order). Never rejects.
   */
  readonly settled: Promise<boolean>;
}

/** What runs passes: single flight is the caller's (`createDrainer`). */
export interface DrainPass {
  /** One pass (`Drainer.drainOnce`). */
  readonly run: () => Promise<DrainResult>;
  /** Delivers those of `ids` that are heads now, in a batch of their own (`Drainer.writeThrough`). */
  readonly writeThrough: (ids: readonly string[]) => Promise<WriteThroughResult>;
  /** Tells the pass in flight that more is claimable (commits were notified, a flush waits); nothing when no pass runs. */
  readonly moreClaimable: () => void;
}

type Totals = { -readonly [K in keyof DrainResult]: DrainResult[K] };

/**
 * One pass: up to `concurrentBatches` lanes, each running batches in segments on a pooled
 * connection of its own, each batch its own transaction (docs/drainer.md, "A pass"; docs/design.md
 * §5, "Open batches"). The head limit carries over between passes.
 */
export function createDrainPass(options: DrainPassOptions): DrainPass {
  const { config, stopping } = options;
  /** The last head limit a batch left: where a new lane starts, in this pass or the next. */
  let carried = initialHeadLimit(config.batchSize);
  const turns = new ConnectionTurns();
  let current: PassLanes | undefined;
  const repeats = new RepeatedLines(FAILURE_REMINDER_MS);
  const fence = new PartitionFence(); // across the lanes of every pass of this drainer
  let failedPasses = 0; // in a row, until a pass succeeds
  /** Whether the pass is ending: stopped, a lane failed, or a batch moved nothing. */
  const passEnding = (lanes: PassLanes) => stopping() || lanes.failed || lanes.stalled;

  /**
   * True when the lane should go on with another segment. Each lane adapts a head limit of its own,
   * as a drainer of its own would: lanes updating one limit in turn push it back and forth.
   */
  async function segment(
    conn: AnyKysely,
    lanes: PassLanes,
    own: { limit: HeadLimit },
    totals: Totals,
  ): Promise<boolean> {
    const ending = () => passEnding(lanes);
    const until = performance.now() + SEGMENT_MS;
    const goOn = () => !ending() && performance.now() < until;
    let open = false;
    try {
      for (;;) {
        if (!open) {
          await sql.raw(BEGIN).execute(conn);
          open = true;
        }
        // A claim that stopped at one of its limits (a full batch, or as many heads as the head limit
        // lets it take) left more claimable: another lane may claim it while this batch is delivered.
        const { limit } = own;
        const onClaimed = (claimed: { count: number; heads: number; claimMs: number }) => {
          lanes.want((claimed.count === config.batchSize || claimed.heads >= limit.heads) && !ending());
          return lanes.delivering(claimed.claimMs);
        };
        const batch = await runBatch(conn, {
          config,
          limit,
          flushKeys: options.flushedPartitions(),
          mayChain: goOn,
          onClaimed,
          fence,
        });
        if (batch === undefined) return false;
        own.limit = carried = nextHeadLimit(limit, {
          batchSize: config.batchSize,
          claimed: batch.claimed,
          claimedHeads: batch.heads,
          settled: batch.settled,
        });
        // A batch that moved nothing ends the pass (every lane after its current batch): it would spin (a skipped head, a 0 ms backoff), or the target is down.
        const progressed = batch.delivered + batch.poisoned > 0;
        if (!progressed) lanes.stall();
        const stay = batch.chained || (progressed && goOn());
        if (!batch.chained) {
          open = false; // a failed COMMIT ends the transaction too
          await sql.raw(stay ? COMMIT_AND_BEGIN : 'commit').execute(conn);
          open = stay;
        }
        totals.batches += 1;
        totals.claimed += batch.claimed;
        totals.delivered += batch.delivered;
        totals.retried += batch.retried;
        totals.poisoned += batch.poisoned;
        totals.released += batch.released;
        batch.announce();
        options.committed(batch.recorded);
        // After a chained settle, a transaction is open: ending now rolls it back instead of claiming in it.
        if (!stay || ending()) return progressed && !ending();
      }
    } finally {
      // The transaction of a failed batch, or the empty one that found nothing to claim.
      if (open) await rollbackQuietly(conn);
    }
  }

  /** One lane: segments until one ends it, with the late-write check between two. */
  async function lane(lanes: PassLanes, totals: Totals): Promise<void> {
    const own = { limit: carried };
    let more = true;
    while (more && !passEnding(lanes)) {
      more = await turns.take((granted) =>
        config.db.connection().execute((conn) => {
          granted();
          return segment(conn, lanes, own, totals);
        }),
      );
      // Between segments, so a long pass (a backlog) does not hold checks back; their corrections
      // are intents like any other, and this pass delivers them.
      if (await checkDue()) more = true;
    }
  }

  let lastCheck = -Infinity;
  let checking = false;
  /**
   * The late-write check (docs/agreement.md), at most once an `intervalMs`, for up to one segment's
   * time. Its failure (the target unreadable) is logged: the rows stay due. True when it enqueued corrections.
   */
  async function checkDue(): Promise<boolean> {
    const { lateWrites, spec, logger, emit } = config;
    if (!lateWrites || checking || stopping() || performance.now() - lastCheck < config.intervalMs) return false;
    lastCheck = performance.now();
    checking = true; // one lane at a time: a check may outlast an interval
    let enqueued = false;
    try {
      for (;;) {
        const started = performance.now();
        const check = await checkLateWrites(
          config,
          lateWrites.verifyDelayMs,
          AbortSignal.timeout(config.deliveryTimeoutMs),
        );
        if (check.checked + check.postponed > 0) {
          emit({
            type: 'late-writes-checked',
            table: spec.table,
            checked: check.checked,
            read: check.read,
            postponed: check.postponed,
            corrected: check.corrected,
            checkMs: performance.now() - started,
          });
        }
        if (check.corrected.length > 0) {
          enqueued = true;
          logger.warn(
            `late write: OpenFGA differed from the ledger after close deliveries; enqueued corrections in ${check.corrected.length} partition(s) of ${spec.table}`,
            {
              partitionKeys: check.corrected.map((c) => c.partitionKey),
              ids: check.corrected.flatMap((c) => c.ids),
            },
          );
        }
        if (check.truncated.length > 0) {
          logger.warn(
            `late-write check: more than the rows it reads were delivered in the window of ${check.truncated.length} partition(s) of ${spec.table}; keys only older rows name are left to the audit`,
            {
              partitionKeys: check.truncated,
            },
          );
        }
        if (!check.more || stopping() || performance.now() - lastCheck >= SEGMENT_MS) return enqueued;
      }
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (repeats.due('late-write-check-failed', message))
        logger.warn(`late-write check failed, its partitions stay due: ${message}`, { table: spec.table });
      return enqueued;
    } finally {
      checking = false;
    }
  }

  async function run(): Promise<DrainResult> {
    const { spec, logger, emit } = config;
    const totals: Totals = {
      batches: 0,
      claimed: 0,
      delivered: 0,
      retried: 0,
      poisoned: 0,
      released: 0,
      halted: false,
    };
    try {
      await options.verify();
      if (stopping()) return totals;
      current = new PassLanes(config.concurrentBatches, (lanes) => lane(lanes, totals));
      await current.finished;
    } catch (error) {
      const halted = isSinkHalt(error);
      const err = error instanceof Error ? error : new Error(String(error));
      failedPasses += 1;
      const message = halted
        ? `delivery halted, nothing counted against the intents: ${err.message}`
        : `drain pass failed: ${err.message}`;
      // While the cause stands every timer pass fails the same way: the first line, then a reminder.
      if (repeats.due('pass-failed', message)) logger.error(message, { table: spec.table, failedPasses });
      emit({ type: 'pass-failed', table: spec.table, error: err, halted });
      if (halted) return { ...totals, halted: true };
      throw err;
    } finally {
      current = undefined;
    }
    if (failedPasses > 0) {
      repeats.clear('pass-failed');
      logger.info(`drain passes succeed again after ${failedPasses} failed pass(es)`, { table: spec.table });
      failedPasses = 0;
    }
    return totals;
  }

  /**
   * One batch of `ids`' due heads on a pooled connection, outside the lanes: the claim by id, the
   * same fence, outcomes, late-write stamps and settle as any batch (docs/drainer.md, "Write-through").
   * Answers once the sink has answered; the settle and its commit (one round trip) go on behind it.
   */
  async function writeThrough(ids: readonly string[]): Promise<WriteThroughResult> {
    await options.verify();
    const split = (delivered: ReadonlySet<string>) => ({
      delivered: ids.filter((id) => delivered.has(id)),
      deferred: ids.filter((id) => !delivered.has(id)),
    });
    let answer: ((delivered: readonly string[]) => void) | undefined;
    const answered = new Promise<readonly string[]>((resolve) => (answer = resolve));
    const work = config.db.connection().execute(async (conn) => {
      // As the claim function does: a commit lost in a crash only means its intents are delivered again, in order.
      await sql.raw(config.synchronousCommit ? BEGIN : BEGIN_ASYNC_COMMIT).execute(conn);
      let open = true;
      try {
        const batch = await runBatch(conn, {
          config,
          limit: carried,
          flushKeys: [],
          headIds: ids,
          mayChain: () => false,
          fence,
          commitWithSettle: true,
          onDelivered: (delivered) => answer?.(delivered),
        });
        open = false;
        if (!batch) await sql.raw('rollback').execute(conn);
        else if (!batch.chained) await sql.raw('commit').execute(conn);
        return batch;
      } finally {
        if (open) await rollbackQuietly(conn);
      }
    });
    const outcome = await Promise.race([
      answered.then((delivered) => ({ delivered })),
      work.then((batch) => ({ batch })),
    ]);
    answer = undefined;
    const settled = work.then(
      (batch) => {
        if (batch) {
          batch.announce();
          options.committed(batch.recorded);
        }
        return true;
      },
      (error: unknown) => {
        config.logger.warn(
          `write-through: recording the outcomes of a delivery failed, a pass delivers those intents again: ${error instanceof Error ? error.message : String(error)}`,
          { table: config.spec.table, ids },
        );
        return false;
      },
    );
    if ('batch' in outcome) {
      await settled;
      return { ...split(new Set(outcome.batch?.recorded.delivered)), settled };
    }
    return { ...split(new Set(outcome.delivered)), settled };
  }

  return {
    run,
    writeThrough,
    moreClaimable: () => {
      if (!stopping()) current?.want();
    },
  };
}
