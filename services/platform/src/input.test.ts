import { connect } from 'node:net';
import { serviceClient, startService, type RunningService } from '@outbox/service-kit';
import { serviceOptionsFor } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { iamService, vpcService } from './index.js';

// Adversarial input against the real services (vpc for the register services' kit, iam for its own
// routes), real Postgres and OpenFGA: every malformed request is a clear 4xx, nothing is written,
// and nothing is logged as the service's own failure.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let vpc: RunningService;
let iam: RunningService;
const errors: string[] = [];
const warnings: string[] = [];
const logger = {
  info: () => undefined,
  warn: (message: string) => void warnings.push(message),
  error: (message: string) => void errors.push(message),
};
let projectId: string;

/** Sends `head` (and `body`) over a raw socket; resolves with the whole answer, or the socket error. */
async function raw(port: number, head: string, body?: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(head);
      if (body) socket.write(body);
    });
    let answer = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('end', () => resolve(answer));
    socket.on('error', (error) => resolve(`socket error ${String(error)} after ${JSON.stringify(answer)}`));
  });
}

const count = async (table: string) =>
  Number((await sql<{ n: string }>`select count(*) as n from ${sql.raw(table)}`.execute(t.db)).rows[0]?.n);
const writes = async () => [
  await count('vpc.vpcs'),
  await count('vpc.fga_register_outbox'),
  await count('iam.organizations'),
  await count('iam.fga_outbox'),
];

beforeAll(async () => {
  vpc = await startService(vpcService, serviceOptionsFor(t, fga, { logger }));
  iam = await startService(iamService, serviceOptionsFor(t, fga, { logger }));
  const org = await serviceClient(iam.url, 'alice').post<{ id: string }>('/organizations', { name: 'acme' });
  const project = await serviceClient(iam.url, 'alice').post<{ id: string }>('/projects', {
    organization_id: org.body.id,
    name: 'shop',
  });
  expect([org.status, project.status]).toEqual([201, 201]);
  projectId = project.body.id;
});
afterAll(async () => {
  await vpc?.stop();
  await iam?.stop();
});

