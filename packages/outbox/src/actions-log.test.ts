import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { readOutboxActions, recordOutboxAction, traceOutboxAction, validateOutboxAction } from './actions-log.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError } from './errors.js';
import { tableNames } from './table-names.js';
import { freshOutboxes } from './testing/outbox-tables.js';

const t = useTestDatabase();
const fresh = freshOutboxes(t, 'actions_log');

const rows = async (spec: OutboxSpec) =>
  (
    await sql<{ actor: string; action: string; ids: string[]; counts: Record<string, number>; reason: string | null }>`
      select actor, action, ids, counts, reason from ${sql.raw(tableNames(spec).actionsTable)} order by id`.execute(
      t.db,
    )
  ).rows;

describe('recordOutboxAction', () => {
  test('writes one row with who, what, which ids, how many and why; readOutboxActions lists them newest first', async () => {
    const spec = await fresh();
    const first = await recordOutboxAction(t.db, spec, {
      actor: ' alice ',
      action: 'discard',
      ids: ['12', 13, 14n],
      counts: { discarded: 3 },
      reason: ' project deleted ',
    });
    expect(first).toEqual({
      id: expect.stringMatching(/^\d+$/),
      at: expect.any(Date),
      table: spec.table,
      actor: 'alice',
      action: 'discard',
      ids: ['12', '13', '14'],
      counts: { discarded: 3 },
      reason: 'project deleted',
    });
    const second = await recordOutboxAction(t.db, spec, { actor: 'bob', action: 'compact', counts: { deleted: 5 } });
    expect(second).toMatchObject({ ids: [], counts: { deleted: 5 }, reason: null });
    expect(await rows(spec)).toEqual([
      {
        actor: 'alice',
        action: 'discard',
        ids: ['12', '13', '14'],
        counts: { discarded: 3 },
        reason: 'project deleted',
      },
      { actor: 'bob', action: 'compact', ids: [], counts: { deleted: 5 }, reason: null },
    ]);
    expect(await readOutboxActions(t.db, spec)).toEqual([second, first]);
    expect(await readOutboxActions(t.db, spec, { limit: 1 })).toEqual([second]);
  });

  test.each([
    ['an empty actor', { actor: '', action: 'redrive' }, 'actor'],
    ['a blank actor', { actor: '  ', action: 'redrive' }, 'actor'],
    ['an actor with a newline', { actor: 'alice\nroot', action: 'redrive' }, 'actor'],
    ['an actor with an escape', { actor: 'alice\u001b[2J', action: 'redrive' }, 'actor'],
    ['an actor with a C1 control', { actor: 'alice\u009b', action: 'redrive' }, 'actor'],
    ['an actor of 201 characters', { actor: 'a'.repeat(201), action: 'redrive' }, 'actor'],
    ['an actor that is not a string', { actor: 7, action: 'redrive' }, 'actor'],
    ['an unknown action', { actor: 'alice', action: 'delete' }, 'action'],
    ['a retire without a reason', { actor: 'alice', action: 'retire', ids: ['1'] }, 'reason'],
    ['a discard with a blank reason', { actor: 'alice', action: 'discard', ids: ['1'], reason: ' ' }, 'reason'],
    ['a redrive with an empty reason', { actor: 'alice', action: 'redrive', reason: '' }, 'reason'],
    ['an id that is not one', { actor: 'alice', action: 'redrive', ids: ['1', 'x'] }, 'ids[1]'],
    ['an id past bigint', { actor: 'alice', action: 'redrive', ids: ['9223372036854775808'] }, 'ids[0]'],
    ['a negative count', { actor: 'alice', action: 'compact', counts: { deleted: -1 } }, 'counts.deleted'],
    [
      'a count that is not an integer',
      { actor: 'alice', action: 'compact', counts: { deleted: 1.5 } },
      'counts.deleted',
    ],
  ])('refuses %s with an OutboxConfigError naming the field, and writes nothing', async (_what, input, field) => {
    const spec = await fresh();
    const error = await recordOutboxAction(t.db, spec, input as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).field).toBe(field);
    expect(() => validateOutboxAction(input as never)).toThrow(OutboxConfigError);
    expect(await rows(spec)).toEqual([]);
  });

  test('in the transaction of the change: rolled back with it', async () => {
    const spec = await fresh();
    await expect(
      t.db.transaction().execute(async (trx) => {
        await recordOutboxAction(trx, spec, { actor: 'alice', action: 'redrive', ids: ['1'] });
        throw new Error('the change failed');
      }),
    ).rejects.toThrow('the change failed');
    expect(await rows(spec)).toEqual([]);
  });

  test("the table's checks refuse what the library would, from a writer that is not it", async () => {
    const spec = await fresh();
    const log = sql.raw(tableNames(spec).actionsTable);
    for (const [values, check] of [
      [sql`(${'alice\n'}, 'redrive', null)`, 'actor'],
      [sql`(' ', 'redrive', null)`, 'actor'],
      [sql`('alice', 'delete', null)`, 'action'],
      [sql`('alice', 'retire', null)`, 'reason'],
      [sql`('alice', 'discard', '  ')`, 'reason'],
    ] as const) {
      await expect(sql`insert into ${log} (actor, action, reason) values ${values}`.execute(t.db)).rejects.toThrow(
        `${spec.tableName}_actions_${check}_check`,
      );
    }
    await expect(
      sql`insert into ${log} (actor, action, ids) values ('a', 'redrive', '{}')`.execute(t.db),
    ).rejects.toThrow(/ids_check/);
  });
});

describe('traceOutboxAction', () => {
  test('is checked when made; its transactions make one row, appending ids and adding counts', async () => {
    const spec = await fresh();
    expect(() => traceOutboxAction(spec, { actor: 'alice\t', action: 'redrive' })).toThrow(OutboxConfigError);
    expect(() => traceOutboxAction(spec, { actor: 'alice', action: 'discard' })).toThrow(/reason/);
    const trace = traceOutboxAction(spec, { actor: 'alice', action: 'redrive' });
    expect(trace.entryId).toBeUndefined();
    const first = await t.db
      .transaction()
      .execute((trx) => trace.record(trx, { ids: ['3', '4'], counts: { revived: 2, requested: 1 } }));
    const second = await t.db.transaction().execute((trx) => trace.record(trx, { ids: ['9'], counts: { revived: 1 } }));
    expect(second).toMatchObject({ id: first.id, ids: ['3', '4', '9'], counts: { revived: 3, requested: 1 } });
    expect(trace.entryId).toBe(first.id);
    expect(await rows(spec)).toEqual([
      { actor: 'alice', action: 'redrive', ids: ['3', '4', '9'], counts: { revived: 3, requested: 1 }, reason: null },
    ]);
  });

  test('when the transaction that made its row rolls back, the next change starts the row again', async () => {
    const spec = await fresh();
    const trace = traceOutboxAction(spec, { actor: 'alice', action: 'repair' });
    await expect(
      t.db.transaction().execute(async (trx) => {
        await trace.record(trx, { ids: ['1'], counts: { intents: 1 } });
        throw new Error('the batch failed');
      }),
    ).rejects.toThrow('the batch failed');
    await t.db.transaction().execute((trx) => trace.record(trx, { ids: ['2'], counts: { intents: 1 } }));
    expect(await rows(spec)).toEqual([
      { actor: 'alice', action: 'repair', ids: ['2'], counts: { intents: 1 }, reason: null },
    ]);
  });
});
