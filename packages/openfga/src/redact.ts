// What a failure may carry into logs and `last_error`: docs/openfga-sink.md §7.

const SECRETS: ReadonlyArray<[RegExp, string]> = [
  [/(\bbearer\s+)[^\s"',;]+/gi, '$1[redacted]'],
  [/(\b[a-z][a-z0-9+.-]*:\/\/)[^/\s:@]+:[^/\s@]+@/gi, '$1[redacted]@'],
];

/** `text` without bearer tokens or URL passwords. */
export function scrub(text: string): string {
  let out = text;
  for (const [pattern, replacement] of SECRETS) out = out.replace(pattern, replacement);
  return out;
}

/** A non-empty string, or undefined. */
export const text = (value: unknown): string | undefined =>
  typeof value === 'string' && value !== '' ? value : undefined;

/** A URL as safe to log: no userinfo, query or fragment. */
export function endpoint(value: unknown): string | undefined {
  const raw = text(value);
  if (raw === undefined) return undefined;
  try {
    const url = new URL(raw);
    return `${url.protocol}//${url.host}${url.pathname}`;
  } catch {
    return undefined;
  }
}

interface SdkErrorFields {
  readonly name?: unknown;
  readonly message?: unknown;
  readonly stack?: unknown;
  readonly statusCode?: unknown;
  readonly statusText?: unknown;
  readonly code?: unknown;
  readonly apiErrorCode?: unknown;
  readonly requestId?: unknown;
  readonly method?: unknown;
  readonly requestURL?: unknown;
  readonly responseData?: Readonly<Record<string, unknown>> | null;
}

/**
 * A copy of the client's error with what the server answered and never the request: the SDK's
 * errors keep the request body (`requestData`), for a token exchange the form with `client_secret`.
 */
export function safeCause(error: unknown): Error {
  const e = (typeof error === 'object' && error !== null ? error : {}) as SdkErrorFields;
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
