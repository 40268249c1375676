import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { claimBatch } from './claim.js';
import { deliveryOrder, enqueueRows, freshOutbox, outboxRows, payload, quiet } from './testing/fixture.js';
import { createDrainer, createRecordingSink, type Intent, type Outcome } from './index.js';

// Per-partition order: the claim rule, runs, and order under concurrent drainers.
const t = useTestDatabase();

describe('ordering under concurrency', () => {
  test('4 drainers on separate pools, 20k intents in 200 partitions, random transient failures: all delivered once, in id order per partition', async () => {
    const spec = await freshOutbox(t.db, { maxAttempts: 1_000 });
    const keys = Array.from({ length: 20_000 }, (_, i) => `vpc:${i % 200}`);
    await enqueueRows(t.db, spec, keys);

    const deliveries: Intent[] = [];
    const failures = new Map<string, number>();
    const sink = createRecordingSink({
      outcome: (intent): Outcome | undefined => {
        if (Math.random() < 0.05) {
          failures.set(intent.id, (failures.get(intent.id) ?? 0) + 1);
          return { kind: 'transient', error: 'flaky' };
        }
        deliveries.push(intent);
        return undefined;
      },
    });
    const drainers = Array.from({ length: 4 }, () =>
      createDrainer({
        db: t.kysely({ max: 2 }),
        spec,
        sink,
        batchSize: 100,
        backoff: { baseMs: 1, maxMs: 5 },
        logger: quiet,
      }),
    );
    const deadline = Date.now() + 90_000;
    for (;;) {
      await Promise.all(drainers.map((d) => d.drainOnce()));
      const left = await sql<{
        n: number;
      }>`select count(*)::int as n from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} where sent_at is null`.execute(
        t.db,
      );
      if (left.rows[0]?.n === 0 || Date.now() > deadline) break;
      await sleep(5);
    }
    const all = await outboxRows(t.db, spec);
    expect(all.filter((r) => !r.sent)).toEqual([]);
    expect(failures.size).toBeGreaterThan(0);

    // Exactly once each (transient failures were not recorded as deliveries).
    expect(deliveries).toHaveLength(20_000);
    expect(new Set(deliveries.map((d) => d.id)).size).toBe(20_000);
    // Per partition, delivery order is id order.
    const byKey = deliveryOrder(deliveries);
    expect(byKey.size).toBe(200);
    for (const ids of [...byKey.values()].map((order) => order.map(BigInt)))
      expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : 1)));
    // A retried intent carries its attempts.
    const retried = all.filter((r) => failures.has(r.id));
    for (const r of retried) expect(r.attempt_count).toBe(failures.get(r.id));
    // No heads are left behind once everything is delivered.
    expect(all.filter((r) => r.is_head)).toEqual([]);
  }, 120_000);
});

