import { sql, type Kysely } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { sqlLiteral } from './sql-literal.js';
import { tableNames } from './table-names.js';

/** A partition after {@link promoteHeads}: its head, or null when it has nothing deliverable left. */
export interface PromotedHead {
  readonly partitionKey: string;
  readonly headId: string | null;
}

/**
 * Gives each key in `keys` its head back after the caller took it away (a delivered or poisoned
 * head): the earliest deliverable row of the key (after `after`, when given) becomes head.
 *
 * One call of the table's settle function (see `drainFunctionsDdl`): it takes the keys' advisory
 * locks first — an enqueue in flight for one of them (it saw the old head and inserted a non-head
 * row) commits before the look-up, which runs in a later statement — so no key is stranded
 * headless. Must run in a READ COMMITTED transaction that holds the row locks of the demoted heads.
 * `markDelivered` folds the drainer's "delivered" update into the same call.
 *
 * @internal shared by @outbox/drainer and @outbox/reconciler; not for application code.
 */
export async function promoteHeads(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Kysely<any>,
  spec: OutboxSpec,
  keys: readonly string[],
  options: SettleOptions = {},
): Promise<PromotedHead[]> {
  const statement = settleStatement(spec, keys, options);
  if (statement === undefined) return [];
  const result = await sql.raw<{ partition_key: string; head_id: string | null }>(statement).execute(trx);
  return result.rows.map((r) => ({ partitionKey: r.partition_key, headId: r.head_id === null ? null : String(r.head_id) }));
}

/** What {@link promoteHeads} and {@link settleStatement} take besides the keys. */
export interface SettleOptions {
  readonly markDelivered?: readonly string[];
  /**
   * Per key, an id the next head is known to follow (the drainer's last delivered or poisoned row
   * of the key): the look-up starts there, past the index entries of rows delivered before it,
   * which stay in the partition-head index until vacuum.
   */
  readonly after?: ReadonlyMap<string, string>;
}

/**
 * The SQL of {@link promoteHeads}' one call of the settle function, its arguments as literals (one
 * simple-protocol message; see `sqlLiteral`), or undefined when there is nothing to settle. The
 * drainer sends it together with its `COMMIT` when it does not need the result.
 *
 * @internal shared by @outbox/drainer; not for application code.
 */
export function settleStatement(spec: OutboxSpec, keys: readonly string[], options: SettleOptions = {}): string | undefined {
  const delivered = options.markDelivered ?? [];
  if (keys.length === 0 && delivered.length === 0) return undefined;
  const distinct = [...new Set(keys)];
  const after = distinct.map((key) => options.after?.get(key) ?? '0');
  return (
    `select partition_key, head_id from ${tableNames(spec).settleFunction}(${sqlLiteral.bigintArray(delivered)}, ` +
    `${sqlLiteral.textArray(distinct)}, ${sqlLiteral.bigintArray(after)}, ${sqlLiteral.integer(spec.maxAttempts)})`
  );
}

/**
 * Makes the earliest deliverable row of each key its only head, demoting any other head. For
 * operations that make an *earlier* row deliverable again (redrive). The caller must hold the
 * keys' advisory locks and the row locks of their pending rows.
 *
 * @internal shared by @outbox/reconciler; not for application code.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function resetHeads(trx: Kysely<any>, spec: OutboxSpec, keys: readonly string[]): Promise<void> {
  if (keys.length === 0) return;
  const n = tableNames(spec);
  await sql`
    update ${sql.raw(n.table)} t set is_head = false
    where t.${sql.raw(n.partition)} = any(${[...keys]}::text[]) and t.is_head
      and t.sent_at is null and t.retired_at is null`.execute(trx);
  await promoteHeads(trx, spec, keys);
}
