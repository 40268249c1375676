import type { ColumnType, Generated } from 'kysely';
import type { OutboxColumnName } from './columns.js';
import type { IntentPayload } from './payload.js';

/** `T` when it has exactly the columns of columns.ts: a column added there and not here fails to compile. */
type ExactlyTheColumns<
  T extends Record<OutboxColumnName, unknown> & Record<Exclude<keyof T, OutboxColumnName>, never>,
> = T;

/** Columns every outbox table shares (docs/design.md §4). Ids are bigints, read as strings. */
type OutboxColumns = ExactlyTheColumns<{
  id: ColumnType<string, never, never>;
  payload: ColumnType<IntentPayload, IntentPayload | string, IntentPayload | string>;
  created_at: ColumnType<Date, never, never>;
  next_attempt_at: Generated<Date>;
  attempt_count: Generated<number>;
  last_error: string | null;
  sent_at: Date | null;
  retired_at: Date | null;
  retired_reason: string | null;
  /** The drainer's: the earliest deliverable row of its partition. Never write it by hand. */
  is_head: Generated<boolean>;
  /** Why a poisoned row is poisoned (docs/ledger.md); NULL while it is not, or from before it was recorded. */
  poison_cause: 'exhausted' | 'refused' | null;
  /** OpenFGA's code of a refusal, e.g. `validation_error`. */
  poison_code: string | null;
  /** Times the reconciler revived the row. */
  revival_count: Generated<number>;
  /** Before this, a refused row is not revived again. */
  revive_after: Date | null;
  /** A refused row that a model change or an operator asked to retry (once `revive_after` passed). */
  revive_requested: Generated<boolean>;
  /** How a closed row (`retired_at` set) was closed; NULL reads as `retired`. */
  closed_as: 'retired' | 'discarded' | null;
  /** The drainer's: when to check this delivery against a late write (docs/agreement.md). Never write it by hand. */
  verify_after: Date | null;
}>;

/** Kysely table type of a register-outbox, keyed on `resource_id`. */
export interface RegisterOutboxTable extends OutboxColumns {
  resource_id: string;
}

/** Kysely table type of the tuple outbox, keyed on `tuple_key`. */
export interface TupleOutboxTable extends OutboxColumns {
  tuple_key: string;
}
