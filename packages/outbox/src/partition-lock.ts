import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';

/**
 * The advisory-lock key of one partition of one table: a 64-bit hash of `<table> <key>`. The space
 * separates unambiguously (a table name has none; Postgres text cannot hold the NUL byte). Enqueue,
 * the drainer's head promotion and the reconciler take it, always in ascending order of this hash
 * (no deadlocks between them).
 */
export function partitionLockKey(spec: OutboxSpec, key: RawBuilder<unknown>): RawBuilder<bigint> {
  return sql<bigint>`hashtextextended(${spec.table}::text || ' ' || ${key}, 0)`;
}

/**
 * A statement that takes the transaction-scoped advisory lock of every partition in `keys`,
 * sorted by hash. Postgres evaluates the volatile lock call after the sort, so locks are taken in
 * that order. With `when`, a condition evaluated once before any lock (an init-plan), no lock is
 * taken unless it holds.
 */
export function lockPartitions(spec: OutboxSpec, keys: readonly string[], when?: RawBuilder<boolean>) {
  const hash = partitionLockKey(spec, sql`k`);
  return sql`select pg_advisory_xact_lock(h) from (select distinct ${hash} as h from unnest(${[...keys]}::text[]) as k) locks${
    when ? sql` where ${when}` : sql``
  } order by h`;
}
