export { startStack, startOpenFga, type Stack, type StackOptions, type StackSource } from './stack.js';
export { startEmbeddedPostgres, type PostgresServer, type NativePostgresOptions } from './native-postgres.js';
export { startNativeOpenFga, type OpenFgaServer, type OpenFgaServerOptions } from './native-openfga.js';
export { ensureOpenFgaBinary, OPENFGA_VERSION } from './openfga-binary.js';
export { StackError } from './stack-error.js';
export { freePort } from './free-port.js';
export { createDatabase, dropDatabase, withDatabase } from './databases.js';
export { useTestDatabase, useOpenFgaStore, openFgaClientConfig, stackInfo, type TestDatabase, type TestStore } from './test-context.js';
export type { ProvidedStack } from './provided.js';
