import { type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';

/** Keys per statement: one array parameter, bounded so a large candidate set stays many small statements. */
const KEYS_PER_STATEMENT = 1_000;

/** Which of `keys` have a pending intent, as `trx` sees it: not drift (yet). One partition-head probe per key. */
export async function pendingPartitions(
  trx: AnyKysely,
  spec: OutboxSpec,
  keys: Iterable<string>,
): Promise<Set<string>> {
  const names = tableNames(spec);
  const all = [...new Set(keys)];
  const pending = new Set<string>();
  for (let from = 0; from < all.length; from += KEYS_PER_STATEMENT) {
    const chunk = all.slice(from, from + KEYS_PER_STATEMENT);
    const result = await sql<{ key: string }>`
      select u.k as key from unnest(${chunk}::text[]) as u(k)
      where exists (
        select 1 from ${sql.raw(names.table)} x
        where x.${sql.raw(names.partition)} = u.k and x.sent_at is null and x.retired_at is null)`.execute(trx);
    for (const row of result.rows) pending.add(row.key);
  }
  return pending;
}
