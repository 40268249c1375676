import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from '../define-outbox.js';

/** The advisory-lock key of one partition, `hash('<table> <key>')`; every taker locks in its order (no deadlocks). */
export function partitionLockKey(spec: OutboxSpec, key: RawBuilder<unknown>): RawBuilder<bigint> {
  return sql<bigint>`hashtextextended(${spec.table}::text || ' ' || ${key}, 0)`;
}

/** Takes the advisory locks of `keys` in hash order (enqueue's function takes them so too: sql/enqueue.v1.sql). */
export function lockPartitions(spec: OutboxSpec, keys: readonly string[]) {
  const hash = partitionLockKey(spec, sql`k`);
  return sql`select pg_advisory_xact_lock(h) from (select distinct ${hash} as h from unnest(${[...keys]}::text[]) as k) locks order by h`;
}
