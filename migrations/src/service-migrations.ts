import { createDrainFunctions, createOutboxTable, dropOutboxTable, OutboxConfigError, type OutboxSpec } from '@outbox/outbox';
import type { Migration } from 'kysely/migration';
import { createIamTables, dropIamTables } from './iam-schema.js';
import { createResourceTable, dropResourceTable, type ResourceTable } from './resource-table.js';
import { iamOutbox } from './specs.js';

/**
 * The migration of one register service: its schema, its resource table and its outbox, in one
 * transaction (the migrator runs all of a run's pending migrations in one), so a service never sees
 * a table without its outbox.
 */
export function registerServiceMigration(table: ResourceTable, spec: OutboxSpec): Migration {
  if (table.schema !== spec.schema) {
    throw new OutboxConfigError('spec', `${table.qualifiedName} and its outbox ${spec.table} should share a schema`);
  }
  return {
    async up(db) {
      await createResourceTable(db, table);
      await createOutboxTable(db, spec);
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
    await createOutboxTable(db, iamOutbox);
  },
  async down(db) {
    await dropOutboxTable(db, iamOutbox);
    await dropIamTables(db);
    await db.schema.dropSchema('iam').ifExists().execute();
  },
};

/**
 * Brings the drainer's functions of existing outboxes to this release's (`createDrainFunctions`):
 * a database migrated by an earlier build otherwise fails `verifyOutboxTable` at service start. On a
 * database migrated from scratch it replaces them with themselves. The claim's earlier overloads stay
 * (drainers of the earlier build keep working until they are replaced); `down` leaves the new ones,
 * which the earlier build does not call.
 */
export function drainFunctionsMigration(specs: readonly OutboxSpec[]): Migration {
  return {
    async up(db) {
      for (const spec of specs) await createDrainFunctions(db, spec);
    },
    async down() {
      // nothing to undo: see above
    },
  };
}
