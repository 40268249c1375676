import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutboxTable, defineOutbox, enqueueMany, type OutboxSpec } from '@outbox/outbox';
import { startEmbeddedPostgres, useTestDatabase } from '@outbox/test-stack';
import { Kysely as KyselyClass, PostgresDialect, sql, type Kysely } from 'kysely';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { enqueueRows, escaped, freshOutbox as fresh, payload } from './testing/fixture.js';
import { createDrainer, createRecordingSink, DrainerStoppedError, FlushPoisonedError, FlushTimeoutError, type Intent, type Sink } from './index.js';

// Run-time behaviour as a service meets it: flush, LISTEN, lifecycle, handlers, pool use.
const t = useTestDatabase();
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const freshOutbox = (db: Kysely<any>, maxAttempts = 10) => fresh(db, 'runtime', { maxAttempts });

const table = (spec: OutboxSpec) => sql.raw(`"${spec.schema}"."${spec.tableName}"`);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function rows(db: Kysely<any>, spec: OutboxSpec) {
  const result = await sql<{ id: string; resource_id: string; sent: boolean; attempt_count: number; last_error: string | null }>`
    select id::text as id, resource_id, sent_at is not null as sent, attempt_count, last_error from ${table(spec)} order by id`.execute(db);
  return result.rows;
}

const listenCount = async (spec: OutboxSpec) =>
  Number((await sql<{ n: string }>`select count(*) as n from pg_stat_activity where datname = current_database() and query = ${`listen "${spec.channel}"`}`.execute(t.db)).rows[0]?.n);

async function waitUntil(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}


describe('handlers that fail never break the drainer', () => {
  test('an async onEvent that rejects raises no unhandled rejection (which would end a Node process)', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const sink = createRecordingSink();
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      // An async metrics push whose backend is down: assignable to `(event) => void`.
      onEvent: async () => {
        throw new Error('metrics backend down');
      },
    });
    let result: unknown;
    const errors = await escaped(async () => {
      result = await drainer.drainOnce();
    });
    expect(errors.map(String)).toEqual([]);
    expect(result).toMatchObject({ delivered: 2 });
  });

  test('a logger whose warn throws does not end the pass: the rows after a poisoned one are delivered in the same drainOnce', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b', 'vpc:c']);
    const sink = createRecordingSink({ outcome: (i) => (i.id === ids[0] ? { kind: 'permanent', error: 'refused' } : undefined) });
    const logger = {
      ...quiet,
      warn: () => {
        throw new Error('log transport broken');
      },
    };
    const drainer = createDrainer({ db: t.db, spec, sink, batchSize: 1, logger });
    const result = await drainer.drainOnce();
    expect(result).toMatchObject({ poisoned: 1, delivered: 2 });
    expect(sink.delivered.map((i) => i.id)).toEqual([ids[1], ids[2]]);
  });

  test('a logger whose warn throws: a lost LISTEN connection is no uncaught exception, and LISTEN comes back', async () => {
    const spec = await freshOutbox(t.db);
    const logger = {
      ...quiet,
      warn: () => {
        throw new Error('log transport broken');
      },
    };
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), interval: 3_600_000, listen: { connectionString: t.url }, logger });
    await drainer.start();
    expect(await listenCount(spec)).toBe(1);
    const errors = await escaped(async () => {
      await sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and query = ${`listen "${spec.channel}"`}`.execute(t.db);
      await sleep(100);
      await waitUntil('LISTEN to come back', async () => (await listenCount(spec)) === 1);
    });
    expect(errors.map(String)).toEqual([]);
    await drainer.stop();
  });
});

describe('lifecycle', () => {
  test('start() right after a stop() that was not awaited: the next stop() leaves no LISTEN connection behind', async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet, interval: 3_600_000, listen: { connectionString: t.url } });
    await drainer.start();
    const stopping = drainer.stop(); // e.g. a restart on a config reload
    await drainer.start();
    await stopping;
    expect(await listenCount(spec)).toBe(1);
    await drainer.stop();
    await waitUntil('the LISTEN connection to close', async () => (await listenCount(spec)) === 0, 2_000);
  });

  test('a LISTEN host that accepts the connection and never answers: start() gives up on it within seconds, stop() at once', async () => {
    const sockets: net.Socket[] = [];
    const blackHole = net.createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
    const { port } = blackHole.address() as net.AddressInfo;
    try {
      const spec = await freshOutbox(t.db);
      await enqueueRows(t.db, spec, ['vpc:timer']);
      const sink = createRecordingSink();
      const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, interval: 100, listen: { connectionString: `postgres://u:p@127.0.0.1:${port}/db` } });
      const started = Date.now();
      const outcome = await Promise.race([drainer.start().then(() => 'started'), sleep(10_000).then(() => 'start() still pending after 10 s')]);
      expect(outcome).toBe('started');
      expect(Date.now() - started).toBeLessThan(8_000);
      // The timer delivers without LISTEN.
      await waitUntil('the timer to deliver', () => sink.delivered.length === 1);
      // A stop() while a reconnect is in flight against the black hole returns promptly.
      await waitUntil('a reconnect attempt', () => sockets.length >= 2, 10_000);
      const stopping = Date.now();
      const stopped = await Promise.race([drainer.stop().then(() => 'stopped'), sleep(5_000).then(() => 'stop() still pending after 5 s')]);
      expect(stopped).toBe('stopped');
      expect(Date.now() - stopping).toBeLessThan(1_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      blackHole.close();
    }
  }, 30_000);
});

