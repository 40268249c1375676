import type { Logger } from '@outbox/drainer';

/** A logger that keeps what it was told (tests assert on warnings; nothing is printed). */
export interface RecordingLogger extends Logger {
  readonly entries: { level: 'info' | 'warn' | 'error'; message: string; fields?: Record<string, unknown> }[];
}

/** See {@link RecordingLogger}. Errors are also printed: a test should not hide one. */
export function recordingLogger(): RecordingLogger {
  const entries: RecordingLogger['entries'] = [];
  return {
    entries,
    info: (message, fields) => void entries.push({ level: 'info', message, ...(fields ? { fields } : {}) }),
    warn: (message, fields) => void entries.push({ level: 'warn', message, ...(fields ? { fields } : {}) }),
    error: (message, fields) => {
      entries.push({ level: 'error', message, ...(fields ? { fields } : {}) });
      console.error(message, fields ?? '');
    },
  };
}
