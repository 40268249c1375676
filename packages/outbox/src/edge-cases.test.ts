import { useTestDatabase } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { defineOutbox, type OutboxSpec } from './define-outbox.js';
import { enqueue, enqueueMany } from './enqueue.js';
import { OutboxConfigError, OutboxTableError, PayloadError } from './errors.js';
import { createDrainFunctions } from './drain-functions.js';
import { createOutboxTable } from './migration.js';
import type { IntentPayload } from './payload.js';
import { outboxStats, outboxStatsQuery } from './stats.js';
import { tableNames } from './table-names.js';
import { rowsRead } from './testing/rows-read.js';
import { verifyOutboxTable } from './verify.js';

/*
 * Edge cases a platform team meets wiring the outbox in, each against the real Postgres of the test stack.
 */

const t = useTestDatabase();
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };
const run = (text: string) => sql.raw(text).execute(t.db);

let tables = 0;
async function fresh(input: { channel?: string } = {}): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({ table: `edges.outbox_${tables}`, partitionColumn: 'resource_id', ...input });
  await createOutboxTable(t.db, spec);
  return spec;
}

/** The gaps verifyOutboxTable reports (undefined when it passes). */
async function gaps(spec: OutboxSpec): Promise<readonly string[] | undefined> {
  const error = await verifyOutboxTable(t.db, spec).then(() => undefined, (e: unknown) => e);
  if (error === undefined) return undefined;
  expect(error).toBeInstanceOf(OutboxTableError);
  return (error as OutboxTableError).missing;
}

interface Head {
  resource_id: string;
  is_head: boolean;
}
async function heads(spec: OutboxSpec): Promise<Head[]> {
  const result = await sql<Head>`select resource_id, is_head from ${sql.raw(tableNames(spec).table)} order by id`.execute(t.db);
  return result.rows;
}

// With statistics, and without: a table not analyzed yet (a fresh one, a burst, a restore), where
// both partial indexes look nearly empty to the planner.
describe.each([
  ['analyzed', true],
  ['never analyzed', false],
])('enqueue: the head check costs one probe per key, not the key\'s whole backlog (%s)', (_, analyzed) => {
  test('an enqueue onto a key with 50k pending rows reads a handful of rows, and is still not head', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    // A delivered history over 20k keys, then a 50k-row backlog on one hot key.
    await run(`insert into ${n.table} (resource_id, payload, sent_at) select 'vpc:' || (g % 20000), '{}', now() from generate_series(1, 200000) g`);
    await run(`insert into ${n.table} (resource_id, payload, is_head) select 'vpc:hot', '{}', g = 1 from generate_series(1, 50000) g`);
    if (analyzed) await run(`analyze ${n.table}`);
    const read = await t.db.transaction().execute(async (trx) => {
      await enqueue(trx, spec, { partitionKey: 'vpc:hot', payload });
      await enqueue(trx, spec, { partitionKey: 'vpc:cold', payload });
      // This transaction's own reads of the table (enqueue's lock and insert read none of it).
      return rowsRead(trx, spec);
    });
    expect(read).toBeLessThan(100);
    const last = await sql<Head>`select resource_id, is_head from ${sql.raw(n.table)} where id > 250000 order by id`.execute(t.db);
    expect(last.rows).toEqual([
      { resource_id: 'vpc:hot', is_head: false },
      { resource_id: 'vpc:cold', is_head: true },
    ]);
  });

  test('one hot key making up the whole table: a single-key enqueue of another key does not walk the hot key\'s backlog', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`insert into ${n.table} (resource_id, payload, is_head) select 'vpc:hot', '{}', g = 1 from generate_series(1, 50000) g`);
    if (analyzed) await run(`analyze ${n.table}`);
    for (const keys of [['vpc:cold'], ['vpc:hot'], ['vpc:cold-2', 'vpc:hot']]) {
      const read = await t.db.transaction().execute(async (trx) => {
        await enqueueMany(trx, spec, keys.map((partitionKey) => ({ partitionKey, payload })));
        return rowsRead(trx, spec);
      });
      expect(read, keys.join()).toBeLessThan(100);
    }
  });

  test('many keys, each with one pending row: an enqueue of two keys reads a handful of rows', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`insert into ${n.table} (resource_id, payload, is_head) select 'vpc:' || g, '{}', true from generate_series(1, 20000) g`);
    if (analyzed) await run(`analyze ${n.table}`);
    const read = await t.db.transaction().execute(async (trx) => {
      await enqueueMany(trx, spec, [{ partitionKey: 'vpc:new', payload }, { partitionKey: 'vpc:8', payload }]);
      return rowsRead(trx, spec);
    });
    expect(read).toBeLessThan(100);
  });
});

