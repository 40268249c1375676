import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError, OutboxTableError } from './errors.js';
import { tableNames } from './table-names.js';

/*
 * The table records the `maxAttempts` its rows were counted against, in the comment on its
 * `attempt_count` column. Which rows are deliverable (and so which row is each partition's head)
 * depends on that number: a process running with another value would see poisoned rows as
 * deliverable or the other way round, and strand or reorder partitions (DESIGN §5, the head
 * invariant). `verifyOutboxTable` refuses a spec whose value differs, `enqueue` counts with the
 * recorded value, and `setMaxAttempts` is the one way to change it.
 */

const MARKER = '@outbox/outbox max_attempts=';
const PATTERN = '@outbox/outbox max_attempts=([0-9]+)';

/** The comment on `attempt_count` that records `maxAttempts`. */
export function maxAttemptsComment(maxAttempts: number): string {
  return (
    `${MARKER}${maxAttempts}: attempts before an intent is poisoned. ` +
    'Change it only with setMaxAttempts (it keeps the rows consistent); verifyOutboxTable compares it with the spec.'
  );
}

/** `comment on column …attempt_count is …` recording `maxAttempts`. */
export function maxAttemptsCommentDdl(spec: OutboxSpec, maxAttempts: number): string {
  const comment = maxAttemptsComment(maxAttempts).replace(/'/g, "''");
  return `comment on column ${tableNames(spec).table}.attempt_count is '${comment}'`;
}

/**
 * SQL for the table's recorded `maxAttempts` (an integer), or NULL when nothing is recorded (a
 * table created before this was recorded). A scalar subquery of the catalog: in a WHERE clause it
 * is an init-plan, read once per statement. Plain SQL text without parameters (the names in it are
 * validated identifiers), so it also fits a simple-protocol statement such as the drainer's claim.
 *
 * @internal shared by @outbox/drainer (its claim checks it); not for application code.
 */
export function recordedMaxAttemptsSql(spec: OutboxSpec): RawBuilder<number | null> {
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  return sql.raw<number | null>(`(
    select substring(col_description(a.attrelid, a.attnum) from '${PATTERN}')::integer
    from pg_catalog.pg_attribute a
    where a.attrelid = '${relation}'::regclass and a.attname = 'attempt_count' and not a.attisdropped)`);
}

/**
 * SQL for the `maxAttempts` rows are counted with: the one the table records, or the spec's when it
 * records none (a table of an earlier release). What enqueue and `outboxStats` count with, as the
 * drainers that verified the table do, even when the caller's spec is older or newer (a rolling
 * change of maxAttempts).
 */
export function countedMaxAttemptsSql(spec: OutboxSpec): RawBuilder<number> {
  return sql<number>`coalesce(${recordedMaxAttemptsSql(spec)}, ${sql.lit(spec.maxAttempts)})`;
}

/**
 * The `maxAttempts` the table records, or undefined when it records none (a table created by an
 * earlier release, which did not record it; see {@link setMaxAttempts}).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function recordedMaxAttempts(db: Kysely<any>, spec: OutboxSpec): Promise<number | undefined> {
  const result = await sql<{ recorded: number | null }>`select ${recordedMaxAttemptsSql(spec)} as recorded`.execute(db);
  const recorded = result.rows[0]?.recorded;
  return recorded === null || recorded === undefined ? undefined : Number(recorded);
}

/**
 * The error of a process that counts with `spec.maxAttempts` while the table records `recorded`:
 * it was left running across a `setMaxAttempts`, and would strand or reorder partitions if it went on.
 *
 * @internal shared by @outbox/drainer and @outbox/reconciler; not for application code.
 */
export function maxAttemptsChangedError(spec: OutboxSpec, recorded: number, who: string): OutboxConfigError {
  return new OutboxConfigError(
    'maxAttempts',
    `${spec.table} now records maxAttempts ${recorded} (setMaxAttempts ran), this ${who} counts with ${spec.maxAttempts}: ` +
      'restart it with the new spec; it changes nothing until then',
  );
}

/**
 * Throws {@link maxAttemptsChangedError} when the table records a `maxAttempts` other than the
 * spec's. Run it inside the transaction it guards, in a statement after that transaction locked the
 * rows it will change: `setMaxAttempts` holds the table in EXCLUSIVE mode, so the check then sees its
 * commit, or it waits for this transaction to end.
 *
 * @internal shared by @outbox/reconciler (its passes and retire); not for application code.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function assertRecordedMaxAttempts(trx: Kysely<any>, spec: OutboxSpec, who: string): Promise<void> {
  const recorded = await recordedMaxAttempts(trx, spec);
  if (recorded !== undefined && recorded !== spec.maxAttempts) throw maxAttemptsChangedError(spec, recorded, who);
}

/** Options of {@link setMaxAttempts}. */
export interface SetMaxAttemptsOptions {
  /**
   * The `maxAttempts` the table's rows have been counted against so far. Needed only for a table
   * that records none (created before the value was recorded): pass the value your drainers ran
   * with. When the table records a value, `from` must be omitted or equal to it.
   */
  readonly from?: number;
}

/** What {@link setMaxAttempts} did. */
export interface SetMaxAttemptsResult {
  /** The value the rows were counted against before. */
  readonly from: number;
  /** The value now recorded (the spec's). */
  readonly to: number;
  /**
   * Pending rows whose `attempt_count` was moved so that none changed state: when raising, rows
   * already poisoned are set to the new value (they stay poisoned: redrive them); when lowering,
   * rows still being retried that have failed the new value's times or more are set to one below
   * it (one attempt left).
   */
  readonly adjusted: number;
}

/**
 * Changes the table's `maxAttempts` to `spec.maxAttempts` — the migration step that must precede
 * deploying a spec with a new value (until it runs, `verifyOutboxTable` refuses that spec).
 *
 * It keeps the head invariant (DESIGN §5) by changing no row's state: it adjusts `attempt_count`
 * of the pending rows whose state the new value would flip, then records the new value, in one
 * transaction that holds the table in EXCLUSIVE mode (it waits for in-flight enqueues, claims and
 * redrives, and blocks new ones, until it commits — reads go on). Raising does not revive rows
 * already poisoned: they keep being poisoned and wait for the reconciler, which still refuses to
 * revive a superseded one. Lowering poisons nothing at once: a row still being retried gets at
 * most one more attempt. Idempotent: with the value already recorded, it changes nothing.
 *
 * Stop the drainers and reconcilers that run with the old value before it runs: counting with the
 * old value they would strand partitions, so after it they refuse to work (an `OutboxConfigError`
 * naming `maxAttempts` from every claim, pass and retire) until restarted with the new spec. Writers
 * may keep running: `enqueue` counts with the value the table records.
 *
 * Runs inside `db` when it is a transaction (e.g. a Kysely migration's; it must be READ
 * COMMITTED), else in a READ COMMITTED transaction of its own.
 *
 * @example
 * // in a migration, before deploying `defineOutbox({ …, maxAttempts: 20 })`
 * export const up = (db: Kysely<any>) => setMaxAttempts(db, vpcOutbox);
 */
export async function setMaxAttempts(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  db: Kysely<any>,
  spec: OutboxSpec,
  options: SetMaxAttemptsOptions = {},
): Promise<SetMaxAttemptsResult> {
  if (options.from !== undefined && (!Number.isInteger(options.from) || options.from < 1)) {
    throw new OutboxConfigError('from', `expected a positive integer, got ${String(options.from)}`);
  }
  if (db.isTransaction) return changeMaxAttempts(db, spec, options);
  return db.transaction().setIsolationLevel('read committed').execute((trx) => changeMaxAttempts(trx, spec, options));
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function changeMaxAttempts(trx: Kysely<any>, spec: OutboxSpec, options: SetMaxAttemptsOptions): Promise<SetMaxAttemptsResult> {
  const n = tableNames(spec);
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  const found = await sql<{ oid: number | null; isolation: string }>`
    select to_regclass(${relation})::oid as oid, current_setting('transaction_isolation') as isolation`.execute(trx);
  const { oid, isolation } = found.rows[0] ?? { oid: null, isolation: '' };
  if (isolation !== 'read committed') {
    throw new OutboxConfigError(
      'db',
      `setMaxAttempts needs a READ COMMITTED transaction (this one is ${isolation.toUpperCase()}): ` +
        'run it outside a transaction, or in one started with setIsolationLevel(\'read committed\')',
    );
  }
  if (oid === null || oid === undefined) throw new OutboxTableError(spec.table, [`the table ${spec.table} itself (it does not exist)`]);

  // Waits for every transaction that wrote or row-locked the table (enqueues, the drainer's
  // claims, redrives) and holds off new ones until commit; plain reads go on. Self-conflicting:
  // two runs of this function take turns. Next statements see everything committed before.
  await sql.raw(`lock table ${n.table} in exclusive mode`).execute(trx);

  const recorded = await recordedMaxAttempts(trx, spec);
  if (recorded !== undefined && options.from !== undefined && options.from !== recorded) {
    throw new OutboxConfigError(
      'from',
      `is ${options.from}, but ${spec.table} records maxAttempts ${recorded}: omit from (it is needed only for a table that records none)`,
    );
  }
  const from = recorded ?? options.from;
  if (from === undefined) {
    throw new OutboxConfigError(
      'from',
      `${spec.table} records no maxAttempts (it was created by an earlier release): pass { from: <the maxAttempts ` +
        'its drainers have been running with> } — the spec\'s own value when you only want to record it',
    );
  }
  const to = spec.maxAttempts;
  const pending = sql`sent_at is null and retired_at is null`;
  let adjusted = 0;
  if (to > from) {
    // Poisoned under `from`, deliverable under `to`: keep them poisoned (no head moves; a
    // superseded row must never become deliverable by a configuration change).
    const result = await sql`
      update ${sql.raw(n.table)} set attempt_count = ${to}
      where ${pending} and attempt_count >= ${from} and attempt_count < ${to}`.execute(trx);
    adjusted = Number(result.numAffectedRows ?? 0);
  } else if (to < from) {
    // Deliverable under `from`, poisoned under `to`: keep them deliverable, with one attempt left
    // (a head stays the head; no successor is promoted over it).
    const result = await sql`
      update ${sql.raw(n.table)} set attempt_count = ${to - 1}
      where ${pending} and attempt_count >= ${to} and attempt_count < ${from}`.execute(trx);
    adjusted = Number(result.numAffectedRows ?? 0);
  }
  if (recorded !== to) await sql.raw(maxAttemptsCommentDdl(spec, to)).execute(trx);
  return { from, to, adjusted };
}
