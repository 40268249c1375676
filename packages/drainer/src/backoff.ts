/** How retries are spaced (how long an intent that keeps failing lasts: `DrainerConfig.backoff`). */
export interface BackoffOptions {
  /**
   * Delay ceiling of the first retry, in ms: an integer from 0 to 2147483647, at most `maxMs`.
   * Default 1000: one second rides out a blip without hammering a target that is restarting.
   */
  readonly baseMs?: number;
  /**
   * Cap on any delay, in ms: an integer from `baseMs` to 2147483647. Default 300000 (5 min): a long
   * outage is probed every few minutes once the ceilings reach it.
   */
  readonly maxMs?: number;
}

/**
 * A uniformly random delay in [0, min(maxMs, baseMs·2^n)] for the n-th retry (n = attempts already
 * made): full jitter spreads a batch that failed together. The options are checked by `createDrainer`,
 * not here.
 */
export function backoffDelayMs(
  attemptsMade: number,
  options: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const base = options.baseMs ?? 1_000;
  const cap = options.maxMs ?? 300_000;
  const ceiling = Math.min(cap, base * 2 ** Math.min(attemptsMade, 30));
  return Math.floor(random() * ceiling);
}