describe('enqueue: the head check', () => {
  test('the check still skips poisoned rows: behind only poisoned rows the new row is head, behind a deliverable one it is not', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`insert into ${n.table} (resource_id, payload, attempt_count) select 'vpc:a', '{}', 10 from generate_series(1, 5)`);
    await run(`insert into ${n.table} (resource_id, payload, attempt_count) select 'vpc:b', '{}', 10 from generate_series(1, 5)`);
    await run(`insert into ${n.table} (resource_id, payload, is_head) values ('vpc:b', '{}', true)`);
    await t.db.transaction().execute((trx) =>
      enqueueMany(trx, spec, [{ partitionKey: 'vpc:a', payload }, { partitionKey: 'vpc:b', payload }, { partitionKey: 'vpc:a', payload }]),
    );
    expect((await heads(spec)).slice(-3)).toEqual([
      { resource_id: 'vpc:a', is_head: true },
      { resource_id: 'vpc:b', is_head: false },
      { resource_id: 'vpc:a', is_head: false },
    ]);
  });
});

describe('two enqueue calls in one transaction take their locks out of hash order', () => {
  test('two transactions that enqueue the same two keys in two calls each, in opposite orders, deadlock: Postgres aborts one (40P01)', async () => {
    const spec = await fresh();
    const outcomes = await (async () => {
      const results: Array<'committed' | string> = [];
      await t.withTransactions(2, async ([a, b]) => {
        await enqueue(a!, spec, { partitionKey: 'vpc:one', payload });
        await enqueue(b!, spec, { partitionKey: 'vpc:two', payload });
        const finish = async (trx: typeof a, key: string) => {
          try {
            await enqueue(trx!, spec, { partitionKey: key, payload });
            await trx!.commit().execute();
            results.push('committed');
          } catch (error) {
            await trx!.rollback().execute();
            results.push((error as { code?: string }).code ?? String(error));
          }
        };
        await Promise.all([finish(a, 'vpc:two'), finish(b, 'vpc:one')]);
      });
      return results.sort();
    })();
    expect(outcomes).toEqual(['40P01', 'committed']);
  });
});

describe('enqueue in savepoints (Kysely controlled transactions) keeps exactly one head', () => {
  test('a rolled-back savepoint leaves no head behind; a released one is part of the transaction', async () => {
    const spec = await fresh();
    const trx = await t.db.startTransaction().execute();
    const first = await trx.savepoint('a').execute();
    await enqueue(first, spec, { partitionKey: 'vpc:s', payload });
    await first.rollbackToSavepoint('a').execute();
    await enqueue(trx, spec, { partitionKey: 'vpc:s', payload });
    const second = await trx.savepoint('b').execute();
    await enqueue(second, spec, { partitionKey: 'vpc:s', payload });
    await second.releaseSavepoint('b').execute();
    await trx.commit().execute();
    expect(await heads(spec)).toEqual([
      { resource_id: 'vpc:s', is_head: true },
      { resource_id: 'vpc:s', is_head: false },
    ]);
  });
});

describe('outboxStats: bounded by one pass, not one pass per poisoned row', () => {
  test('100 old poisoned rows before 200k delivered rows: the table is read about once', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`insert into ${n.table} (resource_id, payload, attempt_count) select 'vpc:p' || g, '{}', 10 from generate_series(1, 100) g`);
    await run(`insert into ${n.table} (resource_id, payload, attempt_count) values ('vpc:p1', '{}', 10)`);
    await run(`insert into ${n.table} (resource_id, payload, sent_at) select 'vpc:' || (g % 20000), '{}', now() from generate_series(1, 200000) g`);
    await run(`insert into ${n.table} (resource_id, payload, sent_at) values ('vpc:p2', '{}', now())`);
    await run(`analyze ${n.table}`);
    const pages = await sql<{ pages: number }>`
      select (pg_relation_size(${`"${spec.schema}"."${spec.tableName}"`}) / 8192)::int as pages`.execute(t.db);
    const query = outboxStatsQuery(spec).compile(t.db);
    const pool = t.pool({ max: 1 });
    const explained = await pool.query<{ 'QUERY PLAN': [{ Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number } }] }>(
      `explain (analyze, buffers, format json) ${query.sql}`,
      [...query.parameters],
    );
    const plan = explained.rows[0]!['QUERY PLAN'][0].Plan;
    const blocks = plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
    // Before: every poisoned row walked the 200k rows after it (~3k blocks each, ~300k in all, 4 s).
    expect(blocks).toBeLessThan(4 * pages.rows[0]!.pages);
    // vpc:p2's poisoned row has a delivered successor; vpc:p1's second poisoned row (id 101) has
    // none after it: the delivered 'vpc:1' rows are another partition.
    expect(await outboxStats(t.db, spec)).toMatchObject({ pending: 101, poisoned: 101, deliverable: 0, superseded: 1 });
  });
});

