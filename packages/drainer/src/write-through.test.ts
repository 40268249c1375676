import { enqueueMany, type OutboxSpec } from '@outbox/outbox';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { storedOn } from '@outbox/test-stack/openfga';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { freshOutbox, outboxRows, outboxTable, quiet, waitUntil } from './testing/fixture.js';
import { createDrainer, DrainerStoppedError, type Intent, type Sink } from './index.js';

// The write-through (docs/drainer.md, "Write-through"): the writing process delivers its own
// just-committed heads at once, into the real OpenFGA of the test stack, and never passes a pending
// predecessor of their partition.
const t = useTestDatabase();
const fga = useOpenFgaStore();

let objects = 0;

/** A sink writing each call's tuples to the store in one Write, recording the intents in the order they were written. */
function storeSink() {
  const written: Intent[] = [];
  const sink: Sink = {
    async deliver(intents) {
      try {
        await fga.client.write({ writes: intents.flatMap((i) => i.payload.writes ?? []) });
        written.push(...intents);
        return intents.map(() => ({ kind: 'delivered' as const }));
      } catch (error) {
        // A tuple written twice (a duplicate delivery) is refused: the test counts it as a failure.
        return intents.map(() => ({ kind: 'permanent' as const, error: String(error) }));
      }
    },
  };
  return { sink, written };
}

/** Commits one intent per key (each its own vpc object), returning their ids. */
async function write(spec: OutboxSpec, keys: readonly string[]): Promise<string[]> {
  return t.db.transaction().execute((trx) =>
    enqueueMany(
      trx,
      spec,
      keys.map((partitionKey) => ({
        partitionKey,
        payload: {
          writes: [{ user: 'user:writer', relation: 'owner', object: `vpc:wt-${process.pid}-${(objects += 1)}` }],
        },
      })),
    ),
  );
}

const idle = { logger: quiet, intervalMs: 3_600_000 } as const;

