import { OutboxConfigError, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { integerInRange, MAX_TIMER_MS, resolveIntervalMs } from '@outbox/outbox/protocol';
import type { BackoffOptions } from './backoff.js';
import type { DrainerConfig, LateWritesOptions } from './drainer-config.js';
import { drainerMetrics } from './drainer-metrics.js';
import type { DrainerEvent, Logger } from './events.js';
import { consoleLogger, guardedEmit, guardedLogger } from './guarded-hooks.js';
import type { Sink } from './sink.js';

/** A batch's settle takes one advisory lock per partition in it (docs/design.md §5: bound keys per batch). */
const MAX_BATCH_SIZE = 1_000;
/** Each open batch holds a pooled connection while its lane runs: past a handful, a pool is the limit, not OpenFGA. */
const MAX_CONCURRENT_BATCHES = 16;

/**
 * The defaults a pool is sized by (docs/design.md §5, "Open batches"; why each: {@link DrainerConfig}).
 *
 * @example
 * const pool = new pg.Pool({ connectionString, max: DRAINER_DEFAULTS.concurrentBatches + 1 + serviceConnections });
 */
export const DRAINER_DEFAULTS = { batchSize: 100, concurrentBatches: 3 } as const;

/** A {@link DrainerConfig} checked, with its defaults filled in and its hooks guarded; frozen. */
export interface ResolvedDrainerConfig {
  readonly db: AnyKysely;
  readonly spec: OutboxSpec;
  readonly sink: Sink;
  readonly batchSize: number;
  readonly concurrentBatches: number;
  readonly intervalMs: number;
  readonly deliveryTimeoutMs: number;
  readonly backoff: Readonly<Required<BackoffOptions>>;
  readonly listen: false | { readonly connectionString: string };
  readonly synchronousCommit: boolean;
  /** The late-write check's delay, or false when it is off. */
  readonly lateWrites: false | { readonly verifyDelayMs: number };
  readonly logger: Logger;
  readonly emit: (event: DrainerEvent) => void;
}

/** Checked: a NaN or negative delay would break or skip the retry spacing. */
function resolveBackoff(options: BackoffOptions | undefined): Readonly<Required<BackoffOptions>> {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new OutboxConfigError('backoff', `expected { baseMs?, maxMs? }, got ${String(options)}`);
  }
  const maxMs = integerInRange('backoff.maxMs', options?.maxMs, { fallback: 300_000, min: 0, max: MAX_TIMER_MS });
  // A cap given alone below the default base lowers the base with it: `{ maxMs: 500 }` means "never wait longer".
  const baseMs = integerInRange('backoff.baseMs', options?.baseMs, {
    fallback: Math.min(1_000, maxMs),
    min: 0,
    max: MAX_TIMER_MS,
  });
  if (baseMs > maxMs)
    throw new OutboxConfigError('backoff.maxMs', `expected at least backoff.baseMs (${baseMs}), got ${maxMs}`);
  return Object.freeze({ baseMs, maxMs });
}

/** A late write has landed this long after the sink's bound on it, or never will (clocks, scheduling). */
const LATE_WRITE_MARGIN_MS = 1_000;

/** Resolves `lateWrites` against what the sink can do: on by default only for a sink that bounds its writes and reads back. */
function resolveLateWrites(
  option: false | LateWritesOptions | undefined,
  sink: Sink,
): false | { readonly verifyDelayMs: number } {
  const lifetime = sink.writeLifetimeMs;
  if (lifetime !== undefined)
    integerInRange('sink.writeLifetimeMs', lifetime, { fallback: 0, min: 0, max: MAX_TIMER_MS - LATE_WRITE_MARGIN_MS });
  const canRead = typeof sink.readTuples === 'function';
  if (option === false) return false;
  if (option === undefined)
    return canRead && lifetime !== undefined
      ? Object.freeze({ verifyDelayMs: lifetime + LATE_WRITE_MARGIN_MS })
      : false;
  if (option === null || typeof option !== 'object')
    throw new OutboxConfigError('lateWrites', `expected { verifyDelayMs? } or false, got ${String(option)}`);
  if (!canRead)
    throw new OutboxConfigError(
      'lateWrites',
      'the sink cannot read its target back (it has no readTuples): pass false, or use a sink that can',
    );
  if (option.verifyDelayMs === undefined && lifetime === undefined) {
    throw new OutboxConfigError(
      'lateWrites.verifyDelayMs',
      'required: the sink does not say how long its writes may still be applied (writeLifetimeMs)',
    );
  }
  if (lifetime !== undefined && typeof option.verifyDelayMs === 'number' && option.verifyDelayMs < lifetime) {
    throw new OutboxConfigError(
      'lateWrites.verifyDelayMs',
      `expected at least the sink's writeLifetimeMs (${lifetime}): a check sooner may read before a late write lands, got ${option.verifyDelayMs}`,
    );
  }
  const verifyDelayMs = integerInRange('lateWrites.verifyDelayMs', option.verifyDelayMs, {
    fallback: (lifetime ?? 0) + LATE_WRITE_MARGIN_MS,
    min: Math.max(1, lifetime ?? 1),
    max: MAX_TIMER_MS,
  });
  return Object.freeze({ verifyDelayMs });
}

