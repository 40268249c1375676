/**
 * The races DESIGN §6 says a pass must close, played deterministically on separate connections:
 * a "drainer" is a transaction that holds row locks, as a real one does while it delivers.
 */
import { sql } from 'kysely';
import { enqueue } from '@outbox/outbox';
import { partitionLockKey, promoteHeads, tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
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
    const n = tableNames(spec);
    const table = sql.raw(n.table);
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
        insert into ${table} (${sql.raw(n.partition)}, payload, is_head)
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
      expect(skipped).toEqual({ revived: [], superseded: [], deferred: [], skipped: true, more: false, moreSuperseded: false });
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

describe('a drainer that stays stuck', () => {
  test('the pass waits at most lockTimeoutMs, then defers only the held partition and revives the others; nothing of it stays held', async () => {
    const spec = await createTestOutbox(t.db);
    const table = sql.raw(tableNames(spec).table);
    const a = await enqueueIntent(t.db, spec, 'vpc:free', register('free'));
    await enqueueIntent(t.db, spec, 'vpc:free', deregister('free'));
    const b = await enqueueIntent(t.db, spec, 'vpc:stuck', register('stuck'));
    const bNext = await enqueueIntent(t.db, spec, 'vpc:stuck', deregister('stuck'));
    await poison(t.db, spec, a);
    await poison(t.db, spec, b);

    // A drainer claimed vpc:stuck's head and its sink hangs.
    const drainer = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select id from ${table} where id = ${bNext} for update`.execute(drainer.trx);
      const reconciler = createReconciler({ db: t.db, spec, lockTimeoutMs: 300, logger: recordingLogger() });
      const started = Date.now();
      const result = await reconciler.redrivePoisoned();
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(result).toMatchObject({ skipped: false, more: true });
      expect(ids(result.revived)).toEqual([a]);
      expect(ids(result.deferred)).toEqual([b]);
      // Nothing of the pass is held: vpc:free's head (the revived row) can be claimed (NOWAIT would fail on a lock).
      await sql`select id from ${table} where id = ${a} for update nowait`.execute(t.db);
      expect(await readRow(t.db, spec, a)).toMatchObject({ attempt_count: 0, is_head: true });
      expect(await readRow(t.db, spec, b)).toMatchObject({ attempt_count: spec.maxAttempts });
      expect(await headViolations(t.db, spec)).toEqual([]);
    } finally {
      await drainer.rollback();
    }
    // The drainer gave up: the next pass revives the other one.
    const next = await createReconciler({ db: t.db, spec, lockTimeoutMs: 300, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(next.revived)).toEqual([b]);
    expect(await headViolations(t.db, spec)).toEqual([]);
  });

  test('a transaction left open after an enqueue holds one partition: only that partition waits, every other is revived', async () => {
    const spec = await createTestOutbox(t.db);
    const held = await enqueueIntent(t.db, spec, 'vpc:held', register('held'));
    const others = [];
    for (const name of ['o1', 'o2', 'o3']) others.push(await enqueueIntent(t.db, spec, `vpc:${name}`, register(name)));
    for (const id of [held, ...others]) await poison(t.db, spec, id);

    // A request enqueued into vpc:held and has not committed yet (slow work, a leaked connection).
    const request = await openTransaction(t.kysely({ max: 1 }));
    try {
      await enqueue(request.trx, spec, { partitionKey: 'vpc:held', payload: deregister('held') });
      for (let pass = 0; pass < 2; pass += 1) {
        const result = await createReconciler({ db: t.db, spec, lockTimeoutMs: 200, logger: recordingLogger() }).redrivePoisoned();
        expect(ids(result.deferred)).toEqual([held]);
        expect(ids(result.revived)).toEqual(pass === 0 ? others : []);
        expect(result.more).toBe(true);
      }
      expect(await headViolations(t.db, spec)).toEqual([]);
    } finally {
      await request.rollback();
    }
    const next = await createReconciler({ db: t.db, spec, lockTimeoutMs: 200, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(next.revived)).toEqual([held]);
    expect(await headViolations(t.db, spec)).toEqual([]);
  });
});