describe('bodies nested too deep to describe', () => {
  // 20,000 levels of `[` fit in 40 KB, under the 64 KB body limit. JSON.parse takes them;
  // JSON.stringify, used to quote the bad value in the 400's message, overflowed the stack: a 500.
  const deep = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
  const post = (url: string, path: string, body: string, method = 'POST') =>
    fetch(new URL(path, url), { method, headers: { 'x-user-id': 'alice', 'content-type': 'application/json' }, body });

  test('a deeply nested value in a register service field is a 400 naming the field, not a 500', async () => {
    const before = await writes();
    errors.length = 0;
    const reply = await post(
      vpc.url,
      '/vpcs',
      `{"project_id":"${projectId}","name":${deep},"cidr_block":"10.0.0.0/16"}`,
    );
    expect(reply.status).toBe(400);
    const body = (await reply.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('invalid_body');
    expect(body.error.message).toMatch(/^invalid request body: name: expected a string/);
    expect(body.error.message.length).toBeLessThan(1_000); // the bad value is quoted, not echoed whole
    expect(await writes()).toEqual(before);
    expect(errors).toEqual([]);
  });

  test('a deeply nested name in iam POST /organizations is a 400, not a 500', async () => {
    const before = await writes();
    errors.length = 0;
    const reply = await post(iam.url, '/organizations', `{"name":${deep}}`);
    expect(reply.status).toBe(400);
    expect(await reply.json()).toMatchObject({ error: { code: 'invalid_body' } });
    expect(await writes()).toEqual(before);
    expect(errors).toEqual([]);
  });

  test('deeply nested relations in iam PUT /projects/:id/grants/:user are a 400, not a 500', async () => {
    errors.length = 0;
    for (const relations of [deep, `[${deep}]`, `["viewer",${deep}]`]) {
      const reply = await post(iam.url, `/projects/${projectId}/grants/bob`, `{"relations":${relations}}`, 'PUT');
      expect(reply.status, relations.slice(0, 20)).toBe(400);
      const body = (await reply.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('invalid_body');
      expect(body.error.message.length).toBeLessThan(1_000);
    }
    expect((await sql<{ n: string }>`select count(*) as n from iam.project_grants`.execute(t.db)).rows[0]?.n).toBe('0');
    expect(errors).toEqual([]);
  });
});

describe('other malformed requests: each a clear 4xx', () => {
  const alice = { 'x-user-id': 'alice', 'content-type': 'application/json' };

  test('bodies: 5 MB at once and 1 MB chunked are 413; an array, a __proto__ key, a BOM, an empty body are 400', async () => {
    const before = await writes();
    expect(
      (await fetch(`${vpc.url}/vpcs`, { method: 'POST', headers: alice, body: 'x'.repeat(5_000_000) })).status,
    ).toBe(413);
    const chunked = await raw(
      vpc.port,
      'POST /vpcs HTTP/1.1\r\nHost: x\r\nx-user-id: alice\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n',
      Buffer.from(`100000\r\n${'x'.repeat(0x100000)}\r\n0\r\n\r\n`),
    );
    expect(chunked).toMatch(/^HTTP\/1\.1 413 /);
    for (const body of [
      '[]',
      'null',
      '"vpc"',
      '\uFEFF{}',
      '',
      `{"__proto__":{"x":1},"project_id":"${projectId}","name":"a","cidr_block":"10.0.0.0/16"}`,
    ]) {
      const reply = await fetch(`${vpc.url}/vpcs`, { method: 'POST', headers: alice, body });
      expect(reply.status, JSON.stringify(body)).toBe(400);
    }
    expect(await writes()).toEqual(before);
  });

  test('NUL and non-ASCII in names, ids, queries and the caller header: 400, 404 or 401, never sent to Postgres', async () => {
    errors.length = 0;
    const api = serviceClient(vpc.url, 'alice');
    for (const name of ['a\u0000b', 'ünï', '\u{1F600}', 'a'.repeat(64)]) {
      expect((await api.post('/vpcs', { project_id: projectId, name, cidr_block: '10.0.0.0/16' })).status).toBe(400);
    }
    expect((await api.post('/vpcs', { project_id: 'p\u0000', name: 'a', cidr_block: '10.0.0.0/16' })).status).toBe(400);
    for (const id of ['%00', '%ZZ', '%F0%9F%98%80', 'a%2Fb', 'x'.repeat(200)])
      expect((await api.get(`/vpcs/${id}`)).status, id).toBe(404);
    expect((await api.get('/vpcs?project_id=%00')).status).toBe(400);
    expect((await api.get('/vpcs?project_id=')).status).toBe(400);
    expect(
      (await serviceClient(iam.url, 'alice').put(`/projects/${projectId}/grants/b%00b`, { relations: [] })).status,
    ).toBe(400);
    const latin1Caller = await raw(
      vpc.port,
      'GET /vpcs HTTP/1.1\r\nHost: x\r\nx-user-id: al\xefce\r\nConnection: close\r\n\r\n',
    );
    expect(latin1Caller).toMatch(/^HTTP\/1\.1 401 /);
    expect(errors).toEqual([]);
  });

  test('methods: HEAD, OPTIONS, PATCH on a route are 405 with allow; a lower-case method is refused by the parser (400)', async () => {
    for (const method of ['HEAD', 'OPTIONS', 'PATCH']) {
      const reply = await fetch(`${vpc.url}/vpcs`, { method, headers: alice });
      expect(reply.status, method).toBe(405);
      expect(reply.headers.get('allow')).toBe('POST, GET');
    }
    expect(await raw(vpc.port, 'get /vpcs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).toMatch(
      /^HTTP\/1\.1 400 /,
    );
  });
});

describe('a client that goes away mid-body', () => {
  test("nothing is written, and nothing is logged as a database outage or as the service's failure", async () => {
    const before = await writes();
    warnings.length = 0;
    errors.length = 0;
    for (const [port, path] of [
      [vpc.port, '/vpcs'],
      [iam.port, '/organizations'],
    ] as const) {
      await new Promise<void>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nx-user-id: alice\r\nContent-Length: 1000\r\n\r\n{"name":`);
          setTimeout(() => {
            socket.destroy();
            resolve();
          }, 100);
        });
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    // It was logged at WARN as "POST /vpcs: the database is unavailable: aborted" (node's ECONNRESET
    // read as a lost Postgres connection): an alert on database outages fired on every dropped upload.
    expect(warnings).toEqual([]);
    expect(errors).toEqual([]);
    expect(await writes()).toEqual(before);
    expect((await serviceClient(vpc.url).get('/readyz')).status).toBe(200);
  });
});
