import { randomBytes } from 'node:crypto';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import type { WriteAuthorizationModelRequest } from '@openfga/sdk';
import { inject } from 'vitest';

function providedModel(): WriteAuthorizationModelRequest | undefined {
  try {
    return inject('outboxStack')?.authorizationModel;
  } catch {
    return undefined; // not inside a vitest worker
  }
}

/**
 * Creates a store with the project's authorization model on the OpenFGA at `apiUrl` (one the test
 * started itself, e.g. with a preshared key or after a restart), and returns its ids.
 *
 * @example
 * const server = await startOpenFga({ presharedKey: 'right' });
 * const { storeId, authorizationModelId } = await createOpenFgaStore(server.apiUrl, { presharedKey: 'right' });
 */
export async function createOpenFgaStore(
  apiUrl: string,
  options: { presharedKey?: string; authorizationModel?: WriteAuthorizationModelRequest } = {},
): Promise<{ storeId: string; authorizationModelId: string }> {
  // Inside a test the model comes from the global setup; elsewhere (benchmarks) pass it.
  const model = options.authorizationModel ?? providedModel();
  if (!model) throw new Error('createOpenFgaStore: pass authorizationModel (outside vitest there is no provided one)');
  const credentials = options.presharedKey
    ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: options.presharedKey } } }
    : {};
  const { id: storeId } = await new OpenFgaClient({ apiUrl, ...credentials }).createStore({
    name: `test-${randomBytes(4).toString('hex')}`,
  });
  const { authorization_model_id: authorizationModelId } = await new OpenFgaClient({
    apiUrl,
    storeId,
    ...credentials,
  }).writeAuthorizationModel(model);
  return { storeId, authorizationModelId };
}
