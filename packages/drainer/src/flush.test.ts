import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { planByIndex } from '@outbox/outbox/protocol';
import { Kysely as KyselyClass, PostgresDialect, sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, freshOutbox, outboxRows, outboxTable, payload, quiet } from './testing/fixture.js';
import { pendingIntentIdsStatement } from './flush-status.js';
import {
  createDrainer,
  createRecordingSink,
  DrainerStoppedError,
  FlushPoisonedError,
  FlushTimeoutError,
  type Outcome,
} from './index.js';

// flush(): what it waits for, how it ends, and how its waiters share one poller.
const t = useTestDatabase();

/** A Kysely on its own pool that counts the drainer's claims and flush's status queries. */
function countingDb(max = 4) {
  const counts = { claims: 0, status: 0 };
  const db = new KyselyClass({
    dialect: new PostgresDialect({ pool: t.pool({ max }) }),
    log: (event) => {
      if (/_claim/.test(event.query.sql)) counts.claims += 1;
      if (/\bwhere id = any\(/.test(event.query.sql)) counts.status += 1;
    },
  });
  return { db, counts };
}

/**
 * A drainer on a pool of one connection, one intent a batch, whose sink holds the intents of
 * vpc:held until `end()` and gives the others `outcome`: while that batch delivers, it holds the
 * only connection, so no status query can run.
 */
function drainerHeldOnSecondBatch(spec: Awaited<ReturnType<typeof freshOutbox>>, outcome: () => Outcome | undefined) {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const sink = createRecordingSink({
    outcome: async (intent) => (intent.partitionKey === 'vpc:held' ? held.then(() => undefined) : outcome()),
  });
  const { db } = countingDb(1);
  const drainer = createDrainer({
    db,
    spec,
    sink,
    logger: quiet,
    intervalMs: 3_600_000,
    batchSize: 1,
    concurrentBatches: 1,
  });
  const end = async () => {
    release();
    await drainer.stop();
    await db.destroy();
  };
  return { drainer, end };
}

describe('flush', () => {
  test('resolves once the partition’s intents are delivered', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:x', 'vpc:x', 'vpc:y']);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, intervalMs: 3_600_000 });
    await drainer.flush({ partitionKey: 'vpc:x', timeoutMs: 5_000 });
    const state = await outboxRows(t.db, spec);
    expect(state.filter((r) => r.resource_id === 'vpc:x').every((r) => r.sent)).toBe(true);
    await drainer.stop();
  });

  test('rejects with the reason when an intent is poisoned', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:p']);
    const sink = createRecordingSink({
      outcome: () => ({ kind: 'permanent', error: 'validation_error: type "vpcx" not found' }),
    });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet });
    const error = await drainer.flush({ partitionKey: 'vpc:p', timeoutMs: 5_000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlushPoisonedError);
    expect((error as FlushPoisonedError).lastError).toBe('validation_error: type "vpcx" not found');
    await drainer.stop();
  });

  test('times out cleanly when delivery cannot happen in time', async () => {
    const spec = await freshOutbox(t.db);
    const [id] = await enqueueRows(t.db, spec, ['vpc:slow']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } });
    const started = Date.now();
    const error = await drainer.flush({ partitionKey: 'vpc:slow', timeoutMs: 300 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlushTimeoutError);
    expect((error as FlushTimeoutError).pendingIds).toEqual([id]);
    expect(Date.now() - started).toBeLessThan(2_000);
    await drainer.stop();
  });

  test('resolves when the batch that delivered its intents commits, while the next batch holds the only connection (no status query could run)', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:f', 'vpc:held']);
    const run = drainerHeldOnSecondBatch(spec, () => undefined);
    try {
      await run.drainer.flush({ partitionKey: 'vpc:f', timeoutMs: 5_000 });
      expect((await outboxRows(t.db, spec)).map((r) => [r.resource_id, r.sent])).toEqual([
        ['vpc:f', true],
        ['vpc:held', false],
      ]);
    } finally {
      await run.end();
    }
  });

  test('rejects when the batch that poisoned its intent commits, while the next batch holds the only connection', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:bad', 'vpc:held']);
    const run = drainerHeldOnSecondBatch(spec, () => ({
      kind: 'permanent',
      error: 'validation_error: no such relation',
    }));
    try {
      const error = await run.drainer.flush({ partitionKey: 'vpc:bad', timeoutMs: 5_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(FlushPoisonedError);
      expect((error as FlushPoisonedError).lastError).toBe('validation_error: no such relation');
      expect((await outboxRows(t.db, spec)).map((r) => [r.resource_id, r.sent])).toEqual([
        ['vpc:bad', false],
        ['vpc:held', false],
      ]);
    } finally {
      await run.end();
    }
  });

  test('its look-up of the partition walks the partition-head index, even when the partial indexes were vacuumed empty before a backlog came', async () => {
    const spec = await freshOutbox(t.db);
    const table = outboxTable(spec);
    await sql`insert into ${table} (resource_id, payload, sent_at) select 'vpc:' || (g % 2000), '{}', now() from generate_series(1, 20000) g`.execute(
      t.db,
    );
    await sql`vacuum analyze ${table}`.execute(t.db);
    await sql`insert into ${table} (resource_id, payload, is_head) select 'vpc:hot', '{}', g = 1 from generate_series(1, 20000) g`.execute(
      t.db,
    );
    const plan = await t.db.transaction().execute(async (trx) => {
      await planByIndex().execute(trx);
      const explained = await sql<{
        'QUERY PLAN': string;
      }>`explain ${pendingIntentIdsStatement(spec, 'vpc:cold')}`.execute(trx);
      return explained.rows.map((r) => r['QUERY PLAN']).join('\n');
    });
    // Without the settings: an index scan of the pending index filtered on the key, reading all 20,000 pending rows.
    expect(plan).toContain(`Index Scan using ${spec.tableName}_partition_head_idx`);
    expect(plan).not.toContain('pending_idx');
    expect(plan).not.toMatch(/Sort|Seq Scan/);
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: quiet,
      intervalMs: 3_600_000,
    });
    await drainer.flush({ partitionKey: 'vpc:cold', timeoutMs: 1_000 }); // nothing pending for it: at once
    await drainer.stop();
  });

  test('with the ids enqueue returned: waits for those intents only, without looking the partition up', async () => {
    const spec = await freshOutbox(t.db);
    const [, mine] = await enqueueRows(t.db, spec, ['vpc:i', 'vpc:i']);
    let lookUps = 0;
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max: 2 }) }),
      log: (event) => void (/order by x\."resource_id", x\.id$/.test(event.query.sql.trim()) && (lookUps += 1)),
    });
    const drainer = createDrainer({ db, spec, sink: createRecordingSink(), logger: quiet, intervalMs: 3_600_000 });
    await drainer.flush({ partitionKey: 'vpc:i', ids: [mine!], timeoutMs: 5_000 });
    expect(lookUps).toBe(0);
    // Partition order: its earlier intent went first.
    expect((await outboxRows(t.db, spec)).map((r) => r.sent)).toEqual([true, true]);
    for (const ids of [[], ['12x'], [1], 'x', Array.from({ length: 1_001 }, (_, i) => String(i + 1))]) {
      await expect(drainer.flush({ partitionKey: 'vpc:i', ids: ids as string[] })).rejects.toThrow(/flush\.ids/);
    }
    await drainer.stop();
    await db.destroy();
  });

  test('resolves at once when nothing is pending for the partition', async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet });
    await expect(drainer.flush({ partitionKey: 'vpc:none', timeoutMs: 100 })).resolves.toBeUndefined();
  });

  test('waits for an intent that was backing off at the call, and resolves once it is delivered', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:b']);
    let fail = true;
    const sink = createRecordingSink({ outcome: () => (fail ? { kind: 'transient', error: 'down' } : undefined) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 800, maxMs: 800 } });
    await drainer.drainOnce();
    fail = false;
    await drainer.flush({ partitionKey: 'vpc:b', timeoutMs: 5_000 });
    expect((await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count])).toEqual([[true, 1]]);
  });

  test('an intent poisoned before the call does not block: the later one is awaited; one poisoned during the call rejects with its reason', async () => {
    const spec = await freshOutbox(t.db);
    const [p1] = await enqueueRows(t.db, spec, ['vpc:p']);
    const sink = createRecordingSink({
      outcome: (i) => (i.id === p1 ? { kind: 'permanent', error: 'type not found' } : undefined),
    });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet });
    const during = await drainer.flush({ partitionKey: 'vpc:p', timeoutMs: 5_000 }).catch((e: unknown) => e);
    expect(during).toBeInstanceOf(FlushPoisonedError);
    expect(during).toMatchObject({ id: p1, lastError: 'type not found' });
    const [p2] = await enqueueRows(t.db, spec, ['vpc:p']);
    await drainer.flush({ partitionKey: 'vpc:p', timeoutMs: 5_000 });
    expect(sink.delivered.map((i) => i.id)).toEqual([p2]);
  });

  test("'' is a key like any other; a never-started drainer flushes and leaves nothing running", async () => {
    const spec = await freshOutbox(t.db);
    await sql`insert into ${outboxTable(spec)} (resource_id, payload, is_head) values
      ('', ${JSON.stringify(payload(1))}, true), ('', ${JSON.stringify(payload(2))}, false), ('x', ${JSON.stringify(payload(3))}, true)`.execute(
      t.db,
    );
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, intervalMs: 50 });
    await drainer.flush({ partitionKey: '', timeoutMs: 3_000 });
    expect(sink.delivered.filter((i) => i.partitionKey === '').map((i) => i.id)).toEqual(['1', '2']);
    // The passes the flush kicked may still run (one more after a kick during a pass): let them end.
    await drainer.drainOnce();
    const delivered = sink.delivered.length;
    await enqueueRows(t.db, spec, ['vpc:later']);
    await sleep(300); // no timer runs: the drainer was never started
    expect(sink.delivered).toHaveLength(delivered);
  });

  test('while another process’s drainer holds the partition, flush waits for that delivery; nothing is delivered twice', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:o', 'vpc:o']);
    const otherSink = createRecordingSink({ outcome: async () => void (await sleep(400)) });
    const other = createDrainer({ db: t.kysely({ max: 1 }), spec, sink: otherSink, logger: quiet });
    const otherPass = other.drainOnce();
    await sleep(100);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet });
    await drainer.flush({ partitionKey: 'vpc:o', timeoutMs: 5_000 });
    expect((await outboxRows(t.db, spec)).every((r) => r.sent)).toBe(true);
    await otherPass;
    expect(otherSink.delivered.map((i) => i.id)).toEqual(ids);
    expect(sink.delivered).toEqual([]);
  });

  test('stop() during a flush rejects it with DrainerStoppedError at once; a flush after stop() rejects too', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:w']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } });
    const flushing = drainer.flush({ partitionKey: 'vpc:w', timeoutMs: 10_000 }).catch((e: unknown) => e);
    await sleep(300);
    const started = Date.now();
    await drainer.stop();
    expect(await flushing).toBeInstanceOf(DrainerStoppedError);
    expect(Date.now() - started).toBeLessThan(500);
    await expect(drainer.flush({ partitionKey: 'vpc:w' })).rejects.toBeInstanceOf(DrainerStoppedError);
  });
});