describe('verifyOutboxTable refuses tables on which enqueued rows are never delivered', () => {
  test.each([
    ['next_attempt_at', 'alter column next_attempt_at drop default, alter column next_attempt_at drop not null'],
    ['attempt_count', 'alter column attempt_count drop default, alter column attempt_count drop not null'],
    ['attempt_count', 'alter column attempt_count set default 10'],
    ['sent_at', 'alter column sent_at set default now()'],
  ])('a %s the claim cannot work with (%s)', async (column, alteration) => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`alter table ${n.table} ${alteration}`);
    const found = await gaps(spec);
    expect(found).toHaveLength(1);
    expect(found?.[0]).toMatch(new RegExp(`^column ${column} should be `));
  });

  test('without that check, a row enqueued into such a table stays NULL where the claim compares, silently', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`alter table ${n.table} alter column next_attempt_at drop default, alter column next_attempt_at drop not null`);
    await t.db.transaction().execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:x', payload }));
    const claimable = await sql<{ n: number }>`
      select count(*)::int as n from ${sql.raw(n.table)} where is_head and next_attempt_at <= now()`.execute(t.db);
    expect(claimable.rows[0]?.n).toBe(0);
    expect(await gaps(spec)).toEqual(['column next_attempt_at should be not null default now(), as enqueue leaves it to the default']);
  });

  test('a trigger notifying another channel that LIKE would match (a "_" in the spec\'s channel)', async () => {
    const spec = await fresh({ channel: 'edges_x1' });
    const other = defineOutbox({ table: spec.table, partitionColumn: 'resource_id', channel: 'edges_x_' });
    expect(await gaps(other)).toEqual([`statement-level AFTER INSERT trigger calling pg_notify('edges_x_', '')`]);
  });

  test('a trigger enabled only for replication sessions (never fires for the services)', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`alter table ${n.table} enable replica trigger "${n.notifyTrigger}"`);
    expect(await gaps(spec)).toEqual([`statement-level AFTER INSERT trigger calling pg_notify('${spec.channel}', '')`]);
  });

  test('an invalid index left by a CREATE INDEX CONCURRENTLY that was cancelled', async () => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`drop index "${spec.schema}"."${n.claimIndex}"`);
    // A transaction that has written something: CREATE INDEX CONCURRENTLY waits for it, and times out.
    const holder = t.kysely({ max: 1 });
    const trx = await holder.startTransaction().execute();
    await sql.raw(`insert into ${n.table} (resource_id, payload) values ('vpc:held', '{}')`).execute(trx);
    const builder = t.pool({ max: 1 });
    const client = await builder.connect();
    try {
      await client.query(`set statement_timeout = '500ms'`);
      await expect(client.query(`create index concurrently "${n.claimIndex}" on ${n.table} (next_attempt_at, id) where is_head`)).rejects.toThrow(
        /statement timeout/,
      );
    } finally {
      client.release();
      await trx.rollback().execute();
    }
    const invalid = await sql<{ valid: boolean }>`
      select indisvalid as valid from pg_index where indexrelid = ${`"${spec.schema}"."${n.claimIndex}"`}::regclass`.execute(t.db);
    expect(invalid.rows).toEqual([{ valid: false }]);
    expect(await gaps(spec)).toEqual(["partial index (next_attempt_at, id) where is_head (the drainer's claim)"]);
  });

  test.each([
    ['an expression index (lower(key), id) taken for the pending index on (id)', 'pendingIndex', '(lower(resource_id), id) where sent_at is null and retired_at is null'],
    ['a BRIN index in place of the claim btree', 'claimIndex', 'using brin (next_attempt_at, id) where is_head'],
    ['an index whose id is an INCLUDE column, not a key', 'partitionHeadIndex', '(resource_id) include (id) where sent_at is null and retired_at is null'],
  ] as const)('%s', async (_what, index, definition) => {
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`drop index "${spec.schema}"."${n[index]}"`);
    await run(`create index "${n[index]}" on ${n.table} ${definition}`);
    const found = await gaps(spec);
    expect(found).toHaveLength(1);
    expect(found?.[0]).toMatch(/^partial index/);
  });
});

