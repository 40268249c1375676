import { sql, type RawBuilder } from 'kysely';
import type { AnyKysely, OutboxSpec } from '@outbox/outbox';
import { coveringSuccessor, tableNames } from '@outbox/outbox/protocol';
import { successorIndexPresent } from './partition-index.js';

/** How the delivered-successor check is written: it depends on the indexes the table has. */
export interface SuccessorCheck {
  /** A btree `(partition, id)` covers the delivered rows (`successorIndexPresent`). */
  readonly partitionIndex: boolean;
  /** The partitions the checked rows belong to, when known. */
  readonly keys?: readonly string[];
}

/** Reads which form of the check the table's indexes serve. */
export async function successorCheck(db: AnyKysely, spec: OutboxSpec): Promise<SuccessorCheck> {
  return { partitionIndex: (await successorIndexPresent(spec).execute(db)).rows[0]?.present === true };
}

/**
 * `exists` a delivered `s` after `t` in its partition that covers it, for a WHERE clause only. With
 * an index a probe per row; without, one hashed scan, never a primary-key walk per row (packages/reconciler/README.md).
 */
export function deliveredSuccessor(spec: OutboxSpec, check: SuccessorCheck): RawBuilder<boolean> {
  const names = tableNames(spec);
  const key = sql.raw(names.partition);
  const after = check.partitionIndex
    ? sql`s.id > t.id`
    : sql`(s.${key}, s.id) > (t.${key}, t.id)${check.keys ? sql` and (s.${key} || '') = any(${[...check.keys]}::text[])` : sql``}`;
  return sql<boolean>`exists (
      select 1 from ${sql.raw(names.table)} s
      where ${coveringSuccessor(spec, after)})`;
}
