import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { ID_DESCRIPTION, ID_PATTERN } from './field-schemas.js';
import { HttpError } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The caller's id (`alice`), from `x-user-id`; set on every route of a service, '' on the kit's own (health, OpenAPI). */
    caller: string;
  }
}

/** The request header that names the caller. */
export const CALLER_HEADER = 'x-user-id';

/**
 * The caller of a request, from the `x-user-id` header, as the bare id (`alice`; OpenFGA sees
 * `user:alice`). DEMO-GRADE: the header is trusted as sent. In production an authenticating proxy
 * or gateway in front of the service verifies a token and sets it (stripping any client-sent
 * copy), or this function is replaced by one that verifies the token itself.
 */
export function callerOf(headers: IncomingHttpHeaders): string {
  const value = headers[CALLER_HEADER];
  if (value === undefined || value === '') {
    throw new HttpError(
      401,
      'unauthenticated',
      `missing the ${CALLER_HEADER} header: say who is calling (${ID_DESCRIPTION})`,
    );
  }
  if (Array.isArray(value) || !ID_PATTERN.test(value)) {
    throw new HttpError(401, 'unauthenticated', `the ${CALLER_HEADER} header should be ${ID_DESCRIPTION}, once`);
  }
  return value;
}

/**
 * The `preValidation` hook of a service's routes: names the caller (401 without one) after the body
 * was read and before it is validated, so an anonymous request learns nothing about the schema.
 */
export async function authenticate(request: FastifyRequest): Promise<void> {
  request.caller = callerOf(request.headers);
}
