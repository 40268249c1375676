import { OpenFgaClient, type WriteAuthorizationModelRequest } from '@openfga/sdk';
import { createDrainer } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { OutboxConfigError, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { openFgaClientConfig, stackInfo, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { pointValue, testMeterProvider } from '@outbox/test-observability';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  headViolations,
  heads,
  openTransaction,
  poison,
  readRow,
  readRows,
  recordingLogger,
  refuse,
  register,
} from './testing/outbox-fixture.js';

// A row OpenFGA refuses for good is retried only when its cause may have gone (docs/ledger.md).
const t = useTestDatabase();
const sdk = testMeterProvider();
const fga = useOpenFgaStore();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);
const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

/** The project's model plus a `viewer`-only type per name: writing it is a model change. */
function modelWith(...types: string[]): WriteAuthorizationModelRequest {
  const model = stackInfo().authorizationModel;
  const extra = types.map((type) => ({
    type,
    relations: { viewer: { this: {} } },
    metadata: { relations: { viewer: { directly_related_user_types: [{ type: 'user' }] } } },
  }));
  return { ...model, type_definitions: [...model.type_definitions, ...extra] };
}

async function until(what: string, check: () => Promise<boolean>, step: () => Promise<unknown> = tick): Promise<void> {
  for (const deadline = Date.now() + 10_000; !(await check()); await step()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
  }
}

/** The reconciler's completed passes over `spec`'s table, by its metrics. */
const completedPasses = async (spec: OutboxSpec) =>
  pointValue(await sdk.collect(), 'outbox.reconciler.passes', {
    'outbox.table': spec.table,
    'outbox.pass.result': 'completed',
  }) ?? 0;

/** Sets the row's spacing as elapsed (the alternative is to wait it out). */
const spacingPassed = (spec: OutboxSpec, id: string) =>
  sql`update ${sql.raw(tableNames(spec).table)} set revive_after = now() - interval '1 second' where id = ${id}`.execute(
    t.db,
  );
const secondsUntil = (date: Date | null) => (date === null ? null : Math.round((date.getTime() - Date.now()) / 1000));

