import { sql } from 'kysely';

/**
 * The planner settings under which a look-up of a partition's rows can only walk the
 * partition-head index in its order: with no statistics, or a partial index vacuumed while
 * nothing was pending, the pending index `(id)` looks empty and the planner takes it, filtering
 * (and sorting) every pending row for each key (docs/outbox-sql.md, "Looking up a partition's rows").
 */
const INDEX_PLAN_SETTINGS = ['enable_sort', 'enable_seqscan', 'jit'] as const;

/** Turns {@link INDEX_PLAN_SETTINGS} off for the rest of the current transaction (`SET LOCAL`). */
export function planByIndex() {
  return sql`select ${sql.join(INDEX_PLAN_SETTINGS.map((name, i) => sql`set_config(${name}, 'off', true) as ${sql.ref(`s${i}`)}`))}`;
}
