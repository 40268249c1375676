import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterEach, beforeAll, describe, expect, test } from 'vitest';
import { defineOutbox } from '../define-outbox.js';
import { enqueue, enqueueMany, type EnqueueInput } from '../enqueue.js';
import { promoteHeads, resetHeads } from './heads.js';
import { createOutboxTable } from '../schema/migration.js';

const t = useTestDatabase();
const spec = defineOutbox({ table: 'app.outbox', partitionColumn: 'resource_id', maxAttempts: 5 });

const intent = (partitionKey: string): EnqueueInput => ({
  partitionKey,
  payload: { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] },
});

/** Enqueues `keys` in one committed transaction; returns their ids. */
const enqueued = (...keys: string[]) => t.db.transaction().execute((trx) => enqueueMany(trx, spec, keys.map(intent)));

/** The ids flagged head, in id order. */
async function heads(): Promise<string[]> {
  const result = await sql<{ id: string }>`select id from app.outbox where is_head order by id`.execute(t.db);
  return result.rows.map((r) => r.id);
}

const run = (text: string, ...ids: string[]) => sql`${sql.raw(text)} where id = any(${ids}::bigint[])`.execute(t.db);
/** Direct state changes, as the drainer, the reconciler or a human would make them. */
const deliver = (...ids: string[]) => run('update app.outbox set sent_at = now(), is_head = false', ...ids);
const poison = (...ids: string[]) => run(`update app.outbox set attempt_count = ${spec.maxAttempts}`, ...ids);
const retire = (...ids: string[]) =>
  run("update app.outbox set retired_at = now(), retired_reason = 'superseded', is_head = false", ...ids);

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

beforeAll(async () => {
  await createOutboxTable(t.db, spec);
});

afterEach(async () => {
  await sql`truncate app.outbox`.execute(t.db);
});

describe('enqueue sets the head flag', () => {
  test('the first row of each partition is its head; later rows are not', async () => {
    const [a1, , b1] = await enqueued('vpc:a', 'vpc:a', 'vpc:b', 'vpc:a');
    expect(await heads()).toEqual([a1, b1]);
    const [, c1] = await enqueued('vpc:a', 'vpc:c');
    expect(await heads()).toEqual([a1, b1, c1]);
  });

  test('a row after a backing-off deliverable row is not head: the earlier row still is', async () => {
    const [first] = await enqueued('vpc:a');
    await run("update app.outbox set attempt_count = 2, next_attempt_at = now() + interval '1 hour'", first!);
    await enqueued('vpc:a');
    expect(await heads()).toEqual([first]);
  });

  test.each([
    ['delivered', deliver],
    [
      'poisoned (and demoted)',
      async (id: string) => {
        await poison(id);
        await run('update app.outbox set is_head = false', id);
      },
    ],
    ['retired', retire],
  ])('a row after only %s rows is the new head', async (_state, change) => {
    const [old] = await enqueued('vpc:a');
    await change(old!);
    const [fresh] = await enqueued('vpc:a');
    expect(await heads()).toEqual([fresh]);
  });

  test('a transaction that enqueues after a concurrent first enqueue committed does not become a second head', async () => {
    await t.withTransactions(2, async ([a, b]) => {
      const aId = await enqueue(a!, spec, intent('vpc:a'));
      const bEnqueue = enqueue(b!, spec, intent('vpc:a'));
      expect(await settlesWithin(bEnqueue, 300)).toBe(false);
      await a!.commit().execute();
      await bEnqueue;
      await b!.commit().execute();
      // b looked for a deliverable row after a's lock was released, in a fresh snapshot: it saw a's.
      expect(await heads()).toEqual([aId]);
    });
  });

  test('when the concurrent first enqueue rolls back, the waiting one becomes head', async () => {
    await t.withTransactions(2, async ([a, b]) => {
      await enqueue(a!, spec, intent('vpc:a'));
      const bEnqueue = enqueue(b!, spec, intent('vpc:a'));
      expect(await settlesWithin(bEnqueue, 300)).toBe(false);
      await a!.rollback().execute();
      const bId = await bEnqueue;
      await b!.commit().execute();
      expect(await heads()).toEqual([bId]);
    });
  });
});

