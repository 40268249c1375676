import { mergeOutboxTokens } from '@outbox/outbox';
import { serviceClient, startServices, type RunningServices } from '@outbox/service-kit';
import { serviceOptionsFor } from '@outbox/service-kit/testing';
import {
  createOpenFgaStore,
  startNativeOpenFga,
  useOpenFgaStore,
  useTestDatabase,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { computeService, iamService, vpcService } from './index.js';

// Issue 31's scenario: a vpc created with flush off (202 + token), then an instance in it created
// through compute with the token. vpc runs no drainer here: its intents are delivered only when
// the test drains its outbox, so "not delivered yet" is a fact, not a race.
const t = useTestDatabase();
const shared = useOpenFgaStore(); // the test context's; the services use the private server below
const CACHE_TTL_MS = 60_000;
let server: OpenFgaServer;
let platform: RunningServices<'iam' | 'vpc' | 'compute'>;

beforeAll(async () => {
  server = await startNativeOpenFga({ datastore: 'memory', checkCacheTtlMs: CACHE_TTL_MS });
  const { storeId, authorizationModelId } = await createOpenFgaStore(server.apiUrl);
  platform = await startServices([iamService, vpcService, computeService], {
    ...serviceOptionsFor(t, shared, { flushOnWrite: false, checkCacheTtlMs: CACHE_TTL_MS, drainIntervalMs: 100 }),
    openfga: { apiUrl: server.apiUrl, storeId, authorizationModelId },
    overrides: { vpc: { runDrainer: false } },
  });
}, 60_000);
afterAll(async () => {
  await platform?.stop();
  await server?.stop();
});

test('an instance in a vpc answered 202: compute, given the vpc write token, waits for its delivery and allows the create; with only the project token it refuses', async () => {
  const iam = (token?: string) => serviceClient(platform.urls.iam, 'alice').after(token);
  const org = await iam().post<{ id: string }>('/organizations', { name: 'acme' });
  const project = await iam(org.token).post<{ id: string }>('/projects', { organization_id: org.body.id, name: 'web' });
  expect([org.status, project.status]).toEqual([202, 202]);
  const projectToken = mergeOutboxTokens(org.token as string, project.token as string);

  const network = await serviceClient(platform.urls.vpc, 'alice')
    .after(projectToken)
    .post<{ id: string }>('/vpcs', { project_id: project.body.id, name: 'net', cidr_block: '10.0.0.0/16' });
  expect(network.status).toBe(202);
  const instance = { project_id: project.body.id, name: 'web-1', image: 'debian-12', vpc_id: network.body.id };

  // The project's tuples are delivered (iam's drainer runs), the vpc's are not: refused, on the vpc.
  const early = await serviceClient(platform.urls.compute, 'alice').after(projectToken).post('/instances', instance);
  expect(early.status).toBe(403);
  expect(JSON.stringify(early.body)).toContain(`vpc:${network.body.id}`);

  // With the vpc's token compute waits; the vpc's intent is delivered while it does.
  let answered = false;
  const waiting = serviceClient(platform.urls.compute, 'alice')
    .after(mergeOutboxTokens(projectToken, network.token as string))
    .post<{ vpc_id: string }>('/instances', { ...instance, name: 'web-2' })
    .finally(() => (answered = true));
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect(answered).toBe(false);
  expect((await platform.services.vpc.outbox.drainOnce()).delivered).toBe(1);
  const created = await waiting;
  expect(created.status).toBe(202);
  expect(created.body.vpc_id).toBe(network.body.id);
  expect(created.token).toMatch(/^ot1\./);

  // An instance with no vpc is still what it was before vpc_id: the field is optional, null in the row.
  const plain = await serviceClient(platform.urls.compute, 'alice')
    .after(projectToken)
    .post<{ vpc_id: string | null }>('/instances', { project_id: project.body.id, name: 'batch', image: 'debian-12' });
  expect([plain.status, plain.body.vpc_id]).toEqual([202, null]);
}, 60_000);