describe('enqueue validates what it stores', () => {
  test('a sparse writes array (a hole where a tuple should be) is a PayloadError, not a null tuple in the row', async () => {
    const spec = await fresh();
    const writes = new Array(2);
    writes[1] = { user: 'project:p1', relation: 'project', object: 'vpc:v1' };
    const error = await t.db
      .transaction()
      .execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:sparse', payload: { writes } }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe('payload.writes[0]');
    expect(await heads(spec)).toEqual([]);
  });

  test('a sparse intents array is a PayloadError naming the hole, not a NOT NULL violation from the driver', async () => {
    const spec = await fresh();
    const intents = new Array(2);
    intents[1] = { partitionKey: 'vpc:sparse', payload };
    const error = await t.db
      .transaction()
      .execute((trx) => enqueueMany(trx, spec, intents))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe('intents[0].partitionKey');
  });

  test('a payload or tuple key with its own toJSON is refused: it would store something other than what was validated', async () => {
    const spec = await fresh();
    const tuple = { user: 'project:p1', relation: 'project', object: 'vpc:v1' };
    const cases: Array<[unknown, string]> = [
      [{ writes: [tuple], toJSON: () => ({ writes: [] }) }, 'payload'],
      [{ writes: [{ ...tuple, toJSON: () => ({ user: 'x' }) }] }, 'payload.writes[0]'],
    ];
    for (const [bad, path] of cases) {
      const error = await t.db
        .transaction()
        .execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:json', payload: bad as IntentPayload }))
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PayloadError);
      expect((error as PayloadError).path).toBe(path);
    }
    expect(await heads(spec)).toEqual([]);
  });
});

describe('createOutboxTable as a role that may create in its schema but not in the database (PostgreSQL 15+ default)', () => {
  test('creates the table in the existing schema', async () => {
    const role = `edges_owner_${process.pid}`;
    await run(`create role ${role} login password 'pw'`);
    await run(`create schema edges_owned authorization ${role}`);
    const url = new URL(t.url);
    url.username = role;
    url.password = 'pw';
    const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url.toString(), max: 1 }) }) });
    try {
      const privileges = await sql<{ database: boolean; schema: boolean }>`
        select has_database_privilege(current_user, current_database(), 'CREATE') as database,
               has_schema_privilege('edges_owned', 'CREATE') as schema`.execute(db);
      expect(privileges.rows).toEqual([{ database: false, schema: true }]);
      const spec = defineOutbox({ table: 'edges_owned.outbox', partitionColumn: 'resource_id' });
      await createOutboxTable(db, spec);
      await verifyOutboxTable(db, spec);
    } finally {
      await db.destroy();
      await run(`drop schema edges_owned cascade`);
      await run(`drop role ${role}`);
    }
  });
});

describe('defineOutbox', () => {
  const refusal = (input: Parameters<typeof defineOutbox>[0]) => {
    try {
      defineOutbox(input);
    } catch (error) {
      return error as OutboxConfigError;
    }
    throw new Error('defineOutbox accepted it');
  };

  test('coverage SQL whose parentheses balance only when those inside string literals are counted is refused', async () => {
    const injected = "'(' is not null) or (true or ')' is null";
    const error = refusal({ table: 'edges.cover', partitionColumn: 'resource_id', supersededCoverageSql: injected });
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect(error.field).toBe('supersededCoverageSql');
    // What it did when accepted: spliced as `and (…)`, it turns outboxStats' "has a covering
    // successor" into "has any successor at all": a poisoned row counted superseded by a delivered
    // row of another partition (the reconciler's own start check refuses it; outboxStats has none).
    const spec = await fresh();
    const n = tableNames(spec);
    await run(`insert into ${n.table} (resource_id, payload, attempt_count) values ('vpc:a', '{}', 10), ('vpc:a', '{}', 10)`);
    await run(`insert into ${n.table} (resource_id, payload, sent_at) values ('vpc:a', '{}', now())`);
    const honest = Object.freeze({ ...spec, supersededCoverageSql: 'false' });
    const widened = Object.freeze({ ...spec, supersededCoverageSql: injected });
    expect((await outboxStats(t.db, honest)).superseded).toBe(0);
    expect((await outboxStats(t.db, widened)).superseded).toBe(2);
  });

  test('coverage SQL with a parenthesis inside a string literal is accepted (it was refused as unbalanced)', () => {
    const spec = defineOutbox({ table: 'edges.cover', partitionColumn: 'resource_id', supersededCoverageSql: "s.payload->>'note' is distinct from ':)'" });
    expect(spec.supersededCoverageSql).toBe("s.payload->>'note' is distinct from ':)'");
  });

  test('a schema starting with pg_ is an OutboxConfigError naming the table, not a database error at migration time', async () => {
    const error = refusal({ table: 'pg_outbox.register', partitionColumn: 'resource_id' });
    expect(error.field).toBe('table');
    expect(error.message).toContain('pg_');
    // What the migration says otherwise:
    await expect(run('create schema pg_outbox')).rejects.toThrow(/unacceptable schema name/);
  });
});

