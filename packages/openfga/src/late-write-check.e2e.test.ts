/**
 * The late-write check against a real OpenFGA (docs/agreement.md, "Late writes"): what it reads,
 * when it waits, and that its corrections go through the outbox. A late write is made here by
 * writing to the store straight after the drainer delivered (to the check it is the same thing).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createDrainer, type DrainerEvent, type Sink } from '@outbox/drainer';
import type { IntentPayload, OutboxSpec, TupleKey } from '@outbox/outbox';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { storedOn } from '@outbox/test-stack/openfga';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { outboxTables, quiet, sinkOn } from './testing/fixtures.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);

const grantOn = (object: string) => [
  { user: 'user:ann', relation: 'owner', object },
  { user: 'project:p1', relation: 'project', object },
];
/** No request is in flight in these tests: short lifetimes only make the check come sooner. */
const SINK = { timeoutMs: 200, serverRequestTimeoutMs: 300 } as const;
const VERIFY_DELAY_MS = 800;

/** A drainer on the real sink whose reads back are recorded, and its late-write events. */
function checkingDrainer(spec: OutboxSpec) {
  const sink = sinkOn(fga, SINK);
  const reads: TupleKey[][] = [];
  const recorded: Sink = {
    deliver: (intents, context) => sink.deliver(intents, context),
    writeLifetimeMs: sink.writeLifetimeMs,
    readTuples: (keys, context) => {
      reads.push([...keys]);
      return sink.readTuples!(keys, context);
    },
  };
  const events: Extract<DrainerEvent, { type: 'late-writes-checked' }>[] = [];
  const drainer = createDrainer({
    db: t.db,
    spec,
    sink: recorded,
    logger: quiet,
    intervalMs: 50,
    lateWrites: { verifyDelayMs: VERIFY_DELAY_MS },
    onEvent: (event) => {
      if (event.type === 'late-writes-checked') events.push(event);
    },
  });
  return { drainer, reads, events };
}

async function rows(spec: OutboxSpec) {
  const result = await sql<{
    id: string;
    delivered: boolean;
    source: string | null;
    verify_after: Date | null;
    payload: IntentPayload;
  }>`
    select id::text as id, sent_at is not null as delivered, payload->>'source' as source, verify_after, payload
    from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} order by id`.execute(t.db);
  return result.rows;
}

/** Drains once every 100 ms until `done` holds of the rows (or 10 s passed); returns them. */
async function drainUntil(
  drainer: { drainOnce(): Promise<unknown> },
  spec: OutboxSpec,
  done: (r: Awaited<ReturnType<typeof rows>>) => boolean,
) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    await drainer.drainOnce();
    const current = await rows(spec);
    if (done(current) || Date.now() > deadline) return current;
    await sleep(100);
  }
}

describe('the late-write check', () => {
  test('waits while an intent of the partition is pending, then corrects through the outbox once it is delivered', async () => {
    const spec = await outbox.fresh();
    const object = 'vpc:pending';
    const { drainer, events } = checkingDrainer(spec);
    await outbox.enqueue(spec, [
      { partitionKey: object, payload: { writes: grantOn(object) } },
      { partitionKey: object, payload: { deletes: grantOn(object) } },
    ]);
    await drainer.drainOnce();
    await fga.client.write({ writes: grantOn(object) }); // the register's Write, landing late
    // An intent of the partition, pending (backing off) when the check comes due.
    const [pending] = await outbox.enqueue(spec, [
      { partitionKey: object, payload: { writes: [{ user: 'user:cat', relation: 'viewer', object }] } },
    ]);
    await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now() + interval '1 hour' where id = ${pending}`.execute(
      t.db,
    );
    const stamped = (await rows(spec))[1]!.verify_after!;

    const postponed = await drainUntil(drainer, spec, (r) => r[1]!.verify_after! > stamped);
    expect(postponed[1]!.verify_after!.getTime()).toBeGreaterThan(stamped.getTime());
    expect(events.some((e) => e.postponed === 1 && e.read === 0)).toBe(true);
    expect(postponed.filter((r) => r.source === 'late-write')).toEqual([]);
    expect(await storedOn(fga.client, object)).toEqual([
      'project:p1 project vpc:pending',
      'user:ann owner vpc:pending',
    ]);

    await sql`update ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} set next_attempt_at = now() where id = ${pending}`.execute(
      t.db,
    );
    const corrected = await drainUntil(drainer, spec, (r) =>
      r.some((row) => row.source === 'late-write' && row.delivered),
    );
    const correction = corrected.filter((r) => r.source === 'late-write');
    expect(correction).toHaveLength(1);
    expect(correction[0]!.payload).toEqual({ deletes: grantOn(object), source: 'late-write' });
    expect(await storedOn(fga.client, object)).toEqual(['user:cat viewer vpc:pending']);
  }, 30_000);

  test('reads only the keys the close deliveries both wrote and deleted, and enqueues nothing where OpenFGA agrees', async () => {
    const spec = await outbox.fresh();
    const { drainer, reads, events } = checkingDrainer(spec);
    // vpc:flip is registered and deregistered in one batch; vpc:twice is registered twice (nothing to reverse).
    await outbox.enqueue(spec, [
      { partitionKey: 'vpc:flip', payload: { writes: grantOn('vpc:flip') } },
      { partitionKey: 'vpc:flip', payload: { deletes: grantOn('vpc:flip') } },
      { partitionKey: 'vpc:twice', payload: { writes: grantOn('vpc:twice') } },
      { partitionKey: 'vpc:twice', payload: { writes: grantOn('vpc:twice') } },
    ]);
    await drainer.drainOnce();
    expect((await rows(spec)).filter((r) => r.verify_after !== null)).toHaveLength(2);
    const checked = await drainUntil(drainer, spec, (r) => r.every((row) => row.verify_after === null));
    expect(checked.every((row) => row.verify_after === null && row.source === null)).toBe(true);
    expect(reads).toEqual([grantOn('vpc:flip')]);
    expect(events.reduce((sum, e) => sum + e.checked, 0)).toBe(2);
    expect(events.flatMap((e) => e.corrected)).toEqual([]);
  }, 30_000);
});
