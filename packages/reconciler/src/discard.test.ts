import { outboxStats, OutboxConfigError, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { beforeAll, describe, expect, test } from 'vitest';
import { createReconciler, DiscardRefusedError, type Reconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  headViolations,
  heads,
  openTransaction,
  poison,
  readRow,
  readRows,
  recordingLogger,
  refuse,
  register,
} from './testing/outbox-fixture.js';

// Discard closes a poisoned row no delivered successor supersedes: its tuples are never written (docs/ledger.md).
const t = useTestDatabase();

describe('discardPoisoned', () => {
  let spec: OutboxSpec;
  let reconciler: Reconciler;
  const logger = recordingLogger();
  const row: Record<string, string> = {};

  beforeAll(async () => {
    spec = await createTestOutbox(t.db);
    reconciler = createReconciler({ db: t.db, spec, logger });
    // refused, with a deliverable successor that is its partition's head
    row.refused = await enqueueIntent(t.db, spec, 'vpc:r', register('r'));
    row.behind = await enqueueIntent(t.db, spec, 'vpc:r', deregister('r'));
    await refuse(t.db, spec, row.refused);
    // exhausted, alone
    row.exhausted = await enqueueIntent(t.db, spec, 'vpc:e', register('e'));
    await poison(t.db, spec, row.exhausted);
    // superseded
    row.superseded = await enqueueIntent(t.db, spec, 'vpc:s', register('s'));
    row.successor = await enqueueIntent(t.db, spec, 'vpc:s', deregister('s'));
    await poison(t.db, spec, row.superseded);
    await deliver(t.db, spec, row.successor);
    // retired
    row.retired = await enqueueIntent(t.db, spec, 'vpc:t', register('t'));
    row.retiredBy = await enqueueIntent(t.db, spec, 'vpc:t', deregister('t'));
    await poison(t.db, spec, row.retired);
    await deliver(t.db, spec, row.retiredBy);
    await reconciler.retire([row.retired], 'deleted during the outage');
    // in flight: a poisoned row whose partition's pending successor a drainer holds
    row.held = await enqueueIntent(t.db, spec, 'vpc:h', register('h'));
    row.heldNext = await enqueueIntent(t.db, spec, 'vpc:h', deregister('h'));
    await poison(t.db, spec, row.held);
  });

  const refusalsOf = async (ids: string[]) => {
    const error = await reconciler.discardPoisoned({ ids, reason: 'cleanup' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiscardRefusedError);
    return (error as DiscardRefusedError).refused;
  };

  test('refuses each kind of row it must not close, naming it, and changes nothing', async () => {
    const before = await readRows(t.db, spec);
    expect(await refusalsOf([row.successor!])).toEqual([{ id: row.successor, refusal: 'delivered' }]);
    expect(await refusalsOf([row.behind!])).toEqual([{ id: row.behind, refusal: 'deliverable' }]);
    expect(await refusalsOf([row.superseded!])).toEqual([{ id: row.superseded, refusal: 'superseded' }]);
    expect(await refusalsOf([row.retired!])).toEqual([{ id: row.retired, refusal: 'retired' }]);
    expect(await refusalsOf(['987654321', 'x'])).toEqual([{ id: 'x', refusal: 'unknown' }]);
    expect(await refusalsOf(['987654321'])).toEqual([{ id: '987654321', refusal: 'unknown' }]);
    // All or nothing: a discardable id beside a refused one stays poisoned.
    expect(await refusalsOf([row.exhausted!, row.superseded!])).toEqual([
      { id: row.superseded, refusal: 'superseded' },
    ]);
    const drainer = await openTransaction(t.db);
    try {
      await sql`select id from ${sql.raw(tableNames(spec).table)} where id = ${row.heldNext} for update`.execute(
        drainer.trx,
      );
      expect(await refusalsOf([row.held!])).toEqual([{ id: row.held, refusal: 'in-flight' }]);
    } finally {
      await drainer.rollback();
    }
    expect(await readRows(t.db, spec)).toEqual(before);
  });

  test('needs a reason and ids: argument errors, not refusals', async () => {
    for (const call of [
      () => reconciler.discardPoisoned({ ids: [row.exhausted!], reason: ' ' }),
      () => reconciler.discardPoisoned({ ids: [], reason: 'x' }),
    ]) {
      await expect(call()).rejects.toBeInstanceOf(OutboxConfigError);
    }
  });

  test('closes poisoned rows no successor supersedes, with the reason, kept as evidence, heads where they were, logged at WARN', async () => {
    const headsBefore = await heads(t.db, spec);
    const discarded = await reconciler.discardPoisoned({
      ids: [row.exhausted!, row.refused!],
      reason: 'tenant deleted; access intentionally never granted',
    });
    expect(discarded).toEqual([
      {
        id: row.refused,
        partitionKey: 'vpc:r',
        lastError: 'OpenFGA 400 validation_error: refused',
        poisonCause: 'refused',
        poisonCode: 'validation_error',
      },
      { id: row.exhausted, partitionKey: 'vpc:e', lastError: 'OpenFGA unreachable' },
    ]);
    for (const id of [row.exhausted!, row.refused!]) {
      expect(await readRow(t.db, spec, id)).toMatchObject({
        retired: true,
        closed_as: 'discarded',
        retired_reason: 'tenant deleted; access intentionally never granted',
        delivered: false,
      });
    }
    expect(await heads(t.db, spec)).toEqual(headsBefore);
    expect(await headViolations(t.db, spec)).toEqual([]);
    expect(
      logger.entries.filter(
        (e) =>
          e.level === 'warn' && /discarded 2 poisoned intent\(s\): their tuples will not be written/.test(e.message),
      ),
    ).toHaveLength(1);
    expect(await outboxStats(t.db, spec)).toMatchObject({ retired: 1, discarded: 2 });
    // Closed: no redrive takes them, and neither discard nor retire closes them twice.
    const pass = await reconciler.redrivePoisoned({ refused: true, reason: 'operator' });
    expect(pass.revived.map((r) => r.id)).not.toContain(row.exhausted);
    expect(await refusalsOf([row.exhausted!])).toEqual([{ id: row.exhausted, refusal: 'discarded' }]);
    const retire = await reconciler.retire([row.exhausted!], 'x').catch((e: unknown) => e);
    expect((retire as { refused: unknown }).refused).toEqual([{ id: row.exhausted, refusal: 'discarded' }]);
  });
});
