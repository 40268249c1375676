import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { sqlLiteral } from './sql-literal.js';

const t = useTestDatabase();

/** What Postgres reads back from a literal, with standard_conforming_strings as given. */
async function readBack(literal: string, standardConformingStrings: 'on' | 'off'): Promise<unknown[]> {
  return t.db.transaction().execute(async (trx) => {
    await sql.raw(`set local standard_conforming_strings = ${standardConformingStrings}`).execute(trx);
    const result = await sql
      .raw<{ v: unknown }>(`select v from unnest(${literal}) with ordinality as u(v, n) order by n`)
      .execute(trx);
    return result.rows.map((r) => r.v);
  });
}

describe('sqlLiteral', () => {
  const awkward = [
    "it's",
    "''",
    'back\\slash',
    "\\'",
    'ends with a backslash\\',
    '$$ dollar $tag$',
    'line\nbreak\ttab',
    'vpc:ü✓🙂',
    ' ',
    'user:a#member@group:b',
    '{braces,and,commas}',
    '"quoted"',
    'NULL',
  ];

  test.each(['on', 'off'] as const)(
    'text arrays read back exactly, standard_conforming_strings %s',
    async (setting) => {
      expect(await readBack(sqlLiteral.textArray(awkward), setting)).toEqual(awkward);
      expect(await readBack(sqlLiteral.textArray([]), setting)).toEqual([]);
    },
  );

  test('text arrays refuse NUL (Postgres text cannot hold it) and non-strings', () => {
    expect(() => sqlLiteral.textArray(['a\0b'])).toThrow(TypeError);
    expect(() => sqlLiteral.textArray([42 as unknown as string])).toThrow(TypeError);
  });

  test('bigint arrays take decimal ids only', async () => {
    const ids = ['1', '-5', '9223372036854775807'];
    expect(await readBack(sqlLiteral.bigintArray(ids), 'on')).toEqual(ids);
    expect(await readBack(sqlLiteral.bigintArray([]), 'on')).toEqual([]);
    for (const bad of ['', '1.5', '1e3', '1,2', '1}', "1'); drop table x; --", ' 1', '12345678901234567890']) {
      expect(() => sqlLiteral.bigintArray([bad]), bad).toThrow(TypeError);
    }
  });

  test('integers and booleans are checked', () => {
    expect(sqlLiteral.integer(100)).toBe('100');
    expect(sqlLiteral.integer(-1)).toBe('-1');
    for (const bad of [1.5, Number.NaN, Infinity, 2 ** 53]) expect(() => sqlLiteral.integer(bad)).toThrow(TypeError);
    expect(sqlLiteral.boolean(true)).toBe('true');
    expect(sqlLiteral.boolean(false)).toBe('false');
    expect(() => sqlLiteral.boolean('true' as unknown as boolean)).toThrow(TypeError);
  });
});
