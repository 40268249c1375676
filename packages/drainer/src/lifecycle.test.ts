import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { queryObjects } from 'node:v8';
import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { tableNames } from '@outbox/outbox/protocol';
import { describe, expect, onTestFinished, test } from 'vitest';
import { enqueueRows, escaped, freshOutbox, listenConnections, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink, DrainerStoppedError } from './index.js';

// start() and stop() in every order: nothing left running, nothing delivered after a stop.
const t = useTestDatabase();

describe('start and stop', () => {
  test('a stop() while start() is still starting wins: no timer, no LISTEN connection, nothing delivered after', async () => {
    const spec = await freshOutbox(t.db);
    const sink = createRecordingSink();
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      intervalMs: 20,
      listen: { connectionString: t.url },
    });
    const starting = drainer.start();
    await drainer.stop();
    await starting;
    await enqueueRows(t.db, spec, ['vpc:after-stop']);
    await sleep(300);
    expect(sink.delivered).toHaveLength(0);
    expect(await listenConnections(t.db, spec)).toBe(0);
  });

  test('start() twice is one start: one LISTEN connection, and stop() leaves none', async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: quiet,
      intervalMs: 3_600_000,
      listen: { connectionString: t.url },
    });
    await Promise.all([drainer.start(), drainer.start()]);
    await drainer.start();
    expect(await listenConnections(t.db, spec)).toBe(1);
    await drainer.stop();
    expect(await listenConnections(t.db, spec)).toBe(0);
    // And it starts again after a stop.
    await drainer.start();
    expect(await listenConnections(t.db, spec)).toBe(1);
    await drainer.stop();
  });

  test('a flush still on its first query when stop() comes rejects with DrainerStoppedError, not a timeout', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:waiting']);
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) }),
      logger: quiet,
      backoff: { baseMs: 60_000 },
    });
    const started = Date.now();
    const flushing = drainer.flush({ partitionKey: 'vpc:waiting', timeoutMs: 5_000 }).catch((e: unknown) => e);
    await drainer.stop();
    expect(await flushing).toBeInstanceOf(DrainerStoppedError);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  test('start() right after a stop() that was not awaited: the next stop() leaves no LISTEN connection behind', async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: quiet,
      intervalMs: 3_600_000,
      listen: { connectionString: t.url },
    });
    await drainer.start();
    const stopping = drainer.stop(); // e.g. a restart on a config reload
    await drainer.start();
    await stopping;
    expect(await listenConnections(t.db, spec)).toBe(1);
    await drainer.stop();
    await waitUntil('the LISTEN connection to close', async () => (await listenConnections(t.db, spec)) === 0, 2_000);
  });

  test('stop() at every moment of start(): no LISTEN connection is left, nothing escapes', async () => {
    const spec = await freshOutbox(t.db);
    const listenCount = async () =>
      Number(
        (
          await sql<{
            n: string;
          }>`select count(*) as n from pg_stat_activity where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid() and application_name = '' and query like ${`listen%${spec.channel}%`}`.execute(
            t.db,
          )
        ).rows[0]?.n,
      );
    const errors = await escaped(async () => {
      for (let i = 0; i < 30; i += 1) {
        const drainer = createDrainer({
          db: t.db,
          spec,
          sink: createRecordingSink(),
          logger: quiet,
          intervalMs: 3_600_000,
          listen: { connectionString: t.url },
        });
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

describe('the process', () => {
  test('after stop() and the pool’s end, Node exits on its own within a second: no timer, socket or listener left', async () => {
    const spec = await freshOutbox(t.db);
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', resolve(import.meta.dirname, 'testing/exit-after-stop.ts'), t.url, spec.table],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const [code] = (await Promise.race([
      once(child, 'exit'),
      sleep(20_000).then(() => ['still running after 20 s']),
    ])) as [unknown];
    if (code === 'still running after 20 s') child.kill('SIGKILL');
    expect(code).toBe(0);
    const stoppedAt = Number(/stopped (\d+)/.exec(out)?.[1]);
    expect(Date.now() - stoppedAt).toBeLessThan(1_500);
  }, 30_000);
});

describe('kicks during a long pass', () => {
  test('leave nothing behind that lives as long as the pass (a steady load keeps one pass running, and notifies a hundred times a second)', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const sink = createRecordingSink({ outcome: () => held.then(() => undefined) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, intervalMs: 3_600_000 });
    const pass = drainer.drainOnce();
    await waitUntil('the pass delivers', () => sink.calls.length === 1);
    // Live promises, counted after a full collection, before and after 10,000 kicks into the held pass.
    const before = queryObjects(Promise, { format: 'count' });
    for (let i = 0; i < 10_000; i += 1) drainer.kick();
    const after = queryObjects(Promise, { format: 'count' });
    expect(after - before).toBeLessThan(1_000);
    release();
    await pass;
    await drainer.stop();
  });

  test('drainOnce() after a kick during a pass returns the pass that follows it and leaves no other behind', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    let claims = 0;
    const counted = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: t.url, max: 4 }) }),
      log: (event) => void (event.query.sql.includes(tableNames(spec).claimFunction) && (claims += 1)),
    });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const sink = createRecordingSink({ outcome: () => held.then(() => undefined) });
    const drainer = createDrainer({ db: counted, spec, sink, logger: quiet, intervalMs: 3_600_000 });
    onTestFinished(async () => {
      await drainer.stop();
      await counted.destroy();
    });
    drainer.kick();
    await waitUntil('the first pass delivers', () => sink.calls.length === 1);
    drainer.kick(); // marks the next pass due
    const once = drainer.drainOnce();
    release();
    await once;
    const claimsByThen = claims;
    await sleep(300);
    // drainOnce waited for the held pass and returned the one the kick started after it: no third pass.
    expect(claims).toBe(claimsByThen);
  });
});
