import { setTimeout as sleep } from 'node:timers/promises';
import type { OutboxSpec } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, escaped, freshOutbox, outboxRows, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink, SinkHaltError, type Intent, type Outcome, type Sink } from './index.js';

// A sink that throws, hangs, answers wrongly or halts never kills the drainer nor loses an intent.
const t = useTestDatabase();
const states = async (spec: OutboxSpec) =>
  (await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error]);

describe('a sink that misbehaves', () => {
  test('a halt thrown by another copy of @outbox/drainer (a sink package with its own) is still a halt: nothing counted', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:h1', 'vpc:h2']);
    // What a second copy's SinkHaltError looks like here: another class, the same registry symbol.
    const foreignHalt = () =>
      Object.assign(new Error('credentials refused'), {
        name: 'SinkHaltError',
        [Symbol.for('@outbox/drainer.SinkHaltError')]: true,
      });
    expect(foreignHalt()).not.toBeInstanceOf(SinkHaltError);
    const sink: Sink = {
      deliver: async () => {
        throw foreignHalt();
      },
    };
    const result = await createDrainer({ db: t.db, spec, sink, logger: quiet }).drainOnce();
    expect(result).toMatchObject({ delivered: 0, retried: 0, halted: true });
    expect((await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error])).toEqual([
      [false, 0, null],
      [false, 0, null],
    ]);
  });

  const cases: Array<
    [string, (intents: readonly Intent[], signal: AbortSignal) => Promise<readonly Outcome[]>, RegExp]
  > = [
    [
      'throws',
      async () => {
        throw new Error('boom with Bearer s3cr3t');
      },
      /sink failed: Error: boom with Bearer \[redacted\]/,
    ],
    [
      'hangs past its deadline',
      (_i, signal) =>
        new Promise((_, reject) =>
          signal.addEventListener('abort', () => setTimeout(() => reject(new Error('late')), 5_000)),
        ),
      /did not answer within 200 ms/,
    ],
    ['returns the wrong number of outcomes', async () => [{ kind: 'delivered' }], /returned 1 outcomes for 2 intents/],
  ];

  test("a sink that honours the deadline's abort reports what it delivered before it: those count as delivered, not sent again", async () => {
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
            if (intent.partitionKey === 'vpc:b')
              await new Promise((resolve) => signal.addEventListener('abort', resolve));
          }
        }
        return outcomes;
      },
    };
    const result = await createDrainer({
      db: t.db,
      spec,
      sink,
      deliveryTimeoutMs: 200,
      logger: quiet,
      backoff: { baseMs: 60_000 },
    }).drainOnce();
    expect(result).toMatchObject({ claimed: 3, delivered: 2, retried: 1 });
    expect(sent).toEqual(['vpc:a', 'vpc:b']);
    expect((await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error])).toEqual([
      [true, 0, null],
      [true, 0, null],
      [false, 1, 'aborted at the deadline'],
    ]);
  });

  for (const [name, deliver, error] of cases) {
    test(`${name}: the batch is retried and the drainer lives on`, async () => {
      const spec = await freshOutbox(t.db);
      await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
      const drainer = createDrainer({
        db: t.db,
        spec,
        sink: { deliver: (i, c) => deliver(i, c.signal) },
        deliveryTimeoutMs: 200,
        logger: quiet,
      });
      const result = await drainer.drainOnce();
      expect(result).toMatchObject({ claimed: 2, retried: 2, delivered: 0 });
      for (const row of await outboxRows(t.db, spec)) {
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

describe('the delivery deadline and its grace', () => {
  test('a SinkHaltError thrown during the grace releases the batch without counting an attempt', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const sink: Sink = {
      deliver: (_intents, { signal }) =>
        new Promise((_, reject) =>
          signal.addEventListener('abort', () =>
            setTimeout(() => reject(new SinkHaltError('credentials refused')), 50),
          ),
        ),
    };
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, deliveryTimeoutMs: 100 });
    const result = await drainer.drainOnce();
    expect(result).toMatchObject({ halted: true, retried: 0 });
    expect(await states(spec)).toEqual([
      [false, 0, null],
      [false, 0, null],
    ]);
  });

  test('an answer during the grace with the wrong number of outcomes fails the batch as transient', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const sink: Sink = {
      deliver: (_intents, { signal }) =>
        new Promise((resolve) => signal.addEventListener('abort', () => resolve([{ kind: 'delivered' }]))),
    };
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      deliveryTimeoutMs: 100,
      backoff: { baseMs: 60_000 },
    });
    expect(await drainer.drainOnce()).toMatchObject({ retried: 2, delivered: 0 });
    expect((await states(spec)).map((r) => [r[0], r[1], String(r[2]).slice(0, 40)])).toEqual([
      [false, 1, 'sink failed: Error: sink returned 1 outc'],
      [false, 1, 'sink failed: Error: sink returned 1 outc'],
    ]);
  });

  test('a sink that rejects after the grace ran out raises no unhandled rejection, and no timer outlives the batch', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    const sink: Sink = { deliver: () => sleep(400).then(() => Promise.reject(new Error('late failure'))) };
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      deliveryTimeoutMs: 100,
      backoff: { baseMs: 60_000 },
    });
    const errors = await escaped(async () => {
      expect(await drainer.drainOnce()).toMatchObject({ retried: 1 });
    }, 500);
    expect(errors.map(String)).toEqual([]);
  });

  test('stop() waits for the in-flight batch; a sink that ignores its AbortSignal is cut at deliveryTimeoutMs and its rows counted transient', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    let claimed = false;
    const sink: Sink = {
      deliver: async (intents) => {
        claimed = true;
        await sleep(1_500); // ignores the signal
        return intents.map(() => ({ kind: 'delivered' as const }));
      },
    };
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      deliveryTimeoutMs: 500,
      backoff: { baseMs: 60_000 },
    });
    await drainer.start(); // cut 500 ms after the deadline (the grace), 500 ms before the sink would answer
    await waitUntil('the batch to be claimed', () => claimed);
    await drainer.stop();
    expect((await outboxRows(t.db, spec)).map((r) => [r.sent, r.attempt_count, r.last_error])).toEqual([
      [false, 1, 'sink failed: Error: sink did not answer within 500 ms (nor 500 ms after its signal was aborted)'],
    ]);
    await sleep(1_100); // the ignored delivery ends; nothing else runs
  });
});
