/**
 * One request per partition per process (docs/design.md §5, "Open batches"): a lane's session ends
 * while a delaying proxy holds its Write; the row locks go with the session, and another lane of the
 * same drainer claims the partition again. It must not send while the first Write is on the wire.
 */
import { createDrainer, type Sink } from '@outbox/drainer';
import { openFgaClientConfig, startDelayingProxy, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { outboxTables, quiet, writes } from './testing/fixtures.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);

/** A sink that records when each call of `inner` ran and for which partitions: what overlapped, per key. */
function timedSink(inner: Sink) {
  const calls: { keys: Set<string>; start: number; end?: number }[] = [];
  const sink: Sink = {
    async deliver(intents, context) {
      const call: { keys: Set<string>; start: number; end?: number } = {
        keys: new Set(intents.map((i) => i.partitionKey)),
        start: performance.now(),
      };
      calls.push(call);
      try {
        return await inner.deliver(intents, context);
      } finally {
        call.end = performance.now();
      }
    },
  };
  const overlapping = (key: string) => {
    const spans = calls.filter((c) => c.keys.has(key));
    return spans.filter((a, i) => spans.some((b, j) => j < i && a.start < (b.end ?? Infinity))).length;
  };
  return { sink, calls, overlapping };
}

test('a partition re-claimed while its Write from a lane whose session died is still in flight waits for it: 0 overlapping requests', async () => {
  const spec = await outbox.fresh();
  const HELD = 'vpc:held';
  await outbox.enqueue(spec, [{ partitionKey: HELD, payload: writes(`user:a owner ${HELD}`) }]);
  await outbox.enqueue(
    spec,
    Array.from({ length: 300 }, (_, i) => ({ partitionKey: `vpc:${i}`, payload: writes(`user:a owner vpc:${i}`) })),
  );
  const upstream = new URL(fga.apiUrl);
  const proxy = await startDelayingProxy({ upstream: { host: upstream.hostname, port: Number(upstream.port) } });
  const pool = t.pool({ max: 2 });
  pool.on('connect', (client) => client.on('error', () => undefined)); // the ended backend is reported there
  const db = new Kysely({ dialect: new PostgresDialect({ pool }) });
  const timed = timedSink(
    createOpenFgaSink({
      ...openFgaClientConfig(fga.storeId, fga.authorizationModelId),
      storeId: fga.storeId,
      apiUrl: `http://${proxy.host}:${proxy.port}`,
      timeoutMs: 30_000,
    }),
  );
  const drainer = createDrainer({
    db,
    spec,
    sink: timed.sink,
    logger: quiet,
    batchSize: 10,
    concurrentBatches: 2,
    lateWrites: false,
  });
  try {
    proxy.holdRequests(1, 2_000); // the first batch's Write: the one holding vpc:held
    const pass = drainer.drainOnce().catch((error: unknown) => error);
    // The first lane's session, by the transaction that holds vpc:held's row lock.
    let pid: number | undefined;
    for (let i = 0; i < 200 && pid === undefined; i += 1) {
      pid = (
        await sql<{ pid: number }>`select a.pid from pg_stat_activity a
          join ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} o on o.xmax::text = a.backend_xid::text
          where o.resource_id = ${HELD}`.execute(t.db)
      ).rows[0]?.pid;
      if (pid === undefined) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(pid, "the held batch's session").toBeDefined();
    for (let i = 0; i < 200 && proxy.heldRequests().length === 0; i += 1)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(proxy.heldRequests()).toHaveLength(1);
    await sql`select pg_terminate_backend(${pid})`.execute(t.db);
    await pass;
    // Whatever the first pass left (its failed lane's rows), later passes deliver.
    for (let i = 0; i < 50; i += 1) {
      const rows = await outbox.rows(spec);
      if (rows.every((r) => r.sent)) break;
      await drainer.drainOnce().catch(() => undefined);
    }
    expect((await outbox.rows(spec)).every((r) => r.sent)).toBe(true);
    const held = timed.calls.filter((c) => c.keys.has(HELD));
    expect(held.length, 'vpc:held was claimed again after its session ended').toBeGreaterThanOrEqual(2);
    expect(timed.overlapping(HELD)).toBe(0);
    expect(held[1]!.start).toBeGreaterThanOrEqual(held[0]!.end!);
  } finally {
    await drainer.stop();
    await db.destroy();
    await proxy.close();
  }
}, 60_000);
