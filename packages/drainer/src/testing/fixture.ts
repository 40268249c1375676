// Test fixtures shared by the drainer's test files: a fresh outbox table per test, and rows enqueued
// through the real writer. Not part of the package's build.
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutboxTable, defineOutbox, enqueueMany, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { sql } from 'kysely';

let tables = 0;

/** A fresh outbox table in the test file's database (one per test keeps tests independent). */
export async function freshOutbox(db: AnyKysely, options: { maxAttempts?: number } = {}): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({
    table: `drainer.outbox_${tables}`,
    partitionColumn: 'resource_id',
    maxAttempts: options.maxAttempts ?? 10,
  });
  await createOutboxTable(db, spec);
  return spec;
}

/** A logger that says nothing. */
export const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** The spec's table, quoted, for raw SQL. */
export const outboxTable = (spec: OutboxSpec) => sql.raw(`"${spec.schema}"."${spec.tableName}"`);

/** Every row of the spec's table, in id order. */
export async function outboxRows(db: AnyKysely, spec: OutboxSpec) {
  const result = await sql<{
    id: string;
    resource_id: string;
    sent: boolean;
    attempt_count: number;
    last_error: string | null;
    is_head: boolean;
  }>`
    select t.id::text as id, resource_id, sent_at is not null as sent, attempt_count, last_error, is_head
    from ${outboxTable(spec)} t order by t.id`.execute(db);
  return result.rows;
}

/** How many connections of the database hold `LISTEN` on the spec's channel. */
export async function listenConnections(db: AnyKysely, spec: OutboxSpec): Promise<number> {
  const result = await sql<{
    n: string;
  }>`select count(*) as n from pg_stat_activity where datname = current_database() and query = ${`listen "${spec.channel}"`}`.execute(
    db,
  );
  return Number(result.rows[0]?.n);
}

/** Polls `check` every 20 ms until it holds; throws naming `what` after `timeoutMs`. */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs = 5_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A payload naming `vpc:<n>`. */
export const payload = (n: number) => ({ writes: [{ user: 'user:alice', relation: 'owner', object: `vpc:${n}` }] });

/** Enqueues one intent per key, in order, 1,000 per transaction. Returns the ids. */
export async function enqueueRows(db: AnyKysely, spec: OutboxSpec, keys: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < keys.length; i += 1_000) {
    const chunk = keys.slice(i, i + 1_000);
    ids.push(
      ...(await db.transaction().execute((trx) =>
        enqueueMany(
          trx,
          spec,
          chunk.map((partitionKey, j) => ({ partitionKey, payload: payload(i + j) })),
        ),
      )),
    );
  }
  return ids;
}

/** Per partition, the ids in the order a sink was told they were delivered. */
export function deliveryOrder(delivered: readonly { id: string; partitionKey: string }[]): Map<string, string[]> {
  const byKey = new Map<string, string[]>();
  for (const intent of delivered)
    byKey.set(intent.partitionKey, [...(byKey.get(intent.partitionKey) ?? []), intent.id]);
  return byKey;
}

/** Collects what escapes as an uncaught exception or an unhandled rejection while `work` runs (and `settleMs` after). */
export async function escaped(work: () => Promise<void>, settleMs = 200): Promise<unknown[]> {
  const caught: unknown[] = [];
  const onError = (error: unknown) => void caught.push(error);
  process.on('uncaughtException', onError);
  process.on('unhandledRejection', onError);
  try {
    await work();
    await sleep(settleMs);
  } finally {
    process.off('uncaughtException', onError);
    process.off('unhandledRejection', onError);
  }
  return caught;
}
