import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { defineOutbox, type OutboxSpec } from './define-outbox.js';
import { enqueue, enqueueMany, type EnqueueInput } from './enqueue.js';
import { OutboxConfigError } from './errors.js';
import { promoteHeads } from './protocol/heads.js';
import { recordedMaxAttempts, setMaxAttempts } from './max-attempts.js';
import { createOutboxTable } from './schema/migration.js';
import { outboxStats } from './stats.js';
import { tableNames } from './table-names.js';
import { verifyOutboxTable } from './schema/verify.js';
import type { AnyKysely } from './any-kysely.js';

const t = useTestDatabase();

let tables = 0;
/** A fresh table created with maxAttempts `created`, and a spec of it per maxAttempts asked for. */
async function freshOutbox(created: number): Promise<(maxAttempts: number) => OutboxSpec> {
  tables += 1;
  const table = `attempts.outbox_${tables}`;
  const specOf = (maxAttempts: number) => defineOutbox({ table, partitionColumn: 'resource_id', maxAttempts });
  await createOutboxTable(t.db, specOf(created));
  return specOf;
}

const intent = (partitionKey: string): EnqueueInput => ({
  partitionKey,
  payload: { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] },
});

/** Enqueues `keys` in one committed transaction with `spec`; returns their ids. */
const enqueued = (spec: OutboxSpec, ...keys: string[]) =>
  t.db.transaction().execute((trx) => enqueueMany(trx, spec, keys.map(intent)));

const table = (spec: OutboxSpec) => sql.raw(tableNames(spec).table);

async function update(spec: OutboxSpec, set: string, id: string, db: AnyKysely = t.db): Promise<void> {
  await sql`update ${table(spec)} set ${sql.raw(set)} where id = ${id}`.execute(db);
}

/** What the drainer does to a row that fails for the last time under `spec`: poison, demote, promote the next. */
async function poisonAsTheDrainerDoes(spec: OutboxSpec, id: string): Promise<void> {
  await t.db.transaction().execute(async (trx) => {
    const row = await sql<{ key: string }>`
      update ${table(spec)} set attempt_count = ${spec.maxAttempts}, last_error = 'refused', is_head = false
      where id = ${id} returning resource_id as key`.execute(trx);
    await promoteHeads(trx, spec, [row.rows[0]!.key]);
  });
}

async function attempts(spec: OutboxSpec): Promise<Record<string, number>> {
  const result = await sql<{
    id: string;
    attempt_count: number;
  }>`select id, attempt_count from ${table(spec)} order by id`.execute(t.db);
  return Object.fromEntries(result.rows.map((r) => [r.id, r.attempt_count]));
}

async function heads(spec: OutboxSpec): Promise<string[]> {
  const result = await sql<{ id: string }>`select id from ${table(spec)} where is_head order by id`.execute(t.db);
  return result.rows.map((r) => r.id);
}

/**
 * The partitions breaking the head invariant under `maxAttempts`: their heads are not exactly
 * [their earliest deliverable row] (or [] when they have none).
 */
async function invariantViolations(spec: OutboxSpec, maxAttempts: number): Promise<string[]> {
  const result = await sql<{ key: string }>`
    select k.key from (select distinct resource_id as key from ${table(spec)}) k
    where array(select id from ${table(spec)} x where x.resource_id = k.key and x.is_head order by id)
      is distinct from array(
        select id from ${table(spec)} x
        where x.resource_id = k.key and x.sent_at is null and x.retired_at is null and x.attempt_count < ${maxAttempts}
        order by id limit 1)`.execute(t.db);
  return result.rows.map((r) => r.key);
}

/** The heads the drainer's claim function takes now, counting with `maxAttempts` (heads only, no runs). */
async function claimedHeads(spec: OutboxSpec, maxAttempts: number): Promise<string[]> {
  return t.db.transaction().execute(async (trx) => {
    const result = await sql<{ id: string }>`
      select id from ${sql.raw(tableNames(spec).claimFunction)}(100, 100, ${maxAttempts}, false, true, '{}', true) order by id`.execute(
      trx,
    );
    return result.rows.map((r) => String(r.id));
  });
}

async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const settled = Symbol('settled');
  const outcome = await Promise.race([
    promise.then(
      () => settled,
      () => settled,
    ),
    sleep(ms).then(() => 'pending'),
  ]);
  return outcome === settled;
}

