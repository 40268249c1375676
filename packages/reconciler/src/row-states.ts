import { type OutboxSpec } from '@outbox/outbox';
import { countedMaxAttemptsSql, coveringSuccessor as covers, rowStates, tableNames } from '@outbox/outbox/protocol';
import { sql, type RawBuilder } from 'kysely';

/**
 * The state a ledger row is shown in (docs/design.md §2; `discarded`: §10): a superseded row is
 * shown superseded, not poisoned. What `outbox list` and the console show.
 */
export type RowState =
  'deliverable' | 'backing-off' | 'poisoned' | 'superseded' | 'delivered' | 'retired' | 'discarded';

/** What `list --state` takes: a row state, or `pending` (every row not delivered and not closed). */
export const STATE_FILTERS = [
  'pending',
  'deliverable',
  'backing-off',
  'poisoned',
  'superseded',
  'delivered',
  'retired',
  'discarded',
] as const;
export type StateFilter = (typeof STATE_FILTERS)[number];

/** The `maxAttempts` rows are counted with, as the drainers and `outboxStats` count (docs/design.md §4). */
export const countedMax = countedMaxAttemptsSql;

/** A delivered successor of `t` in its partition that covers it (docs/design.md §6), as the reconciler decides. */
function coveringSuccessor(spec: OutboxSpec, select: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`(select ${select} from ${sql.raw(tableNames(spec).table)} s where ${covers(spec)})`;
}

/** SQL over `t`, a closed row: discarded (its tuples never written), else retired (`closed_as` NULL on rows closed before it existed). */
const discarded = sql<boolean>`t.closed_as = 'discarded'`;

/** SQL over the row `t`: its most specific state (a superseded row is shown superseded, not poisoned). */
export function rowStateSql(spec: OutboxSpec): RawBuilder<RowState> {
  const t = rowStates('t');
  return sql<RowState>`case
    when ${t.delivered} then 'delivered'
    when ${t.retired} then case when ${discarded} then 'discarded' else 'retired' end
    when ${t.exhausted(countedMax(spec))} then case when exists ${coveringSuccessor(spec, sql`1`)} then 'superseded' else 'poisoned' end
    when t.next_attempt_at > now() then 'backing-off'
    else 'deliverable' end`;
}

/** SQL over `t`: the id of the earliest delivered successor covering it (null when none). */
export function supersededBySql(spec: OutboxSpec): RawBuilder<string | null> {
  return sql<string | null>`${coveringSuccessor(spec, sql`min(s.id)::text`)}`;
}

/**
 * SQL over `t` that is true for rows in `state`, by docs/design.md §2: `poisoned` includes the
 * superseded rows (they are poisoned too), `deliverable` the backing-off ones (they will be tried).
 */
export function stateFilterSql(spec: OutboxSpec, state: StateFilter): RawBuilder<boolean> {
  const t = rowStates('t');
  const max = countedMax(spec);
  switch (state) {
    case 'pending':
      return sql<boolean>`(${t.pending})`;
    case 'deliverable':
      return sql<boolean>`(${t.deliverable(max)})`;
    case 'backing-off':
      return sql<boolean>`(${t.deliverable(max)} and t.next_attempt_at > now())`;
    case 'poisoned':
      return sql<boolean>`(${t.poisoned(max)})`;
    case 'superseded':
      return sql<boolean>`(${t.poisoned(max)} and exists ${coveringSuccessor(spec, sql`1`)})`;
    case 'delivered':
      return sql<boolean>`(${t.delivered})`;
    case 'retired':
      return sql<boolean>`(${t.retired} and t.closed_as is distinct from 'discarded')`;
    case 'discarded':
      return sql<boolean>`(${t.retired} and ${discarded})`;
  }
}

/** The pending rows that are deliverable but not due: backing off after a transient failure. */
export function backingOffCountSql(spec: OutboxSpec): RawBuilder<number> {
  const names = tableNames(spec);
  return sql<number>`(select count(*) from ${sql.raw(names.table)} t where ${stateFilterSql(spec, 'backing-off')})`;
}