describe('a row OpenFGA refuses for good, with no successor', () => {
  test('the timer never retries it; each model change retries it once; the model that has its type gets it delivered', async () => {
    const spec = await createTestOutbox(t.db, { maxAttempts: 3 });
    const id = await enqueueIntent(t.db, spec, 'ticket:t1', {
      writes: [{ user: 'user:alice', relation: 'viewer', object: 'ticket:t1' }],
    });
    const client = new OpenFgaClient(openFgaClientConfig(fga.storeId)); // the latest model, as a service that pins none
    let writes = 0;
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createOpenFgaSink({ client, onRequest: () => (writes += 1) }),
      listen: false,
      logger: recordingLogger(),
    });
    await drainer.drainOnce();
    expect(await readRow(t.db, spec, id)).toMatchObject({
      attempt_count: 3,
      poison_cause: 'refused',
      poison_code: 'validation_error',
    });

    const logger = recordingLogger();
    const modelId = async () => (await client.readLatestAuthorizationModel()).authorization_model?.id;
    const reconciler = createReconciler({
      db: t.db,
      spec,
      intervalMs: 5,
      logger,
      modelId,
      meterProvider: sdk.meterProvider,
    });
    const morePasses = async (n: number) => {
      const from = await completedPasses(spec);
      await until(`${n} passes`, async () => (await completedPasses(spec)) >= from + n);
    };
    await reconciler.start();
    try {
      await morePasses(20);
      await drainer.drainOnce();
      expect(writes).toBe(1);

      // A model change that does not help: one retry, refused again, then left alone.
      await client.writeAuthorizationModel(modelWith('unrelated'));
      await until('the revival', async () => (await readRow(t.db, spec, id)).revival_count === 1);
      await drainer.drainOnce();
      expect(await readRow(t.db, spec, id)).toMatchObject({
        attempt_count: 3,
        poison_cause: 'refused',
        revive_requested: false,
      });
      await morePasses(20);
      await drainer.drainOnce();
      expect(writes).toBe(2);

      // The model that has the type, after the spacing the first revival set.
      await spacingPassed(spec, id);
      await client.writeAuthorizationModel(modelWith('unrelated', 'ticket'));
      await until(
        'the delivery',
        async () => (await readRow(t.db, spec, id)).delivered,
        () => drainer.drainOnce(),
      );
      expect(writes).toBe(3);
      expect((await client.read({ user: 'user:alice', relation: 'viewer', object: 'ticket:t1' })).tuples).toHaveLength(
        1,
      );
    } finally {
      await reconciler.stop();
      await drainer.stop();
    }
  });

  test('a refused row waiting on the timer is logged when it starts waiting and when the waiting set changes, not every pass', async () => {
    const spec = await createTestOutbox(t.db);
    const first = await enqueueIntent(t.db, spec, 'vpc:w1', register('w1'));
    await refuse(t.db, spec, first);
    const logger = recordingLogger();
    const reconciler = createReconciler({ db: t.db, spec, logger, intervalMs: 20, meterProvider: sdk.meterProvider });
    const waitingLines = () => logger.entries.filter((e) => /refused by the target wait/.test(e.message));
    await reconciler.start();
    await until('ten passes', async () => (await completedPasses(spec)) >= 10);
    expect(waitingLines().map((e) => e.fields?.ids)).toEqual([[first]]);

    const second = await enqueueIntent(t.db, spec, 'vpc:w2', register('w2'));
    await refuse(t.db, spec, second);
    await until('the new waiting row to be logged', async () => waitingLines().length === 2);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await reconciler.stop();
    expect(waitingLines().map((e) => e.fields?.ids)).toEqual([[first], [first, second]]);
  });

  test('requests are spaced: one during the spacing waits, reported, and is honoured once it passed; the spacing doubles up to its cap', async () => {
    const spec = await createTestOutbox(t.db);
    const id = await enqueueIntent(t.db, spec, 'vpc:r', register('r'));
    await refuse(t.db, spec, id);
    const reconciler = createReconciler({
      db: t.db,
      spec,
      logger: recordingLogger(),
      revivalBackoff: { baseMs: 60_000, maxMs: 200_000 },
    });
    const timer = await reconciler.redrivePoisoned();
    expect(timer.revived).toEqual([]);
    expect(timer.waiting).toEqual([
      {
        id,
        partitionKey: 'vpc:r',
        lastError: 'OpenFGA 400 validation_error: refused',
        poisonCause: 'refused',
        poisonCode: 'validation_error',
        requested: false,
        reviveAfter: null,
      },
    ]);

    const spacings: (number | null)[] = [];
    for (let revival = 1; revival <= 3; revival += 1) {
      if (revival > 1) {
        await refuse(t.db, spec, id); // the drainer's next attempt was refused too
        const early = await reconciler.redrivePoisoned({ refused: true, reason: 'operator' });
        expect(early.revived).toEqual([]);
        expect(early.waiting).toMatchObject([{ id, requested: true }]);
        expect((await reconciler.redrivePoisoned()).revived).toEqual([]); // the timer: still spaced
        await spacingPassed(spec, id);
        expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual([id]); // the request stood
      } else {
        expect(ids((await reconciler.redrivePoisoned({ refused: true, reason: 'operator' })).revived)).toEqual([id]);
      }
      const row = await readRow(t.db, spec, id);
      expect(row).toMatchObject({
        attempt_count: 0,
        poison_cause: null,
        poison_code: null,
        revival_count: revival,
        revive_requested: false,
      });
      spacings.push(secondsUntil(row.revive_after));
    }
    expect(spacings).toEqual([60, 120, 200]);
    expect(await heads(t.db, spec)).toEqual([id]);
  });

  test('a refused row with a delivered successor stays superseded, even when asked to retry', async () => {
    const spec = await createTestOutbox(t.db);
    const reg = await enqueueIntent(t.db, spec, 'vpc:s', register('s'));
    const dereg = await enqueueIntent(t.db, spec, 'vpc:s', deregister('s'));
    await refuse(t.db, spec, reg);
    await deliver(t.db, spec, dereg);
    const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned({
      refused: true,
      reason: 'model-change',
    });
    expect(ids(result.superseded)).toEqual([reg]);
    expect(result.revived).toEqual([]);
    expect(result.waiting).toBeUndefined();
  });

  test('asking for refused rows without saying why is an OutboxConfigError naming reason', async () => {
    const spec = await createTestOutbox(t.db);
    const error = await createReconciler({ db: t.db, spec, logger: recordingLogger() })
      .redrivePoisoned({ refused: true })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).field).toBe('reason');
  });
});

