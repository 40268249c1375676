import { enqueue, type TupleKey } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { auditWorld, resourceTuples, type AuditWorld } from './testing/audit-fixture.js';
import { auditOutbox, RepairBudgetError, repairOutbox } from './index.js';
import { openTransaction, waitForLockWaiters } from './testing/outbox-fixture.js';
import { correctionIntents } from './repair-intents.js';

const t = useTestDatabase();

async function agreed(ids = ['a', 'b', 'c']): Promise<AuditWorld> {
  const world = await auditWorld(t.db);
  for (const id of ids) await world.create(id);
  await world.drain();
  return world;
}

const mallory: TupleKey = { user: 'user:mallory', relation: 'viewer', object: 'vpc:a' };

/** Drift of every kind: an added tuple, a deleted one, an orphan (row deleted by hand). */
async function drift(world: AuditWorld): Promise<void> {
  await world.client.write({ writes: [mallory], deletes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:b' }] });
  await sql`delete from ${sql.raw(world.table)} where id = 'c'`.execute(t.db);
}

describe('repairOutbox', () => {
  test('a dry run (the default) reports the corrections and enqueues nothing', async () => {
    const world = await agreed();
    await drift(world);
    const before = await world.intents();
    const plan = await repairOutbox(world.target);
    expect(plan).toMatchObject({
      dryRun: true,
      partitions: 3,
      intents: 3,
      writes: 1,
      deletes: 3,
      withinBudget: true,
      enqueued: [],
    });
    expect(plan.sample).toEqual([
      { partitionKey: 'vpc:a', writes: [], deletes: [mallory] },
      { partitionKey: 'vpc:b', writes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:b' }], deletes: [] },
      { partitionKey: 'vpc:c', writes: [], deletes: expect.arrayContaining(resourceTuples('c', 'p1', 'ann')) },
    ]);
    expect(await world.intents()).toBe(before);
  });

  test('enqueues the corrections as ordinary intents; once delivered, the audit is clean and a second repair enqueues nothing', async () => {
    const world = await agreed();
    await drift(world);
    const before = await world.intents();
    const done = await repairOutbox({ ...world.target, dryRun: false });
    expect(done).toMatchObject({ dryRun: false, partitions: 3, intents: 3, writes: 1, deletes: 3 });
    expect(done.enqueued).toHaveLength(3);
    expect(await world.intents()).toBe(before + 3);
    // Nothing reached OpenFGA on the side: the corrections wait for the drainer.
    expect(await world.storedOn('vpc:a')).toContain('user:mallory viewer vpc:a');
    const rows = await sql<{ key: string; payload: Record<string, unknown> }>`
      select resource_id as key, payload from ${sql.raw(`"${world.spec.schema}"."${world.spec.tableName}"`)}
      where id = any(${done.enqueued}::bigint[]) order by resource_id`.execute(t.db);
    expect(rows.rows.map((r) => [r.key, r.payload.source])).toEqual([
      ['vpc:a', 'repair'],
      ['vpc:b', 'repair'],
      ['vpc:c', 'repair'],
    ]);

    expect(await world.drain()).toBe(3);
    expect(await world.storedOn('vpc:a')).toEqual(['project:p1 project vpc:a', 'user:ann owner vpc:a']);
    expect(await world.storedOn('vpc:b')).toEqual(['project:p1 project vpc:b', 'user:ann owner vpc:b']);
    expect(await world.storedOn('vpc:c')).toEqual([]);
    expect((await auditOutbox(world.target)).drifted).toBe(0);
    expect(await repairOutbox({ ...world.target, dryRun: false })).toMatchObject({ intents: 0, enqueued: [] });
    expect(await world.intents()).toBe(before + 3);
  });

  test("a wiped store is rebuilt to the owner's state", async () => {
    const ids = Array.from({ length: 60 }, (_, i) => `w${String(i).padStart(2, '0')}`);
    const world = await agreed(ids);
    // Wipe: delete every tuple of the store (a restore from an empty backup, a wrong script).
    for (;;) {
      const { tuples } = await world.client.read({}, { pageSize: 100 });
      if (tuples.length === 0) break;
      await world.client.write({
        deletes: tuples.map((x) => ({ user: x.key.user, relation: x.key.relation, object: x.key.object })),
      });
    }
    expect(await auditOutbox(world.target)).toMatchObject({ drifted: 60, missing: { partitions: 60, tuples: 120 } });

    const done = await repairOutbox({ ...world.target, dryRun: false, batchSize: 25 });
    expect(done).toMatchObject({ partitions: 60, intents: 60, writes: 120, deletes: 0 });
    await world.drain();
    expect(await auditOutbox(world.target)).toMatchObject({ drifted: 0, liveTuplesRead: 120 });
    expect(await world.storedOn('vpc:w07')).toEqual(['project:p1 project vpc:w07', 'user:ann owner vpc:w07']);
  });

  test('the delete budget refuses an over-large prune before enqueuing anything; raised, the prune is split into intents of at most 100', async () => {
    const world = await agreed();
    const viewers = Array.from({ length: 150 }, (_, i) => ({
      user: `user:v${i}`,
      relation: 'viewer',
      object: 'vpc:a',
    }));
    for (let from = 0; from < viewers.length; from += 100)
      await world.client.write({ writes: viewers.slice(from, from + 100) });
    const before = await world.intents();

    const error = await repairOutbox({ ...world.target, dryRun: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RepairBudgetError);
    expect(error).toMatchObject({
      table: world.spec.table,
      deletes: 150,
      maxDeletes: 100,
      partitions: 1,
      enqueued: [],
    });
    expect((error as Error).message).toMatch(
      /would delete 150 tuples .* more than maxDeletes 100: nothing was enqueued.*maxDeletes: 150/s,
    );
    expect(await world.intents()).toBe(before);
    // The dry run says so instead of throwing.
    expect(await repairOutbox(world.target)).toMatchObject({ withinBudget: false, deletes: 150, intents: 2 });

    const done = await repairOutbox({ ...world.target, dryRun: false, maxDeletes: 150 });
    expect(done).toMatchObject({ partitions: 1, intents: 2, deletes: 150 });
    await world.drain();
    expect(await world.storedOn('vpc:a')).toEqual(['project:p1 project vpc:a', 'user:ann owner vpc:a']);
  });

  test('decides from the owner read under the lock: a row deleted between the audit and the enqueue is not re-granted', async () => {
    const world = await agreed();
    await world.client.write({ deletes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:a' }] }); // drift: missing
    // A user's delete of vpc:a, in flight: its row is gone and its deregistration enqueued (the
    // partition's lock held), not yet committed. The audit cannot see it.
    const user = await openTransaction(t.db);
    await sql`delete from ${sql.raw(world.table)} where id = 'a'`.execute(user.trx);
    await enqueue(user.trx, world.spec, {
      partitionKey: 'vpc:a',
      payload: { deletes: resourceTuples('a', 'p1', 'ann') },
    });

    const repair = repairOutbox({ ...world.target, dryRun: false });
    await waitForLockWaiters(t.db, 1, 'advisory'); // planned the re-grant, waits for the partition
    await user.commit();
    const done = await repair;
    // Under the lock it saw the delete's intent pending: nothing enqueued over it.
    expect(done).toMatchObject({ intents: 0, skippedPending: 1, enqueued: [] });
    await world.drain();
    expect(await world.storedOn('vpc:a')).toEqual([]);
    expect((await auditOutbox(world.target)).drifted).toBe(0);
  });

  test('partitionKeys limits the repair to those partitions', async () => {
    const world = await agreed();
    await drift(world);
    const done = await repairOutbox({ ...world.target, dryRun: false, partitionKeys: ['vpc:b'] });
    expect(done).toMatchObject({ partitions: 1, writes: 1, deletes: 0 });
    await world.drain();
    expect((await auditOutbox(world.target)).drifted).toBe(2);
  });
});

describe('correctionIntents', () => {
  test('deletes first, at most 100 operations an intent, a key stored with another condition deleted before it is written', () => {
    const plain = { user: 'user:bob', relation: 'viewer', object: 'project:p1' };
    const conditioned = {
      ...plain,
      condition: { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } },
    };
    const intents = correctionIntents('user:bob|project:p1', [plain], [conditioned]);
    expect(intents.map((i) => i.payload)).toEqual([
      { deletes: [plain], source: 'repair' },
      { writes: [plain], source: 'repair' },
    ]);
    const many = Array.from({ length: 130 }, (_, i) => ({ user: `user:u${i}`, relation: 'viewer', object: 'vpc:a' }));
    const split = correctionIntents('vpc:a', many.slice(0, 30), many.slice(30));
    expect(split.map((i) => [i.payload.deletes?.length ?? 0, i.payload.writes?.length ?? 0])).toEqual([
      [100, 0],
      [0, 30],
    ]);
  });
});
