import { CredentialsMethod } from '@openfga/sdk';
import type { BackoffOptions, Logger } from '@outbox/drainer';
import type { OpenFgaConnection } from './authorizer.js';
import { ServiceConfigError } from './errors.js';

/** How to run one service. Only the database and OpenFGA are required. */
export interface ServiceOptions {
  /** Postgres URL; also used for the drainer's LISTEN connection. */
  readonly databaseUrl: string;
  readonly openfga: OpenFgaConnection;
  /** Port to listen on. Default 0: a free port (read it from the returned `url`). */
  readonly port?: number;
  /**
   * Interface to listen on. Default `127.0.0.1`: the caller is named by a header anyone can set,
   * so the API must not be reachable from elsewhere without an authenticating proxy in front.
   */
  readonly host?: string;
  /** Milliseconds between the drainer's scheduled passes. Default 1000 (LISTEN wakes it sooner). */
  readonly drainIntervalMs?: number;
  /**
   * Milliseconds between the reconciler's redrive passes. Default 60000: poisoned intents are rare,
   * and one revived within a minute of the cause going away is soon enough.
   */
  readonly redriveIntervalMs?: number;
  /**
   * Await delivery of a write's intent before answering (read-your-writes). Default true: the
   * creator can use what they created at once. When false, or when delivery does not finish in
   * `flushTimeoutMs`, the answer is 202: committed, access follows.
   */
  readonly flushOnWrite?: boolean;
  /** How long a write waits for its delivery. Default 5000. */
  readonly flushTimeoutMs?: number;
  /** Start the drainer's timer and LISTEN. Default true (false leaves delivery to `flush` / another process). */
  readonly runDrainer?: boolean;
  /** Start the reconciler's timer. Default true. */
  readonly runReconciler?: boolean;
  /** Milliseconds between compactions of the outbox (docs/ledger.md), on the reconciler's timer. Default 3600000; 0 turns compaction off. */
  readonly compactIntervalMs?: number;
  /** How long delivered, retired and discarded intents are kept. Default 2592000000 (30 days); rows a decision reads stay whatever their age. */
  readonly retentionMs?: number;
  /** How long `stop()` lets requests in flight finish. Default 10000. */
  readonly shutdownTimeoutMs?: number;
  /**
   * The drainer's retry spacing. Default: the drainer's (base 1 s, cap 5 min, full jitter), so an
   * intent that keeps failing is poisoned at most ~8.5 minutes (~4.3 on average) after its first
   * attempt, and the reconciler revives it on its timer. The demo shortens it to show a poisoning in
   * seconds.
   */
  readonly retryBackoff?: BackoffOptions;
  /** Connections in the service's pool. Default 5: each request uses one at a time. */
  readonly poolSize?: number;
  /** Default: console, info and up, prefixed with the service name. */
  readonly logger?: Logger;
}

/** {@link ServiceOptions} with every default applied. */
export type ResolvedServiceOptions = Required<Omit<ServiceOptions, 'logger'>> & { readonly logger: Logger };

