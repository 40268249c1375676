import { OpenFgaClient, type UserClientConfigurationParams } from '@openfga/sdk';
import type { Intent, Outcome, Sink, SinkContext } from '@outbox/drainer';
import { deliverBisecting, fail, type DeliveryState } from './bisect.js';
import { OpenFgaSinkConfigError } from './errors.js';
import { integerInRange } from '@outbox/outbox/protocol';
import {
  keysDeletedLater,
  packRound,
  prepareIntents,
  segmentByPartition,
  type PreparedIntent,
  type Segment,
} from './pack.js';
import { canReadBack, readBack } from './read-back.js';
import {
  NO_RETRY,
  sendWrite,
  type OpenFgaWriteClient,
  type OpenFgaWriteEvent,
  type WriteContext,
} from './write-request.js';

/**
 * Knobs shared by both ways of pointing the sink at OpenFGA.
 *
 * @example
 * createOpenFgaSink({ client, timeoutMs: 5_000, onRequest: (e) => histogram.observe(e.durationMs) });
 */
export interface OpenFgaSinkOptions {
  /**
   * Most tuple operations (writes + deletes) per Write request. Default 100, OpenFGA's default
   * limit: raise it only with the server's. An intent is never split; a larger one goes alone.
   */
  readonly maxTuplesPerWrite?: number;
  /**
   * Milliseconds a Write may take before it is abandoned as transient. Default 10000: a Write takes
   * milliseconds, and a third of the drainer's 30 s deadline leaves room for the rest of the batch.
   */
  readonly timeoutMs?: number;
  /**
   * How long OpenFGA may work on a request it received, in ms: its `--request-timeout`. Default
   * 3000, OpenFGA's default; set it to the server's. With `timeoutMs` it bounds how late a Write
   * can still be applied (`writeLifetimeMs`), which the drainer's late-write check waits out.
   */
  readonly serverRequestTimeoutMs?: number;
  /**
   * Write requests in flight at once in one `deliver` call (they never share a key or a partition).
   * Default 4: hides round trips on a batch of 100 without crowding OpenFGA's datastore.
   */
  readonly maxConcurrentRequests?: number;
  /** Called after every Write request with its size, duration and result (a metrics hook); its exceptions are ignored. */
  readonly onRequest?: (event: OpenFgaWriteEvent) => void;
}

/**
 * Use a client you built, with store, model and credentials set on it (its retries are turned off
 * per request). Connection fields next to it are refused: the sink would ignore them.
 *
 * @example
 * createOpenFgaSink({ client: new OpenFgaClient({ apiUrl, storeId, authorizationModelId }) });
 */
export interface OpenFgaSinkClientConfig extends OpenFgaSinkOptions {
  readonly client: OpenFgaWriteClient;
  /** Not with a client: set it on the client (`new OpenFgaClient({ …, authorizationModelId })`). */
  readonly authorizationModelId?: never;
  /** Not with a client: set it on the client (`new OpenFgaClient({ …, credentials })`). */
  readonly credentials?: never;
}

/** Let the sink build its own client (see {@link createOpenFgaSink}'s example). */
export interface OpenFgaSinkConnectionConfig extends OpenFgaSinkOptions {
  /** OpenFGA's HTTP API, e.g. `http://openfga:8080`. Required. */
  readonly apiUrl: string;
  /** The store to write to. Required. */
  readonly storeId: string;
  /**
   * The model tuples are validated against. Default: the store's latest. Pin it in production so a
   * model change is a deliberate step; `undefined` (e.g. an unset env variable) means the default.
   */
  readonly authorizationModelId?: string | undefined;
  /**
   * `{ method: CredentialsMethod.ApiToken, config: { token } }`, or client credentials. Default
   * none: only for a server without authentication (local, tests).
   */
  readonly credentials?: UserClientConfigurationParams['credentials'];
}

/** What `createOpenFgaSink` takes: a client, or what to build one from. */
export type OpenFgaSinkConfig = OpenFgaSinkClientConfig | OpenFgaSinkConnectionConfig;

/** The drainer's `Sink`, plus the settings it resolved (defaults applied), e.g. to log at start. */
export interface OpenFgaSink extends Sink {
  readonly maxTuplesPerWrite: number;
  readonly timeoutMs: number;
  readonly serverRequestTimeoutMs: number;
  readonly maxConcurrentRequests: number;
  /**
   * `timeoutMs + serverRequestTimeoutMs`: no Write this sink sent is applied later than this after
   * it was sent, as long as nothing between the sink and OpenFGA holds it longer (docs/agreement.md).
   */
  readonly writeLifetimeMs: number;
}

