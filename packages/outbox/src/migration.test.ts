import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import { describe, expect, test } from 'vitest';
import { defineOutbox, type OutboxSpec } from './define-outbox.js';
import { enqueue } from './enqueue.js';
import { promoteHeads } from './heads.js';
import { OutboxTableError } from './errors.js';
import { createOutboxTable, dropOutboxTable, outboxMigration, outboxTableDdl } from './migration.js';
import { outboxStats } from './stats.js';
import { verifyOutboxTable } from './verify.js';

const t = useTestDatabase();

function migrator(migrations: Record<string, Migration>, migrationTableName: string) {
  return new Migrator({ db: t.db, provider: { getMigrations: async () => migrations }, migrationTableName });
}

async function relationExists(name: string): Promise<boolean> {
  const result = await sql<{ exists: boolean }>`select to_regclass(${name}) is not null as exists`.execute(t.db);
  return result.rows[0]!.exists;
}

async function functionExists(schema: string, name: string): Promise<boolean> {
  const result = await sql<{ exists: boolean }>`
    select exists (select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                   where n.nspname = ${schema} and p.proname = ${name}) as exists`.execute(t.db);
  return result.rows[0]!.exists;
}

async function indexNames(spec: OutboxSpec): Promise<string[]> {
  const result = await sql<{ name: string }>`
    select indexname as name from pg_indexes where schemaname = ${spec.schema} and tablename = ${spec.tableName}
    order by indexname`.execute(t.db);
  return result.rows.map((r) => r.name);
}

const intent = (partitionKey: string) => ({
  partitionKey,
  payload: { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] },
});

describe('outboxMigration with Kysely’s Migrator', () => {
  const spec = defineOutbox({ table: 'svc.fga_register_outbox', partitionColumn: 'resource_id' });

  test('up creates a table that verifies; down removes the table, its trigger function and the drainer functions', async () => {
    const outbox = migrator({ '0001_svc_outbox': outboxMigration(spec) }, 'outbox_test_migrations');

    const up = await outbox.migrateToLatest();
    expect(up.error).toBeUndefined();
    expect(up.results).toEqual([{ migrationName: '0001_svc_outbox', direction: 'Up', status: 'Success' }]);
    await expect(verifyOutboxTable(t.db, spec)).resolves.toBeUndefined();
    expect(await indexNames(spec)).toEqual([
      'fga_register_outbox_claim_idx',
      'fga_register_outbox_partition_head_idx',
      'fga_register_outbox_pending_idx',
      'fga_register_outbox_pkey',
      'fga_register_outbox_retired_idx',
    ]);
    for (const fn of ['notify', 'claim', 'settle']) expect(await functionExists('svc', `fga_register_outbox_${fn}`)).toBe(true);

    const down = await outbox.migrateDown();
    expect(down.error).toBeUndefined();
    expect(down.results).toEqual([{ migrationName: '0001_svc_outbox', direction: 'Down', status: 'Success' }]);
    expect(await relationExists('svc.fga_register_outbox')).toBe(false);
    for (const fn of ['notify', 'claim', 'settle']) expect(await functionExists('svc', `fga_register_outbox_${fn}`)).toBe(false);
    const error = await verifyOutboxTable(t.db, spec).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxTableError);
    expect((error as OutboxTableError).missing).toEqual(['the table svc.fga_register_outbox itself (it does not exist)']);

    // And up again after down: nothing was left behind to collide with.
    expect((await outbox.migrateToLatest()).error).toBeUndefined();
    await verifyOutboxTable(t.db, spec);
    expect((await outbox.migrateDown()).error).toBeUndefined();
  });

  test('a failing later migration rolls the outbox table back with it', async () => {
    const broken = migrator(
      {
        '0001_svc_outbox': outboxMigration(spec),
        '0002_broken': { up: async (db) => void (await sql`select * from no_such_table`.execute(db)) },
      },
      'outbox_test_broken_migrations',
    );
    const result = await broken.migrateToLatest();
    expect(result.error).toBeDefined();
    expect(await relationExists('svc.fga_register_outbox')).toBe(false);
  });

  test('the partitionIndex option adds the plain (partition, id) btree', async () => {
    const indexed = defineOutbox({ table: 'svc.indexed_outbox', partitionColumn: 'resource_id' });
    const outbox = migrator({ '0001': outboxMigration(indexed, { partitionIndex: true }) }, 'outbox_test_indexed_migrations');
    expect((await outbox.migrateToLatest()).error).toBeUndefined();
    expect(await indexNames(indexed)).toContain('indexed_outbox_partition_idx');
    const definition = await sql<{ def: string }>`
      select indexdef as def from pg_indexes where indexname = 'indexed_outbox_partition_idx'`.execute(t.db);
    expect(definition.rows[0]?.def).toMatch(/\(resource_id, id\)$/);
    await verifyOutboxTable(t.db, indexed);
    expect((await outbox.migrateDown()).error).toBeUndefined();
    expect(await relationExists('svc.indexed_outbox')).toBe(false);
  });
});

