import { OutboxConfigError } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { pointsOf, pointValue, testMeterProvider } from '@outbox/test-observability';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { auditWorld } from './testing/audit-fixture.js';
import { auditOutbox, createReconciler, createReconcilerMetrics, DiscardRefusedError, repairOutbox } from './index.js';
import {
  createTestOutbox,
  deliver,
  enqueueIntent,
  openTransaction,
  poison,
  recordingLogger,
  refuse,
  register,
} from './testing/outbox-fixture.js';
import { reconcilerLockKey } from './redrive-statements.js';

const t = useTestDatabase();
const sdk = testMeterProvider();

describe("the reconciler's redrive metrics", () => {
  test('count revived and superseded intents and passes by result: completed, skipped, failed', async () => {
    const spec = await createTestOutbox(t.db);
    const revivable = await enqueueIntent(t.db, spec, 'vpc:a', register('a'));
    const old = await enqueueIntent(t.db, spec, 'vpc:b', register('b'));
    const successor = await enqueueIntent(t.db, spec, 'vpc:b', register('b'));
    await poison(t.db, spec, revivable);
    await poison(t.db, spec, old);
    await deliver(t.db, spec, successor);
    const reconciler = createReconciler({
      db: t.db,
      spec,
      logger: recordingLogger(),
      meterProvider: sdk.meterProvider,
    });
    const table = { 'outbox.table': spec.table };
    const passes = (result: string) => ({ ...table, 'outbox.pass.result': result });

    // Every counter of the table from the start, at 0: Prometheus' rate() then sees the first increment.
    let points = await sdk.collect();
    const zeros = [passes('completed'), passes('skipped'), passes('failed')].map((a) =>
      pointValue(points, 'outbox.reconciler.passes', a),
    );
    expect([
      ...zeros,
      ...['revived', 'superseded_found', 'discarded'].map((name) =>
        pointValue(points, `outbox.reconciler.${name}`, table),
      ),
    ]).toEqual([0, 0, 0, 0, 0, 0]);

    expect(await reconciler.redrivePoisoned()).toMatchObject({
      revived: [{ id: revivable }],
      superseded: [{ id: old }],
    });
    // The superseded row is reported again by every pass until a human retires it.
    expect(await reconciler.redrivePoisoned()).toMatchObject({ revived: [], superseded: [{ id: old }] });
    points = await sdk.collect();
    expect(pointValue(points, 'outbox.reconciler.revived', table)).toBe(1);
    expect(pointValue(points, 'outbox.reconciler.superseded_found', table)).toBe(2);
    expect(pointValue(points, 'outbox.reconciler.passes', passes('completed'))).toBe(2);
    expect(pointsOf(points, 'outbox.reconciler.revived', table)[0]).toMatchObject({
      scope: '@outbox/reconciler',
      kind: 'counter',
      unit: '{intent}',
    });

    // Another process holds the table's pass: skipped, and nothing else counted.
    const holder = await openTransaction(t.kysely({ max: 1 }));
    try {
      await sql`select pg_advisory_xact_lock(${reconcilerLockKey(spec)})`.execute(holder.trx);
      expect(await reconciler.redrivePoisoned()).toMatchObject({ skipped: true });
    } finally {
      await holder.rollback();
    }
    // The table went away after the start's verification: the pass fails, and says so.
    await sql.raw(`alter table ${tableNames(spec).table} rename to gone`).execute(t.db);
    await expect(reconciler.redrivePoisoned()).rejects.toThrow(/does not exist/);
    await reconciler.stop();

    points = await sdk.collect();
    expect(pointValue(points, 'outbox.reconciler.passes', passes('skipped'))).toBe(1);
    expect(pointValue(points, 'outbox.reconciler.passes', passes('failed'))).toBe(1);
    expect(pointValue(points, 'outbox.reconciler.passes', passes('completed'))).toBe(2);
    expect(pointValue(points, 'outbox.reconciler.superseded_found', table)).toBe(2);
  });

  test('count the intents discardPoisoned closed; a refused call closes and counts none', async () => {
    const spec = await createTestOutbox(t.db);
    const exhausted = await enqueueIntent(t.db, spec, 'vpc:a', register('a'));
    const refused = await enqueueIntent(t.db, spec, 'vpc:b', register('b'));
    const deliverable = await enqueueIntent(t.db, spec, 'vpc:c', register('c'));
    await poison(t.db, spec, exhausted);
    await refuse(t.db, spec, refused);
    const reconciler = createReconciler({
      db: t.db,
      spec,
      logger: recordingLogger(),
      meterProvider: sdk.meterProvider,
    });
    const table = { 'outbox.table': spec.table };

    // All or nothing: a deliverable row among the ids refuses the whole call.
    await expect(
      reconciler.discardPoisoned({ ids: [exhausted, deliverable], reason: 'tenant deleted' }),
    ).rejects.toThrow(DiscardRefusedError);
    expect(pointValue(await sdk.collect(), 'outbox.reconciler.discarded', table)).toBe(0); // from the start, at 0
    expect(await reconciler.discardPoisoned({ ids: [exhausted, refused], reason: 'tenant deleted' })).toHaveLength(2);
    await reconciler.stop();

    const points = await sdk.collect();
    expect(pointValue(points, 'outbox.reconciler.discarded', table)).toBe(2);
    expect(pointsOf(points, 'outbox.reconciler.discarded', table)[0]).toMatchObject({
      scope: '@outbox/reconciler',
      kind: 'counter',
      unit: '{intent}',
    });
  });

  test('a meterProvider that is not one is refused at creation', () => {
    expect(() =>
      // @ts-expect-error not a MeterProvider
      createReconciler({ db: t.db, spec: { partitionColumn: 'resource_id', table: 'x.y' }, meterProvider: {} }),
    ).toThrow(new OutboxConfigError('meterProvider', 'expected an OpenTelemetry MeterProvider'));
  });
});

