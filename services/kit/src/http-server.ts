import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type RawServerDefault,
} from 'fastify';
import type pino from 'pino';
import { authenticate, CALLER_HEADER } from './caller.js';
import { errorAnswer } from './error-answer.js';
import { HttpError } from './errors.js';
import type { FormatCheck } from './field-schemas.js';
import { discardBody, readJsonBody } from './json-body.js';
import { optionalDefaults } from './request-schemas.js';

/** The fastify instance a service's routes are declared on: bodies, params and queries typed by their TypeBox schemas. */
export type ServiceApp = FastifyInstance<
  RawServerDefault,
  IncomingMessage,
  ServerResponse,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** The request header that carries a request's id: taken from the client when it sends a sane one, else made; always echoed. */
export const REQUEST_ID_HEADER = 'x-request-id';
const REQUEST_ID = /^[A-Za-z0-9._:@+-]{1,128}$/;

/** What {@link startHttpServer} takes. */
export interface HttpServerOptions {
  /** The API's name in its OpenAPI document (`/openapi.json`), e.g. `vpc`. */
  readonly name: string;
  readonly host: string;
  /** 0: a free port (read it from the result). */
  readonly port: number;
  /** fastify's logger: every line of a request carries its `reqId`. */
  readonly log: pino.Logger;
  /** The checks behind the custom `format`s the schemas use (see {@link FormatCheck}). Default none. */
  readonly formats?: Readonly<Record<string, FormatCheck>>;
  /** Declares the API's routes: each names its caller from `x-user-id` (`request.caller`; 401 without one). */
  routes(app: ServiceApp): void | Promise<void>;
  /** Declares routes that need no caller (health, readiness; `config: { probe: true }` logs them only when they fail). */
  publicRoutes?(app: ServiceApp): void | Promise<void>;
}

/** A started HTTP server and how to stop it gracefully. */
export interface HttpServer {
  readonly url: string;
  readonly port: number;
  readonly app: ServiceApp;
  /**
   * Stops accepting connections, answers 503 `shutting_down` to requests that arrive on kept-alive
   * connections, waits for requests in flight (at most `timeoutMs`, then cuts them), and closes every connection.
   */
  close(timeoutMs: number): Promise<void>;
}

/**
 * Serves a service's API with fastify: JSON in and out (whatever the content-type says), errors
 * rendered as `{ error: { code, message } }` (see `errorAnswer`), 404 for unknown paths and 405
 * (with `allow`) for a known path's other methods, request ids, an OpenAPI document at
 * `/openapi.json`, and a graceful close.
 *
 * @example
 * const server = await startHttpServer({ name: 'vpc', host: '127.0.0.1', port: 0, log, routes: (app) => {
 *   app.get('/vpcs/:id', { schema: { params: Type.Object({ id: Type.String() }) } }, async (request) => ({ id: request.params.id, caller: request.caller }));
 * } });
 * await server.close(10_000);
 */
