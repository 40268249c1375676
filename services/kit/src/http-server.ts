import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '@outbox/drainer';
import { PayloadError } from '@outbox/outbox';
import { sqlState } from '@outbox/outbox/protocol';
import { callerOf } from './caller.js';
import { HttpError, isDatabaseUnavailable, SERVICE_SQLSTATE } from './errors.js';

/** HTTP methods the services route. */
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** What a route handler gets. */
export interface ServiceRequest {
  readonly method: HttpMethod;
  /** Path parameters, decoded (`/vpcs/:id` → `{ id }`). */
  readonly params: Readonly<Record<string, string>>;
  readonly query: URLSearchParams;
  /** The parsed JSON body (POST and PUT), or undefined when there was none. */
  readonly body: unknown;
  readonly headers: IncomingHttpHeaders;
  /** The caller's id from the `x-user-id` header; throws a 401 {@link HttpError} without one. */
  caller(): string;
}

/** What a route handler answers. */
export interface ServiceResponse {
  readonly status: number;
  /** Serialised as JSON; omit it for 204. */
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

/** One route: `path` segments starting with `:` are parameters. */
export interface Route {
  readonly method: HttpMethod;
  readonly path: string;
  handle(request: ServiceRequest): Promise<ServiceResponse>;
}

/** Request bodies larger than this are refused (413): resources are small JSON objects. */
export const MAX_BODY_BYTES = 64 * 1024;

interface CompiledRoute extends Route {
  readonly segments: readonly string[];
}

function match(route: CompiledRoute, parts: readonly string[]): Record<string, string> | undefined {
  if (route.segments.length !== parts.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < parts.length; i += 1) {
    const want = route.segments[i] as string;
    const got = parts[i] as string;
    if (want.startsWith(':')) {
      if (got === '') return undefined;
      try {
        params[want.slice(1)] = decodeURIComponent(got);
      } catch {
        return undefined;
      }
    } else if (want !== got) return undefined;
  }
  return params;
}

/**
 * The body as JSON, whatever its content-type says: `curl -d` labels JSON as a form, and refusing
 * it would only teach people to add a header. What does not parse is a 400.
 */
async function readJson(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of request as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) throw new HttpError(413, 'body_too_large', `the request body is larger than ${MAX_BODY_BYTES} bytes`);
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof HttpError) throw error;
    // The client went away mid-body (node: 'aborted', code ECONNRESET). Its fault, not ours, and
    // not the database's: that code used to be read as "the database is unavailable" and logged so.
    throw new HttpError(400, 'body_incomplete', `the request body ended before it was complete (${error instanceof Error ? error.message : String(error)})`);
  }
  if (size === 0) return undefined;
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (error) {
    throw new HttpError(400, 'invalid_json', `the request body is not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * The request target as a URL. Node's parser lets through targets WHATWG URL refuses (`//[`, which
 * reads as a protocol-relative URL with a bad host): the caller's fault, a 400, not a 500.
 */
function parseTarget(target: string | undefined): URL {
  try {
    return new URL(target ?? '/', 'http://service.invalid');
  } catch {
    const shown = JSON.stringify((target ?? '').slice(0, 200));
    throw new HttpError(400, 'invalid_url', `the request target ${shown} is not a valid path and query`);
  }
}

/** Turns anything a handler threw into the response the caller sees; logs what is our fault. */
function errorResponse(error: unknown, logger: Logger, where: string): ServiceResponse {
  if (error instanceof HttpError) {
    return { status: error.status, body: { error: { code: error.code, message: error.message } }, headers: error.headers };
  }
  if (error instanceof PayloadError) {
    // The route built an intent OpenFGA would refuse (e.g. an id with a character OpenFGA forbids).
    return { status: 400, body: { error: { code: 'invalid_tuple', message: error.message } } };
  }
  if (sqlState(error) === SERVICE_SQLSTATE.UNIQUE_VIOLATION) {
    const detail = (error as { detail?: string }).detail;
    return { status: 409, body: { error: { code: 'conflict', message: `already exists${detail ? `: ${detail}` : ''}` } } };
  }
  if (isDatabaseUnavailable(error)) {
    logger.warn(`${where}: the database is unavailable: ${error instanceof Error ? error.message : String(error)}`);
    return {
      status: 503,
      body: { error: { code: 'database_unavailable', message: 'the database did not answer: retry shortly' } },
      headers: { 'retry-after': '1' },
    };
  }
  logger.error(`${where} failed`, { error: error instanceof Error ? error.stack ?? error.message : String(error) });
  return { status: 500, body: { error: { code: 'internal', message: 'internal error (logged by the service)' } } };
}

/** A started HTTP server and how to stop it gracefully. */
export interface HttpServer {
  readonly url: string;
  readonly port: number;
  /**
   * Stops accepting connections, answers 503 to requests that arrive on kept-alive connections,
   * waits for requests in flight (at most `timeoutMs`, then cuts them), and closes every connection.
   */
  close(timeoutMs: number): Promise<void>;
}

/**
 * Serves `routes` with node:http: JSON in and out, typed errors rendered as
 * `{ error: { code, message } }`, 404 for unknown paths and 405 (with `allow`) for wrong methods.
 */
export async function startHttpServer(options: { routes: readonly Route[]; host: string; port: number; logger: Logger }): Promise<HttpServer> {
  const routes: CompiledRoute[] = options.routes.map((r) => ({ ...r, handle: r.handle.bind(r), segments: r.path.split('/').slice(1) }));
  const { logger } = options;
  let inFlight = 0;
  let closing = false;
  const idle = new Set<() => void>();

  async function respond(request: IncomingMessage): Promise<ServiceResponse> {
    const url = parseTarget(request.url);
    const parts = url.pathname.replace(/\/+$/, '').split('/').slice(1);
    const candidates = routes.map((route) => ({ route, params: match(route, parts.length === 0 ? [''] : parts) })).filter((c) => c.params);
    if (candidates.length === 0) throw new HttpError(404, 'not_found', `no route for ${request.method} ${url.pathname}`);
    const found = candidates.find((c) => c.route.method === request.method);
    if (!found) {
      const allow = [...new Set(candidates.map((c) => c.route.method))].join(', ');
      throw new HttpError(405, 'method_not_allowed', `${request.method} is not allowed on ${url.pathname} (allowed: ${allow})`, { headers: { allow } });
    }
    const body = request.method === 'POST' || request.method === 'PUT' ? await readJson(request) : undefined;
    return found.route.handle({
      method: found.route.method,
      params: found.params as Record<string, string>,
      query: url.searchParams,
      body,
      headers: request.headers,
      caller: () => callerOf(request.headers),
    });
  }

  function send(response: ServerResponse, result: ServiceResponse): void {
    const headers: Record<string, string> = { ...result.headers };
    if (closing) headers.connection = 'close';
    if (result.body === undefined || result.status === 204) {
      response.writeHead(result.status, headers).end();
      return;
    }
    const text = JSON.stringify(result.body);
    response.writeHead(result.status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) }).end(text);
  }

  const server: Server = createServer((request, response) => {
    if (closing) {
      request.resume();
      send(response, { status: 503, body: { error: { code: 'shutting_down', message: 'the service is shutting down: retry on another instance' } } });
      return;
    }
    inFlight += 1;
    response.once('close', () => {
      inFlight -= 1;
      if (inFlight === 0) for (const resolve of idle) resolve();
    });
    respond(request)
      .catch((error: unknown) => errorResponse(error, logger, `${request.method} ${request.url}`))
      .then((result) => send(response, result))
      .catch((error: unknown) => logger.error('could not send a response', { error: String(error) }));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;

  return {
    url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`,
    port,
    async close(timeoutMs) {
      closing = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (inFlight > 0) {
        let timer: NodeJS.Timeout | undefined;
        await new Promise<void>((resolve) => {
          idle.add(resolve);
          timer = setTimeout(() => {
            logger.warn(`shutdown: ${inFlight} request(s) still running after ${timeoutMs} ms; closing their connections`);
            resolve();
          }, timeoutMs);
        });
        clearTimeout(timer);
      }
      server.closeAllConnections();
      await closed;
    },
  };
}
