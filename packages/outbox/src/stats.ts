import { sql } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { countedMaxAttemptsSql } from './max-attempts.js';
import { coveringSuccessor, rowStates } from './protocol/row-states.js';
import { tableNames } from './table-names.js';

/** What an outbox holds, by the states of docs/design.md §2. */
export interface OutboxStats {
  /** Not delivered and not retired. */
  readonly pending: number;
  /** Pending with attempts left: the drainer will deliver these. */
  readonly deliverable: number;
  /** Pending with no attempts left: waiting for the reconciler (or a human). */
  readonly poisoned: number;
  /**
   * The poisoned rows by cause: `refused` for good by OpenFGA (revived only after a model change or
   * on request), `exhausted` by transient failures — rows poisoned before the cause was recorded count here.
   */
  readonly poisonedByCause: { readonly exhausted: number; readonly refused: number };
  /** Poisoned with a delivered successor that covers it: must be retired, never revived. */
  readonly superseded: number;
  /** Superseded rows closed by a human with a reason; kept as evidence. */
  readonly retired: number;
  /** Poisoned rows a human closed without their tuples ever being written (an under-grant); kept as evidence. */
  readonly discarded: number;
  /** Seconds since the oldest pending row was created; null when nothing is pending. */
  readonly oldestPendingAgeSeconds: number | null;
}

/**
 * Counts an outbox by state in one round trip, as the drainers and the reconciler count; cheap on
 * a large table (docs/outbox-sql.md, "outboxStats").
 * @example
 * const { deliverable, poisoned, oldestPendingAgeSeconds } = await outboxStats(db, vpcOutbox);
 */
export async function outboxStats(db: AnyKysely, spec: OutboxSpec): Promise<OutboxStats> {
  const result = await outboxStatsQuery(spec).execute(db);
  const row = result.rows[0] ?? {};
  const count = (key: string) => Number(row[key] ?? 0);
  return {
    pending: count('pending'),
    deliverable: count('deliverable'),
    poisoned: count('poisoned'),
    poisonedByCause: { exhausted: count('poisoned') - count('refused'), refused: count('refused') },
    superseded: count('superseded'),
    retired: count('retired'),
    discarded: count('discarded'),
    oldestPendingAgeSeconds: row.oldest_pending_age_seconds === null ? null : Number(row.oldest_pending_age_seconds),
  };
}

/**
 * The statement behind {@link outboxStats}, for EXPLAIN.
 */
export function outboxStatsQuery(spec: OutboxSpec) {
  const names = tableNames(spec);
  const t = sql.raw(names.table);
  const p = sql.raw(names.partition);
  const max = countedMaxAttemptsSql(spec);
  const row = rowStates();
  return sql<Record<string, string | number | null>>`
    with pending as materialized (
      select id, ${p} as key, attempt_count, created_at, poison_cause from ${t}
      where ${row.pending}
    ), poisoned as materialized (
      select id, key, poison_cause from pending where ${row.exhausted(max)}
    ), successors as materialized (
      -- Read once for all poisoned rows, and not at all when none is.
      select s.* from ${t} s
      where exists (select 1 from poisoned)
        and s.id > (select min(id) from poisoned)
        and s.${p} in (select key from poisoned)
        and ${rowStates('s').delivered}
    ), closed as (
      select count(*) filter (where closed_as is distinct from 'discarded') as retired, count(*) filter (where closed_as = 'discarded') as discarded
      from ${t} where ${row.retired}
    )
    select
      (select count(*) from pending) as pending,
      (select count(*) from pending where ${row.attemptsLeft(max)}) as deliverable,
      (select count(*) from poisoned) as poisoned,
      (select count(*) from poisoned where poison_cause = 'refused') as refused,
      (select count(*) from poisoned x join ${t} t on t.id = x.id
        where exists (select 1 from successors s where ${coveringSuccessor(spec)})
      ) as superseded,
      (select retired from closed) as retired,
      (select discarded from closed) as discarded,
      (select extract(epoch from now() - min(created_at)) from pending) as oldest_pending_age_seconds`;
}
