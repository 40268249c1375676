import { sql } from 'kysely';
import { defineOutbox, OutboxConfigError, setMaxAttempts, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  headViolations,
  openTransaction,
  poison,
  readRow,
  recordingLogger,
  register,
  waitForLockWaiters,
} from './testing/outbox-fixture.js';

// Which rows are poisoned follows the table's recorded maxAttempts, across setMaxAttempts.
const t = useTestDatabase();

const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

/** The heads a drainer's claim would read (it claims only heads, due first). */
async function claimable(spec: OutboxSpec): Promise<string[]> {
  const names = tableNames(spec);
  const result = await sql<{ id: string }>`
    select id::text as id from ${sql.raw(names.table)}
    where is_head and next_attempt_at <= now() and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}
    order by id`.execute(t.db);
  return ids(result.rows);
}

describe('after a change of maxAttempts (setMaxAttempts)', () => {
  test('raised: rows poisoned under the old value are redriven by the new spec, and a superseded one is reported, never revived', async () => {
    const old = await createTestOutbox(t.db, { maxAttempts: 3 });
    const raised = defineOutbox({ table: old.table, partitionColumn: old.partitionColumn, maxAttempts: 6 });
    const stuck = await enqueueIntent(t.db, old, 'vpc:a', register('a'));
    const next = await enqueueIntent(t.db, old, 'vpc:a', deregister('a'));
    const reg = await enqueueIntent(t.db, old, 'vpc:b', register('b'));
    const dereg = await enqueueIntent(t.db, old, 'vpc:b', deregister('b'));
    await poison(t.db, old, stuck);
    await poison(t.db, old, reg, 'validation_error: type vpc not found');
    await deliver(t.db, old, dereg);

    // The new spec's reconciler refuses to run before the migration…
    await expect(
      createReconciler({ db: t.db, spec: raised, logger: recordingLogger() }).redrivePoisoned(),
    ).rejects.toSatisfy((e) => e instanceof OutboxConfigError && e.field === 'maxAttempts');
    expect(await setMaxAttempts(t.db, raised)).toEqual({ from: 3, to: 6, adjusted: 2 });
    expect(await headViolations(t.db, raised)).toEqual([]);

    // …and after it, the rows poisoned under 3 are still poisoned under 6: the pass sees them.
    const result = await createReconciler({ db: t.db, spec: raised, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(result.revived)).toEqual([stuck]);
    expect(ids(result.superseded)).toEqual([reg]);
    expect(await readRow(t.db, raised, stuck)).toMatchObject({ attempt_count: 0, is_head: true });
    expect(await readRow(t.db, raised, next)).toMatchObject({ is_head: false });
    expect(await readRow(t.db, raised, reg)).toMatchObject({ attempt_count: 6, is_head: false });
    expect(await claimable(raised)).toEqual([stuck]);
    expect(await headViolations(t.db, raised)).toEqual([]);
  });

  const isMaxAttemptsChanged = (recorded: number, counted: number) => (e: unknown) =>
    e instanceof OutboxConfigError &&
    e.field === 'maxAttempts' &&
    e.message.includes(`records maxAttempts ${recorded}`) &&
    e.message.includes(`this reconciler counts with ${counted}`);

  test('a reconciler left running across it refuses its passes and retire (changing nothing) until restarted with the new spec', async () => {
    const old = await createTestOutbox(t.db, { maxAttempts: 6 });
    const lowered = defineOutbox({ table: old.table, partitionColumn: old.partitionColumn, maxAttempts: 3 });
    const running = createReconciler({ db: t.db, spec: old, logger: recordingLogger() });
    expect((await running.redrivePoisoned()).revived).toEqual([]); // verified against the table: it records 6
    const stuck = await enqueueIntent(t.db, old, 'vpc:a', register('a'));
    const next = await enqueueIntent(t.db, old, 'vpc:a', deregister('a'));
    expect(await setMaxAttempts(t.db, lowered)).toEqual({ from: 6, to: 3, adjusted: 0 });
    // The new drainers poison the head at 3 attempts; the partition moves on to `next`.
    await poison(t.db, lowered, stuck);

    // Counting with 6, the running reconciler would find nothing poisoned and leave `stuck` for good.
    await expect(running.redrivePoisoned()).rejects.toSatisfy(isMaxAttemptsChanged(3, 6));
    await expect(running.retire([stuck], 'by hand')).rejects.toSatisfy(isMaxAttemptsChanged(3, 6));
    expect(await readRow(t.db, lowered, stuck)).toMatchObject({ attempt_count: 3, is_head: false, retired: false });

    const restarted = await createReconciler({ db: t.db, spec: lowered, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(restarted.revived)).toEqual([stuck]);
    expect(await readRow(t.db, lowered, next)).toMatchObject({ is_head: false });
    expect(await headViolations(t.db, lowered)).toEqual([]);
  });

  test('a setMaxAttempts that commits while a pass waits for its row locks makes that pass refuse, not decide with the old value', async () => {
    const old = await createTestOutbox(t.db, { maxAttempts: 6 });
    const lowered = defineOutbox({ table: old.table, partitionColumn: old.partitionColumn, maxAttempts: 3 });
    const stuck = await enqueueIntent(t.db, old, 'vpc:a', register('a'));
    await enqueueIntent(t.db, old, 'vpc:a', deregister('a'));
    await poison(t.db, old, stuck);
    const running = createReconciler({ db: t.db, spec: old, logger: recordingLogger() });
    await running.redrivePoisoned(); // verified; revives `stuck`
    await poison(t.db, old, stuck);

    // The migration runs first and holds the table in EXCLUSIVE mode; the pass finds its candidate,
    // then waits at its row locks until the migration commits.
    const migration = await openTransaction(t.db);
    expect(await setMaxAttempts(migration.trx, lowered)).toEqual({ from: 6, to: 3, adjusted: 0 });
    const pass = running.redrivePoisoned();
    void pass.catch(() => undefined);
    await waitForLockWaiters(t.db, 1, 'relation');
    await migration.commit();

    await expect(pass).rejects.toSatisfy(isMaxAttemptsChanged(3, 6));
    expect(await readRow(t.db, lowered, stuck)).toMatchObject({ attempt_count: 6, last_error: 'OpenFGA unreachable' });
  });
});
