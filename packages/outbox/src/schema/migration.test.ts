import { useTestDatabase } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { claimStatement, type ClaimedRow } from '../protocol/drain-function-calls.js';
import { defineOutbox, type OutboxSpec } from '../define-outbox.js';
import { enqueue } from '../enqueue.js';
import { promoteHeads } from '../protocol/heads.js';
import { OutboxTableError } from '../errors.js';
import { createOutboxTable, dropOutboxTable, outboxMigration, outboxMigrations, outboxTableDdl } from './migration.js';
import { executeStatements } from './execute-statements.js';
import { ledgerLifeDdlV1 } from './ledger-life-ddl.js';
import { outboxTableDdlV1 } from './outbox-table-ddl.js';
import { outboxStats } from '../stats.js';
import { tableNames } from '../table-names.js';
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
    expect(await relationExists('svc.fga_register_outbox_actions')).toBe(true);
    expect(await indexNames(spec)).toEqual([
      'fga_register_outbox_claim_idx',
      'fga_register_outbox_delivered_idx',
      'fga_register_outbox_partition_head_idx',
      'fga_register_outbox_pending_idx',
      'fga_register_outbox_pkey',
      'fga_register_outbox_retired_idx',
      'fga_register_outbox_verify_idx',
    ]);
    for (const fn of ['notify', 'claim', 'settle'])
      expect(await functionExists('svc', `fga_register_outbox_${fn}`)).toBe(true);

    const down = await outbox.migrateDown();
    expect(down.error).toBeUndefined();
    expect(down.results).toEqual([{ migrationName: '0001_svc_outbox', direction: 'Down', status: 'Success' }]);
    expect(await relationExists('svc.fga_register_outbox')).toBe(false);
    expect(await relationExists('svc.fga_register_outbox_actions')).toBe(false);
    for (const fn of ['notify', 'claim', 'settle'])
      expect(await functionExists('svc', `fga_register_outbox_${fn}`)).toBe(false);
    const error = await verifyOutboxTable(t.db, spec).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxTableError);
    expect((error as OutboxTableError).missing).toEqual([
      'the table svc.fga_register_outbox itself (it does not exist)',
    ]);

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
    const outbox = migrator(
      { '0001': outboxMigration(indexed, { partitionIndex: true }) },
      'outbox_test_indexed_migrations',
    );
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

/** The outbox's objects as the catalog defines them: indexes, functions (whole definitions), trigger, comments, options. */
async function definitions(spec: OutboxSpec) {
  const result = await sql<{ kind: string; definition: string | null }>`
    select 'index' as kind, indexdef as definition from pg_indexes where schemaname = ${spec.schema} and tablename = ${spec.tableName}
    union all
    select 'function', pg_get_functiondef(p.oid) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = ${spec.schema} and starts_with(p.proname, ${`${spec.tableName}_`})
    union all
    select 'trigger', pg_get_triggerdef(t.oid) from pg_trigger t where t.tgrelid = ${`"${spec.schema}"."${spec.tableName}"`}::regclass and not t.tgisinternal
    union all
    select 'column', a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || coalesce(col_description(a.attrelid, a.attnum), '')
      from pg_attribute a where a.attrelid = ${`"${spec.schema}"."${spec.tableName}"`}::regclass and a.attnum > 0
    union all
    select 'options', array_to_string(c.reloptions, ',') from pg_class c where c.oid = ${`"${spec.schema}"."${spec.tableName}"`}::regclass
    union all
    select 'actions log', a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
      from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
      where a.attrelid = to_regclass(${`"${spec.schema}"."${spec.tableName}_actions"`}) and a.attnum > 0
    union all
    select 'actions log', conname || ' ' || pg_get_constraintdef(oid) from pg_constraint where conrelid = to_regclass(${`"${spec.schema}"."${spec.tableName}_actions"`})
    union all
    select 'actions log', obj_description(c.oid, 'pg_class') from pg_class c where c.oid = to_regclass(${`"${spec.schema}"."${spec.tableName}_actions"`})
    order by 1, 2`.execute(t.db);
  return result.rows;
}

