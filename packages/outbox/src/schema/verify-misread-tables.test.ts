import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { actionsLogDdlV1 } from './actions-log-ddl.js';
import { defineOutbox } from '../define-outbox.js';
import { createDrainFunctions } from './drain-functions.js';
import { enqueue } from '../enqueue.js';
import { executeStatements } from './execute-statements.js';
import { tableNames } from '../table-names.js';
import { freshOutboxes, verifyGaps } from '../testing/outbox-tables.js';

// verifyOutboxTable refuses the tables a drainer would misread: rows never delivered, a shared ctid.

const t = useTestDatabase();
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };
const run = (text: string) => sql.raw(text).execute(t.db);
const fresh = freshOutboxes(t, 'misread');

describe('verifyOutboxTable refuses tables on which enqueued rows are never delivered', () => {
  test.each([
    ['next_attempt_at', 'alter column next_attempt_at drop default, alter column next_attempt_at drop not null'],
    ['attempt_count', 'alter column attempt_count drop default, alter column attempt_count drop not null'],
    ['attempt_count', 'alter column attempt_count set default 10'],
    ['sent_at', 'alter column sent_at set default now()'],
  ])('a %s the claim cannot work with (%s)', async (column, alteration) => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(`alter table ${names.table} ${alteration}`);
    const found = await verifyGaps(t.db, spec);
    expect(found).toHaveLength(1);
    expect(found?.[0]).toMatch(new RegExp(`^column ${column} should be `));
  });

  test('without that check, a row enqueued into such a table stays NULL where the claim compares, silently', async () => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(
      `alter table ${names.table} alter column next_attempt_at drop default, alter column next_attempt_at drop not null`,
    );
    await t.db.transaction().execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:x', payload }));
    const claimable = await sql<{ n: number }>`
      select count(*)::int as n from ${sql.raw(names.table)} where is_head and next_attempt_at <= now()`.execute(t.db);
    expect(claimable.rows[0]?.n).toBe(0);
    expect(await verifyGaps(t.db, spec)).toEqual([
      'column next_attempt_at should be not null default now(), as enqueue leaves it to the default',
    ]);
  });

  test('a trigger notifying another channel that LIKE would match (a "_" in the spec\'s channel)', async () => {
    const spec = await fresh({ channel: 'edges_x1' });
    const other = defineOutbox({ table: spec.table, partitionColumn: 'resource_id', channel: 'edges_x_' });
    expect(await verifyGaps(t.db, other)).toEqual([
      `statement-level AFTER INSERT trigger calling pg_notify('edges_x_', '')`,
    ]);
  });

  test('a trigger enabled only for replication sessions (never fires for the services)', async () => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(`alter table ${names.table} enable replica trigger "${names.notifyTrigger}"`);
    expect(await verifyGaps(t.db, spec)).toEqual([
      `statement-level AFTER INSERT trigger calling pg_notify('${spec.channel}', '')`,
    ]);
  });

  test('an invalid index left by a CREATE INDEX CONCURRENTLY that was cancelled', async () => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(`drop index "${spec.schema}"."${names.claimIndex}"`);
    // A transaction that has written something: CREATE INDEX CONCURRENTLY waits for it, and times out.
    const holder = t.kysely({ max: 1 });
    const trx = await holder.startTransaction().execute();
    await sql.raw(`insert into ${names.table} (resource_id, payload) values ('vpc:held', '{}')`).execute(trx);
    const builder = t.pool({ max: 1 });
    const client = await builder.connect();
    try {
      await client.query(`set statement_timeout = '500ms'`);
      await expect(
        client.query(
          `create index concurrently "${names.claimIndex}" on ${names.table} (next_attempt_at, id) where is_head`,
        ),
      ).rejects.toThrow(/statement timeout/);
    } finally {
      client.release();
      await trx.rollback().execute();
    }
    const invalid = await sql<{ valid: boolean }>`
      select indisvalid as valid from pg_index where indexrelid = ${`"${spec.schema}"."${names.claimIndex}"`}::regclass`.execute(
      t.db,
    );
    expect(invalid.rows).toEqual([{ valid: false }]);
    expect(await verifyGaps(t.db, spec)).toEqual([
      "partial index (next_attempt_at, id) where is_head (the drainer's claim)",
    ]);
  });

  test.each([
    [
      'an expression index (lower(key), id) taken for the pending index on (id)',
      'pendingIndex',
      '(lower(resource_id), id) where sent_at is null and retired_at is null',
    ],
    ['a BRIN index in place of the claim btree', 'claimIndex', 'using brin (next_attempt_at, id) where is_head'],
    [
      'an index whose id is an INCLUDE column, not a key',
      'partitionHeadIndex',
      '(resource_id) include (id) where sent_at is null and retired_at is null',
    ],
  ] as const)('%s', async (_what, index, definition) => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(`drop index "${spec.schema}"."${names[index]}"`);
    await run(`create index "${names[index]}" on ${names.table} ${definition}`);
    const found = await verifyGaps(t.db, spec);
    expect(found).toHaveLength(1);
    expect(found?.[0]).toMatch(/^partial index/);
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
      poison_cause text, poison_code text, revival_count integer not null default 0, revive_after timestamptz, revive_requested boolean not null default false, closed_as text,
      verify_after timestamptz,
      primary key (id, created_at)
    ) partition by range (created_at)`);
    await run(
      `create table edges.partitioned_2020 partition of edges.partitioned for values from ('2020-01-01') to ('2021-01-01')`,
    );
    await run(
      `create table edges.partitioned_now partition of edges.partitioned for values from ('2021-01-01') to ('2200-01-01')`,
    );
    await run(`create index partitioned_partition_head_idx on edges.partitioned (resource_id, id) where ${pending}`);
    await run(`create index partitioned_pending_idx on edges.partitioned (id) where ${pending}`);
    await run(`create index partitioned_claim_idx on edges.partitioned (next_attempt_at, id) where is_head`);
    await run(
      `create index partitioned_delivered_idx on edges.partitioned (resource_id, id) where sent_at is not null`,
    );
    await run(`create index partitioned_verify_idx on edges.partitioned (verify_after) where verify_after is not null`);
    await run(
      `create function edges.partitioned_notify() returns trigger language plpgsql as $$ begin perform pg_notify('${spec.channel}', ''); return null; end $$`,
    );
    await run(
      `create trigger partitioned_notify after insert on edges.partitioned for each statement execute function edges.partitioned_notify()`,
    );
    await createDrainFunctions(t.db, spec);
    await executeStatements(t.db, actionsLogDdlV1(spec));

    // Why: a 2020 partition whose rows are all delivered, among them vpc:old's register at ctid
    // (0,2) and, later, its deregister (access revoked)…
    await run(`insert into edges.partitioned (resource_id, payload, created_at, sent_at) values
      ('vpc:other', '{}', '2020-06-01', '2020-06-01'),
      ('vpc:old', '{"register": true}', '2020-06-02', '2020-06-02'),
      ('vpc:old', '{"deregister": true}', '2020-06-03', '2020-06-03')`);
    // …and a head with one follower of vpc:new in the current partition, at ctids (0,1) and (0,2).
    await run(
      `insert into edges.partitioned (resource_id, payload, is_head) values ('vpc:new', '{}', true), ('vpc:new', '{}', false)`,
    );
    const { claimed, lockedElsewhere } = await t.db.transaction().execute(async (trx) => {
      const result = await sql<{
        id: string;
        partition_key: string;
      }>`select id, partition_key from edges.partitioned_claim(10, 10, 10, true, true, '{}', true)`.execute(trx);
      // Another session tries the 2020 row at (0,2): vpc:old's register.
      const other = await t.db.connection().execute((conn) =>
        sql`select id from edges.partitioned_2020 where id = 2 for update nowait`.execute(conn).then(
          () => false,
          (error: { code?: string }) => (error.code === '55P03' ? true : Promise.reject(error)), // lock_not_available
        ),
      );
      return { claimed: result.rows.map((r) => `${r.partition_key} ${r.id}`).sort(), lockedElsewhere: other };
    });
    // The run of vpc:new is locked by ctid, and the lock lands on the 2020 row at (0,2) as well.
    // The claim hands out only the ids it read (an earlier claim handed that register out again,
    // after its deregister: revoked access resurrected), but it holds a row it never read.
    expect(claimed).toEqual(['vpc:new 4', 'vpc:new 5']);
    expect(lockedElsewhere).toBe(true);
    expect(await verifyGaps(t.db, spec)).toEqual([
      'the table itself: it is partitioned (or has inheritance children), and rows of two partitions can share a ctid, by which the drainer locks its runs',
    ]);
  });
});
