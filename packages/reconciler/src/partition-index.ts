import { sql } from 'kysely';
import type { OutboxSpec } from '@outbox/outbox';

/**
 * Whether the table has the optional plain btree led by `(partition, id)` (any name, no predicate,
 * valid, and a btree: a BRIN index on the same columns cannot serve the look-up). The
 * delivered-successor check is written for the indexes that exist (see
 * `deliveredSuccessor`), so each pass asks again: one catalog lookup, and a btree added or dropped
 * while the service runs is taken into account at the next pass.
 */
export function partitionIndexPresent(spec: OutboxSpec) {
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  return sql<{ present: boolean }>`
    select exists (
      select 1 from pg_index i
      join pg_class c on c.oid = i.indexrelid join pg_am am on am.oid = c.relam and am.amname = 'btree'
      where i.indrelid = to_regclass(${relation}) and i.indpred is null and i.indisvalid and i.indnkeyatts >= 2
        and i.indkey[0] = (select attnum from pg_attribute where attrelid = i.indrelid and attname = ${spec.partitionColumn})
        and i.indkey[1] = (select attnum from pg_attribute where attrelid = i.indrelid and attname = 'id')
    ) as present`;
}
