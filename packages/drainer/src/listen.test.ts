import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutboxTable, defineOutbox, enqueueMany } from '@outbox/outbox';
import { OutboxConfigError } from '@outbox/outbox';
import { recordingLogger, useTestDatabase } from '@outbox/test-stack';
import pg from 'pg';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, freshOutbox, payload, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink, ListenConnectionError, type DrainerEvent } from './index.js';

// LISTEN cuts latency; when it is lost, slow or flooded, the timer still delivers everything.
const t = useTestDatabase();

describe('LISTEN', () => {
  test('LISTEN wakes the drainer within milliseconds of a commit, without the timer', async () => {
    const spec = defineOutbox({ table: 'listen.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const deliveredAt: number[] = [];
    const sink = createRecordingSink({ outcome: () => void deliveredAt.push(performance.now()) });
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      intervalMs: 3_600_000,
      listen: { connectionString: t.url },
    });
    await drainer.start();
    await sleep(100); // the initial pass is done
    const latencies: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      await t.db
        .transaction()
        .execute((trx) => enqueueMany(trx, spec, [{ partitionKey: `vpc:${i}`, payload: payload(1) }]));
      const committed = performance.now();
      for (let w = 0; w < 200 && deliveredAt.length <= i; w += 1) await sleep(2);
      latencies.push((deliveredAt[i] ?? Infinity) - committed);
    }
    await drainer.stop();
    expect(sink.delivered).toHaveLength(5);
    // Generous bound for a loaded 2-core CI machine; typically a few ms. The timer is an hour.
    for (const latency of latencies) expect(latency).toBeLessThan(250);
  });

  test('the listener reconnects after its connection is terminated; the timer delivers meanwhile', async () => {
    const spec = defineOutbox({ table: 'relisten.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const sink = createRecordingSink();
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      intervalMs: 200,
      listen: { connectionString: t.url },
    });
    await drainer.start();
    const admin = new pg.Client({ connectionString: t.url });
    await admin.connect();
    const listenerPid = async () =>
      (
        await admin.query<{ pid: number }>(
          `select pid from pg_stat_activity where datname = current_database() and query ilike 'listen%'`,
        )
      ).rows[0]?.pid;
    let pid: number | undefined;
    for (let i = 0; i < 50 && pid === undefined; i += 1)
      pid = await listenerPid().then(async (p) => p ?? (await sleep(20), undefined));
    expect(pid).toBeDefined();
    await admin.query('select pg_terminate_backend($1)', [pid]);

    // With LISTEN down, the 200 ms timer still delivers.
    await t.db
      .transaction()
      .execute((trx) => enqueueMany(trx, spec, [{ partitionKey: 'vpc:during', payload: payload(1) }]));
    for (let i = 0; i < 100 && sink.delivered.length < 1; i += 1) await sleep(20);
    expect(sink.delivered.map((d) => d.partitionKey)).toEqual(['vpc:during']);

    // And the listener comes back on a new connection.
    let newPid: number | undefined;
    for (let i = 0; i < 200 && (newPid === undefined || newPid === pid); i += 1) {
      newPid = await listenerPid();
      if (newPid === undefined || newPid === pid) await sleep(25);
    }
    expect(newPid).toBeDefined();
    expect(newPid).not.toBe(pid);
    await admin.end();
    await drainer.stop();
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
      const drainer = createDrainer({
        db: t.db,
        spec,
        sink,
        logger: quiet,
        intervalMs: 100,
        listen: { connectionString: `postgres://u:p@127.0.0.1:${port}/db` },
      });
      const started = Date.now();
      const outcome = await Promise.race([
        drainer.start().then(() => 'started'),
        sleep(10_000).then(() => 'start() still pending after 10 s'),
      ]);
      expect(outcome).toBe('started');
      expect(Date.now() - started).toBeLessThan(8_000);
      // The timer delivers without LISTEN.
      await waitUntil('the timer to deliver', () => sink.delivered.length === 1);
      // A stop() while a reconnect is in flight against the black hole returns promptly.
      await waitUntil('a reconnect attempt', () => sockets.length >= 2, 10_000);
      const stopping = Date.now();
      const stopped = await Promise.race([
        drainer.stop().then(() => 'stopped'),
        sleep(5_000).then(() => 'stop() still pending after 5 s'),
      ]);
      expect(stopped).toBe('stopped');
      expect(Date.now() - stopping).toBeLessThan(1_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      blackHole.close();
    }
  }, 30_000);

  test('a storm of 4000 commits by 8 writers is coalesced into far fewer passes, and all is delivered', async () => {
    const spec = await freshOutbox(t.db);
    let batches = 0;
    const sink = createRecordingSink();
    const drainer = createDrainer({
      db: t.kysely({ max: 2 }),
      spec,
      sink,
      logger: quiet,
      intervalMs: 3_600_000,
      listen: { connectionString: t.url },
      onEvent: (e) => void (e.type === 'batch-claimed' && (batches += 1)),
    });
    await drainer.start();
    const writers = t.kysely({ max: 8 });
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        for (let i = 0; i < 500; i += 1) {
          await writers
            .transaction()
            .execute((trx) => enqueueMany(trx, spec, [{ partitionKey: `vpc:${w}:${i % 7}`, payload: payload(i) }]));
        }
      }),
    );
    await waitUntil('all 4000 delivered', () => sink.delivered.length === 4_000, 30_000);
    expect(batches).toBeLessThan(4_000);
    await drainer.stop();
    await writers.destroy();
  }, 60_000);
});

