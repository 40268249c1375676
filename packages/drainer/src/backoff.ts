/** How retries are spaced. */
export interface BackoffOptions {
  /**
   * Delay ceiling of the first retry, in ms: an integer from 0 to 2147483647, at most `maxMs`.
   * Default 1000: one second rides out a blip without hammering a target that is restarting.
   */
  readonly baseMs?: number;
  /**
   * Cap on any delay, in ms: an integer from `baseMs` to 2147483647. Default 300000 (5 min): a long
   * outage is probed every few minutes once the ceilings reach it.
   *
   * With the defaults and maxAttempts 10, an intent that fails transiently every time (OpenFGA
   * unreachable, 5xx, timeouts) is poisoned at its 10th attempt: the 9 delays before it have
   * ceilings of 1, 2, 4, … 256 s (the cap is never reached), so it is poisoned at most ~8.5 min
   * (511 s) after its first attempt, ~4.3 min on average, plus the delivery attempts themselves and
   * up to one drainer `interval` per retry. To ride out longer outages raise `baseMs` (each doubling
   * doubles that window, until the ceilings hit `maxMs`) or the spec's `maxAttempts`; the
   * reconciler revives the poisoned intents on its timer anyway.
   */
  readonly maxMs?: number;
}

/**
 * Exponential backoff with full jitter: a uniformly random delay in [0, min(maxMs, baseMs·2^n)]
 * for the n-th retry (n = attempts already made). Full jitter spreads the retries of a batch that
 * failed together, so they do not come back as one thundering herd. The options are not checked
 * here: `createDrainer` rejects any that are not integers with `0 <= baseMs <= maxMs <= 2147483647`.
 */
export function backoffDelayMs(attemptsMade: number, options: BackoffOptions = {}, random: () => number = Math.random): number {
  const base = options.baseMs ?? 1_000;
  const cap = options.maxMs ?? 300_000;
  const ceiling = Math.min(cap, base * 2 ** Math.min(attemptsMade, 30));
  return Math.floor(random() * ceiling);
}
