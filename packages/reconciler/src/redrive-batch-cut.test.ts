import { sql } from 'kysely';
import { tableNames } from '@outbox/outbox/protocol';
import { createDrainer, createRecordingSink } from '@outbox/drainer';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  enqueueIntent,
  headViolations,
  heads,
  poison,
  readRow,
  recordingLogger,
} from './testing/outbox-fixture.js';

// Where a batch cuts, it keeps each partition's earliest rows, and partitions that fail again go to the back.
const t = useTestDatabase();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

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
        return intent.id === first
          ? { kind: 'transient', error: 'ECONNREFUSED' }
          : { kind: 'permanent', error: 'validation_error' };
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
    const names = tableNames(spec);
    const write = (object: string) => ({ writes: [{ user: 'project:p1', relation: 'project', object }] });
    const p1 = await enqueueIntent(t.db, spec, 'vpc:p', write('vpc:p'));
    const p2 = await enqueueIntent(t.db, spec, 'vpc:p', write('vpc:p'));
    const q1 = await enqueueIntent(t.db, spec, 'vpc:q', write('vpc:q'));
    for (const id of [p1, p2, q1]) await poison(t.db, spec, id, 'validation_error');
    // Least recently attempted: p's rows, then q's.
    await sql`update ${sql.raw(names.table)} set next_attempt_at = now() - (interval '1 minute' * (10 - id + ${p1}))
      where id = any(${[p1, p2, q1]}::bigint[])`.execute(t.db);
    const reconciler = createReconciler({ db: t.db, spec, batchSize: 1, logger: recordingLogger() });
    expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual([p1]);
    await poison(t.db, spec, p1, 'validation_error'); // refused again, for good
    expect(ids((await reconciler.redrivePoisoned()).revived)).toEqual([q1]);
    expect(await headViolations(t.db, spec)).toEqual([]);
  });
});
