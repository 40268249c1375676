import { Agent, createServer as createHttpServer, request } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { useOpenFgaStore } from '@outbox/test-stack';
import { Type } from 'typebox';
import { afterEach, describe, expect, test } from 'vitest';
import { createAuthorizer } from './authorizer.js';
import { HttpError } from './errors.js';
import { startHttpServer, type HttpServer, type ServiceApp } from './http-server.js';
import { MAX_BODY_BYTES } from './json-body.js';
import { createServiceLogger } from './service-logger.js';
import { recordingLogger, type RecordingLogger } from './testing/recording-logger.js';

const fga = useOpenFgaStore();

/** Sends `head` (and `body`) as is over a TCP socket (no client-side checks); the whole answer, and whether the socket errored. */
async function rawRequest(
  port: number,
  head: string,
  body?: Buffer,
): Promise<{ answer: string; socketError?: string }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(head);
      if (body) socket.write(body);
    });
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('end', () => resolve({ answer }));
    socket.on('error', (error: NodeJS.ErrnoException) => resolve({ answer, socketError: error.code ?? error.message }));
  });
}

let server: HttpServer | undefined;
let logger: RecordingLogger;
afterEach(async () => {
  await server?.close(1_000);
  server = undefined;
});

const start = async (routes: (app: ServiceApp) => void) => {
  logger = recordingLogger();
  return (server = await startHttpServer({
    name: 'test',
    host: '127.0.0.1',
    port: 0,
    log: createServiceLogger('test', { sink: logger }),
    routes,
  }));
};
const errors = () => logger.entries.filter((e) => e.level === 'error').map((e) => e.message);
const echo = (app: ServiceApp) => {
  app.post('/things/:id', { schema: { params: Type.Object({ id: Type.String() }) } }, async (r, reply) =>
    reply.code(201).send({ id: r.params.id, body: r.body, caller: r.caller }),
  );
};

describe('routing and errors', () => {
  test('params are decoded; the caller comes from x-user-id; JSON in and out', async () => {
    const { url } = await start(echo);
    const response = await fetch(`${url}/things/a%20b`, {
      method: 'POST',
      headers: { 'x-user-id': 'alice', 'content-type': 'application/json' },
      body: '{"x":1}',
    });
    expect(response.status).toBe(201);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toEqual({ id: 'a b', body: { x: 1 }, caller: 'alice' });
  });

  test('unknown path 404, wrong method 405 with allow, missing or malformed caller 401', async () => {
    const { url } = await start(echo);
    const missing = await fetch(`${url}/nothing`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { code: 'not_found' } });
    const wrong = await fetch(`${url}/things/1`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    expect(await wrong.json()).toMatchObject({ error: { code: 'method_not_allowed' } });
    expect((await fetch(`${url}/things/1`, { method: 'POST', body: '{}' })).status).toBe(401);
    const malformed = await fetch(`${url}/things/1`, {
      method: 'POST',
      headers: { 'x-user-id': 'al ice' },
      body: '{}',
    });
    expect(malformed.status).toBe(401);
    expect(await malformed.json()).toMatchObject({ error: { code: 'unauthenticated' } });
  });

  test('bad bodies: invalid JSON 400, too large 413; JSON is read whatever the content-type says', async () => {
    const { url } = await start(echo);
    const headers = { 'x-user-id': 'alice', 'content-type': 'application/json' };
    const invalid = await fetch(`${url}/things/1`, { method: 'POST', headers, body: '{"x":' });
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toMatchObject({ error: { code: 'invalid_json' } });
    expect(
      (
        await fetch(`${url}/things/1`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
          body: '{}',
        })
      ).status,
    ).toBe(201);
    const large = await fetch(`${url}/things/1`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ x: 'y'.repeat(MAX_BODY_BYTES) }),
    });
    expect(large.status).toBe(413);
    expect(await large.json()).toMatchObject({ error: { code: 'body_too_large' } });
  });

  test('an HttpError keeps its status and code; anything else is a 500 that hides the details and is logged', async () => {
    const { url } = await start((app) => {
      app.get('/teapot', async () => {
        throw new HttpError(418, 'teapot', 'short and stout');
      });
      app.get('/bug', async () => {
        throw new Error('secret detail');
      });
    });
    expect(await (await fetch(`${url}/teapot`, { headers: { 'x-user-id': 'a' } })).json()).toEqual({
      error: { code: 'teapot', message: 'short and stout' },
    });
    const bug = await fetch(`${url}/bug`, { headers: { 'x-user-id': 'a' } });
    expect(bug.status).toBe(500);
    expect(await bug.text()).not.toContain('secret detail');
    expect(logger.entries.some((e) => e.level === 'error' && JSON.stringify(e.fields).includes('secret detail'))).toBe(
      true,
    );
  });
});

