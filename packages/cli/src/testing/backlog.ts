// A scripted backlog: one outbox table with a row in every state, written through the real
// writer and the drainer's own outcome updates, so the head invariant holds. Test-only.
import {
  createOutboxTable,
  defineOutbox,
  enqueue,
  type IntentPayload,
  type OutboxSpec,
  type AnyKysely,
} from '@outbox/outbox';
import { promoteHeads, tableNames } from '@outbox/outbox/protocol';
import { createReconciler } from '@outbox/reconciler';
import { sql } from 'kysely';
import { silentLogger } from '../silent-logger.js';

type Db = AnyKysely;

let tables = 0;

/** A fresh register-shaped outbox table `cli.outbox_<n>` (maxAttempts 3) in the file's database. */
export async function createBacklogTable(db: Db): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({
    table: `cli.outbox_${process.pid}_${tables}`,
    partitionColumn: 'resource_id',
    maxAttempts: 3,
  });
  await createOutboxTable(db, spec);
  return spec;
}

/** The tuples a register service writes for `vpc:<id>` (valid in the project's model). */
export const register = (id: string): IntentPayload => ({
  writes: [
    { user: 'project:p1', relation: 'project', object: `vpc:${id}` },
    { user: 'user:alice', relation: 'owner', object: `vpc:${id}` },
  ],
});
export const deregister = (id: string): IntentPayload => ({ deletes: register(id).writes });

export function enqueueIntent(db: Db, spec: OutboxSpec, key: string, payload: IntentPayload): Promise<string> {
  return db.transaction().execute((trx) => enqueue(trx, spec, { partitionKey: key, payload }));
}

/** The drainer's outcome update for one row, then its settle's promotion of the next head. */
async function outcome(db: Db, spec: OutboxSpec, id: string, set: ReturnType<typeof sql>): Promise<void> {
  const names = tableNames(spec);
  await db.transaction().execute(async (trx) => {
    const row = await sql<{
      key: string;
    }>`update ${sql.raw(names.table)} set ${set}, is_head = false where id = ${id} returning ${sql.raw(names.partition)} as key`.execute(
      trx,
    );
    await promoteHeads(
      trx,
      spec,
      row.rows.map((r) => r.key),
    );
  });
}

export const deliver = (db: Db, spec: OutboxSpec, id: string) => outcome(db, spec, id, sql`sent_at = now()`);
/** Poisoned as the drainer poisons: its transient attempts ran out. */
export const poison = (db: Db, spec: OutboxSpec, id: string, error: string) =>
  outcome(
    db,
    spec,
    id,
    sql`attempt_count = ${spec.maxAttempts}, last_error = ${error}, next_attempt_at = now(), poison_cause = 'exhausted'`,
  );
/** Poisoned as the drainer poisons a permanent outcome: refused for good, with the sink's code. */
export const refuse = (db: Db, spec: OutboxSpec, id: string, error: string, code: string) =>
  outcome(
    db,
    spec,
    id,
    sql`attempt_count = ${spec.maxAttempts}, last_error = ${error}, next_attempt_at = now(), poison_cause = 'refused', poison_code = ${code}`,
  );

/** The ids of the scripted backlog, by what each row is. */
export interface Backlog {
  readonly spec: OutboxSpec;
  /** `vpc:a` register, delivered. */
  readonly delivered: string;
  /** `vpc:b` register, poisoned, then its deregister delivered: superseded. */
  readonly superseded: string;
  readonly supersededBy: string;
  /** `vpc:c` register, poisoned, no successor: revivable. */
  readonly poisoned: string;
  /** `vpc:d` register, one transient failure, due in an hour. */
  readonly backingOff: string;
  /** `vpc:e` register, fresh. */
  readonly deliverable: string;
  /** `vpc:f` register, superseded by its delivered deregister, then retired. */
  readonly retired: string;
  /** `vpc:g` register, refused by OpenFGA for good (`validation_error`): waits for a model fix. */
  readonly refused: string;
  /** `vpc:h` register, poisoned (exhausted), no successor, then discarded. */
  readonly discarded: string;
}

/** The refused row's error, as the OpenFGA sink words a 400. */
export const REFUSED_ERROR = "OpenFGA 400 validation_error: relation 'vpc#owner' not found";

/** The long error of the poisoned row: the table cuts it, --json has it whole. */
export const LONG_ERROR = `OpenFGA unreachable: connect ECONNREFUSED 127.0.0.1:8080 ${'x'.repeat(120)} end`;

/**
 * Writes the backlog, in id order: a delivered (a), superseded (b, its deregister delivered),
 * poisoned (c), backing-off (d), deliverable (e), retired (f), refused (g) and discarded (h) row.
 */
export async function scriptedBacklog(db: Db): Promise<Backlog> {
  const spec = await createBacklogTable(db);
  const names = tableNames(spec);
  const delivered = await enqueueIntent(db, spec, 'vpc:a', register('a'));
  await deliver(db, spec, delivered);
  const superseded = await enqueueIntent(db, spec, 'vpc:b', register('b'));
  await poison(db, spec, superseded, 'OpenFGA unreachable: connect ECONNREFUSED');
  const supersededBy = await enqueueIntent(db, spec, 'vpc:b', deregister('b'));
  await deliver(db, spec, supersededBy);
  const poisoned = await enqueueIntent(db, spec, 'vpc:c', register('c'));
  await poison(db, spec, poisoned, LONG_ERROR);
  const backingOff = await enqueueIntent(db, spec, 'vpc:d', register('d'));
  await sql`update ${sql.raw(names.table)} set attempt_count = 1, last_error = 'OpenFGA 503: busy', next_attempt_at = now() + interval '1 hour' where id = ${backingOff}`.execute(
    db,
  );
  const deliverable = await enqueueIntent(db, spec, 'vpc:e', register('e'));
  const retired = await enqueueIntent(db, spec, 'vpc:f', register('f'));
  await poison(db, spec, retired, 'OpenFGA unreachable');
  await deliver(db, spec, await enqueueIntent(db, spec, 'vpc:f', deregister('f')));
  const reconciler = createReconciler({ db, spec, logger: silentLogger });
  await reconciler.retire([retired], 'deregistered during the outage');
  const refused = await enqueueIntent(db, spec, 'vpc:g', register('g'));
  await refuse(db, spec, refused, REFUSED_ERROR, 'validation_error');
  const discarded = await enqueueIntent(db, spec, 'vpc:h', register('h'));
  await poison(db, spec, discarded, 'OpenFGA unreachable');
  await reconciler.discardPoisoned({ ids: [discarded], reason: 'project deleted; the grant is not wanted' });
  return { spec, delivered, superseded, supersededBy, poisoned, backingOff, deliverable, retired, refused, discarded };
}
