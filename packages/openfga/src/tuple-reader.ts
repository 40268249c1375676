import {
  ConsistencyPreference,
  OpenFgaClient,
  TupleOperation,
  type ClientReadChangesRequest,
  type ClientReadRequest,
  type ReadChangesResponse,
  type ReadResponse,
  type UserClientConfigurationParams,
} from '@openfga/sdk';
import { OutboxConfigError, type TupleKey } from '@outbox/outbox';

/**
 * The two reads the tuple reader needs from an OpenFGA client. `OpenFgaClient` from `@openfga/sdk`
 * fits; so does a wrapper that counts or traces requests.
 */
export interface OpenFgaReadClient {
  read(
    body: ClientReadRequest,
    options: {
      pageSize?: number;
      continuationToken?: string;
      consistency?: ConsistencyPreference;
      signal?: AbortSignal;
    },
  ): Promise<ReadResponse>;
  readChanges(
    body: ClientReadChangesRequest,
    options: { pageSize?: number; continuationToken?: string; signal?: AbortSignal },
  ): Promise<ReadChangesResponse>;
}

/**
 * What `createOpenFgaTupleReader` takes: a client, or where OpenFGA is.
 *
 * @example
 * createOpenFgaTupleReader({ apiUrl: 'http://openfga:8080', storeId, credentials });
 */
export type OpenFgaTupleReaderConfig = (
  | { readonly client: OpenFgaReadClient }
  | {
      /** OpenFGA's HTTP API, e.g. `http://openfga:8080`. Required. */
      readonly apiUrl: string;
      /** The store to read. Required. */
      readonly storeId: string;
      /** E.g. `{ method: CredentialsMethod.ApiToken, config: { token } }`. Default none (a server without authentication). */
      readonly credentials?: UserClientConfigurationParams['credentials'];
    }
) & {
  /**
   * Milliseconds one read may take, the SDK's own retries of a 429 or 5xx included. Default
   * 10000: a page of 100 tuples takes milliseconds, so a read this slow is stuck; an audit that
   * waits on it forever would hold its place in every schedule.
   */
  readonly timeoutMs?: number;
};

/** A page of live tuples. */
export interface OpenFgaTuplePage {
  readonly tuples: readonly TupleKey[];
  readonly continuationToken: string | undefined;
}

/** A page of OpenFGA's changelog for one type. */
export interface OpenFgaChangePage {
  readonly changes: readonly {
    readonly tuple: TupleKey;
    readonly operation: 'write' | 'delete';
    readonly timestamp: Date;
  }[];
  readonly continuationToken: string | undefined;
}

/**
 * The reads the audit of @outbox/reconciler makes (its structural `TupleReader`), on OpenFGA.
 * Every method is one request of at most 100 tuples or changes (OpenFGA's largest page).
 */
export interface OpenFgaTupleReader {
  /**
   * A page of every stored tuple on objects of `objectTypes`. OpenFGA (v1.18) refuses a Read of a
   * whole type without a user ("the object id and user cannot be empty"), so this pages through
   * the store's tuples and keeps those of the types: its cost is the store's size, whatever the
   * types. A page may hold fewer than 100 tuples (none) and still have a next one.
   */
  readObjectTypes(objectTypes: readonly string[], continuationToken: string | undefined): Promise<OpenFgaTuplePage>;
  /** A page of the tuples on `filter.object` (of `filter.user` only, when given). */
  readTuples(
    filter: { readonly object: string; readonly user?: string },
    continuationToken: string | undefined,
  ): Promise<OpenFgaTuplePage>;
  /**
   * A page of the changelog of `objectType`, after a continuation token (bound to that type), or
   * from a start time. The token comes back unchanged when nothing changed since; a read from a
   * start time with nothing after it returns no token.
   */
  readChanges(
    objectType: string,
    from: { readonly continuationToken?: string; readonly startTime?: Date },
  ): Promise<OpenFgaChangePage>;
}

/**
 * A read of OpenFGA failed (after the SDK's own retries). It carries what OpenFGA said and never
 * the request's headers: safe to log.
 *
 * @example
 * catch (error) {
 *   if (error instanceof OpenFgaReadError) console.error(error.status, error.code);
 * }
 */
export class OpenFgaReadError extends Error {
  override readonly name = 'OpenFgaReadError';
  /** HTTP status, when OpenFGA answered. */
  readonly status: number | undefined;
  /** OpenFGA's error code, e.g. `validation_error`. */
  readonly code: string | undefined;
  constructor(
    message: string,
    details: { status: number | undefined; code: string | undefined },
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.status = details.status;
    this.code = details.code;
  }
}

/** OpenFGA's largest page for Read and ReadChanges. */
const PAGE_SIZE = 100;

const CONSISTENT = { consistency: ConsistencyPreference.HigherConsistency } as const;

function readClient(config: OpenFgaTupleReaderConfig): OpenFgaReadClient {
  if ('client' in config) {
    if (
      config.client === null ||
      typeof config.client?.read !== 'function' ||
      typeof config.client.readChanges !== 'function'
    ) {
      throw new OutboxConfigError('client', 'expected an OpenFgaClient (an object with read and readChanges)');
    }
    return config.client;
  }
  for (const field of ['apiUrl', 'storeId'] as const) {
    if (typeof config[field] !== 'string' || config[field].trim() === '') {
      throw new OutboxConfigError(field, `expected a non-empty string, got ${JSON.stringify(config[field])}`);
    }
  }
  try {
    return new OpenFgaClient({
      // The SDK appends `/stores/…` as is, and OpenFGA answers 404 to `//stores/…`.
      apiUrl: config.apiUrl.replace(/\/+$/, ''),
      storeId: config.storeId,
      ...(config.credentials !== undefined ? { credentials: config.credentials } : {}),
    });
  } catch (error) {
    const field = (error as { field?: unknown }).field;
    throw new OutboxConfigError(
      typeof field === 'string' && field !== '' ? field : 'config',
      error instanceof Error ? error.message : String(error),
      { cause: error },
    );
  }
}

