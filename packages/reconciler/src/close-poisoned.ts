import { sql, type Transaction } from 'kysely';
import { OutboxConfigError, type AnyKysely, type OutboxActionTrace, type OutboxSpec } from '@outbox/outbox';
import {
  assertRecordedMaxAttempts,
  compareIds,
  lockPartitions,
  resetHeads,
  rowStates,
  tableNames,
  type ClosedAs,
  type PoisonCause,
} from '@outbox/outbox/protocol';
import { checkedRecord } from './action-record.js';
import { DiscardRefusedError, RetireRefusedError, type DiscardRefusal, type RetireRefusal } from './errors.js';
import type { Logger } from './console-logger.js';
import { toIntent, type RedrivenIntent } from './redrive.js';
import { lockPendingRows, reconcilerLockKey } from './redrive-statements.js';
import { deliveredSuccessor, successorCheck, type SuccessorCheck } from './successor.js';

/**
 * At most this many ids per `retire` or `discardPoisoned` call: each distinct partition holds an advisory lock until commit.
 *
 * @example
 * for (let i = 0; i < ids.length; i += MAX_RETIRE_IDS) await reconciler.retire(ids.slice(i, i + MAX_RETIRE_IDS), reason);
 */
export const MAX_RETIRE_IDS = 1_000;

interface CloseRow {
  id: string;
  partition_key: string;
  last_error: string | null;
  poison_cause: PoisonCause | null;
  poison_code: string | null;
  delivered: boolean;
  closed_as: ClosedAs | null;
  exhausted: boolean;
  superseded: boolean;
  contended: boolean;
  is_head: boolean;
}

/** Each wanted row's state, on a snapshot taken after every lock; `contended`: its partition has a pending row not in `locked`. */
function classifyForClose(
  spec: OutboxSpec,
  ids: readonly string[],
  check: SuccessorCheck,
  locked: readonly string[] | undefined,
) {
  const names = tableNames(spec);
  const table = sql.raw(names.table);
  const key = sql.raw(names.partition);
  const wanted = sql`${[...ids]}::bigint[]`;
  const t = rowStates('t');
  const contended = locked
    ? sql`exists (select 1 from ${table} o where o.${key} = t.${key} and ${rowStates('o').pending} and o.id <> all(${[...locked]}::bigint[]))`
    : sql`false`;
  return sql<CloseRow>`
    with superseded as materialized (
      select t.id from ${table} t where t.id = any(${wanted}) and ${deliveredSuccessor(spec, check)}
    )
    select t.id, t.${key} as partition_key, t.last_error, t.poison_cause, t.poison_code, t.is_head,
      ${t.delivered} as delivered,
      case when ${t.retired} then coalesce(t.closed_as, 'retired') end as closed_as,
      ${t.exhausted(spec.maxAttempts)} as exhausted,
      t.id in (select id from superseded) as superseded,
      ${contended} as contended
    from ${table} t
    where t.id = any(${wanted})`;
}

function retireRefusal(row: CloseRow | undefined): RetireRefusal | undefined {
  if (!row) return 'unknown';
  if (row.delivered) return 'delivered';
  if (row.closed_as) return row.closed_as;
  if (!row.exhausted) return 'deliverable';
  if (!row.superseded) return 'revivable';
  return undefined;
}

function discardRefusal(row: CloseRow | undefined): DiscardRefusal | undefined {
  if (!row) return 'unknown';
  if (row.delivered) return 'delivered';
  if (row.closed_as) return row.closed_as;
  if (row.contended) return 'in-flight';
  if (!row.exhausted) return 'deliverable';
  if (row.superseded) return 'superseded';
  return undefined;
}

const MODES = {
  retired: {
    verb: 'retire',
    action: 'retire',
    refusal: retireRefusal,
    error: (table: string, refused: { id: string; refusal: RetireRefusal }[]) => new RetireRefusedError(table, refused),
  },
  discarded: {
    verb: 'discard',
    action: 'discard',
    refusal: discardRefusal,
    error: (table: string, refused: { id: string; refusal: DiscardRefusal }[]) =>
      new DiscardRefusedError(table, refused),
  },
} as const;

const ID = /^[1-9][0-9]{0,18}$/;
const isId = (id: string) => ID.test(id) && BigInt(id) <= 2n ** 63n - 1n;

