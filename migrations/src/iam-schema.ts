import { sql, type ColumnType } from 'kysely';
import type { AnyKysely, TupleOutboxTable } from '@outbox/outbox';
import { createSchemaIfMissing } from './resource-table.js';

/** `iam.organizations`. */
export interface OrganizationTable {
  id: string;
  name: string;
  created_by: string;
  created_at: ColumnType<Date, never, never>;
}

/** `iam.projects`: every project belongs to one organization. */
export interface ProjectTable {
  id: string;
  organization_id: string;
  name: string;
  created_by: string;
  created_at: ColumnType<Date, never, never>;
}

/**
 * `iam.project_grants`: the relation set each user holds DIRECTLY on a project (inherited access,
 * e.g. an organization admin's ownership, is OpenFGA's business). It is the source of truth: the
 * PUT that changes a row enqueues, in the same transaction, the grant's whole new state.
 */
export interface ProjectGrantTable {
  project_id: string;
  user_id: string;
  relations: string[];
  updated_at: ColumnType<Date, never, never>;
}

/** The iam schema as Kysely sees it. */
export interface IamDatabase {
  'iam.organizations': OrganizationTable;
  'iam.projects': ProjectTable;
  'iam.project_grants': ProjectGrantTable;
  'iam.fga_outbox': TupleOutboxTable;
}

/** Creates the iam schema's own tables (the outbox is created from its spec, beside them). */
export async function createIamTables(db: AnyKysely): Promise<void> {
  await createSchemaIfMissing(db, 'iam');
  await db.schema
    .withSchema('iam')
    .createTable('organizations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema
    .withSchema('iam')
    .createTable('projects')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', (c) => c.notNull().references('organizations.id'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('projects_organization_name_key', ['organization_id', 'name'])
    .execute();
  await db.schema
    .withSchema('iam')
    .createTable('project_grants')
    .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('relations', sql`text[]`, (c) => c.notNull())
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('project_grants_pkey', ['project_id', 'user_id'])
    .execute();
}

/** Drops the iam schema's own tables. */
export async function dropIamTables(db: AnyKysely): Promise<void> {
  for (const table of ['project_grants', 'projects', 'organizations']) {
    await db.schema.withSchema('iam').dropTable(table).ifExists().execute();
  }
}
