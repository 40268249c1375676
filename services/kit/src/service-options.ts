import { CredentialsMethod } from '@openfga/sdk';
import type { BackoffOptions, Logger } from '@outbox/drainer';
import type { OpenFgaConnection } from './authorizer.js';
import { integerInRange } from '@outbox/outbox/protocol';
import { ServiceConfigError } from './errors.js';
import type { ServiceLogLevel } from './service-logger.js';

/** How to run one service. Only the database and OpenFGA are required. */
export interface ServiceOptions {
  /** Postgres URL of the service's pool (directly, or through PgBouncer in transaction mode). */
  readonly databaseUrl: string;
  /**
   * The drainer's LISTEN connection, which must reach Postgres itself: a transaction pooler
   * (PgBouncer) hands the session back after each statement, and notifications stop. Default
   * `databaseUrl`; set it when `databaseUrl` goes through a pooler (docs/pgbouncer.md).
   */
  readonly listenDatabaseUrl?: string;
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
  /**
   * The TTL of OpenFGA's check caches, as the server is configured (`OPENFGA_CHECK_QUERY_CACHE_TTL`
   * and the iterator caches' TTLs: the longest of them). A request carrying a consistency token
   * whose newest delivery is younger than this checks with HIGHER_CONSISTENCY; every other check
   * uses MINIMIZE_LATENCY (docs/design.md §12). Default 10000, OpenFGA's default. Too short a value
   * lets a token's reader see a stale cached answer.
   */
  readonly checkCacheTtlMs?: number;
  /**
   * How long a request with `Outbox-Consistency: at-least-as-fresh <token>` waits for the token's
   * intents before answering 503 `token_pending`. Default 5000.
   */
  readonly consistencyTimeoutMs?: number;
  /**
   * Milliseconds between incremental audits of OpenFGA against the service's own rows (with the
   * reconciler's timer, for a service that has an owner mapping). Default 300000: drift someone
   * made around the outbox shows at WARN within minutes, at one ReadChanges per type when nothing
   * changed. 0 or false: no audit. Each audit also repairs the drift it found (`repairDrift`), so
   * a partition with nothing pending agrees with the owner within
   * **T = `auditIntervalMs` + two audit runs + `drainIntervalMs` + one delivery**: at most 5 min
   * 1 s plus two audit runs with the defaults, under 10 min while a run takes under 2 min (each
   * logs its `durationMs`; docs/agreement.md, "The bound T").
   */
  readonly auditIntervalMs?: number | false;
  /**
   * Repair the drift each audit finds, through the outbox (an ordinary intent per correction,
   * `payload.source = "repair"`). Default true: drift, a late write beyond the drainer's horizon
   * included, is corrected within T without an operator. False: detection only (WARN and the
   * `outbox.audit.drifted` gauge; an operator repairs with `outbox repair`).
   */
  readonly repairDrift?: boolean;
  /**
   * Most tuples one automatic repair may delete. Default 100, like `repairOutbox`'s `maxDeletes`:
   * deleting revokes access, and mass "unexpected" drift is more often a mistake (an owner database
   * restored from an old backup, the wrong store) than real grants. Past it nothing is enqueued,
   * the refusal is logged at ERROR and counted (`outbox.repair.refused`, the `OutboxRepairRefused`
   * alert), every audit again until a human repairs it.
   */
  readonly repairMaxDeletes?: number;
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
  /**
   * `/readyz` answers 503 `outbox_stalled` when the oldest deliverable intent was committed longer
   * ago than this. Default 60000: a healthy drainer delivers within a second or two (a write waits
   * `flushTimeoutMs` for it), so a minute means delivery is stuck, and it is reported well before
   * the retries of a failing intent run out (~8.5 minutes with the default backoff). 0 turns the
   * check off. Every instance of a service shares its outbox, so a stall makes all of them unready:
   * see docs/services.md before routing traffic on it.
   */
  readonly readyMaxDeliverableAgeMs?: number;
  /** Default `info`: a line per request, start and stop, and what the libraries warn about. */
  readonly logLevel?: ServiceLogLevel;
  /**
   * Where the log lines go. Default: pino JSON lines on stdout. Given a logger (the libraries'
   * `(message, fields?)` shape: tests, the demo), every line — the kit's, fastify's, the drainer's
   * and the reconciler's — is handed to it instead.
   */
  readonly logger?: Logger;
}

/** {@link ServiceOptions} with every default applied (the logger apart: it stays optional; `auditIntervalMs` 0 when off). */
export type ResolvedServiceOptions = Required<Omit<ServiceOptions, 'logger' | 'auditIntervalMs'>> & {
  readonly auditIntervalMs: number;
};

/** OpenFGA's store and model ids: ULIDs. */
const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

const LOG_LEVELS: readonly ServiceLogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

