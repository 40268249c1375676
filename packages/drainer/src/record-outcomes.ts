import { sql, type Kysely } from 'kysely';
import { compareIds, promoteHeads, settleStatement, tableNames, type OutboxSpec } from '@outbox/outbox';
import type { BatchOutcomes } from './deliver.js';
import type { Intent } from './sink.js';

/** What the outcome updates did, for events and pass counts. */
export interface RecordedOutcomes {
  readonly delivered: readonly Intent[];
  readonly retried: ReadonlyArray<{ intent: Intent; error: string }>;
  readonly poisoned: ReadonlyArray<{ intent: Intent; error: string }>;
  readonly released: readonly Intent[];
  /**
   * Partitions whose head moved (delivered or poisoned), and how many of them have a next head;
   * undefined when the settle went out with `sendWith` and its answer was not read.
   */
  readonly settled: { readonly partitions: number; readonly withNextHead: number } | undefined;
}

/**
 * Writes a batch's outcomes, one set-based statement per outcome class (DESIGN §5); the last one
 * also gives every partition whose head was delivered or poisoned its next head:
 * - delivered: `sent_at = now()`;
 * - transient: `attempt_count + 1`, `last_error`, `next_attempt_at = now() + delay` — poisoned when
 *   that was the last attempt;
 * - permanent: `attempt_count = maxAttempts` (poisoned at once), `last_error`.
 * Released rows are not touched.
 */
export async function recordOutcomes(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Kysely<any>,
  spec: OutboxSpec,
  outcomes: BatchOutcomes,
  delayMs: (intent: Intent) => number,
  options: {
    /**
     * Statements to send in the same message after the settle call, when every intent was
     * delivered (the drainer's `COMMIT; BEGIN`): one round trip instead of two, and the settle's
     * answer is not read. Ignored when some intent failed.
     */
    readonly sendWith?: string;
  } = {},
): Promise<RecordedOutcomes> {
  const table = sql.raw(tableNames(spec).table);
  const moved = new Set<string>();

  for (const intent of outcomes.delivered) moved.add(intent.partitionKey);

  const retried: Array<{ intent: Intent; error: string }> = [];
  const poisoned: Array<{ intent: Intent; error: string }> = [...outcomes.permanent];
  if (outcomes.transient.length > 0) {
    const rows = outcomes.transient;
    const result = await sql<{ id: string; exhausted: boolean }>`
      update ${table} t set
        attempt_count = t.attempt_count + 1,
        last_error = x.error,
        next_attempt_at = now() + x.delay_ms * interval '1 millisecond',
        is_head = t.is_head and t.attempt_count + 1 < ${spec.maxAttempts}
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
      update ${table} t set attempt_count = greatest(t.attempt_count, ${spec.maxAttempts}), last_error = x.error, is_head = false
      from unnest(${rows.map((r) => r.intent.id)}::bigint[], ${rows.map((r) => r.error)}::text[]) as x(id, error)
      where t.id = x.id`.execute(trx);
  }
  for (const { intent } of poisoned) moved.add(intent.partitionKey);
  // Partitions whose head moved (delivered or poisoned): the earliest deliverable row takes over —
  // a released run row, a row that just failed transiently, or one inserted meanwhile.
  // The next head of a partition follows the last row this batch delivered or poisoned in it: a run
  // is consecutive from the head, and nothing before the head was deliverable.
  const after = new Map<string, string>();
  for (const intent of [...outcomes.delivered, ...poisoned.map((p) => p.intent)]) {
    const seen = after.get(intent.partitionKey);
    if (seen === undefined || compareIds(intent.id, seen) > 0) after.set(intent.partitionKey, intent.id);
  }
  // Failures are written first so that the settle call, which also marks the delivered rows, sees them.
  const settle = { markDelivered: outcomes.delivered.map((i) => i.id), after };
  const allDelivered = outcomes.transient.length === 0 && poisoned.length === 0 && outcomes.released.length === 0;
  const statement = options.sendWith !== undefined && allDelivered ? settleStatement(spec, [...moved], settle) : undefined;
  if (statement !== undefined) {
    await sql.raw(`${statement}; ${options.sendWith}`).execute(trx);
    return { delivered: outcomes.delivered, retried, poisoned, released: outcomes.released, settled: undefined };
  }
  const promoted = await promoteHeads(trx, spec, [...moved], settle);
  const settled = { partitions: promoted.length, withNextHead: promoted.filter((p) => p.headId !== null).length };
  return { delivered: outcomes.delivered, retried, poisoned, released: outcomes.released, settled };
}
