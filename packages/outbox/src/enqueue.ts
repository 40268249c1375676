import { sql, type Transaction } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { ENQUEUE_FUNCTION_STEP } from './schema/enqueue-function.js';
import { OutboxConfigError, OutboxTableError, PayloadError } from './errors.js';
import { validatePartitionKey, validatePayload, type IntentPayload } from './payload.js';
import { SQLSTATE, sqlState } from './protocol/sqlstate.js';
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

function missingEnqueueFunction(spec: OutboxSpec): OutboxTableError {
  return new OutboxTableError(spec.table, [
    `function ${spec.table}_enqueue (this release's enqueue, which failed for want of it and aborted the transaction; ` +
      `created by createOutboxTable or createDrainFunctions, or by the step ${ENQUEUE_FUNCTION_STEP} of outboxMigrations)`,
  ]);
}

function notReadCommitted(isolation: string): OutboxConfigError {
  return new OutboxConfigError(
    'trx',
    `enqueue needs a READ COMMITTED transaction, and this one is ${isolation.toUpperCase()}: under it, enqueue ` +
      "would decide the partition's head from a snapshot older than its lock, and strand or reorder the partition. " +
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
export async function enqueueMany<DB>(
  trx: Transaction<DB>,
  spec: OutboxSpec,
  intents: readonly EnqueueInput[],
): Promise<string[]> {
  requireTransaction(trx);
  if (!Array.isArray(intents)) throw new PayloadError('intents', 'expected an array of { partitionKey, payload }');
  if (intents.length > MAX_INTENTS_PER_ENQUEUE) {
    throw new PayloadError(
      'intents',
      `has ${intents.length} intents; enqueue at most ${MAX_INTENTS_PER_ENQUEUE} per call`,
    );
  }
  return insertIntents(trx, spec, intents, (i) => `intents[${i}].`);
}

/** Validates, locks and inserts; `at(i)` prefixes the PayloadError path of intent `i`. */
async function insertIntents(
  trx: AnyKysely,
  spec: OutboxSpec,
  intents: readonly EnqueueInput[],
  at: (index: number) => string,
): Promise<string[]> {
  if (intents.length === 0) return [];
  // Every index, holes included (map skips a hole: its key would go to the INSERT as NULL).
  const all = Array.from({ length: intents.length }, (_, i) => intents[i]);
  const keys = all.map((intent, i) => validatePartitionKey(intent?.partitionKey, `${at(i)}partitionKey`));
  const payloads = all.map((intent, i) => JSON.stringify(validatePayload(intent?.payload, `${at(i)}payload`)));
  const names = tableNames(spec);
  // One round trip: the function locks, then probes each key's head in a statement of its own (docs/outbox-sql.md, "Enqueue").
  const result = await sql<{ isolation: string; ids: string[] | null }>`
    select current_setting('transaction_isolation') as isolation,
           ${sql.raw(names.enqueueFunction)}(${keys}::text[], ${payloads}::jsonb[], ${spec.maxAttempts}::integer) as ids`
    .execute(trx)
    .catch((error: unknown) => {
      throw sqlState(error) === SQLSTATE.UNDEFINED_FUNCTION ? missingEnqueueFunction(spec) : error;
    });
  const row = result.rows[0];
  if (!row?.ids) throw notReadCommitted(row?.isolation ?? '');
  return row.ids.map(String);
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
