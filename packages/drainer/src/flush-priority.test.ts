// A flushed partition goes ahead of the backlog: read-your-writes must not wait for every intent
// enqueued before it in other partitions (after an outage, a backlog of minutes).
import { Kysely, PostgresDialect, sql } from 'kysely';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { claimBatch } from './claim.js';
import { deliveryOrder, enqueueRows, freshOutbox } from './testing/fixture.js';
import { createDrainer, createRecordingSink, type Intent } from './index.js';

const t = useTestDatabase();
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const backlog = (n: number) => Array.from({ length: n }, (_, i) => `vpc:backlog-${i}`);
const ofKey = (ids: string[], keys: string[], key: string) => ids.filter((_, i) => keys[i] === key);

describe('the claim with flushed partitions', () => {
  test('a flushed partition comes first with its run, behind a backlog of older heads; the other heads fill the rest of the batch', async () => {
    const spec = await freshOutbox(t.db);
    const keys = [...backlog(30), 'vpc:p', 'vpc:p', 'vpc:p'];
    const ids = await enqueueRows(t.db, spec, keys);
    await t.withTransactions(2, async ([flushed, plain]) => {
      // Asked for vpc:p (twice) and a key with nothing pending: vpc:p's head and whole run, then
      // the seven oldest other heads.
      const claim = await claimBatch(flushed!, spec, 10, { flushKeys: ['vpc:p', 'vpc:p', 'vpc:none'] });
      expect(claim.intents.map((i) => i.id)).toEqual([...ids.slice(0, 7), ...ofKey(ids, keys, 'vpc:p')]);
      expect(claim.heads).toBe(8);
      // Without flushed partitions the claim is the backlog's order, and skips what the first holds.
      const next = await claimBatch(plain!, spec, 10);
      expect(next.intents.map((i) => i.id)).toEqual(ids.slice(7, 17));
    });
  });

  test('in a heads-only claim (no runs, every partition seemed to hold one row) the flushed partition still comes with its run', async () => {
    const spec = await freshOutbox(t.db);
    const keys = [...backlog(10), 'vpc:p', 'vpc:p'];
    const ids = await enqueueRows(t.db, spec, keys);
    await t.withTransactions(1, async ([trx]) => {
      const claim = await claimBatch(trx!, spec, 4, { runs: false, flushKeys: ['vpc:p'] });
      expect(claim.intents.map((i) => i.id)).toEqual([...ids.slice(0, 2), ...ofKey(ids, keys, 'vpc:p')]);
      expect(claim.heads).toBe(3);
    });
  });

  test('a flushed head that is backing off, or held by another drainer, is not taken nor waited for; order holds', async () => {
    const spec = await freshOutbox(t.db);
    const keys = [...backlog(5), 'vpc:off', 'vpc:off', 'vpc:held', 'vpc:held'];
    const ids = await enqueueRows(t.db, spec, keys);
    const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
    const [offHead] = ofKey(ids, keys, 'vpc:off');
    const [heldHead] = ofKey(ids, keys, 'vpc:held');
    await sql`update ${table} set next_attempt_at = now() + interval '1 hour', attempt_count = 1 where id = ${offHead}`.execute(
      t.db,
    );
    await t.withTransactions(2, async ([holder, drainer]) => {
      await sql`select id from ${table} where id = ${heldHead} for update`.execute(holder!);
      const claim = await claimBatch(drainer!, spec, 10, { flushKeys: ['vpc:off', 'vpc:held'] });
      // Neither partition's successor is taken past its head: only the backlog's heads.
      expect(claim.intents.map((i) => i.id)).toEqual(ids.slice(0, 5));
    });
  });
});

