/**
 * A minimal structured logger, the one shape the drainer and the reconciler log through:
 * `(message, fields)`. `console` and winston take it as is. pino's methods take `(fields, message)`
 * and would drop the fields (which carry e.g. the ids a superseded-row warning asks a human to
 * retire), so wrap it.
 *
 * @example
 * const log = pino().child({ component: 'drainer' });
 * const logger: Logger = {
 *   info: (message, fields) => log.info(fields ?? {}, message),
 *   warn: (message, fields) => log.warn(fields ?? {}, message),
 *   error: (message, fields) => log.error(fields ?? {}, message),
 * };
 * const drainer = createDrainer({ db, spec, sink, logger });
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}
