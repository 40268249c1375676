import { OpenFgaClient } from '@openfga/sdk';
import { serviceClient, startService, type RunningService } from '@outbox/service-kit';
import { recordingLogger, serviceOptionsFor } from '@outbox/service-kit/testing';
import {
  createOpenFgaStore,
  startNativeOpenFga,
  useOpenFgaStore,
  useTestDatabase,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { vpcService } from './index.js';

// An OpenFGA of this file's own, real, which the test freezes (SIGSTOP): what a network path that
// drops packets, or a hung server, looks like to the service. Its requests must answer 503
// `authorization_unavailable` promptly, as the README promises while OpenFGA is away.
const t = useTestDatabase();
const shared = useOpenFgaStore(); // only for the test context; the service uses the private server
let server: OpenFgaServer;
let service: RunningService;
let vpcId: string;

beforeAll(async () => {
  void shared;
  server = await startNativeOpenFga({ datastore: 'memory' });
  const { storeId, authorizationModelId } = await createOpenFgaStore(server.apiUrl);
  await new OpenFgaClient({ apiUrl: server.apiUrl, storeId, authorizationModelId }).write({
    writes: [{ user: 'user:alice', relation: 'owner', object: 'project:frozen' }],
  });
  const options = serviceOptionsFor(t, shared, { logger: recordingLogger(), shutdownTimeoutMs: 2_000 });
  service = await startService(vpcService, {
    ...options,
    openfga: { apiUrl: server.apiUrl, storeId, authorizationModelId },
  });
  const created = await serviceClient(service.url, 'alice').post<{ id: string }>('/vpcs', {
    project_id: 'frozen',
    name: 'net',
    cidr_block: '10.0.0.0/16',
  });
  expect(created.status).toBe(201);
  vpcId = created.body.id;
}, 60_000);
afterAll(async () => {
  if (server?.pid) process.kill(server.pid, 'SIGCONT');
  await service?.stop();
  await server?.stop();
});

test('OpenFGA frozen: GET, create and delete answer 503 authorization_unavailable within 6 s, a list within 11 s (each took 42 s)', async () => {
  const api = serviceClient(service.url, 'alice');
  expect((await api.get(`/vpcs/${vpcId}`)).status).toBe(200);
  process.kill(server.pid as number, 'SIGSTOP');
  try {
    const timed = async (what: string, call: () => Promise<{ status: number; body: unknown }>) => {
      const started = Date.now();
      const reply = await call();
      return {
        what,
        status: reply.status,
        code: (reply.body as { error?: { code?: string } } | undefined)?.error?.code,
        ms: Date.now() - started,
      };
    };
    const replies = await Promise.all([
      timed('get', () => api.get(`/vpcs/${vpcId}`)),
      timed('list', () => api.get('/vpcs')),
      timed('create', () => api.post('/vpcs', { project_id: 'frozen', name: 'other', cidr_block: '10.1.0.0/16' })),
      timed('delete', () => api.delete(`/vpcs/${vpcId}`)),
    ]);
    for (const reply of replies) {
      expect(reply, JSON.stringify(replies)).toMatchObject({ status: 503, code: 'authorization_unavailable' });
      expect(reply.ms, JSON.stringify(replies)).toBeLessThan(reply.what === 'list' ? 11_000 : 6_000);
    }
  } finally {
    process.kill(server.pid as number, 'SIGCONT');
  }
  // Back: the same requests work again (the resource was not deleted while OpenFGA was away).
  expect((await api.get(`/vpcs/${vpcId}`)).status).toBe(200);
}, 200_000);
