import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { defineOutbox, type OutboxSpec } from './define-outbox.js';
import { setMaxAttempts } from './max-attempts.js';
import { createOutboxTable } from './schema/migration.js';
import { outboxStats, outboxStatsQuery } from './stats.js';
import { tableNames } from './table-names.js';
import { freshOutboxes } from './testing/outbox-tables.js';

const t = useTestDatabase();

/** The states of docs/design.md §2, written out as direct SQL (not with row-states.ts: an independent oracle). */
type State = 'deliverable' | 'backing-off' | 'delivered' | 'poisoned' | 'retired';

interface Seed {
  readonly key: string;
  readonly state: State;
  readonly relations?: readonly string[];
  readonly ageSeconds?: number;
  readonly cause?: 'exhausted' | 'refused';
  readonly closedAs?: 'retired' | 'discarded';
}

/** Inserts `seeds` in order (so ids follow the array) and sets each one's state. */
async function seed(spec: OutboxSpec, seeds: readonly Seed[]): Promise<void> {
  const table = sql.raw(`"${spec.schema}"."${spec.tableName}"`);
  const column = sql.raw(`"${spec.partitionColumn}"`);
  for (const row of seeds) {
    const payload = JSON.stringify({
      writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }],
      relations: row.relations ?? [],
    });
    const max = spec.maxAttempts;
    await sql`
      insert into ${table} (${column}, payload, created_at, attempt_count, next_attempt_at, sent_at, retired_at, retired_reason, poison_cause, closed_as)
      values (
        ${row.key}, ${payload}::jsonb, now() - make_interval(secs => ${row.ageSeconds ?? 0}),
        ${row.state === 'poisoned' || row.state === 'retired' ? max : row.state === 'backing-off' ? 2 : 0},
        now() + ${row.state === 'backing-off' ? sql`interval '1 hour'` : sql`interval '0'`},
        ${row.state === 'delivered' ? sql`now()` : null},
        ${row.state === 'retired' ? sql`now()` : null},
        ${row.state === 'retired' ? 'superseded by a later delivery' : null},
        ${row.cause ?? null}, ${row.closedAs ?? null}
      )`.execute(t.db);
  }
}

