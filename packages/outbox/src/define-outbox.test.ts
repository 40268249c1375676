import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { OUTBOX_COLUMN_NAMES } from './columns.js';
import {
  defineOutbox,
  REGISTER_OUTBOX_PARTITION,
  TUPLE_OUTBOX_PARTITION,
  type OutboxSpecInput,
} from './define-outbox.js';
import { OutboxConfigError } from './errors.js';
import { outboxStats } from './stats.js';
import { tableNames } from './table-names.js';
import { freshOutboxes } from './testing/outbox-tables.js';

const valid: OutboxSpecInput = { table: 'vpc.fga_register_outbox', partitionColumn: REGISTER_OUTBOX_PARTITION };

/** The OutboxConfigError that `defineOutbox(input)` throws (fails the test when it does not throw). */
function refusal(input: unknown): OutboxConfigError {
  try {
    defineOutbox(input as OutboxSpecInput);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxConfigError);
    return error as OutboxConfigError;
  }
  throw new Error(`defineOutbox accepted ${JSON.stringify(input)}`);
}

describe('defineOutbox', () => {
  test('builds a frozen spec with the documented defaults', () => {
    const spec = defineOutbox(valid);
    expect(spec).toEqual({
      table: 'vpc.fga_register_outbox',
      schema: 'vpc',
      tableName: 'fga_register_outbox',
      partitionColumn: 'resource_id',
      channel: 'vpc_fga_register_outbox',
      maxAttempts: 10,
      supersededCoverageSql: undefined,
    });
    expect(Object.isFrozen(spec)).toBe(true);
  });

  test('keeps an explicit channel, maxAttempts and (trimmed) coverage SQL', () => {
    const spec = defineOutbox({
      table: 'iam.fga_outbox',
      partitionColumn: TUPLE_OUTBOX_PARTITION,
      channel: 'iam_outbox',
      maxAttempts: 3,
      supersededCoverageSql: "  (s.payload->'relations') @> (t.payload->'relations')  ",
    });
    expect(spec.partitionColumn).toBe('tuple_key');
    expect(spec.channel).toBe('iam_outbox');
    expect(spec.maxAttempts).toBe(3);
    expect(spec.supersededCoverageSql).toBe("(s.payload->'relations') @> (t.payload->'relations')");
  });

  test('refuses a missing spec object', () => {
    expect(refusal(undefined).field).toBe('spec');
    expect(refusal(null).field).toBe('spec');
    expect(refusal('vpc.outbox').field).toBe('spec');
  });

  test('partitionColumn is required and has no default', () => {
    for (const partitionColumn of [undefined, null, '']) {
      const error = refusal({ table: 'vpc.outbox', partitionColumn });
      expect(error.field).toBe('partitionColumn');
      expect(error.message).toContain('resource_id');
      expect(error.message).toContain('tuple_key');
    }
  });

  test.each(['id', 'payload', 'created_at', 'attempt_count', 'sent_at', 'is_head', ...OUTBOX_COLUMN_NAMES])(
    'partitionColumn cannot take the name of a column the table has anyway: %s',
    (partitionColumn) => {
      const error = refusal({ table: 'vpc.outbox', partitionColumn });
      expect(error.field).toBe('partitionColumn');
      expect(error.message).toContain('own columns');
    },
  );

  test('partitionColumn cannot be verify_after, which the late-write step adds (it once could, and that step failed)', () => {
    const error = refusal({ table: 'vpc.outbox', partitionColumn: 'verify_after' });
    expect(error.field).toBe('partitionColumn');
    expect(error.message).toContain('"verify_after" is one of the outbox table\'s own columns');
  });

  test.each([
    ['no schema', 'fga_register_outbox'],
    ['three parts', 'db.vpc.outbox'],
    ['an empty schema', '.outbox'],
    ['an empty table name', 'vpc.'],
    ['upper case', 'VPC.Outbox'],
    ['a quoted name', 'vpc."outbox"'],
    ['a space', 'vpc.fga outbox'],
    ['a leading digit', 'vpc.1outbox'],
    ['a statement injected with ";"', 'x; drop table y'],
    ['a statement injected into the table name', 'vpc.x; drop table y'],
    ['a statement injected into the schema', 'x; drop table y.outbox'],
    ['a comment', 'vpc.outbox--'],
    ['a table name over 40 characters (no room for its index names)', `vpc.${'t'.repeat(41)}`],
    ['a schema over 63 characters', `${'s'.repeat(64)}.outbox`],
    ['not a string', 42],
  ])('refuses a table with %s', (_what, table) => {
    expect(refusal({ table, partitionColumn: 'resource_id' }).field).toBe('table');
  });

  test('names the part of the table that is wrong', () => {
    expect(refusal({ table: 'Vpc.outbox', partitionColumn: 'resource_id' }).message).toContain('the schema');
    expect(refusal({ table: 'vpc.Outbox', partitionColumn: 'resource_id' }).message).toContain('the table name');
  });

  test('accepts a 40-character table name (its derived index names fit in 63 bytes)', () => {
    expect(defineOutbox({ table: `vpc.${'t'.repeat(40)}`, partitionColumn: 'resource_id' }).tableName).toHaveLength(40);
  });

  test.each([
    'resource_id; drop table y',
    'resource_id"; drop table y; --',
    'Resource_Id',
    'resource id',
    'resource-id',
    '1resource',
    'r'.repeat(64),
    7,
  ])('refuses partitionColumn %j', (partitionColumn) => {
    expect(refusal({ table: 'vpc.outbox', partitionColumn }).field).toBe('partitionColumn');
  });

  test.each([
    "vpc'); select pg_sleep(10); --",
    'vpc"outbox',
    "vpc'outbox",
    'vpc outbox',
    'Vpc_Outbox',
    '',
    'c'.repeat(64),
  ])('refuses channel %j', (channel) => {
    expect(refusal({ ...valid, channel }).field).toBe('channel');
  });

  test('refuses a default channel that would be longer than an identifier', () => {
    expect(refusal({ table: `${'s'.repeat(40)}.${'t'.repeat(30)}`, partitionColumn: 'resource_id' }).field).toBe(
      'channel',
    );
  });

  test.each([0, -1, 1.5, 1_001, Number.NaN, '10'])('refuses maxAttempts %j', (maxAttempts) => {
    expect(refusal({ ...valid, maxAttempts }).field).toBe('maxAttempts');
  });

  test('accepts maxAttempts from 1 to 1000', () => {
    expect(defineOutbox({ ...valid, maxAttempts: 1 }).maxAttempts).toBe(1);
    expect(defineOutbox({ ...valid, maxAttempts: 1_000 }).maxAttempts).toBe(1_000);
  });

  test.each([
    ['a second statement', 's.payload @> t.payload; delete from vpc.outbox'],
    ['a trailing ";"', 's.id > 0;'],
    ['a line comment', 's.id > 0 -- and t.id > 0'],
    ['a block comment', 's.id > 0 /* x */'],
    ['a ")" that escapes its group', 'true) or (true'],
    ['an unclosed "("', '(s.id > t.id'],
    ['blank text', '   '],
    ['not a string', 1],
  ])('refuses coverage SQL with %s', (_what, supersededCoverageSql) => {
    expect(refusal({ ...valid, supersededCoverageSql }).field).toBe('supersededCoverageSql');
  });

  test('every refusal is an Error that names its field in the message', () => {
    const error = refusal({ table: 'x; drop table y', partitionColumn: 'resource_id' });
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('OutboxConfigError');
    expect(error.message).toMatch(/^table: /);
    expect(error.message).toContain('x; drop table y');
  });
});