describe('a body over the limit', () => {
  // It was answered 413 with `connection: keep-alive`, and the connection reset: the client's next
  // request on it failed with ECONNRESET.
  const big = Buffer.alloc(8 * 1024 * 1024, 'x');

  test('the 413 says connection: close, and the connection ends cleanly after it (no reset)', async () => {
    const { port } = await start(echo);
    for (const framing of [`Content-Length: ${big.length}`, 'Transfer-Encoding: chunked']) {
      const body = framing.startsWith('Transfer')
        ? Buffer.concat([Buffer.from(`${big.length.toString(16)}\r\n`), big, Buffer.from('\r\n0\r\n\r\n')])
        : big;
      const { answer, socketError } = await rawRequest(
        port,
        `POST /things/1 HTTP/1.1\r\nHost: x\r\nx-user-id: alice\r\n${framing}\r\n\r\n`,
        body,
      );
      expect(socketError, framing).toBeUndefined();
      expect(answer, framing).toMatch(/^HTTP\/1\.1 413 /);
      expect(answer.toLowerCase(), framing).toContain('connection: close');
    }
  });

  test('a keep-alive client gets its 413, and its next request works', async () => {
    const { port } = await start(echo);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const send = (body: Buffer | string) =>
      new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
        const call = request(
          {
            host: '127.0.0.1',
            port,
            path: '/things/1',
            method: 'POST',
            agent,
            headers: { 'x-user-id': 'alice', 'content-length': Buffer.byteLength(body) },
          },
          (response) => {
            response.resume();
            response.on('end', () =>
              resolve({ status: response.statusCode ?? 0, connection: response.headers.connection }),
            );
          },
        );
        call.on('error', reject);
        call.end(body);
      });
    try {
      expect(await send(big)).toEqual({ status: 413, connection: 'close' });
      expect((await send('{"x":1}')).status).toBe(201);
    } finally {
      agent.destroy();
    }
  });
});

describe('request ids', () => {
  test("a sane x-request-id is kept and echoed, anything else replaced by a fresh one; the request's log lines carry it", async () => {
    const { url } = await start(echo);
    const post = (id?: string) =>
      fetch(`${url}/things/1`, {
        method: 'POST',
        headers: { 'x-user-id': 'alice', ...(id === undefined ? {} : { 'x-request-id': id }) },
        body: '{}',
      });
    expect((await post('trace-42')).headers.get('x-request-id')).toBe('trace-42');
    const made = (await post()).headers.get('x-request-id');
    expect(made).toMatch(/^[0-9a-f-]{36}$/);
    const junk = (await post('a b\tc')).headers.get('x-request-id');
    expect(junk).not.toBe('a b\tc');
    expect(junk).toMatch(/^[0-9a-f-]{36}$/);
    const line = logger.entries.find((e) => e.message === 'request completed' && e.fields?.reqId === 'trace-42');
    expect(line?.fields).toMatchObject({ method: 'POST', url: '/things/1', statusCode: 201 });
  });
});

describe('probes', () => {
  test('a probe route needs no caller and is logged only when it fails', async () => {
    logger = recordingLogger();
    let healthy = true;
    server = await startHttpServer({
      name: 'test',
      host: '127.0.0.1',
      port: 0,
      log: createServiceLogger('test', { sink: logger }),
      routes: () => undefined,
      publicRoutes(app) {
        app.get('/readyz', { config: { probe: true } }, async (_request, reply) =>
          reply.code(healthy ? 200 : 503).send({ healthy }),
        );
      },
    });
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    healthy = false;
    expect((await fetch(`${server.url}/readyz`)).status).toBe(503);
    const logged = logger.entries
      .filter((e) => e.message === 'request completed')
      .map((e) => [e.level, e.fields?.statusCode]);
    expect(logged).toEqual([['info', 503]]);
  });
});