const refusedMaxAttempts = (spec: OutboxSpec, recorded: number) => (e: unknown) =>
  e instanceof OutboxConfigError &&
  e.field === 'maxAttempts' &&
  e.message.includes(`the spec says ${spec.maxAttempts}, but ${spec.table} records ${recorded}`) &&
  e.message.includes('setMaxAttempts(db, spec)');

describe('the table records maxAttempts', () => {
  test('createOutboxTable records the spec’s value; verifyOutboxTable accepts that spec', async () => {
    const specOf = await freshOutbox(2);
    expect(await recordedMaxAttempts(t.db, specOf(2))).toBe(2);
    await expect(verifyOutboxTable(t.db, specOf(2))).resolves.toBeUndefined();
  });

  test('verifyOutboxTable refuses a spec with another maxAttempts, raised or lowered, with an OutboxConfigError naming both values', async () => {
    const specOf = await freshOutbox(4);
    await expect(verifyOutboxTable(t.db, specOf(5))).rejects.toSatisfy(refusedMaxAttempts(specOf(5), 4));
    await expect(verifyOutboxTable(t.db, specOf(3))).rejects.toSatisfy(refusedMaxAttempts(specOf(3), 4));
  });

  test('a writer whose spec has another value than the table counts with the table’s: raising without the migration no longer strands the partition', async () => {
    // The reported case: a row poisoned under maxAttempts 2, then the spec changed to 5.
    const specOf = await freshOutbox(2);
    const [a1] = await enqueued(specOf(2), 'vpc:a');
    await poisonAsTheDrainerDoes(specOf(2), a1!);
    const [a2] = await enqueued(specOf(5), 'vpc:a');
    // Counting with 5, a1 (2 attempts) would look deliverable and a2 would be inserted a non-head:
    // a partition with no head, which no drainer ever claims.
    expect(await heads(specOf(2))).toEqual([a2]);
    expect(await invariantViolations(specOf(2), 2)).toEqual([]);
    expect(await claimedHeads(specOf(2), 2)).toEqual([a2]);
    // …and a drainer or reconciler with the new spec refuses to start until the migration ran.
    await expect(verifyOutboxTable(t.db, specOf(5))).rejects.toSatisfy(refusedMaxAttempts(specOf(5), 2));
  });

  test('a writer still running with the old spec after setMaxAttempts counts with the new value: no second head', async () => {
    const specOf = await freshOutbox(2);
    await setMaxAttempts(t.db, specOf(5));
    const [b1] = await enqueued(specOf(5), 'vpc:b');
    await update(specOf(5), 'attempt_count = 3', b1!); // retried three times: deliverable under 5
    const [b2] = await enqueued(specOf(2), 'vpc:b'); // an old writer: under 2, b1 would look poisoned
    expect(await heads(specOf(5))).toEqual([b1]);
    expect(b2).toBeDefined();
    expect(await invariantViolations(specOf(5), 5)).toEqual([]);
  });
});

