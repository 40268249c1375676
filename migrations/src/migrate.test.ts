import { outboxStats, verifyOutboxTable, type OutboxSpec } from '@outbox/outbox';
import { dropLedgerLifeDdlV1, executeStatements } from '@outbox/outbox/protocol';
import { sql, type Kysely } from 'kysely';
import { Migrator, NO_MIGRATIONS } from 'kysely/migration';
import { beforeAll, expect, inject, test } from 'vitest';
import { migrateToLatest, migrations } from './migrate.js';
import { COMMON_RESOURCE_COLUMNS } from './resource-table.js';
import { runMigrateCli } from './testing/run-cli.js';
import { useScratchDatabases } from './testing/scratch-databases.js';
import { computeOutbox, iamOutbox, nlbOutbox, registryOutbox, storageOutbox, vpcOutbox } from './specs.js';
import { bucketTable, instanceTable, loadBalancerTable, repositoryTable, vpcTable } from './tables.js';

// One EMPTY database for the file (the stack's shared template is migrated already, and the point
// here is a first migration racing another); the tests after the first run on what it migrated.
const scratch = useScratchDatabases();
let name: string;
beforeAll(async () => {
  name = await scratch.create();
});
const open = (): Kysely<unknown> => scratch.open(name, { max: 2 });

const specs = [iamOutbox, vpcOutbox, computeOutbox, nlbOutbox, storageOutbox, registryOutbox];
const tables = [vpcTable, instanceTable, loadBalancerTable, bucketTable, repositoryTable];

test('two processes migrating an empty database at once: each migration runs exactly once, both succeed', async () => {
  const [a, b] = [open(), open()];
  const [first, second] = await Promise.all([migrateToLatest(a), migrateToLatest(b)]);
  // One of them applied everything, the other waited on the lock and found nothing to do.
  expect([...first, ...second].sort()).toEqual(Object.keys(migrations).sort());
  expect([first.length, second.length].sort()).toEqual([0, Object.keys(migrations).length]);
  const recorded = await sql<{ name: string }>`select name from public.kysely_migration order by name`.execute(a);
  expect(recorded.rows.map((r) => r.name)).toEqual(Object.keys(migrations));
  expect(await migrateToLatest(a)).toEqual([]);
});

test('every outbox matches the contract its drainer and reconciler verify, coverage SQL included', async () => {
  const db = open();
  for (const spec of specs) {
    await verifyOutboxTable(db, spec);
    // Runs the spec's supersededCoverageSql (iam's) against the live table: it must at least parse.
    expect(await outboxStats(db, spec)).toMatchObject({ pending: 0, superseded: 0 });
  }
});

/** Leaves `spec`'s settle as a stand-in whose body carries the marker of settle `version`. */
async function oldSettle(db: Kysely<unknown>, spec: OutboxSpec, version: string): Promise<void> {
  await sql
    .raw(
      `create or replace function "${spec.schema}"."${spec.tableName}_settle"(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer)
    returns table (partition_key text, head_id bigint) language sql
    as $$ select null::text, null::bigint where false -- @outbox/outbox settle ${version} ${spec.table} ${spec.partitionColumn}
    $$`,
    )
    .execute(db);
}

/** Leaves `spec`'s claim as a stand-in with `params` whose body carries the marker of claim `version`. */
async function oldClaim(db: Kysely<unknown>, spec: OutboxSpec, version: string, params: string): Promise<void> {
  await sql
    .raw(
      `create or replace function "${spec.schema}"."${spec.tableName}_claim"(${params})
    returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean) language sql
    as $$ select null::bigint, null::text, null::jsonb, null::integer, null::boolean where false -- @outbox/outbox claim ${version} ${spec.table} ${spec.partitionColumn}
    $$`,
    )
    .execute(db);
}