describe('writeThrough', () => {
  test("delivers the writer's own heads at once, without a pass; a waiting flush resolves on its commit", async () => {
    const spec = await freshOutbox(t.db);
    const { sink, written } = storeSink();
    const drainer = createDrainer({ db: t.db, spec, sink, ...idle });
    const [id] = await write(spec, ['vpc:a']);
    const flushed = drainer.flush({ partitionKey: 'vpc:a', ids: [id as string], timeoutMs: 10_000 });
    const result = await drainer.writeThrough([id as string]);
    expect(result).toMatchObject({ delivered: [id], deferred: [] });
    expect(await result.settled).toBe(true);
    await flushed;
    expect(written.map((i) => i.id)).toEqual([id]);
    expect((await outboxRows(t.db, spec)).map((r) => [r.id, r.sent, r.is_head])).toEqual([[id, true, false]]);
    const object = written[0]?.payload.writes?.[0]?.object as string;
    expect(await storedOn(fga.client, object)).toEqual([`user:writer owner ${object}`]);
    await drainer.stop();
  });

  test('never passes a pending predecessor: a row behind one (due, backing off, or held) is left to the drainer', async () => {
    const spec = await freshOutbox(t.db);
    const { sink, written } = storeSink();
    const drainer = createDrainer({ db: t.db, spec, sink, ...idle });
    const [first] = await write(spec, ['vpc:k']);
    const [second] = await write(spec, ['vpc:k']);
    expect(await drainer.writeThrough([second as string])).toMatchObject({ delivered: [], deferred: [second] });
    await sql`update ${outboxTable(spec)} set next_attempt_at = now() + interval '1 hour' where id = ${first}`.execute(
      t.db,
    );
    expect(await drainer.writeThrough([second as string])).toMatchObject({ delivered: [], deferred: [second] });
    expect(written).toEqual([]);
    // A head held by another transaction (a drainer's claim) is skipped, not waited for.
    await sql`update ${outboxTable(spec)} set next_attempt_at = now() where id = ${first}`.execute(t.db);
    await t.withTransactions(1, async ([holder]) => {
      const trx = holder as NonNullable<typeof holder>;
      await sql`select id from ${outboxTable(spec)} where id = ${first} for update`.execute(trx);
      expect(await drainer.writeThrough([first as string, second as string])).toMatchObject({
        delivered: [],
        deferred: [first, second],
      });
      await trx.rollback().execute();
    });
    // Free again: the head goes, its follower stays for the passes (a write-through claims heads only).
    expect(await drainer.writeThrough([first as string, second as string])).toMatchObject({
      delivered: [first],
      deferred: [second],
    });
    const last = await drainer.writeThrough([second as string]);
    expect(last).toMatchObject({ delivered: [second], deferred: [] });
    expect(await last.settled).toBe(true);
    expect(written.map((i) => i.id)).toEqual([first, second]);
    // A drainer that is not started runs no pass for what a write-through left: nothing else moved.
    expect((await outboxRows(t.db, spec)).every((r) => r.sent && r.attempt_count === 0)).toBe(true);
    await drainer.stop();
    await expect(drainer.writeThrough([second as string])).rejects.toBeInstanceOf(DrainerStoppedError);
    await expect(drainer.writeThrough(['x'])).rejects.toThrow(/writeThrough\.ids/);
  });

  test('writers writing through beside a running drainer: every intent delivered once, each partition in id order', async () => {
    const spec = await freshOutbox(t.db);
    const { sink, written } = storeSink();
    // The writers' drainer (not started: it runs no pass, so it never defers to one) and another,
    // running on its timer, as a second instance of the service would: they race for every head.
    const writers = createDrainer({ db: t.db, spec, sink, ...idle });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, intervalMs: 5 });
    await drainer.start();
    const keys = ['vpc:p0', 'vpc:p1', 'vpc:p2', 'vpc:p3', 'vpc:p4'];
    const committed: string[] = [];
    let throughDelivered = 0;
    await Promise.all(
      Array.from({ length: 4 }, async (_, writer) => {
        for (let i = 0; i < 15; i += 1) {
          const batch = [keys[(writer + i) % keys.length] as string, keys[(writer * 3 + i) % keys.length] as string];
          const ids = await write(spec, batch);
          committed.push(...ids);
          throughDelivered += (await writers.writeThrough(ids)).delivered.length;
        }
      }),
    );
    await drainer.drainOnce();
    await Promise.all([drainer.stop(), writers.stop()]);
    const rows = await outboxRows(t.db, spec);
    expect(rows.filter((r) => !r.sent || r.attempt_count > 0 || r.last_error)).toEqual([]);
    expect(written.map((i) => i.id).sort()).toEqual([...committed].sort());
    for (const key of keys) {
      const order = written.filter((i) => i.partitionKey === key).map((i) => BigInt(i.id));
      expect(order).toEqual([...order].sort((a, b) => (a < b ? -1 : 1)));
    }
    // Both took part: the writers delivered some of their own, the other drainer the rest.
    expect(throughDelivered).toBeGreaterThan(0);
    expect(throughDelivered).toBeLessThan(committed.length);
  }, 60_000);

  test("it answers on the sink's word; a settle that then fails loses nothing: the row stays pending and a pass delivers it again", async () => {
    const spec = await freshOutbox(t.db);
    const { sink: store, written } = storeSink();
    const calls: string[] = [];
    // The first call writes the tuple, then cuts the write-through's connection (the one
    // transaction idle holding the row) before its settle; a later one finds the tuple there.
    const sink: Sink = {
      async deliver(intents, context) {
        calls.push(...intents.map((i) => i.id));
        if (calls.length > 1) return intents.map(() => ({ kind: 'delivered' as const }));
        const outcomes = await store.deliver(intents, context);
        await sql`select pg_terminate_backend(pid) from pg_stat_activity
          where datname = current_database() and state = 'idle in transaction' and pid <> pg_backend_pid()`.execute(
          t.db,
        );
        return outcomes;
      },
    };
    // As a service wires its pool: a connection lost while checked out is reported on its client.
    const pool = new pg.Pool({ connectionString: t.url, max: 2 }).on('error', () => undefined);
    pool.on('connect', (client) => client.on('error', () => undefined));
    const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
    const drainer = createDrainer({ db, spec, sink, ...idle });
    const [id] = await write(spec, ['vpc:cut']);
    const result = await drainer.writeThrough([id as string]);
    expect(result).toMatchObject({ delivered: [id], deferred: [] });
    expect(await result.settled).toBe(false);
    expect((await outboxRows(t.db, spec)).map((r) => [r.id, r.sent])).toEqual([[id, false]]);
    // At-least-once: delivered again, and recorded this time.
    await drainer.drainOnce();
    expect(calls).toEqual([id, id]);
    expect(written.map((i) => i.id)).toEqual([id]);
    expect((await outboxRows(t.db, spec)).map((r) => [r.id, r.sent])).toEqual([[id, true]]);
    await drainer.stop();
    await db.destroy();
  });

  test('a LISTEN drainer that writes through still delivers, on the notification, a commit nobody writes through', async () => {
    const spec = await freshOutbox(t.db);
    const { sink, written } = storeSink();
    // No timer pass within the test: only a notification can deliver the second write.
    const drainer = createDrainer({ db: t.db, spec, sink, ...idle, listen: { connectionString: t.url } });
    await drainer.start();
    await drainer.drainOnce(); // after the start's own pass
    const [own] = await write(spec, ['vpc:own']);
    // Delivered either way: by the write-through, or by the pass the notification woke first.
    await (
      await drainer.writeThrough([own as string])
    ).settled;
    const [other] = await write(spec, ['vpc:another-process']);
    await waitUntil('the notified delivery', () => written.some((i) => i.id === other));
    await drainer.stop();
  });

  test("write-throughs run side by side: one held at its sink holds back no other partition's; one behind it is tried again after its settle", async () => {
    const spec = await freshOutbox(t.db);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { sink: store, written } = storeSink();
    let heldAtSink = false;
    const sink: Sink = {
      async deliver(intents, context) {
        if (intents.some((i) => i.partitionKey === 'vpc:slow') && !heldAtSink) {
          heldAtSink = true;
          await gate;
        }
        return store.deliver(intents, context);
      },
    };
    const drainer = createDrainer({ db: t.db, spec, sink, ...idle });
    const [slow] = await write(spec, ['vpc:slow']);
    const held = drainer.writeThrough([slow as string]);
    await waitUntil('the first write-through at its sink', () => heldAtSink);
    const [fast] = await write(spec, ['vpc:fast']);
    expect(await drainer.writeThrough([fast as string])).toMatchObject({ delivered: [fast], deferred: [] });
    // Not a head while its predecessor is in flight: deferred by the first try, claimed by the second.
    const [behind] = await write(spec, ['vpc:slow']);
    const follower = drainer.writeThrough([behind as string]);
    release();
    expect(await held).toMatchObject({ delivered: [slow], deferred: [] });
    const followed = await follower;
    expect(followed).toMatchObject({ delivered: [behind], deferred: [] });
    expect(await followed.settled).toBe(true);
    expect(written.map((i) => i.id)).toEqual([fast, slow, behind]);
    expect((await outboxRows(t.db, spec)).every((r) => r.sent && r.attempt_count === 0)).toBe(true);
    await drainer.stop();
  });

  test('while a pass of its own drainer runs, it defers to it: the pass batches many callers', async () => {
    const spec = await freshOutbox(t.db);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const { sink: store, written } = storeSink();
    const sink: Sink = { deliver: async (intents, context) => (await held, store.deliver(intents, context)) };
    const drainer = createDrainer({ db: t.db, spec, sink, ...idle });
    await write(spec, ['vpc:busy']);
    const pass = drainer.drainOnce(); // its batch waits in the sink
    const [id] = await write(spec, ['vpc:other']);
    expect(await drainer.writeThrough([id as string])).toMatchObject({ delivered: [], deferred: [id] });
    release();
    await pass;
    await drainer.drainOnce();
    expect(written.map((i) => i.partitionKey).sort()).toEqual(['vpc:busy', 'vpc:other']);
    await drainer.stop();
  });
});
