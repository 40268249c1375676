import { serviceOptionsFromEnv, type ServiceOptions } from './service-options.js';
import { startService, type ServiceDefinition } from './service.js';

/**
 * The process entry of a service (`src/main.ts` is one line calling it): reads the environment
 * (see SERVICE_ENV), starts the service, and handles signals:
 * - SIGTERM / SIGINT: graceful stop (no new requests, in-flight ones finish, drainer and
 *   reconciler stop after their batch, pool closed), then exit 0;
 * - SIGHUP: the authorization model changed, re-drive poisoned intents now.
 * Exits 1 with the reason when the configuration is wrong or the service cannot start.
 */
export async function runServiceMain(definition: ServiceDefinition, overrides: Partial<ServiceOptions> = {}): Promise<void> {
  let service;
  try {
    service = await startService(definition, { ...serviceOptionsFromEnv(definition.defaultPort), ...overrides });
  } catch (error) {
    console.error(`[${definition.name}] could not start: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
  const running = service;
  console.log(`[${definition.name}] ready at ${running.url}`);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`[${definition.name}] ${signal}: stopping gracefully`);
    running.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(`[${definition.name}] stop failed: ${String(error)}`);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => {
    running.onModelChanged().then(
      (r) => console.log(`[${definition.name}] model changed: revived ${r.revived.length}, superseded ${r.superseded.length}${r.skipped ? ' (skipped: another pass was running)' : ''}`),
      (error: unknown) => console.error(`[${definition.name}] redrive failed: ${String(error)}`),
    );
  });
}
