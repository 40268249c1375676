import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { Kysely as KyselyClass, PostgresDialect, sql, type Kysely } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, freshOutbox as fresh } from './testing/fixture.js';
import { createDrainer, createRecordingSink, FlushTimeoutError } from './index.js';

const t = useTestDatabase();
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const freshOutbox = (db: Kysely<any>) => fresh(db, 'flushpoll', {});

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

describe('flush polling rate', () => {
  test('a flush waiting for an intent that backs off polls at its documented pace (25 ms doubling to 200 ms), not once per empty pass', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:b']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) });
    const { db, counts } = countingDb();
    const drainer = createDrainer({ db, spec, sink, logger: quiet, backoff: { baseMs: 60_000, maxMs: 60_000 } });
    await drainer.drainOnce();
    await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now() + interval '1 minute'`.execute(t.db); // backs off a minute, no jitter
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

describe('a failed status query', () => {
  test('one status query that fails (a connection reset mid-query) does not reject every waiting flush: they go on until delivered or timeoutMs', async () => {
    const spec = await freshOutbox(t.db);
    const n = 20;
    await enqueueRows(t.db, spec, Array.from({ length: n }, (_, i) => `vpc:${i}`));
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
    const results = await Promise.allSettled(Array.from({ length: n }, (_, i) => drainer.flush({ partitionKey: `vpc:${i}`, timeoutMs: 5_000 })));
    expect(failNext).toBe(false);
    expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
    await drainer.stop();
    await db.destroy();
  });
});
