// Test helpers shared by the outbox's test files. Not part of the package's build.
import { sql } from 'kysely';
import type { AnyKysely } from '../any-kysely.js';
import { defineOutbox, type OutboxSpec, type OutboxSpecInput } from '../define-outbox.js';
import { OutboxTableError } from '../errors.js';
import { createOutboxTable } from '../schema/migration.js';
import { verifyOutboxTable } from '../schema/verify.js';

/**
 * A function that creates a new outbox table in `schema` on each call (`<schema>.outbox_<n>`, a
 * register-outbox unless `input` says otherwise) and returns its spec.
 */
export function freshOutboxes(t: { readonly db: AnyKysely }, schema: string) {
  let tables = 0;
  return async (input: Partial<OutboxSpecInput> = {}): Promise<OutboxSpec> => {
    tables += 1;
    const spec = defineOutbox({ table: `${schema}.outbox_${tables}`, partitionColumn: 'resource_id', ...input });
    await createOutboxTable(t.db, spec);
    return spec;
  };
}

/** What `verifyOutboxTable` reports missing, or undefined when it passes. */
export async function verifyGaps(db: AnyKysely, spec: OutboxSpec): Promise<readonly string[] | undefined> {
  const error = await verifyOutboxTable(db, spec).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (error === undefined) return undefined;
  if (!(error instanceof OutboxTableError)) throw error;
  return error.missing;
}

/** Each row's partition key and head flag, in id order. */
export async function headFlags(db: AnyKysely, spec: OutboxSpec): Promise<{ resource_id: string; is_head: boolean }[]> {
  const result = await sql<{ resource_id: string; is_head: boolean }>`
    select ${sql.raw(`"${spec.partitionColumn}"`)} as resource_id, is_head from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} order by id`.execute(
    db,
  );
  return result.rows;
}
