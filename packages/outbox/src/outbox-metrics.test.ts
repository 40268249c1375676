import { setTimeout as sleep } from 'node:timers/promises';
import { metrics } from '@opentelemetry/api';
import { pointsOf, pointValue, testMeterProvider } from '@outbox/test-observability';
import { useTestDatabase } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, test } from 'vitest';
import manifest from '../package.json' with { type: 'json' };
import { OUTBOX_ACTIONS } from './schema/actions-log-ddl.js';
import { recordOutboxAction } from './actions-log.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError } from './errors.js';
import { observeOutbox, outboxGaugesQuery } from './outbox-metrics.js';
import { outboxStatsQuery } from './stats.js';
import { tableNames } from './table-names.js';
import { freshOutboxes } from './testing/outbox-tables.js';

const t = useTestDatabase();
const fresh = freshOutboxes(t, 'outbox_metrics');
const sdk = testMeterProvider();
afterEach(() => metrics.disable());

/** A Kysely on its own pool that counts the statements it runs (the observer's queries). */
function countingDb() {
  const statements: string[] = [];
  const db = new Kysely<unknown>({
    dialect: new PostgresDialect({ pool: t.pool({ max: 2 }) }),
    log: (event) => void statements.push(event.query.sql),
  });
  return { db, statements };
}

type State = 'deliverable' | 'backing-off' | 'delivered' | 'poisoned' | 'refused';

/** Inserts one row per entry, in order (ids follow the list), in the state given, created `ageSeconds` ago; `poisoned` with no recorded cause, `refused` poisoned as refused. */
async function seed(
  spec: OutboxSpec,
  rows: ReadonlyArray<{ key: string; state: State; ageSeconds?: number }>,
): Promise<void> {
  const table = sql.raw(tableNames(spec).table);
  for (const row of rows) {
    await sql`
      insert into ${table} (resource_id, payload, created_at, attempt_count, next_attempt_at, sent_at, poison_cause)
      values (${row.key}, '{"writes":[{"user":"user:a","relation":"owner","object":"vpc:a"}]}',
        now() - make_interval(secs => ${row.ageSeconds ?? 0}),
        ${row.state === 'poisoned' || row.state === 'refused' ? spec.maxAttempts : row.state === 'backing-off' ? 1 : 0},
        now() + ${row.state === 'backing-off' ? sql`interval '1 hour'` : sql`interval '0'`},
        ${row.state === 'delivered' ? sql`now()` : null}, ${row.state === 'refused' ? 'refused' : null})`.execute(t.db);
  }
}

const gauge = (name: string) => `outbox.intent.${name}`;

