import { request } from 'node:http';
import { afterEach, describe, expect, test } from 'vitest';
import { HttpError } from './errors.js';
import { MAX_BODY_BYTES, startHttpServer, type HttpServer, type Route } from './http-server.js';
import { recordingLogger } from './testing/recording-logger.js';

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