describe('flush', () => {
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

  test('many concurrent flushes share their polling: 500 flushes do not multiply the status queries on a small pool', async () => {
    const spec = await freshOutbox(t.db);
    const n = 500;
    await enqueueRows(t.db, spec, Array.from({ length: n * 4 }, (_, i) => `vpc:${i % n}`));
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
    const results = await Promise.allSettled(Array.from({ length: n }, (_, i) => drainer.flush({ partitionKey: `vpc:${i}`, timeoutMs: 60_000 })));
    const took = Date.now() - started;
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(sink.delivered).toHaveLength(n * 4);
    // One status query per round for all of them, not one per flush per round.
    expect(statusQueries).toBeLessThan(n);
    console.info(`${n} flushes: ${took} ms, ${statusQueries} status queries`);
    await drainer.stop();
    await db.destroy();
  }, 60_000);

  test('waits for an intent that was backing off at the call, and resolves once it is delivered', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:b']);
    let fail = true;
    const sink = createRecordingSink({ outcome: () => (fail ? { kind: 'transient', error: 'down' } : undefined) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 800, maxMs: 800 } });
    await drainer.drainOnce();
    fail = false;
    await drainer.flush({ partitionKey: 'vpc:b', timeoutMs: 5_000 });
    expect((await rows(t.db, spec)).map((r) => [r.sent, r.attempt_count])).toEqual([[true, 1]]);
  });

  test('an intent poisoned before the call does not block: the later one is awaited; one poisoned during the call rejects with its reason', async () => {
    const spec = await freshOutbox(t.db);
    const [p1] = await enqueueRows(t.db, spec, ['vpc:p']);
    const sink = createRecordingSink({ outcome: (i) => (i.id === p1 ? { kind: 'permanent', error: 'type not found' } : undefined) });
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
    await sql`insert into ${table(spec)} (resource_id, payload, is_head) values
      ('', ${JSON.stringify(payload(1))}, true), ('', ${JSON.stringify(payload(2))}, false), ('x', ${JSON.stringify(payload(3))}, true)`.execute(t.db);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, interval: 50 });
    await drainer.flush({ partitionKey: '', timeoutMs: 3_000 });
    expect(sink.delivered.filter((i) => i.partitionKey === '').map((i) => i.id)).toEqual(['1', '2']);
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
    expect((await rows(t.db, spec)).every((r) => r.sent)).toBe(true);
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

