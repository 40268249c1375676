import { OpenFgaClient, type TupleKey } from '@openfga/sdk';
import { outboxStats } from '@outbox/outbox';
import {
  serviceClient,
  startService,
  startServices,
  type RunningService,
  type RunningServices,
  type ServiceClient,
} from '@outbox/service-kit';
import { serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { vpcOutbox, iamOutbox } from '@outbox/migrations';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { iamService, vpcService } from './index.js';

// Authorization and consistency as API users hit them, iam and vpc together on a real Postgres and
// OpenFGA. They pin what a caller can and cannot reach.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let client: OpenFgaClient;
let platform: RunningServices<'iam' | 'vpc'>;
let projectId: string;
let otherProjectId: string;
let organizationId: string;
const iamAs = (user: string) => serviceClient(platform.urls.iam, user);
const vpcAs = (user: string) => serviceClient(platform.urls.vpc, user);
const stored = async (key: TupleKey) => (await client.read(key)).tuples.length;
/** Every tuple stored on `object` (exact reads, not checks). */
const tuplesOn = async (object: string) =>
  (await client.read({ object })).tuples.map((x) => `${x.key.user} ${x.key.relation}`).sort();
const grant = (as: ServiceClient, user: string, relations: string[], project = projectId) =>
  as.put<Record<string, unknown>>(`/projects/${project}/grants/${user}`, { relations });
const listIds = async (as: ServiceClient) =>
  (await as.get<{ items: { id: string }[] }>('/vpcs')).body.items.map((i) => i.id).sort();
let n = 0;
const vpcBody = (project = projectId) => ({ project_id: project, name: `net-${(n += 1)}`, cidr_block: '10.0.0.0/16' });

beforeAll(async () => {
  client = new OpenFgaClient(openFgaClientConfig(fga.storeId, fga.authorizationModelId));
  platform = await startServices([iamService, vpcService], serviceOptionsFor(t, fga));
  const org = await iamAs('alice').post<{ id: string }>('/organizations', { name: 'acme' });
  organizationId = org.body.id;
  const project = await iamAs('alice').post<{ id: string }>('/projects', {
    organization_id: organizationId,
    name: 'shop',
  });
  const other = await iamAs('alice').post<{ id: string }>('/projects', {
    organization_id: organizationId,
    name: 'other',
  });
  expect([org.status, project.status, other.status]).toEqual([201, 201, 201]);
  projectId = project.body.id;
  otherProjectId = other.body.id;
});
afterAll(async () => {
  await platform?.stop();
});

describe('grants: who may grant what', () => {
  test('an editor cannot grant (not even to themselves), cannot reach owner; a grant on an organization id or unknown project is 404', async () => {
    expect((await grant(iamAs('alice'), 'bob', ['editor'])).status).toBe(200);
    expect((await grant(iamAs('bob'), 'bob', ['owner'])).status).toBe(403);
    expect((await grant(iamAs('bob'), 'carol', ['viewer'])).status).toBe(403);
    expect((await grant(iamAs('bob'), 'alice', [])).status).toBe(403); // nor revoke the owner
    expect(await stored({ user: 'user:bob', relation: 'owner', object: `project:${projectId}` })).toBe(0);
    expect((await grant(iamAs('alice'), 'bob', ['viewer'], organizationId)).status).toBe(404);
    expect((await grant(iamAs('alice'), 'bob', ['viewer'], '00000000-0000-0000-0000-000000000000')).status).toBe(404);
    // An owner of one project is nothing on another.
    expect((await grant(iamAs('alice'), 'dave', ['owner'])).status).toBe(200);
    expect((await grant(iamAs('dave'), 'dave', ['viewer'], otherProjectId)).status).toBe(403);
    expect((await iamAs('dave').get(`/organizations/${organizationId}`)).status).toBe(403);
    expect((await iamAs('dave').post('/projects', { organization_id: organizationId, name: 'mine' })).status).toBe(403);
    expect((await grant(iamAs('alice'), 'dave', [])).status).toBe(200);
    expect((await grant(iamAs('alice'), 'bob', [])).status).toBe(200);
  });
});

describe('losing access through a revoke', () => {
  test('the revoked editor keeps what they created (documented), loses everything else at once: get, list, delete, create', async () => {
    expect((await grant(iamAs('alice'), 'bob', ['editor'])).status).toBe(200);
    const bobs = await vpcAs('bob').post<{ id: string }>('/vpcs', vpcBody());
    const alices = await vpcAs('alice').post<{ id: string }>('/vpcs', vpcBody());
    expect([bobs.status, alices.status]).toEqual([201, 201]);
    expect(await listIds(vpcAs('bob'))).toEqual([bobs.body.id, alices.body.id].sort());
    expect((await vpcAs('bob').delete(`/vpcs/${alices.body.id}`)).status).toBe(403); // an editor is not an owner

    expect((await grant(iamAs('alice'), 'bob', [])).status).toBe(200);
    // Read-your-writes of the revoke, across services: no wait.
    expect((await vpcAs('bob').get(`/vpcs/${alices.body.id}`)).status).toBe(403);
    expect(await listIds(vpcAs('bob'))).toEqual([bobs.body.id]);
    expect((await vpcAs('bob').delete(`/vpcs/${alices.body.id}`)).status).toBe(403);
    expect((await vpcAs('bob').post('/vpcs', vpcBody())).status).toBe(403);
    expect((await vpcAs('bob').get(`/vpcs/${bobs.body.id}`)).status).toBe(200);
    expect((await vpcAs('bob').delete(`/vpcs/${bobs.body.id}`)).status).toBe(204);
    expect(await tuplesOn(`vpc:${bobs.body.id}`)).toEqual([]);
  });
});

describe('read-your-writes', () => {
  test('20 creates in parallel: each 201 is at once readable and listed by its creator; each 204 at once unreadable and unlisted, its tuples gone', async () => {
    const created = await Promise.all(
      Array.from({ length: 20 }, () => vpcAs('alice').post<{ id: string }>('/vpcs', vpcBody())),
    );
    expect(created.map((c) => c.status)).toEqual(Array(20).fill(201));
    const gets = await Promise.all(created.map((c) => vpcAs('alice').get(`/vpcs/${c.body.id}`)));
    expect(gets.map((g) => g.status)).toEqual(Array(20).fill(200));
    const listed = await listIds(vpcAs('alice'));
    for (const c of created) expect(listed).toContain(c.body.id);
    const deleted = await Promise.all(created.map((c) => vpcAs('alice').delete(`/vpcs/${c.body.id}`)));
    expect(deleted.map((d) => d.status)).toEqual(Array(20).fill(204));
    const after = await listIds(vpcAs('alice'));
    for (const c of created) {
      expect(after).not.toContain(c.body.id);
      expect(await tuplesOn(`vpc:${c.body.id}`)).toEqual([]);
    }
  });

  test('a grant is at once usable in another service; its revoke at once is not', async () => {
    const vpc = await vpcAs('alice').post<{ id: string }>('/vpcs', vpcBody());
    expect((await vpcAs('erin').get(`/vpcs/${vpc.body.id}`)).status).toBe(403);
    expect((await grant(iamAs('alice'), 'erin', ['viewer'])).status).toBe(200);
    expect((await vpcAs('erin').get(`/vpcs/${vpc.body.id}`)).status).toBe(200);
    expect(await listIds(vpcAs('erin'))).toContain(vpc.body.id);
    expect((await grant(iamAs('alice'), 'erin', [])).status).toBe(200);
    expect((await vpcAs('erin').get(`/vpcs/${vpc.body.id}`)).status).toBe(403);
    expect(await listIds(vpcAs('erin'))).toEqual([]);
  });
});

describe('races', () => {
  test('GETs racing a DELETE answer 200, 403 or 404, never 500; after it, nothing of the resource is left', async () => {
    for (let round = 0; round < 5; round += 1) {
      const vpc = await vpcAs('alice').post<{ id: string }>('/vpcs', vpcBody());
      const [first, ...rest] = await Promise.all([
        vpcAs('alice').delete(`/vpcs/${vpc.body.id}`),
        ...Array.from({ length: 8 }, () => vpcAs('alice').get(`/vpcs/${vpc.body.id}`)),
        vpcAs('alice').delete(`/vpcs/${vpc.body.id}`),
      ]);
      const second = rest.pop();
      // Either DELETE may reach the row first: one of them deletes it, the other finds it gone (404),
      // or its access already revoked (403).
      const deletes = [first?.status, second?.status];
      expect(deletes).toContain(204);
      for (const status of deletes) expect([204, 403, 404]).toContain(status);
      for (const g of rest) expect([200, 403, 404]).toContain(g.status);
      expect(await tuplesOn(`vpc:${vpc.body.id}`)).toEqual([]);
    }
  });

  test('create then delete at once, without flush (202 twice), 15 resources concurrently: no tuple survives', async () => {
    const quick = await startService(vpcService, serviceOptionsFor(t, fga, { flushOnWrite: false }));
    try {
      const api = serviceClient(quick.url, 'alice');
      const ids = await Promise.all(
        Array.from({ length: 15 }, async () => {
          const created = await api.post<{ id: string }>('/vpcs', vpcBody());
          expect(created.status).toBe(202);
          const deleted = await api.delete(`/vpcs/${created.body.id}`); // the project owner: allowed before delivery
          expect(deleted.status).toBe(202);
          return created.body.id;
        }),
      );
      await waitFor(
        'both intents of every resource to be delivered',
        async () => (await outboxStats(t.db, vpcOutbox)).pending === 0,
      );
      for (const id of ids) expect(await tuplesOn(`vpc:${id}`)).toEqual([]);
    } finally {
      await quick.stop();
    }
  });

  test('iam: concurrent grants and revokes of one grant, with flush and drainers running: every PUT answers, OpenFGA ends equal to the table', async () => {
    const second = await startService(iamService, serviceOptionsFor(t, fga)); // two iam instances, two drainers
    try {
      const sets = [['viewer'], [], ['editor'], ['owner', 'viewer'], []];
      for (let round = 0; round < 6; round += 1) {
        const replies = await Promise.all(
          sets.map((relations, i) =>
            grant(i % 2 === 0 ? iamAs('alice') : serviceClient(second.url, 'alice'), 'ivan', relations),
          ),
        );
        for (const r of replies) expect([200, 202]).toContain(r.status);
      }
      await waitFor(
        'the grant intents to be delivered',
        async () => (await outboxStats(t.db, iamOutbox)).pending === 0,
      );
      const row = await sql<{
        relations: string[];
      }>`select relations from iam.project_grants where project_id = ${projectId} and user_id = 'ivan'`.execute(t.db);
      const table = [...(row.rows[0]?.relations ?? [])].sort();
      const { tuples } = await client.read({ user: 'user:ivan', object: `project:${projectId}` });
      expect(tuples.map((x) => x.key.relation).sort()).toEqual(table);
    } finally {
      await second.stop();
    }
  });
});

describe('a register intent OpenFGA refused (poisoned)', () => {
  // From here on no drainer runs on the vpc outbox but the ones these tests start: `quiet` commits
  // without delivering, so an intent can be poisoned before anything delivers it.
  let quiet: RunningService;
  beforeAll(async () => {
    await platform.services.vpc.stop();
    quiet = await startService(
      vpcService,
      serviceOptionsFor(t, fga, { flushOnWrite: false, runDrainer: false, runReconciler: false }),
    );
  });
  afterAll(async () => {
    await quiet?.stop();
  });
  const poisonLatest = async (id: string) => {
    await sql`update vpc.fga_register_outbox set attempt_count = ${vpcOutbox.maxAttempts}, last_error = 'simulated: refused', is_head = false
              where id = (select max(id) from vpc.fga_register_outbox where resource_id = ${`vpc:${id}`})`.execute(
      t.db,
    );
  };

  test('deleting it (the project owner may): 204, the poisoned registration stays parked, no tuple ever appears', async () => {
    const created = await serviceClient(quiet.url, 'alice').post<{ id: string }>('/vpcs', vpcBody());
    expect(created.status).toBe(202);
    await poisonLatest(created.body.id);
    const object = `vpc:${created.body.id}`;
    const normal = await startService(vpcService, serviceOptionsFor(t, fga, { runReconciler: false }));
    try {
      const api = serviceClient(normal.url, 'alice');
      expect((await api.get(`/vpcs/${created.body.id}`)).status).toBe(403); // not reachable: nothing in OpenFGA
      expect((await api.delete(`/vpcs/${created.body.id}`)).status).toBe(204); // the project owner, through the row's project
      const redrive = await normal.outbox.redrive();
      expect(redrive.revived).toEqual([]);
      expect(redrive.superseded).toHaveLength(1);
      await normal.outbox.drainOnce();
      expect(await tuplesOn(object)).toEqual([]);
    } finally {
      await normal.stop();
    }
  });

  test('poisoned, then revived before the delete is delivered: delivered in order, no tuple survives', async () => {
    const created = await serviceClient(quiet.url, 'alice').post<{ id: string }>('/vpcs', vpcBody());
    await poisonLatest(created.body.id);
    expect((await serviceClient(quiet.url, 'alice').delete(`/vpcs/${created.body.id}`)).status).toBe(202); // committed, not delivered
    const redrive = await quiet.outbox.redrive(); // the register row has no delivered successor yet: revived
    expect(redrive.revived).toHaveLength(1);
    await waitFor('both intents delivered', async () => {
      await quiet.outbox.drainOnce();
      return (await outboxStats(t.db, vpcOutbox)).deliverable === 0; // the first test's parked row stays pending
    });
    expect(await tuplesOn(`vpc:${created.body.id}`)).toEqual([]);
  });
});
