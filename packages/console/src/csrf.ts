import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * CSRF: a double-submit token. The page's cookie (HttpOnly, SameSite=Strict, random) is repeated in
 * a hidden field of each form; a POST whose field differs, or that the browser marks cross-site
 * (Sec-Fetch-Site, Origin), is refused before anything is read.
 */
export const CSRF_COOKIE = 'outbox_console_csrf';
const TOKEN = /^[A-Za-z0-9_-]{43}$/;

function cookieToken(request: FastifyRequest): string | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, value] = part.trim().split('=');
    if (name === CSRF_COOKIE && value && TOKEN.test(value)) return value;
  }
  return undefined;
}

/** The request's token, or a new one set as the cookie (scoped to the console's path). */
export function csrfToken(request: FastifyRequest, reply: FastifyReply, path: string): string {
  const existing = cookieToken(request);
  if (existing) return existing;
  const token = randomBytes(32).toString('base64url');
  reply.header('set-cookie', `${CSRF_COOKIE}=${token}; Path=${path || '/'}; HttpOnly; SameSite=Strict`);
  return token;
}

/** Why a POST fails the CSRF check, or undefined when it passes. */
export function csrfFailure(request: FastifyRequest, form: URLSearchParams): string | undefined {
  const site = request.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return `a ${site} request`;
  const origin = request.headers.origin;
  if (origin !== undefined && origin !== 'null') {
    let host: string | undefined;
    try {
      host = new URL(origin).host;
    } catch {
      host = undefined;
    }
    if (host !== request.headers.host) return 'a request from another origin';
  } else if (origin === 'null') return 'a request from an opaque origin';
  const cookie = cookieToken(request);
  const field = form.get('csrf') ?? '';
  if (!cookie) return 'no CSRF cookie (load the page first)';
  if (field.length !== cookie.length || !timingSafeEqual(Buffer.from(field), Buffer.from(cookie)))
    return "the form's CSRF token does not match";
  return undefined;
}
