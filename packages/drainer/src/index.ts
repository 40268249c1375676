export { createDrainer, type Drainer } from './create-drainer.js';
export type { DrainerConfig, LateWritesOptions } from './drainer-config.js';
export type { DrainResult } from './drain-pass.js';
export { isSinkHalt, SinkHaltError, type Intent, type Outcome, type Sink, type SinkContext } from './sink.js';
export { createRecordingSink, type RecordingSink, type RecordingSinkOptions } from './recording-sink.js';
export { backoffDelayMs, type BackoffOptions } from './backoff.js';
export { sanitizeLastError, MAX_LAST_ERROR_LENGTH } from './last-error.js';
export { DrainerStoppedError, FlushPoisonedError, FlushTimeoutError } from './errors.js';
export type { DrainerEvent, Logger } from './events.js';
