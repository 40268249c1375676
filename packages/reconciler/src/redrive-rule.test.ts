import { sql } from 'kysely';
import type { OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import { partitionIndexPresent } from './partition-index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  headViolations,
  heads,
  poison,
  readRow,
  readRows,
  recordingLogger,
  register,
} from './testing/outbox-fixture.js';

// The redrive rule (docs/design.md §6): revive what no delivered successor supersedes, report the rest.
const t = useTestDatabase();

const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

/** The heads a drainer's claim would read (it claims only heads, due first). */
async function claimable(spec: OutboxSpec): Promise<string[]> {
  const names = tableNames(spec);
  const result = await sql<{ id: string }>`
    select id::text as id from ${sql.raw(names.table)}
    where is_head and next_attempt_at <= now() and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}
    order by id`.execute(t.db);
  return ids(result.rows);
}

// The delivered-successor check is written differently with the optional (partition, id) btree.
describe.each([{ partitionIndex: false }, { partitionIndex: true }])(
  'redrivePoisoned (partitionIndex: $partitionIndex)',
  ({ partitionIndex }) => {
    test('revives a poisoned row with no delivered successor and makes it the head again', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const earlier = await enqueueIntent(t.db, spec, 'vpc:a', register('a'));
      await deliver(t.db, spec, earlier); // a delivered predecessor does not supersede anything
      const stuck = await enqueueIntent(t.db, spec, 'vpc:a', deregister('a'));
      const next = await enqueueIntent(t.db, spec, 'vpc:a', register('a'));
      const last = await enqueueIntent(t.db, spec, 'vpc:a', deregister('a'));
      await poison(t.db, spec, stuck, 'OpenFGA unreachable');
      expect(await heads(t.db, spec)).toEqual([next]); // the drainer moved on past the poisoned row

      const logger = recordingLogger();
      const result = await createReconciler({ db: t.db, spec, logger }).redrivePoisoned();

      expect(result).toEqual({
        revived: [{ id: stuck, partitionKey: 'vpc:a', lastError: 'OpenFGA unreachable' }],
        superseded: [],
        deferred: [],
        skipped: false,
        more: false,
        moreSuperseded: false,
      });
      expect(await readRow(t.db, spec, stuck)).toMatchObject({
        attempt_count: 0,
        last_error: null,
        is_head: true,
        due: true,
      });
      expect(await readRow(t.db, spec, next)).toMatchObject({ is_head: false });
      expect(await readRow(t.db, spec, last)).toMatchObject({ is_head: false });
      // A drainer now claims the revived row, not its pending successors.
      expect(await claimable(spec)).toEqual([stuck]);
      expect(await headViolations(t.db, spec)).toEqual([]);
      expect(logger.entries.filter((e) => e.level === 'warn')).toEqual([]);
    });

    test('leaves a poisoned register with a delivered later deregister poisoned, reports it and warns', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const reg = await enqueueIntent(t.db, spec, 'vpc:b', register('b'));
      const dereg = await enqueueIntent(t.db, spec, 'vpc:b', deregister('b'));
      await poison(t.db, spec, reg, 'validation_error: type vpc not found');
      await deliver(t.db, spec, dereg);

      const logger = recordingLogger();
      const reconciler = createReconciler({ db: t.db, spec, logger });
      const result = await reconciler.redrivePoisoned();

      expect(result.revived).toEqual([]);
      expect(result.superseded).toEqual([
        { id: reg, partitionKey: 'vpc:b', lastError: 'validation_error: type vpc not found' },
      ]);
      expect(await readRow(t.db, spec, reg)).toMatchObject({
        attempt_count: spec.maxAttempts,
        last_error: 'validation_error: type vpc not found',
        is_head: false,
        retired: false,
      });
      const warnings = logger.entries.filter((e) => e.level === 'warn');
      expect(warnings).toHaveLength(1);
      expect(warnings[0]?.fields).toMatchObject({ table: spec.table, ids: [reg], partitionKeys: ['vpc:b'] });
      expect(await claimable(spec)).toEqual([]);

      // Until a human retires it, every pass reports it again; the log says it once while it stands
      // (a timer pass would repeat it every interval), and again when the set changes.
      expect(ids((await reconciler.redrivePoisoned()).superseded)).toEqual([reg]);
      expect(logger.entries.filter((e) => e.level === 'warn')).toHaveLength(1);
      const second = await enqueueIntent(t.db, spec, 'vpc:c', register('c'));
      await poison(t.db, spec, second);
      await deliver(t.db, spec, await enqueueIntent(t.db, spec, 'vpc:c', deregister('c')));
      expect(ids((await reconciler.redrivePoisoned()).superseded).sort()).toEqual([reg, second].sort());
      expect(logger.entries.filter((e) => e.level === 'warn').map((e) => e.fields?.ids)).toEqual([
        [reg],
        [reg, second],
      ]);
    });

    test('superseded rows nobody retired do not fill the batch and starve revivable ones', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const parked: string[] = [];
      for (const resource of ['p1', 'p2', 'p3']) {
        const reg = await enqueueIntent(t.db, spec, `vpc:${resource}`, register(resource));
        const dereg = await enqueueIntent(t.db, spec, `vpc:${resource}`, deregister(resource));
        await poison(t.db, spec, reg);
        await deliver(t.db, spec, dereg);
        parked.push(reg);
      }
      const revivable = await enqueueIntent(t.db, spec, 'vpc:late', register('late'));
      await poison(t.db, spec, revivable);

      const result = await createReconciler({
        db: t.db,
        spec,
        batchSize: 2,
        logger: recordingLogger(),
      }).redrivePoisoned();
      expect(ids(result.revived)).toEqual([revivable]);
      expect(ids(result.superseded)).toEqual(parked.slice(0, 2));
      // More superseded rows wait (for a human), but no more revivable ones: a loop on `more` stops.
      expect([result.more, result.moreSuperseded]).toEqual([false, true]);
    });

    test('revives at most batchSize rows a pass, oldest first', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const poisoned: string[] = [];
      for (const resource of ['x', 'y', 'z']) {
        const id = await enqueueIntent(t.db, spec, `vpc:${resource}`, register(resource));
        await poison(t.db, spec, id);
        poisoned.push(id);
      }
      const reconciler = createReconciler({ db: t.db, spec, batchSize: 2, logger: recordingLogger() });
      const first = await reconciler.redrivePoisoned();
      expect(ids(first.revived)).toEqual(poisoned.slice(0, 2));
      expect(first.more).toBe(true);
      const second = await reconciler.redrivePoisoned();
      expect(ids(second.revived)).toEqual(poisoned.slice(2));
      expect(second.more).toBe(false);
      expect(await heads(t.db, spec)).toEqual(poisoned);
    });

    test('rows that fail for good again after a revival go to the back: later poisoned rows get their turn', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const poisoned: string[] = [];
      for (const resource of ['p', 'q', 'r']) {
        const id = await enqueueIntent(t.db, spec, `vpc:${resource}`, register(resource));
        await poison(t.db, spec, id, 'validation_error');
        poisoned.push(id);
      }
      const reconciler = createReconciler({ db: t.db, spec, batchSize: 2, logger: recordingLogger() });
      expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual(poisoned.slice(0, 2));
      // OpenFGA refuses them again (a permanent error): poisoned at once, as the drainer does.
      for (const id of poisoned.slice(0, 2)) await poison(t.db, spec, id, 'validation_error');
      // The row not yet retried comes first; the one slot left goes to the earlier of the two again.
      expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual([poisoned[0], poisoned[2]]);
    });

    test('several poisoned rows of one partition come back in id order; a deliverable predecessor stays head', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const p1 = await enqueueIntent(t.db, spec, 'vpc:m', register('m'));
      const p2 = await enqueueIntent(t.db, spec, 'vpc:m', deregister('m'));
      const s3 = await enqueueIntent(t.db, spec, 'vpc:m', register('m'));
      await poison(t.db, spec, p1);
      await poison(t.db, spec, p2);
      expect(await heads(t.db, spec)).toEqual([s3]);

      // Another partition whose head is backing off ahead of its poisoned row.
      const backingOff = await enqueueIntent(t.db, spec, 'vpc:n', register('n'));
      const poisonedAfter = await enqueueIntent(t.db, spec, 'vpc:n', deregister('n'));
      await poison(t.db, spec, poisonedAfter);
      await sql`update ${sql.raw(tableNames(spec).table)} set attempt_count = 1, next_attempt_at = now() + interval '1 hour'
      where id = ${backingOff}`.execute(t.db);

      const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
      expect(ids(result.revived)).toEqual([p1, p2, poisonedAfter]);
      expect(await heads(t.db, spec)).toEqual([p1, backingOff]);
      expect(await headViolations(t.db, spec)).toEqual([]);
    });

    test('with coverage SQL on the tuple shape: a delivered subset does not supersede, a superset does', async () => {
      const spec = await createTestOutbox(t.db, {
        partitionIndex,
        partitionColumn: 'tuple_key',
        supersededCoverageSql: `(s.payload->'relations') @> (t.payload->'relations')`,
      });
      const grant = (user: string, relations: string[]) => ({
        writes: relations.map((relation) => ({ user, relation, object: 'project:p1' })),
        relations,
      });
      // alice: poisoned {viewer, editor}; delivered later {viewer}: editor was never re-determined.
      const alicePoisoned = await enqueueIntent(
        t.db,
        spec,
        'user:alice|project:p1',
        grant('user:alice', ['viewer', 'editor']),
      );
      const aliceLater = await enqueueIntent(t.db, spec, 'user:alice|project:p1', grant('user:alice', ['viewer']));
      // bob: poisoned {viewer}; delivered later {viewer, editor}: covers it.
      const bobPoisoned = await enqueueIntent(t.db, spec, 'user:bob|project:p1', grant('user:bob', ['viewer']));
      const bobLater = await enqueueIntent(t.db, spec, 'user:bob|project:p1', grant('user:bob', ['viewer', 'editor']));
      // carol: the same set delivered later: covers it.
      const carolPoisoned = await enqueueIntent(t.db, spec, 'user:carol|project:p1', grant('user:carol', ['owner']));
      const carolLater = await enqueueIntent(t.db, spec, 'user:carol|project:p1', grant('user:carol', ['owner']));
      for (const id of [alicePoisoned, bobPoisoned, carolPoisoned]) await poison(t.db, spec, id);
      for (const id of [aliceLater, bobLater, carolLater]) await deliver(t.db, spec, id);

      const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
      await reconciler.start();
      const result = await reconciler.redrivePoisoned();
      await reconciler.stop();

      expect(result.revived).toEqual([
        { id: alicePoisoned, partitionKey: 'user:alice|project:p1', lastError: 'OpenFGA unreachable' },
      ]);
      expect(ids(result.superseded)).toEqual([bobPoisoned, carolPoisoned]);
      expect(await heads(t.db, spec)).toEqual([alicePoisoned]);
    });

    test('empty-key rows group together: one delivered empty-key row parks every earlier poisoned one', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const names = tableNames(spec);
      // enqueue refuses '' keys; a manual write does not.
      const insert = async (key: string, state: 'poisoned' | 'delivered') => {
        const result = await sql<{ id: string }>`
        insert into ${sql.raw(names.table)} (${sql.raw(names.partition)}, payload, attempt_count, last_error, sent_at)
        values (${key}, ${JSON.stringify(register('e'))}::jsonb,
          ${state === 'poisoned' ? spec.maxAttempts : 1}, ${state === 'poisoned' ? 'manual row' : null},
          ${state === 'delivered' ? sql`now()` : null})
        returning id::text as id`.execute(t.db);
        return result.rows[0]!.id;
      };
      const e1 = await insert('', 'poisoned');
      const other = await insert('vpc:other', 'poisoned');
      const e2 = await insert('', 'poisoned');
      await insert('', 'delivered');
      const e3 = await insert('', 'poisoned');

      const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
      expect(ids(result.superseded)).toEqual([e1, e2]);
      expect(ids(result.revived)).toEqual([other, e3]);
      expect(
        (await readRows(t.db, spec))
          .filter((r) => r.key === '' && r.attempt_count === spec.maxAttempts)
          .map((r) => r.id),
      ).toEqual([e1, e2]);
      expect(await heads(t.db, spec)).toEqual([other, e3]);
      expect(await headViolations(t.db, spec)).toEqual([]);
    });

    test('a BRIN index on (partition, id) is not taken for the optional btree', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex: false });
      const names = tableNames(spec);
      await sql.raw(`create index on ${names.table} using brin (${names.partition}, id)`).execute(t.db);
      expect((await partitionIndexPresent(spec).execute(t.db)).rows[0]?.present).toBe(false);
    });

    test('the table is seen with or without the optional btree', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      expect((await partitionIndexPresent(spec).execute(t.db)).rows[0]?.present).toBe(partitionIndex);
    });

    test('a pass with nothing poisoned changes nothing', async () => {
      const spec = await createTestOutbox(t.db, { partitionIndex });
      const a = await enqueueIntent(t.db, spec, 'vpc:q', register('q'));
      const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
      expect(result).toEqual({
        revived: [],
        superseded: [],
        deferred: [],
        skipped: false,
        more: false,
        moreSuperseded: false,
      });
      expect(await heads(t.db, spec)).toEqual([a]);
    });
  },
);
