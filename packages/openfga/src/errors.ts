/**
 * The OpenFGA sink was configured wrongly. The message names the field and says what is expected;
 * nothing has been sent.
 *
 * @example
 * try {
 *   createOpenFgaSink({ apiUrl: 'localhost:8080', storeId });
 * } catch (error) {
 *   if (error instanceof OpenFgaSinkConfigError) console.error(error.field); // 'apiUrl'
 * }
 */
export class OpenFgaSinkConfigError extends Error {
  override readonly name = 'OpenFgaSinkConfigError';
  /** The config field at fault, e.g. `maxTuplesPerWrite`. */
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(`${field}: ${message}`, options);
    this.field = field;
  }
}

/**
 * One Write request to OpenFGA failed. It carries what OpenFGA said (`status`, `code`,
 * `openFgaMessage`) and never the request's headers or body, so it is safe to log, `cause` included:
 * its `cause` is a copy of the SDK's error with what the server answered (status, code, message,
 * request id), without the request the SDK keeps on it (for a refused client-credentials exchange,
 * the form carrying the client secret). It is the `cause` of every `SinkHaltError` the sink throws:
 * OpenFGA refused its credentials, the token issuer refused the client-credentials exchange
 * (`tokenIssuer` set), the store lacks the model, the Write route was not found, a 4xx came from
 * something other than OpenFGA, or the SDK refused to build the request.
 *
 * @example
 * catch (error) {
 *   if (error instanceof SinkHaltError && error.cause instanceof OpenFgaWriteError) {
 *     console.error(error.cause.status, error.cause.code); // 401 'unauthenticated'
 *     // or 400 'unauthorized_client' with error.cause.tokenIssuer set: the token exchange was refused
 *   }
 * }
 */
export class OpenFgaWriteError extends Error {
  override readonly name = 'OpenFgaWriteError';
  /** HTTP status, when OpenFGA answered at all (the token issuer's when `tokenIssuer` is set). */
  readonly status: number | undefined;
  /**
   * OpenFGA's error code, e.g. `validation_error`, `Aborted`, `unauthenticated`; when `tokenIssuer`
   * is set, the issuer's OAuth error, e.g. `invalid_client`, `unauthorized_client`.
   */
  readonly code: string | undefined;
  /** OpenFGA's own message (or the network error's, or the token issuer's), as stored in `last_error`. */
  readonly openFgaMessage: string;
  /**
   * Set when the failure was the client-credentials token exchange, not OpenFGA: the token endpoint
   * that refused it (e.g. `https://issuer.example/oauth/token`, without query or userinfo).
   */
  readonly tokenIssuer: string | undefined;
  constructor(
    message: string,
    details: { status: number | undefined; code: string | undefined; openFgaMessage: string; tokenIssuer?: string },
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.status = details.status;
    this.code = details.code;
    this.openFgaMessage = details.openFgaMessage;
    this.tokenIssuer = details.tokenIssuer;
  }
}
