import { OpenFgaWriteError } from './errors.js';
import { endpoint, safeCause, scrub, text } from './redact.js';

// The error table of docs/openfga-sink.md §3, which gives each rule's reason and evidence.

/**
 * What a failed Write means for its intents: `transient` retries them with backoff, `permanent`
 * refuses them (see {@link Classification.scope}), `halt` blames none and releases the batch.
 */
export type Verdict = 'transient' | 'permanent' | 'halt';

/** Why the sink itself cut a request short. */
export type AbortCause = 'deadline' | 'timeout';

/** What one failed Write request was, in terms the sink acts on. */
export interface Classification {
  readonly verdict: Verdict;
  /** For `permanent`: `intent` when some intent is at fault (bisect), `request` when any subset would fail alike. */
  readonly scope: 'intent' | 'request';
  /** The rule that matched, for tests and logs. */
  readonly rule: string;
  /** A one-line, credential-free description that carries OpenFGA's own message. */
  readonly message: string;
  readonly error: OpenFgaWriteError;
}

/** What the table looks at. */
interface Facts {
  /** `token`: the client-credentials exchange failed, OpenFGA was never asked. */
  readonly source: 'http' | 'network' | 'sdk' | 'token' | 'deadline' | 'timeout' | 'unknown';
  readonly status: number | undefined;
  readonly code: string | undefined;
  readonly message: string;
  /** The SDK threw `FgaApiAuthenticationError`, whatever the status. */
  readonly authentication: boolean;
  readonly tokenIssuer: string | undefined;
}

interface Rule {
  readonly rule: string;
  readonly when: (facts: Facts) => boolean;
  readonly verdict: Verdict;
  readonly scope: 'intent' | 'request';
}

const is5xx = (status: number | undefined) => status !== undefined && status >= 500 && status <= 599;

/** THE table, first match wins. */
const RULES: readonly Rule[] = [
  { rule: 'deadline', when: (f) => f.source === 'deadline', verdict: 'transient', scope: 'request' },
  { rule: 'timeout', when: (f) => f.source === 'timeout', verdict: 'transient', scope: 'request' },
  // Before the status rules: the issuer's 400 is not invalid input.
  { rule: 'token-exchange', when: (f) => f.source === 'token', verdict: 'halt', scope: 'request' },
  { rule: 'sdk-refused', when: (f) => f.source === 'sdk', verdict: 'halt', scope: 'request' },
  { rule: 'network', when: (f) => f.source === 'network', verdict: 'transient', scope: 'request' },
  {
    rule: 'credentials',
    when: (f) => f.authentication || f.status === 401 || f.status === 403,
    verdict: 'halt',
    scope: 'request',
  },
  {
    rule: 'different-condition',
    when: (f) => f.status === 409 && /different condition/i.test(f.message),
    verdict: 'permanent',
    scope: 'intent',
  },
  // "inserted by another transaction" (openfga#3201): the retry finds the tuple and ignores it.
  { rule: 'conflict-race', when: (f) => f.status === 409, verdict: 'transient', scope: 'request' },
  // Configuration, not an intent: poisoning would park every row.
  {
    rule: 'model-not-found',
    when: (f) =>
      f.status === 400 &&
      (f.code === 'authorization_model_not_found' || f.code === 'latest_authorization_model_not_found'),
    verdict: 'halt',
    scope: 'request',
  },
  { rule: 'endpoint-not-found', when: (f) => f.status === 404, verdict: 'halt', scope: 'request' },
  // Every 4xx of OpenFGA's own has a code: this one came from a proxy. 413 bisects; 408/422/429 retry.
  {
    rule: 'not-openfga',
    when: (f) =>
      f.status !== undefined &&
      f.status >= 400 &&
      f.status < 500 &&
      f.code === undefined &&
      ![408, 413, 422, 429].includes(f.status),
    verdict: 'halt',
    scope: 'request',
  },
  { rule: 'invalid-input', when: (f) => f.status === 400, verdict: 'permanent', scope: 'intent' },
  {
    rule: 'server-busy',
    when: (f) => f.status === 408 || f.status === 422 || f.status === 429 || is5xx(f.status),
    verdict: 'transient',
    scope: 'request',
  },
  {
    rule: 'other-4xx',
    when: (f) => f.status !== undefined && f.status >= 400 && f.status < 500,
    verdict: 'permanent',
    scope: 'intent',
  },
  // Not understood: retried, never poisoned.
  { rule: 'unknown', when: () => true, verdict: 'transient', scope: 'request' },
];

/**
 * Classifies one failed Write request through the table. `abortCause` is set when the sink itself
 * cut the request short (the error is then just the SDK's "canceled").
 */
export function classifyWriteError(
  error: unknown,
  abortCause: AbortCause | undefined,
  timeoutMs: number,
): Classification {
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
      {
        status: f.status,
        code: f.code,
        openFgaMessage: scrub(f.message),
        ...(f.tokenIssuer !== undefined ? { tokenIssuer: f.tokenIssuer } : {}),
      },
      { cause: safeCause(error) },
    ),
  };
}

/** The fields of the SDK's errors we read, matched by name: another copy of the SDK has other classes. */
interface SdkErrorShape {
  readonly name?: unknown;
  readonly message?: unknown;
  readonly statusCode?: unknown;
  readonly statusText?: unknown;
  readonly apiErrorMessage?: unknown;
  /** OpenFGA's `{ code, message }`, or a token endpoint's `{ error, error_description }` (RFC 6749 §5.2). */
  readonly responseData?: {
    readonly code?: unknown;
    readonly message?: unknown;
    readonly error?: unknown;
    readonly error_description?: unknown;
  } | null;
  /** Set by the SDK only on a failed token exchange, whose endpoint is then `requestURL`. */
  readonly grantType?: unknown;
  readonly requestURL?: unknown;
}

const NO_FACTS = { status: undefined, code: undefined, authentication: false, tokenIssuer: undefined } as const;

function facts(error: unknown, abortCause: AbortCause | undefined): Facts {
  if (abortCause !== undefined) return { ...NO_FACTS, source: abortCause, message: '' };
  const e = (typeof error === 'object' && error !== null ? error : {}) as SdkErrorShape;
  const name = text(e.name) ?? '';
  const errorMessage = text(e.message) ?? String(error);
  const status = typeof e.statusCode === 'number' ? e.statusCode : undefined;
  if (name === 'FgaApiAuthenticationError' && text(e.grantType) !== undefined) {
    const code = text(e.responseData?.error) ?? text(e.responseData?.code);
    const message =
      text(e.responseData?.error_description) ?? text(e.responseData?.message) ?? text(e.statusText) ?? errorMessage;
    return { source: 'token', status, code, message, authentication: true, tokenIssuer: endpoint(e.requestURL) };
  }
  if (name.startsWith('FgaApi')) {
    const code = text(e.responseData?.code);
    const message = text(e.responseData?.message) ?? text(e.apiErrorMessage) ?? text(e.statusText) ?? errorMessage;
    const authentication = name === 'FgaApiAuthenticationError';
    return { ...NO_FACTS, source: status === undefined ? 'network' : 'http', status, code, message, authentication };
  }
  if (name === 'FgaValidationError' || name === 'FgaRequiredParamError') {
    return { ...NO_FACTS, source: 'sdk', message: errorMessage };
  }
  if (name === 'FgaError') {
    // How the SDK wraps ECONNREFUSED, ECONNRESET, ENOTFOUND.
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
