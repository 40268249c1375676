import type { Kysely } from 'kysely';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';

/**
 * Every migration of the project, in order. Compiled into the code (not read from a folder at run
 * time) so a bundled service migrates the same way as the repo.
 */
export const migrations: Readonly<Record<string, Migration>> = Object.freeze({});

const provider: MigrationProvider = { getMigrations: async () => ({ ...migrations }) };

/**
 * Applies every pending migration. Safe when two processes run it at once: Kysely's migrator
 * serialises them on a lock row, and the second finds nothing left to do.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function migrateToLatest(db: Kysely<any>): Promise<void> {
  const migrator = new Migrator({ db, provider, migrationTableSchema: 'public' });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error !== undefined || failed !== undefined) {
    throw new Error(`migration ${failed?.migrationName ?? '(setup)'} failed`, { cause: error });
  }
}
