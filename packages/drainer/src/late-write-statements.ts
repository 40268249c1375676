import type { IntentPayload, OutboxSpec } from '@outbox/outbox';
import { partitionRangeSql, rowStates, tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';

// The late-write check's statements (late-write-check.ts runs them, docs/agreement.md#late-writes says why).

function tableOf(spec: OutboxSpec) {
  const names = tableNames(spec);
  return {
    table: sql.raw(names.table),
    key: sql.raw(names.partition),
    range: (alias: string, k: string) => sql.raw(partitionRangeSql(alias, names.partition, k)),
  };
}

const delayOf = (verifyDelayMs: number) => sql`${verifyDelayMs} * interval '1 millisecond'`;

/**
 * The due rows of the `partitions` partitions due first, row-locked (`SKIP LOCKED`), each with the
 * start of its delivery's window; `candidates` counts the due partitions, up to one more than taken.
 */
export function dueRowsStatement(spec: OutboxSpec, verifyDelayMs: number, partitions: number) {
  const { table, key } = tableOf(spec);
  return sql<{ id: string; partition_key: string; window_from: Date; candidates: number }>`
    with candidates as (
      select t.${key} as k, min(t.verify_after) as first_due from ${table} t where t.verify_after <= now()
      group by t.${key} order by first_due limit ${partitions + 1}
    )
    select t.id::text as id, t.${key} as partition_key, t.sent_at - ${delayOf(verifyDelayMs)} as window_from,
      (select count(*) from candidates)::int as candidates
    from ${table} t
    where t.verify_after <= now() and t.${key} in (select c.k from candidates c order by c.first_due limit ${partitions})
    for update of t skip locked`;
}

/** Per key: whether an intent is pending, and the newest delivered row (a probe each on the partition's indexes). */
export function partitionStatesStatement(spec: OutboxSpec, keys: readonly string[]) {
  const { table, key, range } = tableOf(spec);
  return sql<{ partition_key: string; pending: boolean; last_delivered: string | null }>`
    select u.k as partition_key,
      (select true from ${table} p where ${range('p', 'u.k')} and ${rowStates('p').pending}
       order by p.${key}, p.id limit 1) is not null as pending,
      (select x.id::text from ${table} x where ${range('x', 'u.k')} and ${rowStates('x').delivered}
       order by x.${key} desc, x.id desc limit 1) as last_delivered
    from unnest(${[...keys]}::text[]) as u(k)`;
}

/**
 * Each partition's payloads delivered since its window opened (`from`, per key), newest first, at
 * most `windowRows + 1` of them: one more than kept says the window was truncated.
 */
export function deliveryWindowsStatement(spec: OutboxSpec, from: ReadonlyMap<string, Date>, windowRows: number) {
  const { table, key, range } = tableOf(spec);
  const keys = [...from.keys()];
  return sql<{ partition_key: string; payload: IntentPayload }>`
    select u.k as partition_key, w.payload
    from unnest(${keys}::text[], ${keys.map((k) => from.get(k)?.toISOString())}::timestamptz[]) as u(k, from_at)
    cross join lateral (
      select x.id, x.payload, x.sent_at from ${table} x where ${range('x', 'u.k')}
      order by x.${key} desc, x.id desc limit ${windowRows + 1}
    ) w
    where w.sent_at >= u.from_at
    order by u.k, w.id desc`;
}

/** The checked rows: `postponed` are due again after the delay, `cleared` are no longer due. */
export function settleDueRowsStatement(
  spec: OutboxSpec,
  verifyDelayMs: number,
  rows: { readonly postponed: readonly string[]; readonly cleared: readonly string[] },
) {
  const { table } = tableOf(spec);
  return sql`
    update ${table} t set verify_after = case when t.id = any(${[...rows.postponed]}::bigint[]) then now() + ${delayOf(verifyDelayMs)} end
    where t.id = any(${[...rows.postponed, ...rows.cleared]}::bigint[])`;
}
