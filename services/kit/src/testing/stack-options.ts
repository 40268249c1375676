import type { TestDatabase, TestStore } from '@outbox/test-stack';
import { openFgaClientConfig, stackInfo } from '@outbox/test-stack';
import type { ServiceOptions } from '../service-options.js';
import { recordingLogger } from './recording-logger.js';

/**
 * Service options pointing at the test file's database and OpenFGA store, with a recording logger
 * and a short drain interval (tests wait on the timer in places).
 */
export function serviceOptionsFor(
  database: TestDatabase,
  store: TestStore,
  overrides: Partial<ServiceOptions> = {},
): ServiceOptions {
  const { credentials } = openFgaClientConfig();
  return {
    databaseUrl: database.url,
    openfga: {
      apiUrl: store.apiUrl,
      storeId: store.storeId,
      authorizationModelId: store.authorizationModelId,
      ...(credentials ? { credentials } : {}),
    },
    logger: recordingLogger(),
    drainIntervalMs: 200,
    ...overrides,
  };
}

/** The environment a service process needs for the test file's database and store. */
export function serviceEnv(database: TestDatabase, store: TestStore): Record<string, string> {
  const key = stackInfo().openfgaPresharedKey;
  return {
    DATABASE_URL: database.url,
    OPENFGA_API_URL: store.apiUrl,
    OPENFGA_STORE_ID: store.storeId,
    OPENFGA_MODEL_ID: store.authorizationModelId,
    ...(key ? { OPENFGA_API_TOKEN: key } : {}),
  };
}