/** Defaults of {@link OpenFgaSinkOptions}, whose fields give the reasons. */
export const OPENFGA_SINK_DEFAULTS = {
  maxTuplesPerWrite: 100,
  timeoutMs: 10_000,
  serverRequestTimeoutMs: 3_000,
  maxConcurrentRequests: 4,
} as const;

const CONNECTION_FIELDS = ['apiUrl', 'storeId', 'authorizationModelId', 'credentials'] as const;

function nonEmpty(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim() === '')
    throw new OpenFgaSinkConfigError(field, `expected a non-empty string, got ${JSON.stringify(value)}`);
  return value;
}

function buildClient(config: OpenFgaSinkConnectionConfig): OpenFgaWriteClient {
  const apiUrl = nonEmpty('apiUrl', config.apiUrl);
  let url: URL;
  try {
    url = new URL(apiUrl);
  } catch (error) {
    throw new OpenFgaSinkConfigError('apiUrl', 'expected an absolute http(s) URL such as http://openfga:8080', {
      cause: error,
    });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new OpenFgaSinkConfigError('apiUrl', `expected an http(s) URL, got the scheme ${url.protocol}`);
  }
  const storeId = nonEmpty('storeId', config.storeId);
  if (config.authorizationModelId !== undefined) nonEmpty('authorizationModelId', config.authorizationModelId);
  if (config.credentials !== undefined && (config.credentials === null || typeof config.credentials !== 'object')) {
    throw new OpenFgaSinkConfigError('credentials', 'expected { method, config } as @openfga/sdk takes it');
  }
  try {
    return new OpenFgaClient({
      // `//stores/…` is a 404, which would halt every pass.
      apiUrl: apiUrl.replace(/\/+$/, ''),
      storeId,
      ...(config.authorizationModelId !== undefined ? { authorizationModelId: config.authorizationModelId } : {}),
      ...(config.credentials !== undefined ? { credentials: config.credentials } : {}),
      retryParams: { ...NO_RETRY },
    });
  } catch (error) {
    const sdkField = (error as { field?: unknown }).field;
    const field =
      typeof sdkField === 'string' && sdkField !== ''
        ? sdkField.startsWith('credentials') ||
          ['clientId', 'clientSecret', 'apiTokenIssuer', 'apiAudience', 'token'].includes(sdkField)
          ? 'credentials'
          : sdkField
        : 'config';
    throw new OpenFgaSinkConfigError(field, error instanceof Error ? error.message : String(error), { cause: error });
  }
}

