import { metrics, type Meter } from '@opentelemetry/api';
import { defineOutbox, OutboxConfigError } from '@outbox/outbox';
import { histogramValue, pointsOf, pointValue, testMeterProvider } from '@outbox/test-observability';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { enqueueRows, freshOutbox, outboxTable, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, createRecordingSink, SinkHaltError, type DrainerEvent } from './index.js';

const t = useTestDatabase();
const sdk = testMeterProvider();
afterEach(() => metrics.disable());

const sumOf = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);

/** A sink that refuses `refused` for good, fails `failingOnce` transiently at its first attempt, and delivers the rest. */
function refusingAndFailingOnce(refused: string, failingOnce: string) {
  let failed = false;
  return createRecordingSink({
    outcome: (intent) => {
      if (intent.id === refused) return { kind: 'permanent', error: 'refused' };
      if (intent.id === failingOnce && !failed) {
        failed = true;
        return { kind: 'transient', error: 'unavailable' };
      }
      return undefined;
    },
  });
}

describe("the drainer's metrics", () => {
  test('outbox.drainer.listening is 1 while LISTEN is up, 0 while it is lost, and absent without LISTEN', async () => {
    const spec = await freshOutbox(t.db);
    const table = { 'outbox.table': spec.table };
    const withListen = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: quiet,
      intervalMs: 100,
      listen: { connectionString: t.url },
      meterProvider: sdk.meterProvider,
    });
    await withListen.start();
    expect(pointValue(await sdk.collect(), 'outbox.drainer.listening', table)).toBe(1);
    await sql`select pg_terminate_backend(pid) from pg_stat_activity where query ilike 'listen%' and datname = current_database()`.execute(
      t.db,
    );
    await waitUntil('LISTEN to be lost', () => withListen.listenState() !== 'listening');
    expect(pointValue(await sdk.collect(), 'outbox.drainer.listening', table)).toBe(0);
    await waitUntil('LISTEN to be back', () => withListen.listenState() === 'listening');
    expect(pointValue(await sdk.collect(), 'outbox.drainer.listening', table)).toBe(1);
    await withListen.stop();

    const other = await freshOutbox(t.db);
    const without = createDrainer({
      db: t.db,
      spec: other,
      sink: createRecordingSink(),
      logger: quiet,
      meterProvider: sdk.meterProvider,
    });
    await without.start();
    expect(pointsOf(await sdk.collect(), 'outbox.drainer.listening', { 'outbox.table': other.table })).toEqual([]);
    await without.stop();
  });

  test('count delivered, retried and poisoned intents of each table, as its events report them', async () => {
    const spec = await freshOutbox(t.db);
    const [, , c, d] = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b', 'vpc:c', 'vpc:d']);
    const sink = refusingAndFailingOnce(d!, c!);
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      backoff: { baseMs: 0, maxMs: 0 },
      meterProvider: sdk.meterProvider,
    });
    const table = { 'outbox.table': spec.table };

    // Without backoff the retried intent goes again in the same pass.
    expect(await drainer.drainOnce()).toMatchObject({ delivered: 3, retried: 1, poisoned: 1 });
    let points = await sdk.collect();
    expect(pointValue(points, 'outbox.drainer.delivered', table)).toBe(3);
    expect(pointValue(points, 'outbox.drainer.retried', table)).toBe(1);
    expect(pointValue(points, 'outbox.drainer.poisoned', table)).toBe(1);
    expect(pointsOf(points, 'outbox.drainer.delivered', table)[0]).toMatchObject({
      scope: '@outbox/drainer',
      kind: 'counter',
      unit: '{intent}',
    });

    // Counters are cumulative.
    await enqueueRows(t.db, spec, ['vpc:e']);
    expect(await drainer.drainOnce()).toMatchObject({ delivered: 1 });
    points = await sdk.collect();
    expect(pointValue(points, 'outbox.drainer.delivered', table)).toBe(4);
    expect(pointValue(points, 'outbox.drainer.retried', table)).toBe(1);
    expect(
      [false, true].map((halted) =>
        pointValue(points, 'outbox.drainer.pass.failures', { ...table, 'outbox.pass.halted': halted }),
      ),
    ).toEqual([0, 0]);
    await drainer.stop();
  });

  test("start every counter of the drainer's table at 0, before any event: rate() then sees the first one", async () => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: quiet,
      meterProvider: sdk.meterProvider,
    });
    const points = await sdk.collect();
    const table = { 'outbox.table': spec.table };
    const counters = ['delivered', 'retried', 'poisoned'].map((name) =>
      pointValue(points, `outbox.drainer.${name}`, table),
    );
    const failures = [false, true].map((halted) =>
      pointValue(points, 'outbox.drainer.pass.failures', { ...table, 'outbox.pass.halted': halted }),
    );
    expect([...counters, ...failures]).toEqual([0, 0, 0, 0, 0]);
    expect(histogramValue(points, 'outbox.drainer.delivery.lag', table)).toBeUndefined(); // a histogram has nothing to say yet
    await drainer.stop();
  });

  test("time each claim and each delivering sink call in seconds, and size each batch, by the events' own figures", async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(
      t.db,
      spec,
      Array.from({ length: 30 }, (_, i) => `vpc:${i % 7}`),
    );
    const events: DrainerEvent[] = [];
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      batchSize: 8,
      logger: quiet,
      meterProvider: sdk.meterProvider,
      onEvent: (e) => void events.push(e),
    });
    const result = await drainer.drainOnce();
    await drainer.stop();
    const claims = events.filter((e) => e.type === 'batch-claimed');
    const deliveries = events.filter((e) => e.type === 'delivered');
    expect(claims.length).toBeGreaterThan(1);

    const points = await sdk.collect();
    const table = { 'outbox.table': spec.table };
    const size = histogramValue(points, 'outbox.drainer.batch.size', table);
    expect(size).toMatchObject({
      count: result.batches,
      sum: result.claimed,
      boundaries: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000],
    });
    const claim = histogramValue(points, 'outbox.drainer.claim.duration', table);
    expect(claim?.count).toBe(claims.length);
    expect(claim?.sum).toBeCloseTo(sumOf(claims.map((e) => e.claimMs)) / 1_000, 9);
    expect(claim?.boundaries).toEqual([
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
    ]);
    const delivery = histogramValue(points, 'outbox.drainer.delivery.duration', table);
    expect(delivery?.count).toBe(deliveries.length);
    expect(delivery?.sum).toBeCloseTo(sumOf(deliveries.map((e) => e.deliverMs)) / 1_000, 9);
    expect(histogramValue(points, 'outbox.drainer.delivery.lag', table)?.count).toBe(result.delivered); // one per intent, not per batch
    expect(pointsOf(points, 'outbox.drainer.claim.duration', table)[0]).toMatchObject({ kind: 'histogram', unit: 's' });
  });

  test("measure each delivered intent's lag, from its created_at to the commit that recorded it, in seconds; retries wait inside it, poisonings count none", async () => {
    const spec = await freshOutbox(t.db);
    const ids = await enqueueRows(t.db, spec, ['vpc:a', 'vpc:a', 'vpc:b', 'vpc:c', 'vpc:d']);
    // Enqueued 90 s ago, as by a transaction that began then.
    await sql`update ${outboxTable(spec)} set created_at = now() - interval '90 seconds'`.execute(t.db);
    const [, , retriedOnce, poisoned] = ids;
    const sink = refusingAndFailingOnce(poisoned!, retriedOnce!);
    const events: DrainerEvent[] = [];
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink,
      backoff: { baseMs: 0, maxMs: 0 },
      logger: quiet,
      meterProvider: sdk.meterProvider,
      onEvent: (e) => void events.push(e),
    });
    const started = performance.now();
    expect(await drainer.drainOnce()).toMatchObject({ delivered: 4, retried: 1, poisoned: 1 });
    const elapsedS = (performance.now() - started) / 1_000;
    await drainer.stop();

    const deliveries = events.flatMap((e) => (e.type === 'delivered' ? [e] : []));
    expect(deliveries.flatMap((e) => e.ids).sort()).toEqual([ids[0], ids[1], retriedOnce, ids[4]].sort());
    const lags = deliveries.flatMap((e) => e.lagMs.map((ms) => ms / 1_000));
    expect(lags).toHaveLength(4);
    for (const lag of lags) {
      expect(lag).toBeGreaterThanOrEqual(90);
      expect(lag).toBeLessThan(90 + elapsedS + 1);
    }
    const lag = histogramValue(await sdk.collect(), 'outbox.drainer.delivery.lag', { 'outbox.table': spec.table });
    expect(lag).toMatchObject({
      count: 4,
      boundaries: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600],
    });
    expect(lag?.sum).toBeCloseTo(sumOf(lags), 6);
    expect(lag?.counts[lag.boundaries.indexOf(300)]).toBe(4); // all in (60, 300]
  });

  test('count failed passes, a halt apart from an error', async () => {
    const missing = defineOutbox({ table: 'drainer.no_such_outbox', partitionColumn: 'resource_id' });
    const broken = createDrainer({
      db: t.db,
      spec: missing,
      sink: createRecordingSink(),
      logger: quiet,
      meterProvider: sdk.meterProvider,
    });
    await expect(broken.drainOnce()).rejects.toThrow();
    await broken.stop();

    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    const halting = {
      deliver: () => Promise.reject(new SinkHaltError('credentials refused')),
    };
    const halted = createDrainer({ db: t.db, spec, sink: halting, logger: quiet, meterProvider: sdk.meterProvider });
    expect(await halted.drainOnce()).toMatchObject({ halted: true, delivered: 0 });
    await halted.stop();

    const points = await sdk.collect();
    expect(
      pointValue(points, 'outbox.drainer.pass.failures', {
        'outbox.table': missing.table,
        'outbox.pass.halted': false,
      }),
    ).toBe(1);
    expect(
      pointValue(points, 'outbox.drainer.pass.failures', { 'outbox.table': spec.table, 'outbox.pass.halted': true }),
    ).toBe(1);
    expect(pointValue(points, 'outbox.drainer.retried', { 'outbox.table': spec.table })).toBe(0); // a halt counts nothing against the intents
  });

  test('with neither meter nor meterProvider, they go to the global provider', async () => {
    metrics.setGlobalMeterProvider(sdk.meterProvider);
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a']);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet });
    await drainer.drainOnce();
    await drainer.stop();
    expect(pointValue(await sdk.collect(), 'outbox.drainer.delivered', { 'outbox.table': spec.table })).toBe(1);
  });

  test('a meter that throws never breaks delivery, and one that is not a Meter is refused at creation', async () => {
    const spec = await freshOutbox(t.db);
    await enqueueRows(t.db, spec, ['vpc:a', 'vpc:b']);
    const throwing = () => {
      throw new Error('meter broken');
    };
    const instrument = { add: throwing, record: throwing };
    const meter = {
      createCounter: () => instrument,
      createHistogram: () => instrument,
      createObservableGauge: () => ({ addCallback: () => undefined }),
    } as unknown as Meter;
    const events: string[] = [];
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createRecordingSink(),
      logger: quiet,
      meter,
      onEvent: (e) => void events.push(e.type),
    });
    expect(await drainer.drainOnce()).toMatchObject({ delivered: 2 });
    expect(events).toContain('delivered'); // the service's hook still hears every event
    await drainer.stop();

    // @ts-expect-error not a Meter
    expect(() => createDrainer({ db: t.db, spec, sink: createRecordingSink(), meter: { name: 'x' } })).toThrow(
      new OutboxConfigError('meter', 'expected an OpenTelemetry Meter'),
    );
  });
});