describe('promoteHeads', () => {
  test('after the head is delivered and demoted, the next deliverable row becomes head', async () => {
    const [a1, a2, , b1] = await enqueued('vpc:a', 'vpc:a', 'vpc:a', 'vpc:b');
    await deliver(a1!);
    expect(await t.db.transaction().execute((trx) => promoteHeads(trx, spec, ['vpc:a']))).toEqual([
      { partitionKey: 'vpc:a', headId: a2 },
    ]);
    expect(await heads()).toEqual([a2, b1]);
  });

  test('skips a poisoned row and a retired row to reach the first deliverable one', async () => {
    const [a1, a2, a3, a4] = await enqueued('vpc:a', 'vpc:a', 'vpc:a', 'vpc:a');
    await deliver(a1!);
    await poison(a2!);
    await retire(a3!);
    await t.db.transaction().execute((trx) => promoteHeads(trx, spec, ['vpc:a']));
    expect(await heads()).toEqual([a4]);
  });

  test('a partition with nothing deliverable is left without head, and is no error', async () => {
    const [a1, a2] = await enqueued('vpc:a', 'vpc:a');
    await deliver(a1!);
    await poison(a2!);
    const promoted = await t.db.transaction().execute((trx) => promoteHeads(trx, spec, ['vpc:a', 'vpc:never-seen']));
    expect(promoted).toEqual([
      { partitionKey: 'vpc:a', headId: null },
      { partitionKey: 'vpc:never-seen', headId: null },
    ]);
    expect(await heads()).toEqual([]);
  });

  test('leaves an existing head alone and does not add a second one', async () => {
    const [a1, , b1] = await enqueued('vpc:a', 'vpc:a', 'vpc:b');
    await t.db.transaction().execute((trx) => promoteHeads(trx, spec, ['vpc:a', 'vpc:a', 'vpc:b']));
    expect(await heads()).toEqual([a1, b1]);
  });

  test('no keys: does nothing', async () => {
    const [a1] = await enqueued('vpc:a');
    await deliver(a1!);
    await t.db.transaction().execute((trx) => promoteHeads(trx, spec, []));
    expect(await heads()).toEqual([]);
  });

  test('waits for an in-flight enqueue of the partition, then promotes its row: the key is never stranded headless', async () => {
    const [a1] = await enqueued('vpc:a');
    await t.withTransactions(2, async ([drainer, writer]) => {
      // The drainer delivers the head and demotes it (not yet committed).
      await sql`update app.outbox set sent_at = now(), is_head = false where id = ${a1}`.execute(drainer!);
      // Meanwhile an enqueue sees a1 still deliverable, so its row is not head.
      const a2 = await enqueue(writer!, spec, intent('vpc:a'));
      // The drainer sees no deliverable row (a2 is uncommitted): it must wait for the writer.
      const promoting = promoteHeads(drainer!, spec, ['vpc:a']);
      expect(await settlesWithin(promoting, 300)).toBe(false);
      await writer!.commit().execute();
      await promoting;
      await drainer!.commit().execute();
      expect(await heads()).toEqual([a2]);
    });
  });
});

