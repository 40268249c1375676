import { sql } from 'kysely';
import type { OutboxSpec, AnyKysely } from '@outbox/outbox';
import {
  claimStatement,
  compareIds,
  maxAttemptsChangedError,
  sqlLiteral,
  tableNames,
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
  return claimedBatch(spec, result.rows);
}

/**
 * Claims those of `ids` that are due partition heads, and nothing else: the write-through's claim
 * (docs/drainer.md, "Write-through"). A head has no deliverable predecessor (the head invariant),
 * so the claim rule holds; a row that is not a head, backs off, or is held elsewhere is left to the
 * drainer's passes. Locked `SKIP LOCKED`: it never waits on a drainer. It does not read the
 * table's `maxAttempts` (a third of its time): only a failure counts with it, so the batch checks
 * it before recording one (`runBatch`). The ids as literals: one simple-protocol message.
 */
export async function claimHeadsById(trx: AnyKysely, spec: OutboxSpec, ids: readonly string[]): Promise<ClaimedBatch> {
  const names = tableNames(spec);
  const statement = `
    select t.id::text as id, t.${names.partition} as partition_key, t.payload, t.attempt_count, true as head,
           (extract(epoch from clock_timestamp() - t.created_at) * 1000)::float8 as age_ms, null as recorded
    from ${names.table} t
    where t.id = any(${sqlLiteral.bigintArray(ids)}) and t.is_head and t.next_attempt_at <= now()
      and t.sent_at is null and t.retired_at is null and t.attempt_count < ${sqlLiteral.integer(spec.maxAttempts)}
    for update skip locked`;
  const result = await sql.raw<ClaimedRow>(statement).execute(trx);
  return claimedBatch(spec, result.rows);
}

function claimedBatch(spec: OutboxSpec, rows: readonly ClaimedRow[]): ClaimedBatch {
  const returned = performance.now();
  const table = rows[0]?.recorded;
  if (table !== null && table !== undefined && Number(table) !== spec.maxAttempts) {
    throw maxAttemptsChangedError(spec, Number(table), 'drainer');
  }
  let heads = 0;
  const createdAt = new Map<string, number>();
  const intents = rows.map((row): Intent => {
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
