import { sql, type Kysely, type Transaction } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError, PayloadError } from './errors.js';
import { compareIds } from './ids.js';
import { lockPartitions } from './partition-lock.js';
import { validatePartitionKey, validatePayload, type IntentPayload } from './payload.js';
import { tableNames } from './table-names.js';

/** One intent to enqueue. */
export interface EnqueueInput {
  /** The partition (ordering) key: the resource id, or the tuple key for the tuple outbox. */
  readonly partitionKey: string;
  readonly payload: IntentPayload;
}

/**
 * At most this many intents per `enqueueMany` call: each distinct key holds an advisory lock until
 * commit, and Postgres' shared lock table has ~6.4k slots by default.
 */
export const MAX_INTENTS_PER_ENQUEUE = 1_000;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function requireTransaction(trx: Kysely<any>): void {
  if (!trx?.isTransaction) {
    throw new OutboxConfigError(
      'trx',
      'enqueue must run inside your own transaction, the one that writes the resource row: ' +
        'db.transaction().execute((trx) => enqueue(trx, spec, intent))',
    );
  }
}

/**
 * Writes several intents into the outbox inside the caller's transaction: they commit or roll back
 * with the caller's own rows. Everything is validated first (a {@link PayloadError} leaves nothing
 * written); then the partitions' advisory locks are taken, sorted, so two transactions for one
 * partition commit in id order; then one INSERT. Returns the new ids (as strings: they are
 * bigints), in input order.
 *
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('vpc.vpcs').values(row).execute();
 *   await enqueueMany(trx, vpcOutbox, [{ partitionKey: `vpc:${row.id}`, payload }]);
 * });
 */
export async function enqueueMany(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Transaction<any>,
  spec: OutboxSpec,
  intents: readonly EnqueueInput[],
): Promise<string[]> {
  requireTransaction(trx);
  if (!Array.isArray(intents)) throw new PayloadError('intents', 'expected an array of { partitionKey, payload }');
  if (intents.length > MAX_INTENTS_PER_ENQUEUE) {
    throw new PayloadError('intents', `has ${intents.length} intents; enqueue at most ${MAX_INTENTS_PER_ENQUEUE} per call`);
  }
  return insertIntents(trx, spec, intents, (i) => `intents[${i}].`);
}

/** Validates, locks and inserts; `at(i)` prefixes the PayloadError path of intent `i`. */
async function insertIntents(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  trx: Transaction<any>,
  spec: OutboxSpec,
  intents: readonly EnqueueInput[],
  at: (index: number) => string,
): Promise<string[]> {
  if (intents.length === 0) return [];
  const keys = intents.map((intent, i) => validatePartitionKey(intent?.partitionKey, `${at(i)}partitionKey`));
  const payloads = intents.map((intent, i) => JSON.stringify(validatePayload(intent.payload, `${at(i)}payload`)));
  const distinct = [...new Set(keys)];
  const n = tableNames(spec);

  await lockPartitions(spec, distinct).execute(trx);
  // A later statement than the lock: its snapshot sees every row committed by the lock's previous holder.
  const live = await sql<{ key: string }>`
    select distinct ${sql.raw(n.partition)} as key from ${sql.raw(n.table)}
    where ${sql.raw(n.partition)} = any(${distinct}::text[])
      and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}`.execute(trx);
  const hasHead = new Set(live.rows.map((r) => r.key));
  const heads = keys.map((key) => {
    if (hasHead.has(key)) return false;
    hasHead.add(key);
    return true;
  });

  const inserted = await sql<{ id: string }>`
    insert into ${sql.raw(n.table)} (${sql.raw(n.partition)}, payload, is_head)
    select k, p::jsonb, h from unnest(${keys}::text[], ${payloads}::text[], ${heads}::boolean[])
      with ordinality as x(k, p, h, ord)
    order by ord
    returning id`.execute(trx);
  return inserted.rows.map((r) => String(r.id)).sort(compareIds);
}

/**
 * Writes one intent into the outbox inside the caller's transaction. See {@link enqueueMany}.
 *
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('vpc.vpcs').values({ id, project_id, name }).execute();
 *   await enqueue(trx, vpcOutbox, {
 *     partitionKey: `vpc:${id}`,
 *     payload: { writes: [{ user: `project:${project_id}`, relation: 'project', object: `vpc:${id}` }] },
 *   });
 * });
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function enqueue(trx: Transaction<any>, spec: OutboxSpec, intent: EnqueueInput): Promise<string> {
  requireTransaction(trx);
  const [id] = await insertIntents(trx, spec, [intent], () => '');
  return id as string;
}
