import { sql } from 'kysely';
import { enqueue } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deregister,
  enqueueIntent,
  headViolations,
  openTransaction,
  poison,
  readRow,
  recordingLogger,
  register,
} from './testing/outbox-fixture.js';

// A stuck drainer or an open enqueue delays only its own partition (lockTimeoutMs).
const t = useTestDatabase();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

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
    const next = await createReconciler({
      db: t.db,
      spec,
      lockTimeoutMs: 300,
      logger: recordingLogger(),
    }).redrivePoisoned();
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
        const result = await createReconciler({
          db: t.db,
          spec,
          lockTimeoutMs: 200,
          logger: recordingLogger(),
        }).redrivePoisoned();
        expect(ids(result.deferred)).toEqual([held]);
        expect(ids(result.revived)).toEqual(pass === 0 ? others : []);
        expect(result.more).toBe(true);
      }
      expect(await headViolations(t.db, spec)).toEqual([]);
    } finally {
      await request.rollback();
    }
    const next = await createReconciler({
      db: t.db,
      spec,
      lockTimeoutMs: 200,
      logger: recordingLogger(),
    }).redrivePoisoned();
    expect(ids(next.revived)).toEqual([held]);
    expect(await headViolations(t.db, spec)).toEqual([]);
  });
});
