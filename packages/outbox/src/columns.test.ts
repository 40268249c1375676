import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { columnsAddedBy, OUTBOX_COLUMN_NAMES, OUTBOX_COLUMNS, type ColumnStep } from './columns.js';
import { defineOutbox, type OutboxSpec } from './define-outbox.js';
import { createOutboxTable, outboxMigrations } from './schema/migration.js';

const t = useTestDatabase();

/** The live table's columns, name → `format_type`, in column order. */
async function liveColumns(spec: OutboxSpec): Promise<Record<string, string>> {
  const result = await sql<{ name: string; type: string }>`
    select a.attname as name, format_type(a.atttypid, a.atttypmod) as type from pg_attribute a
    where a.attrelid = ${`"${spec.schema}"."${spec.tableName}"`}::regclass and a.attnum > 0 and not a.attisdropped
    order by a.attnum`.execute(t.db);
  return Object.fromEntries(result.rows.map((r) => [r.name, r.type]));
}

const typesOf = (names: readonly string[]) =>
  Object.fromEntries(names.map((name) => [name, OUTBOX_COLUMNS[name as keyof typeof OUTBOX_COLUMNS].type]));

describe('the outbox columns (columns.ts)', () => {
  test("are the released DDL's: the table this release creates has exactly them and the partition column", async () => {
    const spec = defineOutbox({ table: 'columns.created', partitionColumn: 'tuple_key' });
    await createOutboxTable(t.db, spec);
    expect(await liveColumns(spec)).toStrictEqual({ ...typesOf(OUTBOX_COLUMN_NAMES), tuple_key: 'text' });
  });

  test('are added by the steps they name, and the ledger step takes its own back down', async () => {
    const spec = defineOutbox({ table: 'columns.stepped', partitionColumn: 'resource_id' });
    const steps = outboxMigrations(spec, { prefix: '' });
    const after: ColumnStep[] = [];
    for (const step of ['0001_outbox_table', '0003_ledger_life', '0004_late_write_verification'] as const) {
      await steps[step]?.up(t.db);
      after.push(step);
      const expected = typesOf(after.flatMap(columnsAddedBy));
      expect(await liveColumns(spec), step).toStrictEqual({ ...expected, resource_id: 'text' });
    }
    await steps['0003_ledger_life']?.down(t.db);
    const left = Object.keys(await liveColumns(spec));
    expect(left.filter((name) => columnsAddedBy('0003_ledger_life').includes(name as never))).toEqual([]);
    expect(left).toEqual(expect.arrayContaining([...columnsAddedBy('0001_outbox_table'), 'verify_after']));
  });
});
