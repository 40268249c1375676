import { sql } from 'kysely';
import { partitionLockKey, promoteHeads, tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deregister,
  enqueueIntent,
  headViolations,
  heads,
  openTransaction,
  poison,
  readRow,
  recordingLogger,
  register,
  settlesWithin,
  waitForLockWaiters,
} from './testing/outbox-fixture.js';

// A pass sees every delivery that could race it (docs/design.md §6, "No snapshot window").
const t = useTestDatabase();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

describe('a successor being delivered while the pass runs', () => {
  test('the pass waits for the drainer; when it delivers the deregister, the register is not revived', async () => {
    const spec = await createTestOutbox(t.db);
    const table = sql.raw(tableNames(spec).table);
    const reg = await enqueueIntent(t.db, spec, 'vpc:r', register('r'));
    const dereg = await enqueueIntent(t.db, spec, 'vpc:r', deregister('r'));
    await poison(t.db, spec, reg);
    expect(await heads(t.db, spec)).toEqual([dereg]);

    // The drainer has claimed the deregister and is talking to OpenFGA.
    const drainer = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select id from ${table} where id = ${dereg} for update`.execute(drainer.trx);
      const pass = createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
      await waitForLockWaiters(t.db, 1, 'transactionid');
      expect(await settlesWithin(pass, 300)).toBe(false);

      await sql`update ${table} set sent_at = now(), is_head = false where id = ${dereg}`.execute(drainer.trx);
      await promoteHeads(drainer.trx, spec, ['vpc:r']);
      await drainer.commit();

      const result = await pass;
      expect(result.revived).toEqual([]);
      expect(ids(result.superseded)).toEqual([reg]);
      expect(await readRow(t.db, spec, reg)).toMatchObject({ attempt_count: spec.maxAttempts, is_head: false });
      expect(await heads(t.db, spec)).toEqual([]);
    } finally {
      await drainer.rollback();
    }
  });

  test('when the drainer rolls back (a transient failure), the pass revives the register ahead of it', async () => {
    const spec = await createTestOutbox(t.db);
    const table = sql.raw(tableNames(spec).table);
    const reg = await enqueueIntent(t.db, spec, 'vpc:s', register('s'));
    const dereg = await enqueueIntent(t.db, spec, 'vpc:s', deregister('s'));
    await poison(t.db, spec, reg);

    const drainer = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select id from ${table} where id = ${dereg} for update`.execute(drainer.trx);
      const pass = createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
      await waitForLockWaiters(t.db, 1, 'transactionid');
      expect(await settlesWithin(pass, 300)).toBe(false);
      await drainer.rollback();

      const result = await pass;
      expect(ids(result.revived)).toEqual([reg]);
      expect(result.superseded).toEqual([]);
      expect(await heads(t.db, spec)).toEqual([reg]);
      expect(await readRow(t.db, spec, dereg)).toMatchObject({ is_head: false, delivered: false });
      expect(await headViolations(t.db, spec)).toEqual([]);
    } finally {
      await drainer.rollback();
    }
  });

  test('a row committed after the pass locked the partition and claimed by a drainer defers the revival', async () => {
    const spec = await createTestOutbox(t.db);
    const names = tableNames(spec);
    const table = sql.raw(names.table);
    const reg = await enqueueIntent(t.db, spec, 'vpc:d', register('d'));
    await poison(t.db, spec, reg);

    // An enqueue holds the partition's advisory lock: the pass has row-locked the partition's
    // pending rows (step 3) and now waits for the partition lock (step 4).
    const writer = await openTransaction(t.kysely({ max: 1 }));
    const drainer = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select pg_advisory_xact_lock(${partitionLockKey(spec, sql`${'vpc:d'}::text`)})`.execute(writer.trx);
      const logger = recordingLogger();
      const reconciler = createReconciler({ db: t.db, spec, logger });
      const pass = reconciler.redrivePoisoned();
      await waitForLockWaiters(t.db, 1, 'advisory');

      // Meanwhile a deregister lands (by hand: the real enqueue would queue behind the lock) and a
      // drainer claims it at once.
      const late = await sql<{ id: string }>`
        insert into ${table} (${sql.raw(names.partition)}, payload, is_head)
        values ('vpc:d', ${JSON.stringify(deregister('d'))}::jsonb, true) returning id::text as id`.execute(t.db);
      const dereg = late.rows[0]!.id;
      await sql`select id from ${table} where id = ${dereg} for update`.execute(drainer.trx);
      await writer.commit();

      const result = await pass;
      expect(result.revived).toEqual([]);
      expect(result.superseded).toEqual([]);
      expect(ids(result.deferred)).toEqual([reg]);
      expect(await readRow(t.db, spec, reg)).toMatchObject({ attempt_count: spec.maxAttempts, is_head: false });
      expect(logger.entries.some((e) => e.level === 'info' && /deferred/.test(e.message))).toBe(true);

      // The drainer was delivering it: reviving the register would have replayed it afterwards.
      await sql`update ${table} set sent_at = now(), is_head = false where id = ${dereg}`.execute(drainer.trx);
      await drainer.commit();
      const next = await reconciler.redrivePoisoned();
      expect(ids(next.superseded)).toEqual([reg]);
      expect(next.revived).toEqual([]);
    } finally {
      await writer.rollback();
      await drainer.rollback();
    }
  });
});
