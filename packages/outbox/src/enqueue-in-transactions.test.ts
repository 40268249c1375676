import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { enqueue, enqueueMany } from './enqueue.js';
import { freshOutboxes, headFlags } from './testing/outbox-tables.js';

// Enqueue inside the caller's transaction: two calls in one transaction, and savepoints.

const t = useTestDatabase();
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };
const fresh = freshOutboxes(t, 'in_trx');

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
    expect(await headFlags(t.db, spec)).toEqual([
      { resource_id: 'vpc:s', is_head: true },
      { resource_id: 'vpc:s', is_head: false },
    ]);
  });
});

describe('the planner settings enqueue plans its insert under', () => {
  const settings = async (trx: Parameters<typeof enqueue>[0]) =>
    (
      await sql<{
        sort: string;
        seqscan: string;
        jit: string;
      }>`select current_setting('enable_sort') as sort, current_setting('enable_seqscan') as seqscan, current_setting('jit') as jit`.execute(
        trx,
      )
    ).rows[0];

  test("are the caller's again once enqueue returns, whatever the caller had set, and the next statements plan as before", async () => {
    const spec = await fresh();
    await t.db.transaction().execute(async (trx) => {
      const before = await settings(trx);
      await enqueueMany(trx, spec, [
        { partitionKey: 'vpc:a', payload },
        { partitionKey: 'vpc:b', payload },
      ]);
      expect(await settings(trx)).toEqual(before);
      await sql`set local enable_sort = off`.execute(trx);
      await sql`set local jit = on`.execute(trx);
      await enqueue(trx, spec, { partitionKey: 'vpc:c', payload });
      expect(await settings(trx)).toEqual({ ...before, sort: 'off', jit: 'on' });
    });
  });

  test('are left alone when enqueue refuses the transaction (not READ COMMITTED)', async () => {
    const spec = await fresh();
    await t.db
      .transaction()
      .setIsolationLevel('repeatable read')
      .execute(async (trx) => {
        const before = await settings(trx);
        await expect(enqueue(trx, spec, { partitionKey: 'vpc:a', payload })).rejects.toThrow(/READ COMMITTED/);
        expect(await settings(trx)).toEqual(before);
      });
  });
});
