import { dropOutboxTable, OutboxConfigError, type AnyKysely, type OutboxSpec } from '@outbox/outbox';
import { drainFunctionsDdl, executeStatements, outboxTableDdlV1, type DrainFunctionVersions } from '@outbox/outbox/protocol';
import type { Migration } from 'kysely/migration';
import { createIamTables, dropIamTables } from './iam-schema.js';
import { createResourceTable, dropResourceTable, type ResourceTable } from './resource-table.js';
import { iamOutbox } from './specs.js';

/*
 * Every builder here is frozen (docs/migrations.md): a migration means what it meant when it
 * shipped, whatever the release that runs it. A change is a new migration.
 */

/** The drainer's functions as the first outbox migrations (0001–0006) created them. */
const FIRST_DRAIN_FUNCTIONS: DrainFunctionVersions = { claim: 'v3', settle: 'v2' };

/** The outbox table (version 1) and the drainer's functions the first migrations shipped with. */
async function createOutbox(db: AnyKysely, spec: OutboxSpec): Promise<void> {
  await executeStatements(db, [...outboxTableDdlV1(spec), ...drainFunctionsDdl(spec, FIRST_DRAIN_FUNCTIONS)]);
}

/**
 * The migration of one register service: its schema, its resource table and its outbox, in one
 * transaction (the migrator runs a run's pending migrations in one), so a service never sees a
 * table without its outbox.
 */
export function registerServiceMigration(table: ResourceTable, spec: OutboxSpec): Migration {
  if (table.schema !== spec.schema) {
    throw new OutboxConfigError('spec', `${table.qualifiedName} and its outbox ${spec.table} should share a schema`);
  }
  return {
    async up(db) {
      await createResourceTable(db, table);
      await createOutbox(db, spec);
    },
    async down(db) {
      await dropOutboxTable(db, spec);
      await dropResourceTable(db, table);
      await db.schema.dropSchema(table.schema).ifExists().execute();
    },
  };
}

/** iam: organizations, projects, the grants table and the tuple outbox. */
export const iamMigration: Migration = {
  async up(db) {
    await createIamTables(db);
    await createOutbox(db, iamOutbox);
  },
  async down(db) {
    await dropOutboxTable(db, iamOutbox);
    await dropIamTables(db);
    await db.schema.dropSchema('iam').ifExists().execute();
  },
};

/**
 * Brings the drainer's functions of existing outboxes to `versions`: a database migrated by an
 * earlier build otherwise fails `verifyOutboxTable` at service start. Earlier claim overloads stay
 * (drainers of the earlier build keep working until replaced); `down` leaves the functions, which
 * the earlier build does not call.
 */
export function drainFunctionsMigration(specs: readonly OutboxSpec[], versions: DrainFunctionVersions): Migration {
  return {
    async up(db) {
      for (const spec of specs) await executeStatements(db, drainFunctionsDdl(spec, versions));
    },
    async down() {
      // nothing to undo: see above
    },
  };
}
