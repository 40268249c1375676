import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { defineOutbox, type OutboxSpec } from '../define-outbox.js';
import { createDrainFunctions, drainFunctionMarker } from './drain-functions.js';
import { enqueueFunctionMarker } from './enqueue-function.js';
import { OutboxTableError } from '../errors.js';
import { createOutboxTable, dropOutboxTable } from './migration.js';
import { tableNames } from '../table-names.js';
import { verifyOutboxTable } from './verify.js';

const t = useTestDatabase();

let tables = 0;
/** A fresh, migrated outbox table of its own (register-outbox shape unless told). */
async function freshOutbox(partitionColumn = 'resource_id', channel?: string): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({ table: `verify.outbox_${tables}`, partitionColumn, ...(channel ? { channel } : {}) });
  await createOutboxTable(t.db, spec);
  return spec;
}

/** The gaps verifyOutboxTable reports for `spec` (fails the test when it passes). */
async function missing(spec: OutboxSpec): Promise<readonly string[]> {
  const error = await verifyOutboxTable(t.db, spec).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OutboxTableError);
  expect((error as OutboxTableError).table).toBe(spec.table);
  return (error as OutboxTableError).missing;
}

const run = (text: string) => sql.raw(text).execute(t.db);
const triggerGap = (spec: OutboxSpec) =>
  `statement-level AFTER INSERT trigger calling pg_notify('${spec.channel}', '')`;
const foreignFunction = (spec: OutboxSpec, fn: 'claim' | 'settle' | 'enqueue') =>
  `function ${spec.table}_${fn} is not the one this release creates for this spec (expected "${fn === 'enqueue' ? enqueueFunctionMarker(spec) : drainFunctionMarker(spec, fn)}" in its body; createDrainFunctions replaces it)`;

