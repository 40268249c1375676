/** The step of `outboxMigrations` that added a column (without the spec's prefix). */
export type ColumnStep = '0001_outbox_table' | '0003_ledger_life' | '0004_late_write_verification';

/**
 * The outbox table's own columns (docs/design.md §4), every one but the spec's partition column:
 * the type `format_type` reports for each, and the step that added it. The one list of them:
 * `defineOutbox` refuses each as a partition column, `verifyOutboxTable` expects each, the
 * ledger's steps drop theirs. The released DDL spells them out, frozen; columns.test.ts checks that
 * it creates exactly these. A new column is a new step, added here.
 */
export const OUTBOX_COLUMNS = Object.freeze({
  id: { type: 'bigint', step: '0001_outbox_table' },
  payload: { type: 'jsonb', step: '0001_outbox_table' },
  created_at: { type: 'timestamp with time zone', step: '0001_outbox_table' },
  next_attempt_at: { type: 'timestamp with time zone', step: '0001_outbox_table' },
  attempt_count: { type: 'integer', step: '0001_outbox_table' },
  last_error: { type: 'text', step: '0001_outbox_table' },
  sent_at: { type: 'timestamp with time zone', step: '0001_outbox_table' },
  retired_at: { type: 'timestamp with time zone', step: '0001_outbox_table' },
  retired_reason: { type: 'text', step: '0001_outbox_table' },
  is_head: { type: 'boolean', step: '0001_outbox_table' },
  poison_cause: { type: 'text', step: '0003_ledger_life' },
  poison_code: { type: 'text', step: '0003_ledger_life' },
  revival_count: { type: 'integer', step: '0003_ledger_life' },
  revive_after: { type: 'timestamp with time zone', step: '0003_ledger_life' },
  revive_requested: { type: 'boolean', step: '0003_ledger_life' },
  closed_as: { type: 'text', step: '0003_ledger_life' },
  verify_after: { type: 'timestamp with time zone', step: '0004_late_write_verification' },
} as const satisfies Record<string, { readonly type: string; readonly step: ColumnStep }>);

/** The name of one of {@link OUTBOX_COLUMNS}. */
export type OutboxColumnName = keyof typeof OUTBOX_COLUMNS;

/** The names of {@link OUTBOX_COLUMNS}, in the order the steps added them. */
export const OUTBOX_COLUMN_NAMES = Object.freeze(Object.keys(OUTBOX_COLUMNS) as OutboxColumnName[]);

/** The columns `step` added, in its order. */
export function columnsAddedBy(step: ColumnStep): OutboxColumnName[] {
  return OUTBOX_COLUMN_NAMES.filter((name) => OUTBOX_COLUMNS[name].step === step);
}
