import { setTimeout as sleep } from 'node:timers/promises';
import { defineOutbox, type AnyKysely } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { Kysely as KyselyClass, PostgresDialect, sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { claimBatch } from './claim.js';
import { enqueueRows, freshOutbox, outboxRows, outboxTable, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink, SinkHaltError, type Intent, type Sink } from './index.js';

// A pass: its transactions, their commits, and when it ends.
const t = useTestDatabase();

describe('a pass and its transactions', () => {
  const backendState = async (db: AnyKysely, pid: number) =>
    (await sql<{ state: string }>`select state from pg_stat_activity where pid = ${pid}`.execute(db)).rows[0]?.state;

  test('one batch open at a time: each commits before the next is delivered, in READ COMMITTED even on a serializable pool; the pass leaves its connection idle', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b', 'vpc:c']);
    const pool = t.pool({ max: 1, options: '-c default_transaction_isolation=serializable' });
    const statements: string[] = [];
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool }),
      log: (event) => {
        statements.push(event.query.sql);
      },
    });
    const pid = Number((await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]?.pid);
    const seenBefore: boolean[][] = [];
    const sink = createRecordingSink({
      outcome: async () => {
        // From another connection (batches of one): what the earlier batches of this pass committed.
        seenBefore.push((await outboxRows(t.db, spec)).map((r) => r.sent));
        return undefined;
      },
    });
    await createDrainer({ db, spec, sink, batchSize: 1, concurrentBatches: 1, logger: quiet }).drainOnce();
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

  test("a full one-partition run goes out with its COMMIT and the next BEGIN in the settle's message; a short or failed one does not", async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 35 }, () => 'vpc:hot'),
    );
    const statements: string[] = [];
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max: 1 }) }),
      log: (event) => {
        statements.push(event.query.sql);
      },
    });
    const sink = createRecordingSink();
    // One lane: the statements of one connection, in order.
    const result = await createDrainer({
      db,
      spec,
      sink,
      batchSize: 10,
      concurrentBatches: 1,
      logger: quiet,
    }).drainOnce();
    expect(result).toMatchObject({ batches: 4, delivered: 35 });
    expect(sink.delivered.map((i) => i.id)).toEqual(ids);
    const settles = statements.filter((q) => q.includes('_settle"('));
    expect(settles.map((q) => q.endsWith('; commit; begin isolation level read committed'))).toEqual([
      true,
      true,
      true,
      false,
    ]);
    expect((await outboxRows(t.db, spec)).every((r) => r.sent && !r.is_head)).toBe(true);

    // A failure in a full run: the settle goes alone, after the failure's update.
    const failing = await freshOutbox(t.db);
    await enqueueRows(
      t.db,
      failing,
      Array.from({ length: 10 }, () => 'vpc:hot'),
    );
    statements.length = 0;
    let calls = 0;
    const flaky = createRecordingSink({
      // The fifth intent of the first batch fails once: four delivered, the rest released.
      outcome: () => ((calls += 1) === 5 ? { kind: 'transient', error: 'try again' } : undefined),
    });
    // A long backoff: with the default (full jitter from 0 ms) the failed row could be due again
    // within the same pass and make a second batch.
    await createDrainer({
      db,
      spec: failing,
      sink: flaky,
      batchSize: 10,
      concurrentBatches: 1,
      logger: quiet,
      backoff: { baseMs: 60_000 },
    }).drainOnce();
    const failedBatch = statements.filter((q) => q.includes('_settle"('));
    expect(failedBatch).toHaveLength(1);
    expect(failedBatch[0]).not.toContain('commit');
    expect((await outboxRows(t.db, failing)).map((r) => r.sent)).toEqual([
      true,
      true,
      true,
      true,
      ...Array.from({ length: 6 }, () => false),
    ]);
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
    const drainer = createDrainer({ db, spec, sink: flaky, batchSize: 1, concurrentBatches: 1, logger: quiet });
    expect(await drainer.drainOnce()).toMatchObject({ batches: 1, delivered: 1, halted: true });
    expect(await backendState(t.db, pid)).toBe('idle');
    // The halted batch's row was not counted against, and the first batch stayed committed.
    expect((await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count])).toEqual([
      [true, 0],
      [false, 0],
      [false, 0],
    ]);
    expect(await drainer.drainOnce()).toMatchObject({ delivered: 2, halted: false });
    expect((await outboxRows(t.db, spec)).every((r) => r.sent)).toBe(true);
    expect(ids).toHaveLength(3);
    await db.destroy();
  });
});