/** Takes away what 0010 added to `spec`'s outbox, as a database of a build before it has it (the btree may stay). */
async function beforeLateWriteVerification(db: Kysely<unknown>, spec: OutboxSpec): Promise<void> {
  await sql
    .raw(
      `drop function "${spec.schema}"."${spec.tableName}_settle"(bigint[], text[], bigint[], integer, integer, bigint[], bigint[])`,
    )
    .execute(db);
  await sql.raw(`alter table "${spec.schema}"."${spec.tableName}" drop column verify_after`).execute(db);
}
/** Takes away what 0011 added: claim v5 (claim v4 stays, as 0011 left it). */
async function beforeClaimV5(db: Kysely<unknown>, spec: OutboxSpec): Promise<void> {
  await sql
    .raw(
      `drop function "${spec.schema}"."${spec.tableName}_claim"(integer, integer, integer, boolean, boolean, text[], boolean)`,
    )
    .execute(db);
}
/** Takes away what 0012 added: enqueue's function (that build's enqueue sent its own statements). */
async function beforeEnqueueFunction(db: Kysely<unknown>, spec: OutboxSpec): Promise<void> {
  await sql.raw(`drop function "${spec.schema}"."${spec.tableName}_enqueue"(text[], jsonb[], integer)`).execute(db);
}
/** Takes away what 0013 added: the actions log (that build's CLI recorded nothing). */
async function beforeActionsLog(db: Kysely<unknown>, spec: OutboxSpec): Promise<void> {
  await sql.raw(`drop table "${spec.schema}"."${spec.tableName}_actions"`).execute(db);
}
/** A build before 0009_ledger_life: no ledger columns, no delivered-rows index. */
const withoutLedger = (db: Kysely<unknown>, spec: OutboxSpec) => executeStatements(db, dropLedgerLifeDdlV1(spec));

const claimParams = {
  v2: 'p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean',
  v3: 'p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[]',
};

test.each([
  {
    build: 'before claim v3',
    // A claim without p_flush_keys (v2) and a settle marked v1.
    leave: async (db: Kysely<unknown>, spec: OutboxSpec) => {
      await beforeActionsLog(db, spec);
      await beforeEnqueueFunction(db, spec);
      await beforeClaimV5(db, spec);
      await sql
        .raw(
          `drop function "${spec.schema}"."${spec.tableName}_claim"(integer, integer, integer, boolean, boolean, text[])`,
        )
        .execute(db);
      await oldClaim(db, spec, 'v2', claimParams.v2);
      await oldSettle(db, spec, 'v1');
      await beforeLateWriteVerification(db, spec);
      await withoutLedger(db, spec);
    },
    pending: [
      '0007_drain_functions_v3',
      '0008_drain_functions_v4',
      '0009_ledger_life',
      '0010_late_write_verification',
      '0011_claim_v5',
      '0012_enqueue_function_v1',
      '0013_actions_log_v1',
      '0014_instance_vpc',
    ],
  },
  {
    build: 'before claim v4',
    // The same signatures, with bodies marked claim v3 and settle v2.
    leave: async (db: Kysely<unknown>, spec: OutboxSpec) => {
      await beforeActionsLog(db, spec);
      await beforeEnqueueFunction(db, spec);
      await beforeClaimV5(db, spec);
      await oldClaim(db, spec, 'v3', claimParams.v3);
      await oldSettle(db, spec, 'v2');
      await beforeLateWriteVerification(db, spec);
      await withoutLedger(db, spec);
    },
    pending: [
      '0008_drain_functions_v4',
      '0009_ledger_life',
      '0010_late_write_verification',
      '0011_claim_v5',
      '0012_enqueue_function_v1',
      '0013_actions_log_v1',
      '0014_instance_vpc',
    ],
  },
  {
    build: 'before late-write verification',
    leave: async (db: Kysely<unknown>, spec: OutboxSpec) => {
      await beforeActionsLog(db, spec);
      await beforeEnqueueFunction(db, spec);
      await beforeClaimV5(db, spec);
      await beforeLateWriteVerification(db, spec);
    },
    pending: [
      '0010_late_write_verification',
      '0011_claim_v5',
      '0012_enqueue_function_v1',
      '0013_actions_log_v1',
      '0014_instance_vpc',
    ],
  },
  {
    build: 'before claim v5',
    leave: async (db: Kysely<unknown>, spec: OutboxSpec) => {
      await beforeActionsLog(db, spec);
      await beforeEnqueueFunction(db, spec);
      await beforeClaimV5(db, spec);
    },
    pending: ['0011_claim_v5', '0012_enqueue_function_v1', '0013_actions_log_v1', '0014_instance_vpc'],
  },
  {
    build: 'before enqueue v1',
    leave: async (db: Kysely<unknown>, spec: OutboxSpec) => {
      await beforeActionsLog(db, spec);
      await beforeEnqueueFunction(db, spec);
    },
    pending: ['0012_enqueue_function_v1', '0013_actions_log_v1', '0014_instance_vpc'],
  },
  {
    build: 'before the actions log',
    leave: beforeActionsLog,
    pending: ['0013_actions_log_v1', '0014_instance_vpc'],
  },
])(
  "a database migrated by the build $build: the next migrate brings every outbox's functions and columns up to date",
  async ({ leave, pending }) => {
    const db = open();
    for (const spec of specs) {
      await leave(db, spec);
      await expect(verifyOutboxTable(db, spec)).rejects.toThrow(
        /is not the one this release creates|column verify_after|column poison_cause|_enqueue \(enqueue;|_actions \(the actions log;/,
      );
    }
    await sql`drop table if exists public.outbox_audit_cursor`.execute(db);
    // Every earlier build predates an instance's vpc.
    await sql`alter table compute.instances drop column vpc_id`.execute(db);
    await sql`delete from public.kysely_migration where name = any(${pending})`.execute(db);
    expect(await migrateToLatest(db)).toEqual(pending);
    for (const spec of specs) await verifyOutboxTable(db, spec);
  },
);

test("each resource table has exactly the common columns plus its descriptor's", async () => {
  const db = open();
  for (const table of tables) {
    const columns = await sql<{ column_name: string; data_type: string; is_nullable: string }>`
      select column_name, data_type, is_nullable from information_schema.columns
      where table_schema = ${table.schema} and table_name = ${table.table} order by ordinal_position`.execute(db);
    expect(columns.rows.map((c) => c.column_name)).toEqual([...COMMON_RESOURCE_COLUMNS, ...Object.keys(table.columns)]);
    for (const [column, definition] of Object.entries(table.columns)) {
      const live = columns.rows.find((c) => c.column_name === column);
      expect(live?.data_type).toBe(definition.type);
      expect(live?.is_nullable).toBe(definition.nullable ? 'YES' : 'NO');
    }
  }
});

test('every migration can be undone and redone', async () => {
  const db = open();
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => ({ ...migrations }) },
    migrationTableSchema: 'public',
  });
  const down = await migrator.migrateTo(NO_MIGRATIONS);
  expect(down.error).toBeUndefined();
  const schemas = await sql<{ n: number }>`
    select count(*)::int as n from information_schema.schemata
    where schema_name in ('iam', 'vpc', 'compute', 'nlb', 'storage', 'registry')`.execute(db);
  expect(schemas.rows[0]?.n).toBe(0);
  expect((await migrateToLatest(db)).length).toBe(Object.keys(migrations).length);
});

