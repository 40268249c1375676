import { FgaApiNotFoundError, FgaApiValidationError } from '@openfga/sdk';
import type { Logger } from '@outbox/drainer';
import { openFgaClient, type OpenFgaConnection } from './authorizer.js';
import { ServiceConfigError } from './errors.js';

/**
 * Checks at start that the store exists and that the model the service writes against does (the
 * pinned one, or else the store has a model at all). A mistyped store or model id is refused here
 * with a {@link ServiceConfigError}, at once: left to the drainer, OpenFGA's `authorization_model_not_found`
 * halts every pass (nothing delivered, nothing poisoned), which is only seen in its logs and events.
 *
 * An OpenFGA that does not answer (down, throttled, credentials refused) only logs a warning: the
 * service starts, its requests answer 503 while their authorization checks cannot be made, and the
 * drainer's own error handling (retry, or halt without counting attempts) delivers what is in the
 * outbox once OpenFGA is back.
 */
export async function verifyOpenFgaTarget(connection: OpenFgaConnection, logger: Logger): Promise<void> {
  const client = openFgaClient(connection);
  const noRetry = { retryParams: { maxRetry: 0 } };
  try {
    // The answer is checked, not only its status: the sink trusts a Write's 2xx, so an apiUrl that
    // reaches some other web server answering 200 would have every intent "delivered" into nothing.
    const store: unknown = await client.getStore(noRetry);
    if ((store as { id?: unknown } | undefined)?.id !== connection.storeId) {
      throw new ServiceConfigError(
        'openfga.apiUrl',
        `${connection.apiUrl} (OPENFGA_API_URL) answered GetStore with something that is not OpenFGA's store ${connection.storeId}: is it OpenFGA's HTTP API?`,
      );
    }
    if (connection.authorizationModelId) {
      await client.readAuthorizationModel({ ...noRetry, authorizationModelId: connection.authorizationModelId });
    } else if (!(await client.readLatestAuthorizationModel(noRetry)).authorization_model) {
      throw new ServiceConfigError(
        'openfga.storeId',
        `store ${connection.storeId} (OPENFGA_STORE_ID) has no authorization model yet (pnpm migrate writes it)`,
      );
    }
  } catch (error) {
    if (error instanceof ServiceConfigError) throw error;
    if (error instanceof FgaApiNotFoundError) {
      throw new ServiceConfigError(
        'openfga.storeId',
        `OpenFGA at ${connection.apiUrl} has no store ${connection.storeId} (OPENFGA_STORE_ID; pnpm migrate prints it)`,
        {
          cause: error,
        },
      );
    }
    if (error instanceof FgaApiValidationError && error.apiErrorCode === 'authorization_model_not_found') {
      throw new ServiceConfigError(
        'openfga.authorizationModelId',
        `store ${connection.storeId} has no authorization model ${connection.authorizationModelId ?? ''} (OPENFGA_MODEL_ID; pnpm migrate prints the current one)`,
        { cause: error },
      );
    }
    logger.warn(
      `could not check the OpenFGA store and model at start; going on (the drainer retries): ${error instanceof Error ? error.message : String(error)}`,
      {
        apiUrl: connection.apiUrl,
        storeId: connection.storeId,
      },
    );
  }
}
