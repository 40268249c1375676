import { sql } from 'kysely';
import { OutboxConfigError, type AnyKysely, type OutboxActionTrace, type OutboxSpec } from '@outbox/outbox';
import { planByIndex, rowStates, tableNames } from '@outbox/outbox/protocol';
import { checkedRecord } from './action-record.js';
import type { Logger } from './console-logger.js';

const DAY_MS = 86_400_000;
/** A century: well inside what an interval carries. */
const MAX_RETENTION_MS = 36_500 * DAY_MS;

/** What {@link compactOutbox} takes. */
export interface CompactOptions {
  readonly db: AnyKysely;
  readonly spec: OutboxSpec;
  /** How long a delivered row is kept. Default 30 days: "was it written, and when?" for the last month; rows a decision reads stay whatever their age. */
  readonly retentionMs?: number;
  /** How long a retired or discarded row is kept after it was closed. Default: `retentionMs`. */
  readonly closedRetentionMs?: number;
  /** Rows looked at per transaction. Default 1000 (at most 10000): a batch takes milliseconds. */
  readonly batchSize?: number;
  /** Count what would be deleted, delete nothing. Default false. */
  readonly dryRun?: boolean;
  /** Told what a run deleted. Default: silent. */
  readonly logger?: Logger;
  /** Stops the run between two batches (what was deleted stays deleted). */
  readonly signal?: AbortSignal;
  /**
   * A `traceOutboxAction` of `compact`: each batch that deletes rows adds its counts to the run's
   * row of the actions log in the batch's own transaction, so a run stopped half way (Ctrl-C, an
   * error) is recorded as far as it went. Default none; ignored by a dry run.
   */
  readonly record?: OutboxActionTrace;
}

/** What one compaction run did (a dry run: would do). */
export interface CompactionResult {
  /** `delivered + closed`: delivered rows, and retired or discarded ones. */
  readonly deleted: number;
  readonly delivered: number;
  readonly closed: number;
  /** Rows looked at. */
  readonly scanned: number;
  readonly batches: number;
  /** Another compaction of this table held its lock: this one stopped there. */
  readonly skipped: boolean;
  readonly dryRun: boolean;
}

function milliseconds(field: string, value: number | undefined, fallback: number): number {
  const result = value ?? fallback;
  if (!Number.isInteger(result) || result < 0 || result > MAX_RETENTION_MS) {
    throw new OutboxConfigError(
      field,
      `expected whole milliseconds from 0 to ${MAX_RETENTION_MS} (a century), got ${String(value)}`,
    );
  }
  return result;
}

const ago = (ms: number) => sql`now() - ${ms}::float8 * interval '1 millisecond'`;

interface BatchRow {
  last_id: string | null;
  rows: number;
  young: boolean;
  granted: boolean;
  delivered: number;
  closed: number;
}

/** What one batch is told. */
export interface BatchOptions {
  readonly batchSize: number;
  readonly retentionMs: number;
  readonly closedRetentionMs: number;
  readonly dryRun: boolean;
  /** The table has a `verify_after` column: rows it marks stay. */
  readonly verifyAfter: boolean;
}

/**
 * One batch, under the table's compaction try-lock (docs/ledger.md, "What compaction keeps"): of
 * the next rows by id, a delivered one older than the retention, before its partition's last
 * delivered row and its first pending one; a closed one older than its own retention. `young`: the
 * batch reached rows created within the retention, past which nothing is old enough.
 */
