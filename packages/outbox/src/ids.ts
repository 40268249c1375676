/**
 * Orders two outbox row ids as pg returns them (bigint as decimal strings; identity ids are
 * positive, without leading zeros): the shorter is smaller, equal lengths compare as text. The same
 * order as `BigInt(a) - BigInt(b)` without building two BigInts per comparison (the drainer compares
 * every intent of every batch).
 *
 * @internal shared by @outbox/drainer and @outbox/reconciler; not for application code.
 */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
