import { useTestDatabase } from '@outbox/test-stack';
import { beforeAll, describe, expect, test } from 'vitest';
import type { OutboxSpec } from '@outbox/outbox';
import { createReconciler, RetireRefusedError, type Reconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  deregister,
  enqueueIntent,
  headViolations,
  poison,
  readRow,
  readRows,
  recordingLogger,
  register,
} from './testing/outbox-fixture.js';

const t = useTestDatabase();

describe.each([{ partitionIndex: false }, { partitionIndex: true }])(
  'retire (partitionIndex: $partitionIndex)',
  ({ partitionIndex }) => {
    let spec: OutboxSpec;
    let reconciler: Reconciler;
    const row: Record<string, string> = {};

    beforeAll(async () => {
      spec = await createTestOutbox(t.db, { partitionIndex });
      reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger() });
      // superseded: a poisoned register, its deregister delivered
      row.superseded = await enqueueIntent(t.db, spec, 'vpc:gone', register('gone'));
      row.supersededBy = await enqueueIntent(t.db, spec, 'vpc:gone', deregister('gone'));
      await poison(t.db, spec, row.superseded, 'timeout');
      await deliver(t.db, spec, row.supersededBy);
      // a second superseded row, for the all-or-nothing check
      row.superseded2 = await enqueueIntent(t.db, spec, 'vpc:gone2', register('gone2'));
      row.supersededBy2 = await enqueueIntent(t.db, spec, 'vpc:gone2', deregister('gone2'));
      await poison(t.db, spec, row.superseded2);
      await deliver(t.db, spec, row.supersededBy2);
      // revivable: poisoned, nothing delivered after it; a pending successor is head
      row.revivable = await enqueueIntent(t.db, spec, 'vpc:stuck', register('stuck'));
      row.pendingHead = await enqueueIntent(t.db, spec, 'vpc:stuck', deregister('stuck'));
      await poison(t.db, spec, row.revivable);
      // deliverable: an ordinary pending intent
      row.deliverable = await enqueueIntent(t.db, spec, 'vpc:fresh', register('fresh'));
    });

    const refusalOf = async (ids: string[]) => {
      const error = await reconciler.retire(ids, 'cleanup').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(RetireRefusedError);
      return (error as RetireRefusedError).refused;
    };

    test('refuses pending, revivable, delivered and unknown ids, naming each', async () => {
      expect(await refusalOf([row.deliverable!])).toEqual([{ id: row.deliverable, refusal: 'deliverable' }]);
      expect(await refusalOf([row.revivable!])).toEqual([{ id: row.revivable, refusal: 'revivable' }]);
      expect(await refusalOf([row.pendingHead!])).toEqual([{ id: row.pendingHead, refusal: 'deliverable' }]);
      expect(await refusalOf([row.supersededBy!])).toEqual([{ id: row.supersededBy, refusal: 'delivered' }]);
      expect(await refusalOf(['987654321'])).toEqual([{ id: '987654321', refusal: 'unknown' }]);
      expect(await refusalOf(['not-an-id'])).toEqual([{ id: 'not-an-id', refusal: 'unknown' }]);
      expect(await refusalOf(['9999999999999999999'])).toEqual([{ id: '9999999999999999999', refusal: 'unknown' }]);
      expect((await readRows(t.db, spec)).filter((r) => r.retired)).toEqual([]);
    });

    test('is all or nothing: one refused id leaves the superseded ones in the same call untouched', async () => {
      expect(await refusalOf([row.superseded2!, row.revivable!])).toEqual([
        { id: row.revivable, refusal: 'revivable' },
      ]);
      expect(await readRow(t.db, spec, row.superseded2!)).toMatchObject({ retired: false });
    });

    test('refuses without a reason, or without ids: argument errors (OutboxConfigError naming them), not refusals', async () => {
      await expect(reconciler.retire([row.superseded!], '  ')).rejects.toMatchObject({
        name: 'OutboxConfigError',
        field: 'reason',
      });
      await expect(reconciler.retire([], 'a reason')).rejects.toMatchObject({
        name: 'OutboxConfigError',
        field: 'ids',
      });
      expect(await readRow(t.db, spec, row.superseded!)).toMatchObject({ retired: false });
    });

    test('retires superseded rows with the reason, keeps them as evidence, and moves no head', async () => {
      const before = await readRows(t.db, spec);
      const retired = await reconciler.retire(
        [row.superseded!, row.superseded2!],
        'resource deleted during the outage',
      );
      expect(retired).toEqual([
        { id: row.superseded, partitionKey: 'vpc:gone', lastError: 'timeout' },
        { id: row.superseded2, partitionKey: 'vpc:gone2', lastError: 'OpenFGA unreachable' },
      ]);
      const after = await readRows(t.db, spec);
      expect(after.find((r) => r.id === row.superseded)).toMatchObject({
        retired: true,
        retired_reason: 'resource deleted during the outage',
        last_error: 'timeout',
        delivered: false,
      });
      expect(after.map((r) => [r.id, r.is_head])).toEqual(before.map((r) => [r.id, r.is_head]));
      expect(await headViolations(t.db, spec)).toEqual([]);

      // Retired rows are closed: no longer reported, not retired twice.
      const pass = await reconciler.redrivePoisoned();
      expect(pass.superseded).toEqual([]);
      expect(pass.revived.map((r) => r.id)).toEqual([row.revivable]);
      expect(await refusalOf([row.superseded!])).toEqual([{ id: row.superseded, refusal: 'retired' }]);
    });
  },
);