describe('verifyOutboxTable', () => {
  test('passes on a table made by createOutboxTable, for both outbox shapes', async () => {
    await expect(verifyOutboxTable(t.db, await freshOutbox('resource_id'))).resolves.toBeUndefined();
    await expect(verifyOutboxTable(t.db, await freshOutbox('tuple_key'))).resolves.toBeUndefined();
  });

  test('a spec pointing at a table that does not exist fails clearly', async () => {
    for (const table of ['verify.no_such_outbox', 'no_such_schema.outbox']) {
      const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
      const error = await verifyOutboxTable(t.db, spec).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxTableError);
      expect((error as OutboxTableError).missing).toEqual([`the table ${table} itself (it does not exist)`]);
      expect((error as Error).message).toContain('createOutboxTable');
    }
  });

  test('a spec with the wrong partition column names the column, its partition-head index and the functions made for the other column', async () => {
    const registerOutbox = await freshOutbox('resource_id');
    const wrong = defineOutbox({ table: registerOutbox.table, partitionColumn: 'tuple_key' });
    expect(await missing(wrong)).toEqual([
      "column tuple_key text (the spec's partitionColumn)",
      'partial index (tuple_key, id) where sent_at is null and retired_at is null (partition head)',
      "partial index (tuple_key, id) where sent_at is not null (delivered rows: compaction, the reconciler's successor look-up)",
      foreignFunction(wrong, 'claim'),
      foreignFunction(wrong, 'settle'),
      foreignFunction(wrong, 'enqueue'),
    ]);
  });

  test('names a dropped drainer function, and one replaced by a body of another release', async () => {
    const spec = await freshOutbox();
    const names = tableNames(spec);
    await run(`drop function ${names.claimFunction}`);
    await run(`create or replace function ${names.settleFunction}(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer,
      p_verify_delay_ms integer, p_stamp bigint[], p_probe bigint[])
      returns table (partition_key text, head_id bigint) language sql as $$ select null::text, null::bigint where false $$`);
    expect(await missing(spec)).toEqual([
      `function ${spec.table}_claim (the drainer's claim; created by createOutboxTable or createDrainFunctions)`,
      foreignFunction(spec, 'settle'),
    ]);
    // The upgrade step puts both back; running it twice is harmless.
    await createDrainFunctions(t.db, spec);
    await createDrainFunctions(t.db, spec);
    await expect(verifyOutboxTable(t.db, spec)).resolves.toBeUndefined();
  });

  test('upgrading from the earlier claims (v1, v2): verify names them, createDrainFunctions adds the current one beside them, dropOutboxTable drops all three', async () => {
    const spec = await freshOutbox();
    const names = tableNames(spec);
    const overloads = async () =>
      (
        await sql<{ args: string }>`
          select pg_get_function_identity_arguments(p.oid) as args from pg_proc p join pg_namespace ns on ns.oid = p.pronamespace
          where ns.nspname = ${spec.schema} and p.proname = ${`${spec.tableName}_claim`} order by 1`.execute(t.db)
      ).rows.map((r) => r.args);
    // What the previous release left: the claim without p_synchronous_commit, marked v1.
    await run(`drop function ${names.claimFunction}`);
    await run(`create function ${names.claimFunction}(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean)
      returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean) language sql
      as $$ select null::bigint, null::text, null::jsonb, null::integer, null::boolean where false -- @outbox/outbox claim v1 ${spec.table} resource_id
      $$`);
    // And the one after it, with p_synchronous_commit (v2), which a table of that release has instead.
    await run(`create function ${names.claimFunction}(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean)
      returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean) language sql
      as $$ select null::bigint, null::text, null::jsonb, null::integer, null::boolean where false -- @outbox/outbox claim v2 ${spec.table} resource_id
      $$`);
    expect(await missing(spec)).toEqual([foreignFunction(spec, 'claim')]);

    await createDrainFunctions(t.db, spec);
    await expect(verifyOutboxTable(t.db, spec)).resolves.toBeUndefined();
    // The old overload stays, so drainers of the previous release keep working during a rolling upgrade.
    expect(await overloads()).toEqual([
      'p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean',
      'p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean',
      'p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[], p_created_at boolean',
    ]);
    await run(`select * from ${names.claimFunction}(10, 10, 25, true)`);
    await run(`select * from ${names.claimFunction}(10, 10, 25, true, false)`);

    await dropOutboxTable(t.db, spec);
    expect(await overloads()).toEqual([]);
  });

  test('a spec with another channel than the trigger notifies is refused', async () => {
    const spec = await freshOutbox('resource_id', 'first_channel');
    const other = defineOutbox({ table: spec.table, partitionColumn: 'resource_id', channel: 'second_channel' });
    expect(await missing(other)).toEqual([triggerGap(other)]);
  });

  test.each([
    [
      'partitionHeadIndex',
      'partial index (resource_id, id) where sent_at is null and retired_at is null (partition head)',
    ],
    ['pendingIndex', 'partial index (id) where sent_at is null and retired_at is null (pending)'],
    ['claimIndex', "partial index (next_attempt_at, id) where is_head (the drainer's claim)"],
  ] as const)('names a dropped %s', async (index, gap) => {
    const spec = await freshOutbox();
    await run(`drop index "${spec.schema}"."${tableNames(spec)[index]}"`);
    expect(await missing(spec)).toEqual([gap]);
  });

  test.each([
    ['without the retired_at condition', 'pendingIndex', '(id) where sent_at is null'],
    [
      'narrower than pending',
      'pendingIndex',
      '(id) where sent_at is null and retired_at is null and attempt_count < 10',
    ],
    ['or-ed instead of and-ed', 'pendingIndex', '(id) where sent_at is null or retired_at is null'],
    ['not partial', 'partitionHeadIndex', '(resource_id, id)'],
    [
      'on the columns in the other order',
      'partitionHeadIndex',
      '(id, resource_id) where sent_at is null and retired_at is null',
    ],
    ['over every row, not only heads', 'claimIndex', '(next_attempt_at, id)'],
  ] as const)('names an index that is %s', async (_what, index, definition) => {
    const spec = await freshOutbox();
    const names = tableNames(spec);
    await run(`drop index "${spec.schema}"."${names[index]}"`);
    await run(`create index "${names[index]}" on ${names.table} ${definition}`);
    const gaps = await missing(spec);
    expect(gaps).toHaveLength(1);
    expect(gaps[0]).toMatch(/^partial index/);
  });

  test('accepts the pending predicate written in the other order', async () => {
    const spec = await freshOutbox();
    const names = tableNames(spec);
    await run(`drop index "${spec.schema}"."${names.pendingIndex}"`);
    await run(
      `create index "${names.pendingIndex}" on ${names.table} (id) where retired_at is null and sent_at is null`,
    );
    await expect(verifyOutboxTable(t.db, spec)).resolves.toBeUndefined();
  });

  describe('the NOTIFY trigger', () => {
    test('names a dropped trigger', async () => {
      const spec = await freshOutbox();
      const names = tableNames(spec);
      await run(`drop trigger "${names.notifyTrigger}" on ${names.table}`);
      expect(await missing(spec)).toEqual([triggerGap(spec)]);
    });

    test('names a disabled trigger', async () => {
      const spec = await freshOutbox();
      const names = tableNames(spec);
      await run(`alter table ${names.table} disable trigger "${names.notifyTrigger}"`);
      expect(await missing(spec)).toEqual([triggerGap(spec)]);
    });

    test.each([
      ['row-level (one notification per row)', 'after insert', 'for each row'],
      ['BEFORE insert', 'before insert', 'for each statement'],
      ['on UPDATE, not INSERT', 'after update', 'for each statement'],
    ])('names a trigger that is %s', async (_what, when, level) => {
      const spec = await freshOutbox();
      const names = tableNames(spec);
      await run(`drop trigger "${names.notifyTrigger}" on ${names.table}`);
      await run(
        `create trigger "${names.notifyTrigger}" ${when} on ${names.table} ${level} execute function ${names.notifyFunction}()`,
      );
      expect(await missing(spec)).toEqual([triggerGap(spec)]);
    });
  });

  describe('columns', () => {
    test.each([
      'id',
      'resource_id',
      'payload',
      'created_at',
      'next_attempt_at',
      'attempt_count',
      'last_error',
      'sent_at',
      'retired_at',
      'retired_reason',
      'is_head',
    ])('names a dropped column %s', async (column) => {
      const spec = await freshOutbox();
      await run(`alter table ${tableNames(spec).table} drop column "${column}" cascade`);
      const gaps = await missing(spec);
      expect(gaps.some((g) => g.startsWith(`column ${column} `))).toBe(true);
    });

    test('lists every gap at once', async () => {
      const spec = await freshOutbox();
      const names = tableNames(spec);
      await run(`alter table ${names.table} drop column is_head, drop column last_error`);
      await run(`drop trigger "${names.notifyTrigger}" on ${names.table}`);
      const gaps = await missing(spec);
      expect(gaps).toEqual([
        'column last_error text',
        'column is_head boolean',
        "partial index (next_attempt_at, id) where is_head (the drainer's claim)",
        triggerGap(spec),
      ]);
      const message = new OutboxTableError(spec.table, gaps).message;
      for (const g of gaps) expect(message).toContain(g);
    });

    test.each([
      ['attempt_count', 'bigint', 'integer'],
      ['payload', 'json', 'jsonb'],
      ['sent_at', 'timestamp without time zone', 'timestamp with time zone'],
      ['resource_id', 'character varying(100)', 'text'],
    ])('names column %s of type %s', async (column, wrongType, rightType) => {
      const spec = await freshOutbox();
      await run(`alter table ${tableNames(spec).table} alter column "${column}" type ${wrongType}`);
      expect(await missing(spec)).toEqual([`column ${column} should be ${rightType}, is ${wrongType}`]);
    });
  });

  test('a hand-made table lacking the drainer’s pieces is refused with each of them', async () => {
    await run(`create table verify.hand_made (
      id bigint generated always as identity primary key, resource_id text not null, payload jsonb not null,
      created_at timestamptz not null default now(), next_attempt_at timestamptz not null default now(),
      attempt_count integer not null default 0, last_error text, sent_at timestamptz,
      retired_at timestamptz, retired_reason text)`);
    const spec = defineOutbox({ table: 'verify.hand_made', partitionColumn: 'resource_id' });
    expect(await missing(spec)).toEqual([
      'column is_head boolean',
      'column poison_cause text',
      'column poison_code text',
      'column revival_count integer',
      'column revive_after timestamp with time zone',
      'column revive_requested boolean',
      'column closed_as text',
      'column verify_after timestamp with time zone',
      'partial index (resource_id, id) where sent_at is null and retired_at is null (partition head)',
      'partial index (id) where sent_at is null and retired_at is null (pending)',
      "partial index (next_attempt_at, id) where is_head (the drainer's claim)",
      'partial index (verify_after) where verify_after is not null (late-write verification)',
      "partial index (resource_id, id) where sent_at is not null (delivered rows: compaction, the reconciler's successor look-up)",
      "statement-level AFTER INSERT trigger calling pg_notify('verify_hand_made', '')",
      "function verify.hand_made_claim (the drainer's claim; created by createOutboxTable or createDrainFunctions)",
      "function verify.hand_made_settle (the drainer's settle; created by createOutboxTable or createDrainFunctions)",
      'function verify.hand_made_enqueue (enqueue; created by createOutboxTable or createDrainFunctions)',
      'table verify.hand_made_actions (the actions log; created by createOutboxTable or the outboxMigrations step 0007_actions_log_v1)',
    ]);
  });

  test('names a missing actions log, a column of it of another type, and a log made for another table', async () => {
    const spec = await freshOutbox();
    const log = tableNames(spec).actionsTable;
    await run(`alter table ${log} alter column reason type varchar(200)`);
    expect(await missing(spec)).toEqual([
      `column reason of ${spec.table}_actions should be text, is character varying(200)`,
    ]);
    await run(`alter table ${log} alter column reason type text, drop column actor`);
    expect(await missing(spec)).toEqual([`column actor text of ${spec.table}_actions (the actions log)`]);
    await run(`drop table ${log}`);
    expect(await missing(spec)).toEqual([
      `table ${spec.table}_actions (the actions log; created by createOutboxTable or the outboxMigrations step 0007_actions_log_v1)`,
    ]);
    // A table of that name that is another outbox's log (copied by hand, say): its comment says whose it is.
    const other = await freshOutbox();
    await run(`create table ${log} (like ${tableNames(other).actionsTable} including all)`);
    await run(`comment on table ${log} is 'operator actions (@outbox/outbox actions log v1 ${other.table})'`);
    expect(await missing(spec)).toEqual([
      `table ${spec.table}_actions is not the actions log this release creates for this spec (expected "(@outbox/outbox actions log v1 ${spec.table})" in its comment)`,
    ]);
  });
});
