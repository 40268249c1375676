import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueMany } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { Kysely as KyselyClass, PostgresDialect, sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, freshOutbox, payload, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink, FlushTimeoutError, type Sink } from './index.js';

// The drainer shares the service's pool: it never holds it for long, nor queues on it, nor deadlocks it.
const t = useTestDatabase();

describe('a small pool shared with the service', () => {
  test('a long pass hands its connection back now and then: on a one-connection pool, other queries get in before the pass ends', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 5_000 }, (_, i) => `vpc:${i % 50}`),
    );
    const db = t.kysely({ max: 1 });
    const sink = createRecordingSink();
    let passDone = false;
    const pass = createDrainer({ db, spec, sink, batchSize: 10, logger: quiet })
      .drainOnce()
      .finally(() => (passDone = true));
    await sleep(50);
    // A query of the service on the same pool, while the pass has hundreds of batches to go.
    const other = await sql<{
      n: number;
    }>`select count(*)::int as n from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} where sent_at is null`.execute(
      db,
    );
    expect(passDone).toBe(false);
    expect(other.rows[0]!.n).toBeGreaterThan(0);
    expect((await pass).delivered).toBe(5_000);
    await db.destroy();
  });

  test('honours timeoutMs when the pool is busy: a pool of one held by a slow delivery', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:slow']);
    const db = t.kysely({ max: 1 });
    const sink: Sink = {
      deliver: async (intents) => {
        await sleep(3_000);
        return intents.map(() => ({ kind: 'delivered' as const }));
      },
    };
    const drainer = createDrainer({ db, spec, sink, logger: quiet });
    const pass = drainer.drainOnce(); // holds the pool's only connection for 3 s
    await sleep(200);
    await enqueueRows(t.db, spec, ['vpc:b']);
    const started = Date.now();
    const error = await drainer.flush({ partitionKey: 'vpc:b', timeoutMs: 300 }).catch((e: unknown) => e);
    const took = Date.now() - started;
    expect(error).toBeInstanceOf(FlushTimeoutError);
    expect(took).toBeLessThan(1_000);
    await pass;
    await drainer.stop();
  });

  test('flush called by mistake inside the caller’s open transaction on a pool of one rejects at timeoutMs instead of deadlocking the service', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:d']);
    const db = t.kysely({ max: 1 });
    const drainer = createDrainer({ db, spec, sink: createRecordingSink(), logger: quiet });
    const started = Date.now();
    const outcome = await Promise.race([
      db
        .transaction()
        .execute(async () => {
          // The transaction holds the pool's only connection; flush needs one for its first query.
          await drainer.flush({ partitionKey: 'vpc:d', timeoutMs: 500 });
        })
        .then(
          () => 'resolved',
          (e: unknown) => e,
        ),
      sleep(5_000).then(() => 'deadlocked'),
    ]);
    expect(outcome).toBeInstanceOf(FlushTimeoutError);
    expect(Date.now() - started).toBeLessThan(1_500);
    await drainer.stop();
  });

  test('a pool exhausted by the service while commits notify: the drainer queues one connection request at most, and delivers all once the pool frees', async () => {
    const spec = await freshOutbox(t.db);
    const pool = t.pool({ max: 2 });
    const db = new KyselyClass({ dialect: new PostgresDialect({ pool }) });
    const sink = createRecordingSink();
    const drainer = createDrainer({
      db,
      spec,
      sink,
      logger: quiet,
      intervalMs: 50,
      listen: { connectionString: t.url },
    });
    await drainer.start();
    // The service holds both connections for a second (from when both run: a pass of the timer may hold one a moment).
    const hogs = Promise.all([sql`select pg_sleep(1)`.execute(db), sql`select pg_sleep(1)`.execute(db)]);
    await waitUntil('both connections held by the service', async () => {
      const sleeping = await sql<{
        n: number;
      }>`select count(*)::int as n from pg_stat_activity where query = 'select pg_sleep(1)' and state = 'active'`.execute(
        t.db,
      );
      return sleeping.rows[0]?.n === 2;
    });
    let maxWaiting = 0;
    const writes = (async () => {
      for (let i = 0; i < 300; i += 1) {
        await t.db
          .transaction()
          .execute((trx) => enqueueMany(trx, spec, [{ partitionKey: `vpc:${i % 10}`, payload: payload(i) }]));
        maxWaiting = Math.max(maxWaiting, pool.waitingCount);
      }
    })();
    await Promise.all([hogs, writes]);
    expect(maxWaiting).toBeLessThanOrEqual(1);
    await waitUntil('all 300 delivered', () => sink.delivered.length === 300, 10_000);
    await drainer.stop();
  }, 30_000);
});