/**
 * What is wrong with a Postgres URL, or undefined. pg reads anything: `nope` became a connection to
 * a host named `base` (`getaddrinfo ENOTFOUND base`), which named neither the variable nor the problem.
 */
function databaseUrlProblem(url: string): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `expected a URL like postgres://user:password@host:5432/database, got ${JSON.stringify(redacted(url).slice(0, 80))}`;
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:')
    return `expected a postgres:// URL, got one with ${parsed.protocol}`;
  return undefined;
}

/** A connection string without its password, for messages. */
function redacted(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@/]*@/, '$1***@');
}

/** The server and database a Postgres URL names, without credentials: `db.internal:5432/platform`. */
export function databaseTarget(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.hostname || parsed.searchParams.get('host') || 'localhost'}:${parsed.port || '5432'}${parsed.pathname}`;
  } catch {
    return 'the configured URL';
  }
}

/**
 * OpenFGA's API URL without trailing slashes. The SDK appends `/stores/…` to it as is, and OpenFGA
 * answers 404 to `//stores/…`: `http://openfga:8080/` stopped the service with "has no store",
 * sending the operator after OPENFGA_STORE_ID when the store was there all along.
 */
function withoutTrailingSlash(apiUrl: string): string {
  return apiUrl.replace(/\/+$/, '');
}

/**
 * Refuses a store or model id that is not an OpenFGA id (a ULID) with a {@link ServiceConfigError}
 * naming the option. The SDK refuses it too, but as "storeId must be in ULID format", which names
 * neither the option nor the variable.
 */
export function assertOpenFgaIds(connection: OpenFgaConnection): void {
  for (const [field, id] of [
    ['openfga.storeId', connection.storeId],
    ['openfga.authorizationModelId', connection.authorizationModelId],
  ] as const) {
    if (id !== undefined && !ULID.test(id)) {
      throw new ServiceConfigError(
        field,
        `expected an OpenFGA id like 01HVMMBCMGZNT3SED4Z17ECXCA (pnpm migrate prints it), got ${JSON.stringify(id.slice(0, 40))}`,
      );
    }
  }
}

/** Applies defaults and validates; throws a {@link ServiceConfigError} naming the bad option. */
export function resolveServiceOptions(name: string, options: ServiceOptions): ResolvedServiceOptions {
  if (!options?.databaseUrl) throw new ServiceConfigError('databaseUrl', 'a Postgres URL is required');
  const urlProblem = databaseUrlProblem(options.databaseUrl);
  if (urlProblem) throw new ServiceConfigError('databaseUrl', urlProblem);
  const logLevel = options.logLevel ?? 'info';
  if (!LOG_LEVELS.includes(logLevel))
    throw new ServiceConfigError(
      'logLevel',
      `expected one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(logLevel)}`,
    );
  if (!options.openfga?.apiUrl) throw new ServiceConfigError('openfga.apiUrl', "OpenFGA's HTTP API URL is required");
  if (!options.openfga.storeId)
    throw new ServiceConfigError('openfga.storeId', 'the OpenFGA store id is required (pnpm migrate prints it)');
  if (options.listenDatabaseUrl !== undefined) {
    const listenProblem = databaseUrlProblem(options.listenDatabaseUrl);
    if (listenProblem) throw new ServiceConfigError('listenDatabaseUrl', listenProblem);
  }
  return {
    databaseUrl: options.databaseUrl,
    listenDatabaseUrl: options.listenDatabaseUrl ?? options.databaseUrl,
    openfga: { ...options.openfga, apiUrl: withoutTrailingSlash(options.openfga.apiUrl) },
    port: integerInRange('port', options.port, { fallback: 0, min: 0, max: 65_535 }, ServiceConfigError),
    host: options.host ?? '127.0.0.1',
    drainIntervalMs: integerInRange(
      'drainIntervalMs',
      options.drainIntervalMs,
      { fallback: 1_000, min: 1, max: 86_400_000 },
      ServiceConfigError,
    ),
    redriveIntervalMs: integerInRange(
      'redriveIntervalMs',
      options.redriveIntervalMs,
      { fallback: 60_000, min: 1, max: 86_400_000 },
      ServiceConfigError,
    ),
    flushOnWrite: options.flushOnWrite ?? true,
    flushTimeoutMs: integerInRange(
      'flushTimeoutMs',
      options.flushTimeoutMs,
      { fallback: 5_000, min: 1, max: 600_000 },
      ServiceConfigError,
    ),
    runDrainer: options.runDrainer ?? true,
    checkCacheTtlMs: integerInRange(
      'checkCacheTtlMs',
      options.checkCacheTtlMs,
      { fallback: 10_000, min: 0, max: 86_400_000 },
      ServiceConfigError,
    ),
    consistencyTimeoutMs: integerInRange(
      'consistencyTimeoutMs',
      options.consistencyTimeoutMs,
      { fallback: 5_000, min: 0, max: 600_000 },
      ServiceConfigError,
    ),
    auditIntervalMs:
      options.auditIntervalMs === false
        ? 0
        : integerInRange(
            'auditIntervalMs',
            options.auditIntervalMs,
            { fallback: 300_000, min: 0, max: 86_400_000 },
            ServiceConfigError,
          ),
    repairDrift: options.repairDrift ?? true,
    repairMaxDeletes: integerInRange(
      'repairMaxDeletes',
      options.repairMaxDeletes,
      { fallback: 100, min: 0, max: 1_000_000_000 },
      ServiceConfigError,
    ),
    runReconciler: options.runReconciler ?? true,
    compactIntervalMs: integerInRange(
      'compactIntervalMs',
      options.compactIntervalMs,
      { fallback: 3_600_000, min: 0, max: 86_400_000 },
      ServiceConfigError,
    ),
    retentionMs: integerInRange(
      'retentionMs',
      options.retentionMs,
      { fallback: 30 * 86_400_000, min: 0, max: 36_500 * 86_400_000 },
      ServiceConfigError,
    ),
    shutdownTimeoutMs: integerInRange(
      'shutdownTimeoutMs',
      options.shutdownTimeoutMs,
      { fallback: 10_000, min: 0, max: 600_000 },
      ServiceConfigError,
    ),
    poolSize: integerInRange('poolSize', options.poolSize, { fallback: 5, min: 1, max: 100 }, ServiceConfigError),
    retryBackoff: options.retryBackoff ?? {},
    readyMaxDeliverableAgeMs: integerInRange(
      'readyMaxDeliverableAgeMs',
      options.readyMaxDeliverableAgeMs,
      { fallback: 60_000, min: 0, max: 86_400_000 },
      ServiceConfigError,
    ),
    logLevel,
  };
}

