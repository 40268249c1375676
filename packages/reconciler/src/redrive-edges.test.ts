/**
 * Data shapes and interleavings that must neither resurrect a superseded intent nor break the head
 * invariant, against real Postgres, real drainers and real writers.
 */
import { sql } from 'kysely';
import { tableNames } from '@outbox/outbox/protocol';
import { createDrainer, createRecordingSink } from '@outbox/drainer';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  enqueueIntent,
  headViolations,
  heads,
  poison,
  readRow,
  recordingLogger,
} from './testing/outbox-fixture.js';

const t = useTestDatabase();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

describe('coverage SQL that evaluates to NULL', () => {
  test('a row without the field the coverage reads is not revived over a delivered successor (NULL coverage parks, it does not revive)', async () => {
    // The README's own example fragment. A row written before the service added `relations` (or by
    // hand) has none: `s.relations @> NULL` is NULL.
    const spec = await createTestOutbox(t.db, {
      partitionColumn: 'tuple_key',
      supersededCoverageSql: `(s.payload->'relations') @> (t.payload->'relations')`,
    });
    const key = 'user:alice|project:p1';
    const tuple = (relation: string) => ({ user: 'user:alice', relation, object: 'project:p1' });
    // Older build: revoke editor, no `relations` summary. Poisoned (OpenFGA was down).
    const old = await enqueueIntent(t.db, spec, key, { deletes: [tuple('editor')] });
    // Newer build: the whole state {editor, viewer}. Delivered.
    const later = await enqueueIntent(t.db, spec, key, { writes: [tuple('editor'), tuple('viewer')], relations: ['editor', 'viewer'] });
    await poison(t.db, spec, old);
    await deliver(t.db, spec, later);

    const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
    // Reviving `old` replays "delete editor" over the delivered grant of editor: it undoes the later
    // delivery (§6), silently and for good.
    expect(ids(result.revived)).toEqual([]);
    expect(ids(result.superseded)).toEqual([old]);
    expect(await readRow(t.db, spec, old)).toMatchObject({ attempt_count: spec.maxAttempts });
  });

  test('a delivered successor without the field (written by hand) parks the poisoned row too', async () => {
    const spec = await createTestOutbox(t.db, {
      partitionColumn: 'tuple_key',
      supersededCoverageSql: `(s.payload->'relations') @> (t.payload->'relations')`,
    });
    const key = 'user:bob|project:p1';
    const tuple = (relation: string) => ({ user: 'user:bob', relation, object: 'project:p1' });
    const grant = await enqueueIntent(t.db, spec, key, { writes: [tuple('owner')], relations: ['owner'] });
    const n = tableNames(spec);
    // An operator revoked by hand (a row without `relations`) and the drainer delivered it.
    const revoke = await enqueueIntent(t.db, spec, key, { deletes: [tuple('owner')] });
    await poison(t.db, spec, grant);
    await deliver(t.db, spec, revoke);
    expect((await sql<{ r: unknown }>`select payload->'relations' as r from ${sql.raw(n.table)} where id = ${revoke}`.execute(t.db)).rows[0]?.r).toBeNull();

    const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(result.revived)).toEqual([]);
    expect(ids(result.superseded)).toEqual([grant]);
  });
});

