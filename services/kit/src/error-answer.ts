import { PayloadError } from '@outbox/outbox';
import { sqlState } from '@outbox/outbox/protocol';
import { HttpError, isDatabaseUnavailable, SERVICE_SQLSTATE } from './errors.js';
import type { FormatCheck } from './field-schemas.js';
import { validationHttpError, type SchemaError, type SchemaErrorPart } from './validation-message.js';

/** The body of every error answer: a stable machine-readable `code` and a message that says what to fix. */
export interface ErrorBody {
  readonly error: { readonly code: string; readonly message: string };
}

/** What the caller is answered for an error, and whether it is logged (what is ours or the database's). */
export interface ErrorAnswer {
  readonly status: number;
  readonly body: ErrorBody;
  readonly headers: Readonly<Record<string, string>>;
  readonly log?: {
    readonly level: 'warn' | 'error';
    readonly message: string;
    readonly fields?: Record<string, unknown>;
  };
}

const answer = (
  status: number,
  code: string,
  message: string,
  headers: Readonly<Record<string, string>> = {},
): ErrorAnswer => ({
  status,
  body: { error: { code, message } },
  headers,
});

/** fastify's own errors for requests it refuses (a media type it cannot read, a bad content-length…): the client's fault. */
function isFastifyClientError(error: unknown): error is Error & { code: string; statusCode: number } {
  const { code, statusCode } = error as { code?: unknown; statusCode?: unknown };
  return (
    typeof code === 'string' &&
    code.startsWith('FST_') &&
    typeof statusCode === 'number' &&
    statusCode >= 400 &&
    statusCode < 500
  );
}

/**
 * Turns anything a route (or fastify, before it) threw into the answer the caller sees:
 * `{ error: { code, message } }` with the status of an {@link HttpError}; a schema failure is a 400
 * in the words of {@link validationHttpError}; an intent OpenFGA would refuse 400 `invalid_tuple`; a
 * unique violation 409 `conflict`; a lost database 503 `database_unavailable` (logged at WARN);
 * anything else a 500 that hides the details and logs them as the service's own failure.
 */
export function errorAnswer(
  error: unknown,
  where: string,
  formats: Readonly<Record<string, FormatCheck>>,
): ErrorAnswer {
  if (error instanceof HttpError) return answer(error.status, error.code, error.message, error.headers);
  const { validation, validationContext } = error as {
    validation?: readonly SchemaError[];
    validationContext?: SchemaErrorPart;
  };
  if (Array.isArray(validation))
    return errorAnswer(validationHttpError(validation, validationContext ?? 'body', formats), where, formats);
  if (error instanceof PayloadError) {
    // The route built an intent OpenFGA would refuse (e.g. an id with a character OpenFGA forbids).
    return answer(400, 'invalid_tuple', error.message);
  }
  if (sqlState(error) === SERVICE_SQLSTATE.UNIQUE_VIOLATION) {
    const detail = (error as { detail?: string }).detail;
    return answer(409, 'conflict', `already exists${detail ? `: ${detail}` : ''}`);
  }
  if (isDatabaseUnavailable(error)) {
    return {
      ...answer(503, 'database_unavailable', 'the database did not answer: retry shortly', { 'retry-after': '1' }),
      log: {
        level: 'warn',
        message: `${where}: the database is unavailable: ${error instanceof Error ? error.message : String(error)}`,
      },
    };
  }
  if (isFastifyClientError(error)) return answer(error.statusCode, 'bad_request', error.message);
  return {
    ...answer(500, 'internal', 'internal error (logged by the service)'),
    log: {
      level: 'error',
      message: `${where} failed`,
      fields: { error: error instanceof Error ? (error.stack ?? error.message) : String(error) },
    },
  };
}
