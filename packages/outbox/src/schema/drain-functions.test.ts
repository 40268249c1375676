import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { defineOutbox, type OutboxSpec } from '../define-outbox.js';
import { createOutboxTable } from './migration.js';
import { tableNames } from '../table-names.js';
import { rowsRead } from '../testing/rows-read.js';
import type { AnyKysely } from '../any-kysely.js';

/*
 * The drainer's claim and settle functions look partitions up on the partition-head index, one probe
 * per partition, with or without statistics: on a table not analyzed yet (a fresh one, a burst, a
 * restore) both partial indexes look nearly empty to the planner, and written the plain way the
 * look-ups walked the pending index instead, reading the whole backlog for every partition.
 */

const t = useTestDatabase();
const run = (text: string) => sql.raw(text).execute(t.db);

let tables = 0;
async function fresh(): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({ table: `drainfns.outbox_${tables}`, partitionColumn: 'resource_id' });
  await createOutboxTable(t.db, spec);
  return spec;
}

/**
 * Runs `statement` on `conn` in a transaction (rolled back) and returns how many rows of the table
 * it read. The counts of back-to-back transactions reach the statistics together: it takes the
 * difference.
 */
async function readOn(conn: AnyKysely, spec: OutboxSpec, statement: string): Promise<{ read: number; rows: number }> {
  await sql`begin`.execute(conn);
  try {
    const before = await rowsRead(conn, spec);
    const result = await sql.raw(statement).execute(conn);
    return { read: (await rowsRead(conn, spec)) - before, rows: result.rows.length };
  } finally {
    await sql`rollback`.execute(conn);
  }
}

/** {@link readOn} on a connection of the pool. */
async function readBy(spec: OutboxSpec, statement: string): Promise<{ read: number; rows: number }> {
  return t.db.connection().execute((conn) => readOn(conn, spec, statement));
}

