/**
 * The OpenFGA sink was configured wrongly: the message names the field and what is expected.
 *
 * @example
 * createOpenFgaSink({ apiUrl: 'localhost:8080', storeId }); // throws OpenFgaSinkConfigError, field 'apiUrl'
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
 * One Write request to OpenFGA failed: what OpenFGA (or the token issuer) said, never the request's
 * headers or body, so it is safe to log, `cause` included (docs/openfga-sink.md §7). It is the
 * `cause` of every `SinkHaltError` the sink throws.
 *
 * @example
 * catch (error) {
 *   if (error instanceof SinkHaltError && error.cause instanceof OpenFgaWriteError) {
 *     console.error(error.cause.status, error.cause.code, error.cause.tokenIssuer); // 401 'unauthenticated' undefined
 *   }
 * }
 */
export class OpenFgaWriteError extends Error {
  override readonly name = 'OpenFgaWriteError';
  /** HTTP status, when there was an answer (the token issuer's when `tokenIssuer` is set). */
  readonly status: number | undefined;
  /** OpenFGA's error code (`validation_error`, `unauthenticated`…), or the issuer's OAuth error (`invalid_client`…). */
  readonly code: string | undefined;
  /** OpenFGA's own message (or the network error's, or the token issuer's), as stored in `last_error`. */
  readonly openFgaMessage: string;
  /** The token endpoint that refused the client-credentials exchange, without query or userinfo. */
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
