import { setTimeout as sleep } from 'node:timers/promises';
import { defineOutbox, setMaxAttempts, type OutboxSpec } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { Kysely as KyselyClass, PostgresDialect, sql, type Kysely } from 'kysely';
import { describe, expect, test } from 'vitest';
import { claimBatch } from './claim.js';
import { deliveryOrder, enqueueRows, freshOutbox as fresh, payload } from './testing/fixture.js';
import { createDrainer, createRecordingSink, DrainerStoppedError, FlushPoisonedError, FlushTimeoutError, SinkHaltError, type DrainerEvent, type Intent, type Outcome, type Sink } from './index.js';

const t = useTestDatabase();
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const freshOutbox = (db: Kysely<any>, options: { maxAttempts?: number } = {}) => fresh(db, 'drain', options);

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function rows(db: Kysely<any>, spec: OutboxSpec) {
  const result = await sql<{ id: string; resource_id: string; sent: boolean; attempt_count: number; last_error: string | null; is_head: boolean }>`
    select t.id::text as id, resource_id, sent_at is not null as sent, attempt_count, last_error, is_head
    from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} t order by t.id`.execute(db);
  return result.rows;
}

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
      createDrainer({ db: t.kysely({ max: 2 }), spec, sink, batchSize: 100, backoff: { baseMs: 1, maxMs: 5 }, logger: quiet }),
    );
    const deadline = Date.now() + 90_000;
    for (;;) {
      await Promise.all(drainers.map((d) => d.drainOnce()));
      const left = await sql<{ n: number }>`select count(*)::int as n from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} where sent_at is null`.execute(t.db);
      if (left.rows[0]?.n === 0 || Date.now() > deadline) break;
      await sleep(5);
    }
    const all = await rows(t.db, spec);
    expect(all.filter((r) => !r.sent)).toEqual([]);
    expect(failures.size).toBeGreaterThan(0);

    // Exactly once each (transient failures were not recorded as deliveries).
    expect(deliveries).toHaveLength(20_000);
    expect(new Set(deliveries.map((d) => d.id)).size).toBe(20_000);
    // Per partition, delivery order is id order.
    const byKey = deliveryOrder(deliveries);
    expect(byKey.size).toBe(200);
    for (const ids of [...byKey.values()].map((order) => order.map(BigInt))) expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : 1)));
    // A retried intent carries its attempts.
    const retried = all.filter((r) => failures.has(r.id));
    for (const r of retried) expect(r.attempt_count).toBe(failures.get(r.id));
    // No heads are left behind once everything is delivered.
    expect(all.filter((r) => r.is_head)).toEqual([]);
  }, 120_000);
});

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