describe('outboxMigrations: frozen steps for your migrator', () => {
  const spec = defineOutbox({ table: 'steps.fga_register_outbox', partitionColumn: 'resource_id' });

  test('step names are unique per outbox and sort in step order', () => {
    const other = defineOutbox({ table: 'steps.other_outbox', partitionColumn: 'tuple_key' });
    expect(Object.keys(outboxMigrations(spec))).toEqual([
      'steps.fga_register_outbox/0001_outbox_table',
      'steps.fga_register_outbox/0002_drain_functions_v4',
      'steps.fga_register_outbox/0003_ledger_life',
      'steps.fga_register_outbox/0004_late_write_verification',
      'steps.fga_register_outbox/0005_claim_v5',
      'steps.fga_register_outbox/0006_enqueue_function_v1',
      'steps.fga_register_outbox/0007_actions_log_v1',
    ]);
    expect(Object.keys(outboxMigrations(other, { prefix: '0002_' }))).toEqual([
      '0002_0001_outbox_table',
      '0002_0002_drain_functions_v4',
      '0002_0003_ledger_life',
      '0002_0004_late_write_verification',
      '0002_0005_claim_v5',
      '0002_0006_enqueue_function_v1',
      '0002_0007_actions_log_v1',
    ]);
    expect(Object.keys({ ...outboxMigrations(spec), ...outboxMigrations(other) })).toHaveLength(14);
  });

  test('migrated step by step, the table is exactly what createOutboxTable makes, and verifies', async () => {
    await createOutboxTable(t.db, spec);
    const latest = await definitions(spec);
    await dropOutboxTable(t.db, spec);

    const steps = migrator({ ...outboxMigrations(spec) }, 'outbox_test_steps');
    for (const name of Object.keys(outboxMigrations(spec))) {
      const { error, results } = await steps.migrateTo(name);
      expect(error).toBeUndefined();
      expect(results?.map((r) => r.migrationName)).toEqual([name]);
    }
    await verifyOutboxTable(t.db, spec);
    // Besides: the previous releases' settle and claim overloads, which their drainers call during a rolling upgrade.
    const previousSettle =
      /_settle\(p_delivered bigint\[\], p_keys text\[\], p_after bigint\[\], p_max_attempts integer\)/;
    const previousClaim =
      /_claim\(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text\[\]\)/;
    const previous = (d: { kind: string; definition: string | null }) =>
      d.kind === 'function' && [previousSettle, previousClaim].some((r) => r.test(d.definition ?? ''));
    const migrated = await definitions(spec);
    expect(migrated.filter(previous)).toHaveLength(2);
    expect(migrated.filter((d) => !previous(d))).toEqual(latest);
    // A drainer of the previous release claims as it did (claim v4: six arguments, no created_at), beside this release's.
    await sql
      .raw(`insert into ${tableNames(spec).table} (resource_id, payload, is_head) values ('vpc:a', '{}', true)`)
      .execute(t.db);
    const v4Call = `${tableNames(spec).claimFunction}(p_batch => 10, p_heads => 10, p_max_attempts => 10, p_runs => true, p_synchronous_commit => true, p_flush_keys => '{}')`;
    const previousRelease = await t.db
      .transaction()
      .execute((trx) =>
        sql
          .raw<{ id: string }>(`select c.id, c.partition_key, c.payload, c.attempt_count, c.head from ${v4Call} c`)
          .execute(trx),
      );
    expect(previousRelease.rows.map((r) => String(r.id))).toEqual(['1']);
    const thisRelease = await t.db
      .transaction()
      .execute((trx) => sql.raw<ClaimedRow>(claimStatement(spec, { batchSize: 10 })).execute(trx));
    expect(thisRelease.rows.map((r) => [String(r.id), r.age_ms >= 0])).toEqual([['1', true]]);
    await sql.raw(`delete from ${tableNames(spec).table}`).execute(t.db);

    // Down, step by step: the actions log, enqueue's function, claim v5 (v4 stays), the late-write column and settle, the ledger columns, the functions, then the table.
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect(await relationExists('steps.fga_register_outbox_actions')).toBe(false);
    expect((await definitions(spec)).filter((d) => d.kind === 'actions log')).toEqual([]);
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect(await functionExists('steps', 'fga_register_outbox_enqueue')).toBe(false);
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect((await definitions(spec)).filter((d) => d.definition?.includes('p_created_at'))).toEqual([]);
    expect(await functionExists('steps', 'fga_register_outbox_claim')).toBe(true);
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect((await definitions(spec)).filter((d) => d.definition?.includes('verify_after'))).toEqual([]);
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect(await definitions(spec)).not.toContainEqual(
      expect.objectContaining({ definition: expect.stringContaining('poison_cause') }),
    );
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect(await functionExists('steps', 'fga_register_outbox_claim')).toBe(false);
    expect(await relationExists('steps.fga_register_outbox')).toBe(true);
    expect((await steps.migrateDown()).error).toBeUndefined();
    expect(await relationExists('steps.fga_register_outbox')).toBe(false);
  });
});

