import type { COMMON_RESOURCE_COLUMNS, ResourceTable } from '@outbox/migrations';
import { sql } from 'kysely';
import { ServiceConfigError } from './errors.js';
import type { AnyKysely } from '@outbox/outbox';

/** A table a service reads and writes, and the columns it relies on (name → `format_type` spelling, e.g. `text[]`). */
export interface ExpectedTable {
  /** Schema-qualified, e.g. `vpc.vpcs`. */
  readonly table: string;
  readonly columns: Readonly<Record<string, string>>;
}

const SQL_TYPES = { text: 'text', integer: 'integer', boolean: 'boolean' } as const;

/** The columns of a register service's resource table: the common ones and the service's own. */
export function resourceTableColumns(table: ResourceTable): ExpectedTable {
  const common: Record<(typeof COMMON_RESOURCE_COLUMNS)[number], string> = {
    id: 'text',
    project_id: 'text',
    name: 'text',
    created_by: 'text',
    created_at: 'timestamp with time zone',
  };
  const own = Object.fromEntries(Object.entries(table.columns).map(([name, column]) => [name, SQL_TYPES[column.type]]));
  return { table: table.qualifiedName, columns: { ...common, ...own } };
}

/**
 * Checks at start that the tables a service's routes use exist with the columns they use. The outbox
 * table is verified against its spec apart; without this check, a database whose resource table is
 * missing (a migration rolled back by hand, a table dropped, the wrong database) started a service
 * that answered /readyz 200 and then 500 to every request. Throws a {@link ServiceConfigError}
 * naming every table or column that is missing.
 */
export async function verifyServiceTables(db: AnyKysely, tables: readonly ExpectedTable[]): Promise<void> {
  const problems: string[] = [];
  for (const expected of tables) {
    const [schema, name] = expected.table.split('.') as [string, string];
    const found = await sql<{ oid: number | null }>`select to_regclass(${`"${schema}"."${name}"`})::oid as oid`.execute(
      db,
    );
    const oid = found.rows[0]?.oid;
    if (oid === null || oid === undefined) {
      problems.push(`the table ${expected.table} does not exist`);
      continue;
    }
    const columns = await sql<{ name: string; type: string }>`
      select attname as name, format_type(atttypid, atttypmod) as type
      from pg_attribute where attrelid = ${oid} and attnum > 0 and not attisdropped`.execute(db);
    const actual = new Map(columns.rows.map((c) => [c.name, c.type]));
    for (const [column, type] of Object.entries(expected.columns)) {
      const got = actual.get(column);
      if (got === undefined) problems.push(`${expected.table} has no column ${column} ${type}`);
      else if (got !== type) problems.push(`${expected.table}.${column} should be ${type}, is ${got}`);
    }
  }
  if (problems.length > 0) {
    throw new ServiceConfigError(
      'databaseUrl',
      `the database is not migrated for this service (run pnpm migrate): ${problems.join('; ')}`,
    );
  }
}