describe('a LISTEN connection that cannot work', () => {
  /** A login role of its own (roles are the cluster's: a unique name, dropped at the end). */
  async function withRole(work: (role: { name: string; url: (password: string) => string }) => Promise<void>) {
    const name = `listen_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
    await sql.raw(`create role ${name} login password 'right'`).execute(t.db);
    const url = (password: string) => {
      const u = new URL(t.url);
      u.username = name;
      u.password = password;
      return u.toString();
    };
    try {
      await work({ name, url });
    } finally {
      await sql.raw(`select pg_terminate_backend(pid) from pg_stat_activity where usename = '${name}'`).execute(t.db);
      await sql.raw(`drop role if exists ${name}`).execute(t.db);
    }
  }

  test.each([['not a url'], ['http://127.0.0.1/db'], ['127.0.0.1:5432']])(
    'a connection string that is not a postgres URL (%j) is refused at createDrainer, without echoing it',
    async (connectionString) => {
      const spec = await freshOutbox(t.db);
      const create = () => createDrainer({ db: t.db, spec, sink: createRecordingSink(), listen: { connectionString } });
      expect(create).toThrow(OutboxConfigError);
      expect(create).toThrow(/listen\.connectionString: expected a postgres:\/\/ URL/);
      expect(create).not.toThrow(connectionString);
    },
  );

  test.each([
    ['a wrong password', '28P01', (url: (p: string) => string) => url('wrong')],
    [
      'a database that does not exist',
      '3D000',
      (url: (p: string) => string) => url('right').replace(/\/[^/?]+(\?|$)/, '/no_such_database$1'),
    ],
    [
      'a host that does not resolve',
      /^(ENOTFOUND|EAI_AGAIN|EAI_NONAME)$/,
      () => 'postgres://u:p@no-such-host.invalid/db',
    ],
  ])('%s: start() rejects with the cause and leaves nothing running', async (_what, code, connectionString) => {
    await withRole(async ({ url }) => {
      const spec = await freshOutbox(t.db);
      await enqueueRows(t.db, spec, ['vpc:never']);
      const sink = createRecordingSink();
      const logger = recordingLogger();
      const drainer = createDrainer({
        db: t.db,
        spec,
        sink,
        logger,
        intervalMs: 20,
        listen: { connectionString: connectionString(url) },
      });
      const failure = await drainer.start().then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(ListenConnectionError);
      expect((failure as Error).message).toContain('check listen.connectionString');
      expect(((failure as Error).cause as { code?: string }).code).toMatch(code);
      expect((failure as Error).message).not.toContain(':right@');
      await sleep(300);
      expect(sink.delivered, 'no timer runs after a failed start').toEqual([]);
      expect(drainer.listenState()).toBe('off');
      expect(logger.entries.filter((e) => e.message.includes('LISTEN'))).toEqual([]);
      await drainer.stop();
    });
  });

  test('a LISTEN lost later: one WARN, the timer delivers, the state and its metric event say so; back, one INFO', async () => {
    await withRole(async ({ name, url }) => {
      const spec = await freshOutbox(t.db);
      const sink = createRecordingSink();
      const logger = recordingLogger();
      const events: DrainerEvent[] = [];
      const drainer = createDrainer({
        db: t.db,
        spec,
        sink,
        logger,
        intervalMs: 100,
        listen: { connectionString: url('right') },
        onEvent: (e) => void (e.type === 'listen-changed' && events.push(e)),
      });
      await drainer.start();
      expect(drainer.listenState()).toBe('listening');

      // The role may no longer log in, and its session ends: every reconnect is refused until it may again.
      await sql.raw(`alter role ${name} nologin`).execute(t.db);
      await sql.raw(`select pg_terminate_backend(pid) from pg_stat_activity where usename = '${name}'`).execute(t.db);
      await waitUntil('LISTEN to be lost', () => drainer.listenState() === 'reconnecting');
      await enqueueRows(t.db, spec, ['vpc:while-down']);
      await waitUntil('the timer to deliver', () => sink.delivered.length === 1);
      await sleep(2_500); // several reconnects (backoff from 100 ms)
      const listenLines = () => logger.entries.filter((e) => e.message.startsWith(`LISTEN ${spec.channel}`));
      expect(listenLines().map((e) => e.level)).toEqual(['warn']);

      await sql.raw(`alter role ${name} login`).execute(t.db);
      await waitUntil('LISTEN to be back', () => drainer.listenState() === 'listening', 40_000);
      const lines = listenLines();
      expect(lines.map((e) => e.level)).toEqual(['warn', 'info']);
      const attempts = Number(/after (\d+) failed attempt/.exec(lines[1]!.message)?.[1]);
      expect(attempts, 'reconnects were tried, and not each logged').toBeGreaterThanOrEqual(3);
      await drainer.stop();
      expect(events.map((e) => e.type === 'listen-changed' && e.state)).toEqual([
        'listening',
        'reconnecting',
        'listening',
        'off',
      ]);
    });
  }, 60_000);
});
