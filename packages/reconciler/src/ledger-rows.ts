import type { AnyKysely, OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { sql, type RawBuilder } from 'kysely';
import {
  countedMax,
  rowStateSql,
  stateFilterSql,
  supersededBySql,
  type RowState,
  type StateFilter,
} from './row-states.js';

/** The outbox a row query reads: its spec and its database. */
export interface LedgerTarget {
  readonly spec: OutboxSpec;
  readonly db: AnyKysely;
}

/** One ledger row as `outbox list` and the console list it (timestamps as ISO strings). */
export interface ListedRow {
  readonly id: string;
  readonly partitionKey: string;
  readonly state: RowState;
  readonly attempts: number;
  readonly createdAt: string;
  readonly nextAttemptAt: string;
  readonly sentAt: string | null;
  readonly retiredAt: string | null;
  /** Whole, never cut. */
  readonly lastError: string | null;
  readonly poisonCause: 'exhausted' | 'refused' | null;
  /** The sink's code of a refusal, e.g. OpenFGA's `validation_error`. */
  readonly poisonCode: string | null;
}

/** Which rows `list` reads. */
export interface RowFilter {
  readonly state?: StateFilter;
  readonly partitionKey?: string;
  readonly fromId?: string;
  readonly toId?: string;
  readonly limit: number;
}

interface RowRecord {
  id: string;
  partition_key: string;
  state: RowState;
  attempt_count: number;
  created_at: Date;
  next_attempt_at: Date;
  sent_at: Date | null;
  retired_at: Date | null;
  last_error: string | null;
  poison_cause: 'exhausted' | 'refused' | null;
  poison_code: string | null;
}

/** The columns every listed row carries, over `t`. */
function rowColumns(spec: OutboxSpec): RawBuilder<unknown> {
  const names = tableNames(spec);
  return sql`t.id::text as id, t.${sql.raw(names.partition)} as partition_key, ${rowStateSql(spec)} as state, t.attempt_count,
    t.created_at, t.next_attempt_at, t.sent_at, t.retired_at, t.last_error, t.poison_cause, t.poison_code`;
}

function listed(row: RowRecord): ListedRow {
  return {
    id: row.id,
    partitionKey: row.partition_key,
    state: row.state,
    attempts: Number(row.attempt_count),
    createdAt: row.created_at.toISOString(),
    nextAttemptAt: row.next_attempt_at.toISOString(),
    sentAt: row.sent_at?.toISOString() ?? null,
    retiredAt: row.retired_at?.toISOString() ?? null,
    lastError: row.last_error,
    poisonCause: row.poison_cause,
    poisonCode: row.poison_code,
  };
}

/** Up to `limit` rows in id order, and whether more matched. */
export async function listRows(target: LedgerTarget, filter: RowFilter): Promise<{ rows: ListedRow[]; more: boolean }> {
  const names = tableNames(target.spec);
  const where: RawBuilder<unknown>[] = [sql`true`];
  if (filter.state) where.push(stateFilterSql(target.spec, filter.state));
  if (filter.partitionKey !== undefined) where.push(sql`t.${sql.raw(names.partition)} = ${filter.partitionKey}`);
  if (filter.fromId !== undefined) where.push(sql`t.id >= ${filter.fromId}::bigint`);
  if (filter.toId !== undefined) where.push(sql`t.id <= ${filter.toId}::bigint`);
  const result = await sql<RowRecord>`
    select ${rowColumns(target.spec)} from ${sql.raw(names.table)} t
    where ${sql.join(where, sql` and `)}
    order by t.id limit ${filter.limit + 1}`.execute(target.db);
  return { rows: result.rows.slice(0, filter.limit).map(listed), more: result.rows.length > filter.limit };
}

/** One row in full, or undefined when no row has that id. */
export async function showRow(target: LedgerTarget, id: string) {
  const names = tableNames(target.spec);
  const result = await sql<
    RowRecord & {
      payload: unknown;
      retired_reason: string | null;
      is_head: boolean;
      superseded_by: string | null;
      max_attempts: number;
    }
  >`
    select ${rowColumns(target.spec)}, t.payload, t.retired_reason, t.is_head, ${countedMax(target.spec)} as max_attempts,
      case when ${stateFilterSql(target.spec, 'superseded')} then ${supersededBySql(target.spec)} end as superseded_by
    from ${sql.raw(names.table)} t where t.id = ${id}::bigint`.execute(target.db);
  const row = result.rows[0];
  if (!row) return undefined;
  return {
    ...listed(row),
    maxAttempts: Number(row.max_attempts),
    payload: row.payload,
    retiredReason: row.retired_reason,
    isHead: row.is_head,
    supersededBy: row.superseded_by,
  };
}

/** The rows with these ids (those that exist), in id order: what a confirmation shows. */
export async function rowsById(target: LedgerTarget, ids: readonly string[]): Promise<ListedRow[]> {
  const names = tableNames(target.spec);
  const result = await sql<RowRecord>`
    select ${rowColumns(target.spec)} from ${sql.raw(names.table)} t where t.id = any(${[...ids]}::bigint[]) order by t.id`.execute(
    target.db,
  );
  return result.rows.map(listed);
}

/** A row of a partition's timeline: the listed row and what it asked OpenFGA to write and delete. */
export interface TimelineRow extends ListedRow {
  readonly payload: unknown;
  readonly retiredReason: string | null;
}

/** Every row of one partition, in id order (at most `limit`), with payloads: its whole history in the ledger. */
export async function partitionTimeline(
  target: LedgerTarget,
  partitionKey: string,
  limit: number,
): Promise<{ rows: TimelineRow[]; more: boolean }> {
  const names = tableNames(target.spec);
  const result = await sql<RowRecord & { payload: unknown; retired_reason: string | null }>`
    select ${rowColumns(target.spec)}, t.payload, t.retired_reason from ${sql.raw(names.table)} t
    where t.${sql.raw(names.partition)} = ${partitionKey}
    order by t.id limit ${limit + 1}`.execute(target.db);
  return {
    rows: result.rows
      .slice(0, limit)
      .map((row) => ({ ...listed(row), payload: row.payload, retiredReason: row.retired_reason })),
    more: result.rows.length > limit,
  };
}

/**
 * The rows whose payload writes `tuple` (user, relation, object), newest first (at most `limit`):
 * the ledger's side of "who wrote this tuple". Deletes are listed too, with `wrote: false`.
 */
export async function rowsTouchingTuple(
  target: LedgerTarget,
  tuple: { readonly user: string; readonly relation: string; readonly object: string },
  limit: number,
): Promise<(ListedRow & { readonly wrote: boolean })[]> {
  const names = tableNames(target.spec);
  const key = JSON.stringify([{ user: tuple.user, relation: tuple.relation, object: tuple.object }]);
  const result = await sql<RowRecord & { wrote: boolean }>`
    select ${rowColumns(target.spec)}, coalesce(t.payload -> 'writes' @> ${key}::jsonb, false) as wrote
    from ${sql.raw(names.table)} t
    where t.payload -> 'writes' @> ${key}::jsonb or t.payload -> 'deletes' @> ${key}::jsonb
    order by t.id desc limit ${limit}`.execute(target.db);
  return result.rows.map((row) => ({ ...listed(row), wrote: row.wrote }));
}