export function compactBatch(spec: OutboxSpec, after: string, options: BatchOptions) {
  const names = tableNames(spec);
  const table = sql.raw(names.table);
  const key = sql.raw(names.partition);
  const range = (alias: string) =>
    sql.raw(
      `(${alias}.${names.partition}, ${alias}.id) >= (k.key, -9223372036854775808) and (${alias}.${names.partition}, ${alias}.id) <= (k.key, 9223372036854775807)`,
    );
  const marked = options.verifyAfter ? sql` and t.verify_after is null` : sql``;
  const doomed = sql`
    select b.id, b.sent_at is not null as delivered from batch b left join bounds d on d.key = b.key
    where (b.sent_at < ${ago(options.retentionMs)} and b.id < d.last_delivered and b.id < coalesce(d.first_pending, 9223372036854775807))
       or b.retired_at < ${ago(options.closedRetentionMs)}`;
  // Re-checked on the row's latest version, should an update race the batch. A row another
  // transaction holds stays for the next run: a drainer's claim keeps the lock it took on a head
  // that was delivered under it, and compaction waits for nobody.
  const unlocked = sql`
    select t.id, d.delivered from ${table} t join doomed d on t.id = d.id
    where (${rowStates('t').delivered} or ${rowStates('t').retired})${marked} for update of t skip locked`;
  const gone = options.dryRun
    ? sql`select delivered from doomed`
    : sql`delete from ${table} t using (${unlocked}) d where t.id = d.id returning d.delivered`;
  return sql<BatchRow>`
    with granted as materialized (
      select pg_try_advisory_xact_lock(hashtextextended(${`outbox-compaction:${spec.table}`}, 0)) as granted
    ), batch as materialized (
      select t.id, t.${key} as key, t.created_at, t.sent_at, t.retired_at from ${table} t
      where (select granted from granted) and t.id > ${after}::bigint${marked} order by t.id limit ${options.batchSize}
    ), keys as materialized (
      select distinct key from batch where sent_at < ${ago(options.retentionMs)}
    ), bounds as materialized (
      select k.key,
        (select x.id from ${table} x where ${range('x')} and ${rowStates('x').delivered} order by x.${key} desc, x.id desc limit 1) as last_delivered,
        (select p.id from ${table} p where ${range('p')} and ${rowStates('p').pending} order by p.${key}, p.id limit 1) as first_pending
      from keys k
    ), doomed as materialized (${doomed}),
    gone as (${gone})
    select (select max(id) from batch)::text as last_id, (select count(*) from batch)::int as rows,
      coalesce((select max(created_at) from batch) >= ${ago(Math.min(options.retentionMs, options.closedRetentionMs))}, false) as young,
      (select granted from granted) as granted,
      (select count(*) filter (where delivered) from gone)::int as delivered,
      (select count(*) filter (where not delivered) from gone)::int as closed`;
}

function columnPresent(spec: OutboxSpec, column: string) {
  return sql<{ present: boolean }>`
    select exists (select 1 from pg_attribute where attrelid = to_regclass(${`"${spec.schema}"."${spec.tableName}"`}) and attname = ${column} and not attisdropped) as present`;
}

/**
 * Deletes old delivered, retired and discarded rows, never one a decision still reads (docs/ledger.md):
 * in small batches by id, each its own transaction, taking no lock a drainer, an enqueue or a redrive waits for.
 *
 * @example
 * const result = await compactOutbox({ db, spec: vpcOutbox, retentionMs: 30 * 86_400_000 });
 * console.log(`${result.deleted} rows deleted in ${result.batches} batches`);
 */
export async function compactOutbox(options: CompactOptions): Promise<CompactionResult> {
  if (options === null || typeof options !== 'object' || !options.db || !options.spec)
    throw new OutboxConfigError('options', 'expected { db, spec }');
  const { db, spec } = options;
  const retentionMs = milliseconds('retentionMs', options.retentionMs, 30 * DAY_MS);
  const closedRetentionMs = milliseconds('closedRetentionMs', options.closedRetentionMs, retentionMs);
  const batchSize = options.batchSize ?? 1_000;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000)
    throw new OutboxConfigError('batchSize', `expected an integer from 1 to 10000, got ${String(options.batchSize)}`);
  const dryRun = options.dryRun === true;
  const record = dryRun ? undefined : checkedRecord(spec, options.record, 'compact');
  const verifyAfter = (await columnPresent(spec, 'verify_after').execute(db)).rows[0]?.present === true;

  const totals = { deleted: 0, delivered: 0, closed: 0, scanned: 0, batches: 0, skipped: false, dryRun };
  let after = '0';
  while (!options.signal?.aborted) {
    const statement = compactBatch(spec, after, { batchSize, retentionMs, closedRetentionMs, dryRun, verifyAfter });
    const row = (
      await db
        .transaction()
        .setIsolationLevel('read committed')
        .execute(async (trx) => {
          // Every read here has an index in its order: never a scan or a sort of the table.
          await planByIndex().execute(trx);
          const result = await statement.execute(trx);
          const done = result.rows[0];
          if (record && done && done.delivered + done.closed > 0) {
            const counts = { deleted: done.delivered + done.closed, delivered: done.delivered, closed: done.closed };
            await record.record(trx, { counts });
          }
          return result;
        })
    ).rows[0];
    if (!row?.granted) {
      totals.skipped = true;
      break;
    }
    totals.batches += 1;
    totals.scanned += row.rows;
    totals.delivered += row.delivered;
    totals.closed += row.closed;
    if (row.last_id === null || row.rows < batchSize || row.young) break;
    after = row.last_id;
  }
  totals.deleted = totals.delivered + totals.closed;
  if (totals.deleted > 0) {
    options.logger?.info(
      `${dryRun ? 'compaction (dry run) would delete' : 'compaction deleted'} ${totals.deleted} row(s)`,
      { table: spec.table, ...totals },
    );
  }
  return totals;
}
