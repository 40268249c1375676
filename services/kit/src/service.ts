import type { Logger } from '@outbox/drainer';
import { observeOutbox, verifyOutboxTable, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { sqlState } from '@outbox/outbox/protocol';
import type { OutboxOwner, RedriveResult } from '@outbox/reconciler';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { createAuthorizer, type Authorizer } from './authorizer.js';
import { isDatabaseUnavailable, ServiceConfigError } from './errors.js';
import type { FormatCheck } from './field-schemas.js';
import { startHttpServer, type HttpServer, type ServiceApp } from './http-server.js';
import { createServicePool } from './pool.js';
import { serviceMetrics } from './prometheus-metrics.js';
import { consistencyHook } from './read-consistency.js';
import { createReadiness } from './readiness.js';
import { createServiceLogger, outboxLogger } from './service-logger.js';
import { createServiceOutbox, type ServiceOutbox } from './service-outbox.js';
import {
  assertOpenFgaIds,
  databaseTarget,
  resolveServiceOptions,
  type ResolvedServiceOptions,
  type ServiceOptions,
} from './service-options.js';
import { verifyOpenFgaTarget } from './verify-openfga.js';
import { verifyServiceTables, type ExpectedTable } from './verify-tables.js';

/** What a service's routes are built with. */
export interface ServiceContext {
  readonly name: string;
  readonly db: AnyKysely;
  readonly authorizer: Authorizer;
  readonly outbox: ServiceOutbox;
  readonly options: ResolvedServiceOptions;
  /** The service's logger in the libraries' shape (`(message, fields?)`); in a route, `request.log` (pino) also carries the request id. */
  readonly logger: Logger;
}

/**
 * A service, as data: its name, its outbox and its routes. The kit runs it ({@link startService});
 * a register service is built with `createRegisterService`, iam writes its own routes.
 */
export interface ServiceDefinition<N extends string = string> {
  /** E.g. `vpc`. Also the `service` of its log lines and the title of its OpenAPI document. */
  readonly name: N;
  /** The port `main` listens on when PORT is unset (in-process starts default to a free port). */
  readonly defaultPort: number;
  /** The service's outbox; its drainer and reconciler are started with the service. */
  readonly outbox: OutboxSpec;
  /** What its rows expect in OpenFGA, for the incremental audit on the reconciler's timer. Default none: no audit. */
  readonly owner?: OutboxOwner;
  /** The other tables its routes use, checked at start like the outbox (a missing one stops the start). */
  readonly tables?: readonly ExpectedTable[];
  /** The checks behind custom `format`s its schemas use (e.g. vpc's `ipv4-cidr-block`). */
  readonly formats?: Readonly<Record<string, FormatCheck>>;
  /**
   * Declares its routes on its fastify app, with TypeBox schemas for bodies, params and queries.
   * Every route names its caller (`request.caller`, from `x-user-id`; 401 without one); errors
   * thrown as {@link HttpError} become `{ error: { code, message } }` answers.
   */
  routes(app: ServiceApp, context: ServiceContext): void;
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
  /** Its logger (JSON lines with `service`, or the `logger` option's sink). */
  readonly logger: Logger;
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

/** `work`, or the error `late()` makes when it has not settled within `ms` (work goes on in the background). */
function within<T>(ms: number, work: Promise<T>, late: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/** SQLSTATEs of a connection Postgres refused: wrong password, no such role or database. */
const CONNECTION_REFUSED_STATES = new Set(['28P01', '28000', '3D000']);

/**
 * The first statement of a start, so that a database that cannot be reached (a wrong host, port,
 * password or database name) stops it with a {@link ServiceConfigError} naming `databaseUrl` and the
 * server it tried, not with a bare `getaddrinfo ENOTFOUND …`.
 */
async function connect(db: AnyKysely, databaseUrl: string): Promise<void> {
  try {
    await sql`select 1`.execute(db);
  } catch (error) {
    const state = sqlState(error);
    if (isDatabaseUnavailable(error) || (state !== undefined && CONNECTION_REFUSED_STATES.has(state))) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new ServiceConfigError(
        'databaseUrl',
        `could not connect to the database at ${databaseTarget(databaseUrl)}: ${reason}`,
        { cause: error },
      );
    }
    throw error;
  }
}

/**
 * Starts a service in this process: its pool, its outbox (drainer with LISTEN, reconciler, both on
 * their own timers) and its HTTP API (fastify, with `/healthz`, `/readyz` and `/openapi.json`).
 * Fails, with nothing left running, when the database cannot be reached, when the outbox table does
 * not match its spec or a table its routes use is missing (run `pnpm migrate`), or when OpenFGA
 * answers that the store or the model does not exist, or answers with something that is not the
 * store (a `ServiceConfigError`); an OpenFGA that does not answer only logs a warning.
 *
 * @example
 * const vpc = await startService(vpcService, { databaseUrl, openfga: { apiUrl, storeId } });
 * await fetch(`${vpc.url}/vpcs`, { headers: { 'x-user-id': 'alice' } });
 * await vpc.stop();
 */
export async function startService<N extends string>(
  definition: ServiceDefinition<N>,
  options: ServiceOptions,
): Promise<RunningService<N>> {
  const resolved = resolveServiceOptions(definition.name, options);
  assertOpenFgaIds(resolved.openfga);
  const metrics = serviceMetrics();
  const log = createServiceLogger(definition.name, {
    level: resolved.logLevel,
    ...(options.logger ? { sink: options.logger } : {}),
  });
  const logger = outboxLogger(log);
  const db = new Kysely({
    dialect: new PostgresDialect({ pool: createServicePool(resolved.databaseUrl, resolved.poolSize, logger) }),
  });
  const outbox = createServiceOutbox({
    db,
    spec: definition.outbox,
    openfga: resolved.openfga,
    listenUrl: resolved.listenDatabaseUrl,
    drainIntervalMs: resolved.drainIntervalMs,
    redriveIntervalMs: resolved.redriveIntervalMs,
    compaction: { intervalMs: resolved.compactIntervalMs, retentionMs: resolved.retentionMs },
    flushOnWrite: resolved.flushOnWrite,
    flushTimeoutMs: resolved.flushTimeoutMs,
    writeThrough: resolved.runDrainer,
    retryBackoff: resolved.retryBackoff,
    ...(definition.owner ? { owner: definition.owner } : {}),
    auditIntervalMs: resolved.auditIntervalMs,
    repair: resolved.repairDrift && { maxDeletes: resolved.repairMaxDeletes },
    logger,
    meterProvider: metrics.meterProvider,
    reconcilerMetrics: metrics.agreement,
  });
  const gauges = observeOutbox({ db, spec: definition.outbox, meterProvider: metrics.meterProvider, logger });
  const context: ServiceContext = {
    name: definition.name,
    db,
    authorizer: createAuthorizer(resolved.openfga),
    outbox,
    options: resolved,
    logger,
  };
  const readiness = createReadiness({
    db,
    openfga: resolved.openfga,
    spec: definition.outbox,
    maxDeliverableAgeMs: resolved.readyMaxDeliverableAgeMs,
    listenState: () => outbox.drainer.listenState(),
  });

  const stopOutbox = async () => {
    gauges.stop();
    await Promise.all([outbox.drainer.stop(), outbox.reconciler.stop()]);
  };
  let server: HttpServer;
  try {
    // Fail before listening: a service whose outbox is missing must not accept writes.
    await connect(db, resolved.databaseUrl);
    await verifyOutboxTable(db, definition.outbox);
    await verifyServiceTables(db, definition.tables ?? []);
    // And before delivering: a mistyped store or model id would poison every intent.
    await verifyOpenFgaTarget(resolved.openfga, logger);
    if (resolved.runDrainer) await outbox.drainer.start();
    if (resolved.runReconciler) await outbox.reconciler.start();
    server = await startHttpServer({
      name: definition.name,
      host: resolved.host,
      port: resolved.port,
      log,
      ...(definition.formats ? { formats: definition.formats } : {}),
      routes(app) {
        // Before the routes: every route authorizes at the consistency its request's token needs.
        app.decorateRequest('authorizer', null as unknown as Authorizer);
        app.addHook(
          'preHandler',
          consistencyHook(context.authorizer, {
            db,
            outbox: definition.outbox,
            timeoutMs: resolved.consistencyTimeoutMs,
            checkCacheTtlMs: resolved.checkCacheTtlMs,
          }),
        );
        definition.routes(app, context);
      },
      publicRoutes(app) {
        // Liveness: the process answers (a restart would not help otherwise).
        app.get(
          '/healthz',
          { config: { probe: true }, schema: { summary: 'Liveness: the process answers', tags: ['operations'] } },
          async () => ({ status: 'ok', service: definition.name }),
        );
        // Readiness: the database, OpenFGA and delivery (see createReadiness): what a deployment gates on.
        const summary =
          'Readiness: 200 when the database and OpenFGA answer and delivery is not stalled, else 503 naming the check';
        app.get(
          '/readyz',
          { config: { probe: true }, schema: { summary, tags: ['operations'] } },
          async (_request, reply) => {
            const { ready, checks, error } = await readiness.check();
            return reply.code(ready ? 200 : 503).send({
              status: ready ? 'ready' : 'not ready',
              service: definition.name,
              ...(error ? { error } : {}),
              checks,
            });
          },
        );
        // Prometheus text, not the JSON API (kept out of /openapi.json): every instrument of the process (docs/metrics.md).
        app.get('/metrics', { config: { probe: true }, schema: { hide: true } }, (request, reply) => {
          reply.hijack();
          metrics.exporter.getMetricsRequestHandler(request.raw, reply.raw);
        });
      },
    });
  } catch (error) {
    await stopOutbox().catch(() => undefined);
    await db.destroy();
    throw error;
  }
  const http = server;
  logger.info(`ready at ${http.url} (pid ${process.pid})`, {
    url: http.url,
    outbox: definition.outbox.table,
    drainer: resolved.runDrainer,
    reconciler: resolved.runReconciler,
  });

  let stopped: Promise<void> | undefined;
  return {
    name: definition.name,
    url: http.url,
    port: http.port,
    db,
    outbox,
    logger,
    onModelChanged: () => outbox.redrive(),
    stop() {
      stopped ??= (async () => {
        await http.close(resolved.shutdownTimeoutMs);
        const gaveUp = (what: string) => () =>
          new Error(`${what} did not finish within ${resolved.shutdownTimeoutMs} ms (is Postgres answering?)`);
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
