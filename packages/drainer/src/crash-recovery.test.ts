import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutboxTable, defineOutbox, enqueueMany } from '@outbox/outbox';
import { startEmbeddedPostgres, useTestDatabase } from '@outbox/test-stack';
import { Kysely as KyselyClass, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { payload, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink } from './index.js';

// A drainer process or the Postgres server dies: the intents in flight are delivered later, at no attempt's cost.
const t = useTestDatabase();

describe('crashes', () => {
  test('a drainer process SIGKILLed mid-batch: its rows return and are delivered later', async () => {
    const spec = defineOutbox({ table: 'crash.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const ids = await t.db.transaction().execute((trx) =>
      enqueueMany(
        trx,
        spec,
        ['vpc:1', 'vpc:1', 'vpc:2'].map((partitionKey) => ({ partitionKey, payload: payload(1) })),
      ),
    );
    // One process (node with tsx's loader), so SIGKILL hits the process that holds the connection.
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', resolve(import.meta.dirname, 'testing/kill-me-drainer.ts'), t.url, spec.table],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    for (let i = 0; i < 200 && !out.includes('claimed'); i += 1) await sleep(50);
    expect(out).toContain(`claimed ${ids.join(',')}`);

    // While the child holds the locks, nobody else can take those rows.
    const blocked = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink: blocked, logger: quiet }).drainOnce();
    expect(blocked.delivered).toEqual([]);

    child.kill('SIGKILL');
    await once(child, 'exit');
    // Postgres notices the dead connection and rolls its transaction back: the locks go with it.
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet });
    for (let i = 0; i < 100 && sink.delivered.length < 3; i += 1) {
      await drainer.drainOnce();
      if (sink.delivered.length < 3) await sleep(50);
    }
    expect(sink.delivered.map((d) => d.id)).toEqual(ids);
    const attempts = await sql<{ attempt_count: number }>`select attempt_count from crash.outbox order by id`.execute(
      t.db,
    );
    expect(attempts.rows.map((r) => r.attempt_count)).toEqual([0, 0, 0]); // the crash cost no attempt
  }, 60_000);

  test('Postgres crashes and comes back: passes fail meanwhile, then the timer delivers and LISTEN reconnects', async () => {
    const server = await startEmbeddedPostgres();
    try {
      const pool = new pg.Pool({ connectionString: server.url, max: 3 });
      pool.on('error', () => undefined);
      pool.on('connect', (client) => client.on('error', () => undefined));
      const db = new KyselyClass({ dialect: new PostgresDialect({ pool }) });
      const spec = defineOutbox({ table: 'restart.outbox', partitionColumn: 'resource_id' });
      await createOutboxTable(db, spec);
      await sql`checkpoint`.execute(db); // the test server runs with fsync off
      const sink = createRecordingSink();
      const drainer = createDrainer({
        db,
        spec,
        sink,
        intervalMs: 200,
        listen: { connectionString: server.url },
        logger: quiet,
      });
      await drainer.start();
      await server.crash();
      await sleep(1_500);
      await server.restart();
      await db.transaction().execute((trx) => enqueueMany(trx, spec, [{ partitionKey: 'vpc:x', payload: payload(1) }]));
      await waitUntil('delivery after the restart', () => sink.delivered.length === 1, 10_000);
      const admin = new pg.Client({ connectionString: server.url });
      await admin.connect();
      await waitUntil(
        'LISTEN after the restart',
        async () =>
          Number(
            (await admin.query(`select count(*) as n from pg_stat_activity where query = 'listen "${spec.channel}"'`))
              .rows[0].n,
          ) === 1,
        10_000,
      );
      await admin.end();
      await drainer.stop();
      await db.destroy();
    } finally {
      await server.stop();
    }
  }, 60_000);
});
