import { createHash } from 'node:crypto';
import { DummyDriver, Kysely, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler, sql } from 'kysely';
import { Migrator } from 'kysely/migration';
import { beforeAll, describe, expect, test } from 'vitest';
import { migrateToLatest, migrations } from './migrate.js';
import { schemaSnapshot } from './testing/schema-snapshot.js';
import { useScratchDatabases } from './testing/scratch-databases.js';

/*
 * A migration means what it meant when it shipped: however a database got here — one migration per
 * release, or all at once — it ends with the same schema, and migrating again changes nothing.
 */

const scratch = useScratchDatabases();
const SCHEMAS = ['public', 'iam', 'vpc', 'compute', 'nlb', 'storage', 'registry'];
const names = Object.keys(migrations);

let stepByStep: string;
let inOneGo: string;
beforeAll(async () => {
  [stepByStep, inOneGo] = [await scratch.create(), await scratch.create()];
  // One migrateTo per migration, each its own run (its own transaction), as successive releases would.
  const db = scratch.open(stepByStep);
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => ({ ...migrations }) },
    migrationTableSchema: 'public',
  });
  for (const name of names) {
    const { error, results } = await migrator.migrateTo(name);
    expect(error).toBeUndefined();
    expect(results?.map((r) => `${r.migrationName} ${r.status}`)).toEqual([`${name} Success`]);
  }
  expect(await migrateToLatest(scratch.open(inOneGo))).toEqual(names);
});

describe('frozen migrations', () => {
  test('a database migrated one migration at a time has exactly the schema of one migrated in one go', async () => {
    const [a, b] = [
      await schemaSnapshot(scratch.open(stepByStep), SCHEMAS),
      await schemaSnapshot(scratch.open(inOneGo), SCHEMAS),
    ];
    // Claim v5 beside v4, which the previous build's drainers call.
    expect(a.functions.map((f) => `${f.schema}.${f.name}(${f.arguments})`)).toEqual(
      expect.arrayContaining([
        'vpc.fga_register_outbox_claim(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[])',
        'vpc.fga_register_outbox_claim(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[], p_created_at boolean)',
      ]),
    );
    expect(a.relations.length).toBeGreaterThan(20);
    expect(a).toEqual(b);
  });

  test('migrating again applies nothing and changes nothing', async () => {
    for (const database of [stepByStep, inOneGo]) {
      const db = scratch.open(database);
      const before = await schemaSnapshot(db, SCHEMAS);
      expect(await migrateToLatest(db)).toEqual([]);
      expect(await schemaSnapshot(db, SCHEMAS)).toEqual(before);
      const recorded = await sql<{ name: string }>`select name from public.kysely_migration order by name`.execute(db);
      expect(recorded.rows.map((r) => r.name)).toEqual(names);
    }
  });
});

/** The statements each migration's `up` sends, compiled without a database (reads answer nothing). */
async function statementsOf(name: string): Promise<string[]> {
  const sent: string[] = [];
  const db = new Kysely<unknown>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new DummyDriver(),
      createIntrospector: (kysely) => new PostgresIntrospector(kysely),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
    log: (event) => void sent.push(`${event.query.sql} -- ${JSON.stringify(event.query.parameters)}`),
  });
  await migrations[name]!.up(db);
  return sent;
}

test('each migration sends the SQL it shipped with: a change to a shipped migration is a new migration', async () => {
  const digests: Record<string, string> = {};
  for (const name of names)
    digests[name] = createHash('sha256')
      .update((await statementsOf(name)).join('\n;\n'))
      .digest('hex')
      .slice(0, 16);
  expect(digests).toMatchInlineSnapshot(`
    {
      "0001_iam": "f62b73622f570c58",
      "0002_vpc": "642a720b2b13b6bd",
      "0003_compute": "ca8a3dd461a976c8",
      "0004_nlb": "551cc1cbe92dc7f6",
      "0005_storage": "e8d84dcbbc009b2e",
      "0006_registry": "99dcda0058499559",
      "0007_drain_functions_v3": "637cc7011e98f077",
      "0008_drain_functions_v4": "51cccfe77dc1835f",
      "0009_ledger_life": "bad48d77bb1a2033",
      "0010_late_write_verification": "692ca41a2215ec6c",
      "0011_claim_v5": "332fa4b83bdc8a26",
      "0012_enqueue_function_v1": "20e607d6e3c19981",
      "0013_actions_log_v1": "1652d3c0a0bf4209",
      "0014_instance_vpc": "bf42d89940365587",
    }
  `);
});
