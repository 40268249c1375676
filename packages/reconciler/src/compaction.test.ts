import { createDrainer, createRecordingSink } from '@outbox/drainer';
import { enqueue, OutboxConfigError, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { compactOutbox, createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  openTransaction,
  poison,
  readRows,
  recordingLogger,
  register,
} from './testing/outbox-fixture.js';

// Compaction deletes old delivered and closed rows, never one a decision reads (docs/ledger.md).
const t = useTestDatabase();
const DAY = 86_400_000;

/** Ages a row: created and delivered (or closed) `days` ago. */
async function age(spec: OutboxSpec, id: string, days: number): Promise<void> {
  await sql`
    update ${sql.raw(tableNames(spec).table)} set created_at = now() - make_interval(days => ${days}),
      sent_at = case when sent_at is not null then now() - make_interval(days => ${days}) end,
      retired_at = case when retired_at is not null then now() - make_interval(days => ${days}) end
    where id = ${id}`.execute(t.db);
}

const intentOf = (key: string, write: boolean) => (write ? register : deregister)(key.replace(/^vpc:/, ''));
const remaining = async (spec: OutboxSpec) => (await readRows(t.db, spec)).map((r) => r.id);

describe('compactOutbox', () => {
  test('deletes old delivered and closed rows, keeping every row a decision reads', async () => {
    const spec = await createTestOutbox(t.db);
    const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
    const r: Record<string, string> = {};
    // Closed rows first, the oldest (ids follow creation, as enqueue makes them): retired and
    // discarded long ago, and one created as long ago but retired lately.
    for (const name of ['old-retired', 'old-discarded', 'new-retired']) {
      r[name] = await enqueueIntent(t.db, spec, `vpc:${name}`, register(name));
      r[`${name}-next`] = await enqueueIntent(t.db, spec, `vpc:${name}`, deregister(name));
      await poison(t.db, spec, r[name]!);
      if (name !== 'old-discarded') await deliver(t.db, spec, r[`${name}-next`]!);
    }
    await reconciler.retire([r['old-retired']!, r['new-retired']!], 'superseded');
    await reconciler.discardPoisoned({ ids: [r['old-discarded']!], reason: 'never granted, on purpose' });
    for (const name of [
      'old-retired',
      'old-discarded',
      'old-discarded-next',
      'old-retired-next',
      'new-retired',
      'new-retired-next',
    ])
      await age(spec, r[name]!, 100);
    await sql`update ${sql.raw(tableNames(spec).table)} set retired_at = now() - interval '1 day' where id = ${r['new-retired']}`.execute(
      t.db,
    );

    const history: Array<[string, string, 'deliver' | 'poison' | 'pending', number]> = [
      // [name, partition, outcome, age in days]
      ['a1', 'vpc:a', 'deliver', 40],
      ['a2', 'vpc:a', 'deliver', 40],
      ['a3', 'vpc:a', 'deliver', 40], // a3: the partition's last word
      ['b1', 'vpc:b', 'deliver', 40],
      ['b2', 'vpc:b', 'poison', 40],
      ['b3', 'vpc:b', 'deliver', 40],
      ['b4', 'vpc:b', 'deliver', 40], // b3, b4: after a pending row
      ['c1', 'vpc:c', 'deliver', 40],
      ['e1', 'vpc:e', 'deliver', 40],
      ['e2', 'vpc:e', 'pending', 40], // e1: the last delivered, before a pending row
      ['f1', 'vpc:f', 'deliver', 40],
      ['f2', 'vpc:f', 'deliver', 40],
      ['c2', 'vpc:c', 'deliver', 1],
      ['d1', 'vpc:d', 'deliver', 1],
      ['d2', 'vpc:d', 'deliver', 1], // young
    ];
    for (const [name, key] of history)
      r[name] = await enqueueIntent(t.db, spec, key, intentOf(key, name.endsWith('1')));
    for (const [name, , outcome, days] of history) {
      if (outcome === 'deliver') await deliver(t.db, spec, r[name]!);
      if (outcome === 'poison') await poison(t.db, spec, r[name]!);
      await age(spec, r[name]!, days);
    }

    const dry = await compactOutbox({
      db: t.db,
      spec,
      retentionMs: 30 * DAY,
      closedRetentionMs: 90 * DAY,
      dryRun: true,
    });
    const before = await remaining(spec);
    expect(dry).toMatchObject({ deleted: 7, delivered: 5, closed: 2, dryRun: true });
    expect(await remaining(spec)).toEqual(before);

    const result = await compactOutbox({
      db: t.db,
      spec,
      retentionMs: 30 * DAY,
      closedRetentionMs: 90 * DAY,
      batchSize: 3,
    });
    const gone = ['a1', 'a2', 'b1', 'c1', 'f1', 'old-retired', 'old-discarded'].map((name) => r[name]);
    expect(await remaining(spec)).toEqual(before.filter((id) => !gone.includes(id)));
    expect(result).toMatchObject({ deleted: 7, delivered: 5, closed: 2, skipped: false, dryRun: false });
    expect(result.batches).toBeGreaterThan(2);
    expect(await compactOutbox({ db: t.db, spec, retentionMs: 30 * DAY, closedRetentionMs: 90 * DAY })).toMatchObject({
      deleted: 0,
    });
  });
});

describe('compactOutbox, what else it respects', () => {
  test('a row another feature still needs (verify_after set) stays, whatever its age', async () => {
    const spec = await createTestOutbox(t.db);
    const names = tableNames(spec);
    await sql.raw(`alter table ${names.table} add column if not exists verify_after timestamptz`).execute(t.db);
    const [marked, plain, last] = [
      await enqueueIntent(t.db, spec, 'vpc:1', register('1')),
      await enqueueIntent(t.db, spec, 'vpc:1', deregister('1')),
      await enqueueIntent(t.db, spec, 'vpc:1', register('1')),
    ];
    for (const id of [marked, plain, last]) {
      await deliver(t.db, spec, id);
      await age(spec, id, 40);
    }
    await sql`update ${sql.raw(names.table)} set verify_after = now() where id = ${marked}`.execute(t.db);
    expect(await compactOutbox({ db: t.db, spec })).toMatchObject({ deleted: 1, delivered: 1 });
    expect(await remaining(spec)).toEqual([marked, last]);
  });

  test('a row another transaction holds locked stays for the next run: compaction waits for nobody', async () => {
    // A drainer's claim keeps the lock it took on a head another drainer delivered under it.
    const spec = await createTestOutbox(t.db);
    const ids: string[] = [];
    for (let i = 0; i < 4; i += 1) ids.push(await enqueueIntent(t.db, spec, 'vpc:1', register('1')));
    for (const id of ids) await deliver(t.db, spec, id);
    const holder = await openTransaction(t.db);
    try {
      await sql`select id from ${sql.raw(tableNames(spec).table)} where id = ${ids[1]} for update`.execute(holder.trx);
      const result = await Promise.race([
        compactOutbox({ db: t.db, spec, retentionMs: 0 }),
        new Promise((_, reject) => setTimeout(() => reject(new Error('compaction waited on the lock')), 5_000)),
      ]);
      expect(result).toMatchObject({ deleted: 2, delivered: 2 });
      expect(await remaining(spec)).toEqual([ids[1], ids[3]]);
    } finally {
      await holder.rollback();
    }
    await compactOutbox({ db: t.db, spec, retentionMs: 0 });
    expect(await remaining(spec)).toEqual([ids[3]]);
  });

  test('bad options are OutboxConfigErrors naming the option', async () => {
    const spec = await createTestOutbox(t.db);
    for (const [options, field] of [
      [{ retentionMs: -1 }, 'retentionMs'],
      [{ closedRetentionMs: 1.5 }, 'closedRetentionMs'],
      [{ batchSize: 0 }, 'batchSize'],
    ] as const) {
      const error = await compactOutbox({ db: t.db, spec, ...options }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxConfigError);
      expect((error as OutboxConfigError).field).toBe(field);
    }
  });

  test("a second run while one holds the table's compaction lock stops at once, reporting skipped", async () => {
    const spec = await createTestOutbox(t.db);
    const other = await openTransaction(t.db);
    try {
      await sql`select pg_advisory_xact_lock(hashtextextended(${`outbox-compaction:${spec.table}`}, 0))`.execute(
        other.trx,
      );
      expect(await compactOutbox({ db: t.db, spec, retentionMs: 0 })).toMatchObject({
        skipped: true,
        batches: 0,
        deleted: 0,
      });
    } finally {
      await other.rollback();
    }
  });

  test("runs on the reconciler's timer when scheduled, and stop() waits for it", async () => {
    const spec = await createTestOutbox(t.db);
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) ids.push(await enqueueIntent(t.db, spec, 'vpc:t', register('t')));
    for (const id of ids) await deliver(t.db, spec, id);
    const reconciler = createReconciler({
      db: t.db,
      spec,
      logger: recordingLogger(),
      compaction: { intervalMs: 10, retentionMs: 0 },
    });
    await reconciler.start();
    for (
      const deadline = Date.now() + 10_000;
      (await remaining(spec)).length > 1;
      await new Promise((r) => setTimeout(r, 10))
    ) {
      if (Date.now() > deadline) throw new Error('not compacted');
    }
    await reconciler.stop();
    expect(await remaining(spec)).toEqual([ids[4]]);
  });
});