describe('the batch cut', () => {
  test('never revives a later poisoned row of a partition while leaving an earlier revivable one behind', async () => {
    const spec = await createTestOutbox(t.db); // maxAttempts 3
    const key = 'instance:i1';
    const write = (relation: string) => ({ writes: [{ user: 'project:p1', relation, object: 'instance:i1' }] });
    const first = await enqueueIntent(t.db, spec, key, write('project'));
    const second = await enqueueIntent(t.db, spec, key, write('vpc'));

    // A real drainer: OpenFGA is unreachable for `first` (transient, poisoned at its 3rd attempt),
    // then refuses `second` (a permanent error, e.g. a model not yet deployed).
    let down = true;
    const sink = createRecordingSink({
      outcome: (intent) => {
        if (!down) return undefined;
        return intent.id === first ? { kind: 'transient', error: 'ECONNREFUSED' } : { kind: 'permanent', error: 'validation_error' };
      },
    });
    const drainer = createDrainer({ db: t.db, spec, sink, backoff: { baseMs: 0, maxMs: 0 }, listen: false });
    for (let i = 0; i < 10; i += 1) await drainer.drainOnce();
    expect(await readRow(t.db, spec, first)).toMatchObject({ attempt_count: 3 });
    expect(await readRow(t.db, spec, second)).toMatchObject({ attempt_count: 3 });

    // Fixed (the model deployed: refused rows are asked to retry). The reconciler's batch holds one
    // row (think: 500 of an outage's 10,000 poisoned rows).
    down = false;
    const reconciler = createReconciler({ db: t.db, spec, batchSize: 1, logger: recordingLogger() });
    const pass1 = await reconciler.redrivePoisoned({ refused: true, reason: 'model-change' });
    await drainer.drainOnce();
    const pass2 = await reconciler.redrivePoisoned();
    await drainer.drainOnce();
    await drainer.stop();

    // Both were revivable: both must reach OpenFGA, in id order.
    expect({ pass1: ids(pass1.revived), pass2: ids(pass2.revived), superseded: ids(pass2.superseded) }).toEqual({
      pass1: [first],
      pass2: [second],
      superseded: [],
    });
    expect(sink.delivered.map((i) => i.id)).toEqual([first, second]);
    expect(await headViolations(t.db, spec)).toEqual([]);
    expect(await heads(t.db, spec)).toEqual([]);
  });
  test('a partition whose earliest row fails again after a revival goes behind other partitions', async () => {
    const spec = await createTestOutbox(t.db);
    const n = tableNames(spec);
    const write = (object: string) => ({ writes: [{ user: 'project:p1', relation: 'project', object }] });
    const p1 = await enqueueIntent(t.db, spec, 'vpc:p', write('vpc:p'));
    const p2 = await enqueueIntent(t.db, spec, 'vpc:p', write('vpc:p'));
    const q1 = await enqueueIntent(t.db, spec, 'vpc:q', write('vpc:q'));
    for (const id of [p1, p2, q1]) await poison(t.db, spec, id, 'validation_error');
    // Least recently attempted: p's rows, then q's.
    await sql`update ${sql.raw(n.table)} set next_attempt_at = now() - (interval '1 minute' * (10 - id + ${p1}))
      where id = any(${[p1, p2, q1]}::bigint[])`.execute(t.db);
    const reconciler = createReconciler({ db: t.db, spec, batchSize: 1, logger: recordingLogger() });
    expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual([p1]);
    await poison(t.db, spec, p1, 'validation_error'); // refused again, for good
    expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual([q1]);
    expect(await headViolations(t.db, spec)).toEqual([]);
  });
});

