import { OpenFgaClient } from '@openfga/sdk';
import { authorizationModel } from '@outbox/migrations';
import { createOpenFgaSink, type OpenFgaSink, type OpenFgaSinkOptions } from '@outbox/openfga';
import { createOpenFgaStore } from '@outbox/test-stack';
import { credentialsOf } from './openfga-credentials.js';

/** An OpenFGA server to write to: its API, and the preshared key it requires, if any. */
export interface OpenFgaTarget {
  readonly apiUrl: string;
  readonly token: string | undefined;
}

/** A store of its own, with the project's model: a client on it (no retries) and the OpenFGA sink with `sinkOptions`. */
export async function freshStore(
  target: OpenFgaTarget,
  sinkOptions: OpenFgaSinkOptions = {},
): Promise<{ client: OpenFgaClient; sink: OpenFgaSink; storeId: string }> {
  const ids = await createOpenFgaStore(target.apiUrl, {
    authorizationModel: authorizationModel(),
    ...(target.token ? { presharedKey: target.token } : {}),
  });
  return {
    client: new OpenFgaClient({
      apiUrl: target.apiUrl,
      ...ids,
      retryParams: { maxRetry: 0 },
      ...credentialsOf(target.token),
    }),
    sink: createOpenFgaSink({ apiUrl: target.apiUrl, ...ids, ...credentialsOf(target.token), ...sinkOptions }),
    storeId: ids.storeId,
  };
}