describe('observeOutbox', () => {
  test("reports each state of the table as a gauge with the table's name as outbox.table, from one query per collection", async () => {
    const spec = await fresh({ maxAttempts: 3 });
    await seed(spec, [
      { key: 'vpc:a', state: 'poisoned', ageSeconds: 300 }, // superseded by the next row
      { key: 'vpc:a', state: 'delivered' },
      { key: 'vpc:b', state: 'deliverable', ageSeconds: 120 },
      { key: 'vpc:c', state: 'backing-off', ageSeconds: 200 }, // older, but a later id: not the first deliverable row
      { key: 'vpc:d', state: 'refused', ageSeconds: 30 },
      { key: 'vpc:e', state: 'delivered', ageSeconds: 7_200 }, // delivered rows count nowhere
    ]);
    const { db, statements } = countingDb();
    const observer = observeOutbox({ db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 0 });
    try {
      const points = await sdk.collect();
      const table = { 'outbox.table': spec.table };
      expect(statements).toHaveLength(1);
      expect(pointValue(points, gauge('pending'), table)).toBe(4);
      expect(pointValue(points, gauge('deliverable'), table)).toBe(2);
      // By cause: vpc:a's row has none recorded (poisoned before the column existed), counted as exhausted.
      expect(pointValue(points, gauge('poisoned'), { ...table, 'outbox.poison.cause': 'exhausted' })).toBe(1);
      expect(pointValue(points, gauge('poisoned'), { ...table, 'outbox.poison.cause': 'refused' })).toBe(1);
      expect(pointsOf(points, gauge('poisoned'), table)).toHaveLength(2); // no total beside the causes: sum them
      expect(pointValue(points, gauge('superseded'), table)).toBe(1);
      expect(pointValue(points, gauge('oldest_pending_age'), table)).toBeGreaterThanOrEqual(300);
      expect(pointValue(points, gauge('oldest_pending_age'), table)).toBeLessThan(330);
      // The age of the deliverable row with the smallest id (docs/metrics.md).
      expect(pointValue(points, gauge('oldest_deliverable_age'), table)).toBeGreaterThanOrEqual(120);
      expect(pointValue(points, gauge('oldest_deliverable_age'), table)).toBeLessThan(150);
      const mine = pointsOf(points, gauge('pending'), table)[0];
      expect(mine).toMatchObject({ scope: '@outbox/outbox', kind: 'gauge', unit: '{intent}' });
      expect(pointsOf(points, gauge('oldest_pending_age'), table)[0]).toMatchObject({ kind: 'gauge', unit: 's' });
    } finally {
      observer.stop();
      await db.destroy();
    }
  });

  test('an empty outbox reports zero counts and zero ages (nothing waits)', async () => {
    const spec = await fresh();
    const observer = observeOutbox({ db: t.db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 0 });
    try {
      const points = await sdk.collect();
      const table = { 'outbox.table': spec.table };
      const names = ['pending', 'deliverable', 'superseded', 'oldest_pending_age', 'oldest_deliverable_age'].map(gauge);
      expect(names.map((name) => pointValue(points, name, table))).toEqual([0, 0, 0, 0, 0]);
      const causes = ['exhausted', 'refused'].map((cause) =>
        pointValue(points, gauge('poisoned'), { ...table, 'outbox.poison.cause': cause }),
      );
      expect(causes).toEqual([0, 0]);
    } finally {
      observer.stop();
    }
  });

  test('outbox.database.oldest_xmin_age is the age of the oldest transaction holding a snapshot in the database, in the same one query', async () => {
    const spec = await fresh();
    const { db, statements } = countingDb();
    const observer = observeOutbox({ db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 0 });
    const xminAge = async () =>
      pointValue(await sdk.collect(), 'outbox.database.oldest_xmin_age', { 'outbox.table': spec.table }) ?? NaN;
    const holder = new pg.Client({ connectionString: t.url, application_name: 'stuck-report' });
    await holder.connect();
    try {
      // Idle in transaction with a snapshot, as a forgotten REPEATABLE READ report would be.
      await holder.query('begin isolation level repeatable read');
      await holder.query('select 1');
      await sleep(2_100);
      const held = await xminAge();
      expect(held).toBeGreaterThanOrEqual(2);
      expect(held).toBeLessThan(30);
      expect(statements).toHaveLength(1);
      await sleep(1_000);
      expect(await xminAge()).toBeGreaterThanOrEqual(held + 1); // it grows while the transaction stays open
      const points = await sdk.collect();
      expect(pointsOf(points, 'outbox.database.oldest_xmin_age', { 'outbox.table': spec.table })[0]).toMatchObject({
        scope: '@outbox/outbox',
        kind: 'gauge',
        unit: 's',
      });
      // Ended: nothing of that age is left (0 unless another test's transaction is open at that moment).
      await holder.query('rollback');
      expect(await xminAge()).toBeLessThan(held);
    } finally {
      await holder.end();
      observer.stop();
      await db.destroy();
    }
  });

  test('outbox.actions counts the actions log by action, every action reported (0 included), in the same one query', async () => {
    const spec = await fresh();
    const record = (action: 'discard' | 'redrive', reason?: string) =>
      recordOutboxAction(t.db, spec, { actor: 'alice', action, ids: ['1'], ...(reason ? { reason } : {}) });
    await record('discard', 'not wanted');
    await record('discard', 'not wanted either');
    await record('redrive');
    const { db, statements } = countingDb();
    const observer = observeOutbox({ db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 0 });
    try {
      const points = await sdk.collect();
      const of = (action: string) => ({ 'outbox.table': spec.table, 'outbox.action': action });
      expect(OUTBOX_ACTIONS.map((action) => [action, pointValue(points, 'outbox.actions', of(action))])).toEqual([
        ['redrive', 1],
        ['retire', 0],
        ['discard', 2],
        ['repair', 0],
        ['compact', 0],
      ]);
      expect(pointsOf(points, 'outbox.actions', of('discard'))[0]).toMatchObject({
        scope: '@outbox/outbox',
        kind: 'counter',
        unit: '{action}',
      });
      expect(statements).toHaveLength(1);
      // Written by another process or connection: the next collection reads it.
      await record('discard', 'a third');
      expect(pointValue(await sdk.collect(), 'outbox.actions', of('discard'))).toBe(3);
    } finally {
      observer.stop();
      await db.destroy();
    }
  });

  test('a scrape storm costs one query: collections at once and within minIntervalMs share one read; the next after it reads again', async () => {
    const spec = await fresh();
    await seed(spec, [{ key: 'vpc:a', state: 'deliverable' }]);
    const { db, statements } = countingDb();
    const observer = observeOutbox({ db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 500 });
    const deliverable = async () =>
      pointValue(await sdk.collect(), gauge('deliverable'), { 'outbox.table': spec.table });
    try {
      expect(await Promise.all(Array.from({ length: 5 }, deliverable))).toEqual([1, 1, 1, 1, 1]);
      await seed(spec, [{ key: 'vpc:b', state: 'deliverable' }]);
      expect(await deliverable()).toBe(1); // the cached read
      expect(statements).toHaveLength(1);
      await sleep(600);
      expect(await deliverable()).toBe(2);
      expect(statements).toHaveLength(2);
    } finally {
      observer.stop();
      await db.destroy();
    }
  });

  test('two outboxes on one meter provider report under their own outbox.table', async () => {
    const first = await fresh();
    const second = await fresh();
    await seed(first, [{ key: 'vpc:a', state: 'deliverable' }]);
    await seed(second, [
      { key: 'vpc:a', state: 'poisoned' },
      { key: 'vpc:b', state: 'poisoned' },
    ]);
    const observers = [first, second].map((spec) =>
      observeOutbox({ db: t.db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 0 }),
    );
    try {
      const points = await sdk.collect();
      expect(pointValue(points, gauge('deliverable'), { 'outbox.table': first.table })).toBe(1);
      expect(
        pointValue(points, gauge('poisoned'), { 'outbox.table': first.table, 'outbox.poison.cause': 'exhausted' }),
      ).toBe(0);
      expect(pointValue(points, gauge('deliverable'), { 'outbox.table': second.table })).toBe(0);
      expect(
        pointValue(points, gauge('poisoned'), { 'outbox.table': second.table, 'outbox.poison.cause': 'exhausted' }),
      ).toBe(2);
    } finally {
      for (const observer of observers) observer.stop();
    }
  });

  test('after stop(), collections no longer read the table', async () => {
    const spec = await fresh();
    const { db, statements } = countingDb();
    const observer = observeOutbox({ db, spec, meterProvider: sdk.meterProvider, minIntervalMs: 0 });
    const pending = async () => pointValue(await sdk.collect(), gauge('pending'), { 'outbox.table': spec.table });
    try {
      expect(await pending()).toBe(0);
      observer.stop();
      await seed(spec, [{ key: 'vpc:a', state: 'deliverable' }]);
      // The JS SDK goes on exporting the last value it was given (opentelemetry-js#4096): never a new one.
      expect(await pending()).not.toBe(1);
      expect(statements).toHaveLength(1);
    } finally {
      await db.destroy();
    }
  });

  test('a read that fails observes nothing and warns; the next collection reads again', async () => {
    const spec = await fresh();
    const warnings: unknown[] = [];
    const observer = observeOutbox({
      db: t.db,
      spec,
      meterProvider: sdk.meterProvider,
      minIntervalMs: 0,
      logger: { warn: (message, fields) => void warnings.push({ message, fields }) },
    });
    try {
      await sql.raw(`alter table ${tableNames(spec).table} rename to gone`).execute(t.db);
      expect(pointsOf(await sdk.collect(), gauge('pending'), { 'outbox.table': spec.table })).toEqual([]);
      expect(warnings).toEqual([
        {
          message: `reading ${spec.table} for its gauges failed`,
          fields: {
            table: spec.table,
            error: expect.objectContaining({ message: expect.stringMatching(/does not exist/) }),
          },
        },
      ]);
      await sql.raw(`alter table "${spec.schema}".gone rename to "${spec.tableName}"`).execute(t.db);
      expect(pointValue(await sdk.collect(), gauge('pending'), { 'outbox.table': spec.table })).toBe(0);
      expect(warnings).toHaveLength(1);
    } finally {
      observer.stop();
    }
  });

  test('with neither meter nor meterProvider it reports through the global provider, as named and versioned by the package', async () => {
    const spec = await fresh();
    metrics.setGlobalMeterProvider(sdk.meterProvider);
    const observer = observeOutbox({ db: t.db, spec, minIntervalMs: 0 });
    try {
      const points = pointsOf(await sdk.collect(), gauge('pending'), { 'outbox.table': spec.table });
      expect(points.map((p) => p.scope)).toEqual(['@outbox/outbox']);
      expect(manifest.name).toBe('@outbox/outbox');
    } finally {
      observer.stop();
    }
  });

  test('a bad option is an OutboxConfigError naming it', async () => {
    const spec = await fresh();
    // @ts-expect-error not a Meter
    expect(() => observeOutbox({ db: t.db, spec, meter: {} })).toThrow(
      new OutboxConfigError('meter', 'expected an OpenTelemetry Meter'),
    );
    // @ts-expect-error not a MeterProvider
    expect(() => observeOutbox({ db: t.db, spec, meterProvider: 'global' })).toThrow(OutboxConfigError);
    expect(() => observeOutbox({ db: t.db, spec, minIntervalMs: -1 })).toThrow(/minIntervalMs/);
    // @ts-expect-error no spec
    expect(() => observeOutbox({ db: t.db })).toThrow(/spec/);
  });
});