describe('request targets', () => {
  test.each(['//[', '//[::1/things/1'])(
    'a target WHATWG URL refuses (GET %s over a raw socket): 400 invalid_url, not 500',
    async (target) => {
      const { port } = await start(echo);
      const { answer } = await rawRequest(
        port,
        `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
      );
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as {
        error: { code: string; message: string };
      };
      expect(body.error.code).toBe('invalid_url');
      expect(body.error.message).toContain(JSON.stringify(target));
      expect(errors()).toEqual([]); // the caller's fault: nothing logged as ours
    },
  );
});

describe('the OpenAPI document', () => {
  test('/openapi.json lists each route with its schemas, paths in OpenAPI form', async () => {
    const { url } = await start((app) => {
      app.post(
        '/things/:id',
        {
          schema: {
            summary: 'make a thing',
            params: Type.Object({ id: Type.String() }),
            body: Type.Object({ size: Type.Integer({ minimum: 1 }) }),
          },
        },
        async () => ({}),
      );
    });
    const document = (await (await fetch(`${url}/openapi.json`)).json()) as {
      openapi: string;
      paths: Record<string, Record<string, { summary?: string; requestBody?: unknown }>>;
    };
    expect(document.openapi).toMatch(/^3\./);
    expect(document.paths['/things/{id}']?.post?.summary).toBe('make a thing');
    expect(JSON.stringify(document.paths['/things/{id}']?.post?.requestBody)).toContain('"minimum":1');
  });
  interface ObjectSchema {
    required: string[];
    properties: Record<string, ObjectSchema>;
  }
  test('a body field with a default is optional in the document, and the default is still filled in', async () => {
    const { url } = await start((app) => {
      app.post(
        '/things',
        {
          schema: {
            body: Type.Object(
              {
                name: Type.String(),
                colour: Type.Enum(['red', 'blue'], { default: 'red' }),
                options: Type.Object({ fast: Type.Boolean({ default: false }), size: Type.Integer() }),
              },
              { additionalProperties: false },
            ),
          },
        },
        async (request) => request.body,
      );
    });
    const document = (await (await fetch(`${url}/openapi.json`)).json()) as {
      paths: Record<string, { post: { requestBody: { content: Record<string, { schema: ObjectSchema }> } } }>;
    };
    const schema = document.paths['/things']?.post.requestBody.content['application/json']?.schema;
    expect(schema?.required).toEqual(['name', 'options']);
    expect(schema?.properties.options?.required).toEqual(['size']);
    const reply = await fetch(`${url}/things`, {
      method: 'POST',
      headers: { 'x-user-id': 'alice' },
      body: JSON.stringify({ name: 'x', options: { size: 1 } }),
    });
    expect(await reply.json()).toEqual({ name: 'x', colour: 'red', options: { fast: false, size: 1 } });
    const missing = await fetch(`${url}/things`, {
      method: 'POST',
      headers: { 'x-user-id': 'alice' },
      body: JSON.stringify({ options: {} }),
    });
    expect(missing.status).toBe(400);
  });
});

describe('authorizer failures as the caller sees them', () => {
  const guarded = (connection: Parameters<typeof createAuthorizer>[0]) => (app: ServiceApp) => {
    const authorizer = createAuthorizer(connection);
    app.get('/guarded/:relation', { schema: { params: Type.Object({ relation: Type.String() }) } }, async (r) => {
      await authorizer.require('user:alice', r.params.relation, 'vpc:1');
      return { ok: true };
    });
  };

  test('OpenFGA throttling (422 throttled_timeout_error) is a 503 authorization_unavailable, like any unavailability', async () => {
    // A real OpenFGA answers 422 only under dispatch throttling past the request deadline, which the
    // test stack does not configure: a stand-in answers Check as OpenFGA does then; the SDK is real.
    let checks = 0;
    const throttling = createHttpServer((req, res) => {
      req.resume();
      if (req.url?.endsWith('/check')) checks += 1;
      res
        .writeHead(422, { 'content-type': 'application/json' })
        .end(
          JSON.stringify({ code: 'throttled_timeout_error', message: 'timeout due to throttling on complex request' }),
        );
    });
    await new Promise<void>((resolve) => throttling.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = throttling.address() as AddressInfo;
      const { url } = await start(guarded({ apiUrl: `http://127.0.0.1:${port}`, storeId: fga.storeId }));
      const answer = await fetch(`${url}/guarded/can_view`, { headers: { 'x-user-id': 'alice' } });
      expect(answer.status).toBe(503);
      expect(await answer.json()).toMatchObject({ error: { code: 'authorization_unavailable' } });
      expect(checks).toBe(1); // the SDK does not retry a 422: it reached OpenFGA's answer
      expect(errors()).toEqual([]); // not logged as the service's bug
    } finally {
      throttling.closeAllConnections();
      await new Promise<void>((resolve) => throttling.close(() => resolve()));
    }
  });

  test('a check the real OpenFGA refuses as malformed (400 validation_error, a relation the model lacks) stays a 500: our bug', async () => {
    const { url } = await start(
      guarded({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.authorizationModelId }),
    );
    const answer = await fetch(`${url}/guarded/no_such_relation`, { headers: { 'x-user-id': 'alice' } });
    expect(answer.status).toBe(500);
    expect(await answer.json()).toMatchObject({ error: { code: 'internal' } });
    expect(errors()).toEqual(['GET /guarded/no_such_relation failed']);
  });
});

describe('graceful close', () => {
  test('waits for a request in flight, which gets its answer; then refuses connections', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const { url, port } = await start((app) => {
      app.get('/slow', async () => {
        entered();
        await released;
        return { done: true };
      });
    });
    const answer = fetch(`${url}/slow`, { headers: { 'x-user-id': 'a' } }).then(async (r) => ({
      status: r.status,
      body: await r.json(),
    }));
    await inside;
    let closed = false;
    const closing = server!.close(5_000).then(() => (closed = true));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(closed).toBe(false);
    release();
    expect(await answer).toEqual({ status: 200, body: { done: true } });
    await closing;
    server = undefined;
    const refused = await new Promise<string>((resolve) => {
      request({ host: '127.0.0.1', port, path: '/slow' })
        .on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'))
        .end();
    });
    expect(refused).toBe('ECONNREFUSED');
  });

  test('cuts a request that outlives the timeout', async () => {
    const { url } = await start((app) => {
      app.get('/stuck', () => new Promise(() => undefined));
    });
    const answer = fetch(`${url}/stuck`, { headers: { 'x-user-id': 'a' } }).then(
      () => 'answered',
      () => 'cut',
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = Date.now();
    await server!.close(200);
    server = undefined;
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(await answer).toBe('cut');
  });
});
