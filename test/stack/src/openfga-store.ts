import { randomBytes } from 'node:crypto';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { writeAuthorizationModel } from '@outbox/migrations';

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
  options: { presharedKey?: string } = {},
): Promise<{ storeId: string; authorizationModelId: string }> {
  const credentials = options.presharedKey
    ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: options.presharedKey } } }
    : {};
  const { id: storeId } = await new OpenFgaClient({ apiUrl, ...credentials }).createStore({ name: `test-${randomBytes(4).toString('hex')}` });
  const authorizationModelId = await writeAuthorizationModel(new OpenFgaClient({ apiUrl, storeId, ...credentials }));
  return { storeId, authorizationModelId };
}