/** The environment variables a service process reads, and what they set. */
export const SERVICE_ENV = Object.freeze({
  DATABASE_URL: 'databaseUrl (required)',
  LISTEN_DATABASE_URL: 'listenDatabaseUrl (default DATABASE_URL; Postgres itself, never a transaction pooler)',
  RUN_DRAINER: 'runDrainer, true|false (default true; false: a timer or another process delivers)',
  RUN_RECONCILER: 'runReconciler, true|false (default true; false: a timer or another process redrives)',
  OPENFGA_API_URL: 'openfga.apiUrl (required)',
  OPENFGA_STORE_ID: 'openfga.storeId (required; `pnpm migrate` prints it)',
  OPENFGA_MODEL_ID: "openfga.authorizationModelId (default: the store's latest model)",
  OPENFGA_API_TOKEN: 'preshared key of the OpenFGA server (default none)',
  PORT: "port (default: the service's own port)",
  HOST: 'host (default 127.0.0.1)',
  DRAIN_INTERVAL_MS: 'drainIntervalMs (default 1000)',
  REDRIVE_INTERVAL_MS: 'redriveIntervalMs (default 60000)',
  AUDIT_INTERVAL_MS: 'auditIntervalMs (default 300000; 0: no audit)',
  REPAIR_DRIFT: 'repairDrift, true|false (default true: each audit repairs the drift it found)',
  REPAIR_MAX_DELETES: 'repairMaxDeletes (default 100)',
  COMPACT_INTERVAL_MS: 'compactIntervalMs (default 3600000; 0: no compaction)',
  RETENTION_MS: 'retentionMs (default 2592000000, 30 days)',
  FLUSH_ON_WRITE: 'flushOnWrite, true|false (default true)',
  FLUSH_TIMEOUT_MS: 'flushTimeoutMs (default 5000)',
  CHECK_CACHE_TTL_MS: "checkCacheTtlMs (default 10000: OpenFGA's check-cache TTL; set it to the server's)",
  CONSISTENCY_TIMEOUT_MS: 'consistencyTimeoutMs (default 5000)',
  SHUTDOWN_TIMEOUT_MS: 'shutdownTimeoutMs (default 10000)',
  DB_POOL_SIZE: 'poolSize (default 5)',
  READY_MAX_DELIVERABLE_AGE_MS: 'readyMaxDeliverableAgeMs (default 60000; 0 = off)',
  LOG_LEVEL: 'logLevel, trace|debug|info|warn|error|fatal (default info)',
});

