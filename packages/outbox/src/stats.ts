import { sql, type Kysely } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { tableNames } from './table-names.js';

/** What an outbox holds, by DESIGN §2's vocabulary. */
export interface OutboxStats {
  /** Not delivered and not retired. */
  readonly pending: number;
  /** Pending with attempts left: the drainer will deliver these. */
  readonly deliverable: number;
  /** Pending with no attempts left: waiting for the reconciler (or a human). */
  readonly poisoned: number;
  /** Poisoned with a delivered successor that covers it: must be retired, never revived. */
  readonly superseded: number;
  /** Closed by a human with a reason; kept as evidence. */
  readonly retired: number;
  /** Seconds since the oldest pending row was created; null when nothing is pending. */
  readonly oldestPendingAgeSeconds: number | null;
}

/**
 * Counts an outbox by state in one round trip. Cheap on a large table: pending, deliverable and
 * poisoned read the partial pending index, retired its own partial index; delivered rows, however
 * many, are not read — except to decide whether a poisoned row is superseded: with the optional
 * `(partition, id)` btree that is one probe per poisoned row, without it a walk of the rows after
 * it (short for recent poisoned rows; create the btree for outboxes that poison routinely).
 *
 * @example
 * const { deliverable, poisoned, oldestPendingAgeSeconds } = await outboxStats(db, vpcOutbox);
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function outboxStats(db: Kysely<any>, spec: OutboxSpec): Promise<OutboxStats> {
  const result = await outboxStatsQuery(spec).execute(db);
  const row = result.rows[0] ?? {};
  const count = (key: string) => Number(row[key] ?? 0);
  return {
    pending: count('pending'),
    deliverable: count('deliverable'),
    poisoned: count('poisoned'),
    superseded: count('superseded'),
    retired: count('retired'),
    oldestPendingAgeSeconds: row.oldest_pending_age_seconds === null ? null : Number(row.oldest_pending_age_seconds),
  };
}

/** The statement behind {@link outboxStats} (exported for EXPLAIN in tests and docs). */
export function outboxStatsQuery(spec: OutboxSpec) {
  const n = tableNames(spec);
  const t = sql.raw(n.table);
  const p = sql.raw(n.partition);
  const max = sql.lit(spec.maxAttempts);
  const coverage = spec.supersededCoverageSql ? sql.raw(`and (${spec.supersededCoverageSql})`) : sql``;
  return sql<Record<string, string | number | null>>`
    with pending as materialized (
      select id, ${p} as key, attempt_count, created_at from ${t}
      where sent_at is null and retired_at is null
    )
    select
      (select count(*) from pending) as pending,
      (select count(*) from pending where attempt_count < ${max}) as deliverable,
      (select count(*) from pending where attempt_count >= ${max}) as poisoned,
      (select count(*) from pending x join ${t} t on t.id = x.id
        where x.attempt_count >= ${max}
          and exists (select 1 from ${t} s where s.${p} = t.${p} and s.id > t.id and s.sent_at is not null ${coverage})
      ) as superseded,
      (select count(*) from ${t} where retired_at is not null) as retired,
      (select extract(epoch from now() - min(created_at)) from pending) as oldest_pending_age_seconds`;
}
