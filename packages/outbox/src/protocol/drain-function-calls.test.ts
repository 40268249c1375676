import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { claimStatement, settleStatement, type ClaimedRow, type ClaimOptions } from './drain-function-calls.js';
import type { OutboxSpec } from '../define-outbox.js';
import { enqueueMany } from '../enqueue.js';
import { tableNames } from '../table-names.js';
import { freshOutboxes, headFlags } from '../testing/outbox-tables.js';

// The drainer's calls of the claim and settle functions, as claimStatement and settleStatement write them.

const t = useTestDatabase();
const fresh = freshOutboxes(t, 'calls');
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };
const AWKWARD = "vpc:it's \\ a key";

/** An outbox holding vpc:a (ids 1–3), vpc:b (id 4) and AWKWARD (id 5), each partition's first row its head. */
async function backlog(): Promise<OutboxSpec> {
  const spec = await fresh();
  await t.db.transaction().execute((trx) =>
    enqueueMany(
      trx,
      spec,
      ['vpc:a', 'vpc:a', 'vpc:a', 'vpc:b', AWKWARD].map((partitionKey) => ({ partitionKey, payload })),
    ),
  );
  return spec;
}

/** What a statement claims, in a transaction rolled back afterwards (as `key id head`), and what `after` then reads. */
async function claimed(
  statement: string,
  after = 'select 1',
): Promise<{ rows: string[]; recorded: unknown[]; after: unknown }> {
  let found: { rows: string[]; recorded: unknown[]; after: unknown } | undefined;
  await t.db
    .transaction()
    .execute(async (trx) => {
      await sql`set local synchronous_commit = on`.execute(trx);
      const result = await sql.raw<ClaimedRow>(statement).execute(trx);
      const then = await sql.raw<Record<string, unknown>>(after).execute(trx);
      found = {
        rows: result.rows.map((r) => `${r.partition_key} ${r.id} ${r.head ? 'head' : 'run'}`),
        recorded: [...new Set(result.rows.map((r) => r.recorded))],
        after: Object.values(then.rows[0] ?? {})[0],
      };
      throw new Error('roll back');
    })
    .catch((error: Error) => {
      if (error.message !== 'roll back') throw error;
    });
  return found!;
}

describe('claimStatement', () => {
  test('claims a flushed partition first, then the heads and their runs, with the maxAttempts the table records', async () => {
    const spec = await backlog();
    const { rows, recorded } = await claimed(claimStatement(spec, { batchSize: 10, flushKeys: [AWKWARD] }));
    expect(rows).toEqual([`${AWKWARD} 5 head`, 'vpc:a 1 head', 'vpc:b 4 head', 'vpc:a 2 run', 'vpc:a 3 run']);
    expect(recorded).toEqual([10]);
  });

  test.each<[string, Omit<ClaimOptions, 'batchSize'>, string]>([
    ['the defaults', {}, `true, true, '{}', true`],
    ['heads only', { runs: false }, `false, true, '{}', true`],
    ['a flush', { flushKeys: ['vpc:b'] }, `true, true, array['vpc:b'], true`],
  ])('with %s, claims what the positional call claims', async (_, options, positional) => {
    const spec = await backlog();
    const named = await claimed(claimStatement(spec, { batchSize: 4, headLimit: 2, ...options }));
    const byPosition = await claimed(
      `select c.*, null as recorded from ${tableNames(spec).claimFunction}(4, 2, 10, ${positional}) c`,
    );
    expect(named.rows).toEqual(byPosition.rows);
    expect(named.rows.length).toBeGreaterThan(0);
  });

  test("returns each row's age since its created_at on every path (flushed heads and runs, heads, runs, heads only); created_at only when asked", async () => {
    const spec = await backlog();
    const table = tableNames(spec).table;
    // Row n was created n minutes ago.
    await sql.raw(`update ${table} set created_at = now() - make_interval(mins => id::int)`).execute(t.db);
    const ages = async (statement: string) => {
      const rows = await t.db
        .transaction()
        .execute(async (trx) => (await sql.raw<ClaimedRow>(statement).execute(trx)).rows);
      return rows.map((r) => ({ id: String(r.id), head: r.head, minutes: Math.round(r.age_ms / 60_000) }));
    };
    const everyRow = [1, 2, 3, 4, 5].map((id) => ({ id: String(id), minutes: id }));
    for (const options of [{ flushKeys: ['vpc:a', AWKWARD] }, {}, { headLimit: 1 }]) {
      const rows = await ages(claimStatement(spec, { batchSize: 10, ...options }));
      expect(
        rows.map(({ id, minutes }) => ({ id, minutes })).sort((a, b) => Number(a.id) - Number(b.id)),
        JSON.stringify(options),
      ).toEqual(options.headLimit ? [1, 2, 3].map((id) => ({ id: String(id), minutes: id })) : everyRow);
      expect(
        rows.filter((r) => !r.head).map((r) => r.id),
        JSON.stringify(options),
      ).toEqual(['2', '3']); // the run came through too
    }
    const headsOnly = await ages(claimStatement(spec, { batchSize: 10, runs: false }));
    expect(headsOnly.map(({ id, minutes }) => ({ id, minutes }))).toEqual(
      [1, 4, 5].map((id) => ({ id: String(id), minutes: id })),
    );
    const unasked = await t.db
      .transaction()
      .execute((trx) =>
        sql
          .raw<{ created_at: Date | null }>(
            `select created_at from ${tableNames(spec).claimFunction}(10, 10, 10, true, true, '{}', false)`,
          )
          .execute(trx),
      );
    expect(unasked.rows.map((r) => r.created_at)).toEqual([null, null, null, null, null]);
  });

  test('synchronousCommit false turns synchronous_commit off for the claiming transaction only', async () => {
    const spec = await backlog();
    const off = await claimed(
      claimStatement(spec, { batchSize: 1, synchronousCommit: false }),
      `select current_setting('synchronous_commit')`,
    );
    const on = await claimed(claimStatement(spec, { batchSize: 1 }), `select current_setting('synchronous_commit')`);
    expect([off.after, on.after]).toEqual(['off', 'on']);
  });
});

describe('settleStatement', () => {
  test('marks the delivered head sent and promotes the next row of its partition, whatever the key holds', async () => {
    const spec = await backlog();
    await sql.raw(settleStatement(spec, ['vpc:a', AWKWARD], { markDelivered: ['1', '5'] })!).execute(t.db);
    expect((await headFlags(t.db, spec)).map((r) => r.is_head)).toEqual([false, true, false, true, false]);
    expect(settleStatement(spec, [])).toBeUndefined();
  });
});
