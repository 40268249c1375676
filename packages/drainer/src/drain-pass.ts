import { sql } from 'kysely';
import { BEGIN, COMMIT_AND_BEGIN, runBatch } from './drain-batch.js';
import { initialHeadLimit, nextHeadLimit } from './head-limit.js';
import { checkLateWrites } from './late-write-check.js';
import type { ResolvedDrainerConfig } from './resolve-drainer-config.js';
import { isSinkHalt } from './sink.js';
import type { AnyKysely } from '@outbox/outbox';

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

/** How long a pass keeps one pooled connection before handing it back between two batches. */
const SEGMENT_MS = 200;

export interface DrainPassOptions {
  readonly config: ResolvedDrainerConfig;
  /** Checks the table; inside the pass, so that a failed check is reported like any failed pass. */
  readonly verify: () => Promise<void>;
  readonly flushedPartitions: () => readonly string[];
  readonly stopping: () => boolean;
}

/**
 * What runs one pass (`Drainer.drainOnce`), in segments of batches on one pooled connection, each
 * batch its own transaction (docs/drainer.md, "A pass"). The head limit carries over between passes.
 */
export function createDrainPass(options: DrainPassOptions): () => Promise<DrainResult> {
  const { config, stopping } = options;
  let limit = initialHeadLimit(config.batchSize);

  /** True when the pass should go on with another segment. */
  async function segment(conn: AnyKysely, totals: { -readonly [K in keyof DrainResult]: DrainResult[K] }): Promise<boolean> {
    const until = performance.now() + SEGMENT_MS;
    const goOn = () => !stopping() && performance.now() < until;
    let open = false;
    try {
      for (;;) {
        if (!open) {
          await sql.raw(BEGIN).execute(conn);
          open = true;
        }
        const batch = await runBatch(conn, { config, limit, flushKeys: options.flushedPartitions(), mayChain: goOn });
        if (batch === undefined) return false;
        limit = nextHeadLimit(limit, { batchSize: config.batchSize, claimedHeads: batch.heads, settled: batch.settled });
        // A batch that moved nothing ends the pass: it would spin (a skipped head, a 0 ms backoff), or the target is down.
        const progressed = batch.delivered + batch.poisoned > 0;
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
        if (!stay) return progressed && !stopping();
      }
    } finally {
      // The transaction of a failed batch, or the empty one that found nothing to claim.
      if (open) await sql.raw('rollback').execute(conn).catch(() => undefined);
    }
  }

  let lastCheck = -Infinity;
  /**
   * The late-write check (docs/agreement.md), at most once an `interval`, for up to one segment's
   * time. Its failure (the target unreadable) is logged: the rows stay due. True when it enqueued corrections.
   */
  async function checkDue(): Promise<boolean> {
    const { lateWrites, spec, logger, emit } = config;
    if (!lateWrites || stopping() || performance.now() - lastCheck < config.interval) return false;
    lastCheck = performance.now();
    let enqueued = false;
    try {
      for (;;) {
        const started = performance.now();
        const check = await checkLateWrites(config, lateWrites.verifyDelayMs, AbortSignal.timeout(config.deliveryTimeoutMs));
        if (check.checked + check.postponed > 0) {
          emit({ type: 'late-writes-checked', table: spec.table, checked: check.checked, read: check.read, postponed: check.postponed, corrected: check.corrected, checkMs: performance.now() - started });
        }
        if (check.corrected.length > 0) {
          enqueued = true;
          logger.warn(`late write: OpenFGA differed from the ledger after close deliveries; enqueued corrections in ${check.corrected.length} partition(s) of ${spec.table}`, {
            partitionKeys: check.corrected.map((c) => c.partitionKey),
            ids: check.corrected.flatMap((c) => c.ids),
          });
        }
        if (check.truncated.length > 0) {
          logger.warn(`late-write check: more than the rows it reads were delivered in the window of ${check.truncated.length} partition(s) of ${spec.table}; keys only older rows name are left to the audit`, {
            partitionKeys: check.truncated,
          });
        }
        if (!check.more || stopping() || performance.now() - lastCheck >= SEGMENT_MS) return enqueued;
      }
    } catch (error) {
      logger.warn(`late-write check failed, its partitions stay due: ${error instanceof Error ? error.message : String(error)}`, { table: spec.table });
      return enqueued;
    }
  }

  return async function pass(): Promise<DrainResult> {
    const { db, spec, logger, emit } = config;
    const totals = { batches: 0, claimed: 0, delivered: 0, retried: 0, poisoned: 0, released: 0, halted: false };
    try {
      await options.verify();
      let more = true;
      while (more && !stopping()) {
        more = await db.connection().execute((conn) => segment(conn, totals));
        // Between segments, so a long pass (a backlog) does not hold checks back; their corrections
        // are intents like any other, and this pass delivers them.
        if (await checkDue()) more = true;
      }
    } catch (error) {
      const halted = isSinkHalt(error);
      const err = error instanceof Error ? error : new Error(String(error));
      logger.error(halted ? `delivery halted, nothing counted against the intents: ${err.message}` : `drain pass failed: ${err.message}`, { table: spec.table });
      emit({ type: 'pass-failed', table: spec.table, error: err, halted });
      if (halted) return { ...totals, halted: true };
      throw err;
    }
    return totals;
  };
}
