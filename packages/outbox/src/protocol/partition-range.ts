/**
 * "Partition `key`'s rows from id `from` on" as a range of `(partition, id)`: only the partition-head
 * index serves it, with or without statistics (docs/outbox-sql.md). Order by `<partition>, id`.
 */
export function partitionRangeSql(
  alias: string,
  column: string,
  key: string,
  from: { id: string; inclusive: boolean } = MIN_ID,
): string {
  return `(${alias}.${column}, ${alias}.id) ${from.inclusive ? '>=' : '>'} (${key}, ${from.id}) and (${alias}.${column}, ${alias}.id) <= (${key}, 9223372036854775807)`;
}

const MIN_ID = { id: `'-9223372036854775808'::bigint`, inclusive: true } as const;
