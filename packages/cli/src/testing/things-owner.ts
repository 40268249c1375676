// A minimal owner mapping for audit and repair tests: a table of things, each expecting the
// tuple `project:<p> project vpc:<id>`. Test-only (the services' real owners are in
// @outbox/service-kit and @outbox/service-iam).
import type { OutboxOwner, OwnedPartition } from '@outbox/reconciler';
import { sql } from 'kysely';
import type { AnyKysely } from '@outbox/outbox';

type Db = AnyKysely;

/** Creates `table` (id, project_id). */
export async function createThingsTable(db: Db, table: string): Promise<void> {
  await sql.raw(`create table ${table} (id text primary key, project_id text not null)`).execute(db);
}

export const thingTuple = (id: string, projectId: string) => ({
  user: `project:${projectId}`,
  relation: 'project',
  object: `vpc:${id}`,
});

export function thingsOwner(table: string): OutboxOwner {
  const partition = (row: { id: string; project_id: string }): OwnedPartition => ({
    partitionKey: `vpc:${row.id}`,
    objectKnown: true,
    tuples: [thingTuple(row.id, row.project_id)],
  });
  return {
    objectTypes: ['vpc'],
    partitionOf: (tuple) => tuple.object,
    partitionFilter: (partitionKey) => ({ object: partitionKey }),
    async expectedPage(trx, after, limit) {
      const rows = await sql<{ id: string; project_id: string }>`
        select id, project_id from ${sql.raw(table)} where ${after === undefined ? sql`true` : sql`id > ${after}`} order by id limit ${limit}`.execute(
        trx,
      );
      return {
        partitions: rows.rows.map(partition),
        next: rows.rows.length === limit ? rows.rows.at(-1)?.id : undefined,
      };
    },
    async partitions(trx, keys) {
      const ids = keys.map((key) => key.slice('vpc:'.length));
      const rows = await sql<{
        id: string;
        project_id: string;
      }>`select id, project_id from ${sql.raw(table)} where id = any(${ids}::text[])`.execute(trx);
      const found = new Map(rows.rows.map((r) => [`vpc:${r.id}`, partition(r)]));
      return keys.map((key) => found.get(key) ?? { partitionKey: key, objectKnown: false, tuples: [] });
    },
  };
}
