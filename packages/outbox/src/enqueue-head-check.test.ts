import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueue, enqueueMany } from './enqueue.js';
import { tableNames } from './table-names.js';
import { freshOutboxes, headFlags } from './testing/outbox-tables.js';
import { rowsRead } from './testing/rows-read.js';

// Enqueue decides whether a new row is its partition's head: one probe per key, poisoned rows skipped.

const t = useTestDatabase();
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };
const run = (text: string) => sql.raw(text).execute(t.db);
const fresh = freshOutboxes(t, 'head_check');

interface Head {
  resource_id: string;
  is_head: boolean;
}

/**
 * The table's statistics when the test enqueues: analyzed with its rows; never analyzed (a fresh
 * table, a burst, a restore); or vacuumed while nothing was pending, before the backlog came (an
 * outage after a quiet spell): both partial indexes then count no rows, and only their pages differ.
 */
type Statistics = 'analyzed' | 'never analyzed' | 'vacuumed before the backlog';

/** Inserts `history` (rows of delivered intents), then `backlog`, with the statistics of `statistics`. */
async function fill(
  table: string,
  statistics: Statistics,
  history: string | undefined,
  backlog: string,
): Promise<void> {
  if (history) await run(`insert into ${table} ${history}`);
  if (statistics === 'vacuumed before the backlog') await run(`vacuum analyze ${table}`);
  await run(`insert into ${table} ${backlog}`);
  if (statistics === 'analyzed') await run(`analyze ${table}`);
}

describe.each<Statistics>(['analyzed', 'never analyzed', 'vacuumed before the backlog'])(
  "enqueue: the head check costs one probe per key, not the key's whole backlog (%s)",
  (statistics) => {
    test('an enqueue onto a key with 50k pending rows reads a handful of rows, and is still not head', async () => {
      const spec = await fresh();
      const names = tableNames(spec);
      // A delivered history over 20k keys, then a 50k-row backlog on one hot key.
      await fill(
        names.table,
        statistics,
        `(resource_id, payload, sent_at) select 'vpc:' || (g % 20000), '{}', now() from generate_series(1, 200000) g`,
        `(resource_id, payload, is_head) select 'vpc:hot', '{}', g = 1 from generate_series(1, 50000) g`,
      );
      const read = await t.db.transaction().execute(async (trx) => {
        await enqueue(trx, spec, { partitionKey: 'vpc:hot', payload });
        await enqueue(trx, spec, { partitionKey: 'vpc:cold', payload });
        // This transaction's own reads of the table (enqueue's lock and insert read none of it).
        return rowsRead(trx, spec);
      });
      expect(read).toBeLessThan(100);
      const last =
        await sql<Head>`select resource_id, is_head from ${sql.raw(names.table)} where id > 250000 order by id`.execute(
          t.db,
        );
      expect(last.rows).toEqual([
        { resource_id: 'vpc:hot', is_head: false },
        { resource_id: 'vpc:cold', is_head: true },
      ]);
    });

    test("one hot key making up the whole table: a single-key enqueue of another key does not walk the hot key's backlog", async () => {
      const spec = await fresh();
      const names = tableNames(spec);
      await fill(
        names.table,
        statistics,
        undefined,
        `(resource_id, payload, is_head) select 'vpc:hot', '{}', g = 1 from generate_series(1, 50000) g`,
      );
      for (const keys of [['vpc:cold'], ['vpc:hot'], ['vpc:cold-2', 'vpc:hot']]) {
        const read = await t.db.transaction().execute(async (trx) => {
          await enqueueMany(
            trx,
            spec,
            keys.map((partitionKey) => ({ partitionKey, payload })),
          );
          return rowsRead(trx, spec);
        });
        expect(read, keys.join()).toBeLessThan(100);
      }
    });

    test('many keys, each with one pending row: an enqueue of two keys reads a handful of rows', async () => {
      const spec = await fresh();
      const names = tableNames(spec);
      await fill(
        names.table,
        statistics,
        undefined,
        `(resource_id, payload, is_head) select 'vpc:' || g, '{}', true from generate_series(1, 20000) g`,
      );
      const read = await t.db.transaction().execute(async (trx) => {
        await enqueueMany(trx, spec, [
          { partitionKey: 'vpc:new', payload },
          { partitionKey: 'vpc:8', payload },
        ]);
        return rowsRead(trx, spec);
      });
      expect(read).toBeLessThan(100);
    });
  },
);

describe('enqueue: the head check', () => {
  test('the check still skips poisoned rows: behind only poisoned rows the new row is head, behind a deliverable one it is not', async () => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(
      `insert into ${names.table} (resource_id, payload, attempt_count) select 'vpc:a', '{}', 10 from generate_series(1, 5)`,
    );
    await run(
      `insert into ${names.table} (resource_id, payload, attempt_count) select 'vpc:b', '{}', 10 from generate_series(1, 5)`,
    );
    await run(`insert into ${names.table} (resource_id, payload, is_head) values ('vpc:b', '{}', true)`);
    await t.db.transaction().execute((trx) =>
      enqueueMany(trx, spec, [
        { partitionKey: 'vpc:a', payload },
        { partitionKey: 'vpc:b', payload },
        { partitionKey: 'vpc:a', payload },
      ]),
    );
    expect((await headFlags(t.db, spec)).slice(-3)).toEqual([
      { resource_id: 'vpc:a', is_head: true },
      { resource_id: 'vpc:b', is_head: false },
      { resource_id: 'vpc:a', is_head: false },
    ]);
  });
});

describe('enqueue: the head is decided after the partition lock is granted', () => {
  /** Resolves once backend `pid` waits for an advisory lock. */
  async function waitsForLock(pid: number): Promise<void> {
    for (let tries = 0; tries < 250; tries += 1) {
      const waiting = await sql<{
        n: string;
      }>`select count(*) as n from pg_locks where pid = ${pid} and locktype = 'advisory' and not granted`.execute(t.db);
      if (waiting.rows[0]?.n !== '0') return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`backend ${pid} never waited for an advisory lock`);
  }

  test.each([
    ['commits', [true, false]],
    ['rolls back', [true]],
  ] as const)(
    'a second enqueue of the partition waits, then sees what the holder did: the holder %s',
    async (end, heads) => {
      const spec = await fresh();
      await t.withTransactions(2, async ([a, b]) => {
        const bPid = (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(b!)).rows[0]!.pid;
        await enqueue(a!, spec, { partitionKey: 'vpc:w', payload });
        const second = enqueueMany(b!, spec, [{ partitionKey: 'vpc:w', payload }]);
        await waitsForLock(bPid);
        await (end === 'commits' ? a!.commit() : a!.rollback()).execute();
        await second;
        await b!.commit().execute();
      });
      expect((await headFlags(t.db, spec)).map((r) => r.is_head)).toEqual(heads);
    },
  );
});