describe('the gauges query on a large table', () => {
  test("costs little more than outboxStats': the oldest deliverable row is found behind the poisoned rows, not by a walk of the backlog", async () => {
    const spec = await fresh();
    const names = tableNames(spec);
    const run = (text: string) => sql.raw(text).execute(t.db);
    await run(
      `insert into ${names.table} (resource_id, payload, sent_at) select 'vpc:' || (g % 20000), '{}', now() from generate_series(1, 200000) g`,
    );
    await run(
      `insert into ${names.table} (resource_id, payload, attempt_count) select 'vpc:p' || g, '{}', 10 from generate_series(1, 50) g`,
    );
    await run(
      `insert into ${names.table} (resource_id, payload) select 'vpc:d' || g, '{}' from generate_series(1, 20000) g`,
    );
    await run(`analyze ${names.table}`);
    const pool = t.pool({ max: 1 });
    const blocks = async (query: { compile(db: typeof t.db): { sql: string; parameters: readonly unknown[] } }) => {
      const compiled = query.compile(t.db);
      const explained = await pool.query<{
        'QUERY PLAN': [{ Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number } }];
      }>(`explain (analyze, buffers, format json) ${compiled.sql}`, [...compiled.parameters]);
      const plan = explained.rows[0]!['QUERY PLAN'][0].Plan;
      return plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
    };
    const stats = await blocks(outboxStatsQuery(spec));
    const gauges = await blocks(outboxGaugesQuery(spec));
    // Walking the 20k deliverable rows again would cost about as many blocks as outboxStats reads for them.
    expect(gauges - stats).toBeLessThan(30);
    const row = (await outboxGaugesQuery(spec).execute(t.db)).rows[0];
    expect(row).toMatchObject({
      deliverable: '20000',
      poisoned: '50',
      oldest_deliverable_age_seconds: expect.any(String),
    });
  });
});
