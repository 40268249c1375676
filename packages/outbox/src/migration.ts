import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { DRAIN_FUNCTION_SIGNATURES, drainFunctionsDdl } from './drain-functions.js';
import { executeStatements } from './execute-statements.js';
import { outboxTableDdlV1, type OutboxTableOptions } from './outbox-table-ddl.js';
import { tableNames } from './table-names.js';

/**
 * The DDL of an outbox table as this release creates it (docs/design.md §4): the table, its
 * indexes and trigger, then the drainer's functions. It changes between releases; a migration you
 * keep uses {@link outboxMigrations}.
 *
 * @example
 * await writeFile('0001_vpc_outbox.sql', outboxTableDdl(vpcOutbox).join(';\n\n'));
 */
export function outboxTableDdl(spec: OutboxSpec, options: OutboxTableOptions = {}): string[] {
  return [...outboxTableDdlV1(spec, options), ...drainFunctionsDdl(spec)];
}

/**
 * Creates the outbox table of `spec` as this release has it: indexes, NOTIFY trigger, the drainer's
 * claim and settle functions, and `spec.maxAttempts` recorded. The schema is created only when it
 * is missing (a role that may create in its own schema but not in the database can run it). Runs
 * in the caller's transaction. For a migration you keep, use {@link outboxMigrations}.
 *
 * @example
 * await createOutboxTable(db, vpcOutbox);
 */
export async function createOutboxTable(db: AnyKysely, spec: OutboxSpec, options: OutboxTableOptions = {}): Promise<void> {
  await executeStatements(db, outboxTableDdl(spec, options));
}

/**
 * Drops the outbox table of `spec`, its trigger function and every version of the drainer's
 * functions (the schema stays).
 *
 * @example
 * await dropOutboxTable(db, vpcOutbox);
 */
export async function dropOutboxTable(db: AnyKysely, spec: OutboxSpec): Promise<void> {
  const n = tableNames(spec);
  await executeStatements(db, [
    `drop table if exists ${n.table}`,
    `drop function if exists ${n.notifyFunction}()`,
    ...DRAIN_FUNCTION_SIGNATURES.claim.map((signature) => `drop function if exists ${n.claimFunction}${signature}`),
    ...DRAIN_FUNCTION_SIGNATURES.settle.map((signature) => `drop function if exists ${n.settleFunction}${signature}`),
  ]);
}

/**
 * The shape of a Kysely migration (`Migration` of `kysely/migration` in 0.29, of `kysely` in 0.28),
 * spelled out so the types work with every kysely the peer range allows.
 */
export interface OutboxMigration {
  up(db: AnyKysely): Promise<void>;
  down(db: AnyKysely): Promise<void>;
}

/** Options of {@link outboxMigrations}. */
export interface OutboxMigrationsOptions extends OutboxTableOptions {
  /**
   * Put before each step's name. Default `<schema>.<table>/`: unique per outbox, so the steps of
   * two outboxes spread into one migrator cannot overwrite each other.
   */
  readonly prefix?: string;
}

/**
 * The outbox of `spec` as numbered Kysely migrations that never change once released: step 0001
 * creates the table, each later step brings the drainer's functions to a released version. A new
 * release only appends steps, so a database migrated by any release ends with this release's
 * schema. Spread them into your migrator; a step named before migrations you already ran needs
 * `allowUnorderedMigrations` (or a `prefix` that sorts after them).
 *
 * @example
 * const migrations = {
 *   '0001_vpc': vpcTables,
 *   ...outboxMigrations(vpcOutbox, { prefix: '0002_vpc_outbox/' }),
 * };
 * await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
 */
export function outboxMigrations(spec: OutboxSpec, options: OutboxMigrationsOptions = {}): Readonly<Record<string, OutboxMigration>> {
  const prefix = options.prefix ?? `${spec.table}/`;
  const n = tableNames(spec);
  return Object.freeze({
    [`${prefix}0001_outbox_table`]: {
      up: (db: AnyKysely) => executeStatements(db, outboxTableDdlV1(spec, options)),
      down: (db: AnyKysely) => dropOutboxTable(db, spec),
    },
    [`${prefix}0002_drain_functions_v4`]: {
      up: (db: AnyKysely) => executeStatements(db, drainFunctionsDdl(spec, { claim: 'v4', settle: 'v3' })),
      down: (db: AnyKysely) =>
        executeStatements(db, [
          `drop function if exists ${n.claimFunction}${DRAIN_FUNCTION_SIGNATURES.claim[0]}`,
          `drop function if exists ${n.settleFunction}${DRAIN_FUNCTION_SIGNATURES.settle[0]}`,
        ]),
    },
  });
}

/**
 * One Kysely migration that creates this release's outbox table on `up` and drops it on `down`.
 *
 * @deprecated Its `up` follows the release it runs with, so a database it migrated earlier is not
 * brought up to date: use {@link outboxMigrations}, whose steps are frozen.
 *
 * @example
 * const migrations = { '0001_vpc_outbox': outboxMigration(vpcOutbox) };
 */
export function outboxMigration(spec: OutboxSpec, options: OutboxTableOptions = {}): OutboxMigration {
  return {
    up: (db) => createOutboxTable(db, spec, options),
    down: (db) => dropOutboxTable(db, spec),
  };
}
