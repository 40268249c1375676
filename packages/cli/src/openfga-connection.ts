import {
  CredentialsMethod,
  FgaApiAuthenticationError,
  FgaApiNotFoundError,
  FgaApiValidationError,
  OpenFgaClient,
} from '@openfga/sdk';
import { CliError } from './cli-error.js';
import type { CheckedConfig } from './config.js';
import { expandEnv } from './env-refs.js';
import { EXIT } from './exit-codes.js';
import { isUnreachable, networkReason } from './explain-error.js';

/** OpenFGA as the commands use it, every env reference resolved. */
export interface OpenFgaConnection {
  readonly apiUrl: string;
  readonly storeId: string;
  readonly authorizationModelId?: string;
  readonly credentials?: { readonly method: CredentialsMethod.ApiToken; readonly config: { readonly token: string } };
}

/** OpenFGA's store and model ids are ULIDs; the SDK refuses any other only as an unexplained "must be in ULID format". */
const ULID = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/;

/** True for an http(s) URL the SDK can build requests on. */
function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
}

/** The config's OpenFGA connection, or a usage error saying it is missing, which variable is unset, or which field is malformed. */
export function openFgaConnection(config: CheckedConfig, env: NodeJS.ProcessEnv, command: string): OpenFgaConnection {
  const o = config.openfga;
  if (!o)
    throw new CliError(
      `${command} needs OpenFGA, and ${config.source} has no openfga section`,
      'add openfga: { apiUrl, storeId }',
      EXIT.usage,
    );
  const value = (field: string, raw: string | undefined) =>
    raw === undefined ? undefined : expandEnv(`openfga.${field}`, raw, env, config.source);
  const apiUrl = value('apiUrl', o.apiUrl);
  const storeId = value('storeId', o.storeId);
  if (!apiUrl || !storeId)
    throw new CliError(`${config.source}: openfga.${apiUrl ? 'storeId' : 'apiUrl'} is empty`, undefined, EXIT.usage);
  if (!isHttpUrl(apiUrl))
    throw new CliError(
      `${config.source}: openfga.apiUrl is not an http(s) URL`,
      'e.g. http://127.0.0.1:8080',
      EXIT.usage,
    );
  const authorizationModelId = value('authorizationModelId', o.authorizationModelId);
  for (const [field, id, what] of [
    ['storeId', storeId, 'store'],
    ['authorizationModelId', authorizationModelId, 'model'],
  ] as const) {
    if (id && !ULID.test(id))
      throw new CliError(
        `${config.source}: openfga.${field} is not an OpenFGA ${what} id (a 26-character ULID): ${JSON.stringify(id)}`,
        undefined,
        EXIT.usage,
      );
  }
  const token = value('apiToken', o.apiToken);
  return {
    // The SDK appends `/stores/…` as is, and OpenFGA answers 404 to `//stores/…`.
    apiUrl: apiUrl.replace(/\/+$/, ''),
    storeId,
    ...(authorizationModelId ? { authorizationModelId } : {}),
    ...(token ? { credentials: { method: CredentialsMethod.ApiToken, config: { token } } } : {}),
  };
}

/**
 * Checks that OpenFGA answers as the store, and that the model exists (the pinned one, or any):
 * before a drain, so that an unreachable server or a wrong store id ends the command (exit 3 or 2)
 * instead of burning an attempt of every intent. Returns the model id that will be used.
 */
export async function checkOpenFga(connection: OpenFgaConnection, timeoutMs = 5_000): Promise<string> {
  const client = new OpenFgaClient({ ...connection, credentials: connection.credentials });
  const once = { retryParams: { maxRetry: 0 } };
  const where = `OpenFGA at ${connection.apiUrl}`;
  const bounded = <T>(work: Promise<T>) =>
    Promise.race([
      work,
      new Promise<never>((_, reject) =>
        setTimeout(
          () => reject(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })),
          timeoutMs,
        ).unref(),
      ),
    ]);
  try {
    const store = (await bounded(client.getStore(once))) as { id?: unknown } | undefined;
    if (store?.id !== connection.storeId)
      throw new CliError(
        `${where} answered GetStore with something that is not store ${connection.storeId}`,
        "is openfga.apiUrl OpenFGA's HTTP API?",
        EXIT.usage,
      );
    if (connection.authorizationModelId) {
      await bounded(client.readAuthorizationModel({ ...once, authorizationModelId: connection.authorizationModelId }));
      return connection.authorizationModelId;
    }
    const latest = (await bounded(client.readLatestAuthorizationModel(once))).authorization_model;
    if (!latest)
      throw new CliError(
        `store ${connection.storeId} has no authorization model`,
        'write one (pnpm migrate does, for this repo)',
        EXIT.usage,
      );
    return latest.id;
  } catch (error) {
    if (error instanceof CliError) throw error;
    if (error instanceof FgaApiNotFoundError)
      throw new CliError(`${where} has no store ${connection.storeId}`, 'check openfga.storeId', EXIT.usage, {
        cause: error,
      });
    if (error instanceof FgaApiValidationError && error.apiErrorCode === 'authorization_model_not_found') {
      throw new CliError(
        `store ${connection.storeId} has no authorization model ${connection.authorizationModelId ?? ''}`,
        'check openfga.authorizationModelId',
        EXIT.usage,
        { cause: error },
      );
    }
    if (
      error instanceof FgaApiAuthenticationError ||
      [401, 403].includes((error as { statusCode?: number }).statusCode ?? 0)
    ) {
      throw new CliError(`${where} refused the credentials`, 'check openfga.apiToken', EXIT.usage, { cause: error });
    }
    if (isUnreachable(error))
      throw new CliError(
        `${where} did not answer: ${networkReason(error)}`,
        'is it running, and is openfga.apiUrl right?',
        EXIT.unreachable,
        { cause: error },
      );
    throw error;
  }
}
