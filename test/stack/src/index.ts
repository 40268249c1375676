export { startStack, startOpenFga, type Stack, type StackOptions, type StackSource } from './stack.js';
export {
  startEmbeddedPostgres,
  type PostgresServer,
  type NativePostgresOptions,
  type NativePostgresServer,
} from './native-postgres.js';
export { startNativeOpenFga, type OpenFgaServer, type OpenFgaServerOptions } from './native-openfga.js';
export { ensureOpenFgaBinary, OPENFGA_VERSION } from './openfga-binary.js';
export { pgBouncerBinary, startPgBouncer, type PgBouncer, type PgBouncerOptions } from './pgbouncer.js';
export { haproxyBinary, startHaproxy, type Haproxy, type HaproxyFrontend } from './haproxy.js';
export { StackError } from './stack-error.js';
export { freePort } from './free-port.js';
export { processes, processStat, type ProcessStat } from './proc.js';
export { createDatabase, dropDatabase, withDatabase } from './databases.js';
export {
  useTestDatabase,
  useOpenFgaStore,
  openFgaClientConfig,
  stackInfo,
  type TestDatabase,
  type TestStore,
} from './test-context.js';
export type { ProvidedStack } from './provided.js';
export { createOpenFgaStore } from './openfga-store.js';
export { recordingLogger, type LogEntry, type RecordingLogger } from './recording-logger.js';
export {
  startDelayingProxy,
  type DelayingProxy,
  type DelayingProxyEvent,
  type DelayingProxyOptions,
  type DelayingProxyStats,
  type HeldRequest,
  type ProxyUpstream,
} from './delaying-proxy.js';
