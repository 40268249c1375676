import { sql, type Kysely } from 'kysely';
import { compareIds, maxAttemptsChangedError, recordedMaxAttemptsSql, sqlLiteral, tableNames, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import type { Intent } from './sink.js';

/** A claimed batch: every intent row-locked by this transaction, heads first then their runs. */
export interface ClaimedBatch {
  /** Sorted by id: each partition's intents are in delivery order. */
  readonly intents: readonly Intent[];
  /** How many of them are partition heads. */
  readonly heads: number;
}

/**
 * Claims up to `batchSize` intents (DESIGN §5) in one call of the table's claim function (see
 * `drainFunctionsDdl` in @outbox/outbox):
 *
 * 0. Flushed partitions first: the due heads of the partitions in `flushKeys` (those a `flush`
 *    waits for), found by key, so read-your-writes does not wait behind a backlog; then the rest
 *    as below, fills what they leave.
 * 1. Heads: at most `headLimit` of the flagged earliest deliverable rows, due, in
 *    `(next_attempt_at, id)` order on the partial claim index, `FOR UPDATE SKIP LOCKED`. Only heads
 *    are read, so the cost follows the batch, not the backlog or the delivered rows; a predecessor
 *    that is backing off or locked by another drainer is itself the head, so its successors wait.
 * 2. Runs (unless `runs` is false: the caller knows of no partition with more than one row): with
 *    batch room left, the deliverable rows that follow each claimed head in its partition (the
 *    oldest head's run takes all the room, the others share what it leaves), locked without ever
 *    waiting and cut at the first row that is not due or not lockable, so a run is always
 *    consecutive and a hot partition is not capped at one row per batch.
 *
 * Unless `synchronousCommit`, the call also sets `synchronous_commit = off` for the transaction.
 * The arguments go as literals (one simple-protocol message; see `sqlLiteral`).
 */
export async function claimBatch(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Kysely<any>,
  spec: OutboxSpec,
  batchSize: number,
  headLimit: number = batchSize,
  runs = true,
  synchronousCommit = true,
  flushKeys: readonly string[] = [],
): Promise<ClaimedBatch> {
  const args = [
    sqlLiteral.integer(batchSize),
    sqlLiteral.integer(headLimit),
    sqlLiteral.integer(spec.maxAttempts),
    sqlLiteral.boolean(runs),
    sqlLiteral.boolean(synchronousCommit),
    sqlLiteral.textArray(flushKeys),
  ];
  // With the claimed rows, the maxAttempts the table records (read once per statement): a drainer
  // left running across a setMaxAttempts would count attempts with the old value and strand
  // partitions, so it refuses the batch (rolled back by the caller) until restarted with the new spec.
  // Raw pieces only: still one parameterless, simple-protocol statement.
  const result = await sql<{ id: string; partition_key: string; payload: IntentPayload; attempt_count: number; head: boolean; recorded: number | null }>`
    select c.id, c.partition_key, c.payload, c.attempt_count, c.head, ${recordedMaxAttemptsSql(spec)} as recorded
    from ${sql.raw(`${tableNames(spec).claimFunction}(${args.join(', ')})`)} c`.execute(trx);
  const table = result.rows[0]?.recorded;
  if (table !== null && table !== undefined && Number(table) !== spec.maxAttempts) {
    throw maxAttemptsChangedError(spec, Number(table), 'drainer');
  }
  let heads = 0;
  const intents = result.rows.map((row): Intent => {
    if (row.head) heads += 1;
    return { id: String(row.id), partitionKey: row.partition_key, payload: row.payload, attemptCount: row.attempt_count };
  });
  intents.sort((a, b) => compareIds(a.id, b.id));
  return { intents, heads };
}
