import { sql, type Transaction } from 'kysely';
import { tableNames, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import type { Intent } from './sink.js';

interface ClaimedRow {
  id: string;
  key: string;
  payload: IntentPayload;
  attempt_count: number;
}

/** A claimed batch: every intent row-locked by this transaction, heads first then their runs. */
export interface ClaimedBatch {
  /** Sorted by id: each partition's intents are in delivery order. */
  readonly intents: readonly Intent[];
  /** How many of them are partition heads. */
  readonly heads: number;
}

const toIntent = (row: ClaimedRow): Intent => ({
  id: String(row.id),
  partitionKey: row.key,
  payload: row.payload,
  attemptCount: row.attempt_count,
});

/**
 * Claims up to `batchSize` intents (DESIGN §5):
 *
 * 1. Heads: the flagged earliest deliverable row of each partition, due, ordered by
 *    `(next_attempt_at, id)` on the partial claim index, `FOR UPDATE SKIP LOCKED`. Only heads are
 *    read, so the cost follows the batch, not the backlog or the delivered rows; a predecessor that
 *    is backing off or locked by another drainer is itself the head, so its successors wait.
 * 2. Runs: with batch room left, the deliverable rows that follow each claimed head in its
 *    partition (a fair share each), locked `SKIP LOCKED` and cut at the first row that is not due or
 *    not lockable — so a run is always consecutive. This keeps a hot partition from being capped at
 *    one row per batch.
 */
export async function claimBatch(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Transaction<any>,
  spec: OutboxSpec,
  batchSize: number,
): Promise<ClaimedBatch> {
  const n = tableNames(spec);
  const table = sql.raw(n.table);
  const key = sql.raw(n.partition);
  // Only `is_head` and due in the WHERE clause: with more predicates the planner may AND in the
  // pending index and sort every head, where this reads the claim index in order and stops at the
  // batch. A head is pending and deliverable by invariant; `deliverable` double-checks it.
  const heads = await sql<ClaimedRow & { deliverable: boolean }>`
    select id, ${key} as key, payload, attempt_count,
           sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts} as deliverable
    from ${table}
    where is_head and next_attempt_at <= now()
    order by next_attempt_at, id
    limit ${batchSize}
    for update skip locked`.execute(trx);
  const claimed = heads.rows.filter((row) => row.deliverable).map(toIntent);
  const room = batchSize - claimed.length;
  if (room <= 0 || claimed.length === 0) return { intents: claimed, heads: claimed.length };

  const share = Math.ceil(room / claimed.length);
  const followers = await sql<ClaimedRow & { head_id: string; due: boolean }>`
    select h.id as head_id, r.id, r.key, r.payload, r.attempt_count, r.due
    from unnest(${claimed.map((c) => c.id)}::bigint[], ${claimed.map((c) => c.partitionKey)}::text[]) as h(id, key)
    cross join lateral (
      select x.id, x.${key} as key, x.payload, x.attempt_count, x.next_attempt_at <= now() as due
      from ${table} x
      where x.${key} = h.key and x.id > h.id
        and x.sent_at is null and x.retired_at is null and x.attempt_count < ${spec.maxAttempts}
      -- (key, id), not id: the same order here (the key is fixed), but it names the partial
      -- partition-head index, where "order by id" lets the planner walk the primary key across
      -- every partition's rows after the head.
      order by x.${key}, x.id
      limit ${share}
    ) r
    order by h.id, r.id`.execute(trx);

  // Each head's run: its followers in id order while they are due, within the batch room.
  const runs = new Map<string, ClaimedRow[]>();
  const cut = new Set<string>();
  const wanted: ClaimedRow[] = [];
  for (const row of followers.rows) {
    const head = String(row.head_id);
    if (cut.has(head)) continue;
    if (!row.due || wanted.length >= room) {
      cut.add(head);
      continue;
    }
    const run = runs.get(head) ?? [];
    run.push(row);
    runs.set(head, run);
    wanted.push(row);
  }
  if (wanted.length === 0) return { intents: claimed, heads: claimed.length };
  const locked = await sql<{ id: string }>`
    select id from ${table} where id = any(${wanted.map((w) => String(w.id))}::bigint[])
    order by id for update skip locked`.execute(trx);
  const got = new Set(locked.rows.map((r) => String(r.id)));
  const intents = [...claimed];
  for (const run of runs.values()) {
    for (const row of run) {
      if (!got.has(String(row.id))) break; // a gap: the rest of the run is not consecutive
      intents.push(toIntent(row));
    }
  }
  intents.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
  return { intents, heads: claimed.length };
}
