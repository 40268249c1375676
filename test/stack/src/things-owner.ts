// A minimal owner mapping for audit, repair and console tests: a table of things (id, project_id),
// each expecting the tuples `tuplesOf` gives on `vpc:<id>`. Structurally an OutboxOwner of
// @outbox/reconciler (this package depends on none of the outbox packages). Test-only.
import { sql, type Kysely } from 'kysely';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Db = Kysely<any>;
export interface Tuple {
  readonly user: string;
  readonly relation: string;
  readonly object: string;
}
/** One row of a things table. */
export interface Thing {
  readonly id: string;
  readonly project_id: string;
}

/** Creates `table` (id, project_id). */
export async function createThingsTable(db: Db, table: string): Promise<void> {
  await sql.raw(`create table ${table} (id text primary key, project_id text not null)`).execute(db);
}

/** `project:<p> project vpc:<id>`: the one tuple a thing expects by default. */
export const thingTuple = (id: string, projectId: string): Tuple => ({
  user: `project:${projectId}`,
  relation: 'project',
  object: `vpc:${id}`,
});

/** The owner of the things in `table`: partition `vpc:<id>`, the tuples `tuplesOf(thing)` expected. */
export function thingsOwner(
  table: string,
  tuplesOf: (thing: Thing) => Tuple[] = (t) => [thingTuple(t.id, t.project_id)],
) {
  const partition = (row: Thing) => ({ partitionKey: `vpc:${row.id}`, objectKnown: true, tuples: tuplesOf(row) });
  return {
    objectTypes: ['vpc'],
    partitionOf: (tuple: Tuple) => tuple.object,
    partitionFilter: (partitionKey: string) => ({ object: partitionKey }),
    async expectedPage(trx: Db, after: string | undefined, limit: number) {
      const rows = await sql<Thing>`
        select id, project_id from ${sql.raw(table)} where ${after === undefined ? sql`true` : sql`id > ${after}`} order by id limit ${limit}`.execute(
        trx,
      );
      return {
        partitions: rows.rows.map(partition),
        next: rows.rows.length === limit ? rows.rows.at(-1)?.id : undefined,
      };
    },
    async partitions(trx: Db, keys: readonly string[]) {
      const ids = keys.map((key) => key.slice('vpc:'.length));
      const rows =
        await sql<Thing>`select id, project_id from ${sql.raw(table)} where id = any(${ids}::text[])`.execute(trx);
      const found = new Map(rows.rows.map((r) => [`vpc:${r.id}`, partition(r)]));
      return keys.map((key) => found.get(key) ?? { partitionKey: key, objectKnown: false, tuples: [] as Tuple[] });
    },
  };
}
