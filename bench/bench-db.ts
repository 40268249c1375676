import type { AnyKysely, OutboxSpec } from '@outbox/outbox';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';

/**
 * A Kysely over its own pool of `max` connections to `url`. An idle connection's error (the server
 * stopping under a pool left open) is logged, not thrown: it would hide the error that left it open.
 */
export function kysely(url: string, max = 4): AnyKysely {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', (error) =>
    console.error(`[bench] an idle connection to ${new URL(url).pathname} failed: ${error.message}`),
  );
  return new Kysely({ dialect: new PostgresDialect({ pool }) });
}

/** The one-tuple payload a filled row carries unless told otherwise. */
const onePayload = `'{"writes":[{"user":"user:a","relation":"owner","object":"vpc:1"}]}'::jsonb`;

/** What {@link fill} writes besides the keys. */
export interface FillOptions {
  /** Delivered rows (`sent_at` set) instead of pending ones. Default false. */
  readonly delivered?: boolean;
  /** The payload, an SQL expression over `i` (the row number) and `k` (its key). Default: one fixed tuple. */
  readonly payload?: string;
}

/**
 * Inserts `rows` intents into the outbox of `spec`, row i (1-based) with the partition key `key`
 * (an SQL expression over i), pending with `is_head` set as enqueue would have, or delivered;
 * then VACUUM ANALYZE, so that every loop starts from a table with statistics.
 */
export async function fill(
  db: AnyKysely,
  spec: OutboxSpec,
  key: string,
  rows: number,
  options: FillOptions = {},
): Promise<void> {
  const table = `"${spec.schema}"."${spec.tableName}"`;
  const delivered = options.delivered ?? false;
  await sql
    .raw(
      `
    insert into ${table} (resource_id, payload, is_head, sent_at)
    select k, ${options.payload ?? onePayload}, ${delivered ? 'false' : 'row_number() over (partition by k order by i) = 1'}, ${delivered ? 'now()' : 'null'}
    from (select i, ${key} as k from generate_series(1, ${rows}) i) s order by i`,
    )
    .execute(db);
  await sql.raw(`vacuum analyze ${table}`).execute(db);
}