describe('the claim rule', () => {
  test('a predecessor locked by another drainer blocks its successor; other partitions flow', async () => {
    const spec = await freshOutbox(t.db);
    const [a1, a2, b1] = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:b']);
    const other = t.kysely({ max: 1 });
    await other.transaction().execute(async (trx) => {
      await sql`select id from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} where id = ${a1} for update`.execute(trx);
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
    const sink = createRecordingSink({ outcome: (i) => (i.id === a1 && fail ? { kind: 'transient', error: 'down' } : undefined) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000, maxMs: 60_000 } });
    await drainer.drainOnce();
    // a1 failed and is backing off (next_attempt_at in the future); a2 must not overtake it.
    await drainer.drainOnce();
    expect(sink.delivered).toEqual([]);
    const [first, second] = await rows(t.db, spec);
    expect(first).toMatchObject({ id: a1, attempt_count: 1, last_error: 'down', is_head: true });
    expect(second).toMatchObject({ id: a2, attempt_count: 0, is_head: false });
    fail = false;
    await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now() where id = ${a1}`.execute(t.db);
    await drainer.drainOnce();
    expect(sink.delivered.map((i) => i.id)).toEqual([a1, a2]);
  });

  test('a poisoned predecessor does not block its successor', async () => {
    const spec = await freshOutbox(t.db);
    const [a1, a2, a3] = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:a']);
    const sink = createRecordingSink({ outcome: (i) => (i.id === a1 ? { kind: 'permanent', error: 'unknown type' } : undefined) });
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(result.poisoned).toBe(1);
    expect(sink.delivered.map((i) => i.id)).toEqual([a2, a3]);
    const [first] = await rows(t.db, spec);
    expect(first).toMatchObject({ id: a1, sent: false, attempt_count: 10, last_error: 'unknown type', is_head: false });
  });

  test('rows with an empty partition key group together', async () => {
    const spec = await freshOutbox(t.db);
    const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
    // enqueue refuses an empty key; a table may still hold such rows (written by hand or by older code).
    await sql`insert into ${table} (resource_id, payload, is_head) values
      ('', ${JSON.stringify(payload(1))}, true), ('', ${JSON.stringify(payload(2))}, false), ('', ${JSON.stringify(payload(3))}, false)`.execute(t.db);
    const [e1, e2, e3] = (await rows(t.db, spec)).map((r) => r.id);
    const sink = createRecordingSink({ outcome: (i) => (i.id === e1 ? { kind: 'transient', error: 'later' } : undefined) });
    await createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } }).drainOnce();
    expect(sink.delivered).toEqual([]); // e2, e3 wait behind e1 like any partition
    await sql`update ${table} set next_attempt_at = now()`.execute(t.db);
    const ok = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink: ok, logger: quiet }).drainOnce();
    expect(ok.delivered.map((i) => i.id)).toEqual([e1, e2, e3]);
  });

  test('a run: a head and its followers are claimed together; a failure in the run releases the rest untouched', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:hot', 'vpc:hot', 'vpc:hot', 'vpc:hot', 'vpc:hot']);
    const sink = createRecordingSink({ outcome: (i) => (i.id === ids[2] ? { kind: 'transient', error: 'blip' } : undefined) });
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } }).drainOnce();
    expect(sink.calls[0]?.map((i) => i.id)).toEqual(ids); // one batch carried the whole run
    expect(result).toMatchObject({ delivered: 2, retried: 1, released: 2 });
    const after = await rows(t.db, spec);
    expect(after.map((r) => [r.sent, r.attempt_count, r.is_head])).toEqual([
      [true, 0, false],
      [true, 0, false],
      [false, 1, true], // the failed row is the partition's head now, backing off
      [false, 0, false],
      [false, 0, false],
    ]);
  });
});

describe('how many partitions a claim takes', () => {
  const claimed = (events: DrainerEvent[]) =>
    events.flatMap((e) => (e.type === 'batch-claimed' ? [{ count: e.count, heads: e.heads }] : []));

  test('few partitions with long backlogs: the drainer takes fewer heads with longer runs, batches stay full, order holds', async () => {
    const spec = await freshOutbox(t.db);
    const keys = Array.from({ length: 400 }, (_, i) => `vpc:${i % 8}`);
    const ids = await enqueueRows(t.db, spec, keys);
    const events: DrainerEvent[] = [];
    const sink = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink, batchSize: 20, logger: quiet, onEvent: (e) => events.push(e) }).drainOnce();
    const batches = claimed(events);
    // 8 heads at first, the oldest one's run filling the batch; every settled partition still has
    // rows, so the head limit halves (8 → 4 → 2 → 1).
    expect(batches.slice(0, 4)).toEqual([
      { count: 20, heads: 8 },
      { count: 20, heads: 4 },
      { count: 20, heads: 2 },
      { count: 20, heads: 1 },
    ]);
    expect(batches.length).toBeLessThanOrEqual(30); // 20 full batches would carry all 400
    expect(sink.delivered).toHaveLength(400);
    for (let k = 0; k < 8; k += 1) {
      const mine = sink.delivered.filter((i) => i.partitionKey === `vpc:${k}`).map((i) => i.id);
      expect(mine).toEqual(ids.filter((_, i) => keys[i] === `vpc:${k}`));
    }
  });

  test('the oldest head\'s run takes the room first; the other heads share what it leaves', async () => {
    const spec = await freshOutbox(t.db);
    // vpc:a is oldest (3 rows), then vpc:b and vpc:c (10 rows each), then vpc:hot (30 rows).
    const keys = ['vpc:a', 'vpc:b', 'vpc:c', 'vpc:a', 'vpc:a', ...Array.from({ length: 18 }, (_, i) => (i % 2 ? 'vpc:c' : 'vpc:b'))];
    const ids = await enqueueRows(t.db, spec, keys);
    const of = (key: string, n: number) => ids.filter((_, i) => keys[i] === key).slice(0, n);
    await t.withTransactions(1, async ([trx]) => {
      // 3 heads, room 9: vpc:a's run is its 2 other rows; the 7 left make a share of 3 each.
      const claim = await claimBatch(trx!, spec, 12, { headLimit: 3 });
      expect(claim.heads).toBe(3);
      expect(claim.intents.map((i) => i.id)).toEqual([...of('vpc:a', 3), ...of('vpc:b', 4), ...of('vpc:c', 4)].sort((x, y) => Number(x) - Number(y)));
    });
    const hot = await freshOutbox(t.db);
    const hotKeys = ['vpc:hot', 'vpc:x', 'vpc:y', ...Array.from({ length: 29 }, () => 'vpc:hot'), 'vpc:x', 'vpc:y'];
    const hotIds = await enqueueRows(t.db, hot, hotKeys);
    await t.withTransactions(1, async ([trx]) => {
      // The oldest head has a long backlog: its run fills the batch, the other heads come alone.
      const claim = await claimBatch(trx!, hot, 10, { headLimit: 3 });
      expect(claim.intents.map((i) => i.partitionKey)).toEqual(['vpc:hot', 'vpc:x', 'vpc:y', ...Array.from({ length: 7 }, () => 'vpc:hot')]);
      expect(claim.intents.map((i) => i.id)).toEqual(hotIds.slice(0, 10));
    });
  });

  test('one row per partition: every batch is all heads, and stays full', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, Array.from({ length: 100 }, (_, i) => `vpc:${i}`));
    const events: DrainerEvent[] = [];
    const sink = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink, batchSize: 20, logger: quiet, onEvent: (e) => events.push(e) }).drainOnce();
    expect(claimed(events)).toEqual(Array.from({ length: 5 }, () => ({ count: 20, heads: 20 })));
  });

  test('two claimers with a head limit of one share hot partitions: each takes another partition with its whole run', async () => {
    const spec = await freshOutbox(t.db);
    const keys = Array.from({ length: 30 }, (_, i) => `vpc:${i % 3}`);
    const ids = await enqueueRows(t.db, spec, keys);
    await t.withTransactions(2, async ([a, b]) => {
      const first = await claimBatch(a!, spec, 10, { headLimit: 1 });
      const second = await claimBatch(b!, spec, 10, { headLimit: 1 });
      expect(first).toEqual({ heads: 1, intents: expect.any(Array) });
      expect(first.intents.map((i) => i.id)).toEqual(ids.filter((_, i) => keys[i] === 'vpc:0'));
      expect(second.intents.map((i) => i.id)).toEqual(ids.filter((_, i) => keys[i] === 'vpc:1'));
    });
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
});

describe('a pass and its transactions', () => {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const backendState = async (db: Kysely<any>, pid: number) =>
    (await sql<{ state: string }>`select state from pg_stat_activity where pid = ${pid}`.execute(db)).rows[0]?.state;

  test('each batch commits before the next is delivered, in READ COMMITTED even on a serializable pool; the pass leaves its connection idle', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b', 'vpc:c']);
    const pool = t.pool({ max: 1, options: '-c default_transaction_isolation=serializable' });
    const statements: string[] = [];
    const db = new KyselyClass({ dialect: new PostgresDialect({ pool }), log: (event) => {
      statements.push(event.query.sql);
    } });
    const pid = Number((await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]?.pid);
    const seenBefore: boolean[][] = [];
    const sink = createRecordingSink({
      outcome: async () => {
        // From another connection (batches of one): what the earlier batches of this pass committed.
        seenBefore.push((await rows(t.db, spec)).map((r) => r.sent));
        return undefined;
      },
    });
    await createDrainer({ db, spec, sink, batchSize: 1, logger: quiet }).drainOnce();
    expect(sink.delivered.map((i) => i.id)).toEqual(ids);
    expect(seenBefore).toEqual([
      [false, false, false],
      [true, false, false],
      [true, true, false],
    ]);
    const begins = statements.filter((q) => /begin/i.test(q));
    expect(begins.length).toBeGreaterThan(0);
    expect(begins.every((q) => /begin isolation level read committed$/i.test(q))).toBe(true);
    // The empty transaction that found nothing more to claim was ended, not left open.
    expect(await backendState(t.db, pid)).toBe('idle');
    await db.destroy();
  });

  test('a long pass hands its connection back now and then: on a one-connection pool, other queries get in before the pass ends', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, Array.from({ length: 5_000 }, (_, i) => `vpc:${i % 50}`));
    const db = t.kysely({ max: 1 });
    const sink = createRecordingSink();
    let passDone = false;
    const pass = createDrainer({ db, spec, sink, batchSize: 10, logger: quiet })
      .drainOnce()
      .finally(() => (passDone = true));
    await sleep(50);
    // A query of the service on the same pool, while the pass has hundreds of batches to go.
    const other = await sql<{ n: number }>`select count(*)::int as n from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} where sent_at is null`.execute(db);
    expect(passDone).toBe(false);
    expect(other.rows[0]!.n).toBeGreaterThan(0);
    expect((await pass).delivered).toBe(5_000);
    await db.destroy();
  });

  test('a full one-partition run goes out with its COMMIT and the next BEGIN in the settle\'s message; a short or failed one does not', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, Array.from({ length: 35 }, () => 'vpc:hot'));
    const statements: string[] = [];
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max: 1 }) }),
      log: (event) => {
        statements.push(event.query.sql);
      },
    });
    const sink = createRecordingSink();
    const result = await createDrainer({ db, spec, sink, batchSize: 10, logger: quiet }).drainOnce();
    expect(result).toMatchObject({ batches: 4, delivered: 35 });
    expect(sink.delivered.map((i) => i.id)).toEqual(ids);
    const settles = statements.filter((q) => q.includes('_settle"('));
    expect(settles.map((q) => q.endsWith('; commit; begin isolation level read committed'))).toEqual([true, true, true, false]);
    expect((await rows(t.db, spec)).every((r) => r.sent && !r.is_head)).toBe(true);

    // A failure in a full run: the settle goes alone, after the failure's update.
    const failing = await freshOutbox(t.db);
    await enqueueRows(t.db, failing, Array.from({ length: 10 }, () => 'vpc:hot'));
    statements.length = 0;
    let calls = 0;
    const flaky = createRecordingSink({
      // The fifth intent of the first batch fails once: four delivered, the rest released.
      outcome: () => ((calls += 1) === 5 ? { kind: 'transient', error: 'try again' } : undefined),
    });
    // A long backoff: with the default (full jitter from 0 ms) the failed row could be due again
    // within the same pass and make a second batch.
    await createDrainer({ db, spec: failing, sink: flaky, batchSize: 10, logger: quiet, backoff: { baseMs: 60_000 } }).drainOnce();
    const failedBatch = statements.filter((q) => q.includes('_settle"('));
    expect(failedBatch).toHaveLength(1);
    expect(failedBatch[0]).not.toContain('commit');
    expect((await rows(t.db, failing)).map((r) => r.sent)).toEqual([true, true, true, true, ...Array.from({ length: 6 }, () => false)]);
    await db.destroy();
  });

  test('a batch that fails rolls back; the connection is clean for the next pass', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:b']);
    const db = t.kysely({ max: 1 });
    const pid = Number((await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]?.pid);
    let calls = 0;
    const flaky: Sink = {
      deliver: async (intents) => {
        calls += 1;
        if (calls === 2) throw new SinkHaltError('credentials refused');
        return intents.map(() => ({ kind: 'delivered' as const }));
      },
    };
    const drainer = createDrainer({ db, spec, sink: flaky, batchSize: 1, logger: quiet });
    expect(await drainer.drainOnce()).toMatchObject({ batches: 1, delivered: 1, halted: true });
    expect(await backendState(t.db, pid)).toBe('idle');
    // The halted batch's row was not counted against, and the first batch stayed committed.
    expect((await rows(t.db, spec)).map((r) => [r.sent, r.attempt_count])).toEqual([
      [true, 0],
      [false, 0],
      [false, 0],
    ]);
    expect(await drainer.drainOnce()).toMatchObject({ delivered: 2, halted: false });
    expect((await rows(t.db, spec)).every((r) => r.sent)).toBe(true);
    expect(ids).toHaveLength(3);
    await db.destroy();
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
      expect(sink.delivered.filter((i) => i.partitionKey === key).map((i) => i.id)).toEqual(ids.filter((_, i) => keys[i] === key));
    }
    const state = await rows(t.db, spec);
    expect(state.every((r) => r.sent && !r.is_head)).toBe(true);
  });
});

describe('the next head after a run', () => {
  test('a run poisoned in its middle: the row after the poisoned one becomes head and is delivered next', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:hot', 'vpc:hot', 'vpc:hot', 'vpc:hot']);
    const sink = createRecordingSink({ outcome: (i) => (i.id === ids[1] ? { kind: 'permanent', error: 'refused' } : undefined) });
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    // Batch 1 carried the whole run; the sink skipped what followed the refusal, which was released.
    expect(sink.calls.map((call) => call.map((i) => i.id))).toEqual([ids, [ids[2], ids[3]]]);
    expect(result).toMatchObject({ batches: 2, delivered: 3, poisoned: 1, released: 2 });
    expect((await rows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.is_head])).toEqual([
      [true, 0, false],
      [false, 10, false],
      [true, 0, false],
      [true, 0, false],
    ]);
  });
});

describe('a sink that misbehaves', () => {
  test('a halt thrown by another copy of @outbox/drainer (a sink package with its own) is still a halt: nothing counted', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:h1', 'vpc:h2']);
    // What a second copy's SinkHaltError looks like here: another class, the same registry symbol.
    const foreignHalt = () => Object.assign(new Error('credentials refused'), { name: 'SinkHaltError', [Symbol.for('@outbox/drainer.SinkHaltError')]: true });
    expect(foreignHalt()).not.toBeInstanceOf(SinkHaltError);
    const sink: Sink = {
      deliver: async () => {
        throw foreignHalt();
      },
    };
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(result).toMatchObject({ delivered: 0, retried: 0, halted: true });
    expect((await rows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error])).toEqual([
      [false, 0, null],
      [false, 0, null],
    ]);
  });

  const cases: Array<[string, (intents: readonly Intent[], signal: AbortSignal) => Promise<readonly Outcome[]>, RegExp]> = [
    ['throws', async () => {
      throw new Error('boom with Bearer s3cr3t');
    }, /sink failed: Error: boom with Bearer \[redacted\]/],
    ['hangs past its deadline', (_i, signal) => new Promise((_, reject) => signal.addEventListener('abort', () => setTimeout(() => reject(new Error('late')), 5_000))), /did not answer within 200 ms/],
    ['returns the wrong number of outcomes', async () => [{ kind: 'delivered' }], /returned 1 outcomes for 2 intents/],
  ];
  test('a sink that honours the deadline\'s abort reports what it delivered before it: those count as delivered, not sent again', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b', 'vpc:c']);
    const sent: string[] = [];
    const sink = {
      deliver: async (intents: readonly Intent[], { signal }: { signal: AbortSignal }): Promise<Outcome[]> => {
        const outcomes: Outcome[] = [];
        for (const intent of intents) {
          if (signal.aborted) outcomes.push({ kind: 'transient', error: 'aborted at the deadline' });
          else {
            sent.push(intent.partitionKey);
            outcomes.push({ kind: 'delivered' });
            // The second write hangs until the deadline aborts it (then the sink answers at once).
            if (intent.partitionKey === 'vpc:b') await new Promise((resolve) => signal.addEventListener('abort', resolve));
          }
        }
        return outcomes;
      },
    };
    const result = await createDrainer({ db: t.db, spec, sink, deliveryTimeoutMs: 200, logger: quiet, backoff: { baseMs: 60_000 } }).drainOnce();
    expect(result).toMatchObject({ claimed: 3, delivered: 2, retried: 1 });
    expect(sent).toEqual(['vpc:a', 'vpc:b']);
    expect((await rows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error])).toEqual([
      [true, 0, null],
      [true, 0, null],
      [false, 1, 'aborted at the deadline'],
    ]);
  });

  for (const [name, deliver, error] of cases) {
    test(`${name}: the batch is retried and the drainer lives on`, async () => {
      const spec = await freshOutbox(t.db);
      await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
      const drainer = createDrainer({ db: t.db, spec, sink: { deliver: (i, c) => deliver(i, c.signal) }, deliveryTimeoutMs: 200, logger: quiet });
      const result = await drainer.drainOnce();
      expect(result).toMatchObject({ claimed: 2, retried: 2, delivered: 0 });
      for (const row of await rows(t.db, spec)) {
        expect(row.attempt_count).toBe(1);
        expect(row.last_error).toMatch(error);
      }
      await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now()`.execute(t.db);
      const sink = createRecordingSink();
      await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
      expect(sink.delivered).toHaveLength(2);
    });
  }
});

