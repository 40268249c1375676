// The OPENFGA_* variables for the test file's store (as the services read them). Test-only.
import { stackInfo, type TestStore } from '@outbox/test-stack';

export function openFgaEnv(store: TestStore, apiUrl = store.apiUrl): Record<string, string> {
  const key = stackInfo().openfgaPresharedKey;
  return {
    OPENFGA_API_URL: apiUrl,
    OPENFGA_STORE_ID: store.storeId,
    OPENFGA_MODEL_ID: store.authorizationModelId,
    ...(key ? { OPENFGA_API_TOKEN: key } : {}),
  };
}
