import type { Logger } from '@outbox/drainer';
import { verifyOutboxTable, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import type { RedriveResult } from '@outbox/reconciler';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { createAuthorizer, type Authorizer } from './authorizer.js';
import { HttpError } from './errors.js';
import { createServicePool } from './pool.js';
import { startHttpServer, type Route } from './http-server.js';
import { createServiceOutbox, type ServiceOutbox } from './service-outbox.js';
import { resolveServiceOptions, type ResolvedServiceOptions, type ServiceOptions } from './service-options.js';
import { verifyOpenFgaTarget } from './verify-openfga.js';
import { verifyServiceTables, type ExpectedTable } from './verify-tables.js';

/** What a service's routes are built with. */
export interface ServiceContext {
  readonly name: string;
  readonly db: AnyKysely;
  readonly authorizer: Authorizer;
  readonly outbox: ServiceOutbox;
  readonly options: ResolvedServiceOptions;
  readonly logger: Logger;
}

/**
 * A service, as data: its name, its outbox and its routes. The kit runs it ({@link startService});
 * a register service is built with `createRegisterService`, iam writes its own routes.
 */
export interface ServiceDefinition<N extends string = string> {
  /** E.g. `vpc`. Also the log prefix. */
  readonly name: N;
  /** The port `main` listens on when PORT is unset (in-process starts default to a free port). */
  readonly defaultPort: number;
  /** The service's outbox; its drainer and reconciler are started with the service. */
  readonly outbox: OutboxSpec;
  /** The other tables its routes use, checked at start like the outbox (a missing one stops the start). */
  readonly tables?: readonly ExpectedTable[];
  routes(context: ServiceContext): readonly Route[];
}

/** A running service. */
export interface RunningService<N extends string = string> {
  readonly name: N;
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  readonly port: number;
  readonly db: AnyKysely;
  /** Its drainer, reconciler, stats and redrive. */
  readonly outbox: ServiceOutbox;
  /**
   * Call after the authorization model changed (iam does on SIGHUP): intents poisoned because the
   * old model refused them may pass now, so the reconciler re-drives them at once.
   */
  onModelChanged(): Promise<RedriveResult>;
  /**
   * Graceful stop: stops accepting requests, lets those in flight finish (bounded by
   * `shutdownTimeoutMs`), stops the drainer and the reconciler (waiting for their batch), closes
   * the pool. Idempotent. Each of the last two steps gets `shutdownTimeoutMs` too: against a
   * Postgres that does not answer, stop() logs what it gave up on and resolves (the process can
   * exit; its connections die with it, and an unfinished batch's rows are delivered again later).
   */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 2_000;

/** `work`, or the error `late()` makes when it has not settled within `ms` (work goes on in the background). */
function within<T>(ms: number, work: Promise<T>, late: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Starts a service in this process: its pool, its outbox (drainer with LISTEN, reconciler, both on
 * their own timers) and its HTTP API. Fails, with nothing left running, when the outbox table does
 * not match its spec or a table its routes use is missing (run `pnpm migrate`), or when OpenFGA
 * answers that the store or the model does not exist, or answers with something that is not the
 * store (a `ServiceConfigError`); an OpenFGA that does not answer only logs a warning.
 *
 * @example
 * const vpc = await startService(vpcService, { databaseUrl, openfga: { apiUrl, storeId } });
 * await fetch(`${vpc.url}/vpcs`, { headers: { 'x-user-id': 'alice' } });
 * await vpc.stop();
 */
export async function startService<N extends string>(definition: ServiceDefinition<N>, options: ServiceOptions): Promise<RunningService<N>> {
  const resolved = resolveServiceOptions(definition.name, options);
  const { logger } = resolved;
  const db = new Kysely({
    dialect: new PostgresDialect({ pool: createServicePool(resolved.databaseUrl, resolved.poolSize, logger) }),
  });
  const outbox = createServiceOutbox({
    db,
    spec: definition.outbox,
    openfga: resolved.openfga,
    listenUrl: resolved.databaseUrl,
    drainIntervalMs: resolved.drainIntervalMs,
    redriveIntervalMs: resolved.redriveIntervalMs,
    compaction: { intervalMs: resolved.compactIntervalMs, retentionMs: resolved.retentionMs },
    flushOnWrite: resolved.flushOnWrite,
    flushTimeoutMs: resolved.flushTimeoutMs,
    retryBackoff: resolved.retryBackoff,
    logger,
  });
  const context: ServiceContext = { name: definition.name, db, authorizer: createAuthorizer(resolved.openfga), outbox, options: resolved, logger };

  const stopOutbox = async () => {
    await Promise.all([outbox.drainer.stop(), outbox.reconciler.stop()]);
  };
  let server;
  try {
    // Fail before listening: a service whose outbox is missing must not accept writes.
    await verifyOutboxTable(db, definition.outbox);
    await verifyServiceTables(db, definition.tables ?? []);
    // And before delivering: a mistyped store or model id would poison every intent.
    await verifyOpenFgaTarget(resolved.openfga, logger);
    if (resolved.runDrainer) await outbox.drainer.start();
    if (resolved.runReconciler) await outbox.reconciler.start();
    const routes = [
      ...definition.routes(context),
      // Liveness: the process answers. Readiness: it can reach its database (a load balancer's check).
      { method: 'GET' as const, path: '/healthz', handle: async () => ({ status: 200, body: { status: 'ok', service: definition.name } }) },
      {
        method: 'GET' as const,
        path: '/readyz',
        handle: async () => {
          await within(READY_TIMEOUT_MS, sql`select 1`.execute(db), () => new HttpError(503, 'database_unavailable', `the database did not answer within ${READY_TIMEOUT_MS} ms`));
          return { status: 200, body: { status: 'ready', service: definition.name } };
        },
      },
    ];
    server = await startHttpServer({ routes, host: resolved.host, port: resolved.port, logger });
  } catch (error) {
    await stopOutbox().catch(() => undefined);
    await db.destroy();
    throw error;
  }
  const http = server;
  logger.info(`listening on ${http.url}`, { outbox: definition.outbox.table, drainer: resolved.runDrainer, reconciler: resolved.runReconciler });

  let stopped: Promise<void> | undefined;
  return {
    name: definition.name,
    url: http.url,
    port: http.port,
    db,
    outbox,
    onModelChanged: () => outbox.redrive(),
    stop() {
      stopped ??= (async () => {
        await http.close(resolved.shutdownTimeoutMs);
        const gaveUp = (what: string) => () => new Error(`${what} did not finish within ${resolved.shutdownTimeoutMs} ms (is Postgres answering?)`);
        for (const [step, what] of [
          [stopOutbox, 'stopping the drainer and the reconciler'],
          [() => db.destroy(), 'closing the pool'],
        ] as const) {
          await within(resolved.shutdownTimeoutMs, step(), gaveUp(what)).catch((error: unknown) =>
            logger.error(`stop: ${error instanceof Error ? error.message : String(error)}; going on`),
          );
        }
        logger.info('stopped');
      })();
      return stopped;
    },
  };
}