/** The error of a failed read, without the SDK's request (it may hold a client secret). */
function readError(what: string, error: unknown): OpenFgaReadError {
  const e = (typeof error === 'object' && error !== null ? error : {}) as {
    name?: unknown;
    message?: unknown;
    statusCode?: unknown;
    apiErrorMessage?: unknown;
    responseData?: { code?: unknown; message?: unknown } | null;
  };
  const status = typeof e.statusCode === 'number' ? e.statusCode : undefined;
  const code = typeof e.responseData?.code === 'string' ? e.responseData.code : undefined;
  const said =
    [e.responseData?.message, e.apiErrorMessage, e.message].find(
      (m): m is string => typeof m === 'string' && m !== '',
    ) ?? String(error);
  const cause = new Error(said);
  cause.name = typeof e.name === 'string' ? e.name : 'Error';
  return new OpenFgaReadError(
    `OpenFGA ${what} failed${status !== undefined ? ` (${status}${code ? ` ${code}` : ''})` : ''}: ${said}`,
    { status, code },
    { cause },
  );
}

function toTupleKey(key: {
  user: string;
  relation: string;
  object: string;
  condition?: { name: string; context?: object } | null;
}): TupleKey {
  const condition = key.condition;
  return {
    user: key.user,
    relation: key.relation,
    object: key.object,
    ...(condition
      ? {
          condition: {
            name: condition.name,
            ...(condition.context ? { context: condition.context as Record<string, unknown> } : {}),
          },
        }
      : {}),
  };
}

/**
 * Builds the reader the audit (`auditOutbox`, `auditOutboxIncremental`, `repairOutbox` in
 * @outbox/reconciler) takes. Reads ask for higher consistency (no cache: a confirmation must see the
 * drainer's last write). Bad config throws an `OutboxConfigError` (@outbox/outbox) naming the
 * field; a failed read rejects with {@link OpenFgaReadError}.
 *
 * @example
 * const reader = createOpenFgaTupleReader({ apiUrl: process.env.FGA_API_URL!, storeId: process.env.FGA_STORE_ID! });
 * const report = await auditOutbox({ db, spec: vpcOutbox, owner, reader });
 */
export function createOpenFgaTupleReader(config: OpenFgaTupleReaderConfig): OpenFgaTupleReader {
  if (config === null || typeof config !== 'object')
    throw new OutboxConfigError('config', 'expected { client } or { apiUrl, storeId, credentials? }');
  const client = readClient(config);
  const timeoutMs = config.timeoutMs ?? 10_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 600_000) {
    throw new OutboxConfigError(
      'timeoutMs',
      `expected an integer from 1 to 600000, got ${JSON.stringify(config.timeoutMs)}`,
    );
  }

  async function request<T>(what: string, send: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    // If the SDK ever stopped passing `signal` to axios, the race still returns on time.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(
          new OpenFgaReadError(`OpenFGA ${what} did not answer within ${timeoutMs} ms`, {
            status: undefined,
            code: undefined,
          }),
        );
      }, timeoutMs);
    });
    try {
      return await Promise.race([send(controller.signal), late]);
    } catch (error) {
      throw error instanceof OpenFgaReadError ? error : readError(what, error);
    } finally {
      clearTimeout(timer);
    }
  }

  async function read(body: ClientReadRequest, continuationToken: string | undefined, what: string) {
    const response = await request(what, (signal) =>
      client.read(body, {
        pageSize: PAGE_SIZE,
        ...(continuationToken ? { continuationToken } : {}),
        ...CONSISTENT,
        signal,
      }),
    );
    return {
      tuples: (response.tuples ?? []).map((t) => toTupleKey(t.key)),
      continuationToken: response.continuation_token || undefined,
    };
  }

  return {
    async readObjectTypes(objectTypes, continuationToken) {
      const types = new Set(objectTypes);
      const page = await read({}, continuationToken, 'Read of the store');
      return {
        tuples: page.tuples.filter((t) => types.has(t.object.slice(0, t.object.indexOf(':')))),
        continuationToken: page.continuationToken,
      };
    },
    readTuples(filter, continuationToken) {
      return read(
        { object: filter.object, ...(filter.user !== undefined ? { user: filter.user } : {}) },
        continuationToken,
        `Read of ${filter.object}`,
      );
    },
    async readChanges(objectType, from) {
      const response = await request(`ReadChanges of ${objectType}`, (signal) =>
        client.readChanges(
          {
            type: objectType,
            ...(!from.continuationToken && from.startTime ? { startTime: from.startTime.toISOString() } : {}),
          },
          {
            pageSize: PAGE_SIZE,
            ...(from.continuationToken ? { continuationToken: from.continuationToken } : {}),
            signal,
          },
        ),
      );
      return {
        changes: (response.changes ?? []).map((c) => ({
          tuple: toTupleKey(c.tuple_key),
          operation: c.operation === TupleOperation.Delete ? ('delete' as const) : ('write' as const),
          timestamp: new Date(c.timestamp),
        })),
        continuationToken: response.continuation_token || undefined,
      };
    },
  };
}
