import { useTestDatabase } from '@outbox/test-stack';
import { sql, type Transaction } from 'kysely';
import { beforeAll, describe, expect, test } from 'vitest';
import { defineOutbox } from './define-outbox.js';
import { enqueue, enqueueMany, MAX_INTENTS_PER_ENQUEUE, type EnqueueInput } from './enqueue.js';
import { PayloadError } from './errors.js';
import { createOutboxTable } from './schema/migration.js';
import {
  MAX_TUPLES_PER_INTENT,
  validatePartitionKey,
  validatePayload,
  type IntentPayload,
  type TupleKey,
} from './payload.js';
import { freshOutboxes, headFlags } from './testing/outbox-tables.js';

const t = useTestDatabase();

/** A tuple key, well-formed unless `overrides` says otherwise (typed as one either way). */
const tuple = (overrides: Partial<Record<keyof TupleKey, unknown>> = {}) =>
  ({ user: 'project:p1', relation: 'project', object: 'vpc:v1', ...overrides }) as TupleKey;
const writes = (n: number) => Array.from({ length: n }, (_, i) => tuple({ object: `vpc:v${i}` }));

/** The PayloadError that `validatePayload(payload)` throws (fails the test when it does not throw). */
function refusal(payload: unknown): PayloadError {
  try {
    validatePayload(payload);
  } catch (error) {
    expect(error).toBeInstanceOf(PayloadError);
    return error as PayloadError;
  }
  throw new Error(`validatePayload accepted ${JSON.stringify(payload)}`);
}