describe('createReconcilerMetrics: audits and repairs', () => {
  test("count an audit's drifted tuples by kind, keep its drifted partitions as a gauge until the next audit, and count what a repair corrected", async () => {
    const world = await auditWorld(t.db);
    for (const id of ['a', 'b', 'c']) await world.create(id);
    await world.drain();
    // Drift of every kind: an added tuple, a deleted one, an orphan (its owner row deleted by hand).
    await world.client.write({
      writes: [{ user: 'user:mallory', relation: 'viewer', object: 'vpc:a' }],
      deletes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:b' }],
    });
    await sql`delete from ${sql.raw(world.table)} where id = 'c'`.execute(t.db);
    const recorder = createReconcilerMetrics({ meterProvider: sdk.meterProvider });
    const full = { 'outbox.table': world.spec.table, 'outbox.audit.mode': 'full' };
    const kind = (k: string) => ({ ...full, 'outbox.drift.kind': k });
    const operation = (o: string) => ({ 'outbox.table': world.spec.table, 'outbox.repair.operation': o });

    const report = await auditOutbox(world.target);
    recorder.recordAudit(report);
    let points = await sdk.collect();
    expect(report).toMatchObject({
      drifted: 3,
      missing: { tuples: 1 },
      unexpected: { tuples: 1 },
      orphans: { tuples: 2 },
    });
    expect(
      [kind('missing'), kind('unexpected'), kind('orphan')].map((a) =>
        pointValue(points, 'outbox.audit.drift_found', a),
      ),
    ).toEqual([1, 1, 2]);
    expect(pointValue(points, 'outbox.audit.drifted', full)).toBe(3);
    expect(pointsOf(points, 'outbox.audit.drifted', full)[0]).toMatchObject({
      scope: '@outbox/reconciler',
      kind: 'gauge',
      unit: '{partition}',
    });

    // A dry run enqueues nothing, and counts nothing.
    recorder.recordRepair(await repairOutbox(world.target));
    expect(pointsOf(await sdk.collect(), 'outbox.repair.drift_repaired')).toEqual([]);
    recorder.recordRepair(await repairOutbox({ ...world.target, dryRun: false }));
    await world.drain();
    recorder.recordAudit(await auditOutbox(world.target));

    points = await sdk.collect();
    expect(pointValue(points, 'outbox.repair.drift_repaired', operation('write'))).toBe(1);
    expect(pointValue(points, 'outbox.repair.drift_repaired', operation('delete'))).toBe(3);
    expect(pointValue(points, 'outbox.audit.drifted', full)).toBe(0); // clean now
    expect(pointValue(points, 'outbox.audit.drift_found', kind('orphan'))).toBe(2); // found once, counted once
  });
});