describe('commit durability', () => {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const setting = async (db: Kysely<any>) =>
    (await sql<{ v: string }>`select current_setting('synchronous_commit') as v`.execute(db)).rows[0]?.v;

  test('a claim asked for an asynchronous commit turns synchronous_commit off for its own transaction only', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    // Connections whose session setting is on (the test server itself may run with it off).
    const db = t.kysely({ max: 1, options: '-c synchronous_commit=on' });
    await db.transaction().execute(async (trx) => {
      await sql`set local synchronous_commit = remote_write`.execute(trx);
      await claimBatch(trx, spec, 1, { synchronousCommit: true });
      expect(await setting(trx)).toBe('remote_write');
    });
    await db.transaction().execute(async (trx) => {
      await claimBatch(trx, spec, 1, { synchronousCommit: false });
      expect(await setting(trx)).toBe('off');
    });
    // The next transaction on the drainer's connection is back to the session's setting.
    expect(await setting(db)).toBe('on');
    await db.destroy();
  });

  test('the drainer claims with an asynchronous commit by default, and keeps the setting with synchronousCommit: true', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const claims: string[] = [];
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max: 1 }) }),
      log: (event) => {
        const call = /_claim"\((.*?)\) c/.exec(event.query.sql);
        if (call) claims.push(call[1]!);
      },
    });
    await createDrainer({ db, spec, sink: createRecordingSink(), batchSize: 1, logger: quiet }).drainOnce();
    await enqueueRows(t.db, spec, ['vpc:c']);
    await createDrainer({ db, spec, sink: createRecordingSink(), batchSize: 1, logger: quiet, synchronousCommit: true }).drainOnce();
    // (batch, heads, max attempts, runs, synchronous commit, flushed partitions); each pass ends with an empty claim.
    expect(claims.map((c) => c.split(', ')[4])).toEqual(['false', 'false', 'false', 'true', 'true']);
    expect((await rows(t.db, spec)).every((r) => r.sent)).toBe(true);
    await db.destroy();
  });

  test('synchronousCommit must be a boolean', () => {
    expect(() => createDrainer({ db: t.db, spec: defineOutbox({ table: 'drain.x', partitionColumn: 'resource_id' }), sink: createRecordingSink(), synchronousCommit: 'yes' as unknown as boolean })).toThrow(
      /synchronousCommit.*expected a boolean, got yes/,
    );
  });
});

