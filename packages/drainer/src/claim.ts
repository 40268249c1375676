import { sql, type Kysely } from 'kysely';
import { compareIds, maxAttemptsChangedError, recordedMaxAttemptsSql, sqlLiteral, tableNames, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import type { Intent } from './sink.js';

/** A claimed batch, every intent row-locked by this transaction, sorted by id (delivery order). */
export interface ClaimedBatch {
  readonly intents: readonly Intent[];
  /** How many of them are partition heads. */
  readonly heads: number;
}

/** What a claim takes besides its batch size; each default is the plain claim's. */
export interface ClaimOptions {
  /** Most partition heads to take. Default: the batch size. */
  readonly headLimit?: number;
  /** Default true: each head brings its run. */
  readonly runs?: boolean;
  /** False turns `synchronous_commit` off for the transaction. Default true. */
  readonly synchronousCommit?: boolean;
  /** Partitions a flush waits for, whose heads come first. Default none. */
  readonly flushKeys?: readonly string[];
}

/**
 * Claims up to `batchSize` intents (docs/design.md §5; the steps: docs/drainer.md, "The claim") in
 * one call of the table's claim function, its arguments as literals (one simple-protocol message).
 */
export async function claimBatch(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Kysely<any>,
  spec: OutboxSpec,
  batchSize: number,
  options: ClaimOptions = {},
): Promise<ClaimedBatch> {
  const { headLimit = batchSize, runs = true, synchronousCommit = true, flushKeys = [] } = options;
  const args = [
    sqlLiteral.integer(batchSize),
    sqlLiteral.integer(headLimit),
    sqlLiteral.integer(spec.maxAttempts),
    sqlLiteral.boolean(runs),
    sqlLiteral.boolean(synchronousCommit),
    sqlLiteral.textArray(flushKeys),
  ];
  // The table's recorded maxAttempts comes with the rows: a drainer left running across a
  // setMaxAttempts refuses its batches (docs/drainer.md, "A spec changed under a drainer").
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
