import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { defineOutbox, OutboxConfigError, OutboxTableError } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  enqueueIntent,
  openTransaction,
  poison,
  readRow,
  recordingLogger,
  register,
  settlesWithin,
  waitForLockWaiters,
} from './testing/outbox-fixture.js';

const t = useTestDatabase();

async function configError(promise: Promise<unknown>): Promise<OutboxConfigError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OutboxConfigError);
  return error as OutboxConfigError;
}

describe('validation', () => {
  test.each([
    ['an unknown column', `s.payload @> t.no_such_column`, /no_such_column/],
    ['a non-boolean', `s.payload->'relations'`, /boolean/],
    ['a fragment that escapes its parentheses', `true) or (true`, /unbalanced/],
    // docs/design.md §6's example as written: `->` and `@>` share a precedence in Postgres.
    ['unparenthesised jsonb operators', `s.payload->'relations' @> t.payload->'relations'`, /Parenthesise/],
  ])('coverage SQL with %s is an OutboxConfigError at start', async (_what, coverage, message) => {
    // Built past defineOutbox (which refuses some of these itself): start must catch them all.
    const spec = {
      ...(await createTestOutbox(t.db, { partitionColumn: 'tuple_key' })),
      supersededCoverageSql: coverage,
    };
    const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
    const error = await configError(reconciler.start());
    expect(error.field).toBe('supersededCoverageSql');
    expect(error.message).toMatch(message);
    // A plain call checks first too: it never reaches a poisoned row with a broken fragment.
    await configError(reconciler.redrivePoisoned());
    await reconciler.stop();
  });

  test('start verifies the table: a spec pointed at a missing table fails with OutboxTableError', async () => {
    const spec = defineOutbox({ table: 'reconciler.not_there', partitionColumn: 'resource_id' });
    const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
    await expect(reconciler.start()).rejects.toBeInstanceOf(OutboxTableError);
    await reconciler.stop();
  });

  test('config is checked at construction', async () => {
    const spec = await createTestOutbox(t.db);
    expect(() => createReconciler({ db: t.db, spec, batchSize: 0 })).toThrow(OutboxConfigError);
    expect(() => createReconciler({ db: t.db, spec, batchSize: 5_000 })).toThrow(/batchSize/);
    expect(() => createReconciler({ db: t.db, spec, intervalMs: 1.5 })).toThrow(/intervalMs/);
    // `interval`, the old name, is still checked under its own name; both at once is refused.
    expect(() => createReconciler({ db: t.db, spec, interval: 0 })).toThrow(/^interval: /);
    expect(() => createReconciler({ db: t.db, spec, interval: 50, intervalMs: 50 })).toThrow(/give intervalMs only/);
    // @ts-expect-error: the spec is required
    expect(() => createReconciler({ db: t.db })).toThrow(/spec/);
  });

  test('intervalMs above 2^31 - 1 ms (which setTimeout turns into a 1 ms loop) is an OutboxConfigError naming intervalMs', async () => {
    const spec = await createTestOutbox(t.db);
    for (const intervalMs of [2_147_483_648, 2 ** 32, 1e12]) {
      let error: unknown;
      try {
        createReconciler({ db: t.db, spec, intervalMs });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OutboxConfigError);
      expect((error as OutboxConfigError).field).toBe('intervalMs');
      expect((error as OutboxConfigError).message).toMatch(/from 1 to 2147483647/);
    }
    expect(() => createReconciler({ db: t.db, spec, intervalMs: 2_147_483_647 })).not.toThrow();
  });
});

describe('schedule', () => {
  test('start runs a pass every interval; stop ends the schedule', async () => {
    const spec = await createTestOutbox(t.db);
    const first = await enqueueIntent(t.db, spec, 'vpc:t1', register('t1'));
    await poison(t.db, spec, first);
    const reconciler = createReconciler({ db: t.db, spec, intervalMs: 50, logger: recordingLogger() });
    await reconciler.start();
    try {
      const deadline = Date.now() + 5_000;
      while ((await readRow(t.db, spec, first)).attempt_count !== 0) {
        if (Date.now() > deadline) throw new Error('the timer never revived the row');
        await sleep(25);
      }
    } finally {
      await reconciler.stop();
    }
    const second = await enqueueIntent(t.db, spec, 'vpc:t2', register('t2'));
    await poison(t.db, spec, second);
    await sleep(300);
    expect(await readRow(t.db, spec, second)).toMatchObject({ attempt_count: spec.maxAttempts });
  });

  test('a failing pass is logged and the schedule goes on', async () => {
    const spec = await createTestOutbox(t.db);
    const logger = recordingLogger();
    const reconciler = createReconciler({ db: t.db, spec, intervalMs: 50, logger });
    await reconciler.start();
    try {
      await sql.raw(`alter table ${tableNames(spec).table} rename column last_error to last_error_gone`).execute(t.db);
      await sleep(200);
      expect(logger.entries.filter((e) => e.level === 'error').length).toBeGreaterThanOrEqual(2);
    } finally {
      await sql.raw(`alter table ${tableNames(spec).table} rename column last_error_gone to last_error`).execute(t.db);
      await reconciler.stop();
    }
  });

  test('stop waits for the pass in flight', async () => {
    const spec = await createTestOutbox(t.db);
    const stuck = await enqueueIntent(t.db, spec, 'vpc:st', register('st'));
    const next = await enqueueIntent(t.db, spec, 'vpc:st', register('st'));
    await poison(t.db, spec, stuck);
    const holder = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select id from ${sql.raw(tableNames(spec).table)} where id = ${next} for update`.execute(holder.trx);
      const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
      const pass = reconciler.redrivePoisoned();
      await waitForLockWaiters(t.db, 1, 'transactionid');
      const stopped = reconciler.stop();
      expect(await settlesWithin(stopped, 200)).toBe(false);
      await holder.rollback();
      await stopped;
      expect((await pass).revived.map((r) => r.id)).toEqual([stuck]);
    } finally {
      await holder.rollback();
    }
  });
});
