import { OpenFgaWriteError } from './errors.js';

/**
 * What a failed Write request means for the intents in it:
 * - `transient`: may succeed later; every intent in the request is retried with backoff;
 * - `permanent`: will never succeed as written; see {@link Classification.scope};
 * - `halt`: no intent is at fault and none should pay an attempt (credentials, wrong endpoint):
 *   the sink throws `SinkHaltError` and the drainer releases the whole batch.
 */
export type Verdict = 'transient' | 'permanent' | 'halt';

/** Why the sink itself cut a request short. */
export type AbortCause = 'deadline' | 'timeout';

/** What one failed Write request was, in terms the sink acts on. */
export interface Classification {
  readonly verdict: Verdict;
  /**
   * For `permanent`: `intent` when some intent in the request is at fault (bisect to find it, the
   * others are delivered); `request` when any subset would fail the same way (no point bisecting).
   */
  readonly scope: 'intent' | 'request';
  /** The rule that matched, for tests and logs. */
  readonly rule: string;
  /** A one-line, credential-free description that carries OpenFGA's own message. */
  readonly message: string;
  readonly error: OpenFgaWriteError;
}

/** What the classification looks at: where the failure came from, and what OpenFGA said. */
interface Facts {
  /** `token`: the SDK's client-credentials token exchange failed (OpenFGA was never asked). */
  readonly source: 'http' | 'network' | 'sdk' | 'token' | 'deadline' | 'timeout' | 'unknown';
  readonly status: number | undefined;
  readonly code: string | undefined;
  readonly message: string;
  /** The SDK said "authentication" (`FgaApiAuthenticationError`), whatever the status. */
  readonly authentication: boolean;
  /** For `token`: the token endpoint asked, without credentials, query or fragment. */
  readonly tokenIssuer: string | undefined;
}

interface Rule {
  readonly rule: string;
  readonly when: (facts: Facts) => boolean;
  readonly verdict: Verdict;
  readonly scope: 'intent' | 'request';
}

const is5xx = (status: number | undefined) => status !== undefined && status >= 500 && status <= 599;

/**
 * THE table: every failure of a Write request is classified here, first match wins. Each status
 * and code below was observed from a real OpenFGA v1.18 (see classify.test.ts) unless noted.
 */
const RULES: readonly Rule[] = [
  // The drainer's deadline passed, or our per-request timeout: the server may be slow, not wrong.
  { rule: 'deadline', when: (f) => f.source === 'deadline', verdict: 'transient', scope: 'request' },
  { rule: 'timeout', when: (f) => f.source === 'timeout', verdict: 'transient', scope: 'request' },
  // The token issuer refused the client-credentials exchange (RFC 6749 invalid_client,
  // unauthorized_client, invalid_grant answer 400 or 401; or it kept failing): OpenFGA never saw the
  // request, and no intent is at fault. Before the status rules: a 400 here is not invalid input.
  { rule: 'token-exchange', when: (f) => f.source === 'token', verdict: 'halt', scope: 'request' },
  // The SDK refused to build the request (a missing store id, a malformed model id): configuration.
  { rule: 'sdk-refused', when: (f) => f.source === 'sdk', verdict: 'halt', scope: 'request' },
  // No HTTP answer at all: connection refused or reset, DNS. OpenFGA down or restarting.
  { rule: 'network', when: (f) => f.source === 'network', verdict: 'transient', scope: 'request' },
  // 401 unauthenticated / bearer_token_missing, 403: our credentials, not any intent.
  { rule: 'credentials', when: (f) => f.authentication || f.status === 401 || f.status === 403, verdict: 'halt', scope: 'request' },
  // 409 Aborted "…already exists with a different condition": that intent can never apply as written.
  {
    rule: 'different-condition',
    when: (f) => f.status === 409 && /different condition/i.test(f.message),
    verdict: 'permanent',
    scope: 'intent',
  },
  // 409 Aborted "…inserted/deleted by another transaction": a race between concurrent first inserts
  // (openfga#3201, even with on_duplicate "ignore"); the retry finds the tuple and ignores it.
  { rule: 'conflict-race', when: (f) => f.status === 409, verdict: 'transient', scope: 'request' },
  // 400 authorization_model_not_found / latest_authorization_model_not_found: the pinned model is
  // not in the store (another environment's id), the store has no model yet, or the store id is
  // unknown. Configuration, like refused credentials: no intent is at fault, and poisoning would
  // park every row of every batch until someone re-drives them. Halt; the next pass retries.
  {
    rule: 'model-not-found',
    when: (f) => f.status === 400 && (f.code === 'authorization_model_not_found' || f.code === 'latest_authorization_model_not_found'),
    verdict: 'halt',
    scope: 'request',
  },
  // 404: the Write route itself was not found (a wrong apiUrl or proxy): no intent is at fault.
  { rule: 'endpoint-not-found', when: (f) => f.status === 404, verdict: 'halt', scope: 'request' },
  // A 4xx without OpenFGA's error code is not OpenFGA's verdict on an intent (every OpenFGA 4xx
  // carries one): an ingress or proxy answered, e.g. nginx's 400 "The plain HTTP request was sent to
  // HTTPS port". Bisecting would poison every intent. Except a 413 (too large: bisecting fixes it)
  // and the statuses retried below (408, 422, 429).
  {
    rule: 'not-openfga',
    when: (f) => f.status !== undefined && f.status >= 400 && f.status < 500 && f.code === undefined && ![408, 413, 422, 429].includes(f.status),
    verdict: 'halt',
    scope: 'request',
  },
  // 400 validation_error (unknown type/relation/condition, type restriction), invalid formats,
  // write_failed_due_to_invalid_input, exceeded_entity_limit: some intent in the request is at fault.
  { rule: 'invalid-input', when: (f) => f.status === 400, verdict: 'permanent', scope: 'intent' },
  // 422 throttled, 429 rate limited, 408 and every 5xx: the server is busy or ill (not observed here).
  {
    rule: 'server-busy',
    when: (f) => f.status === 408 || f.status === 422 || f.status === 429 || is5xx(f.status),
    verdict: 'transient',
    scope: 'request',
  },
  // Any other 4xx (e.g. 413 from a proxy, or a 4xx with a code): the request as built is refused; bisect isolates the cause.
  { rule: 'other-4xx', when: (f) => f.status !== undefined && f.status >= 400 && f.status < 500, verdict: 'permanent', scope: 'intent' },
  // Anything not understood is retried, never poisoned.
  { rule: 'unknown', when: () => true, verdict: 'transient', scope: 'request' },
];

