// A drainer in a child process whose sink never answers: the test SIGKILLs it mid-batch.
import { createDrainer } from '../create-drainer.js';
import { defineOutbox } from '@outbox/outbox';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';

const [url, table] = process.argv.slice(2) as [string, string];
const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }) });
const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
const drainer = createDrainer({
  db,
  spec,
  deliveryTimeoutMs: 600_000,
  sink: {
    deliver: (intents) => {
      process.stdout.write(`claimed ${intents.map((i) => i.id).join(',')}\n`);
      return new Promise(() => undefined); // hangs while holding the row locks
    },
  },
});
void drainer.drainOnce();
