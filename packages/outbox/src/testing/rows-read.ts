// A test helper shared by the outbox's test files. Not part of the package's build.
import { sql } from 'kysely';
import type { OutboxSpec } from '../define-outbox.js';
import type { AnyKysely } from '../any-kysely.js';

/** Rows of `spec`'s table this transaction read so far (heap tuples fetched through indexes and scanned). */
export async function rowsRead(trx: AnyKysely, spec: OutboxSpec): Promise<number> {
  const stats = await sql<{ read: string }>`
    select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) as read
    from pg_stat_xact_user_tables where relid = ${`"${spec.schema}"."${spec.tableName}"`}::regclass`.execute(trx);
  return Number(stats.rows[0]?.read ?? 0);
}
