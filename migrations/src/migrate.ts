import type { AnyKysely } from '@outbox/outbox';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';
import {
  actionsLogMigration,
  addResourceColumnsMigration,
  drainFunctionsMigration,
  enqueueFunctionMigration,
  iamMigration,
  lateWriteVerificationMigration,
  ledgerLifeMigration,
  registerServiceMigration,
} from './service-migrations.js';
import { computeOutbox, iamOutbox, nlbOutbox, registryOutbox, storageOutbox, vpcOutbox } from './specs.js';
import { bucketTable, instanceTable, loadBalancerTable, repositoryTable, vpcTable } from './tables.js';

const OUTBOXES = [iamOutbox, vpcOutbox, computeOutbox, nlbOutbox, storageOutbox, registryOutbox];
/** `compute.instances` as 0003 created it: later columns are migrations of their own. */
const INSTANCE_TABLE_V1 = {
  ...instanceTable,
  columns: { machine_type: { type: 'text' }, image: { type: 'text' } },
} as const;

/**
 * Every migration of the project, in order. Compiled into the code (not read from a folder at run
 * time) so a bundled service migrates the same way as the repo. A shipped migration never changes,
 * nor do the versioned builders it calls (docs/migrations.md): a change is a new entry.
 */
export const migrations: Readonly<Record<string, Migration>> = Object.freeze({
  '0001_iam': iamMigration,
  '0002_vpc': registerServiceMigration(vpcTable, vpcOutbox),
  '0003_compute': registerServiceMigration(INSTANCE_TABLE_V1, computeOutbox),
  '0004_nlb': registerServiceMigration(loadBalancerTable, nlbOutbox),
  '0005_storage': registerServiceMigration(bucketTable, storageOutbox),
  '0006_registry': registerServiceMigration(repositoryTable, registryOutbox),
  // claim v3 (flushed partitions first) and settle v2 (look-ups as ranges of (partition, id)).
  '0007_drain_functions_v3': drainFunctionsMigration(OUTBOXES, { claim: 'v3', settle: 'v2' }),
  // claim v4 and settle v3 (generic plans: planned once per connection instead of on every call).
  '0008_drain_functions_v4': drainFunctionsMigration(OUTBOXES, { claim: 'v4', settle: 'v3' }),
  // why a row is poisoned, revivals, discard, and the delivered-rows index compaction reads.
  '0009_ledger_life': ledgerLifeMigration(OUTBOXES),
  // settle v4 (stamps deliveries at risk of a late write), its column and indexes; the audit's cursor table.
  '0010_late_write_verification': lateWriteVerificationMigration(OUTBOXES),
  // claim v5 (returns created_at too: the drainer's commit → delivered lag); v4 stays for the previous build's drainers.
  '0011_claim_v5': drainFunctionsMigration(OUTBOXES, { claim: 'v5', settle: 'v4' }),
  // enqueue v1: the locks and the insert in one round trip (the previous build's enqueue does not call it).
  '0012_enqueue_function_v1': enqueueFunctionMigration(OUTBOXES, 'v1'),
  // the actions log beside every outbox: what operators changed, by whom and why (the previous build writes none).
  '0013_actions_log_v1': actionsLogMigration(OUTBOXES),
  // an instance names the vpc it runs in (compute checks can_edit on it); rows from before have none.
  '0014_instance_vpc': addResourceColumnsMigration(instanceTable, { vpc_id: 'text' }),
});

const provider: MigrationProvider = { getMigrations: async () => ({ ...migrations }) };

/** Thrown by {@link migrateToLatest} when a migration fails; `cause` is the database's error. */
export class MigrationError extends Error {
  override readonly name = 'MigrationError';
  /** The migration that failed, or undefined when the migrator itself could not start. */
  readonly migrationName: string | undefined;
  constructor(migrationName: string | undefined, options: { cause?: unknown }) {
    const reason = options.cause instanceof Error ? `: ${options.cause.message}` : '';
    super(
      `migration ${migrationName ?? '(setup)'} failed${reason}; none of this run's migrations was applied (they run in one transaction)`,
      options,
    );
    this.migrationName = migrationName;
  }
}

/**
 * Applies every pending migration and returns the names it applied. Safe when two processes run it
 * at once: Kysely's migrator serialises them on a session advisory lock, and the second finds
 * nothing left to do.
 *
 * @example
 * const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString }) }) });
 * await migrateToLatest(db);
 */
export async function migrateToLatest(db: AnyKysely): Promise<string[]> {
  const migrator = new Migrator({ db, provider, migrationTableSchema: 'public' });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error !== undefined || failed !== undefined) throw new MigrationError(failed?.migrationName, { cause: error });
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
