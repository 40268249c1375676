import { sql } from 'kysely';
import { type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { compareIds, promoteHeads, settleStatement, tableNames } from '@outbox/outbox/protocol';
import type { BatchOutcomes } from './deliver.js';
import { lateWriteStamps } from './late-write-stamps.js';
import type { Intent } from './sink.js';

/** What the outcome updates did, for events and pass counts. */
export interface RecordedOutcomes {
  readonly delivered: readonly Intent[];
  readonly retried: ReadonlyArray<{ intent: Intent; error: string }>;
  readonly poisoned: ReadonlyArray<{ intent: Intent; error: string }>;
  readonly released: readonly Intent[];
  /** Undefined when the settle went out with `sendWith` and its answer was not read. */
  readonly settled: SettledPartitions | undefined;
}

/** Partitions whose head moved (delivered or poisoned), and how many of them have a next head. */
export interface SettledPartitions {
  readonly partitions: number;
  readonly withNextHead: number;
}

export interface RecordOptions {
  readonly delayMs: (intent: Intent) => number;
  /** Sent in the settle's message (and its answer not read) when every intent was delivered. */
  readonly sendWith?: string;
  /** Stamp deliveries at risk of a late write for a check this many ms later. Default: none is stamped. */
  readonly verifyDelayMs?: number;
}

/**
 * Writes a batch's outcomes, one set-based statement per outcome class (docs/design.md §5); the
 * settle call marks the delivered rows and promotes the next heads. Released rows are not touched.
 */
export async function recordOutcomes(
  trx: AnyKysely,
  spec: OutboxSpec,
  outcomes: BatchOutcomes,
  options: RecordOptions,
): Promise<RecordedOutcomes> {
  const { delayMs } = options;
  const table = sql.raw(tableNames(spec).table);
  const moved = new Set<string>();

  for (const intent of outcomes.delivered) moved.add(intent.partitionKey);

  const retried: Array<{ intent: Intent; error: string }> = [];
  const poisoned: Array<{ intent: Intent; error: string }> = [...outcomes.permanent];
  // Each poisoning records its cause (docs/ledger.md): out of transient attempts, or refused with the sink's code.
  if (outcomes.transient.length > 0) {
    const rows = outcomes.transient;
    const result = await sql<{ id: string; exhausted: boolean }>`
      update ${table} t set
        attempt_count = t.attempt_count + 1,
        last_error = x.error,
        next_attempt_at = now() + x.delay_ms * interval '1 millisecond',
        is_head = t.is_head and t.attempt_count + 1 < ${spec.maxAttempts},
        poison_cause = case when t.attempt_count + 1 >= ${spec.maxAttempts} then 'exhausted' end,
        poison_code = null
      from unnest(${rows.map((r) => r.intent.id)}::bigint[], ${rows.map((r) => r.error)}::text[],
                  ${rows.map((r) => delayMs(r.intent))}::float8[]) as x(id, error, delay_ms)
      where t.id = x.id
      returning t.id, t.attempt_count >= ${spec.maxAttempts} as exhausted`.execute(trx);
    const exhausted = new Set(result.rows.filter((r) => r.exhausted).map((r) => String(r.id)));
    for (const row of rows) {
      if (exhausted.has(row.intent.id)) poisoned.push(row);
      else retried.push(row);
    }
  }
  if (outcomes.permanent.length > 0) {
    const rows = outcomes.permanent;
    await sql`
      update ${table} t set attempt_count = greatest(t.attempt_count, ${spec.maxAttempts}), last_error = x.error, is_head = false,
        poison_cause = 'refused', poison_code = x.code
      from unnest(${rows.map((r) => r.intent.id)}::bigint[], ${rows.map((r) => r.error)}::text[], ${rows.map((r) => r.code)}::text[]) as x(id, error, code)
      where t.id = x.id`.execute(trx);
  }
  for (const { intent } of poisoned) moved.add(intent.partitionKey);
  // A next head follows the last row delivered or poisoned in its partition: a run is consecutive from the head.
  const after = new Map<string, string>();
  for (const intent of [...outcomes.delivered, ...poisoned.map((p) => p.intent)]) {
    const seen = after.get(intent.partitionKey);
    if (seen === undefined || compareIds(intent.id, seen) > 0) after.set(intent.partitionKey, intent.id);
  }
  // After the failures' updates: the settle must see them when it picks each next head.
  const settle = {
    markDelivered: outcomes.delivered.map((i) => i.id),
    after,
    ...(options.verifyDelayMs !== undefined
      ? { lateWrites: lateWriteStamps(outcomes.delivered, options.verifyDelayMs) }
      : {}),
  };
  const allDelivered = outcomes.transient.length === 0 && poisoned.length === 0 && outcomes.released.length === 0;
  const statement =
    options.sendWith !== undefined && allDelivered ? settleStatement(spec, [...moved], settle) : undefined;
  if (statement !== undefined) {
    await sql.raw(`${statement}; ${options.sendWith}`).execute(trx);
    return { delivered: outcomes.delivered, retried, poisoned, released: outcomes.released, settled: undefined };
  }
  const promoted = await promoteHeads(trx, spec, [...moved], settle);
  const settled = { partitions: promoted.length, withNextHead: promoted.filter((p) => p.headId !== null).length };
  return { delivered: outcomes.delivered, retried, poisoned, released: outcomes.released, settled };
}