describe('setMaxAttempts', () => {
  test('raising: rows already poisoned stay poisoned (and superseded ones stay superseded); no head moves; the new spec verifies and drains', async () => {
    const specOf = await freshOutbox(2);
    const [a1, b1, c1] = await enqueued(specOf(2), 'vpc:a', 'vpc:b', 'vpc:c');
    await poisonAsTheDrainerDoes(specOf(2), a1!);
    const [a2, c2] = await enqueued(specOf(2), 'vpc:a', 'vpc:c');
    await update(specOf(2), 'attempt_count = 1', b1!); // b1: failed once, still being retried
    await poisonAsTheDrainerDoes(specOf(2), c1!);
    await update(specOf(2), 'sent_at = now(), is_head = false', c2!); // c1 is superseded by c2
    const before = await heads(specOf(2));
    expect(before).toEqual([b1, a2].sort());

    const result = await setMaxAttempts(t.db, specOf(5));
    expect(result).toEqual({ from: 2, to: 5, adjusted: 2 });

    expect(await recordedMaxAttempts(t.db, specOf(5))).toBe(5);
    await expect(verifyOutboxTable(t.db, specOf(5))).resolves.toBeUndefined();
    await expect(verifyOutboxTable(t.db, specOf(2))).rejects.toSatisfy(refusedMaxAttempts(specOf(2), 5));
    expect(await attempts(specOf(5))).toMatchObject({ [a1!]: 5, [b1!]: 1, [c1!]: 5, [a2!]: 0 });
    expect(await heads(specOf(5))).toEqual(before);
    expect(await invariantViolations(specOf(5), 5)).toEqual([]);
    expect(await outboxStats(t.db, specOf(5))).toMatchObject({
      pending: 4,
      deliverable: 2,
      poisoned: 2,
      superseded: 1,
    });
    expect(await claimedHeads(specOf(5), 5)).toEqual(before);
    // A new row of a partition queues behind its head, as before.
    const [a3] = await enqueued(specOf(5), 'vpc:a');
    expect(await heads(specOf(5))).not.toContain(a3);
    expect(await invariantViolations(specOf(5), 5)).toEqual([]);
  });

  test('lowering: a head retried past the new value keeps its head with one attempt left; poisoned rows stay poisoned', async () => {
    const specOf = await freshOutbox(5);
    const [a1, a2, b1, c1] = await enqueued(specOf(5), 'vpc:a', 'vpc:a', 'vpc:b', 'vpc:c');
    await update(specOf(5), 'attempt_count = 3', a1!); // failed 3 times: poisoned under 2, deliverable under 5
    await poisonAsTheDrainerDoes(specOf(5), b1!);
    const [b2] = await enqueued(specOf(5), 'vpc:b');
    await update(specOf(5), 'attempt_count = 1', c1!);
    const before = await heads(specOf(5));
    expect(before).toEqual([a1, c1, b2]);

    expect(await setMaxAttempts(t.db, specOf(2))).toEqual({ from: 5, to: 2, adjusted: 1 });
    expect(await attempts(specOf(2))).toMatchObject({ [a1!]: 1, [a2!]: 0, [b1!]: 5, [c1!]: 1 });
    expect(await heads(specOf(2))).toEqual(before);
    expect(await invariantViolations(specOf(2), 2)).toEqual([]);
    await expect(verifyOutboxTable(t.db, specOf(2))).resolves.toBeUndefined();
    // Counting with 2, the drainer claims every head, a1 included.
    expect(await claimedHeads(specOf(2), 2)).toEqual(before);
  });

  test('is idempotent: run again with the value recorded, it changes nothing', async () => {
    const specOf = await freshOutbox(3);
    const [a1] = await enqueued(specOf(3), 'vpc:a');
    await update(specOf(3), 'attempt_count = 7, is_head = false', a1!);
    expect(await setMaxAttempts(t.db, specOf(3))).toEqual({ from: 3, to: 3, adjusted: 0 });
    expect(await setMaxAttempts(t.db, specOf(3), { from: 3 })).toEqual({ from: 3, to: 3, adjusted: 0 });
    expect(await attempts(specOf(3))).toEqual({ [a1!]: 7 });
  });

  test('a table that records no value (an earlier release): verify accepts any value; setMaxAttempts needs from, then adjusts and records', async () => {
    const specOf = await freshOutbox(2);
    await sql`comment on column ${table(specOf(2))}.attempt_count is null`.execute(t.db);
    expect(await recordedMaxAttempts(t.db, specOf(2))).toBeUndefined();
    await expect(verifyOutboxTable(t.db, specOf(2))).resolves.toBeUndefined();
    await expect(verifyOutboxTable(t.db, specOf(7))).resolves.toBeUndefined();
    // With nothing recorded, enqueue counts with its spec's value.
    const [a1] = await enqueued(specOf(2), 'vpc:a');
    await poisonAsTheDrainerDoes(specOf(2), a1!);

    await expect(setMaxAttempts(t.db, specOf(5))).rejects.toSatisfy(
      (e) => e instanceof OutboxConfigError && e.field === 'from' && e.message.includes('records no maxAttempts'),
    );
    expect(await recordedMaxAttempts(t.db, specOf(5))).toBeUndefined();
    expect(await setMaxAttempts(t.db, specOf(5), { from: 2 })).toEqual({ from: 2, to: 5, adjusted: 1 });
    expect(await attempts(specOf(5))).toEqual({ [a1!]: 5 });
    expect(await recordedMaxAttempts(t.db, specOf(5))).toBe(5);
    await expect(verifyOutboxTable(t.db, specOf(2))).rejects.toSatisfy(refusedMaxAttempts(specOf(2), 5));
  });

  test('a from that contradicts the recorded value is refused, and nothing changes', async () => {
    const specOf = await freshOutbox(2);
    const [a1] = await enqueued(specOf(2), 'vpc:a');
    await poisonAsTheDrainerDoes(specOf(2), a1!);
    await expect(setMaxAttempts(t.db, specOf(5), { from: 3 })).rejects.toSatisfy(
      (e) => e instanceof OutboxConfigError && e.field === 'from' && e.message.includes('records maxAttempts 2'),
    );
    expect(await recordedMaxAttempts(t.db, specOf(2))).toBe(2);
    expect(await attempts(specOf(2))).toEqual({ [a1!]: 2 });
  });

  test('runs inside the caller’s READ COMMITTED transaction (a migration’s) and rolls back with it; refuses REPEATABLE READ', async () => {
    const specOf = await freshOutbox(2);
    await expect(
      t.db.transaction().execute(async (trx) => {
        await setMaxAttempts(trx, specOf(5));
        expect(await recordedMaxAttempts(trx, specOf(5))).toBe(5);
        throw new Error('a later migration failed');
      }),
    ).rejects.toThrow('a later migration failed');
    expect(await recordedMaxAttempts(t.db, specOf(2))).toBe(2);

    await expect(
      t.db
        .transaction()
        .setIsolationLevel('repeatable read')
        .execute((trx) => setMaxAttempts(trx, specOf(5))),
    ).rejects.toSatisfy((e) => e instanceof OutboxConfigError && e.message.includes('READ COMMITTED'));
    expect(await recordedMaxAttempts(t.db, specOf(2))).toBe(2);
  });

  test('waits for an in-flight drainer transaction, then also keeps poisoned the row that drainer poisoned under the old value', async () => {
    const specOf = await freshOutbox(2);
    const [a1, a2] = await enqueued(specOf(2), 'vpc:a', 'vpc:a');
    await update(specOf(2), 'attempt_count = 1', a1!);
    await t.withTransactions(1, async ([drainer]) => {
      // The drainer (maxAttempts 2) holds a1 claimed…
      await sql`select id from ${table(specOf(2))} where id = ${a1} for update`.execute(drainer!);
      const migration = setMaxAttempts(t.db, specOf(5));
      expect(await settlesWithin(migration, 300)).toBe(false);
      // …and records its second failure: poisoned under 2, so demoted, and a2 promoted.
      await sql`update ${table(specOf(2))} set attempt_count = 2, is_head = false where id = ${a1}`.execute(drainer!);
      await promoteHeads(drainer!, specOf(2), ['vpc:a']);
      await drainer!.commit().execute();
      expect(await migration).toEqual({ from: 2, to: 5, adjusted: 1 });
    });
    // a1 stays poisoned under 5 (for the reconciler), and a2 is the only head.
    expect(await attempts(specOf(5))).toEqual({ [a1!]: 5, [a2!]: 0 });
    expect(await heads(specOf(5))).toEqual([a2]);
    expect(await invariantViolations(specOf(5), 5)).toEqual([]);
  });

  test('an enqueue while setMaxAttempts is uncommitted waits at its insert, and its head decision still holds after the commit', async () => {
    const specOf = await freshOutbox(5);
    const [a1] = await enqueued(specOf(5), 'vpc:a');
    await update(specOf(5), 'attempt_count = 3', a1!);
    await t.withTransactions(2, async ([writer, migration]) => {
      await setMaxAttempts(migration!, specOf(2));
      // The writer (old spec) is held at its insert until the migration commits.
      const pending = enqueue(writer!, specOf(5), intent('vpc:a'));
      expect(await settlesWithin(pending, 300)).toBe(false);
      await migration!.commit().execute();
      const a2 = await pending;
      await writer!.commit().execute();
      expect(await attempts(specOf(2))).toEqual({ [a1!]: 1, [a2]: 0 });
    });
    expect(await heads(specOf(2))).toEqual([a1]);
    expect(await invariantViolations(specOf(2), 2)).toEqual([]);
  });
});
