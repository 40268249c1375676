import { defineOutbox, OutboxConfigError, setMaxAttempts } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueueRows, freshOutbox, outboxRows, quiet } from './testing/fixture.js';
import { createDrainer, createRecordingSink, type DrainerConfig } from './index.js';

// What a drainer accepts, what it refuses (an OutboxConfigError naming the field), and a spec that changes under it.
const t = useTestDatabase();
/** Node's setTimeout limit: one more and the delay silently becomes 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;
const unchecked = { table: 'config.never_created', partitionColumn: 'resource_id' } as const;

/** What createDrainer throws for `overrides`, which must be an OutboxConfigError. */
function configError(overrides: Partial<Record<keyof DrainerConfig, unknown>>): OutboxConfigError {
  const config = {
    db: t.db,
    spec: defineOutbox(unchecked),
    sink: createRecordingSink(),
    logger: quiet,
    ...overrides,
  } as DrainerConfig;
  let thrown: unknown;
  try {
    createDrainer(config);
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(OutboxConfigError);
  return thrown as OutboxConfigError;
}

const accepts = (overrides: Partial<DrainerConfig>) => () =>
  createDrainer({ db: t.db, spec: defineOutbox(unchecked), sink: createRecordingSink(), logger: quiet, ...overrides });

async function flushError(promise: Promise<unknown>): Promise<OutboxConfigError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OutboxConfigError);
  return error as OutboxConfigError;
}

describe('timer bounds', () => {
  test.each(['intervalMs', 'interval', 'deliveryTimeoutMs'] as const)(
    '%s above 2^31 - 1 ms (which setTimeout turns into 1 ms) is an OutboxConfigError naming it',
    (field) => {
      for (const value of [MAX_TIMER_MS + 1, 2 ** 32, 1e12]) {
        const error = configError({ [field]: value });
        expect(error.field).toBe(field);
        expect(error.message).toMatch(new RegExp(`^${field}: expected an integer from 1 to 2147483647, got ${value}`));
      }
      expect(accepts({ [field]: MAX_TIMER_MS })).not.toThrow();
    },
  );

  test.each(['intervalMs', 'interval', 'deliveryTimeoutMs', 'batchSize'] as const)(
    '%s must still be a positive integer',
    (field) => {
      for (const value of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '100'])
        expect(configError({ [field]: value }).field).toBe(field);
    },
  );

  test('interval is the old name of intervalMs: accepted alone, refused beside it', () => {
    expect(accepts({ interval: 50 })).not.toThrow();
    const error = configError({ interval: 50, intervalMs: 50 });
    expect(error.field).toBe('interval');
    expect(error.message).toMatch(/give intervalMs only/);
  });
});

describe('batchSize', () => {
  test('at most 1000: the settle takes one advisory lock per partition of a batch', () => {
    expect(accepts({ batchSize: 1_000 })).not.toThrow();
    for (const value of [1_001, 10_000]) {
      const error = configError({ batchSize: value });
      expect(error.field).toBe('batchSize');
      expect(error.message).toMatch(/from 1 to 1000/);
    }
  });
});

describe('concurrentBatches', () => {
  test('an integer from 1 to 16: each open batch holds a pooled connection', () => {
    expect(accepts({ concurrentBatches: 1 })).not.toThrow();
    expect(accepts({ concurrentBatches: 16 })).not.toThrow();
    for (const value of [0, -1, 17, 2.5, Number.NaN, '3']) {
      const error = configError({ concurrentBatches: value });
      expect(error.field).toBe('concurrentBatches');
      expect(error.message).toMatch(/^concurrentBatches: expected an integer from 1 to 16/);
    }
  });
});