export async function startHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  const formats = options.formats ?? {};
  let closing = false;
  const app: ServiceApp = Fastify({
    loggerInstance: options.log as FastifyBaseLogger,
    // One line per request, written below when it is answered (fastify's default is two).
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: (request) => {
      const given = request.headers[REQUEST_ID_HEADER];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    requestIdHeader: false,
    // HEAD and OPTIONS are 405 like any method a route does not declare, not GET without a body.
    exposeHeadRoutes: false,
    // An id that long is unknown (404), not a 414: ids are at most 128 characters.
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 1_000 },
    // Our own 503 `shutting_down`, in the error shape of every other answer (see the onRequest hook).
    return503OnClosing: false,
    ajv: {
      customOptions: {
        // Every problem of a body in one 400, with the failing value and its schema to describe it.
        allErrors: true,
        verbose: true,
        // Refuse what the schema does not know (a typo is not silently dropped) and what has the wrong type.
        removeAdditional: false,
        coerceTypes: false,
        useDefaults: true,
        formats: Object.fromEntries(
          Object.entries(formats).map(([name, check]) => [
            name,
            { type: 'string', validate: (value: string) => check(value) === undefined },
          ]),
        ),
      },
    },
    // A path whose %-escapes do not decode names no resource: 404, as an unknown id.
    frameworkErrors: (error, request, reply: FastifyReply) => {
      const notFound = error.code === 'FST_ERR_BAD_URL';
      const { status, body, headers } = errorAnswer(
        notFound ? new HttpError(404, 'not_found', `no route for ${request.method} ${request.url}`) : error,
        `${request.method} ${request.url}`,
        formats,
      );
      void reply
        .code(status)
        .headers({ ...headers, [REQUEST_ID_HEADER]: request.id })
        .send(body);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.decorateRequest('caller', '');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request: FastifyRequest, payload: IncomingMessage) => readJsonBody(payload));

  app.addHook('onRequest', async (request, reply) => {
    void reply.header(REQUEST_ID_HEADER, request.id);
    if (closing) throw new HttpError(503, 'shutting_down', 'the service is shutting down: retry on another instance');
    // Node's parser lets through targets WHATWG URL refuses (`//[`, a protocol-relative URL with a bad host).
    if (!URL.canParse(request.url, 'http://service.invalid')) {
      throw new HttpError(
        400,
        'invalid_url',
        `the request target ${JSON.stringify(request.url.slice(0, 200))} is not a valid path and query`,
      );
    }
  });
  app.addHook('onSend', async (_request, reply) => {
    if (closing) void reply.header('connection', 'close');
  });
  app.addHook('onResponse', async (request, reply) => {
    // A probe a load balancer sends every few seconds is logged only when it fails (or at debug).
    const quiet = (request.routeOptions.config as { probe?: boolean }).probe === true && reply.statusCode < 400;
    request.log[quiet ? 'debug' : 'info'](
      { method: request.method, url: request.url, statusCode: reply.statusCode, ms: Math.round(reply.elapsedTime) },
      'request completed',
    );
  });

  app.setErrorHandler(async (error, request, reply: FastifyReply) => {
    const where = `${request.method} ${request.url}`;
    const { status, body, headers, log } = errorAnswer(error, where, formats);
    if (log) request.log[log.level](log.fields ?? {}, log.message);
    if (status === 413) {
      // Answer after the rest of the body is read, and end the connection: see discardBody.
      void reply.header('connection', 'close');
      await discardBody(request.raw);
    }
    return reply.code(status).headers(headers).send(body);
  });
  app.setNotFoundHandler(async (request) => {
    throw new HttpError(404, 'not_found', `no route for ${request.method} ${request.url.split('?')[0]}`);
  });

  // Before swagger reads the routes: a field with a default is optional, for validation and document alike.
  app.addHook('onRoute', (route) => {
    if (!route.schema) return;
    const { body, querystring } = route.schema;
    route.schema = {
      ...route.schema,
      ...(body === undefined ? {} : { body: optionalDefaults(body) }),
      ...(querystring === undefined ? {} : { querystring: optionalDefaults(querystring) }),
    };
  });
  await app.register(swagger, {
    openapi: {
      info: {
        title: `${options.name} service`,
        version: '1.0.0',
        description: `Every route but the health checks names its caller in the ${CALLER_HEADER} header.`,
      },
    },
  });
  // Which methods each path declares, for the 405s below.
  const declared = new Map<string, string[]>();
  app.addHook('onRoute', (route) => {
    if (route.config && (route.config as { methodNotAllowed?: boolean }).methodNotAllowed) return;
    const methods = declared.get(route.url) ?? [];
    methods.push(...(Array.isArray(route.method) ? route.method : [route.method]));
    declared.set(route.url, methods);
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  if (options.publicRoutes) await app.register(async (scope) => options.publicRoutes?.(scope));
  await app.register(async (scope) => {
    scope.addHook('preValidation', authenticate);
    await options.routes(scope);
  });
  for (const [url, methods] of declared) {
    const allow = methods.join(', ');
    const others = app.supportedMethods.filter((m) => !methods.includes(m));
    app.route({
      method: others,
      url,
      schema: { hide: true },
      config: { methodNotAllowed: true },
      handler: async (request) => {
        throw new HttpError(
          405,
          'method_not_allowed',
          `${request.method} is not allowed on ${request.url.split('?')[0]} (allowed: ${allow})`,
          { headers: { allow } },
        );
      },
    });
  }

  await app.listen({
    host: options.host,
    port: options.port,
    listenTextResolver: (address) => `listening on ${address}`,
  });
  const { port } = app.server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;

  return {
    url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`,
    port,
    app,
    async close(timeoutMs) {
      closing = true;
      const closed = app.close();
      let timer: NodeJS.Timeout | undefined;
      const inTime = await Promise.race([
        closed.then(() => true),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
      ]);
      clearTimeout(timer);
      if (!inTime) {
        app.log.warn(`shutdown: requests still running after ${timeoutMs} ms; closing their connections`);
        app.server.closeAllConnections();
        await closed;
      }
    },
  };
}
