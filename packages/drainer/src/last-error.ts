/** `last_error` is kept at most this long: enough for a server's message, not a stack dump. */
export const MAX_LAST_ERROR_LENGTH = 2_000;

const SECRETS: ReadonlyArray<[RegExp, string]> = [
  [/(\bbearer\s+)[^\s"',;]+/gi, '$1[redacted]'],
  [/(\bauthorization["']?\s*[:=]\s*["']?)[^\s"',;]+(\s+[^\s"',;]+)?/gi, '$1[redacted]'],
  [
    /(\b(?:api[_-]?(?:key|token)|client[_-]?secret|password|passwd|secret|token)["']?\s*[:=]\s*["']?)[^\s"',;&]+/gi,
    '$1[redacted]',
  ],
  [/(\b[a-z][a-z0-9+.-]*:\/\/)[^/\s:@]+:[^/\s@]+@/gi, '$1[redacted]@'],
];

/**
 * Makes an error safe to store in `last_error`: credentials scrubbed (bearer tokens, authorization
 * headers, key/token/secret/password assignments, passwords in URLs), then truncated.
 */
export function sanitizeLastError(error: unknown): string {
  let text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  for (const [pattern, replacement] of SECRETS) text = text.replace(pattern, replacement);
  return text.length > MAX_LAST_ERROR_LENGTH ? `${text.slice(0, MAX_LAST_ERROR_LENGTH - 1)}…` : text;
}
