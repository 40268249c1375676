import type { OutboxSpec } from '../define-outbox.js';
import { recordedMaxAttemptsText } from '../max-attempts.js';
import type { IntentPayload } from '../payload.js';
import { sqlLiteral } from './sql-literal.js';
import { tableNames } from '../table-names.js';

// The drainer's two calls per batch: literals passed by name, one simple-protocol message each.

/** What one claim asks for (docs/outbox-sql.md, "The claim"). */
export interface ClaimOptions {
  /** At most this many rows, heads and runs together. Required. */
  readonly batchSize: number;
  /** At most this many heads. Default `batchSize`: a batch of single-row partitions fills it. */
  readonly headLimit?: number;
  /** Also claim the runs behind the heads. Default true; false only when no partition has a second row. */
  readonly runs?: boolean;
  /** Default true (stock durability); false turns `synchronous_commit` off for the transaction. */
  readonly synchronousCommit?: boolean;
  /** Partitions a flush waits for, oldest flush first, claimed ahead. Default none. */
  readonly flushKeys?: readonly string[];
}

/** One row of {@link claimStatement}: a claimed intent (a head, or a row of a head's run). */
export interface ClaimedRow {
  readonly id: string;
  readonly partition_key: string;
  readonly payload: IntentPayload;
  readonly attempt_count: number;
  readonly head: boolean;
  /**
   * Milliseconds from the row's `created_at` (its enqueueing transaction's start) to the end of the
   * claim, both on the database's clock: the drainer adds its own clock's time from there, so no
   * skew between hosts enters the commit → delivered lag.
   */
  readonly age_ms: number;
  /** The table's recorded `maxAttempts` (null: none): refuse the batch when it is not the spec's. */
  readonly recorded: number | null;
}

/**
 * The statement that claims a batch, returning {@link ClaimedRow}s, in the delivering transaction.
 * @example
 * const { rows } = await sql.raw<ClaimedRow>(claimStatement(spec, { batchSize: 100 })).execute(trx);
 */
export function claimStatement(spec: OutboxSpec, options: ClaimOptions): string {
  const args = [
    `p_batch => ${sqlLiteral.integer(options.batchSize)}`,
    `p_heads => ${sqlLiteral.integer(options.headLimit ?? options.batchSize)}`,
    `p_max_attempts => ${sqlLiteral.integer(spec.maxAttempts)}`,
    `p_runs => ${sqlLiteral.boolean(options.runs ?? true)}`,
    `p_synchronous_commit => ${sqlLiteral.boolean(options.synchronousCommit ?? true)}`,
    `p_flush_keys => ${sqlLiteral.textArray(options.flushKeys ?? [])}`,
    'p_created_at => true',
  ];
  // The function has returned every row before the select list runs: clock_timestamp() is the claim's end.
  return (
    `select c.id, c.partition_key, c.payload, c.attempt_count, c.head, ` +
    `(extract(epoch from clock_timestamp() - c.created_at) * 1000)::float8 as age_ms, ${recordedMaxAttemptsText(spec)} as recorded ` +
    `from ${tableNames(spec).claimFunction}(${args.join(', ')}) c`
  );
}

/** What a settle does besides giving `keys` their heads back. */
export interface SettleOptions {
  /** Rows to mark delivered in the same call. Default none. */
  readonly markDelivered?: readonly string[];
  /** Per key, an id its next head follows, where the look-up starts. Default: the partition's start. */
  readonly after?: ReadonlyMap<string, string>;
  /** Which delivered rows to stamp for late-write verification (docs/agreement.md). Default: none. */
  readonly lateWrites?: LateWriteStamps;
}

/** What the settle stamps with `verify_after` (see settle v4 in docs/outbox-sql.md). */
export interface LateWriteStamps {
  /** When a stamped row is checked, and how recent a previous delivery puts a probed row at risk. */
  readonly verifyDelayMs: number;
  /** Rows stamped as they are marked delivered: another row of their partition was delivered in this batch. */
  readonly stamp: readonly string[];
  /** Rows stamped only if their partition's previous delivery is younger than `verifyDelayMs`. */
  readonly probe: readonly string[];
}

/** The statement of one settle call (see `promoteHeads`), or undefined when there is nothing to settle. */
export function settleStatement(
  spec: OutboxSpec,
  keys: readonly string[],
  options: SettleOptions = {},
): string | undefined {
  const delivered = options.markDelivered ?? [];
  if (keys.length === 0 && delivered.length === 0) return undefined;
  const distinct = [...new Set(keys)];
  const after = distinct.map((key) => options.after?.get(key) ?? '0');
  const args = [
    `p_delivered => ${sqlLiteral.bigintArray(delivered)}`,
    `p_keys => ${sqlLiteral.textArray(distinct)}`,
    `p_after => ${sqlLiteral.bigintArray(after)}`,
    `p_max_attempts => ${sqlLiteral.integer(spec.maxAttempts)}`,
    `p_verify_delay_ms => ${options.lateWrites ? sqlLiteral.integer(options.lateWrites.verifyDelayMs) : 'null::integer'}`,
    `p_stamp => ${sqlLiteral.bigintArray(options.lateWrites?.stamp ?? [])}`,
    `p_probe => ${sqlLiteral.bigintArray(options.lateWrites?.probe ?? [])}`,
  ];
  return `select partition_key, head_id from ${tableNames(spec).settleFunction}(${args.join(', ')})`;
}
