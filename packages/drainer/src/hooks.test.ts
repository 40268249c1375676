import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, escaped, freshOutbox, listenConnections, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink } from './index.js';

// The service's logger and onEvent: called as the service expects, and never able to break delivery.
const t = useTestDatabase();

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
    const sink = createRecordingSink({
      outcome: (i) => (i.id === ids[0] ? { kind: 'permanent', error: 'refused' } : undefined),
    });
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
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      intervalMs: 3_600_000,
      listen: { connectionString: t.url },
      logger,
    });
    await drainer.start();
    expect(await listenConnections(t.db, spec)).toBe(1);
    const errors = await escaped(async () => {
      await sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and query = ${`listen "${spec.channel}"`}`.execute(
        t.db,
      );
      await sleep(100);
      await waitUntil('LISTEN to come back', async () => (await listenConnections(t.db, spec)) === 1);
    });
    expect(errors.map(String)).toEqual([]);
    await drainer.stop();
  });
});

describe('the guarded logger', () => {
  test('a logger method replaced after createDrainer (vi.spyOn, pino changing its level) is the one called', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:p']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'permanent', error: 'refused' }) });
    const logger: { info: () => void; error: () => void; warn: (message: string) => void } = { ...quiet };
    const drainer = createDrainer({ db: t.db, spec, sink, logger });
    const seen: string[] = [];
    logger.warn = (message: string) => void seen.push(message); // what vi.spyOn(logger, 'warn') does
    await drainer.drainOnce();
    expect(seen.join('\n')).toMatch(/poisoned 1 intent/);
  });

  test('the logger is called with itself as `this` and with its fields', async () => {
    const spec = await freshOutbox(t.db);
    const [id] = await enqueueRows(t.db, spec, ['vpc:p']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'permanent', error: 'refused' }) });
    const calls: Array<{ self: unknown; fields: unknown }> = [];
    class ClassLogger {
      prefix = 'x';
      info() {}
      error() {}
      warn(this: ClassLogger, _message: string, fields?: Record<string, unknown>) {
        calls.push({ self: this, fields });
      }
    }
    const logger = new ClassLogger();
    await createDrainer({ db: t.db, spec, sink, logger }).drainOnce();
    expect(calls).toHaveLength(1);
    expect(calls[0]?.self).toBe(logger);
    expect(calls[0]?.fields).toEqual({ ids: [id], partitionKeys: ['vpc:p'] });
  });
});
