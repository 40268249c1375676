/**
 * A minimal structured logger, the one shape the drainer and the reconciler log through (console,
 * pino and winston fit).
 *
 * @example
 * const drainer = createDrainer({ db, spec, sink, logger: pino().child({ component: 'drainer' }) });
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}
