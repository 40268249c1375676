/**
 * A minimal structured logger (console, pino and winston fit). Same shape as the drainer's.
 *
 * @example
 * const reconciler = createReconciler({ db, spec, logger: pino().child({ component: 'reconciler' }) });
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/**
 * The default: warnings and errors on the console. Superseded intents are logged at WARN because a
 * human has to retire them; routine revivals and skipped passes stay quiet.
 */
export const consoleLogger: Logger = {
  info: () => undefined,
  warn: (message, fields) => console.warn(`[outbox-reconciler] ${message}`, fields ?? ''),
  error: (message, fields) => console.error(`[outbox-reconciler] ${message}`, fields ?? ''),
};
