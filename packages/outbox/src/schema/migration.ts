import { ACTIONS_LOG_STEP, actionsLogDdlV1 } from './actions-log-ddl.js';
import type { AnyKysely } from '../any-kysely.js';
import type { OutboxSpec } from '../define-outbox.js';
import { DRAIN_FUNCTION_SIGNATURES, drainFunctionsDdl } from './drain-functions.js';
import { ENQUEUE_FUNCTION_SIGNATURES, ENQUEUE_FUNCTION_STEP, enqueueFunctionDdl } from './enqueue-function.js';
import { executeStatements } from './execute-statements.js';
import { lateWriteVerificationDdl } from './late-write-ddl.js';
import { dropLedgerLifeDdlV1, ledgerLifeDdlV1 } from './ledger-life-ddl.js';
import { outboxTableDdlV1, type OutboxTableOptions } from './outbox-table-ddl.js';
import { tableNames } from '../table-names.js';

/**
 * The DDL of this release's outbox table and functions; it changes between releases (see {@link outboxMigrations}).
 * @example
 * await writeFile('0001_vpc_outbox.sql', outboxTableDdl(vpcOutbox).join(';\n\n'));
 */
export function outboxTableDdl(spec: OutboxSpec, options: OutboxTableOptions = {}): string[] {
  return [
    ...outboxTableDdlV1(spec, options),
    ...ledgerLifeDdlV1(spec),
    ...lateWriteVerificationDdl(spec),
    ...drainFunctionsDdl(spec),
    ...enqueueFunctionDdl(spec),
    ...actionsLogDdlV1(spec),
  ];
}

/**
 * Creates the outbox table of `spec` as this release has it (docs/design.md §4), in the caller's
 * transaction. For a migration you keep, use {@link outboxMigrations}.
 * @example
 * await createOutboxTable(db, vpcOutbox);
 */
export async function createOutboxTable(
  db: AnyKysely,
  spec: OutboxSpec,
  options: OutboxTableOptions = {},
): Promise<void> {
  await executeStatements(db, outboxTableDdl(spec, options));
}

/**
 * Drops the outbox table of `spec` with its trigger, every version of its functions and its actions log; the schema stays.
 * @example
 * await dropOutboxTable(db, vpcOutbox);
 */
export async function dropOutboxTable(db: AnyKysely, spec: OutboxSpec): Promise<void> {
  const names = tableNames(spec);
  await executeStatements(db, [
    `drop table if exists ${names.actionsTable}`,
    `drop table if exists ${names.table}`,
    `drop function if exists ${names.notifyFunction}()`,
    ...DRAIN_FUNCTION_SIGNATURES.claim.map((signature) => `drop function if exists ${names.claimFunction}${signature}`),
    ...DRAIN_FUNCTION_SIGNATURES.settle.map(
      (signature) => `drop function if exists ${names.settleFunction}${signature}`,
    ),
    ...ENQUEUE_FUNCTION_SIGNATURES.map((signature) => `drop function if exists ${names.enqueueFunction}${signature}`),
  ]);
}

/** A Kysely migration, spelled out for every kysely of the peer range (`Migration` moved in 0.29). */
export interface OutboxMigration {
  up(db: AnyKysely): Promise<void>;
  down(db: AnyKysely): Promise<void>;
}

/** Options of {@link outboxMigrations}. */
export interface OutboxMigrationsOptions extends OutboxTableOptions {
  /** Put before each step's name. Default `<schema>.<table>/`: two outboxes' steps cannot overwrite each other. */
  readonly prefix?: string;
}

/**
 * The outbox of `spec` as Kysely migrations that never change once released: the table, the
 * drainer's functions at each released version, enqueue's function, the actions log. A release
 * only appends steps (docs/migrations.md).
 * @example
 * const migrations = { '0001_vpc': vpcTables, ...outboxMigrations(vpcOutbox, { prefix: '0002_vpc_outbox/' }) };
 */
