import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueMany, type EnqueueInput, type OutboxSpec } from '@outbox/outbox';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { storedOn } from '@outbox/test-stack/openfga';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { freshOutbox, outboxRows, outboxTable, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, type Intent, type Outcome, type Sink } from './index.js';

// Several batches open in one drainer (docs/design.md §5, "Open batches"), delivering into the real
// OpenFGA of the test stack: per-partition order, a failing batch beside the others, stop() mid-flight.
const t = useTestDatabase();
const fga = useOpenFgaStore();

/** One Write a sink call made: which rows it carried and when it ran. */
interface WriteSpan {
  readonly ids: readonly string[];
  readonly keys: readonly string[];
  readonly startedAt: number;
  readonly endedAt: number;
}

/**
 * A sink that writes each batch's tuples to the test's OpenFGA store in one Write (batches here stay
 * under its 100 tuples), recording every Write and how many calls were in flight at most. `before`
 * may answer a call itself (a failure) instead of writing. A Write OpenFGA refuses (a tuple written
 * twice: a duplicate delivery) poisons its intents, which every test here counts as a failure.
 */
function storeSink(before?: (intents: readonly Intent[]) => Promise<readonly Outcome[] | undefined>) {
  const writes: WriteSpan[] = [];
  const state = { inFlight: 0, mostInFlight: 0 };
  const sink: Sink = {
    async deliver(intents) {
      state.inFlight += 1;
      state.mostInFlight = Math.max(state.mostInFlight, state.inFlight);
      try {
        const answered = await before?.(intents);
        if (answered) return answered;
        const startedAt = performance.now();
        await fga.client.write({ writes: intents.flatMap((i) => i.payload.writes ?? []) });
        writes.push({
          ids: intents.map((i) => i.id),
          keys: intents.map((i) => i.partitionKey),
          startedAt,
          endedAt: performance.now(),
        });
        return intents.map(() => ({ kind: 'delivered' as const }));
      } catch (error) {
        return intents.map(() => ({
          kind: 'permanent' as const,
          error: error instanceof Error ? error.message : String(error),
        }));
      } finally {
        state.inFlight -= 1;
      }
    },
  };
  return { sink, writes, state };
}

/**
 * Per partition, what breaks its order: a Write carrying its rows that started before the previous
 * one carrying them returned, or a row of it written before a smaller id. Empty when order held.
 */
function orderBreaks(writes: readonly WriteSpan[]): string[] {
  const byKey = new Map<string, Array<{ ids: bigint[]; startedAt: number; endedAt: number }>>();
  for (const write of [...writes].sort((a, b) => a.startedAt - b.startedAt)) {
    const mine = new Map<string, bigint[]>();
    write.ids.forEach((id, i) =>
      mine.set(write.keys[i] as string, [...(mine.get(write.keys[i] as string) ?? []), BigInt(id)]),
    );
    for (const [key, ids] of mine)
      byKey.set(key, [...(byKey.get(key) ?? []), { ids, startedAt: write.startedAt, endedAt: write.endedAt }]);
  }
  const breaks: string[] = [];
  for (const [key, spans] of byKey) {
    spans.forEach((span, i) => {
      const previous = spans[i - 1];
      if (previous && span.startedAt < previous.endedAt)
        breaks.push(`${key}: a Write started before the previous one returned`);
    });
    const ids = spans.flatMap((s) => s.ids);
    if (ids.some((id, i) => i > 0 && id <= (ids[i - 1] as bigint)))
      breaks.push(`${key}: written out of id order (${ids.join(', ')})`);
  }
  return breaks;
}

/** Enqueues one intent per key (a tuple naming `tag` and its position), in one transaction. */
async function enqueueTagged(spec: OutboxSpec, tag: string, keys: readonly string[]): Promise<string[]> {
  const intents: EnqueueInput[] = keys.map((key, i) => ({
    partitionKey: key,
    payload: { writes: [{ user: `user:${tag}-${i}`, relation: 'viewer', object: key }] },
  }));
  return t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));
}

const unsent = async (spec: OutboxSpec): Promise<number> =>
  (await sql<{ n: number }>`select count(*)::int as n from ${outboxTable(spec)} where sent_at is null`.execute(t.db))
    .rows[0]?.n ?? 0;