describe('flush polling', () => {
  test('a flush waiting for an intent that backs off polls at its documented pace (25 ms doubling to 200 ms), not once per empty pass', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:b']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) });
    const { db, counts } = countingDb();
    const drainer = createDrainer({ db, spec, sink, logger: quiet, backoff: { baseMs: 60_000, maxMs: 60_000 } });
    await drainer.drainOnce();
    await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now() + interval '1 minute'`.execute(
      t.db,
    ); // backs off a minute, no jitter
    const started = Date.now();
    const error = await drainer.flush({ partitionKey: 'vpc:b', timeoutMs: 1_000 }).catch((e: unknown) => e);
    const took = Date.now() - started;
    expect(error).toBeInstanceOf(FlushTimeoutError);
    expect(took).toBeLessThan(3_000); // the wall-clock deadline, with room for a loaded machine
    // 25+50+100+200+200+200+200 ms: about 7 rounds in a second; allow generous slack.
    expect(counts.status).toBeLessThan(20);
    expect(counts.claims).toBeLessThan(25);
    await drainer.stop();
    await db.destroy();
  });

  test('many concurrent flushes share their polling: 500 flushes do not multiply the status queries on a small pool', async () => {
    const spec = await freshOutbox(t.db);
    const n = 500;
    await enqueueRows(
      t.db,
      spec,
      Array.from({ length: n * 4 }, (_, i) => `vpc:${i % n}`),
    );
    let statusQueries = 0;
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max: 2 }) }),
      log: (event) => {
        if (/\bwhere id = any\(/.test(event.query.sql)) statusQueries += 1;
      },
    });
    const sink = createRecordingSink();
    const drainer = createDrainer({ db, spec, sink, logger: quiet, batchSize: 20 });
    const started = Date.now();
    const results = await Promise.allSettled(
      Array.from({ length: n }, (_, i) => drainer.flush({ partitionKey: `vpc:${i}`, timeoutMs: 60_000 })),
    );
    const took = Date.now() - started;
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(sink.delivered).toHaveLength(n * 4);
    // One status query per round for all of them, not one per flush per round.
    expect(statusQueries).toBeLessThan(n);
    console.info(`${n} flushes: ${took} ms, ${statusQueries} status queries`);
    await drainer.stop();
    await db.destroy();
  }, 60_000);

  test('one status query that fails (a connection reset mid-query) does not reject every waiting flush: they go on until delivered or timeoutMs', async () => {
    const spec = await freshOutbox(t.db);
    const n = 20;
    await enqueueRows(
      t.db,
      spec,
      Array.from({ length: n }, (_, i) => `vpc:${i}`),
    );
    let failNext = true;
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max: 4 }) }),
      plugins: [
        {
          // The first status query fails, as when its connection is reset while it runs.
          transformQuery: (args) => args.node,
          transformResult: async (args) => {
            if (failNext && JSON.stringify(args.result.rows).includes('"sent"')) {
              failNext = false;
              throw new Error('Connection terminated unexpectedly');
            }
            return args.result;
          },
        },
      ],
    });
    const sink = createRecordingSink({ outcome: async () => void (await sleep(150)) });
    const drainer = createDrainer({ db, spec, sink, logger: quiet, batchSize: 5 });
    const results = await Promise.allSettled(
      Array.from({ length: n }, (_, i) => drainer.flush({ partitionKey: `vpc:${i}`, timeoutMs: 5_000 })),
    );
    expect(failNext).toBe(false);
    expect(
      results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)),
    ).toEqual([]);
    await drainer.stop();
    await db.destroy();
  });
});