describe('commit durability', () => {
  const setting = async (db: AnyKysely) =>
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
        const call = /_claim"\(.*?p_synchronous_commit => (\w+).*?\) c/.exec(event.query.sql);
        if (call) claims.push(call[1]!);
      },
    });
    await createDrainer({
      db,
      spec,
      sink: createRecordingSink(),
      batchSize: 1,
      concurrentBatches: 1,
      logger: quiet,
    }).drainOnce();
    await enqueueRows(t.db, spec, ['vpc:c']);
    await createDrainer({
      db,
      spec,
      sink: createRecordingSink(),
      batchSize: 1,
      concurrentBatches: 1,
      logger: quiet,
      synchronousCommit: true,
    }).drainOnce();
    // The claim's p_synchronous_commit argument; each pass (of one lane) ends with an empty claim.
    expect(claims).toEqual(['false', 'false', 'false', 'true', 'true']);
    expect((await outboxRows(t.db, spec)).every((r) => r.sent)).toBe(true);
    await db.destroy();
  });
});

/** 150 partitions whose intent the target refuses for now, then 50 it takes, and the sink that says so. */
async function throttledBacklog() {
  const spec = await freshOutbox(t.db);
  await enqueueRows(
    t.db,
    spec,
    Array.from({ length: 150 }, (_, i) => `bad:${i}`),
  );
  await enqueueRows(
    t.db,
    spec,
    Array.from({ length: 50 }, (_, i) => `good:${i}`),
  );
  const sink = createRecordingSink({
    outcome: (i) => (i.partitionKey.startsWith('bad') ? { kind: 'transient', error: 'throttled' } : undefined),
  });
  return { spec, sink };
}

describe('when a pass ends', () => {
  test('one batch open at a time: a batch that failed as a whole ends the pass (the target is likely down); the next pass goes on behind it', async () => {
    const { spec, sink } = await throttledBacklog();
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      concurrentBatches: 1,
      logger: quiet,
      backoff: { baseMs: 60_000 },
    });
    // One batch of 100 failures: the pass stops there instead of trying the whole backlog against it.
    expect(await drainer.drainOnce()).toMatchObject({ batches: 1, claimed: 100, retried: 100, delivered: 0 });
    // Full jitter can draw a delay of a few ms: pin the failed rows' backoff to a minute.
    await sql`update ${outboxTable(spec)} set next_attempt_at = now() + interval '1 minute' where attempt_count > 0`.execute(
      t.db,
    );
    // The next pass: the failed rows back off; the 50 other failing heads and the 50 good ones are claimed.
    expect(await drainer.drainOnce()).toMatchObject({ claimed: 100, retried: 50, delivered: 50 });
    expect(
      (await outboxRows(t.db, spec)).filter((r) => r.resource_id.startsWith('bad')).every((r) => r.attempt_count === 1),
    ).toBe(true);
  });

  test('a sink that reports every intent skipped (no progress possible) ends the pass instead of spinning', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const calls: Intent[][] = [];
    const sink: Sink = {
      deliver: async (intents) => {
        calls.push([...intents]);
        return intents.map(() => ({ kind: 'skipped' as const }));
      },
    };
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(result).toMatchObject({ claimed: 2, released: 2, delivered: 0 });
    expect(calls).toHaveLength(1);
  });

  test('drainOnce counts a mixed pass: delivered, retried, poisoned, released', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['a', 'a', 'a', 'b', 'b', 'c']);
    const [a1, a2, a3, b1, b2, c1] = ids;
    const sink = createRecordingSink({
      outcome: (i) =>
        i.id === a2
          ? { kind: 'transient', error: 'blip' }
          : i.id === b1
            ? { kind: 'permanent', error: 'bad' }
            : undefined,
    });
    const result = await createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      backoff: { baseMs: 60_000 },
    }).drainOnce();
    // Batch 1: a1 delivered, a2 retried, a3 released; b1 poisoned, b2 released; c1 delivered. Batch 2: b2.
    expect(result).toEqual({
      batches: 2,
      claimed: 7,
      delivered: 3,
      retried: 1,
      poisoned: 1,
      released: 2,
      halted: false,
    });
    expect(sink.delivered.map((i) => i.id)).toEqual([a1, c1, b2]);
    expect(a3).toBeDefined();
  });

  test('a pass whose table check fails (a drainer only kicked, never started, on a table that does not exist) is logged and emitted, not silent', async () => {
    const spec = defineOutbox({ table: 'runtime.missing', partitionColumn: 'resource_id' });
    const logged: string[] = [];
    const events: string[] = [];
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: { ...quiet, error: (message) => void logged.push(message) },
      onEvent: (e) => void events.push(e.type),
    });
    drainer.kick(); // e.g. a service that kicks after each commit
    await waitUntil('the failed pass to be reported', () => events.length > 0, 3_000).catch(() => undefined);
    expect(events).toEqual(['pass-failed']);
    expect(logged.join('\n')).toMatch(/drain pass failed: .*runtime\.missing/);
  });

  test('passes failing the same way on the timer log it once (a reminder a minute), and once when they succeed again', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:halted']);
    let refusing = true;
    const lines: { level: string; message: string }[] = [];
    const failures: string[] = [];
    const sink: Sink = {
      deliver: async () => {
        if (refusing) throw new SinkHaltError('OpenFGA refused the credentials (401)');
        return [{ kind: 'delivered' as const }];
      },
    };
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      intervalMs: 20,
      logger: {
        info: (message) => void lines.push({ level: 'info', message }),
        warn: (message) => void lines.push({ level: 'warn', message }),
        error: (message) => void lines.push({ level: 'error', message }),
      },
      onEvent: (e) => void (e.type === 'pass-failed' && failures.push(e.error.message)),
    });
    await drainer.start();
    await waitUntil('twenty failed passes', () => failures.length >= 20);
    expect(lines).toEqual([
      {
        level: 'error',
        message: 'delivery halted, nothing counted against the intents: OpenFGA refused the credentials (401)',
      },
    ]);
    refusing = false;
    await waitUntil('the intent to be delivered', async () => (await outboxRows(t.db, spec)).every((r) => r.sent));
    await drainer.stop();
    expect(lines.map((l) => l.level)).toEqual(['error', 'info']);
    expect(lines[1]?.message).toMatch(/^drain passes succeed again after \d+ failed pass\(es\)$/);
  });
});