describe('the pool', () => {
  test('flush called by mistake inside the caller’s open transaction on a pool of one rejects at timeoutMs instead of deadlocking the service', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:d']);
    const db = t.kysely({ max: 1 });
    const drainer = createDrainer({ db, spec, sink: createRecordingSink(), logger: quiet });
    const started = Date.now();
    const outcome = await Promise.race([
      db.transaction().execute(async () => {
        // The transaction holds the pool's only connection; flush needs one for its first query.
        await drainer.flush({ partitionKey: 'vpc:d', timeoutMs: 500 });
      }).then(() => 'resolved', (e: unknown) => e),
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
    const drainer = createDrainer({ db, spec, sink, logger: quiet, interval: 50, listen: { connectionString: t.url } });
    await drainer.start();
    // The service holds both connections for a second.
    const hogs = Promise.all([sql`select pg_sleep(1)`.execute(db), sql`select pg_sleep(1)`.execute(db)]);
    let maxWaiting = 0;
    const writes = (async () => {
      for (let i = 0; i < 300; i += 1) {
        await t.db.transaction().execute((trx) => enqueueMany(trx, spec, [{ partitionKey: `vpc:${i % 10}`, payload: payload(i) }]));
        maxWaiting = Math.max(maxWaiting, pool.waitingCount);
      }
    })();
    await Promise.all([hogs, writes]);
    expect(maxWaiting).toBeLessThanOrEqual(1);
    await waitUntil('all 300 delivered', () => sink.delivered.length === 300, 10_000);
    await drainer.stop();
  }, 30_000);
});

describe('a pass', () => {
  test('a batch that failed as a whole ends the pass (the target is likely down); the next pass goes on behind it', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, Array.from({ length: 150 }, (_, i) => `bad:${i}`));
    await enqueueRows(t.db, spec, Array.from({ length: 50 }, (_, i) => `good:${i}`));
    const sink = createRecordingSink({ outcome: (i) => (i.partitionKey.startsWith('bad') ? { kind: 'transient', error: 'throttled' } : undefined) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } });
    // One batch of 100 failures: the pass stops there instead of trying the whole backlog against it.
    expect(await drainer.drainOnce()).toMatchObject({ batches: 1, claimed: 100, retried: 100, delivered: 0 });
    // Full jitter can draw a delay of a few ms: pin the failed rows' backoff to a minute.
    await sql`update ${table(spec)} set next_attempt_at = now() + interval '1 minute' where attempt_count > 0`.execute(t.db);
    // The next pass: the failed rows back off; the 50 other failing heads and the 50 good ones are claimed.
    expect(await drainer.drainOnce()).toMatchObject({ claimed: 100, retried: 50, delivered: 50 });
    expect((await rows(t.db, spec)).filter((r) => r.resource_id.startsWith('bad')).every((r) => r.attempt_count === 1)).toBe(true);
  });

  test('a sink that reports every intent skipped (no progress possible) ends the pass instead of spinning', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const calls: Intent[][] = [];
    const sink: Sink = {
      deliver: async (intents) => {
        calls.push([...intents]);
        return intents.map(() => ({ kind: 'skipped' as const }));
      },
    };
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(result).toMatchObject({ claimed: 2, released: 2, delivered: 0 });
    expect(calls).toHaveLength(1);
  });

  test('a pass whose table check fails (a drainer only kicked, never started, on a table that does not exist) is logged and emitted, not silent', async () => {
    const spec = defineOutbox({ table: 'runtime.missing', partitionColumn: 'resource_id' });
    const logged: string[] = [];
    const events: string[] = [];
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: { ...quiet, error: (message) => void logged.push(message) },
      onEvent: (e) => void events.push(e.type),
    });
    drainer.kick(); // e.g. a service that kicks after each commit
    await waitUntil('the failed pass to be reported', () => events.length > 0, 3_000).catch(() => undefined);
    expect(events).toEqual(['pass-failed']);
    expect(logged.join('\n')).toMatch(/drain pass failed: .*runtime\.missing/);
  });

  test('drainOnce counts a mixed pass: delivered, retried, poisoned, released', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['a', 'a', 'a', 'b', 'b', 'c']);
    const [a1, a2, a3, b1, b2, c1] = ids;
    const sink = createRecordingSink({
      outcome: (i) => (i.id === a2 ? { kind: 'transient', error: 'blip' } : i.id === b1 ? { kind: 'permanent', error: 'bad' } : undefined),
    });
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } }).drainOnce();
    // Batch 1: a1 delivered, a2 retried, a3 released; b1 poisoned, b2 released; c1 delivered. Batch 2: b2.
    expect(result).toEqual({ batches: 2, claimed: 7, delivered: 3, retried: 1, poisoned: 1, released: 2, halted: false });
    expect(sink.delivered.map((i) => i.id)).toEqual([a1, c1, b2]);
    expect(a3).toBeDefined();
  });

  test('stop() waits for the in-flight batch; a sink that ignores its AbortSignal is cut at deliveryTimeoutMs and its rows counted transient', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    let claimed = false;
    const sink: Sink = {
      deliver: async (intents) => {
        claimed = true;
        await sleep(1_500); // ignores the signal
        return intents.map(() => ({ kind: 'delivered' as const }));
      },
    };
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, deliveryTimeoutMs: 500, backoff: { baseMs: 60_000 } });
    await drainer.start(); // cut 500 ms after the deadline (the grace), 500 ms before the sink would answer
    await waitUntil('the batch to be claimed', () => claimed);
    await drainer.stop();
    expect((await rows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error])).toEqual([[false, 1, 'sink failed: Error: sink did not answer within 500 ms (nor 500 ms after its signal was aborted)']]);
    await sleep(1_100); // the ignored delivery ends; nothing else runs
  });
});

