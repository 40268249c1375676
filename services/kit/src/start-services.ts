import type { OutboxStats } from '@outbox/outbox';
import type { ServiceOptions } from './service-options.js';
import { startService, type RunningService, type ServiceDefinition } from './service.js';

/** Options shared by every service started together, plus per-service overrides. */
export interface StartServicesOptions extends Omit<ServiceOptions, 'port'> {
  /** Per-service overrides (e.g. a fixed port, or flush on write off for one service). */
  readonly overrides?: Readonly<Record<string, Partial<ServiceOptions>>>;
}

/** Services started together. */
export interface RunningServices<N extends string> {
  /** Each service by name: its `url`, its `outbox` (drainer, reconciler, stats, redrive), `onModelChanged`, `stop`. */
  readonly services: { readonly [K in N]: RunningService<K> };
  /** Each service's base URL by name. */
  readonly urls: { readonly [K in N]: string };
  /** Every service's outbox counts, by name. */
  stats(): Promise<{ [K in N]: OutboxStats }>;
  /** Stops them all (in parallel, each gracefully). */
  stop(): Promise<void>;
}

/**
 * Starts several services in this process, each on a free port (unless overridden), and returns
 * them by name. If one fails to start, those already started are stopped and the error is thrown.
 *
 * @example
 * const { urls, services, stop } = await startServices([iamService, vpcService], { databaseUrl, openfga });
 */
export async function startServices<const D extends readonly ServiceDefinition[]>(
  definitions: D,
  options: StartServicesOptions,
): Promise<RunningServices<D[number]['name']>> {
  type N = D[number]['name'];
  const { overrides, ...shared } = options;
  const results = await Promise.allSettled(
    definitions.map((d) => startService(d, { ...shared, port: 0, ...overrides?.[d.name] })),
  );
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await Promise.all(started.map((s) => s.stop().catch(() => undefined)));
    throw failed.reason;
  }
  const services = Object.fromEntries(started.map((s) => [s.name, s])) as { [K in N]: RunningService<K> };
  const urls = Object.fromEntries(started.map((s) => [s.name, s.url])) as { [K in N]: string };
  return {
    services,
    urls,
    async stats() {
      const entries = await Promise.all(started.map(async (s) => [s.name, await s.outbox.stats()] as const));
      return Object.fromEntries(entries) as { [K in N]: OutboxStats };
    },
    async stop() {
      await Promise.all(started.map((s) => s.stop()));
    },
  };
}