const t = useTestDatabase();
const fresh = freshOutboxes(t, 'define');
const run = (text: string) => sql.raw(text).execute(t.db);

describe('defineOutbox: what it refuses, against the real Postgres', () => {
  test('coverage SQL whose parentheses balance only when those inside string literals are counted is refused', async () => {
    const injected = "'(' is not null) or (true or ')' is null";
    const error = refusal({ table: 'edges.cover', partitionColumn: 'resource_id', supersededCoverageSql: injected });
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect(error.field).toBe('supersededCoverageSql');
    // What it did when accepted: spliced as `and (…)`, it turns outboxStats' "has a covering
    // successor" into "has any successor at all": a poisoned row counted superseded by a delivered
    // row of another partition (the reconciler's own start check refuses it; outboxStats has none).
    const spec = await fresh();
    const names = tableNames(spec);
    await run(
      `insert into ${names.table} (resource_id, payload, attempt_count) values ('vpc:a', '{}', 10), ('vpc:a', '{}', 10)`,
    );
    await run(`insert into ${names.table} (resource_id, payload, sent_at) values ('vpc:a', '{}', now())`);
    const honest = Object.freeze({ ...spec, supersededCoverageSql: 'false' });
    const widened = Object.freeze({ ...spec, supersededCoverageSql: injected });
    expect((await outboxStats(t.db, honest)).superseded).toBe(0);
    expect((await outboxStats(t.db, widened)).superseded).toBe(2);
  });

  test('coverage SQL with a parenthesis inside a string literal is accepted (it was refused as unbalanced)', () => {
    const spec = defineOutbox({
      table: 'edges.cover',
      partitionColumn: 'resource_id',
      supersededCoverageSql: "s.payload->>'note' is distinct from ':)'",
    });
    expect(spec.supersededCoverageSql).toBe("s.payload->>'note' is distinct from ':)'");
  });

  test('a schema starting with pg_ is an OutboxConfigError naming the table, not a database error at migration time', async () => {
    const error = refusal({ table: 'pg_outbox.register', partitionColumn: 'resource_id' });
    expect(error.field).toBe('table');
    expect(error.message).toContain('pg_');
    // What the migration says otherwise:
    await expect(run('create schema pg_outbox')).rejects.toThrow(/unacceptable schema name/);
  });
});
