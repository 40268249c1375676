import { OutboxConfigError, type AnyKysely } from '@outbox/outbox';
import { SQLSTATE, sqlState } from '@outbox/outbox/protocol';
import { sql } from 'kysely';

/** Where the incremental audit keeps its changelog positions by default. */
export const AUDIT_CURSOR_TABLE = 'public.outbox_audit_cursor';

const QUALIFIED = /^([a-z_][a-z0-9_]{0,62})\.([a-z_][a-z0-9_]{0,62})$/;

/** `"schema"."table"` of a validated `schema.table`. */
export function auditCursorTableName(table: string): string {
  const match = typeof table === 'string' ? QUALIFIED.exec(table) : null;
  if (!match)
    throw new OutboxConfigError(
      'cursorTable',
      `expected "<schema>.<table>" of lower-case SQL identifiers, got ${JSON.stringify(table)}`,
    );
  return `"${match[1]}"."${match[2]}"`;
}

/**
 * The DDL of the incremental audit's cursor table: per outbox and object type, OpenFGA's
 * ReadChanges token (bound to one type), or the time to start from. Frozen (docs/migrations.md).
 *
 * @example
 * // in a migration
 * export const up = (db: Kysely<any>) => sql.raw(auditCursorTableDdl()).execute(db);
 */
export function auditCursorTableDdl(table: string = AUDIT_CURSOR_TABLE): string {
  return `create table ${auditCursorTableName(table)} (
  outbox text not null,
  object_type text not null,
  continuation_token text,
  start_time timestamptz,
  updated_at timestamptz not null default now(),
  primary key (outbox, object_type),
  check (continuation_token is not null or start_time is not null)
)`;
}

/** Where the next incremental audit of one object type reads the changelog from. */
export interface AuditCursor {
  readonly continuationToken?: string;
  readonly startTime?: Date;
}

/** The stored cursors of `outbox`, by object type. */
export async function readAuditCursors(
  db: AnyKysely,
  table: string,
  outbox: string,
): Promise<Map<string, AuditCursor>> {
  const result = await sql<{ object_type: string; continuation_token: string | null; start_time: Date | null }>`
    select object_type, continuation_token, start_time from ${sql.raw(auditCursorTableName(table))} where outbox = ${outbox}`
    .execute(db)
    .catch((error: unknown) => {
      if (sqlState(error) !== SQLSTATE.UNDEFINED_TABLE) throw error;
      throw new OutboxConfigError(
        'cursorTable',
        `${table} does not exist: create it in a migration with auditCursorTableDdl(${JSON.stringify(table)})`,
        { cause: error },
      );
    });
  return new Map(
    result.rows.map((row) => [
      row.object_type,
      row.continuation_token
        ? { continuationToken: row.continuation_token }
        : { startTime: row.start_time ?? undefined },
    ]),
  );
}

/** Stores the cursors of `outbox` (one upsert). */
export async function writeAuditCursors(
  db: AnyKysely,
  table: string,
  outbox: string,
  cursors: ReadonlyMap<string, AuditCursor>,
): Promise<void> {
  if (cursors.size === 0) return;
  const types = [...cursors.keys()];
  const tokens = types.map((type) => cursors.get(type)?.continuationToken ?? null);
  const starts = types.map((type) => cursors.get(type)?.startTime?.toISOString() ?? null);
  await sql`
    insert into ${sql.raw(auditCursorTableName(table))} (outbox, object_type, continuation_token, start_time)
    select ${outbox}, t, k, s from unnest(${types}::text[], ${tokens}::text[], ${starts}::timestamptz[]) as x(t, k, s)
    on conflict (outbox, object_type) do update
      set continuation_token = excluded.continuation_token, start_time = excluded.start_time, updated_at = now()`.execute(
    db,
  );
}
