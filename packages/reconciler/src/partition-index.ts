import { sql } from 'kysely';
import type { OutboxSpec } from '@outbox/outbox';

/** A valid btree of the table led by `(partition, id)` whose predicate passes `predicate` (a BRIN index cannot serve the look-up). */
function partitionBtree(spec: OutboxSpec, predicate: 'none' | 'delivered' | 'either') {
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  const none = sql`i.indpred is null`;
  const delivered = sql`pg_get_expr(i.indpred, i.indrelid) = '(sent_at IS NOT NULL)'`;
  const wanted = predicate === 'none' ? none : predicate === 'delivered' ? delivered : sql`(${none} or ${delivered})`;
  return sql<{ present: boolean }>`
    select exists (
      select 1 from pg_index i
      join pg_class c on c.oid = i.indexrelid join pg_am am on am.oid = c.relam and am.amname = 'btree'
      where i.indrelid = to_regclass(${relation}) and ${wanted} and i.indisvalid and i.indnkeyatts >= 2
        and i.indkey[0] = (select attnum from pg_attribute where attrelid = i.indrelid and attname = ${spec.partitionColumn})
        and i.indkey[1] = (select attnum from pg_attribute where attrelid = i.indrelid and attname = 'id')
    ) as present`;
}

/** Whether the table has the optional plain btree `(partition, id)`. */
export function partitionIndexPresent(spec: OutboxSpec) {
  return partitionBtree(spec, 'none');
}

/**
 * Whether a `(partition, id)` btree covers the delivered rows (the plain one, or the delivered-rows
 * index): the successor check is then a probe. Asked on every pass, so a dropped index is seen.
 */
export function successorIndexPresent(spec: OutboxSpec) {
  return partitionBtree(spec, 'either');
}
