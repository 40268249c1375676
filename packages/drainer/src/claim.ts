import { sql } from 'kysely';
import type { OutboxSpec, AnyKysely } from '@outbox/outbox';
import {
  claimStatement,
  compareIds,
  maxAttemptsChangedError,
  type ClaimedRow,
  type ClaimOptions as ProtocolClaimOptions,
} from '@outbox/outbox/protocol';
import type { Intent } from './sink.js';

/** A claimed batch, every intent row-locked by this transaction, sorted by id (delivery order). */
export interface ClaimedBatch {
  readonly intents: readonly Intent[];
  /** How many of them are partition heads. */
  readonly heads: number;
  /**
   * Each intent's `created_at` by id, on this process's `performance.now()` clock: when the claim
   * returned, less the row's age on the database's clock (no skew between the hosts' clocks).
   */
  readonly createdAt: ReadonlyMap<string, number>;
}

/** What a claim takes besides its batch size; each default is the plain claim's. */
export type ClaimOptions = Omit<ProtocolClaimOptions, 'batchSize'>;

/**
 * Claims up to `batchSize` intents (docs/design.md §5; the steps: docs/drainer.md, "The claim") in
 * one call of the table's claim function (named arguments as literals: one simple-protocol message).
 */
export async function claimBatch(
  trx: AnyKysely,
  spec: OutboxSpec,
  batchSize: number,
  options: ClaimOptions = {},
): Promise<ClaimedBatch> {
  // The table's recorded maxAttempts comes with the rows: a drainer left running across a
  // setMaxAttempts refuses its batches (docs/drainer.md, "A spec changed under a drainer").
  const result = await sql.raw<ClaimedRow>(claimStatement(spec, { ...options, batchSize })).execute(trx);
  const returned = performance.now();
  const table = result.rows[0]?.recorded;
  if (table !== null && table !== undefined && Number(table) !== spec.maxAttempts) {
    throw maxAttemptsChangedError(spec, Number(table), 'drainer');
  }
  let heads = 0;
  const createdAt = new Map<string, number>();
  const intents = result.rows.map((row): Intent => {
    if (row.head) heads += 1;
    createdAt.set(String(row.id), returned - row.age_ms);
    return {
      id: String(row.id),
      partitionKey: row.partition_key,
      payload: row.payload,
      attemptCount: row.attempt_count,
    };
  });
  intents.sort((a, b) => compareIds(a.id, b.id));
  return { intents, heads, createdAt };
}
