/**
 * The logger of the drainer and the reconciler: `(message, fields)`, as `console` and winston log;
 * wrap pino, which takes `(fields, message)`.
 * @example
 * const logger: Logger = { info: (m, f) => log.info(f ?? {}, m), warn: (m, f) => log.warn(f ?? {}, m), error: (m, f) => log.error(f ?? {}, m) };
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}
