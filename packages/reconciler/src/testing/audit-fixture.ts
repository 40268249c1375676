/**
 * Test fixture (not exported from the package) for the audit and repair tests: a small owner — a
 * resource table whose rows expect `project:<p> project vpc:<id>` and `user:<owner> owner vpc:<id>`
 * — with its outbox, a fresh OpenFGA store per test, the real drainer and sink on it, and a reader.
 */
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { createDrainer } from '@outbox/drainer';
import { createOpenFgaSink, createOpenFgaTupleReader } from '@outbox/openfga';
import { enqueue, type OutboxSpec, type TupleKey, type AnyKysely } from '@outbox/outbox';
import { createOpenFgaStore, stackInfo } from '@outbox/test-stack';
import { sql } from 'kysely';
import { onTestFinished } from 'vitest';
import type { TupleReader } from '../tuple-reader-interface.js';
import { createTestOutbox, recordingLogger } from './outbox-fixture.js';
import type { OutboxOwner, OwnedPartition } from '../owner.js';

type Db = AnyKysely;

/** The tuples a resource row expects: what the fixture's "create path" enqueues. */
export const resourceTuples = (id: string, project: string, owner: string): TupleKey[] => [
  { user: `project:${project}`, relation: 'project', object: `vpc:${id}` },
  { user: `user:${owner}`, relation: 'owner', object: `vpc:${id}` },
];

const idOf = (object: string) => (object.startsWith('vpc:') ? object.slice(4) : undefined);

interface Row {
  id: string;
  project_id: string;
  owner: string;
}

function resourceOwner(table: string): OutboxOwner {
  const partition = (row: Row): OwnedPartition => ({
    partitionKey: `vpc:${row.id}`,
    objectKnown: true,
    tuples: resourceTuples(row.id, row.project_id, row.owner),
  });
  return {
    objectTypes: ['vpc'],
    partitionOf: (tuple) => tuple.object,
    partitionFilter: (key) => ({ object: key }),
    async expectedPage(trx, after, limit) {
      const rows = await sql<Row>`
        select id, project_id, owner from ${sql.raw(table)} where ${after === undefined ? sql`true` : sql`id > ${after}`}
        order by id limit ${limit}`.execute(trx);
      return {
        partitions: rows.rows.map(partition),
        next: rows.rows.length === limit ? rows.rows.at(-1)?.id : undefined,
      };
    },
    async partitions(trx, keys) {
      const ids = keys.map(idOf).filter((id): id is string => id !== undefined);
      const rows =
        await sql<Row>`select id, project_id, owner from ${sql.raw(table)} where id = any(${ids}::text[])`.execute(trx);
      const found = new Map(rows.rows.map((row) => [`vpc:${row.id}`, partition(row)]));
      return keys.map((key) => found.get(key) ?? { partitionKey: key, objectKnown: false, tuples: [] });
    },
  };
}

/** A reader that counts its calls by method, around the real one. */
export function countingReader(reader: TupleReader): TupleReader & { calls: Record<keyof TupleReader, number> } {
  const calls = { readObjectTypes: 0, readTuples: 0, readChanges: 0 };
  return {
    calls,
    readObjectTypes: (types, token) => (calls.readObjectTypes++, reader.readObjectTypes(types, token)),
    readTuples: (filter, token) => (calls.readTuples++, reader.readTuples(filter, token)),
    readChanges: (type, from) => (calls.readChanges++, reader.readChanges(type, from)),
  };
}

let worlds = 0;

/**
 * A fresh owner table, outbox and OpenFGA store, with the create and delete paths that write the
 * owner's row and its intent in one transaction, a drain, and out-of-band access to the store.
 * `maxAttempts` is the outbox's (default 3).
 */
export async function auditWorld(db: Db, options: { readonly maxAttempts?: number } = {}) {
  worlds += 1;
  const table = `reconciler.audit_resources_${worlds}`;
  const spec: OutboxSpec = await createTestOutbox(db, { maxAttempts: options.maxAttempts ?? 3 }); // creates the schema
  await sql
    .raw(`create table ${table} (id text primary key, project_id text not null, owner text not null)`)
    .execute(db);
  const stack = stackInfo();
  const { storeId, authorizationModelId } = await createOpenFgaStore(
    stack.openfgaApiUrl,
    stack.openfgaPresharedKey ? { presharedKey: stack.openfgaPresharedKey } : {},
  );
  const credentials = stack.openfgaPresharedKey
    ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } }
    : {};
  const client = new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, storeId, authorizationModelId, ...credentials });
  const sink = createOpenFgaSink({ client });
  const drainer = createDrainer({ db, spec, sink, backoff: { baseMs: 1, maxMs: 1 }, logger: recordingLogger() });
  onTestFinished(async () => {
    await drainer.stop();
    await client.deleteStore().catch(() => undefined);
  });
  const owner = resourceOwner(table);
  const reader = countingReader(createOpenFgaTupleReader({ client }));

  return {
    spec,
    owner,
    reader,
    client,
    /** The store and its model, for a sink of the test's own. */
    storeId,
    authorizationModelId,
    table,
    target: { db, spec, owner, reader },
    /** The create path: the row and its register intent, in one transaction. */
    async create(id: string, project = 'p1', user = 'ann'): Promise<void> {
      await db.transaction().execute(async (trx) => {
        await sql`insert into ${sql.raw(table)} (id, project_id, owner) values (${id}, ${project}, ${user})`.execute(
          trx,
        );
        await enqueue(trx, spec, { partitionKey: `vpc:${id}`, payload: { writes: resourceTuples(id, project, user) } });
      });
    },
    /** The delete path: the row goes, and its tuples' deletion is enqueued, in one transaction. */
    async remove(id: string): Promise<void> {
      await db.transaction().execute(async (trx) => {
        const row =
          await sql<Row>`delete from ${sql.raw(table)} where id = ${id} returning id, project_id, owner`.execute(trx);
        const deleted = row.rows[0];
        if (deleted)
          await enqueue(trx, spec, {
            partitionKey: `vpc:${id}`,
            payload: { deletes: resourceTuples(deleted.id, deleted.project_id, deleted.owner) },
          });
      });
    },
    /** Drain passes until nothing is left to deliver. */
    async drain(): Promise<number> {
      let delivered = 0;
      for (;;) {
        const result = await drainer.drainOnce();
        delivered += result.delivered;
        if (result.claimed === 0) return delivered;
      }
    },
    /** Every tuple the store holds on `object`, as `user relation object` lines. */
    async storedOn(object: string): Promise<string[]> {
      const { tuples } = await client.read({ object });
      return tuples.map((t) => `${t.key.user} ${t.key.relation} ${t.key.object}`).sort();
    },
    /** Intents in the outbox. */
    async intents(): Promise<number> {
      const result = await sql<{
        n: number;
      }>`select count(*)::int as n from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)}`.execute(db);
      return result.rows[0]?.n ?? 0;
    },
  };
}

export type AuditWorld = Awaited<ReturnType<typeof auditWorld>>;
