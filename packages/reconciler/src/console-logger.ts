import type { Logger } from '@outbox/outbox';

export type { Logger };

/**
 * The default: warnings and errors on the console. Superseded intents are logged at WARN because a
 * human has to retire them; routine revivals and skipped passes stay quiet.
 */
export const consoleLogger: Logger = {
  info: () => undefined,
  warn: (message, fields) => console.warn(`[outbox-reconciler] ${message}`, fields ?? ''),
  error: (message, fields) => console.error(`[outbox-reconciler] ${message}`, fields ?? ''),
};
