import { hostname } from 'node:os';
import type { Logger } from '@outbox/drainer';
import pino from 'pino';

/** The levels a service logs at, from the most verbose (pino's names). */
export type ServiceLogLevel = pino.Level;

/** What {@link createServiceLogger} takes. */
export interface ServiceLoggerOptions {
  /** Default `info`: a line per request, per start and stop, and whatever the libraries warn about. */
  readonly level?: ServiceLogLevel;
  /**
   * Where the lines go instead of stdout (tests, the demo): each JSON line is handed to the sink as
   * `(message, fields)` at its level, so a test asserts on what a service logged as it would read it.
   */
  readonly sink?: Logger;
}

/**
 * A service's pino logger: one JSON object per line on stdout, with `level` as a name, an ISO
 * `time`, and `service`, `pid` and `hostname` on every line (fastify adds `reqId` to the lines of a
 * request). stdout is written synchronously, so the line that says why a process exits is out
 * before it does.
 *
 * @example
 * const log = createServiceLogger('vpc');
 * log.info({ url }, 'ready'); // {"level":"info","time":"…","service":"vpc","pid":4242,"hostname":"…","url":"…","msg":"ready"}
 */
export function createServiceLogger(name: string, options: ServiceLoggerOptions = {}): pino.Logger {
  const settings = {
    level: options.level ?? 'info',
    base: { service: name, pid: process.pid, hostname: hostname() },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
  };
  return options.sink ? pino(settings, sinkStream(options.sink)) : pino(settings);
}

/** A pino destination that parses each line back and calls `sink` at its level. */
function sinkStream(sink: Logger): { write(line: string): void } {
  return {
    write(line) {
      const {
        level,
        msg,
        time: _time,
        service: _service,
        pid: _pid,
        hostname: _host,
        ...fields
      } = JSON.parse(line) as Record<string, unknown>;
      const message = typeof msg === 'string' ? msg : '';
      if (level === 'trace' || level === 'debug') sink.debug?.(message, fields);
      else if (level === 'info') sink.info(message, fields);
      else if (level === 'warn') sink.warn(message, fields);
      else sink.error(message, fields);
    },
  };
}

/**
 * The libraries' {@link Logger} (`(message, fields?)`, as the drainer and the reconciler call it)
 * over a pino logger, which takes `(fields, message)`: their lines become JSON lines of the service.
 *
 * @example
 * createDrainer({ db, spec, sink, logger: outboxLogger(app.log) });
 */
export function outboxLogger(log: Pick<pino.Logger, 'debug' | 'info' | 'warn' | 'error'>): Logger {
  return {
    debug: (message, fields) => log.debug(fields ?? {}, message),
    info: (message, fields) => log.info(fields ?? {}, message),
    warn: (message, fields) => log.warn(fields ?? {}, message),
    error: (message, fields) => log.error(fields ?? {}, message),
  };
}
