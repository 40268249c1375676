import { migrateToLatest } from '@outbox/migrations';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { createDatabase, dropDatabase } from './databases.js';
import type { ProvidedStack } from './provided.js';
import { startStack } from './stack.js';

const TEMPLATE = 'outbox_template';

/**
 * Vitest global setup: one real Postgres and one real OpenFGA for the whole run, and a template
 * database with every project migration applied, which each test file clones (a clone is a file
 * copy: milliseconds, where migrating again would take seconds).
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const stack = await startStack();
  try {
    await dropDatabase(stack.postgresUrl, TEMPLATE);
    const templateUrl = await createDatabase(stack.postgresUrl, TEMPLATE);
    const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: templateUrl, max: 1 }) }) });
    try {
      await migrateToLatest(db);
    } finally {
      await db.destroy();
    }
  } catch (error) {
    await stack.stop();
    throw error;
  }
  const provided: ProvidedStack = {
    postgresUrl: stack.postgresUrl,
    templateDatabase: TEMPLATE,
    openfgaApiUrl: stack.openfga.apiUrl,
    openfgaPresharedKey: stack.openfga.presharedKey,
  };
  project.provide('outboxStack', provided);
  return () => stack.stop();
}
