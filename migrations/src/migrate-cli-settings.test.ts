import { randomBytes } from 'node:crypto';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { sql } from 'kysely';
import { expect, inject, test } from 'vitest';
import { runMigrateCli } from './testing/run-cli.js';
import { useScratchDatabases } from './testing/scratch-databases.js';

// `pnpm migrate` reads every setting before it changes anything, and says which one is wrong.

const scratch = useScratchDatabases();

/** Whether anything was ever migrated in `database` (Kysely's migration table exists). */
async function migrated(database: string): Promise<boolean> {
  const tables = await sql<{ n: number }>`select count(*)::int as n from pg_tables where tablename = 'kysely_migration'`.execute(scratch.open(database));
  return tables.rows[0]?.n !== 0;
}

const runCli = (env: Record<string, string | undefined>) => runMigrateCli({ OPENFGA_API_TOKEN: undefined, OPENFGA_STORE_ID: undefined, ...env });

test('pnpm migrate with an OPENFGA_API_URL that is no URL fails naming the variable, before it migrates anything', async () => {
  const database = await scratch.create();
  const { code, output } = await runCli({ DATABASE_URL: scratch.urlOf(database), OPENFGA_API_URL: 'openfga:8080' });
  expect(code, output).toBe(1);
  expect(output).toContain('OPENFGA_API_URL is not an http(s) URL');
  expect(await migrated(database)).toBe(false);
});

test('pnpm migrate with an OPENFGA_STORE_ID that is not a store id fails naming the variable, before it migrates anything', async () => {
  const database = await scratch.create();
  const { code, output } = await runCli({ DATABASE_URL: scratch.urlOf(database), OPENFGA_API_URL: 'http://127.0.0.1:1', OPENFGA_STORE_ID: 'outbox' });
  expect(code, output).toBe(1);
  expect(output).toContain('OPENFGA_STORE_ID is not an OpenFGA store id');
  expect(await migrated(database)).toBe(false);
});

test('pnpm migrate with a trailing slash in OPENFGA_API_URL reaches the same OpenFGA (the SDK would ask for //stores)', async () => {
  const database = await scratch.create();
  const stack = inject('outboxStack');
  const credentials = stack.openfgaPresharedKey ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } } : {};
  const { id: storeId } = await new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, ...credentials }).createStore({ name: `slash-${randomBytes(4).toString('hex')}` });
  const { code, output } = await runCli({
    DATABASE_URL: scratch.urlOf(database),
    OPENFGA_API_URL: `${stack.openfgaApiUrl}/`,
    OPENFGA_API_TOKEN: stack.openfgaPresharedKey,
    OPENFGA_STORE_ID: storeId,
  });
  expect(code, output).toBe(0);
  expect(output).toContain(`export OPENFGA_STORE_ID=${storeId}`);
});
