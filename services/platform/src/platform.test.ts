import { serviceClient } from '@outbox/service-kit';
import { serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startAllServices, type RunningPlatform } from './index.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
let platform: RunningPlatform;

beforeAll(async () => {
  platform = await startAllServices(serviceOptionsFor(t, fga));
});
afterAll(async () => {
  await platform?.stop();
});

test('all six run side by side; access granted in iam reaches resources of every service through the model', async () => {
  expect(Object.keys(platform.urls).sort()).toEqual(['compute', 'iam', 'nlb', 'registry', 'storage', 'vpc']);
  const iam = serviceClient(platform.urls.iam, 'alice');
  const org = await iam.post<{ id: string }>('/organizations', { name: 'acme' });
  const project = await iam.post<{ id: string }>('/projects', { organization_id: org.body.id, name: 'shop' });
  expect([org.status, project.status]).toEqual([201, 201]);

  // alice administers the organization, so she owns the project, so she may create in it.
  const bucket = await serviceClient(platform.urls.storage, 'alice').post<{ id: string }>('/buckets', {
    project_id: project.body.id,
    name: 'assets',
  });
  const vpc = await serviceClient(platform.urls.vpc, 'alice').post<{ id: string }>('/vpcs', {
    project_id: project.body.id,
    name: 'net',
    cidr_block: '10.0.0.0/16',
  });
  expect([bucket.status, vpc.status]).toEqual([201, 201]);

  const bob = serviceClient(platform.urls.storage, 'bob');
  expect((await bob.get(`/buckets/${bucket.body.id}`)).status).toBe(403);
  expect((await iam.put(`/projects/${project.body.id}/grants/bob`, { relations: ['viewer'] })).status).toBe(200);
  expect((await bob.get(`/buckets/${bucket.body.id}`)).status).toBe(200);
  expect((await bob.as('bob').delete(`/buckets/${bucket.body.id}`)).status).toBe(403); // a viewer may not delete
  expect((await serviceClient(platform.urls.vpc, 'bob').get<{ items: unknown[] }>('/vpcs')).body.items).toHaveLength(1);
  expect((await iam.put(`/projects/${project.body.id}/grants/bob`, { relations: [] })).status).toBe(200);
  expect((await bob.get(`/buckets/${bucket.body.id}`)).status).toBe(403);

  // A write-through answers on OpenFGA's word and commits sent_at a round trip later: wait for it.
  await waitFor('the last settle', async () => (await platform.stats()).storage.pending === 0);
  const stats = await platform.stats();
  for (const name of ['iam', 'vpc', 'storage'] as const) expect(stats[name]).toMatchObject({ pending: 0, poisoned: 0 });
  expect((await platform.services.vpc.outbox.redrive()).revived).toEqual([]);
});
