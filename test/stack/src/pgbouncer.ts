import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from './free-port.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';
import { superviseProcess } from './supervised.js';

/** How to start PgBouncer in front of a Postgres server. */
export interface PgBouncerOptions {
  /** The server it pools for, e.g. the stack's `postgresUrl` (its user and password log in to every database). */
  readonly postgresUrl: string;
  /** Default `transaction`, as platform teams run it. */
  readonly poolMode?: 'transaction' | 'session';
  /** Server connections per database and user. Default 2: few enough that clients' transactions share them. */
  readonly poolSize?: number;
  /** Port; a free one by default. Pass the old one to restart "the same" pooler. */
  readonly port?: number;
  /** Address to listen on. Default 127.0.0.1; `pnpm topology` binds its bridge's. */
  readonly listenAddress?: string;
}

/** A running PgBouncer. */
export interface PgBouncer {
  readonly port: number;
  /** `url` with its host and port replaced by the pooler's: the same database, through it. */
  through(url: string): string;
  /** Transactions and queries it has pooled per database since it started (`SHOW STATS`). */
  stats(): Promise<ReadonlyMap<string, { readonly transactions: number; readonly queries: number }>>;
  /** Stops it (SIGTERM, SIGKILL after 5 s) and waits for its exit. Safe to call twice. */
  stop(): Promise<void>;
}

/** The `pgbouncer` on PATH (scripts/bootstrap.sh extracts Debian's there), or a StackError saying how to get it. */
export function pgBouncerBinary(): string {
  const found = spawnSync('pgbouncer', ['--version'], { encoding: 'utf8' });
  if (found.status !== 0) {
    throw new StackError(
      "pgbouncer is not on PATH: run `bash scripts/bootstrap.sh` (it extracts Debian's package into ~/.cache/outbox/debian/bin), or apt-get install pgbouncer",
    );
  }
  return 'pgbouncer';
}

/**
 * Starts PgBouncer on a loopback port in front of `postgresUrl`'s server: every database, logged
 * in as that URL's user (`auth_type = any`: the tests' clients are trusted), pool mode
 * `transaction` unless asked. As root it drops to the `postgres` user, which PgBouncer insists on.
 */
export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const bin = pgBouncerBinary();
  const server = new URL(options.postgresUrl);
  const port = options.port ?? (await freePort());
  const host = options.listenAddress ?? '127.0.0.1';
  const dir = mkdtempSync(join(tmpdir(), 'outbox-pgbouncer-'));
  chmodSync(dir, 0o755);
  const user = decodeURIComponent(server.username || userInfo().username);
  const login = [
    `host=${server.hostname}`,
    `port=${server.port || '5432'}`,
    `user=${user}`,
    ...(server.password ? [`password=${decodeURIComponent(server.password)}`] : []),
  ].join(' ');
  const ini = join(dir, 'pgbouncer.ini');
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = ${login}`,
      '[pgbouncer]',
      `listen_addr = ${host}`,
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 2}`,
      'max_client_conn = 500',
      // What node-postgres and psql may send at startup, which PgBouncer would otherwise refuse.
      'ignore_startup_parameters = extra_float_digits,options',
      'server_reset_query =',
      `stats_users = ${user}`,
      ...(process.getuid?.() === 0 ? ['user = postgres'] : []),
      '',
    ].join('\n'),
  );
  chmodSync(ini, 0o644);
  const pooler = superviseProcess(bin, [ini], 'pgbouncer', dir);
  const stop = pooler.stop;
  const through = (url: string) => {
    const pooled = new URL(url);
    pooled.hostname = host;
    pooled.port = String(port);
    return pooled.toString();
  };
  try {
    await waitFor(`PgBouncer on ${host}:${port}`, () => accepts(host, port), {
      timeoutMs: 10_000,
      abortIf: () => (pooler.exited() ? `pgbouncer exited (${pooler.exited()}): ${pooler.stderr()}` : undefined),
    });
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    port,
    through,
    async stats() {
      const console = new pg.Client({
        connectionString: through(options.postgresUrl).replace(/\/[^/?]*(\?|$)/, '/pgbouncer$1'),
      });
      await console.connect();
      try {
        // The admin console speaks the simple protocol only.
        const { rows } = await console.query<{ database: string; total_xact_count: string; total_query_count: string }>(
          {
            text: 'SHOW STATS',
            queryMode: 'simple',
          } as pg.QueryConfig,
        );
        return new Map(
          rows.map((r) => [
            r.database,
            { transactions: Number(r.total_xact_count), queries: Number(r.total_query_count) },
          ]),
        );
      } finally {
        await console.end();
      }
    },
    stop,
  };
}

/** Whether something accepts TCP connections on `host:port`. */
export function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}