/** Checks `config` field by field; the first bad one throws an OutboxConfigError naming it. */
export function resolveDrainerConfig(config: DrainerConfig): ResolvedDrainerConfig {
  if (!config || typeof config !== 'object') throw new OutboxConfigError('config', 'expected { db, spec, sink }');
  if (!config.db) throw new OutboxConfigError('db', 'a Kysely instance is required');
  if (!config.spec || typeof config.spec.partitionColumn !== 'string') {
    throw new OutboxConfigError('spec', 'expected the OutboxSpec from defineOutbox()');
  }
  if (!config.sink || typeof config.sink.deliver !== 'function')
    throw new OutboxConfigError('sink', 'expected an object with deliver(intents, context)');
  const batchSize = integerInRange('batchSize', config.batchSize, {
    fallback: DRAINER_DEFAULTS.batchSize,
    min: 1,
    max: MAX_BATCH_SIZE,
  });
  const concurrentBatches = integerInRange('concurrentBatches', config.concurrentBatches, {
    fallback: DRAINER_DEFAULTS.concurrentBatches,
    min: 1,
    max: MAX_CONCURRENT_BATCHES,
  });
  const intervalMs = resolveIntervalMs(config, 1_000);
  const deliveryTimeoutMs = integerInRange('deliveryTimeoutMs', config.deliveryTimeoutMs, {
    fallback: 30_000,
    min: 1,
    max: MAX_TIMER_MS,
  });
  const backoff = resolveBackoff(config.backoff);
  if (config.synchronousCommit !== undefined && typeof config.synchronousCommit !== 'boolean') {
    throw new OutboxConfigError('synchronousCommit', `expected a boolean, got ${String(config.synchronousCommit)}`);
  }
  return Object.freeze({
    db: config.db,
    spec: config.spec,
    sink: config.sink,
    batchSize,
    concurrentBatches,
    intervalMs,
    deliveryTimeoutMs,
    backoff,
    listen: resolveListen(config.listen),
    synchronousCommit: config.synchronousCommit ?? false,
    lateWrites: resolveLateWrites(config.lateWrites, config.sink),
    logger: guardedLogger(config.logger ?? consoleLogger),
    emit: guardedEmit(config, drainerMetrics(config, config.spec.table)),
  });
}

/** URL schemes pg's connection strings take. */
const LISTEN_URL_PROTOCOLS = ['postgres:', 'postgresql:', 'socket:'];

function resolveListen(listen: DrainerConfig['listen']): ResolvedDrainerConfig['listen'] {
  if (listen === undefined || listen === false) return false;
  const connectionString = (listen as { connectionString?: unknown } | null)?.connectionString;
  if (typeof connectionString !== 'string' || connectionString === '') {
    throw new OutboxConfigError('listen', 'expected { connectionString } for the LISTEN connection, or false');
  }
  let protocol: string | undefined;
  try {
    protocol = new URL(connectionString).protocol;
  } catch {
    protocol = undefined;
  }
  if (protocol === undefined || !LISTEN_URL_PROTOCOLS.includes(protocol)) {
    // Not echoed: a string that fails to parse may still carry a password.
    throw new OutboxConfigError(
      'listen.connectionString',
      'expected a postgres:// URL to a server (or session-mode pooler) that holds a LISTEN session; got a string that is not one',
    );
  }
  return Object.freeze({ connectionString });
}