/** Runs `tasks`, at most `limit` at once; after the first rejection starts no more, and rejects once the rest settle. */
async function runBounded(
  tasks: ReadonlyArray<() => Promise<void>>,
  limit: number,
  onFirstError: () => void,
): Promise<void> {
  let next = 0;
  let firstError: { error: unknown } | undefined;
  const worker = async () => {
    while (firstError === undefined && next < tasks.length) {
      const task = tasks[next++] as () => Promise<void>;
      try {
        await task();
      } catch (error) {
        if (firstError === undefined) {
          firstError = { error };
          onFirstError();
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  if (firstError !== undefined) throw firstError.error;
}

/**
 * Creates the OpenFGA sink for the drainer. Each `deliver` call packs the intents into few
 * idempotent Write requests in per-partition order, bisects a refused request so only bad intents
 * are `permanent`, and throws `SinkHaltError` when no intent is at fault (credentials, a missing
 * model, a wrong endpoint): docs/openfga-sink.md. Bad config throws {@link OpenFgaSinkConfigError}.
 *
 * @example
 * const sink = createOpenFgaSink({
 *   apiUrl: 'http://openfga:8080',
 *   storeId: process.env.FGA_STORE_ID!,
 *   authorizationModelId: process.env.FGA_MODEL_ID,
 *   credentials: { method: CredentialsMethod.ApiToken, config: { token: process.env.FGA_TOKEN! } },
 * });
 * const drainer = createDrainer({ db, spec: vpcOutbox, sink });
 */
export function createOpenFgaSink(config: OpenFgaSinkConfig): OpenFgaSink {
  if (config === null || typeof config !== 'object') {
    throw new OpenFgaSinkConfigError(
      'config',
      'expected { client } or { apiUrl, storeId, authorizationModelId?, credentials? }',
    );
  }
  const maxTuplesPerWrite = integerInRange(
    'maxTuplesPerWrite',
    config.maxTuplesPerWrite,
    { fallback: OPENFGA_SINK_DEFAULTS.maxTuplesPerWrite, min: 1, max: 100_000 },
    OpenFgaSinkConfigError,
  );
  const timeoutMs = integerInRange(
    'timeoutMs',
    config.timeoutMs,
    { fallback: OPENFGA_SINK_DEFAULTS.timeoutMs, min: 1, max: 600_000 },
    OpenFgaSinkConfigError,
  );
  const serverRequestTimeoutMs = integerInRange(
    'serverRequestTimeoutMs',
    config.serverRequestTimeoutMs,
    { fallback: OPENFGA_SINK_DEFAULTS.serverRequestTimeoutMs, min: 1, max: 600_000 },
    OpenFgaSinkConfigError,
  );
  const maxConcurrentRequests = integerInRange(
    'maxConcurrentRequests',
    config.maxConcurrentRequests,
    { fallback: OPENFGA_SINK_DEFAULTS.maxConcurrentRequests, min: 1, max: 64 },
    OpenFgaSinkConfigError,
  );
  if (config.onRequest !== undefined && typeof config.onRequest !== 'function') {
    throw new OpenFgaSinkConfigError('onRequest', 'expected a function');
  }
  let client: OpenFgaWriteClient;
  if ('client' in config && config.client !== undefined) {
    const ignored = CONNECTION_FIELDS.filter((field) => field in config);
    if (ignored.length > 0) {
      throw new OpenFgaSinkConfigError(
        'client',
        `give either a client or { apiUrl, storeId, authorizationModelId?, credentials? }, not both: ${ignored.join(', ')} would be ignored (set ${ignored.length === 1 ? 'it' : 'them'} on the client)`,
      );
    }
    if (config.client === null || typeof config.client.write !== 'function') {
      throw new OpenFgaSinkConfigError('client', 'expected an OpenFgaClient (an object with write(body, options))');
    }
    if (config.client instanceof OpenFgaClient && !config.client.storeId) {
      throw new OpenFgaSinkConfigError('client', 'the OpenFgaClient has no storeId: build it with { apiUrl, storeId }');
    }
    client = config.client;
  } else {
    client = buildClient(config as OpenFgaSinkConnectionConfig);
  }
  const onRequest = config.onRequest;

  async function deliver(intents: readonly Intent[], { signal }: SinkContext): Promise<readonly Outcome[]> {
    const prepared = prepareIntents(intents);
    const state: DeliveryState = {
      outcomes: new Array<Outcome | undefined>(intents.length).fill(undefined),
      stopped: new Set(),
      deletedLater: keysDeletedLater(prepared),
    };
    const halt = new AbortController();
    const context: WriteContext = { client, timeoutMs, deadline: signal, halt: halt.signal, onRequest };
    const send = (items: readonly PreparedIntent[]) => sendWrite(items, context);

    const queues = segmentByPartition(prepared, maxTuplesPerWrite);
    for (;;) {
      // Each partition offers its next segment; a stopped one's remaining intents are skipped.
      const heads: Segment[] = [];
      for (const [partitionKey, queue] of queues) {
        if (state.stopped.has(partitionKey)) {
          for (const segment of queue)
            for (const item of segment.items) state.outcomes[item.index] = { kind: 'skipped' };
          queues.delete(partitionKey);
        } else if (queue[0] !== undefined) {
          heads.push(queue[0]);
        } else {
          queues.delete(partitionKey);
        }
      }
      if (heads.length === 0) break;
      const round = packRound(heads, maxTuplesPerWrite);
      for (const segment of round.taken) queues.get(segment.partitionKey)?.shift();
      for (const segment of round.refused) {
        const item = segment.items[0] as PreparedIntent;
        fail(state, [item], 'permanent', item.invalid as string, 'invalid_intent');
      }
      // A halt aborts the requests in flight, waits for them, and propagates.
      await runBounded(
        round.requests.map((items) => () => deliverBisecting(items, send, state)),
        maxConcurrentRequests,
        () => halt.abort(),
      );
    }
    return orderedOutcomes(intents, state.outcomes);
  }

  // Reading back is what the late-write check needs; a write-only client leaves it off.
  const read = canReadBack(client) ? { readTuples: readBack(client, timeoutMs, maxConcurrentRequests) } : {};
  return {
    deliver,
    maxTuplesPerWrite,
    timeoutMs,
    serverRequestTimeoutMs,
    maxConcurrentRequests,
    writeLifetimeMs: timeoutMs + serverRequestTimeoutMs,
    ...read,
  };
}

/** In a partition, the first intent not delivered keeps its failure; every later one is `skipped`. */
function orderedOutcomes(intents: readonly Intent[], outcomes: ReadonlyArray<Outcome | undefined>): Outcome[] {
  const stopped = new Set<string>();
  return intents.map((intent, index) => {
    const outcome: Outcome = outcomes[index] ?? { kind: 'transient', error: 'OpenFGA sink: intent was not attempted' };
    if (stopped.has(intent.partitionKey)) return outcome.kind === 'delivered' ? outcome : { kind: 'skipped' };
    if (outcome.kind !== 'delivered') stopped.add(intent.partitionKey);
    return outcome;
  });
}
