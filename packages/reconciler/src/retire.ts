import { sql, type Transaction } from 'kysely';
import { OutboxConfigError, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { assertRecordedMaxAttempts, compareIds, lockPartitions, resetHeads, rowStates, tableNames } from '@outbox/outbox/protocol';
import { RetireRefusedError, type RefusedRetirement, type RetireRefusal } from './errors.js';
import { partitionIndexPresent } from './partition-index.js';
import { deliveredSuccessor, lockPendingRows, reconcilerLockKey, type RedrivenIntent, type SuccessorCheck } from './redrive.js';

/**
 * At most this many ids per `retire` call: each distinct partition holds an advisory lock until commit.
 *
 * @example
 * for (let i = 0; i < ids.length; i += MAX_RETIRE_IDS) await reconciler.retire(ids.slice(i, i + MAX_RETIRE_IDS), reason);
 */
export const MAX_RETIRE_IDS = 1_000;

interface RetireRow {
  id: string;
  key: string;
  last_error: string | null;
  delivered: boolean;
  retired: boolean;
  exhausted: boolean;
  superseded: boolean;
  is_head: boolean;
}

/**
 * Classifies the rows to retire, in a statement taken after every lock was granted: only a row
 * that is pending, poisoned, and has a delivered successor covering it (DESIGN §2 "superseded")
 * may be retired. `t`/`s` as in the spec's coverage fragment.
 */
export function classifyForRetire(spec: OutboxSpec, ids: readonly string[], check: SuccessorCheck) {
  const n = tableNames(spec);
  const table = sql.raw(n.table);
  const key = sql.raw(n.partition);
  const wanted = sql`${[...ids]}::bigint[]`;
  const t = rowStates('t');
  return sql<RetireRow>`
    with superseded as materialized (
      select t.id from ${table} t where t.id = any(${wanted}) and ${deliveredSuccessor(spec, check)}
    )
    select t.id, t.${key} as key, t.last_error, t.is_head,
      ${t.delivered} as delivered,
      ${t.retired} as retired,
      ${t.exhausted(spec.maxAttempts)} as exhausted,
      t.id in (select id from superseded) as superseded
    from ${table} t
    where t.id = any(${wanted})`;
}

/** Closes the rows. They stay in the table as evidence. */
export function retireRows(spec: OutboxSpec, ids: readonly string[], reason: string) {
  const n = tableNames(spec);
  return sql<{ id: string }>`
    update ${sql.raw(n.table)}
    set retired_at = now(), retired_reason = ${reason}, is_head = false
    where id = any(${[...ids]}::bigint[]) and ${rowStates().pending}
    returning id`;
}

function refusal(row: RetireRow | undefined): RetireRefusal | undefined {
  if (!row) return 'unknown';
  if (row.delivered) return 'delivered';
  if (row.retired) return 'retired';
  if (!row.exhausted) return 'deliverable';
  if (!row.superseded) return 'revivable';
  return undefined;
}

const ID = /^[1-9][0-9]{0,18}$/;
const MAX_BIGINT = 2n ** 63n - 1n;
const isId = (id: string) => ID.test(id) && BigInt(id) <= MAX_BIGINT;

/**
 * Retires superseded intents, all or nothing, under the same locks as a redrive pass: the table's
 * reconciler lock (waiting for a running pass), the row locks of the partitions' pending rows, then
 * the partitions' advisory locks. Retired rows were poisoned, hence never heads, so the heads of
 * their partitions do not move.
 */
export async function retireSuperseded(
  db: AnyKysely,
  spec: OutboxSpec,
  ids: readonly (string | number | bigint)[],
  reason: string,
): Promise<RedrivenIntent[]> {
  // Bad arguments are the caller's mistake, not a refusal of some row: a typed config error naming them.
  if (typeof reason !== 'string' || reason.trim() === '') {
    throw new OutboxConfigError('reason', `retire on ${spec.table}: give a reason (a non-empty string): it is kept as evidence`);
  }
  if (!Array.isArray(ids) || ids.length === 0) {
    throw new OutboxConfigError('ids', `retire on ${spec.table}: expected a non-empty array of outbox ids`);
  }
  if (ids.length > MAX_RETIRE_IDS) {
    throw new OutboxConfigError('ids', `retire on ${spec.table}: at most ${MAX_RETIRE_IDS} ids per call, got ${ids.length}`);
  }
  const wanted = [...new Set(ids.map((id) => String(id)))];
  const malformed = wanted.filter((id) => !isId(id));
  if (malformed.length > 0) {
    throw new RetireRefusedError(spec.table, malformed.map((id) => ({ id, refusal: 'unknown' as const })));
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return db.transaction().setIsolationLevel('read committed').execute(async (trx: Transaction<any>) => {
    const n = tableNames(spec);
    await sql`select pg_advisory_xact_lock(${reconcilerLockKey(spec)})`.execute(trx);
    const keys = await sql<{ key: string }>`
      select distinct ${sql.raw(n.partition)} as key from ${sql.raw(n.table)} where id = any(${wanted}::bigint[])`.execute(trx);
    const partitions = keys.rows.map((r) => r.key);
    if (partitions.length > 0) {
      await lockPendingRows(spec, partitions).execute(trx);
      await lockPartitions(spec, partitions).execute(trx);
    }
    // "Poisoned" is counted with maxAttempts: refuse if a setMaxAttempts changed it since this process verified.
    await assertRecordedMaxAttempts(trx, spec, 'reconciler');
    const partitionIndex = (await partitionIndexPresent(spec).execute(trx)).rows[0]?.present === true;
    const rows = new Map((await classifyForRetire(spec, wanted, { partitionIndex, keys: partitions }).execute(trx)).rows.map((r) => [String(r.id), r]));
    const refused: RefusedRetirement[] = [];
    for (const id of wanted) {
      const why = refusal(rows.get(id));
      if (why) refused.push({ id, refusal: why });
    }
    if (refused.length > 0) throw new RetireRefusedError(spec.table, refused);

    await retireRows(spec, wanted, reason.trim()).execute(trx);
    const repair = [...new Set([...rows.values()].filter((r) => r.is_head).map((r) => r.key))];
    // Only a hand-edited row can be poisoned and head; give its partition its real head back.
    if (repair.length > 0) await resetHeads(trx, spec, repair);
    return wanted
      .map((id) => rows.get(id) as RetireRow)
      .sort((a, b) => compareIds(String(a.id), String(b.id)))
      .map((r) => ({ id: String(r.id), partitionKey: r.key, lastError: r.last_error }));
  });
}
