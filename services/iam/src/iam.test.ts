import { OpenFgaClient, type TupleKey } from '@openfga/sdk';
import { grantTupleKey, iamOutbox } from '@outbox/migrations';
import { outboxStats } from '@outbox/outbox';
import { serviceClient, startService, type RunningService, type ServiceClient } from '@outbox/service-kit';
import { recordingLogger, serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { iamService } from './index.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();

let client: OpenFgaClient;
let service: RunningService;
let alice: ServiceClient;
let bob: ServiceClient;
let organizationId: string;
let projectId: string;

const stored = async (key: TupleKey) => (await client.read(key)).tuples.length;
const allowed = async (user: string, relation: string, object: string) =>
  (await client.check({ user, relation, object })).allowed === true;
/** The relations `user` holds on the project as stored tuples (exact reads, not checks). */
async function storedRelations(user: string): Promise<string[]> {
  const { tuples } = await client.read({ user: `user:${user}`, object: `project:${projectId}` });
  return tuples.map((x) => x.key.relation).sort();
}

beforeAll(async () => {
  client = new OpenFgaClient(openFgaClientConfig(fga.storeId, fga.authorizationModelId));
  service = await startService(iamService, serviceOptionsFor(t, fga));
  alice = serviceClient(service.url, 'alice');
  bob = alice.as('bob');
});
afterAll(async () => {
  await service.stop();
});

describe('organizations and projects', () => {
  test('creating an organization makes the caller its owner', async () => {
    const created = await alice.post<{ id: string }>('/organizations', { name: 'acme' });
    expect(created.status).toBe(201);
    organizationId = created.body.id;
    expect(await stored({ user: 'user:alice', relation: 'owner', object: `organization:${organizationId}` })).toBe(1);
    expect(await alice.get(`/organizations/${organizationId}`)).toMatchObject({
      status: 200,
      body: { name: 'acme', created_by: 'alice' },
    });
    expect((await bob.get(`/organizations/${organizationId}`)).status).toBe(403);
    expect((await alice.get('/organizations/nope')).status).toBe(404);
    expect((await alice.post('/organizations', { name: 'Bad Name' })).status).toBe(400);
  });

  test('only an admin of the organization creates projects in it; its admins own them through the model', async () => {
    expect((await bob.post('/projects', { organization_id: organizationId, name: 'web' })).status).toBe(403);
    expect((await alice.post('/projects', { organization_id: 'missing', name: 'web' })).status).toBe(404);
    const created = await alice.post<{ id: string; organization_id: string }>('/projects', {
      organization_id: organizationId,
      name: 'web',
    });
    expect(created.status).toBe(201);
    projectId = created.body.id;
    expect(
      await stored({
        user: `organization:${organizationId}`,
        relation: 'organization',
        object: `project:${projectId}`,
      }),
    ).toBe(1);
    expect(await allowed('user:alice', 'owner', `project:${projectId}`)).toBe(true);
    expect((await alice.get(`/projects/${projectId}`)).status).toBe(200);
    expect((await bob.get(`/projects/${projectId}`)).status).toBe(403);
    expect((await alice.post('/projects', { organization_id: organizationId, name: 'web' })).status).toBe(409);
  });
});

describe("grants: PUT sets a user's relation set on a project", () => {
  const grant = (as: ServiceClient, user: string, relations: unknown) =>
    as.put<Record<string, unknown>>(`/projects/${projectId}/grants/${user}`, { relations });

  test('grant, change and revoke: checks and stored tuples follow the set', async () => {
    const viewer = await grant(alice, 'bob', ['viewer']);
    expect(viewer).toMatchObject({
      status: 200,
      body: { relations: ['viewer'], previous: [], written: ['viewer'], deleted: ['owner', 'editor'], changed: true },
    });
    expect(await storedRelations('bob')).toEqual(['viewer']);
    expect(await allowed('user:bob', 'can_view', `project:${projectId}`)).toBe(true);
    expect(await allowed('user:bob', 'can_edit', `project:${projectId}`)).toBe(false);
    expect((await bob.get(`/projects/${projectId}`)).status).toBe(200);

    const editor = await grant(alice, 'bob', ['editor']);
    expect(editor.body).toMatchObject({
      relations: ['editor'],
      previous: ['viewer'],
      written: ['editor'],
      deleted: ['owner', 'viewer'],
    });
    expect(await storedRelations('bob')).toEqual(['editor']);
    expect(await allowed('user:bob', 'can_edit', `project:${projectId}`)).toBe(true);

    const revoked = await grant(alice, 'bob', []);
    expect(revoked.body).toMatchObject({
      relations: [],
      previous: ['editor'],
      written: [],
      deleted: ['owner', 'editor', 'viewer'],
    });
    expect(await storedRelations('bob')).toEqual([]);
    expect(await allowed('user:bob', 'can_view', `project:${projectId}`)).toBe(false);
    expect((await alice.get<{ items: unknown[] }>(`/projects/${projectId}/grants`)).body.items).toEqual([]);
  });

  test('only an owner grants; a granted owner can grant in turn', async () => {
    expect((await grant(bob, 'bob', ['owner'])).status).toBe(403);
    expect((await grant(alice, 'bob', ['owner', 'viewer'])).status).toBe(200);
    expect((await grant(bob, 'carol', ['viewer'])).status).toBe(200);
    expect(await allowed('user:carol', 'can_view', `project:${projectId}`)).toBe(true);
    const listed = await bob.get<{ items: { user_id: string; relations: string[] }[] }>(
      `/projects/${projectId}/grants`,
    );
    expect(listed.body.items.map((i) => [i.user_id, i.relations])).toEqual([
      ['bob', ['owner', 'viewer']],
      ['carol', ['viewer']],
    ]);
  });

  test('a bad set is a 400 and writes nothing', async () => {
    // The last test's write-through commits sent_at a round trip after its answer.
    await waitFor('the last settle', async () => (await outboxStats(t.db, iamOutbox)).pending === 0);
    const before = await outboxStats(t.db, iamOutbox);
    const intents = async () =>
      Number((await sql<{ n: string }>`select count(*) as n from iam.fga_outbox`.execute(t.db)).rows[0]?.n);
    const count = await intents();
    for (const relations of [['admin'], ['viewer', 'viewer'], 'viewer', undefined]) {
      const reply = await grant(alice, 'carol', relations);
      expect(reply.status).toBe(400);
    }
    expect((await alice.put(`/projects/${projectId}/grants/carol`, { relations: [], extra: 1 })).status).toBe(400);
    expect((await alice.put(`/projects/${projectId}/grants/no%20spaces`, { relations: [] })).status).toBe(400);
    expect(await intents()).toBe(count);
    expect(await outboxStats(t.db, iamOutbox)).toEqual(before);
    expect(await storedRelations('carol')).toEqual(['viewer']);
  });

  test('PUT of an unchanged set enqueues the same whole state: writes the set, deletes every other grantable relation', async () => {
    const again = await grant(alice, 'carol', ['viewer']);
    expect(again.body).toMatchObject({ changed: false, written: ['viewer'], deleted: ['owner', 'editor'] });
    expect(await storedRelations('carol')).toEqual(['viewer']);
  });
});

describe('redrive with the coverage rule, on real rows', () => {
  // From here on only `quiet` touches the outbox: it commits without delivering (no flush, no
  // drainer), so the test decides what is delivered when, with real drain passes.
  let quiet: RunningService;
  let api: ServiceClient;
  const logger = recordingLogger();
  beforeAll(async () => {
    await service.stop();
    quiet = await startService(
      iamService,
      serviceOptionsFor(t, fga, { flushOnWrite: false, runDrainer: false, runReconciler: false, logger }),
    );
    api = serviceClient(quiet.url, 'alice');
  });
  afterAll(async () => {
    await quiet.stop();
  });

  const put = async (user: string, relations: string[]) => {
    const reply = await api.put(`/projects/${projectId}/grants/${user}`, { relations });
    expect(reply.status).toBe(202);
  };
  /** The id of the latest intent of `user`'s grant. */
  const latest = async (user: string) =>
    String(
      (
        await sql<{
          id: string;
        }>`select max(id) as id from iam.fga_outbox where tuple_key = ${grantTupleKey(`user:${user}`, `project:${projectId}`)}`.execute(
          t.db,
        )
      ).rows[0]?.id,
    );
  /** What the drainer does when OpenFGA refuses a row for good: spend its attempts, drop its head flag. */
  const poison = async (id: string) => {
    await sql`update iam.fga_outbox set attempt_count = ${iamOutbox.maxAttempts}, last_error = 'simulated: refused', is_head = false where id = ${id}`.execute(
      t.db,
    );
  };

  test('a delivered successor that re-determines the same relation parks the poisoned row (revoked stays revoked)', async () => {
    await put('dave', ['viewer']);
    const stale = await latest('dave');
    await poison(stale);
    await put('dave', []); // deletes viewer
    expect((await quiet.outbox.drainOnce()).delivered).toBe(1);

    const result = await quiet.outbox.redrive();
    expect(result.superseded.map((r) => r.id)).toContain(stale);
    expect(result.revived.map((r) => r.id)).not.toContain(stale);
    await quiet.outbox.drainOnce();
    expect(await storedRelations('dave')).toEqual([]);
    expect(logger.entries.some((e) => e.level === 'warn' && JSON.stringify(e.fields).includes(stale))).toBe(true);
  });

  test('a delivered successor that only adds a relation still re-determines the whole set: parked, nothing lost', async () => {
    await put('erin', ['viewer']);
    const stale = await latest('erin');
    await poison(stale);
    await put('erin', ['viewer', 'editor']); // the whole state: writes viewer and editor, deletes owner
    await quiet.outbox.drainOnce();
    expect(await storedRelations('erin')).toEqual(['editor', 'viewer']);

    const result = await quiet.outbox.redrive();
    expect(result.superseded.map((r) => r.id)).toContain(stale);
    expect(result.revived.map((r) => r.id)).not.toContain(stale);
    expect(await storedRelations('erin')).toEqual(['editor', 'viewer']);
    expect(await allowed('user:erin', 'can_view', `project:${projectId}`)).toBe(true);
  });

  test("a parked row's delete is not lost: revoking everything after a poisoned change leaves no access", async () => {
    await put('hank', ['viewer']);
    await quiet.outbox.drainOnce();
    expect(await storedRelations('hank')).toEqual(['viewer']);
    await put('hank', ['owner']); // would move viewer → owner
    const stale = await latest('hank');
    await poison(stale); // OpenFGA refused it: viewer is still stored, owner never written
    await put('hank', []); // revoke everything
    await quiet.outbox.drainOnce();

    const result = await quiet.outbox.redrive();
    expect(result.superseded.map((r) => r.id)).toContain(stale);
    await quiet.outbox.drainOnce();
    // A diff successor ({owner} → {}) would have deleted owner only and left the viewer tuple the
    // parked row was to delete: access the grants table no longer gives.
    expect(await storedRelations('hank')).toEqual([]);
    expect(await allowed('user:hank', 'can_view', `project:${projectId}`)).toBe(false);
  });

  test('after a poisoned change, the next PUT alone puts OpenFGA in line with the table', async () => {
    await put('frank', ['editor', 'viewer']);
    const stale = await latest('frank');
    await poison(stale);
    await put('frank', ['viewer']);
    await quiet.outbox.drainOnce();
    expect(await storedRelations('frank')).toEqual(['viewer']); // not only "editor deleted"

    const result = await quiet.outbox.redrive();
    expect(result.superseded.map((r) => r.id)).toContain(stale);
    await quiet.outbox.drainOnce();
    expect(await allowed('user:frank', 'can_edit', `project:${projectId}`)).toBe(false); // not resurrected
    expect(await storedRelations('frank')).toEqual(['viewer']);
    // The parked row stays as evidence until a human retires it.
    const retired = await quiet.outbox.reconciler.retire([stale], 'superseded by the next grant change');
    expect(retired.map((r) => r.id)).toEqual([stale]);
  });

  test('concurrent PUTs on one grant, revokes among them, all answer; the table and OpenFGA agree after', async () => {
    const statuses: number[] = [];
    for (let round = 0; round < 15; round += 1) {
      const replies = await Promise.all(
        [['viewer'], [], ['editor'], []].map((relations) =>
          api.put(`/projects/${projectId}/grants/ivan`, { relations }),
        ),
      );
      statuses.push(...replies.map((r) => r.status));
    }
    expect(new Set(statuses)).toEqual(new Set([202]));
    await quiet.outbox.drainOnce();
    const row = await sql<{
      relations: string[];
    }>`select relations from iam.project_grants where project_id = ${projectId} and user_id = 'ivan'`.execute(t.db);
    expect(await storedRelations('ivan')).toEqual([...(row.rows[0]?.relations ?? [])].sort());
  });

  test('onModelChanged re-drives at once and delivers what it revived', async () => {
    await put('gina', ['viewer']);
    const refused = await latest('gina');
    await poison(refused);
    const result = await quiet.onModelChanged();
    expect(result.revived.map((r) => r.id)).toEqual([refused]);
    // The sink writes to OpenFGA before the drainer commits sent_at: wait for the commit.
    await waitFor(
      'the revived grant to be delivered',
      async () => (await outboxStats(t.db, iamOutbox)).deliverable === 0,
    );
    expect(await storedRelations('gina')).toEqual(['viewer']);
  });
});