describe('verifyOutboxTable refuses a partitioned outbox table (rows of two partitions can share a ctid)', () => {
  test('a time-partitioned outbox made by hand: the claim locks a delivered row of another partition that shares a ctid with a run', async () => {
    const spec = defineOutbox({ table: 'edges.partitioned', partitionColumn: 'resource_id' });
    const pending = 'sent_at is null and retired_at is null';
    await run('create schema if not exists edges');
    await run(`create table edges.partitioned (
      id bigint generated always as identity, resource_id text not null, payload jsonb not null,
      created_at timestamptz not null default now(), next_attempt_at timestamptz not null default now(),
      attempt_count integer not null default 0, last_error text, sent_at timestamptz,
      retired_at timestamptz, retired_reason text, is_head boolean not null default false,
      primary key (id, created_at)
    ) partition by range (created_at)`);
    await run(`create table edges.partitioned_2020 partition of edges.partitioned for values from ('2020-01-01') to ('2021-01-01')`);
    await run(`create table edges.partitioned_now partition of edges.partitioned for values from ('2021-01-01') to ('2200-01-01')`);
    await run(`create index partitioned_partition_head_idx on edges.partitioned (resource_id, id) where ${pending}`);
    await run(`create index partitioned_pending_idx on edges.partitioned (id) where ${pending}`);
    await run(`create index partitioned_claim_idx on edges.partitioned (next_attempt_at, id) where is_head`);
    await run(`create function edges.partitioned_notify() returns trigger language plpgsql as $$ begin perform pg_notify('${spec.channel}', ''); return null; end $$`);
    await run(`create trigger partitioned_notify after insert on edges.partitioned for each statement execute function edges.partitioned_notify()`);
    await createDrainFunctions(t.db, spec);

    // Why: a 2020 partition whose rows are all delivered, among them vpc:old's register at ctid
    // (0,2) and, later, its deregister (access revoked)…
    await run(`insert into edges.partitioned (resource_id, payload, created_at, sent_at) values
      ('vpc:other', '{}', '2020-06-01', '2020-06-01'),
      ('vpc:old', '{"register": true}', '2020-06-02', '2020-06-02'),
      ('vpc:old', '{"deregister": true}', '2020-06-03', '2020-06-03')`);
    // …and a head with one follower of vpc:new in the current partition, at ctids (0,1) and (0,2).
    await run(`insert into edges.partitioned (resource_id, payload, is_head) values ('vpc:new', '{}', true), ('vpc:new', '{}', false)`);
    const { claimed, lockedElsewhere } = await t.db.transaction().execute(async (trx) => {
      const result = await sql<{ id: string; partition_key: string }>`select id, partition_key from edges.partitioned_claim(10, 10, 10, true, true, '{}')`.execute(trx);
      // Another session tries the 2020 row at (0,2): vpc:old's register.
      const other = await t.db.connection().execute((conn) => sql`select id from edges.partitioned_2020 where id = 2 for update nowait`.execute(conn).then(
        () => false,
        (error: { code?: string }) => (error.code === '55P03' ? true : Promise.reject(error)), // lock_not_available
      ));
      return { claimed: result.rows.map((r) => `${r.partition_key} ${r.id}`).sort(), lockedElsewhere: other };
    });
    // The run of vpc:new is locked by ctid, and the lock lands on the 2020 row at (0,2) as well.
    // The claim hands out only the ids it read (an earlier claim handed that register out again,
    // after its deregister: revoked access resurrected), but it holds a row it never read.
    expect(claimed).toEqual(['vpc:new 4', 'vpc:new 5']);
    expect(lockedElsewhere).toBe(true);
    expect(await gaps(spec)).toEqual(['the table itself: it is partitioned (or has inheritance children), and rows of two partitions can share a ctid, by which the drainer locks its runs']);
  });
});
