import { ServiceConfigError } from './errors.js';
import { createServiceLogger } from './service-logger.js';
import { inEnvironmentTerms, serviceOptionsFromEnv, type ServiceOptions } from './service-options.js';
import { startService, type RunningService, type ServiceDefinition } from './service.js';
import { startServices } from './start-services.js';

/**
 * The process entry of a service (`src/main.ts` is one line calling it): reads the environment
 * (see SERVICE_ENV), starts the service, and handles signals:
 * - SIGTERM / SIGINT: graceful stop (no new requests, in-flight ones finish, drainer and
 *   reconciler stop after their batch, pool closed), then exit 0;
 * - SIGHUP: the authorization model changed, re-drive poisoned intents now.
 *
 * Exits 1 with one log line naming the variable and the problem when the configuration is wrong or
 * the service cannot start. The pid in its `ready at` line is the process to signal: the `start`
 * scripts `exec` node, so no shell or loader stands between pnpm and it.
 *
 * @example
 * await runServiceMain(vpcService); // src/main.ts
 */
export async function runServiceMain(
  definition: ServiceDefinition,
  overrides: Partial<ServiceOptions> = {},
): Promise<void> {
  await runServicesMain([definition], overrides);
}

/**
 * {@link runServiceMain} for several services in one process (the platform runner): each listens on
 * its `defaultPort` (PORT is ignored), and the signals reach them all.
 */
export async function runServicesMain(
  definitions: readonly ServiceDefinition[],
  overrides: Partial<ServiceOptions> = {},
): Promise<void> {
  const [only] = definitions.length === 1 ? definitions : [];
  const log = createServiceLogger(only?.name ?? 'platform');
  let running: readonly RunningService[];
  try {
    if (only) {
      running = [await startService(only, { ...serviceOptionsFromEnv(only.defaultPort), ...overrides })];
    } else {
      const { port: _ignored, ...options } = serviceOptionsFromEnv(0);
      const ports = Object.fromEntries(definitions.map((d) => [d.name, { port: d.defaultPort }]));
      running = Object.values(
        (await startServices(definitions, { ...options, ...overrides, overrides: ports })).services,
      );
    }
  } catch (error) {
    const reason = inEnvironmentTerms(error);
    log.error(
      reason instanceof ServiceConfigError ? { field: reason.field } : {},
      `could not start: ${reason instanceof Error ? reason.message : String(reason)}`,
    );
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`${signal}: stopping gracefully`);
    Promise.all(running.map((s) => s.stop())).then(
      () => process.exit(0),
      (error: unknown) => {
        log.error({ error: String(error) }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => {
    for (const service of running) {
      service.onModelChanged().then(
        (r) =>
          service.logger.info(
            `model changed: revived ${r.revived.length}, superseded ${r.superseded.length}${r.skipped ? ' (skipped: another pass was running)' : ''}`,
          ),
        (error: unknown) => service.logger.error('model changed: redrive failed', { error: String(error) }),
      );
    }
  });
}