describe('a pass with several batches open', () => {
  /** A Kysely on a pool of `max` that counts the claim calls it sends. */
  const countingClaims = (max: number) => {
    const claims = { n: 0 };
    const db = new KyselyClass({
      dialect: new PostgresDialect({ pool: t.pool({ max }) }),
      log: (event) => {
        if (event.query.sql.includes('_claim"(')) claims.n += 1;
      },
    });
    return { db, claims };
  };

  /** A sink whose calls take `ms`, counting how many run at once. */
  const slowSink = (ms: number, outcome?: Parameters<typeof createRecordingSink>[0]) => {
    const sink = createRecordingSink(outcome);
    const state = { inFlight: 0, mostInFlight: 0 };
    const slow: Sink = {
      deliver: async (intents, context) => {
        state.inFlight += 1;
        state.mostInFlight = Math.max(state.mostInFlight, state.inFlight);
        try {
          await new Promise((resolve) => setTimeout(resolve, ms));
          return await sink.deliver(intents, context);
        } finally {
          state.inFlight -= 1;
        }
      },
    };
    return { sink, slow, state };
  };

  test('an idle pass opens one batch: one empty claim, whatever concurrentBatches', async () => {
    const spec = await freshOutbox(t.db);
    const { db, claims } = countingClaims(4);
    const result = await createDrainer({
      db,
      spec,
      sink: createRecordingSink(),
      concurrentBatches: 3,
      logger: quiet,
    }).drainOnce();
    expect(result).toEqual({
      batches: 0,
      claimed: 0,
      delivered: 0,
      retried: 0,
      poisoned: 0,
      released: 0,
      halted: false,
    });
    expect(claims.n).toBe(1);
    await db.destroy();
  });

  test('a backlog: as many batches in the sink at once as concurrentBatches, never more; the pass counts them all, each batch with its own events', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 300 }, (_, i) => `vpc:${i % 100}`),
    );
    const { db } = countingClaims(4);
    const { sink, slow, state } = slowSink(20);
    const claimed: number[] = [];
    const delivered: number[] = [];
    const result = await createDrainer({
      db,
      spec,
      sink: slow,
      batchSize: 10,
      concurrentBatches: 3,
      logger: quiet,
      onEvent: (e) => {
        if (e.type === 'batch-claimed') claimed.push(e.count);
        if (e.type === 'delivered') delivered.push(e.ids.length);
      },
    }).drainOnce();
    expect(state.mostInFlight).toBe(3);
    expect(result).toMatchObject({ claimed: 300, delivered: 300, retried: 0, poisoned: 0, released: 0, halted: false });
    expect(claimed).toHaveLength(result.batches);
    expect(delivered).toHaveLength(result.batches);
    expect(claimed.reduce((a, b) => a + b, 0)).toBe(300);
    expect(new Set(sink.delivered.map((i) => i.id))).toEqual(new Set(ids));
    await db.destroy();
  });

  test('a batch that moved nothing ends the pass: with the target down and a 0 ms backoff, each row is attempted once a pass, not once a lane', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 40 }, (_, i) => `vpc:${i % 20}`),
    );
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'OpenFGA unreachable' }) });
    const db = t.kysely({ max: 4 });
    const drainer = createDrainer({
      db,
      spec,
      sink,
      batchSize: 5,
      concurrentBatches: 3,
      logger: quiet,
      backoff: { baseMs: 0, maxMs: 0 },
    });
    const result = await drainer.drainOnce();
    expect(result).toMatchObject({ delivered: 0, poisoned: 0 });
    expect(result.batches).toBeLessThanOrEqual(3); // the batches open when the first one failed, and no more
    const attempts = (await outboxRows(t.db, spec)).map((r) => r.attempt_count);
    expect(Math.max(...attempts)).toBe(1);
    await db.destroy();
  });

  test('a batch that failed as a whole ends the pass after the other open batch delivered what it holds', async () => {
    const { spec, sink: failing } = await throttledBacklog();
    // A target slower than a claim: a second batch opens while the first is delivered.
    const sink = {
      ...failing,
      deliver: async (...args: Parameters<Sink['deliver']>) => (await sleep(200), failing.deliver(...args)),
    };
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      concurrentBatches: 2,
      logger: quiet,
      backoff: { baseMs: 60_000 },
    });
    // Lane 1: 100 failures, and its lane ends. Lane 2 (opened by the full claim, while lane 1
    // delivers): 50 failures, 50 delivered, then nothing claimable. No third batch is tried against the failing target.
    expect(await drainer.drainOnce()).toMatchObject({ batches: 2, claimed: 200, retried: 150, delivered: 50 });
    expect(failing.calls).toHaveLength(2);
  });

  test('a sink halt in one open batch ends the pass halted: the other lanes end with the batch they hold, nothing is counted against an intent, no lock is left', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 60 }, (_, i) => `vpc:${i}`),
    );
    let calls = 0;
    let callsAfterHalt = 0;
    const { sink, slow, state } = slowSink(30);
    const halting: Sink = {
      deliver: async (intents, context) => {
        calls += 1;
        if (calls === 3) throw new SinkHaltError('credentials refused');
        if (calls > 3) callsAfterHalt += 1;
        return slow.deliver(intents, context);
      },
    };
    const db = t.kysely({ max: 4 });
    const result = await createDrainer({
      db,
      spec,
      sink: halting,
      batchSize: 5,
      concurrentBatches: 3,
      logger: quiet,
    }).drainOnce();
    expect(result.halted).toBe(true);
    expect(state.inFlight).toBe(0); // the pass ended after the other open batches did
    // At most the batches the two other lanes had claimed when the halt came (the released rows may be among them).
    expect(callsAfterHalt).toBeLessThanOrEqual(2);
    const rows = await outboxRows(t.db, spec);
    expect(
      rows
        .filter((r) => r.sent)
        .map((r) => r.id)
        .sort(),
    ).toEqual(sink.delivered.map((i) => i.id).sort());
    expect(result.delivered).toBe(sink.delivered.length);
    expect(rows.every((r) => r.attempt_count === 0)).toBe(true);
    // Nothing held: another drainer delivers the rest, each row once.
    const rest = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink: rest, concurrentBatches: 1, logger: quiet }).drainOnce();
    expect([...sink.delivered, ...rest.delivered].map((i) => i.id).sort()).toEqual([...ids].sort());
    await db.destroy();
  });
});