/**
 * Closes poisoned rows with a reason, all or nothing, under the reconciler lock (waiting: it queues
 * behind a pass), the partitions' row locks and their advisory locks (docs/design.md §6): `retired`
 * takes superseded rows, waiting for drainers; `discarded` takes the others and refuses a partition
 * a drainer holds instead of waiting. The rows stay as evidence; poisoned rows are never heads.
 * With `record`, the actions log gets its row in the same transaction.
 */
export async function closePoisoned(
  db: AnyKysely,
  spec: OutboxSpec,
  closedAs: ClosedAs,
  ids: readonly (string | number | bigint)[],
  reason: string,
  logger: Logger,
  record?: OutboxActionTrace,
): Promise<RedrivenIntent[]> {
  const mode = MODES[closedAs];
  if (typeof reason !== 'string' || reason.trim() === '') {
    throw new OutboxConfigError(
      'reason',
      `${mode.verb} on ${spec.table}: give a reason (a non-empty string): it is kept as evidence`,
    );
  }
  const trace = checkedRecord(spec, record, mode.action, reason.trim());
  if (!Array.isArray(ids) || ids.length === 0)
    throw new OutboxConfigError('ids', `${mode.verb} on ${spec.table}: expected a non-empty array of outbox ids`);
  if (ids.length > MAX_RETIRE_IDS)
    throw new OutboxConfigError(
      'ids',
      `${mode.verb} on ${spec.table}: at most ${MAX_RETIRE_IDS} ids per call, got ${ids.length}`,
    );
  const wanted = [...new Set(ids.map((id) => String(id)))];
  const malformed = wanted.filter((id) => !isId(id));
  if (malformed.length > 0)
    throw mode.error(
      spec.table,
      malformed.map((id) => ({ id, refusal: 'unknown' as const })),
    );

  const closed = await db
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (trx: Transaction<unknown>) => {
      const names = tableNames(spec);
      await sql`select pg_advisory_xact_lock(${reconcilerLockKey(spec)})`.execute(trx);
      const keys = await sql<{ key: string }>`
      select distinct ${sql.raw(names.partition)} as key from ${sql.raw(names.table)} where id = any(${wanted}::bigint[])`.execute(
        trx,
      );
      const partitions = keys.rows.map((r) => r.key);
      let locked: string[] | undefined;
      if (partitions.length > 0) {
        const rows = await lockPendingRows(spec, partitions, { skipLocked: closedAs === 'discarded' }).execute(trx);
        if (closedAs === 'discarded') locked = rows.rows.map((r) => String(r.id));
        await lockPartitions(spec, partitions).execute(trx);
      }
      await assertRecordedMaxAttempts(trx, spec, 'reconciler');
      const check = { ...(await successorCheck(trx, spec)), keys: partitions };
      const rows = new Map(
        (await classifyForClose(spec, wanted, check, locked).execute(trx)).rows.map((r) => [String(r.id), r]),
      );
      const refused = wanted.flatMap((id) => {
        const refusal = mode.refusal(rows.get(id));
        return refusal ? [{ id, refusal }] : [];
      });
      if (refused.length > 0) throw mode.error(spec.table, refused as never);

      await sql`
      update ${sql.raw(names.table)} set retired_at = now(), retired_reason = ${reason.trim()}, closed_as = ${closedAs}, is_head = false
      where id = any(${wanted}::bigint[]) and ${rowStates().pending}`.execute(trx);
      // Only a hand-edited row can be poisoned and head; give its partition its real head back.
      const repair = [...new Set([...rows.values()].filter((r) => r.is_head).map((r) => r.partition_key))];
      if (repair.length > 0) await resetHeads(trx, spec, repair);
      const intents = wanted
        .map((id) => rows.get(id) as CloseRow)
        .sort((a, b) => compareIds(String(a.id), String(b.id)))
        .map(toIntent);
      await trace?.record(trx, { ids: intents.map((i) => i.id), counts: { [closedAs]: intents.length } });
      return intents;
    });
  const fields = {
    table: spec.table,
    ids: closed.map((r) => r.id),
    partitionKeys: [...new Set(closed.map((r) => r.partitionKey))],
    reason: reason.trim(),
  };
  if (closedAs === 'discarded')
    logger.warn(`discarded ${closed.length} poisoned intent(s): their tuples will not be written`, fields);
  else logger.info(`retired ${closed.length} superseded intent(s)`, fields);
  return closed;
}
