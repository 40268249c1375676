import { sql, type Kysely } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { lockPartitions } from './partition-lock.js';
import { tableNames } from './table-names.js';

/**
 * The earliest deliverable row of each key (null when none is visible), promoted if not yet head.
 * With `delivered`, the same statement first marks those rows delivered (and excludes them: the
 * statement's snapshot predates its own updates) — one round trip per batch instead of two.
 */
async function promoteStatement(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Kysely<any>,
  spec: OutboxSpec,
  keys: readonly string[],
  delivered: readonly string[] = [],
  after: ReadonlyMap<string, string> = new Map(),
): Promise<string[]> {
  const n = tableNames(spec);
  const distinct = [...new Set(keys)];
  const result = await sql<{ key: string }>`
    with delivered as (
      update ${sql.raw(n.table)} set sent_at = now(), is_head = false
      where id = any(${[...delivered]}::bigint[])
      returning id
    ), want as (
      select k.key, (
        select x.id from ${sql.raw(n.table)} x
        where x.${sql.raw(n.partition)} = k.key and x.id > k.after and x.sent_at is null and x.retired_at is null
          and x.attempt_count < ${spec.maxAttempts} and x.id <> all(${[...delivered]}::bigint[])
        order by x.${sql.raw(n.partition)}, x.id limit 1 -- (key, id): the partition-head index's order
      ) as head_id
      from unnest(${distinct}::text[], ${distinct.map((k) => after.get(k) ?? '0')}::bigint[]) as k(key, after)
    ), promoted as (
      update ${sql.raw(n.table)} t set is_head = true
      from want w where t.id = w.head_id and not t.is_head
      returning t.id
    )
    select key from want where head_id is null`.execute(trx);
  return result.rows.map((r) => r.key);
}

/**
 * Gives each key in `keys` its head back after the caller took it away (set `is_head = false` on a
 * delivered or poisoned head): the earliest deliverable row of the key becomes head.
 *
 * When a key shows no deliverable row, an enqueue for it may be in flight (it saw the old head and
 * inserted a non-head row). So the key's advisory lock is taken (waiting for that enqueue to
 * commit) and the key looked at again in a new statement. Must run in a READ COMMITTED transaction
 * that holds the row locks of the demoted heads. `markDelivered` folds the drainer's "delivered"
 * update into the same statement.
 *
 * @internal shared by @outbox/drainer and @outbox/reconciler; not for application code.
 */
export async function promoteHeads(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Kysely<any>,
  spec: OutboxSpec,
  keys: readonly string[],
  options: {
    readonly markDelivered?: readonly string[];
    /**
     * Per key, an id the next head is known to follow (the drainer's last delivered or poisoned row
     * of the key): the look-up starts there, past the index entries of rows delivered before it,
     * which stay in the partition-head index until vacuum.
     */
    readonly after?: ReadonlyMap<string, string>;
  } = {},
): Promise<void> {
  if (keys.length === 0 && !options.markDelivered?.length) return;
  const headless = await promoteStatement(trx, spec, keys, options.markDelivered, options.after);
  if (headless.length === 0) return;
  await lockPartitions(spec, headless).execute(trx);
  await promoteStatement(trx, spec, headless, [], options.after);
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
  await promoteStatement(trx, spec, keys);
}
