import type { Logger } from '@outbox/reconciler';

/** For the reconciler calls of a command that prints what they did itself: their log lines would say it twice. */
export const silentLogger: Logger = Object.freeze({
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
});
