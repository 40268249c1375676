// A service's life in a child process: start (timer + LISTEN), flush, stop, end the pool. Node must
// then exit on its own: the drainer leaves no timer, socket or listener behind.
import { createDrainer } from '../create-drainer.js';
import { createRecordingSink } from '../recording-sink.js';
import { defineOutbox, enqueue } from '@outbox/outbox';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';

const [url, table] = process.argv.slice(2) as [string, string];
const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }) });
const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
const drainer = createDrainer({
  db,
  spec,
  sink: createRecordingSink(),
  intervalMs: 50,
  listen: { connectionString: url },
});
await drainer.start();
await db.transaction().execute((trx) =>
  enqueue(trx, spec, {
    partitionKey: 'vpc:1',
    payload: { writes: [{ user: 'user:a', relation: 'owner', object: 'vpc:1' }] },
  }),
);
await drainer.flush({ partitionKey: 'vpc:1', timeoutMs: 5_000 });
// A flush that times out, and one that stop() ends: their timers must go with them.
await drainer.flush({ partitionKey: 'vpc:none', timeoutMs: 1 }).catch(() => undefined);
await drainer.stop();
await db.destroy();
process.stdout.write(`stopped ${Date.now()}\n`);