describe('several batches open in one drainer, into OpenFGA', () => {
  test('order per partition holds with 3 open batches while writers keep enqueuing; every intent lands once', async () => {
    const spec = await freshOutbox(t.db);
    const keyOf = (n: number) => `vpc:order-${n % 40}`;
    // A backlog first, so that lanes open; then writers go on while the drainer runs.
    const enqueued = await enqueueTagged(
      spec,
      'backlog',
      Array.from({ length: 400 }, (_, i) => keyOf(i)),
    );
    const { sink, writes, state } = storeSink();
    const drainer = createDrainer({
      db: t.kysely({ max: 5 }),
      spec,
      sink,
      batchSize: 20,
      concurrentBatches: 3,
      intervalMs: 20,
      listen: { connectionString: t.url },
      logger: quiet,
    });
    await drainer.start();
    const writers = Array.from({ length: 4 }, async (_, w) => {
      for (let round = 0; round < 40; round += 1) {
        const keys = Array.from({ length: 1 + ((w + round) % 5) }, (_, i) => keyOf(w * 7 + round * 3 + i));
        enqueued.push(...(await enqueueTagged(spec, `w${w}r${round}`, keys)));
      }
    });
    await Promise.all(writers);
    const rows = enqueued.length;
    await waitUntil('every intent delivered', async () => (await unsent(spec)) === 0, 60_000);
    await drainer.stop();

    expect(state.mostInFlight).toBeGreaterThanOrEqual(2); // batches did overlap
    expect(orderBreaks(writes)).toEqual([]);
    const all = await outboxRows(t.db, spec);
    expect(all.filter((r) => r.attempt_count > 0 || !r.sent || r.is_head)).toEqual([]);
    const written = writes.flatMap((w) => w.ids);
    expect(written).toHaveLength(rows);
    expect(new Set(written).size).toBe(rows);
    // OpenFGA holds each tuple: per object, as many as the partition had rows.
    const perKey = new Map<string, number>();
    for (const row of all) perKey.set(row.resource_id, (perKey.get(row.resource_id) ?? 0) + 1);
    for (const [key, n] of perKey) expect((await storedOn(fga.client, key)).length, key).toBe(n);
  }, 120_000);

  test('a batch that fails after a long wait does not hold back the others: they deliver while it is in flight', async () => {
    const spec = await freshOutbox(t.db);
    // The oldest rows make the first batch (a full one, so more lanes open); the rest are other partitions.
    const stuck = await enqueueTagged(
      spec,
      'stuck',
      Array.from({ length: 20 }, (_, i) => `vpc:stuck-${i}`),
    );
    const good = await enqueueTagged(
      spec,
      'good',
      Array.from({ length: 60 }, (_, i) => `vpc:good-${i % 15}`),
    );
    let stuckReturned = false;
    let goodBeforeStuck = false;
    const { sink, writes } = storeSink(async (intents) => {
      if (!intents.some((i) => i.partitionKey.startsWith('vpc:stuck'))) return undefined;
      // Held until every good row is in OpenFGA (or 20 s: with one batch open at a time, never).
      const deadline = Date.now() + 20_000;
      while (
        writes.flatMap((w) => w.ids).filter((id) => good.includes(id)).length < good.length &&
        Date.now() < deadline
      )
        await sleep(10);
      goodBeforeStuck = writes.flatMap((w) => w.ids).filter((id) => good.includes(id)).length === good.length;
      stuckReturned = true;
      return intents.map(() => ({ kind: 'transient' as const, error: 'OpenFGA timed out' }));
    });
    const drainer = createDrainer({
      db: t.kysely({ max: 4 }),
      spec,
      sink,
      batchSize: 20,
      concurrentBatches: 3,
      logger: quiet,
      backoff: { baseMs: 60_000, maxMs: 60_000 },
    });
    const pass = await drainer.drainOnce();
    expect(stuckReturned).toBe(true);
    expect(goodBeforeStuck).toBe(true);
    // One pass counted both: the failed batch ended its lane only.
    expect(pass).toMatchObject({ delivered: 60, retried: 20, poisoned: 0, halted: false });
    const rows = await outboxRows(t.db, spec);
    expect(rows.filter((r) => stuck.includes(r.id)).map((r) => [r.sent, r.attempt_count, r.is_head])).toEqual(
      stuck.map(() => [false, 1, true]),
    );
    expect(rows.filter((r) => good.includes(r.id)).every((r) => r.sent)).toBe(true);
    expect(orderBreaks(writes)).toEqual([]);
  }, 60_000);

  test('stop() mid-flight waits for every open batch and loses nothing: what was written is recorded, the rest is claimable untouched', async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueTagged(
      spec,
      'stop',
      Array.from({ length: 300 }, (_, i) => `vpc:stop-${i % 30}`),
    );
    // Each call takes a while, so that three are in flight when stop() comes.
    const { sink, writes, state } = storeSink(async () => {
      await sleep(100);
      return undefined;
    });
    const options = { spec, sink, batchSize: 10, concurrentBatches: 3, intervalMs: 20, logger: quiet } as const;
    const first = createDrainer({ ...options, db: t.kysely({ max: 4 }) });
    await first.start();
    await waitUntil('three batches in flight', () => state.inFlight === 3, 20_000);
    await first.stop();
    expect(state.inFlight).toBe(0);

    // Every row written is recorded delivered, every other one untouched: no attempt counted, no lock held.
    const written = new Set(writes.flatMap((w) => w.ids));
    const afterStop = await outboxRows(t.db, spec);
    expect(afterStop.filter((r) => r.sent !== written.has(r.id))).toEqual([]);
    expect(afterStop.filter((r) => !r.sent && r.attempt_count > 0)).toEqual([]);
    expect(written.size).toBeGreaterThan(0);
    expect(written.size).toBeLessThan(ids.length);

    const second = createDrainer({ ...options, db: t.kysely({ max: 4 }) });
    for (let i = 0; i < 100 && (await unsent(spec)) > 0; i += 1) await second.drainOnce();
    const all = writes.flatMap((w) => w.ids);
    expect(all).toHaveLength(ids.length);
    expect(new Set(all).size).toBe(ids.length);
    expect(orderBreaks(writes)).toEqual([]);
    expect((await outboxRows(t.db, spec)).every((r) => r.sent && r.attempt_count === 0)).toBe(true);
  }, 90_000);
});