describe('a row exhausted by transient failures', () => {
  test('is revived by the next timer pass, as before causes were recorded (and so is one with no cause recorded)', async () => {
    const spec = await createTestOutbox(t.db);
    const exhausted = await enqueueIntent(t.db, spec, 'vpc:e', register('e'));
    const legacy = await enqueueIntent(t.db, spec, 'vpc:l', register('l'));
    await poison(t.db, spec, exhausted);
    await sql`update ${sql.raw(tableNames(spec).table)} set poison_cause = 'exhausted' where id = ${exhausted}`.execute(
      t.db,
    );
    await poison(t.db, spec, legacy);
    const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(result.revived)).toEqual([exhausted, legacy]);
    expect(result.revived[0]).toMatchObject({ poisonCause: 'exhausted' });
    expect(result.revived[1]).not.toHaveProperty('poisonCause');
    expect(await readRow(t.db, spec, exhausted)).toMatchObject({
      attempt_count: 0,
      poison_cause: null,
      revival_count: 0,
      revive_after: null,
    });
    expect(await headViolations(t.db, spec)).toEqual([]);
  });
});

describe('a dry run', () => {
  test('reports what a pass would revive, leave superseded and leave waiting, changes nothing and waits for no lock', async () => {
    const spec = await createTestOutbox(t.db);
    const revivable = await enqueueIntent(t.db, spec, 'vpc:a', register('a'));
    const superseded = await enqueueIntent(t.db, spec, 'vpc:b', register('b'));
    const successor = await enqueueIntent(t.db, spec, 'vpc:b', deregister('b'));
    const refused = await enqueueIntent(t.db, spec, 'vpc:c', register('c'));
    const pendingBehind = await enqueueIntent(t.db, spec, 'vpc:a', deregister('a'));
    await poison(t.db, spec, revivable);
    await poison(t.db, spec, superseded);
    await deliver(t.db, spec, successor);
    await refuse(t.db, spec, refused);
    const before = await readRows(t.db, spec);
    // A drainer holds the partition of the revivable row: a real pass would wait for it.
    const drainer = await openTransaction(t.db);
    await sql`select id from ${sql.raw(tableNames(spec).table)} where id = ${pendingBehind} for update`.execute(
      drainer.trx,
    );
    try {
      const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
      const plain = await reconciler.redrivePoisoned({ dryRun: true });
      expect({
        revived: ids(plain.revived),
        superseded: ids(plain.superseded),
        waiting: ids(plain.waiting ?? []),
        dryRun: plain.dryRun,
      }).toEqual({
        revived: [revivable],
        superseded: [superseded],
        waiting: [refused],
        dryRun: true,
      });
      const asked = await reconciler.redrivePoisoned({ dryRun: true, refused: true });
      expect(ids(asked.revived)).toEqual([revivable, refused]);
      expect(asked.waiting).toBeUndefined();
    } finally {
      await drainer.rollback();
    }
    expect(await readRows(t.db, spec)).toEqual(before);
  });
});
