import { OutboxConfigError, readOutboxActions, traceOutboxAction, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { compactOutbox, createReconciler, DiscardRefusedError } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  poison,
  readRow,
  recordingLogger,
  refuse,
  register,
} from './testing/outbox-fixture.js';

// The reconciler's calls with `record`: the actions log's row commits with the change it records, or neither does.
const t = useTestDatabase();
const entries = (spec: OutboxSpec) => readOutboxActions(t.db, spec);
const reconcilerOf = (spec: OutboxSpec) => createReconciler({ db: t.db, spec, logger: recordingLogger() });

/** `count` poisoned rows of their own partitions (revivable, discardable). */
async function poisoned(spec: OutboxSpec, count: number, prefix = 'p'): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 1) {
    const id = await enqueueIntent(t.db, spec, `vpc:${prefix}${i}`, register(`${prefix}${i}`));
    await poison(t.db, spec, id);
    ids.push(id);
  }
  return ids;
}

describe('discard and retire with record', () => {
  test('one row in the transaction that closed the rows; a refused call changes nothing and records nothing', async () => {
    const spec = await createTestOutbox(t.db);
    const reconciler = reconcilerOf(spec);
    const [a, b] = await poisoned(spec, 2);
    const record = traceOutboxAction(spec, { actor: 'alice', action: 'discard', reason: 'not wanted' });
    const deliverable = await enqueueIntent(t.db, spec, 'vpc:fresh', register('fresh'));
    await expect(
      reconciler.discardPoisoned({ ids: [a!, deliverable], reason: 'not wanted', record }),
    ).rejects.toBeInstanceOf(DiscardRefusedError);
    expect(await entries(spec)).toEqual([]);
    await reconciler.discardPoisoned({ ids: [b!, a!], reason: 'not wanted', record });
    expect(await entries(spec)).toEqual([
      expect.objectContaining({
        actor: 'alice',
        action: 'discard',
        ids: [a, b],
        counts: { discarded: 2 },
        reason: 'not wanted',
      }),
    ]);
  });

  test('a trace of another action, table or reason is an OutboxConfigError before anything is closed', async () => {
    const spec = await createTestOutbox(t.db);
    const other = await createTestOutbox(t.db);
    const reconciler = reconcilerOf(spec);
    const superseded = await enqueueIntent(t.db, spec, 'vpc:s', register('s'));
    const successor = await enqueueIntent(t.db, spec, 'vpc:s', deregister('s'));
    await poison(t.db, spec, superseded);
    await deliver(t.db, spec, successor);
    for (const record of [
      traceOutboxAction(spec, { actor: 'alice', action: 'discard', reason: 'gone' }),
      traceOutboxAction(other, { actor: 'alice', action: 'retire', reason: 'gone' }),
      traceOutboxAction(spec, { actor: 'alice', action: 'retire', reason: 'another reason' }),
    ]) {
      const error = await reconciler.retire([superseded], 'gone', { record }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxConfigError);
      expect((error as OutboxConfigError).field).toBe('record');
    }
    expect((await readRow(t.db, spec, superseded)).retired).toBe(false);
    const record = traceOutboxAction(spec, { actor: 'bob', action: 'retire', reason: 'gone' });
    await reconciler.retire([superseded], ' gone ', { record });
    expect(await entries(spec)).toMatchObject([{ actor: 'bob', action: 'retire', ids: [superseded], reason: 'gone' }]);
    expect(await entries(other)).toEqual([]);
  });
});

describe('redrive with record', () => {
  test("a trace's passes make one row, each pass's revivals committed with its part; a pass that changes nothing adds nothing", async () => {
    const spec = await createTestOutbox(t.db);
    const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger(), batchSize: 2 });
    const ids = await poisoned(spec, 3);
    const refused = await enqueueIntent(t.db, spec, 'vpc:r', register('r'));
    await refuse(t.db, spec, refused);
    const record = traceOutboxAction(spec, { actor: 'alice', action: 'redrive' });
    const first = await reconciler.redrivePoisoned({ refused: true, reason: 'operator', record });
    expect(first.more).toBe(true);
    const second = await reconciler.redrivePoisoned({ record });
    const revived = [...first.revived, ...second.revived].map((r) => r.id);
    expect(revived.sort()).toEqual([...ids, refused].sort());
    expect(await entries(spec)).toEqual([
      expect.objectContaining({
        actor: 'alice',
        action: 'redrive',
        ids: revived,
        counts: { revived: 4, requested: 1 },
      }),
    ]);
    expect((await reconciler.redrivePoisoned({ record })).revived).toEqual([]);
    await reconciler.redrivePoisoned({ dryRun: true, record });
    expect(await entries(spec)).toHaveLength(1);
    // Without record, nothing is recorded: the services' scheduled passes are not operator actions.
    await poisoned(spec, 1, 'q');
    expect((await reconciler.redrivePoisoned()).revived).toHaveLength(1);
    expect(await entries(spec)).toHaveLength(1);
  });
});

describe('compaction with record', () => {
  test("each batch that deletes adds its counts to the run's one row; a dry run and a run that deletes nothing record nothing", async () => {
    const spec = await createTestOutbox(t.db);
    for (let i = 0; i < 5; i += 1) {
      for (const payload of [register(`c${i}`), deregister(`c${i}`)])
        await deliver(t.db, spec, await enqueueIntent(t.db, spec, `vpc:c${i}`, payload));
    }
    const options = { db: t.db, spec, retentionMs: 0, batchSize: 3 };
    const dry = await compactOutbox({
      ...options,
      dryRun: true,
      record: traceOutboxAction(spec, { actor: 'alice', action: 'compact' }),
    });
    expect(dry.deleted).toBe(5);
    expect(await entries(spec)).toEqual([]);
    const record = traceOutboxAction(spec, { actor: 'alice', action: 'compact' });
    const result = await compactOutbox({ ...options, record });
    expect(result).toMatchObject({ deleted: 5, delivered: 5, closed: 0 });
    expect(result.batches).toBeGreaterThan(1);
    expect(await entries(spec)).toEqual([
      expect.objectContaining({
        actor: 'alice',
        action: 'compact',
        ids: [],
        counts: { deleted: 5, delivered: 5, closed: 0 },
      }),
    ]);
    await compactOutbox({ ...options, record: traceOutboxAction(spec, { actor: 'alice', action: 'compact' }) });
    expect(await entries(spec)).toHaveLength(1);
    const left = await sql<{ n: number }>`select count(*)::int as n from ${sql.raw(tableNames(spec).table)}`.execute(
      t.db,
    );
    expect(left.rows[0]?.n).toBe(5);
  });
});