describe('LISTEN under load and failure', () => {
  test('a storm of 4000 commits by 8 writers is coalesced into far fewer passes, and all is delivered', async () => {
    const spec = await freshOutbox(t.db);
    let batches = 0;
    const sink = createRecordingSink();
    const drainer = createDrainer({
      db: t.kysely({ max: 2 }),
      spec,
      sink,
      logger: quiet,
      interval: 3_600_000,
      listen: { connectionString: t.url },
      onEvent: (e) => void (e.type === 'batch-claimed' && (batches += 1)),
    });
    await drainer.start();
    const writers = t.kysely({ max: 8 });
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        for (let i = 0; i < 500; i += 1) {
          await writers.transaction().execute((trx) => enqueueMany(trx, spec, [{ partitionKey: `vpc:${w}:${i % 7}`, payload: payload(i) }]));
        }
      }),
    );
    await waitUntil('all 4000 delivered', () => sink.delivered.length === 4_000, 30_000);
    expect(batches).toBeLessThan(4_000);
    await drainer.stop();
    await writers.destroy();
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
      const drainer = createDrainer({ db, spec, sink, interval: 200, listen: { connectionString: server.url }, logger: quiet });
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
        async () => Number((await admin.query(`select count(*) as n from pg_stat_activity where query = 'listen "${spec.channel}"'`)).rows[0].n) === 1,
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

describe('the process', () => {
  test('after stop() and the pool’s end, Node exits on its own within a second: no timer, socket or listener left', async () => {
    const spec = await freshOutbox(t.db);
    const child = spawn(process.execPath, ['--import', 'tsx', resolve(import.meta.dirname, 'testing/exit-after-stop.ts'), t.url, spec.table], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const [code] = (await Promise.race([once(child, 'exit'), sleep(20_000).then(() => ['still running after 20 s'])])) as [unknown];
    if (code === 'still running after 20 s') child.kill('SIGKILL');
    expect(code).toBe(0);
    const stoppedAt = Number(/stopped (\d+)/.exec(out)?.[1]);
    expect(Date.now() - stoppedAt).toBeLessThan(1_500);
  }, 30_000);
});
