import { sql } from 'kysely';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  openTransaction,
  poison,
  readRow,
  recordingLogger,
  register,
  settlesWithin,
  waitForLockWaiters,
} from './testing/outbox-fixture.js';

// One pass per table at a time, across processes; retire queues behind it.
const t = useTestDatabase();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

describe('single flight across processes', () => {
  test('a second pass while one runs reports skipped and logs at info, not as an error', async () => {
    const spec = await createTestOutbox(t.db);
    const table = sql.raw(tableNames(spec).table);
    const reg = await enqueueIntent(t.db, spec, 'vpc:k', register('k'));
    const next = await enqueueIntent(t.db, spec, 'vpc:k', register('k'));
    await poison(t.db, spec, reg);

    const holder = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select id from ${table} where id = ${next} for update`.execute(holder.trx);
      const first = createReconciler({ db: t.kysely({ max: 2 }), spec, logger: recordingLogger() });
      const secondLogger = recordingLogger();
      const second = createReconciler({ db: t.kysely({ max: 2 }), spec, logger: secondLogger });
      const running = first.redrivePoisoned();
      await waitForLockWaiters(t.db, 1, 'transactionid'); // pass 1 holds the reconciler lock, waits at step 3

      const skipped = await second.redrivePoisoned();
      expect(skipped).toEqual({
        revived: [],
        superseded: [],
        deferred: [],
        skipped: true,
        more: false,
        moreSuperseded: false,
      });
      expect(secondLogger.entries.map((e) => e.level)).toEqual(['info']);
      expect(await readRow(t.db, spec, reg)).toMatchObject({ attempt_count: spec.maxAttempts });

      await holder.rollback();
      expect(ids((await running).revived)).toEqual([reg]);
      // Once the first pass is done, the second runs normally (nothing left to do).
      expect((await second.redrivePoisoned()).skipped).toBe(false);
    } finally {
      await holder.rollback();
    }
  });

  test('retire waits for a running pass instead of racing it', async () => {
    const spec = await createTestOutbox(t.db);
    const table = sql.raw(tableNames(spec).table);
    const reg = await enqueueIntent(t.db, spec, 'vpc:w', register('w'));
    const dereg = await enqueueIntent(t.db, spec, 'vpc:w', deregister('w'));
    const other = await enqueueIntent(t.db, spec, 'vpc:v', register('v'));
    const otherNext = await enqueueIntent(t.db, spec, 'vpc:v', register('v'));
    await poison(t.db, spec, reg);
    await deliver(t.db, spec, dereg);
    await poison(t.db, spec, other);

    const holder = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select id from ${table} where id = ${otherNext} for update`.execute(holder.trx);
      const passing = createReconciler({ db: t.kysely({ max: 2 }), spec, logger: recordingLogger() });
      const retiring = createReconciler({ db: t.kysely({ max: 2 }), spec, logger: recordingLogger() });
      const pass = passing.redrivePoisoned();
      await waitForLockWaiters(t.db, 1, 'transactionid');
      const retire = retiring.retire([reg], 'deregistered while OpenFGA was down');
      await waitForLockWaiters(t.db, 2);
      expect(await settlesWithin(retire, 200)).toBe(false);

      await holder.rollback();
      expect(ids((await pass).revived)).toEqual([other]);
      expect(ids(await retire)).toEqual([reg]);
      expect(await readRow(t.db, spec, reg)).toMatchObject({ retired: true });
    } finally {
      await holder.rollback();
    }
  });
});
