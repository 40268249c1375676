import { sql } from 'kysely';
import type { AnyKysely } from '../any-kysely.js';

/** Runs SQL statements one by one, in order, inside whatever transaction `db` is. */
export async function executeStatements(db: AnyKysely, statements: readonly string[]): Promise<void> {
  for (const statement of statements) await sql.raw(statement).execute(db);
}
