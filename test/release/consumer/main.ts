// A consumer of the published @outbox packages: the release test copies this folder into a project
// outside the workspace, installs the packages from the rehearsal registry, typechecks it (node16
// and bundler resolution), compiles it and runs it against the test stack. It uses only what the
// packages' READMEs show, and prints what happened as one `RESULT {json}` line for the test to check.
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { createDrainer } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { createOutboxTable, defineOutbox, enqueue, REGISTER_OUTBOX_PARTITION, type TupleKey } from '@outbox/outbox';
import { createReconciler } from '@outbox/reconciler';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

const token = process.env.OPENFGA_API_TOKEN;
const fga = {
  apiUrl: env('OPENFGA_API_URL'),
  storeId: env('OPENFGA_STORE_ID'),
  authorizationModelId: env('OPENFGA_MODEL_ID'),
  ...(token ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token } } } : {}),
};
const db = new Kysely<unknown>({
  dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: env('DATABASE_URL') }) }),
});
const schema = env('OUTBOX_SCHEMA');
// One attempt: the outage below poisons its intent at once, so the reconciler has something to revive.
const spec = defineOutbox({
  table: `${schema}.fga_outbox`,
  partitionColumn: REGISTER_OUTBOX_PARTITION,
  maxAttempts: 1,
});
const client = new OpenFgaClient(fga);

async function grant(tuple: TupleKey): Promise<void> {
  await db
    .transaction()
    .execute((trx) => enqueue(trx, spec, { partitionKey: tuple.object, payload: { writes: [tuple] } }));
}

async function stored(tuple: TupleKey): Promise<string[]> {
  const { tuples } = await client.read({ user: tuple.user, relation: tuple.relation, object: tuple.object });
  return tuples.map(({ key }) => `${key.user} ${key.relation} ${key.object}`);
}

try {
  await createOutboxTable(db, spec);
  const drainer = createDrainer({ db, spec, sink: createOpenFgaSink(fga) });
  const cutOff = createDrainer({
    db,
    spec,
    sink: createOpenFgaSink({ ...fga, apiUrl: env('UNREACHABLE_OPENFGA_URL') }),
  });
  const reconciler = createReconciler({ db, spec });

  const first: TupleKey = { user: 'user:alice', relation: 'owner', object: `vpc:${schema}-1` };
  await grant(first);
  const delivered = await drainer.drainOnce();

  const second: TupleKey = { user: 'user:alice', relation: 'owner', object: `vpc:${schema}-2` };
  await grant(second);
  const outage = await cutOff.drainOnce();
  const redrive = await reconciler.redrivePoisoned();
  const redelivered = await drainer.drainOnce();

  const result = {
    delivered: delivered.delivered,
    poisonedInOutage: outage.poisoned,
    revived: redrive.revived.map((row) => row.partitionKey),
    redelivered: redelivered.delivered,
    tuples: [...(await stored(first)), ...(await stored(second))],
  };
  console.log(`RESULT ${JSON.stringify(result)}`);
} finally {
  await db.destroy();
}