function integer(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  const result = value ?? fallback;
  if (!Number.isInteger(result) || result < min || result > max) {
    throw new ServiceConfigError(field, `expected an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return result;
}

/** The default logger of a service: one line per message, prefixed with its name. */
export function consoleServiceLogger(name: string): Logger {
  const line = (message: string, fields?: Record<string, unknown>) =>
    `[${name}] ${message}${fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : ''}`;
  return {
    info: (m, f) => console.log(line(m, f)),
    warn: (m, f) => console.warn(line(m, f)),
    error: (m, f) => console.error(line(m, f)),
  };
}

/**
 * OpenFGA's API URL without trailing slashes. The SDK appends `/stores/…` to it as is, and OpenFGA
 * answers 404 to `//stores/…`: `http://openfga:8080/` stopped the service with "has no store",
 * sending the operator after OPENFGA_STORE_ID when the store was there all along.
 */
function withoutTrailingSlash(apiUrl: string): string {
  return apiUrl.replace(/\/+$/, '');
}

/** Applies defaults and validates; throws a {@link ServiceConfigError} naming the bad option. */
export function resolveServiceOptions(name: string, options: ServiceOptions): ResolvedServiceOptions {
  if (!options?.databaseUrl) throw new ServiceConfigError('databaseUrl', 'a Postgres URL is required');
  if (!options.openfga?.apiUrl) throw new ServiceConfigError('openfga.apiUrl', "OpenFGA's HTTP API URL is required");
  if (!options.openfga.storeId) throw new ServiceConfigError('openfga.storeId', 'the OpenFGA store id is required (pnpm migrate prints it)');
  return {
    databaseUrl: options.databaseUrl,
    openfga: { ...options.openfga, apiUrl: withoutTrailingSlash(options.openfga.apiUrl) },
    port: integer('port', options.port, 0, 0, 65_535),
    host: options.host ?? '127.0.0.1',
    drainIntervalMs: integer('drainIntervalMs', options.drainIntervalMs, 1_000, 1, 86_400_000),
    redriveIntervalMs: integer('redriveIntervalMs', options.redriveIntervalMs, 60_000, 1, 86_400_000),
    flushOnWrite: options.flushOnWrite ?? true,
    flushTimeoutMs: integer('flushTimeoutMs', options.flushTimeoutMs, 5_000, 1, 600_000),
    runDrainer: options.runDrainer ?? true,
    runReconciler: options.runReconciler ?? true,
    compactIntervalMs: integer('compactIntervalMs', options.compactIntervalMs, 3_600_000, 0, 86_400_000),
    retentionMs: integer('retentionMs', options.retentionMs, 30 * 86_400_000, 0, 36_500 * 86_400_000),
    shutdownTimeoutMs: integer('shutdownTimeoutMs', options.shutdownTimeoutMs, 10_000, 0, 600_000),
    poolSize: integer('poolSize', options.poolSize, 5, 1, 100),
    retryBackoff: options.retryBackoff ?? {},
    logger: options.logger ?? consoleServiceLogger(name),
  };
}

/** The environment variables a service process reads, and what they set. */
export const SERVICE_ENV = Object.freeze({
  DATABASE_URL: 'databaseUrl (required)',
  OPENFGA_API_URL: 'openfga.apiUrl (required)',
  OPENFGA_STORE_ID: 'openfga.storeId (required; `pnpm migrate` prints it)',
  OPENFGA_MODEL_ID: 'openfga.authorizationModelId (default: the store\'s latest model)',
  OPENFGA_API_TOKEN: 'preshared key of the OpenFGA server (default none)',
  PORT: 'port (default: the service\'s own port)',
  HOST: 'host (default 127.0.0.1)',
  DRAIN_INTERVAL_MS: 'drainIntervalMs (default 1000)',
  REDRIVE_INTERVAL_MS: 'redriveIntervalMs (default 60000)',
  COMPACT_INTERVAL_MS: 'compactIntervalMs (default 3600000; 0: no compaction)',
  RETENTION_MS: 'retentionMs (default 2592000000, 30 days)',
  FLUSH_ON_WRITE: 'flushOnWrite, true|false (default true)',
  FLUSH_TIMEOUT_MS: 'flushTimeoutMs (default 5000)',
  SHUTDOWN_TIMEOUT_MS: 'shutdownTimeoutMs (default 10000)',
  DB_POOL_SIZE: 'poolSize (default 5)',
});

/** The connection to OpenFGA described by OPENFGA_API_URL, OPENFGA_STORE_ID, OPENFGA_MODEL_ID, OPENFGA_API_TOKEN. */
export function openFgaConnectionFromEnv(env: NodeJS.ProcessEnv = process.env): OpenFgaConnection {
  const apiUrl = env.OPENFGA_API_URL;
  const storeId = env.OPENFGA_STORE_ID;
  if (!apiUrl) throw new ServiceConfigError('OPENFGA_API_URL', "set it to OpenFGA's HTTP API, e.g. http://127.0.0.1:8080");
  if (!storeId) throw new ServiceConfigError('OPENFGA_STORE_ID', 'set it to the store `pnpm migrate` printed');
  return {
    apiUrl: withoutTrailingSlash(apiUrl),
    storeId,
    ...(env.OPENFGA_MODEL_ID ? { authorizationModelId: env.OPENFGA_MODEL_ID } : {}),
    ...(env.OPENFGA_API_TOKEN ? { credentials: { method: CredentialsMethod.ApiToken, config: { token: env.OPENFGA_API_TOKEN } } } : {}),
  };
}

/**
 * Reads {@link SERVICE_ENV} into {@link ServiceOptions}. Unset variables take the defaults;
 * malformed ones throw a {@link ServiceConfigError} naming the variable.
 */
export function serviceOptionsFromEnv(defaultPort: number, env: NodeJS.ProcessEnv = process.env): ServiceOptions {
  const databaseUrl = env.DATABASE_URL;
  if (!databaseUrl) throw new ServiceConfigError('DATABASE_URL', 'set it to the Postgres URL of the platform database');
  const number = (name: string): number | undefined => {
    const raw = env[name];
    if (raw === undefined || raw === '') return undefined;
    // Decimal digits only: Number() also takes '0x1F90', '1e3' and ' 80 ', none of which an operator means.
    if (!/^[0-9]{1,15}$/.test(raw)) throw new ServiceConfigError(name, `expected a whole number in decimal digits, got ${JSON.stringify(raw)}`);
    return Number(raw);
  };
  const flag = (name: string): boolean | undefined => {
    const raw = env[name]?.toLowerCase();
    if (raw === undefined || raw === '') return undefined;
    if (raw === 'true' || raw === '1') return true;
    if (raw === 'false' || raw === '0') return false;
    throw new ServiceConfigError(name, `expected true or false, got ${JSON.stringify(env[name])}`);
  };
  const options: ServiceOptions = {
    databaseUrl,
    openfga: openFgaConnectionFromEnv(env),
    port: number('PORT') ?? defaultPort,
    ...(env.HOST ? { host: env.HOST } : {}),
    drainIntervalMs: number('DRAIN_INTERVAL_MS'),
    redriveIntervalMs: number('REDRIVE_INTERVAL_MS'),
    compactIntervalMs: number('COMPACT_INTERVAL_MS'),
    retentionMs: number('RETENTION_MS'),
    flushOnWrite: flag('FLUSH_ON_WRITE'),
    flushTimeoutMs: number('FLUSH_TIMEOUT_MS'),
    shutdownTimeoutMs: number('SHUTDOWN_TIMEOUT_MS'),
    poolSize: number('DB_POOL_SIZE'),
  };
  // The ranges are checked here too, so that an out-of-range value is refused naming the variable
  // the operator set (DB_POOL_SIZE), not the option it feeds (poolSize).
  try {
    resolveServiceOptions('env', options);
  } catch (error) {
    if (error instanceof ServiceConfigError && ENV_OF_OPTION[error.field]) {
      throw new ServiceConfigError(ENV_OF_OPTION[error.field] as string, error.message.slice(error.field.length + 2), { cause: error });
    }
    throw error;
  }
  return options;
}

/** The variable that sets each numeric option (see {@link SERVICE_ENV}). */
const ENV_OF_OPTION: Readonly<Record<string, string>> = {
  port: 'PORT',
  drainIntervalMs: 'DRAIN_INTERVAL_MS',
  redriveIntervalMs: 'REDRIVE_INTERVAL_MS',
  compactIntervalMs: 'COMPACT_INTERVAL_MS',
  retentionMs: 'RETENTION_MS',
  flushTimeoutMs: 'FLUSH_TIMEOUT_MS',
  shutdownTimeoutMs: 'SHUTDOWN_TIMEOUT_MS',
  poolSize: 'DB_POOL_SIZE',
};
