import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from '@outbox/outbox';
import {
  partitionLockKey,
  recordedMaxAttemptsSql,
  rowStates,
  tableNames,
  type PoisonCause,
} from '@outbox/outbox/protocol';
import { successorIndexPresent } from './partition-index.js';
import { deliveredSuccessor, type SuccessorCheck } from './successor.js';

// The statements of a pass, in the order it runs them (docs/design.md §6, "No snapshot window").
// `t` is the poisoned row and `s` its delivered successor, as in the spec's coverage fragment.

/** What step 2 says of a poisoned row: revive it, report it superseded, or leave it waiting (refused). */
export type PoisonedClass = 'candidate' | 'superseded' | 'waiting';

export interface PoisonedRow {
  id: string;
  partition_key: string;
  last_error: string | null;
  poison_cause: PoisonCause | null;
  poison_code: string | null;
  revive_after: Date | null;
  revive_requested: boolean;
  class: PoisonedClass;
}

export interface Decision {
  id: string;
  partition_key: string;
  poisoned: boolean;
  superseded: boolean;
  contended: boolean;
}

/** Advisory-lock key of "the reconciler of this table": one pass (or retire, or discard) at a time. */
export function reconcilerLockKey(spec: OutboxSpec): RawBuilder<bigint> {
  return sql<bigint>`hashtextextended(${`outbox-reconciler:${spec.table}`}, 0)`;
}

/**
 * Step 1: the reconciler lock, without waiting (a running pass makes this one redundant); in the same
 * round trip, the table's recorded `maxAttempts` and whether a btree serves the successor check.
 */
export function tryLockReconciler(spec: OutboxSpec) {
  return sql<{ granted: boolean; recorded: number | null; successor_index: boolean }>`
    select pg_try_advisory_xact_lock(${reconcilerLockKey(spec)}) as granted,
      ${recordedMaxAttemptsSql(spec)} as recorded, (${successorIndexPresent(spec)}) as successor_index`;
}

/** Asks to retry every refused row: revived once its spacing has passed, by this pass or a later one. */
export function requestRefusedRevivals(spec: OutboxSpec) {
  return sql<{ id: string }>`
    update ${sql.raw(tableNames(spec).table)} t set revive_requested = true
    where ${rowStates('t').poisoned(spec.maxAttempts)} and t.poison_cause = 'refused' and not t.revive_requested
    returning t.id`;
}

/**
 * Step 2: per class, the first `batchSize` poisoned rows, least recently attempted partitions first,
 * each partition's rows in id order (docs/design.md §6). A refused row is a candidate only when
 * asked for and past its spacing.
 */
export function selectPoisoned(spec: OutboxSpec, batchSize: number, check: SuccessorCheck, refused = false) {
  const names = tableNames(spec);
  const table = sql.raw(names.table);
  const poisoned = rowStates('t').poisoned(spec.maxAttempts);
  return sql<PoisonedRow>`
    with superseded as materialized (
      select t.id from ${table} t where ${poisoned} and ${deliveredSuccessor(spec, check)}
    ), marked as (
      select t.id, t.${sql.raw(names.partition)} as partition_key, t.last_error, t.next_attempt_at, t.poison_cause, t.poison_code, t.revive_after, t.revive_requested,
        case
          when t.id in (select id from superseded) then 'superseded'
          when t.poison_cause is distinct from 'refused' then 'candidate'
          when (t.revive_requested or ${refused}) and (t.revive_after is null or t.revive_after <= now()) then 'candidate'
          else 'waiting'
        end as class
      from ${table} t where ${poisoned}
    ), ranked as (
      select *, row_number() over (partition by class order by since, partition_key, id) as rank
      from (select *, first_value(next_attempt_at) over (partition by class, partition_key order by id) as since from marked) m
    )
    select id, partition_key, last_error, poison_cause, poison_code, revive_after, revive_requested, class from ranked where rank <= ${batchSize} order by id`;
}

/** Steps 3 (waiting) and 5a (`skipLocked`): row-lock every pending row of these partitions, in id order. */
export function lockPendingRows(spec: OutboxSpec, keys: readonly string[], options: { skipLocked?: boolean } = {}) {
  const names = tableNames(spec);
  return sql<{ id: string }>`
    select id from ${sql.raw(names.table)}
    where ${sql.raw(names.partition)} = any(${[...keys]}::text[]) and ${rowStates().pending}
    order by id
    for update${sql.raw(options.skipLocked ? ' skip locked' : '')}`;
}

/** Step 4b, after the waits timed out: each partition's advisory lock, without waiting. */
export function tryLockPartitions(spec: OutboxSpec, keys: readonly string[]) {
  return sql<{ partition_key: string; granted: boolean }>`
    select k as partition_key, pg_try_advisory_xact_lock(${partitionLockKey(spec, sql`k`)}) as granted
    from unnest(${[...keys]}::text[]) as k`;
}

/** Step 5b, after every lock: still poisoned? superseded meanwhile? `contended`: a pending row of its partition is not ours. */
export function decideCandidates(
  spec: OutboxSpec,
  candidates: readonly { id: string; partition_key: string }[],
  lockedIds: readonly string[],
  check: SuccessorCheck,
) {
  const names = tableNames(spec);
  const table = sql.raw(names.table);
  const key = sql.raw(names.partition);
  const ids = sql`${candidates.map((c) => String(c.id))}::bigint[]`;
  const keys = [...new Set(candidates.map((c) => c.partition_key))];
  return sql<Decision>`
    with superseded as materialized (
      select t.id from ${table} t where t.id = any(${ids}) and ${deliveredSuccessor(spec, { ...check, keys })}
    )
    select t.id, t.${key} as partition_key,
      (${rowStates('t').poisoned(spec.maxAttempts)}) as poisoned,
      t.id in (select id from superseded) as superseded,
      exists (
        select 1 from ${table} o
        where o.${key} = t.${key} and ${rowStates('o').pending}
          and o.id <> all(${[...lockedIds]}::bigint[])) as contended
    from ${table} t
    where t.id = any(${ids})
    order by t.id`;
}

/** How far apart the revivals of one refused row are: `baseMs · 2^(revivals so far)`, at most `maxMs`. */
export interface RevivalSpacing {
  readonly baseMs: number;
  readonly maxMs: number;
}

/** Step 6: claimable again; a refused row counts a revival and sets its next spacing. Heads are reset after. */
export function reviveRows(spec: OutboxSpec, ids: readonly string[], spacing: RevivalSpacing) {
  const names = tableNames(spec);
  const refused = sql`poison_cause is not distinct from 'refused'`;
  return sql<{ id: string }>`
    update ${sql.raw(names.table)}
    set attempt_count = 0, last_error = null, next_attempt_at = now(),
      poison_cause = null, poison_code = null, revive_requested = false,
      revival_count = revival_count + (${refused})::int,
      revive_after = case when ${refused}
        then now() + least(${spacing.maxMs}::float8, ${spacing.baseMs}::float8 * power(2, least(revival_count, 60))) * interval '1 millisecond'
        else revive_after end
    where id = any(${[...ids]}::bigint[]) and ${rowStates().poisoned(spec.maxAttempts)}
    returning id`;
}
