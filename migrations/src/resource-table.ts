import { OutboxConfigError, type AnyKysely } from '@outbox/outbox';
import { sql } from 'kysely';

/** SQL type of a service-specific column of a resource table. */
export type ResourceColumnType = 'text' | 'integer' | 'boolean';

/** One service-specific column. */
export interface ResourceColumn {
  readonly type: ResourceColumnType;
  /** Default false: a column is `not null` unless it says otherwise. */
  readonly nullable?: boolean;
}

/**
 * A register service's resource table. Every such table has the same five leading columns, so the
 * service kit can write and authorize any of them:
 *
 * | column | |
 * | --- | --- |
 * | `id text primary key` | the object id in OpenFGA (`<fgaType>:<id>`) |
 * | `project_id text not null` | the project it belongs to (tuple `project:<project_id> project <object>`) |
 * | `name text not null` | unique within the project |
 * | `created_by text not null` | the owner (tuple `user:<created_by> owner <object>`); deletion removes that tuple |
 * | `created_at timestamptz not null` | |
 *
 * `columns` adds the service's own.
 */
export interface ResourceTable<
  C extends Readonly<Record<string, ResourceColumn>> = Readonly<Record<string, ResourceColumn>>,
> {
  readonly schema: string;
  readonly table: string;
  /** `<schema>.<table>`. */
  readonly qualifiedName: string;
  /** The service-specific columns. */
  readonly columns: C;
}

/** The columns every resource table starts with (see {@link ResourceTable}). */
export const COMMON_RESOURCE_COLUMNS = ['id', 'project_id', 'name', 'created_by', 'created_at'] as const;

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Describes a resource table; the migration creates it from this description and the service kit
 * reads and writes it, so the two cannot disagree on a column name (its types check the service's
 * field rules against `columns`). A later change is a new migration, not an edit of a shipped one.
 *
 * @example
 * export const vpcTable = defineResourceTable({ schema: 'vpc', table: 'vpcs', columns: { cidr_block: { type: 'text' } } });
 */
export function defineResourceTable<const C extends Readonly<Record<string, ResourceColumn>>>(input: {
  readonly schema: string;
  readonly table: string;
  readonly columns: C;
}): ResourceTable<C> {
  for (const [what, value] of [
    ['schema', input.schema],
    ['table', input.table],
    ...Object.keys(input.columns).map((c) => ['column', c]),
  ] as const) {
    if (!IDENTIFIER.test(value))
      throw new OutboxConfigError(
        `resource table ${what}`,
        `expected a lower-case SQL identifier, got ${JSON.stringify(value)}`,
      );
  }
  for (const column of Object.keys(input.columns)) {
    if ((COMMON_RESOURCE_COLUMNS as readonly string[]).includes(column)) {
      throw new OutboxConfigError(`resource table column ${column}`, 'every resource table has it already');
    }
  }
  return Object.freeze({
    schema: input.schema,
    table: input.table,
    qualifiedName: `${input.schema}.${input.table}`,
    columns: Object.freeze(input.columns),
  });
}

/**
 * Creates `schema` unless it exists. Looks first: CREATE SCHEMA checks the database's CREATE
 * privilege before IF NOT EXISTS, so a migration role that may create in its (existing) schema but
 * not in the database — the default for a non-owner since PostgreSQL 15 — would fail on a schema
 * that is already there.
 */
export async function createSchemaIfMissing(db: AnyKysely, schema: string): Promise<void> {
  const found = await sql`select 1 from pg_catalog.pg_namespace where nspname = ${schema}`.execute(db);
  if (found.rows.length === 0) await db.schema.createSchema(schema).ifNotExists().execute();
}

/** Creates the schema (if needed) and the resource table with its project index. */
export async function createResourceTable(db: AnyKysely, table: ResourceTable): Promise<void> {
  await createSchemaIfMissing(db, table.schema);
  let create = db.schema
    .withSchema(table.schema)
    .createTable(table.table)
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('project_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`));
  for (const [name, column] of Object.entries(table.columns)) {
    create = create.addColumn(name, column.type, (c) => (column.nullable ? c : c.notNull()));
  }
  // A name is how people tell resources apart inside a project; the unique key also gives the
  // list-by-project query its index.
  create = create.addUniqueConstraint(`${table.table}_project_name_key`, ['project_id', 'name']);
  await create.execute();
}

/** Drops the resource table (the schema stays: its outbox may still be in it). */
export async function dropResourceTable(db: AnyKysely, table: ResourceTable): Promise<void> {
  await db.schema.withSchema(table.schema).dropTable(table.table).ifExists().execute();
}
