import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { tableNames } from './table-names.js';

type MaxAttempts = number | RawBuilder<number>;

/**
 * The row states of docs/design.md §2 as SQL predicates over the rows of `alias` (or the bare
 * columns, without one). Every query of the outbox packages writes its states with these, so
 * "pending" or "poisoned" cannot mean two things in two places.
 *
 * @example
 * const t = rowStates('t');
 * sql`update ${table} t set attempt_count = 0 where t.id = any(${ids}) and ${t.poisoned(spec.maxAttempts)}`;
 */
export function rowStates(alias?: string) {
  const column = (name: string) => sql.raw(alias ? `${alias}.${name}` : name);
  const pending = sql<boolean>`${column('sent_at')} is null and ${column('retired_at')} is null`;
  const attemptsLeft = (max: MaxAttempts) => sql<boolean>`${column('attempt_count')} < ${max}`;
  const exhausted = (max: MaxAttempts) => sql<boolean>`${column('attempt_count')} >= ${max}`;
  return {
    /** Not delivered and not retired. */
    pending,
    /** Accepted by OpenFGA. */
    delivered: sql<boolean>`${column('sent_at')} is not null`,
    /** Closed by a human with a reason. */
    retired: sql<boolean>`${column('retired_at')} is not null`,
    /** Fewer attempts than `max` (only the attempts half of "deliverable"). */
    attemptsLeft,
    /** `max` attempts or more (only the attempts half of "poisoned"). */
    exhausted,
    /** Pending with attempts left: the drainer delivers it. */
    deliverable: (max: MaxAttempts) => sql<boolean>`${pending} and ${attemptsLeft(max)}`,
    /** Pending with no attempts left: it waits for the reconciler. */
    poisoned: (max: MaxAttempts) => sql<boolean>`${pending} and ${exhausted(max)}`,
  };
}

/**
 * ` and (<supersededCoverageSql>) is not false`, or nothing without a fragment: the coverage half
 * of "superseded", `s` the delivered successor and `t` the poisoned row. A fragment that is NULL
 * for a pair parks the row: a wrong parking is reported, a wrong revival is silent and for good.
 */
export function supersededCoverageCondition(spec: OutboxSpec): RawBuilder<unknown> {
  return spec.supersededCoverageSql ? sql.raw(` and (${spec.supersededCoverageSql}) is not false`) : sql``;
}

/**
 * `s` is a delivered row after `t` in `t`'s partition that covers it: what makes a poisoned `t`
 * superseded (docs/design.md §6). `after` is how "after" is written; the reconciler picks the form
 * its indexes serve.
 *
 * @example
 * sql`exists (select 1 from ${table} s where ${coveringSuccessor(spec)})`
 */
export function coveringSuccessor(spec: OutboxSpec, after: RawBuilder<unknown> = sql`s.id > t.id`): RawBuilder<boolean> {
  const key = sql.raw(tableNames(spec).partition);
  return sql<boolean>`s.${key} = t.${key} and ${after} and ${rowStates('s').delivered}${supersededCoverageCondition(spec)}`;
}
