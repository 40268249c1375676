import { enqueueMany, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { freshOutbox, outboxTable, quiet } from './testing/fixture.js';
import { createDrainer, createRecordingSink, type DrainerConfig, type Sink } from './index.js';

// Which deliveries the settle stamps for the late-write check (docs/agreement.md, "Late writes"):
// those that closely follow another delivery of their partition, and no other.
const t = useTestDatabase();

const VERIFY_DELAY_MS = 60_000;
/** A sink that says how long its writes live and can read back (what turns the check on), delivering nowhere. */
const readingSink = (): Sink => ({ ...createRecordingSink(), writeLifetimeMs: 1_000, readTuples: async () => [] });
const register = { writes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:1' }] };
const deregister = { deletes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:1' }] };

async function enqueue(
  spec: OutboxSpec,
  intents: ReadonlyArray<{ partitionKey: string; payload: IntentPayload }>,
): Promise<string[]> {
  return t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));
}

async function drain(spec: OutboxSpec, config: Partial<DrainerConfig> = {}): Promise<void> {
  await createDrainer({
    db: t.db,
    spec,
    sink: readingSink(),
    logger: quiet,
    lateWrites: { verifyDelayMs: VERIFY_DELAY_MS },
    ...config,
  }).drainOnce();
}

/** Per row id: ms from its delivery to its check, null when it is not stamped. */
async function stamps(spec: OutboxSpec): Promise<Record<string, number | null>> {
  const result = await sql<{ id: string; delay: number | null }>`
    select id::text as id, (extract(epoch from verify_after - sent_at) * 1000)::int as delay from ${outboxTable(spec)} order by id`.execute(
    t.db,
  );
  return Object.fromEntries(result.rows.map((r) => [r.id, r.delay]));
}

describe('the settle stamps a delivery for the late-write check', () => {
  test("when the same batch delivered an earlier intent of its partition: the partition's last delivered row only", async () => {
    const spec = await freshOutbox(t.db);
    const [r, d, again] = await enqueue(spec, [
      { partitionKey: 'vpc:1', payload: register },
      { partitionKey: 'vpc:1', payload: deregister },
      { partitionKey: 'vpc:1', payload: register },
    ]);
    await drain(spec);
    expect(await stamps(spec)).toEqual({ [r!]: null, [d!]: null, [again!]: VERIFY_DELAY_MS });
  });

  test('when an earlier batch delivered its partition less than the delay before', async () => {
    const spec = await freshOutbox(t.db);
    const [r] = await enqueue(spec, [{ partitionKey: 'vpc:1', payload: register }]);
    await drain(spec);
    const [d] = await enqueue(spec, [{ partitionKey: 'vpc:1', payload: deregister }]);
    await drain(spec);
    expect(await stamps(spec)).toEqual({ [r!]: null, [d!]: VERIFY_DELAY_MS });
  });

  test("not when its partition's previous delivery is older than the delay: the common case costs nothing", async () => {
    const spec = await freshOutbox(t.db);
    const [r] = await enqueue(spec, [{ partitionKey: 'vpc:1', payload: register }]);
    await drain(spec);
    // Delivered longer ago than the delay (rather than waiting a minute).
    await sql`update ${outboxTable(spec)} set sent_at = now() - ${VERIFY_DELAY_MS + 1_000} * interval '1 millisecond' where id = ${r}`.execute(
      t.db,
    );
    const [d] = await enqueue(spec, [{ partitionKey: 'vpc:1', payload: deregister }]);
    await drain(spec);
    expect(await stamps(spec)).toEqual({ [r!]: null, [d!]: null });
  });

  test("not for deliveries of other partitions, nor for a partition's first", async () => {
    const spec = await freshOutbox(t.db);
    await enqueue(spec, [
      { partitionKey: 'vpc:1', payload: register },
      { partitionKey: 'vpc:2', payload: deregister },
    ]);
    await drain(spec);
    expect(Object.values(await stamps(spec))).toEqual([null, null]);
  });

  test('by default for a sink that bounds its writes and reads back, checked 1 s after their lifetime', async () => {
    const spec = await freshOutbox(t.db);
    const [, d] = await enqueue(spec, [
      { partitionKey: 'vpc:1', payload: register },
      { partitionKey: 'vpc:1', payload: deregister },
    ]);
    await drain(spec, { lateWrites: undefined });
    expect((await stamps(spec))[d!]).toBe(2_000);
  });

  test('never with lateWrites: false, nor by default for a sink that cannot read back', async () => {
    for (const config of [{ lateWrites: false as const }, { sink: createRecordingSink(), lateWrites: undefined }]) {
      const spec = await freshOutbox(t.db);
      await enqueue(spec, [
        { partitionKey: 'vpc:1', payload: register },
        { partitionKey: 'vpc:1', payload: deregister },
      ]);
      await drain(spec, config);
      expect(Object.values(await stamps(spec))).toEqual([null, null]);
    }
  });
});
