import type { ColumnType, Generated } from 'kysely';
import type { IntentPayload } from './payload.js';

/** Columns every outbox table shares (DESIGN §4). Ids are bigints, read as strings. */
interface OutboxColumns {
  id: ColumnType<string, never, never>;
  payload: ColumnType<IntentPayload, IntentPayload | string, IntentPayload | string>;
  created_at: ColumnType<Date, never, never>;
  next_attempt_at: Generated<Date>;
  attempt_count: Generated<number>;
  last_error: string | null;
  sent_at: Date | null;
  retired_at: Date | null;
  retired_reason: string | null;
  /** Drainer bookkeeping: the earliest deliverable row of its partition. Do not write it by hand. */
  is_head: Generated<boolean>;
}

/** Kysely table type of a register-outbox (`<svc>.fga_register_outbox`), keyed on `resource_id`. */
export interface RegisterOutboxTable extends OutboxColumns {
  resource_id: string;
}

/** Kysely table type of the tuple outbox (`iam.fga_outbox`), keyed on `tuple_key`. */
export interface TupleOutboxTable extends OutboxColumns {
  tuple_key: string;
}

/** One outbox row as the drainer and reconciler read it, whatever the partition column is called. */
export interface OutboxRow {
  readonly id: string;
  readonly partitionKey: string;
  readonly payload: IntentPayload;
  readonly attemptCount: number;
  readonly createdAt: Date;
}
