import {
  ConsistencyPreference,
  FgaApiValidationError,
  OpenFgaClient,
  type UserClientConfigurationParams,
} from '@openfga/sdk';
import { HttpError } from './errors.js';

/** Where a service's OpenFGA is, shared by its authorizer (reads) and its sink (the drainer's writes). */
export interface OpenFgaConnection {
  /** OpenFGA's HTTP API, e.g. `http://127.0.0.1:8080`. */
  readonly apiUrl: string;
  readonly storeId: string;
  /**
   * The model checks run against and tuples are validated against. Default: the store's latest
   * model. Pin it in production (OPENFGA_MODEL_ID) so a model change is a deliberate step.
   */
  readonly authorizationModelId?: string;
  /** E.g. `{ method: CredentialsMethod.ApiToken, config: { token } }`. Default none. */
  readonly credentials?: UserClientConfigurationParams['credentials'];
}

/**
 * How fresh a check must be: `higher` skips OpenFGA's check caches (HIGHER_CONSISTENCY), `minimize`
 * may answer from them (MINIMIZE_LATENCY, the default). docs/design.md §12 says when a request needs which.
 */
export type ReadConsistency = 'higher' | 'minimize';

/** The reads a service makes of OpenFGA to authorize a request. */
export interface Authorizer {
  /** The consistency these reads ask for. */
  readonly consistency: ReadConsistency;
  /** The same reads at `consistency` (a request's, from its `Outbox-Consistency` header). */
  at(consistency: ReadConsistency): Authorizer;
  /** Is `user` (e.g. `user:alice`) related to `object` by `relation`? */
  check(user: string, relation: string, object: string): Promise<boolean>;
  /** Like `check`, but a refusal is a 403 {@link HttpError} naming what was refused. */
  require(user: string, relation: string, object: string): Promise<void>;
  /** The ids (without the `type:` prefix) of the objects of `type` that `user` has `relation` on. */
  listObjectIds(user: string, relation: string, type: string): Promise<string[]>;
}

const READ_OPTIONS = {
  higher: { consistency: ConsistencyPreference.HigherConsistency },
  minimize: { consistency: ConsistencyPreference.MinimizeLatency },
} as const;

/**
 * How long one check may take before the request answers 503. The SDK alone gives up on an OpenFGA
 * that does not answer (hung, or a network path that drops packets) only after 4 attempts of 10 s:
 * every request of the service hung 42 s before its 503. OpenFGA's own deadline for a check is 3 s
 * by default, so a slower answer is an outage (the SDK's retries of a quick 5xx fit well within it).
 */
export const AUTHORIZATION_TIMEOUT_MS = 5_000;

/** How long a whole list (`StreamedListObjects`) may take: OpenFGA cuts its stream at 3 s by default. */
export const LIST_TIMEOUT_MS = 10_000;

/** `work`, or a 503 `authorization_unavailable` after `ms` (the SDK's request goes on in the background and is dropped). */
function withDeadline<T>(ms: number, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new HttpError(
            503,
            'authorization_unavailable',
            `OpenFGA did not answer the authorization check within ${ms} ms: retry shortly`,
          ),
        ),
      ms,
    );
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

function unavailable(error: unknown): never {
  // The SDK throws FgaApiValidationError for both 400 and 422. A 400 (a type or relation the model
  // lacks) is our bug: 500. A 422 is OpenFGA throttling (throttled_timeout_error): unavailable, 503.
  if (error instanceof FgaApiValidationError && error.statusCode === 400) {
    throw error;
  }
  throw new HttpError(
    503,
    'authorization_unavailable',
    'OpenFGA did not answer the authorization check: retry shortly',
    { cause: error },
  );
}

/** An OpenFGA client for a service's connection (store, pinned model, credentials). */
export function openFgaClient(connection: OpenFgaConnection): OpenFgaClient {
  return new OpenFgaClient({
    apiUrl: connection.apiUrl,
    storeId: connection.storeId,
    ...(connection.authorizationModelId ? { authorizationModelId: connection.authorizationModelId } : {}),
    ...(connection.credentials ? { credentials: connection.credentials } : {}),
  });
}

/**
 * Builds the authorizer of a service. Reads ask for MINIMIZE_LATENCY unless told otherwise: a
 * request that must see a write (its `Outbox-Consistency` token) gets `at('higher')` while the
 * write is younger than the check cache's TTL (docs/design.md §12).
 *
 * @example
 * const fga = createAuthorizer({ apiUrl, storeId, authorizationModelId });
 * await fga.require('user:alice', 'can_view', 'vpc:42'); // throws HttpError 403 when not allowed
 */
export function createAuthorizer(
  connection: OpenFgaConnection,
  options: { timeoutMs?: number; listTimeoutMs?: number; consistency?: ReadConsistency } = {},
): Authorizer {
  const client = openFgaClient(connection);
  const timeoutMs = options.timeoutMs ?? AUTHORIZATION_TIMEOUT_MS;
  const listTimeoutMs = options.listTimeoutMs ?? LIST_TIMEOUT_MS;
  const both = new Map<ReadConsistency, Authorizer>();
  const build = (consistency: ReadConsistency): Authorizer => {
    const existing = both.get(consistency);
    if (existing) return existing;
    const authorizer = readsAt(client, consistency, timeoutMs, listTimeoutMs, build);
    both.set(consistency, authorizer);
    return authorizer;
  };
  return build(options.consistency ?? 'minimize');
}

function readsAt(
  client: OpenFgaClient,
  consistency: ReadConsistency,
  timeoutMs: number,
  listTimeoutMs: number,
  at: (consistency: ReadConsistency) => Authorizer,
): Authorizer {
  const readOptions = READ_OPTIONS[consistency];
  const check = async (user: string, relation: string, object: string) => {
    try {
      const { allowed } = await withDeadline(timeoutMs, client.check({ user, relation, object }, readOptions));
      return allowed === true;
    } catch (error) {
      if (error instanceof HttpError) throw error;
      return unavailable(error);
    }
  };
  return {
    consistency,
    at,
    check,
    async require(user, relation, object) {
      if (!(await check(user, relation, object))) {
        throw new HttpError(403, 'forbidden', `${user} is not allowed ${relation} on ${object}`);
      }
    },
    async listObjectIds(user, relation, type) {
      // Streamed: ListObjects stops at OpenFGA's max results (1,000 by default) without saying so,
      // and a caller who may view more would silently get a partial list.
      const prefix = `${type}:`;
      const ids: string[] = [];
      const read = async () => {
        for await (const { object } of client.streamedListObjects({ user, relation, type }, readOptions)) {
          if (object.startsWith(prefix)) ids.push(object.slice(prefix.length));
        }
      };
      try {
        await withDeadline(listTimeoutMs, read());
      } catch (error) {
        if (error instanceof HttpError) throw error;
        return unavailable(error);
      }
      return [...ids];
    },
  };
}
