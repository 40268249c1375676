import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';

/** The advisory-lock key of one partition, `hash('<table> <key>')`; every taker locks in its order (no deadlocks). */
export function partitionLockKey(spec: OutboxSpec, key: RawBuilder<unknown>): RawBuilder<bigint> {
  return sql<bigint>`hashtextextended(${spec.table}::text || ' ' || ${key}, 0)`;
}

/** Takes the advisory locks of `keys` in hash order; with `when` (an init-plan), none unless it holds. */
export function lockPartitions(spec: OutboxSpec, keys: readonly string[], when?: RawBuilder<boolean>) {
  const hash = partitionLockKey(spec, sql`k`);
  return sql`select pg_advisory_xact_lock(h) from (select distinct ${hash} as h from unnest(${[...keys]}::text[]) as k) locks${
    when ? sql` where ${when}` : sql``
  } order by h`;
}
