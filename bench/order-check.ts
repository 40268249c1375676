/** Per-key order of a run, as seen by whoever processed it. */
export interface OrderCheck {
  /** Keys whose items were processed in another order than they were created. */
  readonly keysOutOfOrder: number;
  /** Adjacent pairs (in processing order, per key) where a later-created item went first. */
  readonly inversions: number;
  /** Items counted. */
  readonly items: number;
}

/**
 * Counts order violations per key: `processed` lists, in the order they were processed (completed,
 * delivered), each item's key and its creation rank (larger = created later).
 */
export function checkOrder(processed: Iterable<{ readonly key: string; readonly rank: number }>): OrderCheck {
  const last = new Map<string, number>();
  const bad = new Set<string>();
  let inversions = 0;
  let items = 0;
  for (const { key, rank } of processed) {
    items += 1;
    const previous = last.get(key);
    if (previous !== undefined && rank < previous) {
      inversions += 1;
      bad.add(key);
    }
    last.set(key, rank);
  }
  return { keysOutOfOrder: bad.size, inversions, items };
}

/** `0 of 1,000 keys out of order` or `12 of 1,000 keys out of order (37 inversions)`. */
export function describeOrder(check: OrderCheck, keys: number, noun = 'keys'): string {
  const base = `${check.keysOutOfOrder.toLocaleString('en-US')} of ${keys.toLocaleString('en-US')} ${noun} out of order`;
  return check.inversions > 0 ? `${base} (${check.inversions.toLocaleString('en-US')} inversions)` : base;
}
