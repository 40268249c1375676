import { OutboxConfigError } from './errors.js';

/** The bounds of one integer option; `fallback` stands in for an undefined value. */
export interface IntegerRange {
  readonly min: number;
  /** Default: `Number.MAX_SAFE_INTEGER`. */
  readonly max?: number;
  readonly fallback?: number;
}

/** The config error a package throws: its own class, with the `(field, message)` constructor they all share. */
export type ConfigErrorClass = new (field: string, message: string) => Error;

/**
 * `value` (or `range.fallback` when it is undefined) if it is an integer from `min` to `max`, else a
 * config error naming `field`: an {@link OutboxConfigError} unless the caller's package names its own.
 * The one integer check of every package's options.
 * @example
 * const batchSize = integerInRange('batchSize', options.batchSize, { fallback: 100, min: 1, max: 1_000 });
 */
export function integerInRange(
  field: string,
  value: unknown,
  range: IntegerRange,
  configError: ConfigErrorClass = OutboxConfigError,
): number {
  const { min, max = Number.MAX_SAFE_INTEGER, fallback } = range;
  const result = value ?? fallback;
  if (typeof result !== 'number' || !Number.isInteger(result) || result < min || result > max) {
    const shown = typeof value === 'string' ? JSON.stringify(value) : String(value);
    throw new configError(field, `expected an integer from ${min} to ${max}, got ${shown}`);
  }
  return result;
}

/** Node's timers take at most 2^31 - 1 ms: a longer delay is silently replaced by 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * A runner's `intervalMs` (milliseconds between scheduled passes), or `interval`, its old name, still
 * accepted; giving both is a config error, as a disagreement between them has no right answer.
 */
export function resolveIntervalMs(
  config: { readonly intervalMs?: unknown; readonly interval?: unknown },
  fallback: number,
): number {
  if (config.intervalMs !== undefined && config.interval !== undefined) {
    throw new OutboxConfigError('interval', 'give intervalMs only (interval is its old name)');
  }
  const field = config.interval === undefined ? 'intervalMs' : 'interval';
  return integerInRange(field, config.intervalMs ?? config.interval, { fallback, min: 1, max: MAX_TIMER_MS });
}