describe('compaction while drainers run', () => {
  test('nothing is lost, each partition is delivered in order, and no drainer ever waits on it (nor it on them)', async () => {
    const spec = await createTestOutbox(t.db, { maxAttempts: 5 });
    const keys = Array.from({ length: 20 }, (_, i) => `vpc:k${i}`);
    const sink = createRecordingSink();
    const drainers = [0, 1].map(() =>
      createDrainer({ db: t.kysely({ max: 2 }), spec, sink, batchSize: 20, listen: false, logger: recordingLogger() }),
    );
    const compactDb = t.kysely({ max: 1 });
    const pid = (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(compactDb)).rows[0]!.pid;
    const writerDb = t.kysely({ max: 2 });
    const enqueued: string[] = [];
    let running = true;
    const waits: string[] = [];
    let compactions = 0;
    let deleted = 0;
    const write = async () => {
      for (let i = 0; i < 300; i += 1) {
        const partitionKey = keys[(i * 7 + enqueued.length) % keys.length]!;
        enqueued.push(
          await writerDb
            .transaction()
            .execute((trx) => enqueue(trx, spec, { partitionKey, payload: intentOf(partitionKey, i % 2 === 0) })),
        );
      }
    };
    const drain = async (drainer: (typeof drainers)[number]) => {
      while (running) await drainer.drainOnce();
    };
    const compact = async () => {
      while (running) {
        const result = await compactOutbox({ db: compactDb, spec, retentionMs: 0, batchSize: 50 });
        compactions += 1;
        deleted += result.deleted;
      }
    };
    const watch = async () => {
      while (running) {
        const blocked = await sql<{ pid: number; query: string }>`
          select pid, query from pg_stat_activity
          where ${pid} = any(pg_blocking_pids(pid)) or (pid = ${pid} and wait_event_type = 'Lock')`.execute(t.db);
        for (const row of blocked.rows) waits.push(`${row.pid}: ${row.query}`);
        await new Promise((r) => setTimeout(r, 2));
      }
    };
    const background = [...drainers.map(drain), compact(), watch()];
    try {
      await Promise.all([write(), write()]);
      for (
        const deadline = Date.now() + 30_000;
        new Set(sink.delivered.map((i) => i.id)).size < enqueued.length;
        await new Promise((r) => setTimeout(r, 10))
      ) {
        if (Date.now() > deadline) throw new Error('not all delivered');
      }
    } finally {
      running = false;
      await Promise.all(background);
      for (const drainer of drainers) await drainer.stop();
    }

    expect(waits).toEqual([]);
    expect(new Set(sink.delivered.map((i) => i.id))).toEqual(new Set(enqueued));
    const last = new Map<string, bigint>();
    const inversions: string[] = [];
    for (const intent of sink.delivered) {
      const previous = last.get(intent.partitionKey) ?? 0n;
      if (BigInt(intent.id) < previous) inversions.push(`${intent.partitionKey}: ${intent.id} after ${previous}`);
      else last.set(intent.partitionKey, BigInt(intent.id));
    }
    expect(inversions).toEqual([]);
    expect(compactions).toBeGreaterThan(1);
    expect(deleted).toBeGreaterThan(0);
    // A last run leaves each partition's last word, and nothing else delivered.
    await compactOutbox({ db: t.db, spec, retentionMs: 0 });
    const rows = await readRows(t.db, spec);
    expect(rows.map((r) => r.id).sort()).toEqual(keys.map((key) => String(last.get(key))).sort());
    expect(rows.every((r) => r.delivered)).toBe(true);
  }, 60_000);
});
