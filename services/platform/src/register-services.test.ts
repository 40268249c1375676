import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OpenFgaClient, type TupleKey } from '@openfga/sdk';
import { outboxStats } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { serviceClient, startService, type RegisterServiceDefinition, type RunningService } from '@outbox/service-kit';
import { recordingLogger, serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { registerServices } from './index.js';

// One suite, run over the five register services: what differs between them is data (table, type,
// path, fields), so the behaviour is proved once per definition, not once per copy.
const t = useTestDatabase();
const fga = useOpenFgaStore();

/** A valid body of each service's own fields. */
const bodies: Record<string, Record<string, unknown>> = {
  vpc: { cidr_block: '10.0.0.0/16' },
  compute: { image: 'debian-12', machine_type: 'medium' },
  nlb: { port: 443 },
  storage: { versioning: true },
  registry: { format: 'helm' },
};

let client: OpenFgaClient;
beforeAll(async () => {
  client = new OpenFgaClient(openFgaClientConfig(fga.storeId, fga.authorizationModelId));
});

/** The tuples stored under exactly this key (`read` on the exact key: a check can be true through inheritance). */
async function stored(key: TupleKey): Promise<number> {
  const { tuples } = await client.read(key);
  return tuples.length;
}
const allowed = async (user: string, relation: string, object: string) =>
  (await client.check({ user, relation, object })).allowed === true;

describe.each(registerServices.map((d) => [d.name, d] as const))(
  '%s',
  (name, definition: RegisterServiceDefinition) => {
    const project = `p-${name}`;
    const path = definition.resourcePath;
    const table = definition.resourceTable.qualifiedName;
    let service: RunningService;
    const extra: RunningService[] = [];
    const start = async (overrides = {}) => {
      const s = await startService(definition, serviceOptionsFor(t, fga, overrides));
      extra.push(s);
      return s;
    };
    const count = async (from: string) =>
      Number((await sql<{ n: string }>`select count(*) as n from ${sql.raw(from)}`.execute(t.db)).rows[0]?.n);
    const outboxTable = tableNames(definition.outbox).table;

    beforeAll(async () => {
      // alice owns the project (so can_edit), carol views it; bob has nothing.
      await client.write({
        writes: [
          { user: 'user:alice', relation: 'owner', object: `project:${project}` },
          { user: 'user:carol', relation: 'viewer', object: `project:${project}` },
        ],
      });
      service = await start();
    });
    afterAll(async () => {
      for (const s of extra) await s.stop();
    });

    let id: string;
    let object: string;

    test('create: 201 once delivered; the owner is allowed and both tuples are stored under their exact keys', async () => {
      const reply = await serviceClient(service.url, 'alice').post<Record<string, unknown>>(path, {
        project_id: project,
        name: 'first',
        ...bodies[name],
      });
      expect(reply.status).toBe(201);
      expect(reply.body).toMatchObject({ project_id: project, name: 'first', created_by: 'alice', ...bodies[name] });
      id = reply.body.id as string;
      object = `${definition.fgaType}:${id}`;
      expect(await stored({ user: `project:${project}`, relation: 'project', object })).toBe(1);
      expect(await stored({ user: 'user:alice', relation: 'owner', object })).toBe(1);
      for (const relation of ['can_view', 'can_edit', 'can_delete'])
        expect(await allowed('user:alice', relation, object)).toBe(true);
      // A write-through answers on OpenFGA's word and commits sent_at a round trip later.
      await waitFor('the settle', async () => (await outboxStats(t.db, definition.outbox)).pending === 0);
    });

    test('get: the owner reads it, another user is refused (403), an unknown id is 404, no caller is 401', async () => {
      const api = serviceClient(service.url);
      expect(await api.as('alice').get(`${path}/${id}`)).toMatchObject({ status: 200, body: { id, name: 'first' } });
      expect(await api.as('carol').get(`${path}/${id}`)).toMatchObject({ status: 200 }); // project viewer: inherited
      expect(await api.as('bob').get(`${path}/${id}`)).toMatchObject({
        status: 403,
        body: { error: { code: 'forbidden' } },
      });
      expect(await api.as('alice').get(`${path}/00000000-0000-0000-0000-000000000000`)).toMatchObject({ status: 404 });
      expect(await api.get(`${path}/${id}`)).toMatchObject({
        status: 401,
        body: { error: { code: 'unauthenticated' } },
      });
    });

    test('list: what the caller may view, and nothing for a stranger', async () => {
      const api = serviceClient(service.url);
      const list = await api.as('alice').get<{ items: { id: string }[] }>(`${path}?project_id=${project}`);
      expect(list.status).toBe(200);
      expect(list.body.items.map((i) => i.id)).toEqual([id]);
      expect((await api.as('carol').get<{ items: unknown[] }>(path)).body.items).toHaveLength(1);
      expect((await api.as('bob').get<{ items: unknown[] }>(path)).body.items).toEqual([]);
    });

    test('a bad request is a 400 naming the problem, and writes nothing', async () => {
      const [rows, intents] = [await count(table), await count(outboxTable)];
      const api = serviceClient(service.url, 'alice');
      const missing = await api.post<{ error: { message: string } }>(path, { name: 'x' });
      expect(missing.status).toBe(400);
      expect(missing.body.error.message).toContain('project_id: required');
      const unknown = await api.post<{ error: { message: string } }>(path, {
        project_id: project,
        name: 'y',
        colour: 'blue',
        ...bodies[name],
      });
      expect(unknown.status).toBe(400);
      expect(unknown.body.error.message).toContain('colour: unknown field');
      expect((await api.post(path, { project_id: project, name: 'Not A Name', ...bodies[name] })).status).toBe(400);
      const notJson = await fetch(new URL(path, service.url), {
        method: 'POST',
        headers: { 'x-user-id': 'alice', 'content-type': 'application/json' },
        body: '{',
      });
      expect(notJson.status).toBe(400);
      expect((await api.post(path, { project_id: project, name: 'first', ...bodies[name] })).status).toBe(409); // name taken in the project
      expect([await count(table), await count(outboxTable)]).toEqual([rows, intents]);
    });

    test('creating needs can_edit on the project: 403 and nothing written', async () => {
      const [rows, intents] = [await count(table), await count(outboxTable)];
      const reply = await serviceClient(service.url, 'bob').post(path, {
        project_id: project,
        name: 'second',
        ...bodies[name],
      });
      expect(reply).toMatchObject({ status: 403, body: { error: { code: 'forbidden' } } });
      expect([await count(table), await count(outboxTable)]).toEqual([rows, intents]);
    });

    test('delete: needs can_delete; then the row and the tuples are gone and access with them', async () => {
      const api = serviceClient(service.url);
      expect((await api.as('carol').delete(`${path}/${id}`)).status).toBe(403);
      expect((await api.as('alice').delete(`${path}/${id}`)).status).toBe(204);
      expect(await stored({ user: `project:${project}`, relation: 'project', object })).toBe(0);
      expect(await stored({ user: 'user:alice', relation: 'owner', object })).toBe(0);
      expect(await allowed('user:alice', 'can_view', object)).toBe(false);
      expect(await allowed('user:carol', 'can_view', object)).toBe(false);
      expect((await api.as('alice').get(`${path}/${id}`)).status).toBe(404);
      expect((await api.as('alice').delete(`${path}/${id}`)).status).toBe(404);
    });

    test('its API is published at /openapi.json: its paths, and its body schema with its own fields', async () => {
      const { status, body } = await serviceClient(service.url).get<{
        info: { title: string };
        paths: Record<string, Record<string, { requestBody?: unknown }>>;
      }>('/openapi.json');
      expect(status).toBe(200);
      expect(body.info.title).toBe(`${name} service`);
      expect(Object.keys(body.paths).sort()).toEqual(['/healthz', '/readyz', path, `${path}/{id}`].sort());
      expect(Object.keys(body.paths[path] ?? {}).sort()).toEqual(['get', 'post']);
      expect(Object.keys(body.paths[`${path}/{id}`] ?? {}).sort()).toEqual(['delete', 'get']);
      for (const field of ['project_id', 'name', ...Object.keys(definition.resourceTable.columns)])
        expect(JSON.stringify(body.paths[path]?.post?.requestBody)).toContain(`"${field}"`);
    });

    test('killed between commit and delivery: nothing is lost, the next instance delivers it', async () => {
      await service.stop(); // only the instances of this test touch the outbox from here on
      // An instance that commits but never delivers: no flush, no drainer. Its answer says so.
      const crashed = await start({ flushOnWrite: false, runDrainer: false, runReconciler: false });
      const reply = await serviceClient(crashed.url, 'alice').post<{ id: string; note: string }>(path, {
        project_id: project,
        name: 'survivor',
        ...bodies[name],
      });
      expect(reply.status).toBe(202);
      expect(reply.body.note).toMatch(/flush on write is off/);
      await crashed.stop();
      const survivor = `${definition.fgaType}:${reply.body.id}`;
      expect(await stored({ user: 'user:alice', relation: 'owner', object: survivor })).toBe(0);
      expect(await outboxStats(t.db, definition.outbox)).toMatchObject({ deliverable: 1 });

      const next = await start();
      // The sink writes to OpenFGA before the drainer commits sent_at: wait for the commit.
      await waitFor(
        'the restarted service to deliver',
        async () => (await outboxStats(t.db, definition.outbox)).pending === 0,
      );
      expect(await stored({ user: 'user:alice', relation: 'owner', object: survivor })).toBe(1);
      expect(await stored({ user: `project:${project}`, relation: 'project', object: survivor })).toBe(1);
      expect((await serviceClient(next.url, 'alice').get(`${path}/${reply.body.id}`)).status).toBe(200);
    });
  },
);

test('list: a caller who may view more than one OpenFGA page of resources (1,000) gets every one', async () => {
  const definition = registerServices.find((d) => d.name === 'vpc') as RegisterServiceDefinition;
  const project = 'p-many';
  const ids = Array.from({ length: 1_050 }, (_, i) => `many-${String(i).padStart(4, '0')}`);
  // Rows and tuples written directly (creating through the API is proved above): dora views the
  // project, each resource belongs to it.
  await t.db
    .insertInto(definition.resourceTable.qualifiedName)
    .values(ids.map((id) => ({ id, project_id: project, name: id, created_by: 'alice', ...bodies.vpc })))
    .execute();
  const writes = [
    { user: 'user:dora', relation: 'viewer', object: `project:${project}` },
    ...ids.map((id) => ({ user: `project:${project}`, relation: 'project', object: `${definition.fgaType}:${id}` })),
  ];
  await client.write({ writes }, { transaction: { disable: true, maxPerChunk: 100 } });
  const service = await startService(
    definition,
    serviceOptionsFor(t, fga, { runDrainer: false, runReconciler: false }),
  );
  try {
    const api = serviceClient(service.url);
    const list = await api
      .as('dora')
      .get<{ items: { id: string }[] }>(`${definition.resourcePath}?project_id=${project}`);
    expect(list.status).toBe(200);
    expect(list.body.items.map((i) => i.id).sort()).toEqual(ids);
    expect((await api.as('bob').get<{ items: unknown[] }>(definition.resourcePath)).body.items).toEqual([]);
  } finally {
    await service.stop();
  }
});

test('a mistyped OpenFGA store or model id stops the service at start; an OpenFGA that does not answer does not', async () => {
  const definition = registerServices.find((d) => d.name === 'vpc') as RegisterServiceDefinition;
  const options = serviceOptionsFor(t, fga);
  const missing = '01JBZZZZZZZZZZZZZZZZZZZZZZ';
  await expect(
    startService(definition, { ...options, openfga: { ...options.openfga, storeId: missing } }),
  ).rejects.toMatchObject({
    name: 'ServiceConfigError',
    field: 'openfga.storeId',
    message: expect.stringContaining(missing),
  });
  await expect(
    startService(definition, { ...options, openfga: { ...options.openfga, authorizationModelId: missing } }),
  ).rejects.toMatchObject({
    name: 'ServiceConfigError',
    field: 'openfga.authorizationModelId',
  });
  // Something that is not OpenFGA answering 200 to everything (a wrong port of a web app): refused
  // at start, because the drainer's sink would count its 200s as delivered.
  const catchAll = createServer((request, response) => {
    request.resume();
    request.on('end', () =>
      response.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><html><body>app</body></html>'),
    );
  });
  await new Promise<void>((resolve) => catchAll.listen(0, '127.0.0.1', resolve));
  try {
    const wrongUrl = `http://127.0.0.1:${(catchAll.address() as AddressInfo).port}`;
    await expect(
      startService(definition, { ...options, openfga: { ...options.openfga, apiUrl: wrongUrl } }),
    ).rejects.toMatchObject({
      name: 'ServiceConfigError',
      field: 'openfga.apiUrl',
      message: expect.stringContaining(wrongUrl),
    });
  } finally {
    catchAll.closeAllConnections();
    await new Promise<void>((resolve) => catchAll.close(() => resolve()));
  }
  // Down at start: the service still takes writes (that is what the outbox is for), and says why it could not check.
  const logger = recordingLogger();
  const down = await startService(definition, {
    ...options,
    logger,
    runDrainer: false,
    runReconciler: false,
    openfga: { ...options.openfga, apiUrl: 'http://127.0.0.1:9' },
  });
  try {
    expect(
      logger.entries.some((e) => e.level === 'warn' && e.message.includes('could not check the OpenFGA store')),
    ).toBe(true);
    expect((await serviceClient(down.url).get('/healthz')).status).toBe(200);
  } finally {
    await down.stop();
  }
});
