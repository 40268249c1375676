import { dropOutboxTable, OutboxConfigError, type AnyKysely, type OutboxSpec } from '@outbox/outbox';
import {
  actionsLogDdlV1,
  drainFunctionsDdl,
  dropLedgerLifeDdlV1,
  ENQUEUE_FUNCTION_SIGNATURES,
  enqueueFunctionDdl,
  type EnqueueFunctionVersion,
  executeStatements,
  lateWriteVerificationDdl,
  ledgerLifeDdlV1,
  outboxTableDdlV1,
  tableNames,
  type DrainFunctionVersions,
} from '@outbox/outbox/protocol';
import { AUDIT_CURSOR_TABLE, auditCursorTableDdl } from '@outbox/reconciler';
import type { Migration } from 'kysely/migration';
import { createIamTables, dropIamTables } from './iam-schema.js';
import {
  createResourceTable,
  dropResourceTable,
  type ResourceColumnType,
  type ResourceTable,
} from './resource-table.js';
import { iamOutbox } from './specs.js';

// What these call must not change once shipped (docs/migrations.md): frozen-migrations.test.ts pins
// the SQL of every migration.

/** The drainer's functions the first migrations (0001–0006) shipped with. */
const FIRST_DRAIN_FUNCTIONS: DrainFunctionVersions = { claim: 'v3', settle: 'v2' };

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

/**
 * Adds `columns` to a resource table, each nullable (the rows already there have no value for it)
 * and without a default, so the change takes no table rewrite.
 */
export function addResourceColumnsMigration(
  table: Pick<ResourceTable, 'schema' | 'table'>,
  columns: Readonly<Record<string, ResourceColumnType>>,
): Migration {
  return {
    async up(db) {
      for (const [name, type] of Object.entries(columns))
        await db.schema.withSchema(table.schema).alterTable(table.table).addColumn(name, type).execute();
    },
    async down(db) {
      for (const name of Object.keys(columns))
        await db.schema.withSchema(table.schema).alterTable(table.table).dropColumn(name).execute();
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
 * Brings the drainer's functions of `specs` to `versions`. Earlier claim overloads stay for the
 * earlier build's drainers; `down` leaves the functions, which that build does not call.
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

/** Creates enqueue's function of `specs` at `version`; `down` drops it (the previous build's enqueue does not call it). */
export function enqueueFunctionMigration(specs: readonly OutboxSpec[], version: EnqueueFunctionVersion): Migration {
  return {
    async up(db) {
      for (const spec of specs) await executeStatements(db, enqueueFunctionDdl(spec, version));
    },
    async down(db) {
      for (const spec of specs) {
        await executeStatements(
          db,
          ENQUEUE_FUNCTION_SIGNATURES.map(
            (signature) => `drop function if exists ${tableNames(spec).enqueueFunction}${signature}`,
          ),
        );
      }
    },
  };
}

/** The actions log of every outbox of `specs` (docs/ledger.md, "The actions log"); `down` drops it. */
export function actionsLogMigration(specs: readonly OutboxSpec[]): Migration {
  return {
    async up(db) {
      for (const spec of specs) await executeStatements(db, actionsLogDdlV1(spec));
    },
    async down(db) {
      for (const spec of specs) await executeStatements(db, [`drop table if exists ${tableNames(spec).actionsTable}`]);
    },
  };
}

/** The ledger's columns and delivered-rows index on every outbox of `specs` (docs/ledger.md). */
export function ledgerLifeMigration(specs: readonly OutboxSpec[]): Migration {
  return {
    async up(db) {
      for (const spec of specs) await executeStatements(db, ledgerLifeDdlV1(spec));
    },
    async down(db) {
      for (const spec of specs) await executeStatements(db, dropLedgerLifeDdlV1(spec));
    },
  };
}

/**
 * Late-write verification on every outbox of `specs` (the `verify_after` column and its index,
 * settle v4, whose probe reads 0009's delivered-rows index), and the incremental audit's cursor
 * table. `down` drops the column and the cursor table; the functions stay, as in
 * {@link drainFunctionsMigration}.
 */
export function lateWriteVerificationMigration(specs: readonly OutboxSpec[]): Migration {
  return {
    async up(db) {
      for (const spec of specs) {
        await executeStatements(db, [
          ...lateWriteVerificationDdl(spec),
          ...drainFunctionsDdl(spec, { claim: 'v4', settle: 'v4' }),
        ]);
      }
      await executeStatements(db, [auditCursorTableDdl()]);
    },
    async down(db) {
      await executeStatements(db, [`drop table if exists ${AUDIT_CURSOR_TABLE}`]);
      for (const spec of specs)
        await executeStatements(db, [`alter table ${spec.table} drop column if exists verify_after`]);
    },
  };
}