describe('promoteHeads with markDelivered (the drainer’s outcome update in the same statement)', () => {
  test('marks the rows delivered and no longer head, and promotes the next deliverable row', async () => {
    const [a1, a2, b1] = await enqueued('vpc:a', 'vpc:a', 'vpc:b');
    await t.db
      .transaction()
      .execute((trx) => promoteHeads(trx, spec, ['vpc:a', 'vpc:b'], { markDelivered: [a1!, b1!] }));
    const delivered = await sql<{ id: string; is_head: boolean }>`
      select id, is_head from app.outbox where sent_at is not null order by id`.execute(t.db);
    expect(delivered.rows).toEqual([
      { id: a1, is_head: false },
      { id: b1, is_head: false },
    ]);
    expect(await heads()).toEqual([a2]);
  });

  test('never promotes a row it is marking delivered, even one that is not the head', async () => {
    const [a1, a2, a3] = await enqueued('vpc:a', 'vpc:a', 'vpc:a');
    // A run of two: the head a1 and its follower a2 were both delivered.
    await t.db.transaction().execute((trx) => promoteHeads(trx, spec, ['vpc:a'], { markDelivered: [a1!, a2!] }));
    expect(await heads()).toEqual([a3]);
  });

  test('marks rows delivered even when no key is given', async () => {
    const [a1] = await enqueued('vpc:a');
    await t.db.transaction().execute((trx) => promoteHeads(trx, spec, [], { markDelivered: [a1!] }));
    const row = await sql<{ sent: boolean }>`select sent_at is not null as sent from app.outbox`.execute(t.db);
    expect(row.rows).toEqual([{ sent: true }]);
    expect(await heads()).toEqual([]);
  });

  test('an enqueue that comes while the drainer settles its partition waits, then becomes head', async () => {
    const [a1] = await enqueued('vpc:a');
    await t.withTransactions(2, async ([drainer, writer]) => {
      await sql`select id from app.outbox where id = ${a1} for update`.execute(drainer!);
      expect(await promoteHeads(drainer!, spec, ['vpc:a'], { markDelivered: [a1!] })).toEqual([
        { partitionKey: 'vpc:a', headId: null },
      ]);
      // The settle holds the partition's advisory lock until commit: the enqueue waits for it, then
      // sees a1 delivered and flags its own row head.
      const enqueuing = enqueue(writer!, spec, intent('vpc:a'));
      expect(await settlesWithin(enqueuing, 300)).toBe(false);
      await drainer!.commit().execute();
      const a2 = await enqueuing;
      await writer!.commit().execute();
      expect(await heads()).toEqual([a2]);
    });
  });

  test('waits for an in-flight enqueue when the delivered head had no visible successor', async () => {
    const [a1] = await enqueued('vpc:a');
    await t.withTransactions(2, async ([drainer, writer]) => {
      await sql`select id from app.outbox where id = ${a1} for update`.execute(drainer!);
      const a2 = await enqueue(writer!, spec, intent('vpc:a'));
      const promoting = promoteHeads(drainer!, spec, ['vpc:a'], { markDelivered: [a1!] });
      expect(await settlesWithin(promoting, 300)).toBe(false);
      await writer!.commit().execute();
      await promoting;
      await drainer!.commit().execute();
      expect(await heads()).toEqual([a2]);
    });
  });
});

describe('resetHeads', () => {
  test('a redriven earlier row becomes the only head, demoting the later one', async () => {
    const [a1, a2] = await enqueued('vpc:a', 'vpc:a', 'vpc:a');
    // a1 was poisoned and demoted; a2 took over as head.
    await poison(a1!);
    await run('update app.outbox set is_head = false', a1!);
    await run('update app.outbox set is_head = true', a2!);
    expect(await heads()).toEqual([a2]);

    // The reconciler revives a1.
    await run('update app.outbox set attempt_count = 0', a1!);
    await t.db.transaction().execute((trx) => resetHeads(trx, spec, ['vpc:a']));
    expect(await heads()).toEqual([a1]);
  });

  test('a poisoned head is demoted and skipped: the first deliverable row after it becomes head', async () => {
    const [a1, a2] = await enqueued('vpc:a', 'vpc:a');
    await poison(a1!); // still flagged head
    expect(await heads()).toEqual([a1]);
    await t.db.transaction().execute((trx) => resetHeads(trx, spec, ['vpc:a']));
    expect(await heads()).toEqual([a2]);
  });

  test('retired rows are skipped', async () => {
    const [a1, a2, a3] = await enqueued('vpc:a', 'vpc:a', 'vpc:a');
    await retire(a1!);
    await poison(a2!);
    await t.db.transaction().execute((trx) => resetHeads(trx, spec, ['vpc:a']));
    expect(await heads()).toEqual([a3]);
  });

  test('a partition with nothing deliverable ends with no head at all', async () => {
    const [a1, a2] = await enqueued('vpc:a', 'vpc:a');
    await poison(a1!, a2!);
    await t.db.transaction().execute((trx) => resetHeads(trx, spec, ['vpc:a']));
    expect(await heads()).toEqual([]);
  });

  test('touches only the given partitions', async () => {
    const [a1, a2, b1] = await enqueued('vpc:a', 'vpc:a', 'vpc:b', 'vpc:b');
    await poison(a1!, b1!);
    await t.db.transaction().execute((trx) => resetHeads(trx, spec, ['vpc:a']));
    // b's poisoned head stays flagged: b was not asked about.
    expect(await heads()).toEqual([a2, b1]);
  });

  test('no keys: does nothing', async () => {
    const [a1] = await enqueued('vpc:a');
    await poison(a1!);
    await t.db.transaction().execute((trx) => resetHeads(trx, spec, []));
    expect(await heads()).toEqual([a1]);
  });
});