test('the ledger step rewrites nothing and validates nothing: a filled table keeps its storage, the checks hold for new rows', async () => {
  const spec = defineOutbox({ table: 'ledger.filled_outbox', partitionColumn: 'resource_id' });
  const names = tableNames(spec);
  await executeStatements(t.db, outboxTableDdlV1(spec));
  await sql
    .raw(
      `insert into ${names.table} (resource_id, payload, sent_at) select 'vpc:' || i, '{}', now() from generate_series(1, 1000) i`,
    )
    .execute(t.db);
  const storage = () =>
    sql<{ node: number }>`select relfilenode as node from pg_class where oid = ${names.table}::regclass`
      .execute(t.db)
      .then((r) => r.rows[0]?.node);
  const before = await storage();
  await executeStatements(t.db, ledgerLifeDdlV1(spec));
  expect(await storage()).toBe(before);
  const checks = await sql<{ name: string; validated: boolean }>`
    select conname as name, convalidated as validated from pg_constraint where conrelid = ${names.table}::regclass and contype = 'c' order by 1`.execute(
    t.db,
  );
  expect(checks.rows).toEqual([
    { name: 'filled_outbox_closed_as_check', validated: false },
    { name: 'filled_outbox_poison_cause_check', validated: false },
  ]);
  await expect(sql.raw(`update ${names.table} set poison_cause = 'tired' where id = 1`).execute(t.db)).rejects.toThrow(
    /poison_cause_check/,
  );
  await dropOutboxTable(t.db, spec);
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
    const row = await sql<{
      order: string;
      is_head: boolean;
    }>`select "order", is_head from "select"."user" where id = ${id}`.execute(t.db);
    expect(row.rows).toEqual([{ order: 'vpc:v1', is_head: true }]);
    expect((await outboxStats(t.db, spec)).pending).toBe(1);
    // The drainer's functions quote them too: claim the row, then mark it delivered.
    await t.db.transaction().execute(async (trx) => {
      const claimed = await sql<{
        id: string;
        partition_key: string;
      }>`select id, partition_key from "select"."user_claim"(10, 10, 25, true, true, '{}', true)`.execute(trx);
      expect(claimed.rows).toEqual([{ id, partition_key: 'vpc:v1' }]);
      expect(await promoteHeads(trx, spec, ['vpc:v1'], { markDelivered: [id] })).toEqual([
        { partitionKey: 'vpc:v1', headId: null },
      ]);
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

describe('createOutboxTable as a role that may create in its schema but not in the database (PostgreSQL 15+ default)', () => {
  test('creates the table in the existing schema', async () => {
    const role = `edges_owner_${process.pid}`;
    await sql.raw(`create role ${role} login password 'pw'`).execute(t.db);
    await sql.raw(`create schema edges_owned authorization ${role}`).execute(t.db);
    const url = new URL(t.url);
    url.username = role;
    url.password = 'pw';
    const db = new Kysely({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url.toString(), max: 1 }) }),
    });
    try {
      const privileges = await sql<{ database: boolean; schema: boolean }>`
        select has_database_privilege(current_user, current_database(), 'CREATE') as database,
               has_schema_privilege('edges_owned', 'CREATE') as schema`.execute(db);
      expect(privileges.rows).toEqual([{ database: false, schema: true }]);
      const spec = defineOutbox({ table: 'edges_owned.outbox', partitionColumn: 'resource_id' });
      await createOutboxTable(db, spec);
      await verifyOutboxTable(db, spec);
    } finally {
      await db.destroy();
      await sql.raw(`drop schema edges_owned cascade`).execute(t.db);
      await sql.raw(`drop role ${role}`).execute(t.db);
    }
  });
});
