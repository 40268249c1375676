import { createOutboxTable, defineOutbox, enqueue, enqueueMany, type AnyKysely } from '@outbox/outbox';
import { startEmbeddedPostgres, type NativePostgresServer } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { createDrainer, createRecordingSink, type Intent } from './index.js';

// This test owns its server (it crashes it), so it always runs on the embedded PostgreSQL 18.
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const payload = (n: number) => ({ writes: [{ user: 'user:alice', relation: 'owner', object: `vpc:${n}` }] });
let server: NativePostgresServer | undefined;
afterAll(async () => server?.stop());

/**
 * A pool wired as a service must wire it (see the drainer's README): pg reports a connection lost
 * while idle in the pool on the pool, and one lost while checked out — the drainer holds one while
 * its sink delivers — on the client, where nobody listens unless told to.
 */
function kysely(url: string): AnyKysely {
  const pool = new pg.Pool({ connectionString: url, max: 3 });
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  return new Kysely({ dialect: new PostgresDialect({ pool }) });
}

describe('asynchronous commits and a Postgres crash', () => {
  test('the drainer’s unflushed commits die with the server; their intents are delivered again, in order; a durable commit after them kept them', async () => {
    server = await startEmbeddedPostgres({
      fast: false,
      // Nothing but a committing backend writes WAL out: no background writer round, no checkpoint.
      settings: { bgwriter_lru_maxpages: '0', checkpoint_timeout: '1h', max_wal_size: '4GB', wal_buffers: '64MB' },
    });
    const spec = defineOutbox({ table: 'crash.outbox', partitionColumn: 'resource_id' });
    const keys = Array.from({ length: 600 }, (_, i) => `vpc:${i % 6}`);
    const setup = kysely(server.url);
    await createOutboxTable(setup, spec);
    const ids = await setup.transaction().execute((trx) =>
      enqueueMany(
        trx,
        spec,
        keys.map((partitionKey, i) => ({ partitionKey, payload: payload(i) })),
      ),
    );
    // Stop the WAL writer: the drainer's asynchronous commits now stay in shared memory until
    // something commits synchronously (which writes and flushes everything before it) or the crash.
    const walWriter = await sql<{
      pid: number;
    }>`select pid from pg_stat_activity where backend_type = 'walwriter'`.execute(setup);
    process.kill(Number(walWriter.rows[0]?.pid), 'SIGSTOP');

    const committed: string[] = []; // ids whose batch committed, as the drainer saw it
    let durable: string[] = []; // what had committed when a synchronous commit flushed the WAL
    let crashed = false;
    const before = createRecordingSink({
      outcome: async () => {
        if (before.delivered.length === 200) {
          // An application transaction commits durably (the default): the drainer's earlier commits are flushed with it.
          durable = [...committed];
          await setup
            .transaction()
            .execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:other', payload: payload(-1) }));
        }
        if (before.delivered.length === 400 && !crashed) {
          crashed = true;
          await server!.crash();
        }
        return undefined;
      },
    });
    const db = kysely(server.url);
    const drainer = createDrainer({
      db,
      spec,
      sink: before,
      batchSize: 10,
      logger: quiet,
      onEvent: (event) => {
        if (event.type === 'delivered') committed.push(...event.ids);
      },
    });
    await expect(drainer.drainOnce()).rejects.toThrow();
    expect(crashed).toBe(true);

    await server.restart();
    const state = await sql<{ id: string; resource_id: string; sent: boolean; is_head: boolean }>`
      select id, resource_id, sent_at is not null as sent, is_head from crash.outbox order by id`.execute(setup);
    const sentNow = new Set(state.rows.filter((r) => r.sent).map((r) => r.id));
    // What the synchronous commit flushed survived; commits after it that were only in memory did not.
    expect(durable.length).toBeGreaterThanOrEqual(190);
    expect(durable.every((id) => sentNow.has(id))).toBe(true);
    const lost = committed.filter((id) => !sentNow.has(id));
    expect(lost.length).toBeGreaterThan(0);
    expect(committed.length).toBeGreaterThan(durable.length);
    // Per partition, what survived is a prefix (WAL is replayed in order), and the earliest pending
    // row is the partition's only head.
    for (const key of [...new Set(keys)]) {
      const rows = state.rows.filter((r) => r.resource_id === key);
      const firstPending = rows.findIndex((r) => !r.sent);
      const pending = firstPending === -1 ? [] : rows.slice(firstPending);
      expect(pending.every((r) => !r.sent)).toBe(true);
      expect(rows.filter((r) => r.is_head).map((r) => r.id)).toEqual(pending.slice(0, 1).map((r) => r.id));
    }

    // The same drainer, on the same pool, carries on once the server is back: the lost batches
    // again, then what was never delivered, each partition in id order.
    const delivering = before.delivered.length;
    await drainer.drainOnce();
    const again = before.delivered.slice(delivering);
    const pendingAfterRecovery = state.rows.filter((r) => !r.sent).map((r) => r.id);
    expect(again.map((i) => i.id).sort()).toEqual([...pendingAfterRecovery].sort());
    expect(lost.every((id) => again.some((i) => i.id === id))).toBe(true);
    const ofKey = (intents: readonly Intent[], key: string) =>
      intents.filter((i) => i.partitionKey === key).map((i) => BigInt(i.id));
    const ascending = (values: bigint[]) => values.every((v, i) => i === 0 || (values[i - 1] as bigint) < v);
    for (const key of [...new Set(keys)]) {
      expect(ascending(ofKey(again, key))).toBe(true);
      expect(ascending(ofKey(before.delivered.slice(0, delivering), key))).toBe(true);
    }
    const left = await sql<{ n: number }>`select count(*)::int as n from crash.outbox where sent_at is null`.execute(
      setup,
    );
    expect(left.rows[0]?.n).toBe(0);
    expect(ids).toHaveLength(600);
    await db.destroy();
    await setup.destroy();
  });
});