describe('createOutboxTable', () => {
  test('ships aggressive per-table autovacuum settings', async () => {
    const spec = defineOutbox({ table: 'vac.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const options = await sql<{ reloptions: string[] }>`
      select reloptions from pg_class where oid = 'vac.outbox'::regclass`.execute(t.db);
    expect(options.rows[0]?.reloptions).toEqual(
      expect.arrayContaining(['autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_cost_delay=0']),
    );
    await dropOutboxTable(t.db, spec);
  });

  test('two outboxes in one schema are independent: dropping one leaves the other whole', async () => {
    const first = defineOutbox({ table: 'shared.first_outbox', partitionColumn: 'resource_id' });
    const second = defineOutbox({ table: 'shared.second_outbox', partitionColumn: 'tuple_key' });
    await createOutboxTable(t.db, first);
    await createOutboxTable(t.db, second);
    await verifyOutboxTable(t.db, first);
    await verifyOutboxTable(t.db, second);

    await dropOutboxTable(t.db, first);
    expect(await relationExists('shared.first_outbox')).toBe(false);
    expect(await functionExists('shared', 'first_outbox_notify')).toBe(false);
    await verifyOutboxTable(t.db, second);
    await dropOutboxTable(t.db, second);
  });

  test('quotes every name: reserved words work as schema, table and partition column', async () => {
    const spec = defineOutbox({ table: 'select.user', partitionColumn: 'order' });
    expect(outboxTableDdl(spec).join('\n')).toContain('"select"."user"');
    await createOutboxTable(t.db, spec);
    await verifyOutboxTable(t.db, spec);
    const id = await t.db.transaction().execute((trx) => enqueue(trx, spec, intent('vpc:v1')));
    const row = await sql<{ order: string; is_head: boolean }>`select "order", is_head from "select"."user" where id = ${id}`.execute(t.db);
    expect(row.rows).toEqual([{ order: 'vpc:v1', is_head: true }]);
    expect((await outboxStats(t.db, spec)).pending).toBe(1);
    // The drainer's functions quote them too: claim the row, then mark it delivered.
    await t.db.transaction().execute(async (trx) => {
      const claimed = await sql<{ id: string; partition_key: string }>`select id, partition_key from "select"."user_claim"(10, 10, 25, true, true, '{}')`.execute(trx);
      expect(claimed.rows).toEqual([{ id, partition_key: 'vpc:v1' }]);
      expect(await promoteHeads(trx, spec, ['vpc:v1'], { markDelivered: [id] })).toEqual([{ partitionKey: 'vpc:v1', headId: null }]);
    });
    expect((await outboxStats(t.db, spec)).pending).toBe(0);
    await dropOutboxTable(t.db, spec);
    expect(await relationExists('"select"."user"')).toBe(false);
    for (const fn of ['notify', 'claim', 'settle']) expect(await functionExists('select', `user_${fn}`)).toBe(false);
  });

  test('dropOutboxTable of a table that is not there does nothing', async () => {
    const spec = defineOutbox({ table: 'nowhere.outbox', partitionColumn: 'resource_id' });
    await expect(dropOutboxTable(t.db, spec)).resolves.toBeUndefined();
  });
});