describe.each([
  ['analyzed', true],
  ['never analyzed', false],
])("the drainer's look-ups follow the partitions, not the backlog (%s)", (_, analyzed) => {
  /** 20,000 partitions of one pending row each (ids 1–20,000), every row its partition's head. */
  async function distinctBacklog(): Promise<OutboxSpec> {
    const spec = await fresh();
    await run(
      `insert into ${tableNames(spec).table} (resource_id, payload, is_head) select 'vpc:' || g, '{}', true from generate_series(1, 20000) g`,
    );
    if (analyzed) await run(`analyze ${tableNames(spec).table}`);
    return spec;
  }

  test("a settle of 100 delivered heads looks for each partition's next head once", async () => {
    const spec = await distinctBacklog();
    const ids = Array.from({ length: 100 }, (_, i) => i + 1);
    const { read, rows } = await readBy(
      spec,
      // Each row probed for a previous delivery of its partition, as late-write stamping does (none has one).
      `select * from ${tableNames(spec).settleFunction}('{${ids}}'::bigint[], array[${ids.map((i) => `'vpc:${i}'`)}]::text[], '{${ids}}'::bigint[], 10, 14000, '{}', '{${ids}}'::bigint[])`,
    );
    expect(rows).toBe(100);
    // One scan of a table this small is a plan the planner may choose (PostgreSQL 15 does, for the
    // update that marks the rows delivered, when the table has no statistics); reading the backlog
    // once per partition, as the look-up on the pending index did (2,010,001 rows), is not.
    expect(read).toBeLessThan(20_000 + 1_000);
  });

  test("a settle that probes for a previous delivery reads one row of the partition's history, and stamps only when it is recent", async () => {
    const spec = await fresh();
    const table = tableNames(spec).table;
    // vpc:hot has 20,000 delivered rows (the last one a second ago), vpc:cold one delivered an hour ago; each a pending row after.
    await run(
      `insert into ${table} (resource_id, payload, sent_at) select 'vpc:hot', '{}', now() - interval '1 second' from generate_series(1, 20000) g`,
    );
    await run(
      `insert into ${table} (resource_id, payload, sent_at) values ('vpc:cold', '{}', now() - interval '1 hour')`,
    );
    await run(
      `insert into ${table} (resource_id, payload, is_head) values ('vpc:hot', '{}', true), ('vpc:cold', '{}', true)`,
    );
    if (analyzed) await run(`analyze ${table}`);
    const { read } = await readBy(
      spec,
      `select * from ${tableNames(spec).settleFunction}('{20002,20003}'::bigint[], '{vpc:hot,vpc:cold}'::text[], '{20002,20003}'::bigint[], 10, 14000, '{}', '{20002,20003}')`,
    );
    expect(read).toBeLessThan(100);
    await run(
      `select * from ${tableNames(spec).settleFunction}('{20002,20003}'::bigint[], '{vpc:hot,vpc:cold}'::text[], '{20002,20003}'::bigint[], 10, 14000, '{}', '{20002,20003}')`,
    );
    const stamped = await sql<{ resource_id: string; delay: number }>`
      select resource_id, round(extract(epoch from verify_after - sent_at))::int as delay from ${sql.raw(table)} where verify_after is not null`.execute(
      t.db,
    );
    expect(stamped.rows).toEqual([{ resource_id: 'vpc:hot', delay: 14 }]);
  });

  test("a claim of one head's run in an interleaved backlog reads the run, not the rows between", async () => {
    const spec = await fresh();
    // 200 partitions of 100 rows, interleaved: a partition's rows are 200 ids apart.
    await run(
      `insert into ${tableNames(spec).table} (resource_id, payload, is_head) select 'vpc:' || (g % 200), '{}', g <= 200 from generate_series(1, 20000) g`,
    );
    if (analyzed) await run(`analyze ${tableNames(spec).table}`);
    const { read, rows } = await readBy(
      spec,
      `select * from ${tableNames(spec).claimFunction}(100, 1, 10, true, true, '{}', true)`,
    );
    expect(rows).toBe(100);
    expect(read).toBeLessThan(1_000);
  });

  test('a claim that puts flushed partitions first finds their heads by key', async () => {
    const spec = await distinctBacklog();
    const { read, rows } = await readBy(
      spec,
      `select * from ${tableNames(spec).claimFunction}(10, 10, 10, true, true, array['vpc:19999', 'vpc:20000'], true)`,
    );
    expect(rows).toBe(10);
    expect(read).toBeLessThan(1_000);
  });

  test('calls on one connection keep reading what they return once the functions run on generic plans', async () => {
    // The functions' statements run on generic plans, made at their first call on a connection
    // and kept: the twenty calls below run on them. A generic plan knows neither the LIMIT nor the
    // key; one that sorts or scans instead of walking an index reads the whole table.
    const distinct = await distinctBacklog();
    const interleaved = await fresh();
    // 1,000 partitions of 100 rows, interleaved (the drain benchmark's first shape).
    await run(
      `insert into ${tableNames(interleaved).table} (resource_id, payload, is_head) select 'vpc:' || (g % 1000), '{}', g <= 1000 from generate_series(1, 100000) g`,
    );
    if (analyzed) await run(`analyze ${tableNames(interleaved).table}`);
    const calls = [
      {
        spec: distinct,
        statement: `select * from ${tableNames(distinct).claimFunction}(100, 100, 10, false, true, '{}', true)`,
      },
      {
        spec: distinct,
        statement: `select * from ${tableNames(distinct).claimFunction}(100, 100, 10, true, true, array['vpc:20000'], true)`,
      },
      {
        spec: interleaved,
        statement: `select * from ${tableNames(interleaved).claimFunction}(100, 1, 10, true, true, '{}', true)`,
      },
      {
        spec: interleaved,
        statement: `select * from ${tableNames(interleaved).claimFunction}(100, 4, 10, true, true, '{}', true)`,
      },
      {
        spec: interleaved,
        statement: `select * from ${tableNames(interleaved).settleFunction}('{1,1001,2001}'::bigint[], '{vpc:1}'::text[], '{2001}'::bigint[], 10, 14000, '{2001}', '{}')`,
      },
      {
        spec: interleaved,
        statement: `select * from ${tableNames(interleaved).settleFunction}('{3001}'::bigint[], '{vpc:1}'::text[], '{3001}'::bigint[], 10, 14000, '{}', '{3001}')`,
      },
    ];
    const reads = await t.db.connection().execute(async (conn) => {
      const found: Array<{ read: number; rows: number }> = [];
      for (let i = 0; i < 20; i += 1) {
        for (const { spec, statement } of calls) found.push(await readOn(conn, spec, statement));
      }
      return found;
    });
    expect(reads.map((r) => r.rows)).toEqual(Array.from({ length: 20 }, () => [100, 100, 100, 100, 1, 1]).flat());
    // Well under one scan of either table (20,000 and 100,000 rows) in every call.
    expect(Math.max(...reads.map((r) => r.read))).toBeLessThan(1_000);
  });

  test('plans made while the table was small still read by index after a burst fills it', async () => {
    const spec = await fresh();
    const table = tableNames(spec).table;
    // Two partitions of one row each: a table of one page when the connection first plans.
    await run(
      `insert into ${table} (resource_id, payload, is_head) values ('vpc:a', '{}', true), ('vpc:b', '{}', true)`,
    );
    if (analyzed) await run(`analyze ${table}`);
    const claim = `select * from ${tableNames(spec).claimFunction}(100, 1, 10, true, true, '{}', true)`;
    const settle = `select * from ${tableNames(spec).settleFunction}('{1}'::bigint[], '{vpc:a}'::text[], '{1}'::bigint[], 10, 14000, '{}', '{1}')`;
    const reads = await t.db.connection().execute(async (conn) => {
      for (let i = 0; i < 8; i += 1) {
        await readOn(conn, spec, claim);
        await readOn(conn, spec, settle);
      }
      // The burst: 100,000 rows of 1,000 partitions behind vpc:a, not analyzed (as in its first minute).
      await run(
        `insert into ${table} (resource_id, payload) select case when g % 1000 = 0 then 'vpc:a' else 'vpc:' || (g % 1000) end, '{}' from generate_series(1, 100000) g`,
      );
      return [await readOn(conn, spec, claim), await readOn(conn, spec, settle)];
    });
    expect(reads.map((r) => r.rows)).toEqual([100, 1]);
    expect(Math.max(...reads.map((r) => r.read))).toBeLessThan(1_000);
  });
});
