import type { WriteAuthorizationModelRequest } from '@openfga/sdk';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { createDatabase, dropDatabase } from './databases.js';
import type { ProvidedStack } from './provided.js';
import { startStack } from './stack.js';

const TEMPLATE = 'outbox_template';

/** What the project's global setup supplies: its migrations and its authorization model. */
export interface StackGlobalSetupOptions {
  /** Applies every migration to the template database. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly migrate: (db: Kysely<any>) => Promise<unknown>;
  /** The model written into every test store. */
  readonly authorizationModel: () => WriteAuthorizationModelRequest;
}

/**
 * Builds the vitest global setup: one real Postgres and one real OpenFGA for the whole run, and a
 * template database with every project migration applied, which each test file clones (a clone is
 * a file copy: milliseconds, where migrating again would take seconds). The project passes its
 * migrations and model in, so this package depends on neither.
 *
 * @example
 * // vitest.global-setup.ts
 * export default createStackGlobalSetup({ migrate: migrateToLatest, authorizationModel });
 */
export function createStackGlobalSetup(options: StackGlobalSetupOptions) {
  return (project: TestProject) => setup(project, options);
}

/**
 * The OpenFGA datastore of the run: OUTBOX_OPENFGA_DATASTORE (`memory` or `postgres`), else postgres
 * for a native OpenFGA, as production runs it (some answers differ: a conditional write without a
 * context is a duplicate on memory, a 409 on postgres). The PostgreSQL 15 column of the test matrix
 * runs with memory, so both are covered.
 */
function datastoreFromEnv(): 'memory' | 'postgres' | 'postgres-when-native' {
  const value = process.env.OUTBOX_OPENFGA_DATASTORE;
  if (value === undefined || value === '') return 'postgres-when-native';
  if (value === 'memory' || value === 'postgres') return value;
  throw new Error(`OUTBOX_OPENFGA_DATASTORE must be memory or postgres, not "${value}"`);
}

async function setup(project: TestProject, options: StackGlobalSetupOptions): Promise<() => Promise<void>> {
  const stack = await startStack({ openfgaDatastore: datastoreFromEnv() });
  process.stderr.write(`[stack] OpenFGA ${stack.sources.openfga}, ${stack.openfga.datastore ?? 'unknown'} datastore\n`);
  try {
    await dropDatabase(stack.postgresUrl, TEMPLATE);
    const templateUrl = await createDatabase(stack.postgresUrl, TEMPLATE);
    const db = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: templateUrl, max: 1 }) }),
    });
    try {
      await options.migrate(db);
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
    authorizationModel: options.authorizationModel(),
  };
  project.provide('outboxStack', provided);
  return () => stack.stop();
}
