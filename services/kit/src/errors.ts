/**
 * A request failed in a way the caller should see: the HTTP status, a stable machine-readable
 * `code` and a message that says what to fix. Routes throw it; the server renders it as
 * `{ "error": { "code", "message" } }`. Nothing was written when a route throws it before its
 * transaction commits.
 *
 * @example
 * throw new HttpError(403, 'forbidden', `user:${caller} may not view vpc:${id}`);
 */
export class HttpError extends Error {
  override readonly name = 'HttpError';
  readonly status: number;
  readonly code: string;
  /** Extra response headers (e.g. `allow` on a 405). */
  readonly headers: Readonly<Record<string, string>>;
  constructor(
    status: number,
    code: string,
    message: string,
    options?: { cause?: unknown; headers?: Record<string, string> },
  ) {
    super(message, options);
    this.status = status;
    this.code = code;
    this.headers = options?.headers ?? {};
  }
}

/**
 * A service was configured wrongly (an option or an environment variable). `field` names it; the
 * message says what is expected. Nothing was started.
 */
export class ServiceConfigError extends Error {
  override readonly name = 'ServiceConfigError';
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(`${field}: ${message}`, options);
    this.field = field;
  }
}

/** Names of the SQLSTATEs the services react to. */
export const SERVICE_SQLSTATE = Object.freeze({
  UNIQUE_VIOLATION: '23505',
  FOREIGN_KEY_VIOLATION: '23503',
});

const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);
const UNAVAILABLE_MESSAGES = [
  /^Connection terminated/,
  /timeout exceeded when trying to connect/,
  /Client has encountered a connection error/,
  /^Connection ended/,
];

/**
 * Whether `error` says the database could not be reached or dropped the connection (as opposed to a
 * statement it refused): a Node socket error, pg's "Connection terminated…", a pool checkout that
 * timed out, or a SQLSTATE of class 08 (connection exception) or 57P01–57P03 (shutting down,
 * starting up), 53300 (too many connections).
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    if (UNAVAILABLE_CODES.has(code) || code.startsWith('08') || ['57P01', '57P02', '57P03', '53300'].includes(code))
      return true;
  }
  return typeof message === 'string' && UNAVAILABLE_MESSAGES.some((pattern) => pattern.test(message));
}