describe('the claim rule', () => {
  test('a predecessor locked by another drainer blocks its successor; other partitions flow', async () => {
    const spec = await freshOutbox(t.db);
    const [a1, a2, b1] = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:b']);
    const other = t.kysely({ max: 1 });
    await other.transaction().execute(async (trx) => {
      await sql`select id from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} where id = ${a1} for update`.execute(
        trx,
      );
      const sink = createRecordingSink();
      const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
      expect(sink.delivered.map((i) => i.id)).toEqual([b1]);
      expect(result.delivered).toBe(1);
    });
    const sink = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(sink.delivered.map((i) => i.id)).toEqual([a1, a2]);
    await other.destroy();
  });

  test('a predecessor backing off blocks its successor until it is delivered', async () => {
    const spec = await freshOutbox(t.db);
    const [a1, a2] = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a']);
    let fail = true;
    const sink = createRecordingSink({
      outcome: (i) => (i.id === a1 && fail ? { kind: 'transient', error: 'down' } : undefined),
    });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000, maxMs: 60_000 } });
    await drainer.drainOnce();
    // a1 failed and is backing off (next_attempt_at in the future); a2 must not overtake it.
    await drainer.drainOnce();
    expect(sink.delivered).toEqual([]);
    const [first, second] = await outboxRows(t.db, spec);
    expect(first).toMatchObject({ id: a1, attempt_count: 1, last_error: 'down', is_head: true });
    expect(second).toMatchObject({ id: a2, attempt_count: 0, is_head: false });
    fail = false;
    await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now() where id = ${a1}`.execute(
      t.db,
    );
    await drainer.drainOnce();
    expect(sink.delivered.map((i) => i.id)).toEqual([a1, a2]);
  });

  test('a poisoned predecessor does not block its successor', async () => {
    const spec = await freshOutbox(t.db);
    const [a1, a2, a3] = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:a']);
    const sink = createRecordingSink({
      outcome: (i) => (i.id === a1 ? { kind: 'permanent', error: 'unknown type' } : undefined),
    });
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(result.poisoned).toBe(1);
    expect(sink.delivered.map((i) => i.id)).toEqual([a2, a3]);
    const [first] = await outboxRows(t.db, spec);
    expect(first).toMatchObject({ id: a1, sent: false, attempt_count: 10, last_error: 'unknown type', is_head: false });
  });

  test('rows with an empty partition key group together', async () => {
    const spec = await freshOutbox(t.db);
    const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
    // enqueue refuses an empty key; a table may still hold such rows (written by hand or by older code).
    await sql`insert into ${table} (resource_id, payload, is_head) values
      ('', ${JSON.stringify(payload(1))}, true), ('', ${JSON.stringify(payload(2))}, false), ('', ${JSON.stringify(payload(3))}, false)`.execute(
      t.db,
    );
    const [e1, e2, e3] = (await outboxRows(t.db, spec)).map((r) => r.id);
    const sink = createRecordingSink({
      outcome: (i) => (i.id === e1 ? { kind: 'transient', error: 'later' } : undefined),
    });
    await createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } }).drainOnce();
    expect(sink.delivered).toEqual([]); // e2, e3 wait behind e1 like any partition
    await sql`update ${table} set next_attempt_at = now()`.execute(t.db);
    const ok = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink: ok, logger: quiet }).drainOnce();
    expect(ok.delivered.map((i) => i.id)).toEqual([e1, e2, e3]);
  });
});

describe('runs', () => {
  test('a run: a head and its followers are claimed together; a failure in the run releases the rest untouched', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:hot', 'vpc:hot', 'vpc:hot', 'vpc:hot', 'vpc:hot']);
    const sink = createRecordingSink({
      outcome: (i) => (i.id === ids[2] ? { kind: 'transient', error: 'blip' } : undefined),
    });
    const result = await createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      backoff: { baseMs: 60_000 },
    }).drainOnce();
    expect(sink.calls[0]?.map((i) => i.id)).toEqual(ids); // one batch carried the whole run
    expect(result).toMatchObject({ delivered: 2, retried: 1, released: 2 });
    const after = await outboxRows(t.db, spec);
    expect(after.map((r) => [r.sent, r.attempt_count, r.is_head])).toEqual([
      [true, 0, false],
      [true, 0, false],
      [false, 1, true], // the failed row is the partition's head now, backing off
      [false, 0, false],
      [false, 0, false],
    ]);
  });

  test('a follower locked by another transaction is never waited for nor skipped over: the run stops before it', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:a', 'vpc:b', 'vpc:b']);
    const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
    await t.withTransactions(3, async ([holder, drainer, later]) => {
      await sql`select id from ${table} where id = ${ids[1]} for update`.execute(holder!);
      // Both heads, vpc:b's whole run, and of vpc:a's run nothing past the held row.
      const claim = await claimBatch(drainer!, spec, 10, { headLimit: 2 });
      expect(claim.intents.map((i) => i.id)).toEqual([ids[0], ids[3], ids[4]]);
      await drainer!.rollback().execute();
      await holder!.commit().execute();
      expect((await claimBatch(later!, spec, 10, { headLimit: 2 })).intents.map((i) => i.id)).toEqual(ids);
    });
  });

  test('a run poisoned in its middle: the row after the poisoned one becomes head and is delivered next', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:hot', 'vpc:hot', 'vpc:hot', 'vpc:hot']);
    const sink = createRecordingSink({
      outcome: (i) => (i.id === ids[1] ? { kind: 'permanent', error: 'refused' } : undefined),
    });
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    // Batch 1 carried the whole run; the sink skipped what followed the refusal, which was released.
    expect(sink.calls.map((call) => call.map((i) => i.id))).toEqual([ids, [ids[2], ids[3]]]);
    expect(result).toMatchObject({ batches: 2, delivered: 3, poisoned: 1, released: 2 });
    expect((await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.is_head])).toEqual([
      [true, 0, false],
      [false, 10, false],
      [true, 0, false],
      [true, 0, false],
    ]);
  });
});

describe('partition keys as literals', () => {
  test('keys with quotes, backslashes, dollars and non-ASCII drain in order, each partition to its end', async () => {
    const spec = await freshOutbox(t.db);
    const awkward = ["vpc:it's", 'vpc:back\\slash', "vpc:\\'", 'vpc:$$x$$', 'vpc:ü✓🙂', 'vpc:{a,b}', 'vpc:"q"'];
    const keys = Array.from({ length: 70 }, (_, i) => awkward[i % awkward.length] as string);
    const ids = await enqueueRows(t.db, spec, keys);
    const sink = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink, batchSize: 4, logger: quiet }).drainOnce();
    for (const key of awkward) {
      expect(sink.delivered.filter((i) => i.partitionKey === key).map((i) => i.id)).toEqual(
        ids.filter((_, i) => keys[i] === key),
      );
    }
    const state = await outboxRows(t.db, spec);
    expect(state.every((r) => r.sent && !r.is_head)).toBe(true);
  });
});