const SECRETS: ReadonlyArray<[RegExp, string]> = [
  [/(\bbearer\s+)[^\s"',;]+/gi, '$1[redacted]'],
  [/(\b[a-z][a-z0-9+.-]*:\/\/)[^/\s:@]+:[^/\s@]+@/gi, '$1[redacted]@'],
];

function scrub(text: string): string {
  let out = text;
  for (const [pattern, replacement] of SECRETS) out = out.replace(pattern, replacement);
  return out;
}

/** The fields of the SDK's errors we read. Matched by name, not `instanceof`: a client built by
 * another copy of @openfga/sdk throws classes that are not ours. */
interface SdkErrorShape {
  readonly name?: unknown;
  readonly message?: unknown;
  readonly statusCode?: unknown;
  readonly statusText?: unknown;
  readonly apiErrorMessage?: unknown;
  readonly responseData?: {
    readonly code?: unknown;
    readonly message?: unknown;
    // What an OAuth token endpoint answers (RFC 6749 §5.2).
    readonly error?: unknown;
    readonly error_description?: unknown;
  } | null;
  // Set by FgaApiAuthenticationError: `grantType` only when the token exchange failed (the SDK adds
  // it there), `requestURL` is then the token endpoint.
  readonly grantType?: unknown;
  readonly requestURL?: unknown;
}

const text = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? value : undefined);

/** The token endpoint as safe to log: no userinfo, query or fragment (they may carry secrets). */
function endpoint(value: unknown): string | undefined {
  const raw = text(value);
  if (raw === undefined) return undefined;
  try {
    const url = new URL(raw);
    return `${url.protocol}//${url.host}${url.pathname}`;
  } catch {
    return undefined;
  }
}

/**
 * A copy of the client's error that is safe to log: its name, message, status and what the server
 * answered, never the request. The SDK's errors keep the request body (`requestData`): for a refused
 * client-credentials exchange that is the form with `client_secret`, which `util.inspect`, `console.error`
 * and loggers that follow `cause` would print.
 */
function safeCause(error: unknown): Error {
  const e = (typeof error === 'object' && error !== null ? error : {}) as SdkErrorShape & {
    readonly stack?: unknown;
    readonly code?: unknown;
    readonly apiErrorCode?: unknown;
    readonly requestId?: unknown;
    readonly method?: unknown;
  };
  const copy = new Error(scrub(text(e.message) ?? String(error)));
  copy.name = text(e.name) ?? 'Error';
  const stack = text(e.stack);
  copy.stack = stack === undefined ? `${copy.name}: ${copy.message}` : scrub(stack);
  const fields: Record<string, unknown> = {
    statusCode: typeof e.statusCode === 'number' ? e.statusCode : undefined,
    statusText: text(e.statusText),
    code: text(e.code),
    apiErrorCode: text(e.apiErrorCode),
    requestId: text(e.requestId),
    method: text(e.method),
    requestURL: endpoint(e.requestURL),
  };
  const data = e.responseData;
  if (data !== null && typeof data === 'object') {
    const said: Record<string, string> = {};
    for (const field of ['code', 'message', 'error', 'error_description'] as const) {
      const value = text(data[field]);
      if (value !== undefined) said[field] = scrub(value);
    }
    fields.responseData = said;
  }
  for (const [field, value] of Object.entries(fields)) if (value !== undefined) Object.assign(copy, { [field]: value });
  return copy;
}

const NO_FACTS = { status: undefined, code: undefined, authentication: false, tokenIssuer: undefined } as const;

function facts(error: unknown, abortCause: AbortCause | undefined): Facts {
  if (abortCause !== undefined) return { ...NO_FACTS, source: abortCause, message: '' };
  const e = (typeof error === 'object' && error !== null ? error : {}) as SdkErrorShape;
  const name = text(e.name) ?? '';
  const errorMessage = text(e.message) ?? String(error);
  const status = typeof e.statusCode === 'number' ? e.statusCode : undefined;
  if (name === 'FgaApiAuthenticationError' && text(e.grantType) !== undefined) {
    // ClientCredentials: the SDK exchanges the client secret for a token before the Write, and throws
    // this (with the issuer's status, e.g. 400 unauthorized_client) when the issuer refuses.
    const code = text(e.responseData?.error) ?? text(e.responseData?.code);
    const message = text(e.responseData?.error_description) ?? text(e.responseData?.message) ?? text(e.statusText) ?? errorMessage;
    return { source: 'token', status, code, message, authentication: true, tokenIssuer: endpoint(e.requestURL) };
  }
  if (name.startsWith('FgaApi')) {
    // FgaApiError and its subclasses (validation, authentication, not found, rate limit, internal).
    const code = text(e.responseData?.code);
    const message = text(e.responseData?.message) ?? text(e.apiErrorMessage) ?? text(e.statusText) ?? errorMessage;
    const authentication = name === 'FgaApiAuthenticationError';
    return { ...NO_FACTS, source: status === undefined ? 'network' : 'http', status, code, message, authentication };
  }
  if (name === 'FgaValidationError' || name === 'FgaRequiredParamError') {
    return { ...NO_FACTS, source: 'sdk', message: errorMessage };
  }
  if (name === 'FgaError') {
    // The SDK wraps transport failures (ECONNREFUSED, ECONNRESET, ENOTFOUND) as "FGA Error: <reason>".
    return { ...NO_FACTS, source: 'network', message: errorMessage.replace(/^FGA Error:\s*/, '') };
  }
  return { ...NO_FACTS, source: 'unknown', message: errorMessage };
}

function describe(f: Facts, timeoutMs: number): string {
  switch (f.source) {
    case 'deadline':
      return 'OpenFGA: the delivery deadline passed before the Write request was answered';
    case 'timeout':
      return `OpenFGA: no answer to the Write request within ${timeoutMs} ms`;
    case 'network':
      return `OpenFGA unreachable: ${f.message}`;
    case 'sdk':
      return `OpenFGA SDK refused to send the Write request: ${f.message}`;
    case 'token': {
      const said = [f.status, f.code].filter((part) => part !== undefined).join(' ');
      const detail = f.message === f.code ? '' : `: ${f.message}`;
      return `OpenFGA token exchange refused by the token issuer ${f.tokenIssuer ?? '(unknown URL)'}${said ? ` ${said}` : ''}${detail}`;
    }
    case 'http':
      return `OpenFGA ${f.status}${f.code ? ` ${f.code}` : ''}: ${f.message}`;
    default:
      return `OpenFGA Write failed: ${f.message}`;
  }
}

/**
 * Classifies one failed Write request through the table above. `abortCause` says when the sink
 * itself cut the request short (the error is then just the SDK's "canceled").
 *
 * @example
 * const c = classifyWriteError(error, undefined, 5_000);
 * if (c.verdict === 'permanent' && c.scope === 'intent') bisect();
 */
export function classifyWriteError(error: unknown, abortCause: AbortCause | undefined, timeoutMs: number): Classification {
  const f = facts(error, abortCause);
  const match = RULES.find((rule) => rule.when(f)) as Rule;
  const message = scrub(describe(f, timeoutMs));
  return {
    verdict: match.verdict,
    scope: match.scope,
    rule: match.rule,
    message,
    error: new OpenFgaWriteError(
      message,
      { status: f.status, code: f.code, openFgaMessage: scrub(f.message), ...(f.tokenIssuer !== undefined ? { tokenIssuer: f.tokenIssuer } : {}) },
      { cause: safeCause(error) },
    ),
  };
}
