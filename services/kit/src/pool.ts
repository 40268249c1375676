import type { Logger } from '@outbox/drainer';
import pg from 'pg';

/**
 * A service's pg pool, wired so that a lost Postgres connection is logged instead of ending the
 * process. pg reports a connection lost while it idles in the pool on the pool, and one lost while
 * it is checked out on the client, where nothing listens unless told to — and the drainer holds a
 * connection for as long as its sink delivers, so a database restart or failover would otherwise
 * arrive as an uncaught exception. The query in flight still fails, the pool drops the client, and
 * the next checkout opens a new connection.
 *
 * `max` is shared by the service's requests and its outbox: while it drains a backlog the drainer
 * holds a connection per open batch (`concurrentBatches`, default 3), and `flush` and the
 * late-write check take one more at times (docs/design.md §5, "Open batches"). A smaller pool opens
 * fewer batches and never deadlocks, but requests then wait behind the drainer's segments.
 *
 * @example
 * const db = new Kysely({ dialect: new PostgresDialect({ pool: createServicePool(databaseUrl, 10, logger) }) });
 */
export function createServicePool(connectionString: string, max: number, logger: Logger): pg.Pool {
  // A Postgres that does not answer (frozen, a dead network path) fails a checkout after 5 s instead
  // of hanging requests, and TCP keepalive finds a dead connection that would otherwise wait forever.
  const pool = new pg.Pool({ connectionString, max, connectionTimeoutMillis: 5_000, keepAlive: true });
  pool.on('error', (error) => logger.warn(`postgres connection lost while idle in the pool: ${error.message}`));
  pool.on('connect', (client) => {
    client.on('error', (error) => logger.warn(`postgres connection lost: ${error.message}`));
  });
  return pool;
}
