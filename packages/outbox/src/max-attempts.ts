import { sql, type RawBuilder } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError, OutboxTableError } from './errors.js';
import { integerInRange } from './integer-in-range.js';
import { rowStates } from './protocol/row-states.js';
import { tableNames } from './table-names.js';

// The table records its maxAttempts in the comment on attempt_count (docs/outbox-sql.md).
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

/** SQL for the table's recorded `maxAttempts`, NULL when it records none: a parameterless scalar subquery, read once per statement. */
export function recordedMaxAttemptsSql(spec: OutboxSpec): RawBuilder<number | null> {
  return sql.raw<number | null>(recordedMaxAttemptsText(spec));
}

/** SQL for the `maxAttempts` rows are counted with: the table's, else the spec's. */
export function countedMaxAttemptsSql(spec: OutboxSpec): RawBuilder<number> {
  return sql<number>`coalesce(${recordedMaxAttemptsSql(spec)}, ${sql.lit(spec.maxAttempts)})`;
}

/** The `maxAttempts` the table records, or undefined when it records none (an earlier release's table). */
export async function recordedMaxAttempts(db: AnyKysely, spec: OutboxSpec): Promise<number | undefined> {
  const result = await sql<{ recorded: number | null }>`select ${recordedMaxAttemptsSql(spec)} as recorded`.execute(db);
  const recorded = result.rows[0]?.recorded;
  return recorded === null || recorded === undefined ? undefined : Number(recorded);
}

/** The error of a process that outlived a `setMaxAttempts`: counting with another value it would strand or reorder partitions. */
export function maxAttemptsChangedError(spec: OutboxSpec, recorded: number, who: string): OutboxConfigError {
  return new OutboxConfigError(
    'maxAttempts',
    `${spec.table} now records maxAttempts ${recorded} (setMaxAttempts ran), this ${who} counts with ${spec.maxAttempts}: ` +
      'restart it with the new spec; it changes nothing until then',
  );
}

/** Throws {@link maxAttemptsChangedError} on a changed `maxAttempts`; run it after the transaction locked its rows. */
export async function assertRecordedMaxAttempts(trx: AnyKysely, spec: OutboxSpec, who: string): Promise<void> {
  const recorded = await recordedMaxAttempts(trx, spec);
  if (recorded !== undefined && recorded !== spec.maxAttempts) throw maxAttemptsChangedError(spec, recorded, who);
}

/** Options of {@link setMaxAttempts}. */
export interface SetMaxAttemptsOptions {
  /** The value the rows were counted against. Default the recorded one; needed only for a table that records none. */
  readonly from?: number;
}

/** What {@link setMaxAttempts} did. */
export interface SetMaxAttemptsResult {
  readonly from: number;
  readonly to: number;
  /** Pending rows whose `attempt_count` was moved so that none changed state. */
  readonly adjusted: number;
}

/**
 * Changes the table's `maxAttempts` to the spec's without changing any row's state
 * (docs/outbox-sql.md): the migration before deploying the new spec, with its old drainers and
 * reconcilers stopped. Idempotent; runs in `db` if it is a READ COMMITTED transaction.
 * @example
 * export const up = (db: AnyKysely) => setMaxAttempts(db, vpcOutbox); // vpcOutbox now says maxAttempts: 20
 */
export async function setMaxAttempts(
  db: AnyKysely,
  spec: OutboxSpec,
  options: SetMaxAttemptsOptions = {},
): Promise<SetMaxAttemptsResult> {
  if (options.from !== undefined) integerInRange('from', options.from, { min: 1 });
  if (db.isTransaction) return changeMaxAttempts(db, spec, options);
  return db
    .transaction()
    .setIsolationLevel('read committed')
    .execute((trx) => changeMaxAttempts(trx, spec, options));
}

async function changeMaxAttempts(
  trx: AnyKysely,
  spec: OutboxSpec,
  options: SetMaxAttemptsOptions,
): Promise<SetMaxAttemptsResult> {
  const names = tableNames(spec);
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  const found = await sql<{ oid: number | null; isolation: string }>`
    select to_regclass(${relation})::oid as oid, current_setting('transaction_isolation') as isolation`.execute(trx);
  const { oid, isolation } = found.rows[0] ?? { oid: null, isolation: '' };
  if (isolation !== 'read committed') {
    throw new OutboxConfigError(
      'db',
      `setMaxAttempts needs a READ COMMITTED transaction (this one is ${isolation.toUpperCase()}): ` +
        "run it outside a transaction, or in one started with setIsolationLevel('read committed')",
    );
  }
  if (oid === null || oid === undefined)
    throw new OutboxTableError(spec.table, [`the table ${spec.table} itself (it does not exist)`]);

  await sql.raw(`lock table ${names.table} in exclusive mode`).execute(trx);

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
        "its drainers have been running with> } — the spec's own value when you only want to record it",
    );
  }
  const to = spec.maxAttempts;
  const row = rowStates();
  let adjusted = 0;
  if (to > from) {
    // Poisoned under `from`, deliverable under `to`: kept poisoned.
    const result = await sql`
      update ${sql.raw(names.table)} set attempt_count = ${to}
      where ${row.poisoned(from)} and ${row.attemptsLeft(to)}`.execute(trx);
    adjusted = Number(result.numAffectedRows ?? 0);
  } else if (to < from) {
    // Deliverable under `from`, poisoned under `to`: kept deliverable with one attempt left.
    const result = await sql`
      update ${sql.raw(names.table)} set attempt_count = ${to - 1}
      where ${row.deliverable(from)} and ${row.exhausted(to)}`.execute(trx);
    adjusted = Number(result.numAffectedRows ?? 0);
  }
  if (recorded !== to) await sql.raw(maxAttemptsCommentDdl(spec, to)).execute(trx);
  return { from, to, adjusted };
}