export function outboxMigrations(
  spec: OutboxSpec,
  options: OutboxMigrationsOptions = {},
): Readonly<Record<string, OutboxMigration>> {
  const prefix = options.prefix ?? `${spec.table}/`;
  const names = tableNames(spec);
  return Object.freeze({
    [`${prefix}0001_outbox_table`]: {
      up: (db: AnyKysely) => executeStatements(db, outboxTableDdlV1(spec, options)),
      down: (db: AnyKysely) => dropOutboxTable(db, spec),
    },
    [`${prefix}0002_drain_functions_v4`]: {
      up: (db: AnyKysely) => executeStatements(db, drainFunctionsDdl(spec, { claim: 'v4', settle: 'v3' })),
      down: (db: AnyKysely) =>
        executeStatements(db, [
          `drop function if exists ${names.claimFunction}(integer, integer, integer, boolean, boolean, text[])`,
          `drop function if exists ${names.settleFunction}(bigint[], text[], bigint[], integer)`,
        ]),
    },
    [`${prefix}0003_ledger_life`]: {
      up: (db: AnyKysely) => executeStatements(db, ledgerLifeDdlV1(spec)),
      down: (db: AnyKysely) => executeStatements(db, dropLedgerLifeDdlV1(spec)),
    },
    // Settle v4 stamps deliveries at risk of a late write; its column and index come first; its probe reads step 0003's delivered-rows index.
    [`${prefix}0004_late_write_verification`]: {
      up: (db: AnyKysely) =>
        executeStatements(db, [
          ...lateWriteVerificationDdl(spec),
          ...drainFunctionsDdl(spec, { claim: 'v4', settle: 'v4' }),
        ]),
      down: (db: AnyKysely) =>
        executeStatements(db, [
          `drop function if exists ${names.settleFunction}(bigint[], text[], bigint[], integer, integer, bigint[], bigint[])`,
          // Its partial index goes with the column.
          `alter table ${names.table} drop column if exists verify_after`,
        ]),
    },
    // Claim v5 returns created_at too (the drainer's commit → delivered lag); v4 stays for the previous release's drainers.
    [`${prefix}0005_claim_v5`]: {
      up: (db: AnyKysely) => executeStatements(db, drainFunctionsDdl(spec, { claim: 'v5', settle: 'v4' })),
      down: (db: AnyKysely) =>
        executeStatements(db, [
          `drop function if exists ${names.claimFunction}(integer, integer, integer, boolean, boolean, text[], boolean)`,
        ]),
    },
    // Enqueue in one round trip; the previous release's enqueue (two statements) does not call it.
    [`${prefix}${ENQUEUE_FUNCTION_STEP}`]: {
      up: (db: AnyKysely) => executeStatements(db, enqueueFunctionDdl(spec, 'v1')),
      down: (db: AnyKysely) =>
        executeStatements(db, [`drop function if exists ${names.enqueueFunction}(text[], jsonb[], integer)`]),
    },
    // The actions log (docs/ledger.md): this release's CLI writes it and observeOutbox reads it; the previous release neither.
    [`${prefix}${ACTIONS_LOG_STEP}`]: {
      up: (db: AnyKysely) => executeStatements(db, actionsLogDdlV1(spec)),
      down: (db: AnyKysely) => executeStatements(db, [`drop table if exists ${names.actionsTable}`]),
    },
  });
}

/**
 * One Kysely migration: this release's outbox table on `up`, dropped on `down`.
 * @deprecated Its `up` follows the release that runs it: use {@link outboxMigrations}.
 * @example
 * const migrations = { '0001_vpc_outbox': outboxMigration(vpcOutbox) };
 */
export function outboxMigration(spec: OutboxSpec, options: OutboxTableOptions = {}): OutboxMigration {
  return {
    up: (db) => createOutboxTable(db, spec, options),
    down: (db) => dropOutboxTable(db, spec),
  };
}
