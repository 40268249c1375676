/** One line a {@link recordingLogger} was told. */
export interface LogEntry {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly message: string;
  readonly fields?: Record<string, unknown>;
}

/** A logger (the drainer's and reconciler's shape) that keeps what it was told. */
export interface RecordingLogger {
  readonly entries: LogEntry[];
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/**
 * A logger for tests: keeps every entry so a test can assert on warnings, prints nothing but
 * errors (a test should not hide one).
 *
 * @example
 * const logger = recordingLogger();
 * await createReconciler({ db, spec, logger }).redrivePoisoned();
 * expect(logger.entries.filter((e) => e.level === 'warn')).toHaveLength(1);
 */
export function recordingLogger(): RecordingLogger {
  const entries: LogEntry[] = [];
  const at = (level: LogEntry['level']) => (message: string, fields?: Record<string, unknown>) => {
    entries.push({ level, message, ...(fields ? { fields } : {}) });
    if (level === 'error') console.error(message, fields ?? '');
  };
  return { entries, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
