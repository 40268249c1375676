import { randomBytes } from 'node:crypto';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { sql } from 'kysely';
import { expect, inject, test } from 'vitest';
import { runMigrateCli } from './testing/run-cli.js';
import { useScratchDatabases } from './testing/scratch-databases.js';

// `pnpm migrate` reads every setting before it changes anything, and says which one is wrong: one
// line, exit 2 (a configuration error, as for every command line of @outbox/cli).

const scratch = useScratchDatabases();

/** Whether anything was ever migrated in `database` (Kysely's migration table exists). */
async function migrated(database: string): Promise<boolean> {
  const tables = await sql<{
    n: number;
  }>`select count(*)::int as n from pg_tables where tablename = 'kysely_migration'`.execute(scratch.open(database));
  return tables.rows[0]?.n !== 0;
}

const runCli = (env: Record<string, string | undefined>, args: string[] = []) =>
  runMigrateCli({ OPENFGA_API_TOKEN: undefined, OPENFGA_STORE_ID: undefined, ...env }, args);

test('pnpm migrate with an OPENFGA_API_URL that is no URL fails naming the variable (exit 2), before it migrates anything', async () => {
  const database = await scratch.create();
  const { code, output } = await runCli({ DATABASE_URL: scratch.urlOf(database), OPENFGA_API_URL: 'openfga:8080' });
  expect(code, output).toBe(2);
  expect(output).toBe('migrate: OPENFGA_API_URL is not an http(s) URL: "openfga:8080" (e.g. http://127.0.0.1:8080)\n');
  expect(await migrated(database)).toBe(false);
});

test('pnpm migrate with an OPENFGA_STORE_ID that is not a store id fails naming the variable (exit 2), before it migrates anything', async () => {
  const database = await scratch.create();
  const { code, output } = await runCli({
    DATABASE_URL: scratch.urlOf(database),
    OPENFGA_API_URL: 'http://127.0.0.1:1',
    OPENFGA_STORE_ID: 'outbox',
  });
  expect(code, output).toBe(2);
  expect(output).toBe('migrate: OPENFGA_STORE_ID is not an OpenFGA store id (a 26-character ULID): "outbox"\n');
  expect(await migrated(database)).toBe(false);
});

test('pnpm migrate with a DATABASE_URL unset or not a postgres:// URL fails naming it (exit 2), its password masked', async () => {
  const missing = await runCli({ DATABASE_URL: undefined, OPENFGA_API_URL: 'http://127.0.0.1:1' });
  expect(missing.code, missing.output).toBe(2);
  expect(missing.output).toBe(
    'migrate: DATABASE_URL is not set (export it; see "pnpm migrate" in services/README.md)\n',
  );
  const other = await runCli(
    { DATABASE_URL: 'mysql://app:hunter2@db:3306/outbox', OPENFGA_API_URL: 'http://127.0.0.1:1' },
    ['--sql-only'],
  );
  expect(other.code, other.output).toBe(2);
  expect(other.output).toBe(
    'migrate: DATABASE_URL is not a postgres:// URL: mysql://app:***@db:3306/outbox (e.g. postgres://user:password@127.0.0.1:5432/outbox)\n',
  );
  const word = await runCli({ DATABASE_URL: 'outbox' }, ['--sql-only']);
  expect(word.code, word.output).toBe(2);
  expect(word.output).toBe(
    'migrate: DATABASE_URL is not a postgres:// URL: (not a URL) (e.g. postgres://user:password@127.0.0.1:5432/outbox)\n',
  );
});

test('pnpm migrate with a trailing slash in OPENFGA_API_URL reaches the same OpenFGA (the SDK would ask for //stores)', async () => {
  const database = await scratch.create();
  const stack = inject('outboxStack');
  const credentials = stack.openfgaPresharedKey
    ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } }
    : {};
  const { id: storeId } = await new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, ...credentials }).createStore({
    name: `slash-${randomBytes(4).toString('hex')}`,
  });
  const { code, output } = await runCli({
    DATABASE_URL: scratch.urlOf(database),
    OPENFGA_API_URL: `${stack.openfgaApiUrl}/`,
    OPENFGA_API_TOKEN: stack.openfgaPresharedKey,
    OPENFGA_STORE_ID: storeId,
  });
  expect(code, output).toBe(0);
  expect(output).toContain(`export OPENFGA_STORE_ID=${storeId}`);
});