/** The connection to OpenFGA described by OPENFGA_API_URL, OPENFGA_STORE_ID, OPENFGA_MODEL_ID, OPENFGA_API_TOKEN. */
export function openFgaConnectionFromEnv(env: NodeJS.ProcessEnv = process.env): OpenFgaConnection {
  const apiUrl = env.OPENFGA_API_URL;
  const storeId = env.OPENFGA_STORE_ID;
  if (!apiUrl)
    throw new ServiceConfigError('OPENFGA_API_URL', "set it to OpenFGA's HTTP API, e.g. http://127.0.0.1:8080");
  if (!storeId) throw new ServiceConfigError('OPENFGA_STORE_ID', 'set it to the store `pnpm migrate` printed');
  return {
    apiUrl: withoutTrailingSlash(apiUrl),
    storeId,
    ...(env.OPENFGA_MODEL_ID ? { authorizationModelId: env.OPENFGA_MODEL_ID } : {}),
    ...(env.OPENFGA_API_TOKEN
      ? { credentials: { method: CredentialsMethod.ApiToken, config: { token: env.OPENFGA_API_TOKEN } } }
      : {}),
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
    if (!/^[0-9]{1,15}$/.test(raw))
      throw new ServiceConfigError(name, `expected a whole number in decimal digits, got ${JSON.stringify(raw)}`);
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
    ...(env.LISTEN_DATABASE_URL ? { listenDatabaseUrl: env.LISTEN_DATABASE_URL } : {}),
    openfga: openFgaConnectionFromEnv(env),
    port: number('PORT') ?? defaultPort,
    ...(env.HOST ? { host: env.HOST } : {}),
    drainIntervalMs: number('DRAIN_INTERVAL_MS'),
    redriveIntervalMs: number('REDRIVE_INTERVAL_MS'),
    auditIntervalMs: number('AUDIT_INTERVAL_MS'),
    repairDrift: flag('REPAIR_DRIFT'),
    repairMaxDeletes: number('REPAIR_MAX_DELETES'),
    compactIntervalMs: number('COMPACT_INTERVAL_MS'),
    retentionMs: number('RETENTION_MS'),
    flushOnWrite: flag('FLUSH_ON_WRITE'),
    runDrainer: flag('RUN_DRAINER'),
    runReconciler: flag('RUN_RECONCILER'),
    flushTimeoutMs: number('FLUSH_TIMEOUT_MS'),
    checkCacheTtlMs: number('CHECK_CACHE_TTL_MS'),
    consistencyTimeoutMs: number('CONSISTENCY_TIMEOUT_MS'),
    shutdownTimeoutMs: number('SHUTDOWN_TIMEOUT_MS'),
    poolSize: number('DB_POOL_SIZE'),
    readyMaxDeliverableAgeMs: number('READY_MAX_DELIVERABLE_AGE_MS'),
    ...(env.LOG_LEVEL ? { logLevel: env.LOG_LEVEL as ServiceLogLevel } : {}),
  };
  // The values are checked here too, so that a bad one is refused naming the variable the operator
  // set (DB_POOL_SIZE), not the option it feeds (poolSize).
  try {
    resolveServiceOptions('env', options);
  } catch (error) {
    throw inEnvironmentTerms(error);
  }
  return options;
}

/** The variable that sets each option (see {@link SERVICE_ENV}). */
const ENV_OF_OPTION: Readonly<Record<string, string>> = {
  databaseUrl: 'DATABASE_URL',
  listenDatabaseUrl: 'LISTEN_DATABASE_URL',
  'openfga.apiUrl': 'OPENFGA_API_URL',
  'openfga.storeId': 'OPENFGA_STORE_ID',
  'openfga.authorizationModelId': 'OPENFGA_MODEL_ID',
  port: 'PORT',
  drainIntervalMs: 'DRAIN_INTERVAL_MS',
  redriveIntervalMs: 'REDRIVE_INTERVAL_MS',
  auditIntervalMs: 'AUDIT_INTERVAL_MS',
  repairMaxDeletes: 'REPAIR_MAX_DELETES',
  compactIntervalMs: 'COMPACT_INTERVAL_MS',
  retentionMs: 'RETENTION_MS',
  flushTimeoutMs: 'FLUSH_TIMEOUT_MS',
  checkCacheTtlMs: 'CHECK_CACHE_TTL_MS',
  consistencyTimeoutMs: 'CONSISTENCY_TIMEOUT_MS',
  shutdownTimeoutMs: 'SHUTDOWN_TIMEOUT_MS',
  poolSize: 'DB_POOL_SIZE',
  readyMaxDeliverableAgeMs: 'READY_MAX_DELIVERABLE_AGE_MS',
  logLevel: 'LOG_LEVEL',
};

/**
 * A {@link ServiceConfigError} about an option, restated about the environment variable that sets
 * it (`poolSize: …` → `DB_POOL_SIZE: …`), for a process configured by its environment; anything
 * else as it is.
 */
export function inEnvironmentTerms(error: unknown): unknown {
  if (!(error instanceof ServiceConfigError) || !ENV_OF_OPTION[error.field]) return error;
  return new ServiceConfigError(ENV_OF_OPTION[error.field] as string, error.message.slice(error.field.length + 2), {
    cause: error,
  });
}