describe('flush behind a backlog', () => {
  test.each([1, 3])(
    'a flush called while a pass delivers a backlog (%i open batches) is served by the next batch claimed, not after the backlog; every partition keeps id order',
    async (concurrentBatches) => {
      const spec = await freshOutbox(t.db);
      // 2,000 partitions of one row each, older than vpc:p's two rows: without priority vpc:p's head
      // is the last of 2,001 in claim order, twenty batches away.
      const keys = [...backlog(2_000), 'vpc:p', 'vpc:p'];
      const ids = await enqueueRows(t.db, spec, keys);

      // The flush's own query, seen by a log hook on the drainer's pool, tells the sink calls when
      // the flush is registered: from then on every batch claims vpc:p first. A connection is left
      // for that query beside the open batches'.
      let registered = false;
      let flushQueried: () => void = () => undefined;
      const flushRegistered = new Promise<void>((resolve) => (flushQueried = resolve)).then(
        () => void (registered = true),
      );
      // The batch that took vpc:p, once its sink call came.
      let tookP: () => void = () => undefined;
      const pTaken = new Promise<void>((resolve) => (tookP = resolve));
      const db = new Kysely({
        dialect: new PostgresDialect({ pool: t.pool({ max: concurrentBatches + 1 }) }),
        log: (event) => {
          if (
            event.level === 'query' &&
            /order by x\."resource_id", x\.id$/.test(event.query.sql.trim()) &&
            event.query.parameters.includes('vpc:p')
          )
            flushQueried();
        },
      });
      let flushed: Promise<void> | undefined;
      const sink = createRecordingSink();
      const deliver = sink.deliver.bind(sink);
      // In the order the batches were claimed (a sink call starts as its claim returns).
      const calls: Array<readonly Intent[]> = [];
      const drainer = createDrainer({
        db,
        spec,
        batchSize: 100,
        concurrentBatches,
        logger: quiet,
        intervalMs: 3_600_000,
        sink: {
          // A batch claimed before the flush registered waits for it; one claimed after, without
          // vpc:p, waits for the batch that took vpc:p: no lane claims twice meanwhile.
          async deliver(intents, context) {
            calls.push(intents);
            const claimedAfter = registered;
            if (intents.some((i) => i.partitionKey === 'vpc:p')) tookP();
            else if (claimedAfter) await Promise.race([pTaken, new Promise((resolve) => setTimeout(resolve, 5_000))]);
            flushed ??= drainer.flush({ partitionKey: 'vpc:p', timeoutMs: 30_000 });
            await flushRegistered;
            await new Promise((resolve) => setImmediate(resolve)); // the flush's .then runs
            return deliver(intents, context);
          },
        },
      });
      const pass = await drainer.drainOnce();
      await flushed;

      // vpc:p's rows together, in one of the first batches claimed after the flush registered: ahead
      // of it at most the batches claimed before (one per lane) and those claimed alongside the one
      // that took it (one per other lane).
      const callOf = (id: string) => calls.findIndex((call) => call.some((i) => i.id === id));
      const [first, second] = ofKey(ids, keys, 'vpc:p').map(callOf);
      expect(first).toBe(second);
      expect(first).toBeGreaterThanOrEqual(1);
      expect(first).toBeLessThanOrEqual(2 * concurrentBatches - 1);
      expect(calls[first!]!.slice(-2).map((i) => i.partitionKey)).toEqual(['vpc:p', 'vpc:p']);
      // Nothing lost, nothing twice, and order within each partition.
      expect(pass.delivered).toBe(2_002);
      expect(new Set(sink.delivered.map((i) => i.id)).size).toBe(2_002);
      for (const order of deliveryOrder(sink.delivered).values())
        expect(order).toEqual([...order].sort((a, b) => Number(a) - Number(b)));
      await drainer.stop();
      await db.destroy();
    },
  );

  test('a flush on an idle drainer: its partition is in the first batch of the pass it starts', async () => {
    const spec = await freshOutbox(t.db);
    const keys = [...backlog(500), 'vpc:p'];
    const ids = await enqueueRows(t.db, spec, keys);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, batchSize: 50, logger: quiet, intervalMs: 3_600_000 });
    await drainer.flush({ partitionKey: 'vpc:p', timeoutMs: 30_000 });
    expect(sink.calls[0]!.map((i) => i.id)).toContain(ids.at(-1));
    await drainer.stop();
  });
});
