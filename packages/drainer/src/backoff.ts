/** How retries are spaced. */
export interface BackoffOptions {
  /**
   * Delay ceiling of the first retry, in ms. Default 1000: one second rides out a blip without
   * hammering a target that is restarting.
   */
  readonly baseMs?: number;
  /**
   * Cap on any delay, in ms. Default 300000 (5 min): a long outage is probed every few minutes,
   * and with maxAttempts 10 an intent is poisoned after roughly 20 minutes of trying.
   */
  readonly maxMs?: number;
}

/**
 * Exponential backoff with full jitter: a uniformly random delay in [0, min(maxMs, baseMs·2^n)]
 * for the n-th retry (n = attempts already made). Full jitter spreads the retries of a batch that
 * failed together, so they do not come back as one thundering herd.
 */
export function backoffDelayMs(attemptsMade: number, options: BackoffOptions = {}, random: () => number = Math.random): number {
  const base = options.baseMs ?? 1_000;
  const cap = options.maxMs ?? 300_000;
  const ceiling = Math.min(cap, base * 2 ** Math.min(attemptsMade, 30));
  return Math.floor(random() * ceiling);
}
