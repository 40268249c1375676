import type { SettledPartitions } from './record-outcomes.js';

/** How many partitions the next claim takes; why it adapts: docs/drainer.md, "The head limit". */
export interface HeadLimit {
  /** Most heads the claim takes, from 1 to the batch size. */
  readonly heads: number;
  /** Whether the claim looks for runs behind its heads. */
  readonly runs: boolean;
}

/** The limit before any batch: a whole batch of heads, with runs. */
export function initialHeadLimit(batchSize: number): HeadLimit {
  return { heads: batchSize, runs: true };
}

/**
 * The limit after a batch: halved (from the heads claimed) while at least half the settled
 * partitions have a next head; else raised to as many heads as would fill a batch at the rows per
 * partition this one took, up to `batchSize` (never lowered). Runs are skipped after a batch of
 * mostly heads in which no settled partition had a next head. A batch that settled nothing keeps it.
 */
export function nextHeadLimit(
  limit: HeadLimit,
  batch: {
    readonly batchSize: number;
    readonly claimed: number;
    readonly claimedHeads: number;
    readonly settled: SettledPartitions;
  },
): HeadLimit {
  const { batchSize, claimed, claimedHeads, settled } = batch;
  if (settled.partitions === 0) return limit;
  const heads =
    settled.withNextHead * 2 >= settled.partitions
      ? Math.max(1, Math.min(limit.heads, claimedHeads) >> 1)
      : Math.min(batchSize, Math.max(limit.heads, Math.ceil((batchSize * claimedHeads) / Math.max(claimed, 1))));
  return { heads, runs: settled.withNextHead > 0 || claimedHeads * 2 < batchSize };
}