describe('backoff', () => {
  test.each([
    ['NaN base', { baseMs: Number.NaN }, 'backoff.baseMs'],
    ['negative base', { baseMs: -1 }, 'backoff.baseMs'],
    ['fractional base', { baseMs: 0.5 }, 'backoff.baseMs'],
    ['infinite base', { baseMs: Number.POSITIVE_INFINITY }, 'backoff.baseMs'],
    ['base past the bound', { baseMs: MAX_TIMER_MS + 1 }, 'backoff.baseMs'],
    ['string base', { baseMs: '1000' }, 'backoff.baseMs'],
    ['NaN cap', { maxMs: Number.NaN }, 'backoff.maxMs'],
    ['negative cap', { baseMs: 0, maxMs: -5 }, 'backoff.maxMs'],
    ['cap past the bound', { maxMs: MAX_TIMER_MS + 1 }, 'backoff.maxMs'],
    ['cap below the base', { baseMs: 5_000, maxMs: 1_000 }, 'backoff.maxMs'],
    ['not an object', 1_000, 'backoff'],
    ['null', null, 'backoff'],
  ])('%s is an OutboxConfigError naming the field', (_what, backoff, field) => {
    const error = configError({ backoff });
    expect(error.field).toBe(field);
    expect(error.message.startsWith(`${field}: `)).toBe(true);
  });

  test('valid settings are accepted, including no backoff at all and the bounds', () => {
    for (const backoff of [
      undefined,
      {},
      { baseMs: 0 },
      { baseMs: 0, maxMs: 0 },
      { baseMs: 50, maxMs: 400 },
      { baseMs: MAX_TIMER_MS, maxMs: MAX_TIMER_MS },
      { maxMs: 1_000 },
      { maxMs: 500 },
    ]) {
      expect(accepts({ backoff })).not.toThrow();
    }
  });

  test('a checked backoff spaces the retries: the failed row is due again no sooner than now and within the base', async () => {
    const spec = await freshOutbox(t.db);
    const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
    await sql`insert into ${table} (resource_id, payload, is_head) values ('vpc:b', ${JSON.stringify({ writes: [{ user: 'user:a', relation: 'owner', object: 'vpc:b' }] })}, true)`.execute(
      t.db,
    );
    const sink = createRecordingSink({ outcome: () => ({ kind: 'transient', error: 'down' }) });
    const result = await createDrainer({
      db: t.db,
      spec,
      sink,
      logger: quiet,
      backoff: { baseMs: 60_000, maxMs: 60_000 },
    }).drainOnce();
    expect(result.retried).toBe(1);
    const [row] = (
      await sql<{ attempt_count: number; wait_ms: number }>`
        select attempt_count, extract(epoch from next_attempt_at - now()) * 1000 as wait_ms from ${table}`.execute(t.db)
    ).rows;
    expect(row!.attempt_count).toBe(1);
    expect(Number(row!.wait_ms)).toBeLessThanOrEqual(60_000);
    expect(Number(row!.wait_ms)).toBeGreaterThan(-5_000);
  });
});

describe('flush arguments', () => {
  test.each([
    ['NaN (never timed out)', Number.NaN],
    ['negative', -1],
    ['zero', 0],
    ['fractional', 1.5],
    ['past the timer bound', MAX_TIMER_MS + 1],
    ['a string', '100'],
  ])('timeoutMs %s is an OutboxConfigError naming flush.timeoutMs', async (_what, timeoutMs) => {
    const spec = await freshOutbox(t.db);
    const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet });
    const error = await flushError(drainer.flush({ partitionKey: 'vpc:x', timeoutMs: timeoutMs as number }));
    expect(error.field).toBe('flush.timeoutMs');
    await drainer.stop();
  });

  test.each([
    ['undefined', undefined],
    ['null', null],
    ['a number', 42],
  ])(
    'partitionKey %s is an OutboxConfigError naming flush.partitionKey, not a false "all delivered"',
    async (_what, partitionKey) => {
      const spec = await freshOutbox(t.db);
      const drainer = createDrainer({ db: t.db, spec, sink: createRecordingSink(), logger: quiet });
      const error = await flushError(
        drainer.flush({ partitionKey: partitionKey as unknown as string, timeoutMs: 1_000 }),
      );
      expect(error.field).toBe('flush.partitionKey');
      await expect(flushError(drainer.flush(undefined as unknown as { partitionKey: string }))).resolves.toMatchObject({
        field: 'flush',
      });
      await drainer.stop();
    },
  );

  test('the empty key is a key: flush({ partitionKey: "" }) waits for and delivers the rows stored with an empty key', async () => {
    const spec = await freshOutbox(t.db);
    const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
    const payload = JSON.stringify({ writes: [{ user: 'user:a', relation: 'owner', object: 'vpc:e' }] });
    await sql`insert into ${table} (resource_id, payload, is_head) values ('', ${payload}, true), ('', ${payload}, false)`.execute(
      t.db,
    );
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, intervalMs: MAX_TIMER_MS });
    await drainer.flush({ partitionKey: '', timeoutMs: 5_000 });
    expect(sink.delivered.map((i) => i.partitionKey)).toEqual(['', '']);
    await drainer.stop();
  });
});