describe('races with real writers, drainers, two reconcilers and retire', () => {
  test.each([1, 2, 3, 4].map((i) => ({ seed: i * 7, partitionIndex: i % 2 === 0 })))('no resurrection, head invariant in every committed snapshot, no hang (seed $seed, partitionIndex $partitionIndex)', async ({ seed: initial, partitionIndex }) => {
    const spec = await createTestOutbox(t.db, { maxAttempts: 2, partitionIndex });
    const n = tableNames(spec);
    const KEYS = ['vpc:a', 'vpc:b', 'vpc:c', 'vpc:d', ''];
    let seed = initial;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)] as T;
    const sink = createRecordingSink({
      outcome: async () => {
        const roll = random();
        if (roll < 0.05) await new Promise((r) => setTimeout(r, 5));
        if (roll < 0.25) return { kind: 'transient', error: 'blip' };
        if (roll < 0.35) return { kind: 'permanent', error: 'refused' };
        return undefined;
      },
    });
    const drainers = [0, 1].map(() =>
      createDrainer({ db: t.kysely({ max: 2 }), spec, sink, batchSize: 5, backoff: { baseMs: 0, maxMs: 2 }, listen: false, logger: recordingLogger() }),
    );
    const reconcilers = [0, 1].map(() => createReconciler({ db: t.kysely({ max: 2 }), spec, batchSize: 3, lockTimeoutMs: 2000, logger: recordingLogger() }));
    let running = true;
    const errors: unknown[] = [];
    const found: string[][] = [];
    const stats = { revived: 0, superseded: 0, deferred: 0, skipped: 0, retired: 0 };
    const writerDb = t.kysely({ max: 3 });
    const writer = async () => {
      for (let i = 0; i < 200; i += 1) {
        const key = pick(KEYS);
        // '' is refused by enqueue: write it as an operator would, under the partition lock.
        await writerDb.transaction().execute(async (trx) => {
          if (key !== '') {
            const { enqueue } = await import('@outbox/outbox');
            await enqueue(trx, spec, { partitionKey: `${key}`, payload: { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:x' }] } });
          } else {
            const { lockPartitions } = await import('@outbox/outbox/protocol');
            await lockPartitions(spec, ['']).execute(trx);
            await sql`insert into ${sql.raw(n.table)} (${sql.raw(n.partition)}, payload, is_head)
              select '', '{"writes":[{"user":"project:p1","relation":"project","object":"vpc:e"}]}'::jsonb,
                not exists (select 1 from ${sql.raw(n.table)} where ${sql.raw(n.partition)} = '' and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts})`.execute(trx);
          }
        });
        if (random() < 0.3) await new Promise((r) => setTimeout(r, 1));
      }
    };
    const drain = async (d: (typeof drainers)[number]) => {
      while (running) await d.drainOnce().catch((e: unknown) => errors.push(e));
    };
    const reconcile = async (r: (typeof reconcilers)[number]) => {
      while (running) {
        try {
          const result = await r.redrivePoisoned();
          stats.revived += result.revived.length;
          stats.deferred += result.deferred.length;
          stats.skipped += result.skipped ? 1 : 0;
          stats.superseded += result.superseded.length;
          if (result.superseded.length > 0 && random() < 0.5) {
            const retired = await r.retire(result.superseded.map((s) => s.id), 'superseded in the race test');
            stats.retired += retired.length;
          }
        } catch (e) {
          // Both reconcilers may report the same superseded row; the slower retire finds it retired.
          const refused = (e as { refused?: { refusal: string }[] }).refused;
          if (!(refused && refused.every((r) => r.refusal === 'retired'))) errors.push(e);
        }
        await new Promise((res) => setTimeout(res, 2));
      }
    };
    const check = async () => {
      while (running) {
        const v = await headViolations(t.db, spec);
        if (v.length > 0) found.push(v);
        await new Promise((r) => setTimeout(r, 3));
      }
    };
    const background = [...drainers.map(drain), ...reconcilers.map(reconcile), check()];
    await Promise.all([writer(), writer(), writer()]);
    running = false;
    await Promise.all(background);
    for (const d of drainers) await d.stop();

    expect(errors).toEqual([]);
    expect(found).toEqual([]);
    expect(await headViolations(t.db, spec)).toEqual([]);
    // No resurrection: within a partition no row reaches the sink for the first time after a later
    // row of its partition did.
    const last = new Map<string, bigint>();
    const seen = new Set<string>();
    const inversions: string[] = [];
    for (const intent of sink.delivered) {
      if (seen.has(intent.id)) continue;
      seen.add(intent.id);
      const previous = last.get(intent.partitionKey);
      if (previous !== undefined && BigInt(intent.id) < previous) inversions.push(`${intent.partitionKey}: ${intent.id} after ${previous}`);
      if (previous === undefined || BigInt(intent.id) > previous) last.set(intent.partitionKey, BigInt(intent.id));
    }
    expect(inversions).toEqual([]);
    // Sanity: the race exercised revivals, supersession and retire.
    expect(stats.revived).toBeGreaterThan(0);
    expect(stats.superseded).toBeGreaterThan(0);
  }, 120_000);
});
