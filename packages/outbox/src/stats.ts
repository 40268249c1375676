import { sql, type Kysely } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { supersededCoverageCondition } from './coverage.js';
import { countedMaxAttemptsSql } from './max-attempts.js';
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
 * many, are not read — except to decide whether a poisoned row is superseded, and only while some
 * row is poisoned: the delivered rows of the poisoned rows' partitions are read once, by the optional
 * `(partition, id)` btree (a probe per partition) or, without it, by one walk of the rows after the
 * oldest poisoned row (the whole table when that row is old; create the btree for outboxes that
 * grow large and poison routinely).
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
  // As the drainers count: a dashboard on an older or newer spec still sees the states they act on.
  const max = countedMaxAttemptsSql(spec);
  // The reconciler's rule, so this count matches what a pass reports.
  const coverage = supersededCoverageCondition(spec);
  return sql<Record<string, string | number | null>>`
    with pending as materialized (
      select id, ${p} as key, attempt_count, created_at from ${t}
      where sent_at is null and retired_at is null
    ), poisoned as materialized (
      select id, key from pending where attempt_count >= ${max}
    ), successors as materialized (
      -- The delivered rows that could supersede a poisoned one: of a poisoned row's partition,
      -- after the oldest poisoned row. Read once for all poisoned rows (not once per poisoned row,
      -- which walked the table behind each of them), and not at all when nothing is poisoned.
      select s.* from ${t} s
      where exists (select 1 from poisoned)
        and s.id > (select min(id) from poisoned)
        and s.${p} in (select key from poisoned)
        and s.sent_at is not null
    )
    select
      (select count(*) from pending) as pending,
      (select count(*) from pending where attempt_count < ${max}) as deliverable,
      (select count(*) from poisoned) as poisoned,
      (select count(*) from poisoned x join ${t} t on t.id = x.id
        where exists (select 1 from successors s where s.${p} = t.${p} and s.id > t.id ${coverage})
      ) as superseded,
      (select count(*) from ${t} where retired_at is not null) as retired,
      (select extract(epoch from now() - min(created_at)) from pending) as oldest_pending_age_seconds`;
}
