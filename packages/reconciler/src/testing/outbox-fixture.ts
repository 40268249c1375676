/**
 * Test fixture (not exported from the package): outbox tables, and the drainer's row updates done
 * by hand so a test can put any row in any state. "delivered" and "poisoned" follow the drainer's
 * outcome updates (demote, then `promoteHeads`), so the head invariant holds throughout.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type RawBuilder, type Transaction } from 'kysely';
import {
  createOutboxTable,
  defineOutbox,
  enqueue,
  type IntentPayload,
  type OutboxSpec,
  type OutboxSpecInput,
  type AnyKysely,
} from '@outbox/outbox';
import { promoteHeads, tableNames } from '@outbox/outbox/protocol';

type Db = AnyKysely;

let tables = 0;

/** A fresh outbox table in the file's database (one per test keeps tests independent). */
export async function createTestOutbox(
  db: Db,
  options: Partial<Pick<OutboxSpecInput, 'partitionColumn' | 'supersededCoverageSql' | 'maxAttempts'>> & {
    partitionIndex?: boolean;
  } = {},
): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({
    table: `reconciler.outbox_${tables}`,
    partitionColumn: options.partitionColumn ?? 'resource_id',
    maxAttempts: options.maxAttempts ?? 3,
    supersededCoverageSql: options.supersededCoverageSql,
  });
  await createOutboxTable(db, spec, { partitionIndex: options.partitionIndex ?? false });
  return spec;
}

export const register = (resource: string): IntentPayload => ({
  writes: [{ user: 'project:p1', relation: 'project', object: `vpc:${resource}` }],
});
export const deregister = (resource: string): IntentPayload => ({
  deletes: [{ user: 'project:p1', relation: 'project', object: `vpc:${resource}` }],
});

/** Enqueues through the real writer (advisory lock, head flag). Returns the id. */
export function enqueueIntent(db: Db, spec: OutboxSpec, partitionKey: string, payload: IntentPayload): Promise<string> {
  return db.transaction().execute((trx) => enqueue(trx, spec, { partitionKey, payload }));
}

async function outcome(db: Db, spec: OutboxSpec, id: string, set: RawBuilder<unknown>): Promise<void> {
  const names = tableNames(spec);
  await db.transaction().execute(async (trx) => {
    const row = await sql<{ key: string }>`
      update ${sql.raw(names.table)} set ${set}, is_head = false where id = ${id}
      returning ${sql.raw(names.partition)} as key`.execute(trx);
    await promoteHeads(
      trx,
      spec,
      row.rows.map((r) => r.key),
    );
  });
}

/** What the drainer does when OpenFGA accepted the intent. */
export const deliver = (db: Db, spec: OutboxSpec, id: string) => outcome(db, spec, id, sql`sent_at = now()`);

/** What the drainer did, before causes were recorded, when the intent used up its attempts (`poison_cause` NULL: read as exhausted). */
export const poison = (db: Db, spec: OutboxSpec, id: string, error = 'OpenFGA unreachable') =>
  outcome(db, spec, id, sql`attempt_count = ${spec.maxAttempts}, last_error = ${error}`);

/** What the drainer does when the sink refuses the intent for good. */
export const refuse = (db: Db, spec: OutboxSpec, id: string, code = 'validation_error') =>
  outcome(
    db,
    spec,
    id,
    sql`attempt_count = ${spec.maxAttempts}, last_error = ${`OpenFGA 400 ${code}: refused`}, poison_cause = 'refused', poison_code = ${code}`,
  );

export interface RowState {
  id: string;
  key: string;
  attempt_count: number;
  last_error: string | null;
  is_head: boolean;
  delivered: boolean;
  retired: boolean;
  retired_reason: string | null;
  due: boolean;
  poison_cause: string | null;
  poison_code: string | null;
  revival_count: number;
  revive_after: Date | null;
  revive_requested: boolean;
  closed_as: string | null;
}

export async function readRows(db: Db, spec: OutboxSpec): Promise<RowState[]> {
  const names = tableNames(spec);
  const result = await sql<RowState>`
    select id::text as id, ${sql.raw(names.partition)} as key, attempt_count, last_error, is_head,
      sent_at is not null as delivered, retired_at is not null as retired, retired_reason,
      next_attempt_at <= now() as due, poison_cause, poison_code, revival_count, revive_after, revive_requested, closed_as
    from ${sql.raw(names.table)} order by id`.execute(db);
  return result.rows;
}

export async function readRow(db: Db, spec: OutboxSpec, id: string): Promise<RowState> {
  const row = (await readRows(db, spec)).find((r) => r.id === id);
  if (!row) throw new Error(`no row ${id}`);
  return row;
}

/** Ids flagged head, in id order. */
export async function heads(db: Db, spec: OutboxSpec): Promise<string[]> {
  return (await readRows(db, spec)).filter((r) => r.is_head).map((r) => r.id);
}

/**
 * Partitions breaking the head invariant (docs/design.md §5): the heads of a partition must be exactly its
 * earliest deliverable row, or none when it has no deliverable row.
 */
export async function headViolations(db: Db, spec: OutboxSpec): Promise<string[]> {
  const names = tableNames(spec);
  const result = await sql<{ key: string }>`
    select k.key from (select distinct ${sql.raw(names.partition)} as key from ${sql.raw(names.table)}) k
    where array(select id from ${sql.raw(names.table)} x where x.${sql.raw(names.partition)} = k.key and x.is_head order by id)
      is distinct from array(
        select id from ${sql.raw(names.table)} x
        where x.${sql.raw(names.partition)} = k.key and x.sent_at is null and x.retired_at is null
          and x.attempt_count < ${spec.maxAttempts}
        order by id limit 1)`.execute(db);
  return result.rows.map((r) => r.key);
}

/** A transaction held open across awaits, as a drainer holds its claim while it delivers. */
export interface HeldTransaction {
  readonly trx: Transaction<unknown>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

const ROLLBACK = Symbol('rollback');

export async function openTransaction(db: Db): Promise<HeldTransaction> {
  let finish!: (commit: boolean) => void;
  const decided = new Promise<boolean>((resolve) => (finish = resolve));
  let opened!: (trx: Transaction<unknown>) => void;
  const trx = new Promise<Transaction<unknown>>((resolve) => (opened = resolve));
  const done = db
    .transaction()
    .execute(async (t) => {
      opened(t);
      if (!(await decided)) throw ROLLBACK;
    })
    .catch((error: unknown) => {
      if (error !== ROLLBACK) throw error;
    });
  return {
    trx: await trx,
    commit: async () => {
      finish(true);
      await done;
    },
    rollback: async () => {
      finish(false);
      await done;
    },
  };
}

/** Waits until `count` backends of this database wait on a heavyweight lock (`event`: e.g. `advisory`, `transactionid`). */
export async function waitForLockWaiters(db: Db, count = 1, event?: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await sql<{ n: number }>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'
        ${event ? sql`and wait_event = ${event}` : sql``}`.execute(db);
    if ((result.rows[0]?.n ?? 0) >= count) return;
    if (Date.now() > deadline) throw new Error(`no backend waited on a ${event ?? ''} lock within ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** Whether a promise has settled within `ms`. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  void promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await sleep(ms);
  return settled;
}

export { recordingLogger, type LogEntry } from '@outbox/test-stack';
