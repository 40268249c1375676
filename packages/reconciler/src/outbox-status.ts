import { outboxStatsQuery, tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';
import type { AnyKysely, OutboxSpec, OutboxStats } from '@outbox/outbox';
import { backingOffCountSql } from './row-states.js';

/** What {@link outboxStatus} reads: an outbox by name, its spec, its database (and that database's URL, masked, to print). */
export interface StatusTarget {
  readonly name: string;
  readonly spec: OutboxSpec;
  readonly db: AnyKysely;
  readonly database: string;
}

/** One outbox's counts, as `outbox status` prints them and the console shows them: `outboxStats`' and a few more. */
export interface OutboxStatus extends OutboxStats {
  readonly name: string;
  readonly table: string;
  /** The database URL, password masked. */
  readonly database: string;
  readonly backingOff: number;
  /** ISO timestamp. */
  readonly lastDeliveryAt: string | null;
}

/**
 * How many of the newest delivered rows (by id) "last delivery" looks at: a `max(sent_at)` over the
 * whole table would read every delivered row, and rows are delivered nearly in id order (a revived
 * old row delivered later is the exception).
 */
const LAST_DELIVERY_WINDOW = 1_000;

/**
 * One outbox's counts as `outbox status` prints them, in one statement (one snapshot):
 * `outboxStats`' counts (docs/design.md §2), plus the rows backing off and the last delivery. A new
 * column is a field here, in the schema and in STATUS_COLUMNS.
 *
 * @example
 * const row = await outboxStatus({ name: 'vpc', spec: vpcOutbox, db, database: maskUrl(url) });
 * process.stdout.write(statusTable([row], new Date()));
 */
export async function outboxStatus(target: StatusTarget): Promise<OutboxStatus> {
  const names = tableNames(target.spec);
  const result = await sql<Record<string, string | number | Date | null>>`
    select stats.*,
      ${backingOffCountSql(target.spec)} as backing_off,
      (select max(sent_at) from (select sent_at from ${sql.raw(names.table)} where sent_at is not null order by id desc limit ${sql.lit(LAST_DELIVERY_WINDOW)}) recent) as last_sent_at
    from (${outboxStatsQuery(target.spec)}) stats`.execute(target.db);
  const row = result.rows[0] ?? {};
  const count = (key: string) => Number(row[key] ?? 0);
  const age = row.oldest_pending_age_seconds;
  const last = row.last_sent_at;
  return {
    name: target.name,
    table: target.spec.table,
    database: target.database,
    pending: count('pending'),
    deliverable: count('deliverable'),
    backingOff: count('backing_off'),
    poisoned: count('poisoned'),
    // As outboxStats counts them: rows poisoned before causes were recorded are exhausted.
    poisonedByCause: { exhausted: count('poisoned') - count('refused'), refused: count('refused') },
    superseded: count('superseded'),
    retired: count('retired'),
    discarded: count('discarded'),
    oldestPendingAgeSeconds: age === null || age === undefined ? null : Math.round(Number(age) * 1_000) / 1_000,
    lastDeliveryAt: last instanceof Date ? last.toISOString() : null,
  };
}
