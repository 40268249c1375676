import { sql } from 'kysely';
import { type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { partitionRangeSql, planByIndex, tableNames } from '@outbox/outbox/protocol';

export interface IntentStatus {
  readonly id: string;
  readonly sent: boolean;
  /** Exhausted or retired, and not sent. */
  readonly poisoned: boolean;
  readonly lastError: string | null;
}

/** The statement behind {@link pendingIntentIds}, to run under `planByIndex()`. */
export function pendingIntentIdsStatement(spec: OutboxSpec, partitionKey: string) {
  const names = tableNames(spec);
  return sql<{ id: string }>`
    select x.id from (select ${partitionKey}::text as key) k
    join ${sql.raw(names.table)} x on ${sql.raw(partitionRangeSql('x', names.partition, 'k.key'))}
    where x.sent_at is null and x.retired_at is null and x.attempt_count < ${spec.maxAttempts}
    order by x.${sql.raw(names.partition)}, x.id`;
}

/**
 * The ids a flush of `partitionKey` waits for, in id order: committed and deliverable now (poisoned
 * ones are the reconciler's). Planned by index, in a transaction of its own: a partition's look-up
 * must never walk the whole backlog (docs/outbox-sql.md, "Looking up a partition's rows").
 */
export async function pendingIntentIds(db: AnyKysely, spec: OutboxSpec, partitionKey: string): Promise<string[]> {
  const result = await db
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (trx) => {
      await planByIndex().execute(trx);
      return pendingIntentIdsStatement(spec, partitionKey).execute(trx);
    });
  return result.rows.map((r) => String(r.id));
}

/** Where each of `ids` stands, by id, in one query; a row gone from the table is absent. */
export async function intentStatuses(
  db: AnyKysely,
  spec: OutboxSpec,
  ids: readonly string[],
): Promise<Map<string, IntentStatus>> {
  const result = await sql<{ id: string; sent: boolean; poisoned: boolean; last_error: string | null }>`
    select id, sent_at is not null as sent, attempt_count >= ${spec.maxAttempts} or retired_at is not null as poisoned, last_error
    from ${sql.raw(tableNames(spec).table)} where id = any(${ids}::bigint[]) order by id`.execute(db);
  return new Map(
    result.rows.map((r) => [
      String(r.id),
      { id: String(r.id), sent: r.sent, poisoned: !r.sent && r.poisoned, lastError: r.last_error },
    ]),
  );
}