describe('outboxStats', () => {
  test('an empty outbox counts nothing and has no oldest pending age', async () => {
    const spec = defineOutbox({ table: 'stats.empty_outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    expect(await outboxStats(t.db, spec)).toEqual({
      pending: 0,
      deliverable: 0,
      poisoned: 0,
      poisonedByCause: { exhausted: 0, refused: 0 },
      superseded: 0,
      retired: 0,
      discarded: 0,
      oldestPendingAgeSeconds: null,
    });
  });

  test('counts delivered, pending, poisoned, superseded and retired rows by docs/design.md §2', async () => {
    const spec = defineOutbox({ table: 'stats.register_outbox', partitionColumn: 'resource_id', maxAttempts: 5 });
    await createOutboxTable(t.db, spec);
    await seed(spec, [
      // a: poisoned, then a later row of its partition was delivered: superseded.
      { key: 'vpc:a', state: 'poisoned', ageSeconds: 300 },
      { key: 'vpc:a', state: 'delivered' },
      // b: the delivered row came BEFORE the poisoned one: poisoned, not superseded.
      { key: 'vpc:b', state: 'delivered' },
      { key: 'vpc:b', state: 'poisoned', ageSeconds: 90 },
      // c: poisoned; the later delivered row is of another partition: not superseded.
      { key: 'vpc:c', state: 'poisoned' },
      { key: 'vpc:other', state: 'delivered' },
      // d: a superseded row a human retired: retired only, not pending, poisoned or superseded.
      { key: 'vpc:d', state: 'retired', ageSeconds: 3_600 },
      { key: 'vpc:d', state: 'delivered' },
      // e: deliverable now, and deliverable but backing off (after a transient failure).
      { key: 'vpc:e', state: 'deliverable', ageSeconds: 120 },
      { key: 'vpc:f', state: 'backing-off', ageSeconds: 60 },
      // g: poisoned behind a still-pending later row: nothing delivered after it.
      { key: 'vpc:g', state: 'poisoned' },
      { key: 'vpc:g', state: 'deliverable' },
      // Delivered rows, however many, are no state of their own in the stats.
      { key: 'vpc:h', state: 'delivered', ageSeconds: 7_200 },
    ]);
    // An attempt count past maxAttempts is poisoned too.
    await sql`update stats.register_outbox set attempt_count = 9 where resource_id = 'vpc:c'`.execute(t.db);

    const stats = await outboxStats(t.db, spec);
    expect(stats).toEqual({
      pending: 7, // a, b, c, e, f, g×2
      deliverable: 3, // e, f, g's second row
      poisoned: 4, // a, b, c, g's first row
      poisonedByCause: { exhausted: 4, refused: 0 }, // no cause recorded: read as exhausted
      superseded: 1, // a
      retired: 1, // d
      discarded: 0,
      oldestPendingAgeSeconds: expect.any(Number),
    });
    // The oldest pending row is a's (300 s); d's (3600 s) is retired and h's (7200 s) delivered.
    expect(stats.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(300);
    expect(stats.oldestPendingAgeSeconds).toBeLessThan(330);
  });

  test('poisoned rows by cause (none recorded: exhausted), and discarded rows apart from retired ones', async () => {
    const spec = defineOutbox({ table: 'stats.cause_outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    await seed(spec, [
      { key: 'vpc:a', state: 'poisoned', cause: 'refused' },
      { key: 'vpc:b', state: 'poisoned', cause: 'exhausted' },
      { key: 'vpc:c', state: 'poisoned' },
      { key: 'vpc:d', state: 'retired', closedAs: 'discarded', cause: 'refused' },
      { key: 'vpc:e', state: 'retired', closedAs: 'retired' },
      { key: 'vpc:f', state: 'retired' },
    ]);
    expect(await outboxStats(t.db, spec)).toMatchObject({
      poisoned: 3,
      poisonedByCause: { exhausted: 2, refused: 1 },
      retired: 2,
      discarded: 1,
    });
  });

  test("counts with the maxAttempts the table records (its drainers' value), whatever the caller's spec says; with none recorded, the spec's", async () => {
    const lenient = defineOutbox({ table: 'stats.threshold_outbox', partitionColumn: 'resource_id' });
    const strict = defineOutbox({ table: 'stats.threshold_outbox', partitionColumn: 'resource_id', maxAttempts: 3 });
    await createOutboxTable(t.db, lenient);
    await seed(lenient, [{ key: 'vpc:a', state: 'deliverable' }]);
    await sql`update stats.threshold_outbox set attempt_count = 3`.execute(t.db);
    // The table records 10: attempt_count 3 is deliverable, also for a caller still holding the strict spec.
    expect(await outboxStats(t.db, lenient)).toMatchObject({ pending: 1, deliverable: 1, poisoned: 0 });
    expect(await outboxStats(t.db, strict)).toMatchObject({ pending: 1, deliverable: 1, poisoned: 0 });
    // After setMaxAttempts(strict) the table records 3 (the row, one attempt left, is set to 2); a drainer of the
    // new spec then poisons it: a dashboard still on the old spec must see it poisoned.
    expect(await setMaxAttempts(t.db, strict)).toMatchObject({ from: 10, to: 3, adjusted: 1 });
    await sql`update stats.threshold_outbox set attempt_count = 3`.execute(t.db);
    expect(await outboxStats(t.db, lenient)).toMatchObject({ pending: 1, deliverable: 0, poisoned: 1 });
    // A table that records none (an earlier release's): the spec's value.
    await sql`comment on column stats.threshold_outbox.attempt_count is null`.execute(t.db);
    expect(await outboxStats(t.db, lenient)).toMatchObject({ pending: 1, deliverable: 1, poisoned: 0 });
    expect(await outboxStats(t.db, strict)).toMatchObject({ pending: 1, deliverable: 0, poisoned: 1 });
  });

  test('with coverage SQL, only a successor that covers the poisoned row supersedes it', async () => {
    const spec = defineOutbox({
      table: 'stats.tuple_outbox',
      partitionColumn: 'tuple_key',
      supersededCoverageSql: "(s.payload->'relations') @> (t.payload->'relations')",
    });
    await createOutboxTable(t.db, spec);
    await seed(spec, [
      // Covered: the later delivery re-determined viewer and editor (and more).
      { key: 'user:anne|vpc:v1', state: 'poisoned', relations: ['viewer', 'editor'] },
      { key: 'user:anne|vpc:v1', state: 'delivered', relations: ['viewer', 'editor', 'owner'] },
      // Not covered: the later delivery said nothing about editor.
      { key: 'user:bob|vpc:v1', state: 'poisoned', relations: ['viewer', 'editor'] },
      { key: 'user:bob|vpc:v1', state: 'delivered', relations: ['viewer'] },
    ]);
    expect(await outboxStats(t.db, spec)).toMatchObject({ poisoned: 2, superseded: 1 });

    const plain = defineOutbox({ table: 'stats.tuple_outbox', partitionColumn: 'tuple_key' });
    expect(await outboxStats(t.db, plain)).toMatchObject({ poisoned: 2, superseded: 2 });

    // A row without the field the coverage reads (an earlier build's, or written by hand): the
    // fragment is NULL, and the pair falls back to the plain rule, as the reconciler decides it.
    await seed(spec, [
      { key: 'user:cid|vpc:v1', state: 'poisoned' },
      { key: 'user:cid|vpc:v1', state: 'delivered', relations: ['viewer'] },
    ]);
    await sql`update stats.tuple_outbox set payload = payload - 'relations' where tuple_key = 'user:cid|vpc:v1' and sent_at is null`.execute(
      t.db,
    );
    expect(await outboxStats(t.db, spec)).toMatchObject({ poisoned: 3, superseded: 2 });
  });

  test('empty-key rows group together: a delivered empty-key row supersedes an earlier poisoned one', async () => {
    const spec = defineOutbox({ table: 'stats.empty_key_outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    await seed(spec, [
      { key: '', state: 'poisoned' },
      { key: '', state: 'delivered' },
    ]);
    expect(await outboxStats(t.db, spec)).toMatchObject({ poisoned: 1, superseded: 1 });
  });
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function planNodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(planNodes)];
}

describe('the outboxStats plan on a large table', () => {
  test('reads pending rows through the partial pending index and never scans the 200k delivered rows', async () => {
    const spec = defineOutbox({ table: 'stats.big_outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    await sql`
      insert into stats.big_outbox (resource_id, payload, sent_at)
      select 'vpc:' || (g % 20000), '{"writes":[{"user":"project:p1","relation":"project","object":"vpc:v1"}]}', now()
      from generate_series(1, 200000) g`.execute(t.db);
    await seed(spec, [
      { key: 'vpc:1', state: 'poisoned' },
      { key: 'vpc:2', state: 'poisoned' },
      { key: 'vpc:2', state: 'delivered' },
      { key: 'vpc:3', state: 'deliverable' },
      { key: 'vpc:4', state: 'backing-off' },
      { key: 'vpc:5', state: 'retired' },
    ]);
    await sql`analyze stats.big_outbox`.execute(t.db);

    const query = outboxStatsQuery(spec).compile(t.db);
    const pool = t.pool({ max: 1 });
    const explained = await pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`explain (format json) ${query.sql}`, [
      ...query.parameters,
    ]);
    const nodes = planNodes(explained.rows[0]!['QUERY PLAN'][0].Plan);
    const described = nodes.map((n) => `${n['Node Type']} ${n['Index Name'] ?? n['Relation Name'] ?? ''}`).join('\n');

    expect(
      nodes.some((n) => n['Index Name'] === 'big_outbox_pending_idx'),
      described,
    ).toBe(true);
    expect(
      nodes.filter((n) => n['Node Type'] === 'Seq Scan' && n['Relation Name'] === 'big_outbox'),
      described,
    ).toEqual([]);
    // And the numbers are right on the big table too.
    expect(await outboxStats(t.db, spec)).toMatchObject({
      pending: 4,
      deliverable: 2,
      poisoned: 2,
      superseded: 1,
      retired: 1,
    });
  });
});

const fresh = freshOutboxes(t, 'stats_cost');
const run = (text: string) => sql.raw(text).execute(t.db);

describe('outboxStats: bounded by one pass, not one pass per poisoned row', () => {
  test('100 old poisoned rows before 200k delivered rows: the table is read about once', async () => {
    const spec = await fresh();
    const names = tableNames(spec);
    await run(
      `insert into ${names.table} (resource_id, payload, attempt_count) select 'vpc:p' || g, '{}', 10 from generate_series(1, 100) g`,
    );
    await run(`insert into ${names.table} (resource_id, payload, attempt_count) values ('vpc:p1', '{}', 10)`);
    await run(
      `insert into ${names.table} (resource_id, payload, sent_at) select 'vpc:' || (g % 20000), '{}', now() from generate_series(1, 200000) g`,
    );
    await run(`insert into ${names.table} (resource_id, payload, sent_at) values ('vpc:p2', '{}', now())`);
    await run(`analyze ${names.table}`);
    const pages = await sql<{ pages: number }>`
      select (pg_relation_size(${`"${spec.schema}"."${spec.tableName}"`}) / 8192)::int as pages`.execute(t.db);
    const query = outboxStatsQuery(spec).compile(t.db);
    const pool = t.pool({ max: 1 });
    const explained = await pool.query<{
      'QUERY PLAN': [{ Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number } }];
    }>(`explain (analyze, buffers, format json) ${query.sql}`, [...query.parameters]);
    const plan = explained.rows[0]!['QUERY PLAN'][0].Plan;
    const blocks = plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
    // Before: every poisoned row walked the 200k rows after it (~3k blocks each, ~300k in all, 4 s).
    expect(blocks).toBeLessThan(4 * pages.rows[0]!.pages);
    // vpc:p2's poisoned row has a delivered successor; vpc:p1's second poisoned row (id 101) has
    // none after it: the delivered 'vpc:1' rows are another partition.
    expect(await outboxStats(t.db, spec)).toMatchObject({ pending: 101, poisoned: 101, deliverable: 0, superseded: 1 });
  });
});
