import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from '../define-outbox.js';
import { tableNames } from '../table-names.js';

type MaxAttempts = number | RawBuilder<number>;

/**
 * The row states of docs/design.md §2 as SQL predicates over `alias`'s columns (bare without one),
 * for every query of the outbox packages: a state means one thing everywhere.
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
    pending,
    delivered: sql<boolean>`${column('sent_at')} is not null`,
    retired: sql<boolean>`${column('retired_at')} is not null`,
    /** The attempts half of "deliverable". */
    attemptsLeft,
    /** The attempts half of "poisoned". */
    exhausted,
    deliverable: (max: MaxAttempts) => sql<boolean>`${pending} and ${attemptsLeft(max)}`,
    poisoned: (max: MaxAttempts) => sql<boolean>`${pending} and ${exhausted(max)}`,
  };
}

/**
 * ` and (<supersededCoverageSql>) is not false`, or nothing: the coverage half of "superseded" over
 * `s` and `t`. NULL parks the row (docs/outbox-sql.md, "Row states").
 */
export function supersededCoverageCondition(spec: OutboxSpec): RawBuilder<unknown> {
  return spec.supersededCoverageSql ? sql.raw(` and (${spec.supersededCoverageSql}) is not false`) : sql``;
}

/**
 * `s` is a delivered row after `t` in `t`'s partition that covers it: what makes a poisoned `t`
 * superseded (docs/design.md §6). `after` writes "after" in the form the indexes serve.
 */
export function coveringSuccessor(
  spec: OutboxSpec,
  after: RawBuilder<unknown> = sql`s.id > t.id`,
): RawBuilder<boolean> {
  const key = sql.raw(tableNames(spec).partition);
  return sql<boolean>`s.${key} = t.${key} and ${after} and ${rowStates('s').delivered}${supersededCoverageCondition(spec)}`;
}
