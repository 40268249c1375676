import { sql } from 'kysely';
import { OutboxConfigError, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { balancedSql, tableNames } from '@outbox/outbox/protocol';

/** Plans (never runs) the spec's coverage fragment over two rows of the live table: a wrong one fails at start, as an {@link OutboxConfigError}. */
export async function verifyCoverageSql(db: AnyKysely, spec: OutboxSpec): Promise<void> {
  const fragment = spec.supersededCoverageSql;
  if (fragment === undefined) return;
  if (!balancedSql(fragment)) {
    throw new OutboxConfigError(
      'supersededCoverageSql',
      `has unbalanced parentheses or quotes: ${JSON.stringify(fragment)}`,
    );
  }
  const table = sql.raw(tableNames(spec).table);
  try {
    await sql`select 1 from ${table} s, ${table} t where false and (${sql.raw(fragment)})`.execute(db);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    // In Postgres `->` and `@>` share one precedence and bind left to right, so
    // `s.payload->'r' @> t.payload->'r'` reads `((s.payload->'r') @> t.payload)->'r'`.
    const hint = /operator does not exist: boolean ->/.test(reason)
      ? ` Parenthesise the operands: (s.payload->'relations') @> (t.payload->'relations').`
      : '';
    throw new OutboxConfigError(
      'supersededCoverageSql',
      `is not a valid boolean expression over s (the delivered successor) and t (the poisoned row) of ${spec.table}: ${reason}.${hint}`,
      { cause: error },
    );
  }
}
