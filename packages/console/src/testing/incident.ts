// A scripted incident on the real stack, for the console's tests: deliveries through the real
// drainer and OpenFGA sink, an outage that poisons rows, a register superseded by its delivered
// deregister, a delivered object and a refused relation whose names carry `<script>`, and a tuple written straight
// to OpenFGA out of band. Test-only.
import { createDrainer, type Sink } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import {
  createOutboxTable,
  defineOutbox,
  enqueue,
  type AnyKysely,
  type IntentPayload,
  type OutboxSpec,
} from '@outbox/outbox';
import { freePort, openFgaClientConfig, type TestStore } from '@outbox/test-stack';
import { createThingsTable, thingsOwner } from '@outbox/test-stack/things-owner';
import { quietLogger } from '../pages.js';
import type { OutboxOwner } from '@outbox/reconciler';
import { sql } from 'kysely';

export const THINGS = 'console_things';
export const SCRIPT = '<script>alert("xss")</script>';

const tuples = (id: string, project: string) => [
  { user: `project:${project}`, relation: 'project', object: `vpc:${id}` },
  { user: 'user:alice', relation: 'owner', object: `vpc:${id}` },
];
const register = (id: string): IntentPayload => ({ writes: tuples(id, 'p1') });
const deregister = (id: string): IntentPayload => ({ deletes: tuples(id, 'p1') });

/** The owner of the things table: each thing expects its project and owner tuples. */
export const incidentOwner = (): OutboxOwner => thingsOwner(THINGS, (thing) => tuples(thing.id, thing.project_id));

/** The ids of the incident's rows. */
export interface Incident {
  readonly spec: OutboxSpec;
  /** vpc:web's register, delivered before the outage. */
  readonly delivered: string;
  /** vpc:db's register, poisoned by the outage, no successor: a redrive revives it. */
  readonly poisoned: string;
  /** vpc:old's register, poisoned by the outage, then its deregister delivered: superseded. */
  readonly superseded: string;
  readonly supersededBy: string;
  /** A write of the relation `owner<script>…` on vpc:x, refused by OpenFGA for good (after `vpc:<script>…` was delivered). */
  readonly refused: string;
}

async function drainOnce(db: AnyKysely, spec: OutboxSpec, sink: Sink): Promise<void> {
  const drainer = createDrainer({ db, spec, sink, logger: quietLogger });
  try {
    await drainer.drainOnce();
  } finally {
    await drainer.stop();
  }
}

const put = (db: AnyKysely, spec: OutboxSpec, key: string, payload: IntentPayload) =>
  db.transaction().execute((trx) => enqueue(trx, spec, { partitionKey: key, payload }));

/** Plays the incident into `db` and `fga`; `user:opal` is made the platform's outbox admin. */
export async function scriptedIncident(db: AnyKysely, fga: TestStore): Promise<Incident> {
  // One attempt: the outage's first failure poisons a row (as maxAttempts failures would).
  const spec = defineOutbox({ table: 'console.outbox_vpc', partitionColumn: 'resource_id', maxAttempts: 1 });
  await sql`create schema if not exists console`.execute(db);
  await createOutboxTable(db, spec);
  await createThingsTable(db, THINGS);
  await db
    .insertInto(THINGS)
    .values([
      { id: 'web', project_id: 'p1' },
      { id: 'db', project_id: 'p1' },
    ])
    .execute();
  const healthy = createOpenFgaSink({
    ...openFgaClientConfig(fga.storeId, fga.authorizationModelId),
    storeId: fga.storeId,
  });
  const down = createOpenFgaSink({
    apiUrl: `http://127.0.0.1:${await freePort()}`,
    storeId: fga.storeId,
    timeoutMs: 1_000,
  });

  const delivered = await put(db, spec, 'vpc:web', register('web'));
  await drainOnce(db, spec, healthy);
  // The outage: OpenFGA unreachable, every delivery fails, and with one attempt each row is poisoned.
  const poisoned = await put(db, spec, 'vpc:db', register('db'));
  const superseded = await put(db, spec, 'vpc:old', register('old'));
  await drainOnce(db, spec, down);
  // After it: vpc:old was deregistered meanwhile; its deregister is delivered, superseding the register.
  const supersededBy = await put(db, spec, 'vpc:old', deregister('old'));
  await put(db, spec, 'vpc:x', { writes: [{ user: 'user:alice', relation: 'owner', object: `vpc:${SCRIPT}` }] });
  // No such relation: OpenFGA refuses it for good, and its error quotes the relation.
  const refused = await put(db, spec, 'vpc:x', {
    writes: [{ user: 'user:alice', relation: `owner${SCRIPT}`, object: 'vpc:x' }],
  });
  await drainOnce(db, spec, healthy);
  // Out of band: a tuple written straight to OpenFGA, no ledger row behind it.
  await fga.client.write({
    writes: [
      { user: 'user:mallory', relation: 'owner', object: 'vpc:web' },
      { user: 'user:opal', relation: 'outbox_admin', object: 'platform:default' },
    ],
  });
  return { spec, delivered, poisoned, superseded, supersededBy, refused };
}
