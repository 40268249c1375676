import type { OutboxSpec } from './define-outbox.js';
import { recordedMaxAttemptsText } from './max-attempts.js';
import type { IntentPayload } from './payload.js';
import { sqlLiteral } from './sql-literal.js';
import { tableNames } from './table-names.js';

/*
 * The drainer's two calls per batch, as SQL text with every argument a literal, passed by name:
 * parameterless, each goes out as one simple-protocol message (see `sqlLiteral`).
 */

/** What one claim asks for (see docs/outbox-sql.md). */
export interface ClaimOptions {
  /** At most this many rows, heads and runs together. */
  readonly batchSize: number;
  /** At most this many heads. Default `batchSize`. */
  readonly headLimit?: number;
  /** Also claim the runs behind the heads. Default true; false when no partition has a second row. */
  readonly runs?: boolean;
  /** Default true. False turns `synchronous_commit` off for the claiming transaction. */
  readonly synchronousCommit?: boolean;
  /** Partitions a flush waits for, the oldest flush first: claimed ahead of the others. Default none. */
  readonly flushKeys?: readonly string[];
}

/** One row of {@link claimStatement}: a claimed intent, and the `maxAttempts` the table records. */
export interface ClaimedRow {
  readonly id: string;
  readonly partition_key: string;
  readonly payload: IntentPayload;
  readonly attempt_count: number;
  /** A partition head (false: a row of a head's run). */
  readonly head: boolean;
  /** The table's recorded `maxAttempts` (null: none), to refuse a batch claimed with another one. */
  readonly recorded: number | null;
}

/**
 * The statement that claims a batch through the table's claim function, returning
 * {@link ClaimedRow}s. Run it in the transaction that delivers the batch.
 *
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
  ];
  return (
    `select c.id, c.partition_key, c.payload, c.attempt_count, c.head, ${recordedMaxAttemptsText(spec)} as recorded ` +
    `from ${tableNames(spec).claimFunction}(${args.join(', ')}) c`
  );
}

/** What a settle does besides giving `keys` their heads back. */
export interface SettleOptions {
  /** Rows to mark delivered in the same call. */
  readonly markDelivered?: readonly string[];
  /**
   * Per key, an id its next head is known to follow (the drainer's last delivered or poisoned row
   * of the key): the look-up starts past the index entries of rows delivered before it.
   */
  readonly after?: ReadonlyMap<string, string>;
}

/**
 * The statement of one call of the table's settle function (see `promoteHeads`), or undefined when
 * there is nothing to settle. The drainer may send it together with its `COMMIT`.
 *
 * @example
 * const statement = settleStatement(spec, ['vpc:v1'], { markDelivered: ['42'] });
 */
export function settleStatement(spec: OutboxSpec, keys: readonly string[], options: SettleOptions = {}): string | undefined {
  const delivered = options.markDelivered ?? [];
  if (keys.length === 0 && delivered.length === 0) return undefined;
  const distinct = [...new Set(keys)];
  const after = distinct.map((key) => options.after?.get(key) ?? '0');
  const args = [
    `p_delivered => ${sqlLiteral.bigintArray(delivered)}`,
    `p_keys => ${sqlLiteral.textArray(distinct)}`,
    `p_after => ${sqlLiteral.bigintArray(after)}`,
    `p_max_attempts => ${sqlLiteral.integer(spec.maxAttempts)}`,
  ];
  return `select partition_key, head_id from ${tableNames(spec).settleFunction}(${args.join(', ')})`;
}