describe('synchronousCommit', () => {
  test('synchronousCommit must be a boolean', () => {
    expect(() =>
      createDrainer({
        db: t.db,
        spec: defineOutbox({ table: 'drain.x', partitionColumn: 'resource_id' }),
        sink: createRecordingSink(),
        synchronousCommit: 'yes' as unknown as boolean,
      }),
    ).toThrow(/synchronousCommit.*expected a boolean, got yes/);
  });
});

describe('lateWrites', () => {
  const reading = (writeLifetimeMs?: number) => ({
    ...createRecordingSink(),
    readTuples: async () => [],
    ...(writeLifetimeMs !== undefined ? { writeLifetimeMs } : {}),
  });

  test("a check sooner than the sink's write lifetime is refused: it could read before a late write lands", () => {
    const error = configError({ sink: reading(4_000), lateWrites: { verifyDelayMs: 3_999 } });
    expect(error.field).toBe('lateWrites.verifyDelayMs');
    expect(error.message).toMatch(/at least the sink's writeLifetimeMs \(4000\)/);
    expect(accepts({ sink: reading(4_000), lateWrites: { verifyDelayMs: 4_000 } })).not.toThrow();
  });

  test('asked of a sink that cannot read back, or without a delay the sink cannot give, it is refused', () => {
    expect(configError({ lateWrites: { verifyDelayMs: 5_000 } }).message).toMatch(
      /^lateWrites: the sink cannot read its target back/,
    );
    expect(configError({ sink: reading(), lateWrites: {} }).field).toBe('lateWrites.verifyDelayMs');
    expect(accepts({ sink: reading(), lateWrites: { verifyDelayMs: 5_000 } })).not.toThrow();
  });

  test('a bad value names its field', () => {
    for (const value of [0, -1, 1.5, '5000', MAX_TIMER_MS + 1])
      expect(configError({ sink: reading(), lateWrites: { verifyDelayMs: value as number } }).field).toBe(
        'lateWrites.verifyDelayMs',
      );
    expect(configError({ lateWrites: 'on' }).field).toBe('lateWrites');
    expect(configError({ sink: { ...reading(), writeLifetimeMs: -1 } }).field).toBe('sink.writeLifetimeMs');
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
    const before = await outboxRows(t.db, spec);

    const error = await old.drainOnce().catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'OutboxConfigError', field: 'maxAttempts' });
    expect(String((error as Error).message)).toContain('records maxAttempts 5');
    expect(await outboxRows(t.db, spec)).toEqual(before);
    expect(sink.delivered).toHaveLength(0);

    const restarted = createDrainer({ db: t.db, spec: raised, sink, logger: quiet });
    expect((await restarted.drainOnce()).delivered).toBe(3);
  });

  test('its write-through records a delivery (one counts alike under any maxAttempts) and refuses to count a failure, rolled back', async () => {
    const spec = await freshOutbox(t.db, { maxAttempts: 3 });
    let failing = false;
    const sink = createRecordingSink({ outcome: () => (failing ? { kind: 'transient', error: 'down' } : undefined) });
    const old = createDrainer({ db: t.db, spec, sink, logger: quiet });
    await old.drainOnce();
    await setMaxAttempts(t.db, defineOutbox({ table: spec.table, partitionColumn: 'resource_id', maxAttempts: 5 }));
    const [delivered, failed] = (await enqueueRows(t.db, spec, ['vpc:w1', 'vpc:w2'])) as [string, string];

    const first = await old.writeThrough([delivered]);
    expect(first.delivered).toEqual([delivered]);
    expect(await first.settled).toBe(true);

    failing = true;
    const before = await outboxRows(t.db, spec);
    const second = await old.writeThrough([failed]);
    expect(second.delivered).toEqual([]);
    expect(await second.settled).toBe(false);
    expect(await outboxRows(t.db, spec)).toEqual(before); // no attempt counted with the old maxAttempts
  });
});
