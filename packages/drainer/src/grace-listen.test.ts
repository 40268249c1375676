import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { sql, type Kysely } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, escaped, freshOutbox as fresh } from './testing/fixture.js';
import { createDrainer, createRecordingSink, SinkHaltError, type Sink } from './index.js';

const t = useTestDatabase();
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const freshOutbox = (db: Kysely<any>) => fresh(db, 'grace', {});
const rows = async (spec: { schema: string; tableName: string }) =>
  (await sql<{ sent: boolean; attempt_count: number; last_error: string | null }>`select sent_at is not null as sent, attempt_count, last_error from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} order by id`.execute(t.db)).rows.map((r) => [r.sent, r.attempt_count, r.last_error]);


describe('the grace after the delivery deadline', () => {
  test('a SinkHaltError thrown during the grace releases the batch without counting an attempt', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const sink: Sink = {
      deliver: (_intents, { signal }) => new Promise((_, reject) => signal.addEventListener('abort', () => setTimeout(() => reject(new SinkHaltError('credentials refused')), 50))),
    };
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, deliveryTimeoutMs: 100 });
    const result = await drainer.drainOnce();
    expect(result).toMatchObject({ halted: true, retried: 0 });
    expect(await rows(spec)).toEqual([[false, 0, null], [false, 0, null]]);
  });

  test('an answer during the grace with the wrong number of outcomes fails the batch as transient', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const sink: Sink = {
      deliver: (_intents, { signal }) => new Promise((resolve) => signal.addEventListener('abort', () => resolve([{ kind: 'delivered' }]))),
    };
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, deliveryTimeoutMs: 100, backoff: { baseMs: 60_000 } });
    expect(await drainer.drainOnce()).toMatchObject({ retried: 2, delivered: 0 });
    expect((await rows(spec)).map((r) => [r[0], r[1], String(r[2]).slice(0, 40)])).toEqual([
      [false, 1, 'sink failed: Error: sink returned 1 outc'],
      [false, 1, 'sink failed: Error: sink returned 1 outc'],
    ]);
  });

  test('a sink that rejects after the grace ran out raises no unhandled rejection, and no timer outlives the batch', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    const sink: Sink = { deliver: () => sleep(400).then(() => Promise.reject(new Error('late failure'))) };
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, deliveryTimeoutMs: 100, backoff: { baseMs: 60_000 } });
    const errors = await escaped(async () => {
      expect(await drainer.drainOnce()).toMatchObject({ retried: 1 });
    }, 500);
    expect(errors.map(String)).toEqual([]);
  });
});

describe('LISTEN: stop() racing the connection attempt', () => {
  test('stop() at every moment of start(): no LISTEN connection is left, nothing escapes', async () => {
    const spec = await freshOutbox(t.db);
    const listenCount = async () =>
      Number((await sql<{ n: string }>`select count(*) as n from pg_stat_activity where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid() and application_name = '' and query like ${`listen%${spec.channel}%`}`.execute(t.db)).rows[0]?.n);
    const errors = await escaped(async () => {
      for (let i = 0; i < 30; i += 1) {
        const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet, interval: 3_600_000, listen: { connectionString: t.url } });
        const started = drainer.start().catch(() => undefined);
        await sleep(i % 15); // 0..14 ms: before, during and after the connect and the LISTEN query
        await drainer.stop();
        await started;
      }
      await sleep(300);
    }, 300);
    expect(errors.map(String)).toEqual([]);
    expect(await listenCount()).toBe(0);
  }, 30_000);
});
