import { InvalidArgumentError } from 'commander';

const ID = /^[1-9][0-9]{0,18}$/;
const MAX_BIGINT = 2n ** 63n - 1n;

/**
 * An outbox row id argument: a positive bigint, as the table's identity column holds. Anything
 * else is refused as a usage error before any query runs.
 */
export function idArgument(value: string): string {
  if (!ID.test(value) || BigInt(value) > MAX_BIGINT)
    throw new InvalidArgumentError('expected an outbox row id (a positive whole number).');
  return value;
}

/** For variadic `IDS…`: each id checked, collected in order. */
export function idsArgument(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), idArgument(value)];
}
