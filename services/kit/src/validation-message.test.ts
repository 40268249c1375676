import { Type } from 'typebox';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ID_FIELD, NAME_FIELD } from './field-schemas.js';
import { startHttpServer, type HttpServer } from './http-server.js';
import { createServiceLogger } from './service-logger.js';
import { recordingLogger } from './testing/recording-logger.js';

// The 400s of fastify's schema validation (ajv), in the services' words, through a real server.
const body = Type.Object(
  {
    project_id: ID_FIELD,
    name: NAME_FIELD,
    port: Type.Integer({ description: 'a port', minimum: 1, maximum: 65_535 }),
    scheme: Type.Enum(['internal', 'internet-facing'], { description: 'a scheme', default: 'internal' }),
    versioning: Type.Boolean({ description: 'versioning', default: false }),
    even: Type.Optional(Type.String({ description: 'an even number', format: 'even' })),
  },
  { additionalProperties: false },
);

let server: HttpServer;
beforeAll(async () => {
  server = await startHttpServer({
    name: 'test',
    host: '127.0.0.1',
    port: 0,
    log: createServiceLogger('test', { sink: recordingLogger() }),
    formats: { even: (value) => (Number(value) % 2 === 0 ? undefined : `${value} is odd`) },
    routes(app) {
      app.post('/things', { schema: { body } }, async (request) => request.body);
      app.get(
        '/things',
        { schema: { querystring: Type.Object({ project_id: Type.Optional(ID_FIELD) }) } },
        async (request) => request.query,
      );
      app.get(
        '/things/:user',
        { schema: { params: Type.Object({ user: ID_FIELD }) } },
        async (request) => request.params,
      );
    },
  });
});
afterAll(() => server?.close(1_000));

const post = (raw: string) =>
  fetch(`${server.url}/things`, { method: 'POST', headers: { 'x-user-id': 'alice' }, body: raw });

/** The 400's code and message for a body. */
async function problem(value: unknown, raw = JSON.stringify(value)): Promise<{ code: string; message: string }> {
  const reply = await post(raw);
  expect(reply.status, raw).toBe(400);
  return ((await reply.json()) as { error: { code: string; message: string } }).error;
}

describe('body schemas', () => {
  test('fills defaults and passes exactly the known fields', async () => {
    const reply = await post(JSON.stringify({ project_id: 'p1', name: 'web-1', port: 80 }));
    expect(await reply.json()).toEqual({
      project_id: 'p1',
      name: 'web-1',
      port: 80,
      scheme: 'internal',
      versioning: false,
    });
  });

  test('lists every problem in one message', async () => {
    const { code, message } = await problem({ name: 'Web 1', port: 0, scheme: 'public', versioning: 'yes', extra: 1 });
    expect(code).toBe('invalid_body');
    expect(message).toMatch(/^invalid request body: /);
    for (const part of [
      'project_id: required (an id of',
      'name: expected a name of 1 to 63',
      'port: expected a port (1 to 65535), got 0',
      'scheme: expected one of "internal", "internet-facing", got "public"',
      'versioning: expected true or false, got "yes"',
      'extra: unknown field (expected project_id, name, port, scheme, versioning, even)',
    ]) {
      expect(message).toContain(part);
    }
  });

  test('names of Object.prototype are unknown fields too (constructor, toString, __proto__, hasOwnProperty)', async () => {
    const raw =
      '{"project_id":"p1","name":"a","port":1,"constructor":1,"toString":"x","__proto__":{"admin":true},"hasOwnProperty":false}';
    const { message } = await problem(undefined, raw);
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty'])
      expect(message).toContain(`${name}: unknown field`);
    expect(message).not.toContain('project_id:');
  });

  test('refuses what is not an object, wrong types, ids OpenFGA would not take, and what a format check refuses (in its words)', async () => {
    expect(await problem([])).toEqual({
      code: 'invalid_body',
      message: 'expected a JSON object with project_id, name, port, scheme, versioning, even',
    });
    expect((await problem(undefined, '')).message).toMatch(/^expected a JSON object/);
    expect((await problem({ project_id: 'p:1', name: 'a', port: 1 })).message).toContain('project_id: expected an id');
    expect((await problem({ project_id: 'p1', name: 'a', port: 1.5 })).message).toContain(
      'port: expected an integer (a port), got 1.5',
    );
    expect((await problem({ project_id: 'p1', name: 'a', port: 1, even: '3' })).message).toBe(
      'invalid request body: even: 3 is odd',
    );
  });

  test('a body of thousands of problems is one short message', async () => {
    const many = Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`k${i}`, i]));
    const { message } = await problem({ project_id: 'p1', name: 'a', port: 1, ...many });
    expect(message).toContain('and 4990 more');
    expect(message.length).toBeLessThan(2_000);
  });
});

describe('query and path schemas', () => {
  test('a bad query value is 400 invalid_query naming the parameter; a bad path parameter 400 invalid_<name>', async () => {
    const query = await fetch(`${server.url}/things?project_id=%00`, { headers: { 'x-user-id': 'alice' } });
    expect(query.status).toBe(400);
    expect(await query.json()).toEqual({
      error: { code: 'invalid_query', message: expect.stringMatching(/^project_id: expected an id of/) },
    });
    const path = await fetch(`${server.url}/things/no%20spaces`, { headers: { 'x-user-id': 'alice' } });
    expect(path.status).toBe(400);
    expect(await path.json()).toEqual({
      error: { code: 'invalid_user', message: expect.stringMatching(/^the user in the path should be an id of/) },
    });
  });
});
