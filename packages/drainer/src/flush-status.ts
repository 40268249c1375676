import { sql } from 'kysely';
import { type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';

export interface IntentStatus {
  readonly id: string;
  readonly sent: boolean;
  /** Exhausted or retired, and not sent. */
  readonly poisoned: boolean;
  readonly lastError: string | null;
}

/** The ids a flush of `partitionKey` waits for, in id order: committed and deliverable now (poisoned ones are the reconciler's). */
export async function pendingIntentIds(db: AnyKysely, spec: OutboxSpec, partitionKey: string): Promise<string[]> {
  const n = tableNames(spec);
  const result = await sql<{ id: string }>`
    select id from ${sql.raw(n.table)}
    where ${sql.raw(n.partition)} = ${partitionKey}
      and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}
    order by id`.execute(db);
  return result.rows.map((r) => String(r.id));
}

/** Where each of `ids` stands, by id, in one query; a row gone from the table is absent. */
export async function intentStatuses(db: AnyKysely, spec: OutboxSpec, ids: readonly string[]): Promise<Map<string, IntentStatus>> {
  const result = await sql<{ id: string; sent: boolean; poisoned: boolean; last_error: string | null }>`
    select id, sent_at is not null as sent, attempt_count >= ${spec.maxAttempts} or retired_at is not null as poisoned, last_error
    from ${sql.raw(tableNames(spec).table)} where id = any(${ids}::bigint[]) order by id`.execute(db);
  return new Map(result.rows.map((r) => [String(r.id), { id: String(r.id), sent: r.sent, poisoned: !r.sent && r.poisoned, lastError: r.last_error }]));
}
