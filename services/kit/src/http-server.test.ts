import { createServer as createHttpServer, request } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { useOpenFgaStore } from '@outbox/test-stack';
import { afterEach, describe, expect, test } from 'vitest';
import { createAuthorizer } from './authorizer.js';
import { HttpError } from './errors.js';
import { MAX_BODY_BYTES, startHttpServer, type HttpServer, type Route } from './http-server.js';
import { recordingLogger } from './testing/recording-logger.js';

const fga = useOpenFgaStore();

/** Sends `head` as is over a TCP socket (no client-side URL checks) and returns the whole answer. */
async function rawRequest(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(head));
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
  });
}

let server: HttpServer | undefined;
afterEach(async () => {
  await server?.close(1_000);
  server = undefined;
});

const start = async (routes: Route[]) => (server = await startHttpServer({ routes, host: '127.0.0.1', port: 0, logger: recordingLogger() }));
const echo: Route = { method: 'POST', path: '/things/:id', handle: async (r) => ({ status: 201, body: { id: r.params.id, body: r.body, caller: r.caller() } }) };

describe('routing and errors', () => {
  test('params are decoded; the caller comes from x-user-id; JSON in and out', async () => {
    const { url } = await start([echo]);
    const response = await fetch(`${url}/things/a%20b`, { method: 'POST', headers: { 'x-user-id': 'alice', 'content-type': 'application/json' }, body: '{"x":1}' });
    expect(response.status).toBe(201);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toEqual({ id: 'a b', body: { x: 1 }, caller: 'alice' });
  });

  test('unknown path 404, wrong method 405 with allow, missing or malformed caller 401', async () => {
    const { url } = await start([echo]);
    expect((await fetch(`${url}/nothing`)).status).toBe(404);
    const wrong = await fetch(`${url}/things/1`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    expect((await fetch(`${url}/things/1`, { method: 'POST', body: '{}' })).status).toBe(401);
    const malformed = await fetch(`${url}/things/1`, { method: 'POST', headers: { 'x-user-id': 'al ice' }, body: '{}' });
    expect(malformed.status).toBe(401);
    expect(await malformed.json()).toMatchObject({ error: { code: 'unauthenticated' } });
  });

  test('bad bodies: invalid JSON 400, too large 413; JSON is read whatever the content-type says', async () => {
    const { url } = await start([echo]);
    const headers = { 'x-user-id': 'alice', 'content-type': 'application/json' };
    const invalid = await fetch(`${url}/things/1`, { method: 'POST', headers, body: '{"x":' });
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toMatchObject({ error: { code: 'invalid_json' } });
    expect((await fetch(`${url}/things/1`, { method: 'POST', headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' }, body: '{}' })).status).toBe(201);
    const large = await fetch(`${url}/things/1`, { method: 'POST', headers, body: JSON.stringify({ x: 'y'.repeat(MAX_BODY_BYTES) }) });
    expect(large.status).toBe(413);
  });

  test('an HttpError keeps its status and code; anything else is a 500 that hides the details and is logged', async () => {
    const logger = recordingLogger();
    const routes: Route[] = [
      { method: 'GET', path: '/teapot', handle: async () => { throw new HttpError(418, 'teapot', 'short and stout'); } },
      { method: 'GET', path: '/bug', handle: async () => { throw new Error('secret detail'); } },
    ];
    server = await startHttpServer({ routes, host: '127.0.0.1', port: 0, logger: { ...logger, error: (m, f) => void logger.entries.push({ level: 'error', message: m, ...(f ? { fields: f } : {}) }) } });
    expect(await (await fetch(`${server.url}/teapot`)).json()).toEqual({ error: { code: 'teapot', message: 'short and stout' } });
    const bug = await fetch(`${server.url}/bug`);
    expect(bug.status).toBe(500);
    expect(await bug.text()).not.toContain('secret detail');
    expect(logger.entries.some((e) => e.level === 'error' && JSON.stringify(e.fields).includes('secret detail'))).toBe(true);
  });
});

describe('request targets', () => {
  test.each(['//[', '//[::1/things/1'])('a target WHATWG URL refuses (GET %s over a raw socket): 400 invalid_url, not 500', async (target) => {
    const logger = recordingLogger();
    const errors: string[] = [];
    server = await startHttpServer({ routes: [echo], host: '127.0.0.1', port: 0, logger: { ...logger, error: (message) => void errors.push(message) } });
    const answer = await rawRequest(server.port, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('invalid_url');
    expect(body.error.message).toContain(JSON.stringify(target));
    expect(errors).toEqual([]); // the caller's fault: nothing logged as ours
  });
});

describe('authorizer failures as the caller sees them', () => {
  const errors: string[] = [];
  const startQuiet = async (routes: Route[]) => {
    errors.length = 0;
    return (server = await startHttpServer({ routes, host: '127.0.0.1', port: 0, logger: { ...recordingLogger(), error: (message) => void errors.push(message) } }));
  };
  const guarded = (connection: Parameters<typeof createAuthorizer>[0]): Route => {
    const authorizer = createAuthorizer(connection);
    return {
      method: 'GET',
      path: '/guarded/:relation',
      handle: async (r) => {
        await authorizer.require('user:alice', r.params.relation as string, 'vpc:1');
        return { status: 200, body: { ok: true } };
      },
    };
  };

  test('OpenFGA throttling (422 throttled_timeout_error) is a 503 authorization_unavailable, like any unavailability', async () => {
    // A real OpenFGA answers 422 only under dispatch throttling past the request deadline, which the
    // test stack does not configure: a stand-in answers Check as OpenFGA does then; the SDK is real.
    let checks = 0;
    const throttling = createHttpServer((req, res) => {
      req.resume();
      if (req.url?.endsWith('/check')) checks += 1;
      res.writeHead(422, { 'content-type': 'application/json' }).end(JSON.stringify({ code: 'throttled_timeout_error', message: 'timeout due to throttling on complex request' }));
    });
    await new Promise<void>((resolve) => throttling.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = throttling.address() as AddressInfo;
      const { url } = await startQuiet([guarded({ apiUrl: `http://127.0.0.1:${port}`, storeId: fga.storeId })]);
      const answer = await fetch(`${url}/guarded/can_view`, { headers: { 'x-user-id': 'alice' } });
      expect(answer.status).toBe(503);
      expect(await answer.json()).toMatchObject({ error: { code: 'authorization_unavailable' } });
      expect(checks).toBe(1); // the SDK does not retry a 422: it reached OpenFGA's answer
      expect(errors).toEqual([]); // not logged as the service's bug
    } finally {
      throttling.closeAllConnections();
      await new Promise<void>((resolve) => throttling.close(() => resolve()));
    }
  });

  test('a check the real OpenFGA refuses as malformed (400 validation_error, a relation the model lacks) stays a 500: our bug', async () => {
    const { url } = await startQuiet([guarded({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.authorizationModelId })]);
    const answer = await fetch(`${url}/guarded/no_such_relation`, { headers: { 'x-user-id': 'alice' } });
    expect(answer.status).toBe(500);
    expect(await answer.json()).toMatchObject({ error: { code: 'internal' } });
    expect(errors).toEqual(['GET /guarded/no_such_relation failed']);
  });
});

describe('graceful close', () => {
  test('waits for a request in flight, which gets its answer; then refuses connections', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const { url, port } = await start([{ method: 'GET', path: '/slow', handle: async () => { entered(); await released; return { status: 200, body: { done: true } }; } }]);
    const answer = fetch(`${url}/slow`).then(async (r) => ({ status: r.status, body: await r.json() }));
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
      request({ host: '127.0.0.1', port, path: '/slow' }).on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error')).end();
    });
    expect(refused).toBe('ECONNREFUSED');
  });

  test('cuts a request that outlives the timeout', async () => {
    const { url } = await start([{ method: 'GET', path: '/stuck', handle: () => new Promise(() => undefined) }]);
    const answer = fetch(`${url}/stuck`).then(() => 'answered', () => 'cut');
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = Date.now();
    await server!.close(200);
    server = undefined;
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(await answer).toBe('cut');
  });
});
