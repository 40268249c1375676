import { OutboxConfigError } from './errors.js';

/**
 * `value` if it is an integer from `min` to `max`, else an {@link OutboxConfigError} naming `field`.
 * @example
 * const batchSize = integerInRange('batchSize', options.batchSize ?? 100, 1, 1_000);
 */
export function integerInRange(
  field: string,
  value: unknown,
  min: number,
  max: number = Number.MAX_SAFE_INTEGER,
): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new OutboxConfigError(field, `expected an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}