describe('validatePayload', () => {
  test('accepts writes, deletes, every user form, a condition and extra fields, and returns the payload', () => {
    const payload = {
      writes: [
        tuple(),
        tuple({ user: 'group:eng#member', relation: 'viewer' }),
        tuple({ user: 'user:*', relation: 'viewer' }),
        tuple({ user: 'user:anne', relation: 'editor', condition: { name: 'in_hours', context: { tz: 'UTC' } } }),
        tuple({ user: 'user:bob', relation: 'owner', condition: { name: 'non_expired' } }),
      ],
      deletes: [tuple({ user: 'user:eve', relation: 'viewer' })],
      relations: ['viewer', 'editor'],
    };
    expect(validatePayload(payload)).toBe(payload);
    expect(validatePayload({ deletes: [tuple()] })).toEqual({ deletes: [tuple()] });
  });

  test(`accepts exactly ${MAX_TUPLES_PER_INTENT} operations, writes and deletes counted together`, () => {
    expect(() => validatePayload({ writes: writes(60), deletes: writes(100).slice(60) })).not.toThrow();
  });

  test.each([
    ['null', null],
    ['a string', 'writes'],
    ['a number', 1],
    ['an array', [tuple()]],
  ])('refuses a payload that is %s', (_what, payload) => {
    expect(refusal(payload).path).toBe('payload');
  });

  test.each([
    ['nothing at all', {}],
    ['empty lists', { writes: [], deletes: [] }],
    ['only extra fields', { relations: ['viewer'] }],
  ])('refuses a payload with no operation: %s', (_what, payload) => {
    const error = refusal(payload);
    expect(error.path).toBe('payload');
    expect(error.message).toContain('at least one');
  });

  test(`refuses ${MAX_TUPLES_PER_INTENT + 1} operations (OpenFGA's per-request limit)`, () => {
    expect(refusal({ writes: writes(101) }).path).toBe('payload');
    const split = refusal({ writes: writes(100).slice(0, 51), deletes: writes(101).slice(51) });
    expect(split.path).toBe('payload');
    expect(split.message).toContain('101 operations');
  });

  test.each([
    ['writes is an object', { writes: tuple() }, 'payload.writes'],
    ['writes is null', { writes: null }, 'payload.writes'],
    ['deletes is a string', { deletes: 'vpc:v1' }, 'payload.deletes'],
    ['a tuple key is null', { writes: [null] }, 'payload.writes[0]'],
    ['a tuple key is a string', { writes: [tuple(), 'project:p1 project vpc:v1'] }, 'payload.writes[1]'],
  ])('refuses a malformed list: %s', (_what, payload, path) => {
    expect(refusal(payload).path).toBe(path);
  });

  test.each([
    ['missing', undefined],
    ['a number', 1],
    ['empty', ''],
    ['without a type', 'anne'],
    ['with an empty type', ':anne'],
    ['with an empty id', 'user:'],
    ['with two ":"', 'user:anne:x'],
    ['with a space', 'user:anne smith'],
    ['with an empty relation', 'group:eng#'],
    ['with two "#"', 'group:eng#member#x'],
    ['a wildcard userset', 'user:*#member'],
    ['a bare wildcard', '*'],
    ['with a NUL character', 'user:an\0ne'],
    ['injecting JSON', 'user:a","relation":"owner'],
    ['longer than 512 characters', `user:${'a'.repeat(600)}`],
  ])('refuses a user %s', (_what, user) => {
    expect(refusal({ deletes: [tuple(), tuple({ user, relation: 'viewer' })] }).path).toBe('payload.deletes[1].user');
  });

  test.each([
    ['missing', undefined],
    ['empty', ''],
    ['with ":"', 'vpc:project'],
    ['with "#"', 'can#view'],
    ['with "@"', 'view@all'],
    ['with a space', 'can view'],
    ['longer than 50 characters', 'r'.repeat(51)],
  ])('refuses a relation %s', (_what, relation) => {
    expect(refusal({ writes: [tuple({ relation })] }).path).toBe('payload.writes[0].relation');
  });

  test.each([
    ['missing', undefined],
    ['without a type', 'v1'],
    ['with an empty id', 'vpc:'],
    ['a wildcard', 'vpc:*'],
    ['a userset', 'vpc:v1#owner'],
    ['with two ":"', 'vpc:v1:x'],
    ['with a space', 'vpc:v 1'],
    ['with a NUL character', 'vpc:v\0'],
    ['longer than 256 characters', `vpc:${'v'.repeat(260)}`],
  ])('refuses an object %s', (_what, object) => {
    expect(refusal({ writes: [tuple(), tuple({ object, relation: 'viewer' })] }).path).toBe('payload.writes[1].object');
  });

  test.each([
    ['null', null, 'payload.writes[0].condition'],
    ['a string', 'in_hours', 'payload.writes[0].condition'],
    ['an array', ['in_hours'], 'payload.writes[0].condition'],
    ['without a name', { context: {} }, 'payload.writes[0].condition.name'],
    ['with an empty name', { name: '' }, 'payload.writes[0].condition.name'],
    ['with a name with spaces', { name: 'in hours' }, 'payload.writes[0].condition.name'],
    ['with a context that is an array', { name: 'in_hours', context: [1] }, 'payload.writes[0].condition.context'],
    ['with a null context', { name: 'in_hours', context: null }, 'payload.writes[0].condition.context'],
  ])('refuses a condition that is %s', (_what, condition, path) => {
    expect(refusal({ writes: [tuple({ condition })] }).path).toBe(path);
  });

  test('refuses the same tuple key twice in writes, naming both places', () => {
    const error = refusal({ writes: [tuple(), tuple({ user: 'user:anne' }), tuple()] });
    expect(error.path).toBe('payload.writes[2]');
    expect(error.message).toContain('payload.writes[0]');
  });

  test('refuses a tuple key both written and deleted (OpenFGA refuses such a request)', () => {
    const error = refusal({ writes: [tuple()], deletes: [tuple({ user: 'user:anne' }), tuple()] });
    expect(error.path).toBe('payload.deletes[1]');
    expect(error.message).toContain('payload.writes[0]');
  });

  test('refuses the same tuple key twice even with different conditions', () => {
    const error = refusal({ writes: [tuple({ condition: { name: 'a' } }), tuple({ condition: { name: 'b' } })] });
    expect(error.path).toBe('payload.writes[1]');
  });

  test('tells tuple keys apart by every part', () => {
    expect(() =>
      validatePayload({
        writes: [tuple(), tuple({ user: 'project:p2' }), tuple({ relation: 'viewer' }), tuple({ object: 'vpc:v2' })],
      }),
    ).not.toThrow();
  });
});

describe('validatePayload: only what jsonb stores unchanged', () => {
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic.self = cyclic;
  test.each([
    [
      'a NUL in a condition context',
      { writes: [tuple({ condition: { name: 'c', context: { note: 'a\0b' } } })] },
      'payload.writes[0].condition.context.note',
    ],
    ['a NUL in an extra field', { writes: [tuple()], note: ['ok', 'x\0'] }, 'payload.note[1]'],
    [
      'a lone surrogate in a condition context',
      { writes: [tuple({ condition: { name: 'c', context: { s: 'a\uD800' } } })] },
      'payload.writes[0].condition.context.s',
    ],
    [
      'a lone surrogate in an extra key',
      { writes: [tuple()], extra: { ['k\uDC00']: 1 } },
      'payload.extra key "k\\udc00"',
    ],
    [
      'a BigInt',
      { writes: [tuple({ condition: { name: 'c', context: { n: 10n } } })] },
      'payload.writes[0].condition.context.n',
    ],
    ['NaN (JSON would store null)', { writes: [tuple()], score: Number.NaN }, 'payload.score'],
    ['a function', { writes: [tuple()], f: () => 1 }, 'payload.f'],
    ['a cycle', { writes: [tuple()], cyclic }, 'payload.cyclic.self'],
  ])('refuses %s, naming where', (_what, payload, path) => {
    expect(refusal(payload).path).toBe(path);
  });

  test('accepts what JSON writes faithfully: paired surrogates (emoji), a Date, nulls, nested extras', () => {
    const payload = {
      writes: [tuple({ condition: { name: 'c', context: { at: new Date(0), who: '🙂', none: null } } })],
      meta: { list: [1, 'two', true] },
    };
    expect(validatePayload(payload)).toBe(payload);
  });
});