describe('flush', () => {
  test('resolves once the partition’s intents are delivered', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:x', 'vpc:x', 'vpc:y']);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, interval: 3_600_000 });
    await drainer.flush({ partitionKey: 'vpc:x', timeoutMs: 5_000 });
    const state = await rows(t.db, spec);
    expect(state.filter((r) => r.resource_id === 'vpc:x').every((r) => r.sent)).toBe(true);
    await drainer.stop();
  });

  test('rejects with the reason when an intent is poisoned', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:p']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'permanent', error: 'validation_error: type "vpcx" not found' }) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet });
    const error = await drainer.flush({ partitionKey: 'vpc:p', timeoutMs: 5_000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlushPoisonedError);
    expect((error as FlushPoisonedError).lastError).toBe('validation_error: type "vpcx" not found');
    await drainer.stop();
  });

  test('times out cleanly when delivery cannot happen in time', async () => {
    const spec = await freshOutbox(t.db);
    const [id] = await enqueueRows(t.db, spec, ['vpc:slow']);
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, backoff: { baseMs: 60_000 } });
    const started = Date.now();
    const error = await drainer.flush({ partitionKey: 'vpc:slow', timeoutMs: 300 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlushTimeoutError);
    expect((error as FlushTimeoutError).pendingIds).toEqual([id]);
    expect(Date.now() - started).toBeLessThan(2_000);
    await drainer.stop();
  });

  test('resolves at once when nothing is pending for the partition', async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet });
    await expect(drainer.flush({ partitionKey: 'vpc:none', timeoutMs: 100 })).resolves.toBeUndefined();
  });
});

