/**
 * "The rows of partition `key` from id `from` on", as SQL for a look-up on the partition-head index
 * `(partition, id) where sent_at is null and retired_at is null`: a range of rows (partition, id).
 *
 * Written `x.key = key and x.id > from`, the look-up is also served by the pending index (id), which
 * yields rows in the same order once the key is fixed. Without statistics (a table not analyzed
 * yet: a fresh one, a burst, a restore) both partial indexes look nearly empty to the planner, and
 * it took the pending one, walking every pending row for each partition looked up: 390 ms for the
 * settle of 100 partitions over a 20k backlog instead of 2, and 4.5 ms an enqueued key. A range
 * of rows is an index condition of the (partition, id) index only, and without the equality the
 * pending index no longer gives the order the look-up asks for, so a custom plan's choice holds with
 * or without statistics. (A generic plan, which knows neither key nor limit, may still sort: the
 * drainer's functions, which run on generic plans, also disable sorts; see planSettings.) Callers
 * keep `order by <partition>, id` (the index's order).
 *
 * @internal used by the drainer's functions and by enqueue. `column` is the quoted partition column,
 * `key` and `from.id` are SQL expressions.
 */
export function partitionRangeSql(alias: string, column: string, key: string, from: { id: string; inclusive: boolean } = MIN_ID): string {
  return `(${alias}.${column}, ${alias}.id) ${from.inclusive ? '>=' : '>'} (${key}, ${from.id}) and (${alias}.${column}, ${alias}.id) <= (${key}, 9223372036854775807)`;
}

/** The whole partition: every bigint id. */
const MIN_ID = { id: `'-9223372036854775808'::bigint`, inclusive: true } as const;
