import { sql, type RawBuilder } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError, OutboxTableError } from './errors.js';
import { integerInRange } from './integer-in-range.js';
import { rowStates } from './row-states.js';
import { tableNames } from './table-names.js';

// The table records the maxAttempts its rows were counted against in the comment on attempt_count:
// which rows are deliverable, hence heads, depends on it (docs/outbox-sql.md, "maxAttempts").
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

/** {@link recordedMaxAttemptsSql} as text. */
export function recordedMaxAttemptsText(spec: OutboxSpec): string {
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  return `(
    select substring(col_description(a.attrelid, a.attnum) from '${PATTERN}')::integer
    from pg_catalog.pg_attribute a
    where a.attrelid = '${relation}'::regclass and a.attname = 'attempt_count' and not a.attisdropped)`;
}

/**
 * SQL for the table's recorded `maxAttempts`, or NULL when it records none (a table of an earlier
 * release). A scalar subquery without parameters: read once per statement, and it fits a
 * simple-protocol statement.
 *
 * @example
 * sql`select ${recordedMaxAttemptsSql(spec)} as recorded`
 */
export function recordedMaxAttemptsSql(spec: OutboxSpec): RawBuilder<number | null> {
  return sql.raw<number | null>(recordedMaxAttemptsText(spec));
}

/**
 * SQL for the `maxAttempts` rows are counted with: the table's, or the spec's when it records none.
 * Enqueue and `outboxStats` count as the drainers do, whatever the caller's spec says.
 */
export function countedMaxAttemptsSql(spec: OutboxSpec): RawBuilder<number> {
  return sql<number>`coalesce(${recordedMaxAttemptsSql(spec)}, ${sql.lit(spec.maxAttempts)})`;
}

/**
 * The `maxAttempts` the table records, or undefined when it records none (see {@link setMaxAttempts}).
 *
 * @example
 * const recorded = await recordedMaxAttempts(db, vpcOutbox);
 */
export async function recordedMaxAttempts(db: AnyKysely, spec: OutboxSpec): Promise<number | undefined> {
  const result = await sql<{ recorded: number | null }>`select ${recordedMaxAttemptsSql(spec)} as recorded`.execute(db);
  const recorded = result.rows[0]?.recorded;
  return recorded === null || recorded === undefined ? undefined : Number(recorded);
}

/**
 * The error of a process counting with `spec.maxAttempts` while the table records `recorded`: it
 * outlived a `setMaxAttempts`, and would strand or reorder partitions if it went on.
 *
 * @example
 * throw maxAttemptsChangedError(spec, 20, 'drainer');
 */
export function maxAttemptsChangedError(spec: OutboxSpec, recorded: number, who: string): OutboxConfigError {
  return new OutboxConfigError(
    'maxAttempts',
    `${spec.table} now records maxAttempts ${recorded} (setMaxAttempts ran), this ${who} counts with ${spec.maxAttempts}: ` +
      'restart it with the new spec; it changes nothing until then',
  );
}

/**
 * Throws {@link maxAttemptsChangedError} when the table records another `maxAttempts` than the
 * spec. Run it in the transaction it guards, after that transaction locked the rows it will change:
 * `setMaxAttempts` then either committed before, or waits for this transaction.
 *
 * @example
 * await assertRecordedMaxAttempts(trx, spec, 'reconciler');
 */
export async function assertRecordedMaxAttempts(trx: AnyKysely, spec: OutboxSpec, who: string): Promise<void> {
  const recorded = await recordedMaxAttempts(trx, spec);
  if (recorded !== undefined && recorded !== spec.maxAttempts) throw maxAttemptsChangedError(spec, recorded, who);
}

/** Options of {@link setMaxAttempts}. */
export interface SetMaxAttemptsOptions {
  /**
   * The `maxAttempts` the rows have been counted against so far. Needed only for a table that
   * records none (an earlier release's): the value its drainers ran with. When the table records
   * one, omit it or pass that value.
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
   * Pending rows whose `attempt_count` was moved so that none changed state: raising keeps the
   * poisoned ones poisoned (redrive them); lowering leaves rows still retried one attempt.
   */
  readonly adjusted: number;
}

/**
 * Changes the table's `maxAttempts` to `spec.maxAttempts`: the migration step before deploying a
 * spec with a new value (until it runs, `verifyOutboxTable` refuses that spec). No row changes
 * state, so heads stay where they are: it adjusts the `attempt_count` of the pending rows the new
 * value would flip and records the value, holding the table in EXCLUSIVE mode (enqueues, claims
 * and redrives wait; reads go on). Idempotent.
 *
 * Stop the drainers and reconcilers running with the old value first: afterwards they refuse to
 * work until restarted with the new spec. Writers may keep running. Runs in `db` when it is a
 * (READ COMMITTED) transaction, else in one of its own.
 *
 * @example
 * // a migration, before deploying defineOutbox({ …, maxAttempts: 20 })
 * export const up = (db: AnyKysely) => setMaxAttempts(db, vpcOutbox);
 */
export async function setMaxAttempts(db: AnyKysely, spec: OutboxSpec, options: SetMaxAttemptsOptions = {}): Promise<SetMaxAttemptsResult> {
  if (options.from !== undefined) integerInRange('from', options.from, 1);
  if (db.isTransaction) return changeMaxAttempts(db, spec, options);
  return db.transaction().setIsolationLevel('read committed').execute((trx) => changeMaxAttempts(trx, spec, options));
}

async function changeMaxAttempts(trx: AnyKysely, spec: OutboxSpec, options: SetMaxAttemptsOptions): Promise<SetMaxAttemptsResult> {
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

  // Waits for every writer and row-locker of the table and holds off new ones until commit.
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
  const row = rowStates();
  let adjusted = 0;
  if (to > from) {
    // Poisoned under `from`, deliverable under `to`: kept poisoned (a superseded row must never
    // become deliverable by a configuration change).
    const result = await sql`
      update ${sql.raw(n.table)} set attempt_count = ${to}
      where ${row.poisoned(from)} and ${row.attemptsLeft(to)}`.execute(trx);
    adjusted = Number(result.numAffectedRows ?? 0);
  } else if (to < from) {
    // Deliverable under `from`, poisoned under `to`: kept deliverable with one attempt left.
    const result = await sql`
      update ${sql.raw(n.table)} set attempt_count = ${to - 1}
      where ${row.deliverable(from)} and ${row.exhausted(to)}`.execute(trx);
    adjusted = Number(result.numAffectedRows ?? 0);
  }
  if (recorded !== to) await sql.raw(maxAttemptsCommentDdl(spec, to)).execute(trx);
  return { from, to, adjusted };
}