describe('lifecycle', () => {
  const listeners = async (spec: OutboxSpec) =>
    Number(
      (
        await sql<{ n: string }>`select count(*) as n from pg_stat_activity where datname = current_database() and query = ${`listen "${spec.channel}"`}`.execute(t.db)
      ).rows[0]?.n,
    );

  test('a stop() while start() is still starting wins: no timer, no LISTEN connection, nothing delivered after', async () => {
    const spec = await freshOutbox(t.db);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, interval: 20, listen: { connectionString: t.url } });
    const starting = drainer.start();
    await drainer.stop();
    await starting;
    await enqueueRows(t.db, spec, ['vpc:after-stop']);
    await sleep(300);
    expect(sink.delivered).toHaveLength(0);
    expect(await listeners(spec)).toBe(0);
  });

  test('start() twice is one start: one LISTEN connection, and stop() leaves none', async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet, interval: 3_600_000, listen: { connectionString: t.url } });
    await Promise.all([drainer.start(), drainer.start()]);
    await drainer.start();
    expect(await listeners(spec)).toBe(1);
    await drainer.stop();
    expect(await listeners(spec)).toBe(0);
    // And it starts again after a stop.
    await drainer.start();
    expect(await listeners(spec)).toBe(1);
    await drainer.stop();
  });

  test('a flush still on its first query when stop() comes rejects with DrainerStoppedError, not a timeout', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:waiting']);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) }), logger: quiet, backoff: { baseMs: 60_000 } });
    const started = Date.now();
    const flushing = drainer.flush({ partitionKey: 'vpc:waiting', timeoutMs: 5_000 }).catch((e: unknown) => e);
    await drainer.stop();
    expect(await flushing).toBeInstanceOf(DrainerStoppedError);
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});

describe('a drainer left running across setMaxAttempts', () => {
  test('refuses its batches with an OutboxConfigError naming maxAttempts, touching no row, until restarted with the new spec', async () => {
    const spec = await freshOutbox(t.db, { maxAttempts: 3 });
    const sink = createRecordingSink();
    const old = createDrainer({ db: t.db, spec, sink, logger: quiet });
    await old.drainOnce(); // verifies the table (once per drainer), with nothing to deliver yet
    const raised = defineOutbox({ table: spec.table, partitionColumn: 'resource_id', maxAttempts: 5 });
    await setMaxAttempts(t.db, raised);
    await enqueueRows(t.db, spec, ['vpc:m1', 'vpc:m1', 'vpc:m2']);
    const before = await rows(t.db, spec);

    const error = await old.drainOnce().catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'OutboxConfigError', field: 'maxAttempts' });
    expect(String((error as Error).message)).toContain('records maxAttempts 5');
    expect(await rows(t.db, spec)).toEqual(before);
    expect(sink.delivered).toHaveLength(0);

    const restarted = createDrainer({ db: t.db, spec: raised, sink, logger: quiet });
    expect((await restarted.drainOnce()).delivered).toBe(3);
  });
});
