import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { enqueue } from './enqueue.js';
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