/** Runs the migrate CLI against this file's database and the stack's OpenFGA; `env` adds to (or unsets) variables. */
function runCli(env: Record<string, string | undefined>): Promise<{ code: number | null; output: string }> {
  const stack = inject('outboxStack');
  return runMigrateCli({
    DATABASE_URL: scratch.urlOf(name),
    OPENFGA_API_URL: stack.openfgaApiUrl,
    ...(stack.openfgaPresharedKey ? { OPENFGA_API_TOKEN: stack.openfgaPresharedKey } : {}),
    ...env,
  });
}

test('pnpm migrate without OPENFGA_STORE_ID creates the store named outbox once, then finds it again', async () => {
  const first = await runCli({ OPENFGA_STORE_ID: undefined });
  expect(first.code, first.output).toBe(0);
  const storeId = /export OPENFGA_STORE_ID=(\S+)/.exec(first.output)?.[1];
  expect(storeId).toBeDefined();
  const second = await runCli({ OPENFGA_STORE_ID: undefined });
  expect(second.code, second.output).toBe(0);
  expect(second.output).toContain(`using store ${storeId} (named "outbox")`);
  expect(second.output).toContain(`export OPENFGA_STORE_ID=${storeId}`);
});

test('pnpm migrate with an OPENFGA_STORE_ID that does not exist fails with a clear message, exit 2 (configuration)', async () => {
  const { code, output } = await runCli({ OPENFGA_STORE_ID: '01JBZZZZZZZZZZZZZZZZZZZZZZ' });
  expect(code, output).toBe(2);
  expect(output).toContain('has no store 01JBZZZZZZZZZZZZZZZZZZZZZZ (OPENFGA_STORE_ID)');
  expect(output).not.toContain('export OPENFGA_MODEL_ID');
});