describe('validatePartitionKey', () => {
  test('accepts any non-empty text up to 1024 UTF-8 bytes', () => {
    expect(validatePartitionKey('vpc:v1')).toBe('vpc:v1');
    expect(validatePartitionKey('k'.repeat(1_024))).toHaveLength(1_024);
    expect(validatePartitionKey('é'.repeat(512))).toHaveLength(512);
  });

  test.each([
    ['empty', ''],
    ['missing', undefined],
    ['a number', 42],
    ['1025 bytes long', 'k'.repeat(1_025)],
    ['1026 bytes in 342 three-byte characters', '界'.repeat(342)],
    ['with a NUL character', 'vpc:\0v1'],
    ['with a lone surrogate (it would be stored as U+FFFD: another key)', 'vpc:\uD800v1'],
  ])('refuses a key that is %s', (_what, key) => {
    expect(() => validatePartitionKey(key, 'intents[3].partitionKey')).toThrow(
      expect.objectContaining({ name: 'PayloadError', path: 'intents[3].partitionKey' }),
    );
  });
});

describe('enqueue refuses bad input before writing anything', () => {
  const spec = defineOutbox({ table: 'app.outbox', partitionColumn: 'resource_id' });
  const good = (partitionKey = 'vpc:v1'): EnqueueInput => ({ partitionKey, payload: { writes: [tuple()] } });

  beforeAll(async () => {
    await createOutboxTable(t.db, spec);
    await sql`create table app.resources (id text primary key)`.execute(t.db);
    await sql`create table app.y (id int)`.execute(t.db);
  });

  /**
   * Runs `work` in a transaction that first writes a resource row, as a service does, and returns
   * what it threw. Asserts that neither the resource nor any intent was written.
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  async function failedTransaction(work: (trx: Transaction<any>) => Promise<unknown>): Promise<unknown> {
    const error = await t.db
      .transaction()
      .execute(async (trx) => {
        await sql`insert into app.resources values ('vpc:v1')`.execute(trx);
        await work(trx);
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    const counts = await sql<{ resources: string; intents: string }>`
      select (select count(*) from app.resources) as resources, (select count(*) from app.outbox) as intents`.execute(
      t.db,
    );
    expect(counts.rows[0]).toEqual({ resources: '0', intents: '0' });
    return error;
  }

  test.each([
    ['a payload that is not an object', { partitionKey: 'vpc:v1', payload: 'write it' }, 'payload'],
    ['a payload with no operation', { partitionKey: 'vpc:v1', payload: { writes: [] } }, 'payload'],
    ['a payload with 101 operations', { partitionKey: 'vpc:v1', payload: { writes: writes(101) } }, 'payload'],
    [
      'a bad user',
      { partitionKey: 'vpc:v1', payload: { writes: [tuple({ user: 'anne' })] } },
      'payload.writes[0].user',
    ],
    [
      'a bad object',
      { partitionKey: 'vpc:v1', payload: { deletes: [tuple({ object: 'vpc:*' })] } },
      'payload.deletes[0].object',
    ],
    [
      'a bad relation',
      { partitionKey: 'vpc:v1', payload: { writes: [tuple({ relation: 'a b' })] } },
      'payload.writes[0].relation',
    ],
    [
      'a bad condition',
      { partitionKey: 'vpc:v1', payload: { writes: [tuple({ condition: { name: '' } })] } },
      'payload.writes[0].condition.name',
    ],
    [
      'a duplicate tuple key',
      { partitionKey: 'vpc:v1', payload: { writes: [tuple()], deletes: [tuple()] } },
      'payload.deletes[0]',
    ],
    ['an empty partition key', { partitionKey: '', payload: { writes: [tuple()] } }, 'partitionKey'],
    ['no partition key', { payload: { writes: [tuple()] } }, 'partitionKey'],
    [
      'a partition key with a NUL character',
      { partitionKey: 'vpc:\0', payload: { writes: [tuple()] } },
      'partitionKey',
    ],
  ])('enqueue of %s: a PayloadError, nothing written', async (_what, intent, path) => {
    const error = await failedTransaction((trx) => enqueue(trx, spec, intent as EnqueueInput));
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe(path);
  });

  test('enqueueMany with one bad intent among good ones: its index in the path, none of them written', async () => {
    const bad = { partitionKey: 'vpc:v3', payload: { writes: [tuple(), tuple({ object: 'vpc v3' })] } };
    const error = await failedTransaction((trx) => enqueueMany(trx, spec, [good('vpc:v1'), good('vpc:v2'), bad]));
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe('intents[2].payload.writes[1].object');
  });

  test('enqueueMany with a bad partition key in the middle', async () => {
    const error = await failedTransaction((trx) => enqueueMany(trx, spec, [good(), good(''), good()]));
    expect((error as PayloadError).path).toBe('intents[1].partitionKey');
  });

  test(`enqueueMany of more than ${MAX_INTENTS_PER_ENQUEUE} intents`, async () => {
    const many = Array.from({ length: MAX_INTENTS_PER_ENQUEUE + 1 }, (_, i) => good(`vpc:v${i}`));
    const error = await failedTransaction((trx) => enqueueMany(trx, spec, many));
    expect((error as PayloadError).path).toBe('intents');
  });

  test('text jsonb cannot store (a NUL in a condition context) is a PayloadError, not a driver error', async () => {
    const bad = { writes: [tuple({ condition: { name: 'c', context: { note: 'a\0b' } } })] };
    const error = await failedTransaction((trx) => enqueue(trx, spec, { partitionKey: 'vpc:v1', payload: bad }));
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe('payload.writes[0].condition.context.note');
  });

  test('enqueueMany of something that is not an array', async () => {
    const error = await failedTransaction((trx) => enqueueMany(trx, spec, good() as unknown as EnqueueInput[]));
    expect((error as PayloadError).path).toBe('intents');
  });

  test('hostile text in keys and tuples is stored as data, never run as SQL', async () => {
    const hostile = "vpc:x');drop_table_app.y;--";
    const id = await t.db.transaction().execute((trx) =>
      enqueue(trx, spec, {
        partitionKey: "x'); drop table app.y; --",
        payload: { writes: [tuple({ object: hostile })], note: "'); drop table app.y; --" },
      }),
    );
    const row = await sql<{ resource_id: string; payload: { writes: TupleKey[]; note: string } }>`
      select resource_id, payload from app.outbox where id = ${id}`.execute(t.db);
    expect(row.rows[0]?.resource_id).toBe("x'); drop table app.y; --");
    expect(row.rows[0]?.payload.writes[0]?.object).toBe(hostile);
    expect(row.rows[0]?.payload.note).toBe("'); drop table app.y; --");
    const y = await sql<{ exists: boolean }>`select to_regclass('app.y') is not null as exists`.execute(t.db);
    expect(y.rows[0]?.exists).toBe(true);
    await sql`delete from app.outbox`.execute(t.db);
  });
});

const fresh = freshOutboxes(t, 'stored');
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };

describe('enqueue validates what it stores', () => {
  test('a sparse writes array (a hole where a tuple should be) is a PayloadError, not a null tuple in the row', async () => {
    const spec = await fresh();
    const writes = new Array(2);
    writes[1] = { user: 'project:p1', relation: 'project', object: 'vpc:v1' };
    const error = await t.db
      .transaction()
      .execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:sparse', payload: { writes } }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe('payload.writes[0]');
    expect(await headFlags(t.db, spec)).toEqual([]);
  });

  test('a sparse intents array is a PayloadError naming the hole, not a NOT NULL violation from the driver', async () => {
    const spec = await fresh();
    const intents = new Array(2);
    intents[1] = { partitionKey: 'vpc:sparse', payload };
    const error = await t.db
      .transaction()
      .execute((trx) => enqueueMany(trx, spec, intents))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).path).toBe('intents[0].partitionKey');
  });

  test('a payload or tuple key with its own toJSON is refused: it would store something other than what was validated', async () => {
    const spec = await fresh();
    const tuple = { user: 'project:p1', relation: 'project', object: 'vpc:v1' };
    const cases: Array<[unknown, string]> = [
      [{ writes: [tuple], toJSON: () => ({ writes: [] }) }, 'payload'],
      [{ writes: [{ ...tuple, toJSON: () => ({ user: 'x' }) }] }, 'payload.writes[0]'],
    ];
    for (const [bad, path] of cases) {
      const error = await t.db
        .transaction()
        .execute((trx) => enqueue(trx, spec, { partitionKey: 'vpc:json', payload: bad as IntentPayload }))
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PayloadError);
      expect((error as PayloadError).path).toBe(path);
    }
    expect(await headFlags(t.db, spec)).toEqual([]);
  });
});
