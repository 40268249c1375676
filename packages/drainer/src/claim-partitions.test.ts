import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { claimBatch } from './claim.js';
import { enqueueRows, freshOutbox, quiet } from './testing/fixture.js';
import { createDrainer, createRecordingSink, type DrainerEvent } from './index.js';

// How many partitions a claim takes, and how the room is shared among their runs.
const t = useTestDatabase();

describe('how many partitions a claim takes', () => {
  const claimed = (events: DrainerEvent[]) =>
    events.flatMap((e) => (e.type === 'batch-claimed' ? [{ count: e.count, heads: e.heads }] : []));

  test('few partitions with long backlogs: the drainer takes fewer heads with longer runs, batches stay full, order holds', async () => {
    const spec = await freshOutbox(t.db);
    const keys = Array.from({ length: 400 }, (_, i) => `vpc:${i % 8}`);
    const ids = await enqueueRows(t.db, spec, keys);
    const events: DrainerEvent[] = [];
    const sink = createRecordingSink();
    await createDrainer({
      db: t.db,
      spec,
      sink,
      batchSize: 20,
      logger: quiet,
      onEvent: (e) => events.push(e),
    }).drainOnce();
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

  test("the oldest head's run takes the room first; the other heads share what it leaves", async () => {
    const spec = await freshOutbox(t.db);
    // vpc:a is oldest (3 rows), then vpc:b and vpc:c (10 rows each), then vpc:hot (30 rows).
    const keys = [
      'vpc:a',
      'vpc:b',
      'vpc:c',
      'vpc:a',
      'vpc:a',
      ...Array.from({ length: 18 }, (_, i) => (i % 2 ? 'vpc:c' : 'vpc:b')),
    ];
    const ids = await enqueueRows(t.db, spec, keys);
    const of = (key: string, n: number) => ids.filter((_, i) => keys[i] === key).slice(0, n);
    await t.withTransactions(1, async ([trx]) => {
      // 3 heads, room 9: vpc:a's run is its 2 other rows; the 7 left make a share of 3 each.
      const claim = await claimBatch(trx!, spec, 12, { headLimit: 3 });
      expect(claim.heads).toBe(3);
      expect(claim.intents.map((i) => i.id)).toEqual(
        [...of('vpc:a', 3), ...of('vpc:b', 4), ...of('vpc:c', 4)].sort((x, y) => Number(x) - Number(y)),
      );
    });
    const hot = await freshOutbox(t.db);
    const hotKeys = ['vpc:hot', 'vpc:x', 'vpc:y', ...Array.from({ length: 29 }, () => 'vpc:hot'), 'vpc:x', 'vpc:y'];
    const hotIds = await enqueueRows(t.db, hot, hotKeys);
    await t.withTransactions(1, async ([trx]) => {
      // The oldest head has a long backlog: its run fills the batch, the other heads come alone.
      const claim = await claimBatch(trx!, hot, 10, { headLimit: 3 });
      expect(claim.intents.map((i) => i.partitionKey)).toEqual([
        'vpc:hot',
        'vpc:x',
        'vpc:y',
        ...Array.from({ length: 7 }, () => 'vpc:hot'),
      ]);
      expect(claim.intents.map((i) => i.id)).toEqual(hotIds.slice(0, 10));
    });
  });

  test('one row per partition: every batch is all heads, and stays full', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 100 }, (_, i) => `vpc:${i}`),
    );
    const events: DrainerEvent[] = [];
    const sink = createRecordingSink();
    await createDrainer({
      db: t.db,
      spec,
      sink,
      batchSize: 20,
      logger: quiet,
      onEvent: (e) => events.push(e),
    }).drainOnce();
    expect(claimed(events)).toEqual(Array.from({ length: 5 }, () => ({ count: 20, heads: 20 })));
  });

  test('two claimers with a head limit of one share hot partitions: each takes another partition with its whole run', async () => {
    const spec = await freshOutbox(t.db);
    const keys = Array.from({ length: 30 }, (_, i) => `vpc:${i % 3}`);
    const ids = await enqueueRows(t.db, spec, keys);
    await t.withTransactions(2, async ([a, b]) => {
      const first = await claimBatch(a!, spec, 10, { headLimit: 1 });
      const second = await claimBatch(b!, spec, 10, { headLimit: 1 });
      expect(first).toEqual({ heads: 1, intents: expect.any(Array), createdAt: expect.any(Map) });
      expect(first.intents.map((i) => i.id)).toEqual(ids.filter((_, i) => keys[i] === 'vpc:0'));
      expect(second.intents.map((i) => i.id)).toEqual(ids.filter((_, i) => keys[i] === 'vpc:1'));
    });
  });
});
