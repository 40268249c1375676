import type { DrainerEvent, Logger } from './events.js';

/** The default logger: warnings and errors on the console. */
export const consoleLogger: Logger = {
  info: () => undefined,
  warn: (message, fields) => console.warn(`[outbox-drainer] ${message}`, fields ?? ''),
  error: (message, fields) => console.error(`[outbox-drainer] ${message}`, fields ?? ''),
};

/** Swallows the rejection of a promise a handler typed `void` returned anyway (an async handler). */
function ignoreRejection(value: unknown): void {
  if (typeof (value as PromiseLike<unknown> | undefined)?.then === 'function') {
    Promise.resolve(value).catch(() => undefined);
  }
}

/**
 * The service's logger, each call shielded: one that throws (ending a pass after its commit, or a
 * LISTEN reconnect in a pg event handler) or rejects (an unhandled rejection ends Node) is ignored.
 * Methods are looked up at each call: pino on a level change, or vi.spyOn, replaces them later.
 */
export function guardedLogger(target: Logger): Logger {
  const guard = (level: 'debug' | 'info' | 'warn' | 'error') => (message: string, fields?: Record<string, unknown>) => {
    try {
      ignoreRejection(target[level]?.call(target, message, fields));
    } catch {
      // a broken log transport must not break delivery
    }
  };
  return { debug: guard('debug'), info: guard('info'), warn: guard('warn'), error: guard('error') };
}

/** Calls `record` (the drainer's metrics), then `hooks.onEvent` (looked up at each call, as the logger's methods are), each shielded the same way. */
export function guardedEmit(
  hooks: { readonly onEvent?: (event: DrainerEvent) => void },
  record?: (event: DrainerEvent) => void,
): (event: DrainerEvent) => void {
  return (event) => {
    try {
      record?.(event);
    } catch {
      // nor may a meter
    }
    try {
      ignoreRejection(hooks.onEvent?.(event));
    } catch {
      // a metrics hook must not break delivery
    }
  };
}
