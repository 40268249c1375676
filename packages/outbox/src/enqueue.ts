import { sql, type Transaction } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError, PayloadError } from './errors.js';
import { compareIds } from './ids.js';
import { countedMaxAttemptsSql } from './max-attempts.js';
import { INDEX_PLAN_SETTINGS } from './index-plans.js';
import { lockPartitions } from './partition-lock.js';
import { partitionRangeSql } from './partition-range.js';
import { validatePartitionKey, validatePayload, type IntentPayload } from './payload.js';
import { rowStates } from './row-states.js';
import { tableNames } from './table-names.js';

/** One intent to enqueue. */
export interface EnqueueInput {
  /** The ordering key: the resource id, or the tuple key of the tuple outbox. */
  readonly partitionKey: string;
  readonly payload: IntentPayload;
}

/** At most this many intents per call: each key holds an advisory lock until commit (~6.4k slots by default). */
export const MAX_INTENTS_PER_ENQUEUE = 1_000;

function requireTransaction(trx: AnyKysely): void {
  if (!trx?.isTransaction) {
    throw new OutboxConfigError(
      'trx',
      'enqueue must run inside your own transaction, the one that writes the resource row: ' +
        'db.transaction().execute((trx) => enqueue(trx, spec, intent))',
    );
  }
}

const READ_COMMITTED = 'read committed';

/**
 * The partitions' advisory locks, and {@link INDEX_PLAN_SETTINGS} off for the insert's head probe,
 * only under READ COMMITTED; returns the isolation level either way, and the caller's values of
 * those settings (the insert puts them back as it runs, once it is planned).
 */
function lockPartitionsIfReadCommitted(spec: OutboxSpec, keys: readonly string[]) {
  const readCommitted = sql<boolean>`current_setting('transaction_isolation') = ${READ_COMMITTED}`;
  const current = INDEX_PLAN_SETTINGS.map((name) => sql`current_setting(${name})`);
  const off = INDEX_PLAN_SETTINGS.map((name, i) => sql`case when ${readCommitted} then set_config(${name}, 'off', true) end as ${sql.ref(`off_${i}`)}`);
  // The caller's values are read in a CTE scanned before the select list sets the new ones.
  return sql<{ isolation: string; caller: string[] }>`
    with locks as (${lockPartitions(spec, keys, readCommitted)}),
      caller as materialized (select array[${sql.join(current)}] as v)
    select current_setting('transaction_isolation') as isolation, (select count(*) from locks) as locked, caller.v as caller, ${sql.join(off)}
    from caller`;
}

/** A CTE that sets the probe's planner settings back to `caller`'s values when the statement runs (after it was planned). */
function restorePlannerSettings(caller: readonly string[]) {
  const restores = INDEX_PLAN_SETTINGS.map((name, i) => sql`set_config(${name}, ${caller[i] ?? 'on'}, true) as ${sql.ref(`restored_${i}`)}`);
  return sql`restored as materialized (select ${sql.join(restores)})`;
}

function notReadCommitted(isolation: string): OutboxConfigError {
  return new OutboxConfigError(
    'trx',
    `enqueue needs a READ COMMITTED transaction, and this one is ${isolation.toUpperCase()}: under it, enqueue ` +
      'would decide the partition\'s head from a snapshot older than its lock, and strand or reorder the partition. ' +
      "Run the enqueueing transaction at READ COMMITTED: db.transaction().setIsolationLevel('read committed').execute(…)",
  );
}

/**
 * Writes intents inside the caller's transaction, so they commit or roll back with its rows:
 * validated first (a {@link PayloadError} writes nothing), then the partitions' advisory locks (one
 * partition's transactions commit in id order), then one insert. Returns the ids in input order.
 * The transaction must be READ COMMITTED, else an {@link OutboxConfigError}; make it its only
 * enqueue call (two can deadlock).
 * @example
 * await db.transaction().execute((trx) => enqueueMany(trx, vpcOutbox, [{ partitionKey: `vpc:${id}`, payload }]));
 */
export async function enqueueMany<DB>(trx: Transaction<DB>, spec: OutboxSpec, intents: readonly EnqueueInput[]): Promise<string[]> {
  requireTransaction(trx);
  if (!Array.isArray(intents)) throw new PayloadError('intents', 'expected an array of { partitionKey, payload }');
  if (intents.length > MAX_INTENTS_PER_ENQUEUE) {
    throw new PayloadError('intents', `has ${intents.length} intents; enqueue at most ${MAX_INTENTS_PER_ENQUEUE} per call`);
  }
  return insertIntents(trx, spec, intents, (i) => `intents[${i}].`);
}

/** Validates, locks and inserts; `at(i)` prefixes the PayloadError path of intent `i`. */
async function insertIntents(trx: AnyKysely, spec: OutboxSpec, intents: readonly EnqueueInput[], at: (index: number) => string): Promise<string[]> {
  if (intents.length === 0) return [];
  // Every index, holes included (map skips a hole: its key would go to the INSERT as NULL).
  const all = Array.from({ length: intents.length }, (_, i) => intents[i]);
  const keys = all.map((intent, i) => validatePartitionKey(intent?.partitionKey, `${at(i)}partitionKey`));
  const payloads = all.map((intent, i) => JSON.stringify(validatePayload(intent?.payload, `${at(i)}payload`)));
  const distinct = [...new Set(keys)];
  const n = tableNames(spec);

  const lock = await lockPartitionsIfReadCommitted(spec, distinct).execute(trx);
  const isolation = lock.rows[0]?.isolation ?? '';
  if (isolation !== READ_COMMITTED) throw notReadCommitted(isolation);
  const caller = lock.rows[0]?.caller ?? [];
  // The first new row of each key is head unless the key has a deliverable row: one probe per key,
  // in the insert itself, whose snapshot is taken after the lock was granted (docs/outbox-sql.md).
  const seen = new Set<string>();
  const firsts = keys.map((key) => {
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  const table = sql.raw(n.table);
  const inserted = await sql<{ id: string }>`
    with ${restorePlannerSettings(caller)}
    insert into ${table} (${sql.raw(n.partition)}, payload, is_head)
    select u.k, u.p::jsonb, u.first and live.found is null
    from restored, unnest(${keys}::text[], ${payloads}::text[], ${firsts}::boolean[]) with ordinality as u(k, p, first, ord)
    left join lateral (
      select true as found from ${table} x
      where u.first and ${sql.raw(partitionRangeSql('x', n.partition, 'u.k'))}
        and ${rowStates('x').deliverable(countedMaxAttemptsSql(spec))}
      order by x.${sql.raw(n.partition)}, x.id
      limit 1
    ) live on true
    order by u.ord
    returning id`.execute(trx);
  return inserted.rows.map((r) => String(r.id)).sort(compareIds);
}

/**
 * Writes one intent inside the caller's READ COMMITTED transaction; see {@link enqueueMany}.
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('vpc.vpcs').values({ id, project_id, name }).execute();
 *   await enqueue(trx, vpcOutbox, { partitionKey: `vpc:${id}`, payload: { writes: [{ user: `project:${project_id}`, relation: 'project', object: `vpc:${id}` }] } });
 * });
 */
export async function enqueue<DB>(trx: Transaction<DB>, spec: OutboxSpec, intent: EnqueueInput): Promise<string> {
  requireTransaction(trx);
  const [id] = await insertIntents(trx, spec, [intent], () => '');
  return id as string;
}
