import { mergeOutboxTokens } from '@outbox/outbox';
import { serviceClient, startServices, type RunningServices, type ServiceReply } from '@outbox/service-kit';
import { serviceOptionsFor } from '@outbox/service-kit/testing';
import {
  createOpenFgaStore,
  startNativeOpenFga,
  useOpenFgaStore,
  useTestDatabase,
  type OpenFgaServer,
} from '@outbox/test-stack';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { iamService, vpcService } from './index.js';

// Read-your-writes across services (docs/design.md §12) against an OpenFGA of this file's own with
// its check caches ON, as production runs it: a MINIMIZE_LATENCY check may answer from a cached,
// stale result for CACHE_TTL_MS. Writes answer 202 (flush on write off): only the token says when
// the other service may read.
const t = useTestDatabase();
const shared = useOpenFgaStore(); // the test context's; the services use the private server
const CACHE_TTL_MS = 60_000;
let server: OpenFgaServer;
let platform: RunningServices<'iam' | 'vpc'>;
let organizationId: string;
let setupToken: string;

const iam = (user: string, token?: string) => serviceClient(platform.urls.iam, user).after(token);
const vpc = (user: string, token?: string) => serviceClient(platform.urls.vpc, user).after(token);
const allowed = (reply: ServiceReply) => reply.status === 201 || reply.status === 202 || reply.status === 204;

beforeAll(async () => {
  void shared;
  server = await startNativeOpenFga({ datastore: 'memory', checkCacheTtlMs: CACHE_TTL_MS });
  const { storeId, authorizationModelId } = await createOpenFgaStore(server.apiUrl);
  platform = await startServices([iamService, vpcService], {
    ...serviceOptionsFor(t, shared, { flushOnWrite: false, checkCacheTtlMs: CACHE_TTL_MS, drainIntervalMs: 100 }),
    openfga: { apiUrl: server.apiUrl, storeId, authorizationModelId },
  });
  const org = await iam('alice').post<{ id: string }>('/organizations', { name: 'acme' });
  expect(org.status).toBe(202);
  organizationId = org.body.id;
  setupToken = org.token as string;
}, 60_000);
afterAll(async () => {
  await platform?.stop();
  await server?.stop();
});

/** A project of alice's, created through iam with the token so far; returns its id and the new token. */
async function project(name: string, token: string): Promise<{ id: string; token: string }> {
  const created = await iam('alice', token).post<{ id: string }>('/projects', {
    organization_id: organizationId,
    name,
  });
  expect(created.status).toBe(202);
  return { id: created.body.id, token: mergeOutboxTokens(token, created.token as string) };
}

test('a grant answered 202 with a token; vpc, given it, waits for the delivery and allows the create (without it: a cached refusal)', async () => {
  const shop = await project('shop', setupToken);
  // bob is refused, and OpenFGA caches the refusal (a check without a token is MINIMIZE_LATENCY).
  expect((await vpc('bob').post('/vpcs', { project_id: shop.id, name: 'a', cidr_block: '10.0.0.0/16' })).status).toBe(
    403,
  );

  const granted = await iam('alice', shop.token).put(`/projects/${shop.id}/grants/bob`, { relations: ['editor'] });
  expect(granted.status).toBe(202);
  expect(granted.token).toMatch(/^ot1\./);

  // Without the token: the cached refusal (or a delivery not made yet), though the grant committed.
  const stale = await vpc('bob').post('/vpcs', { project_id: shop.id, name: 'b', cidr_block: '10.0.0.0/16' });
  expect(stale.status).toBe(403);
  // With it: vpc waits until iam's drainer delivered the grant, then checks past the cache.
  const fresh = await vpc('bob', granted.token).post<{ id: string }>('/vpcs', {
    project_id: shop.id,
    name: 'c',
    cidr_block: '10.0.0.0/16',
  });
  expect(fresh.status).toBe(202);
  expect(fresh.token).toMatch(/^ot1\./);
});

test('a malformed token is a 400 naming the header; a read answers with no token', async () => {
  const bad = await vpc('bob', 'not-a-token').get('/vpcs');
  expect(bad.status).toBe(400);
  expect(bad.body).toMatchObject({
    error: { code: 'invalid_consistency_token', message: expect.stringMatching(/outbox-consistency/) },
  });
  const read = await vpc('bob').get('/vpcs');
  expect([read.status, read.token]).toEqual([200, undefined]);
});

type Step = 'grant' | 'revoke' | 'create' | 'delete';

interface Run {
  readonly answers: number;
  readonly stale: readonly string[];
}

/**
 * Plays `steps` for bob on a fresh project: grants and revokes by alice in iam, creates and deletes
 * by bob in vpc, and counts the answers that disagree with what the writes so far allow. With
 * `tokens`, every request carries the merged token of every write before it.
 */
async function play(steps: readonly Step[], tokens: boolean, name: string): Promise<Run> {
  const home = await project(name, setupToken);
  let token = home.token;
  let editor = false;
  const mine: string[] = [];
  const stale: string[] = [];
  let answers = 0;
  const carried = () => (tokens ? token : undefined);
  const wrote = (reply: ServiceReply) => {
    if (reply.token) token = mergeOutboxTokens(token, reply.token);
  };
  // The cache's entries are primed as a client would: a read before each change.
  for (const [i, step] of steps.entries()) {
    if (step === 'grant' || step === 'revoke') {
      const reply = await iam('alice', token).put(`/projects/${home.id}/grants/bob`, {
        relations: step === 'grant' ? ['editor'] : [],
      });
      expect(reply.status, JSON.stringify(reply.body)).toBe(202);
      wrote(reply);
      editor = step === 'grant';
    } else if (step === 'create') {
      const reply = await vpc('bob', carried()).post<{ id: string }>('/vpcs', {
        project_id: home.id,
        name: `v${i}`,
        cidr_block: '10.0.0.0/16',
      });
      answers += 1;
      if (allowed(reply) !== editor)
        stale.push(`${i} create: ${reply.status}, bob is ${editor ? '' : 'not '}an editor`);
      if (allowed(reply)) {
        mine.push(reply.body.id);
        wrote(reply);
      }
    } else if (mine.length > 0) {
      // bob owns what he created: he may always delete it, once its owner tuple is delivered.
      const id = mine.shift() as string;
      const reply = await vpc('bob', carried()).delete(`/vpcs/${id}`);
      answers += 1;
      if (!allowed(reply)) {
        stale.push(`${i} delete: ${reply.status}, bob owns vpc ${id}`);
        mine.unshift(id);
      } else wrote(reply);
    }
  }
  return { answers, stale };
}

test('randomized grant, revoke, create and delete sequences across iam and vpc: 0 stale answers with the token, stale ones without', async () => {
  const sequences = fc.sample(
    fc.array(fc.constantFrom<Step>('grant', 'revoke', 'create', 'create', 'delete'), { minLength: 10, maxLength: 14 }),
    { numRuns: 4, seed: 31 },
  );
  let withToken = { answers: 0, stale: [] as string[] };
  let without = { answers: 0, stale: [] as string[] };
  for (const [n, steps] of sequences.entries()) {
    const a = await play(steps, true, `with-${n}`);
    const b = await play(steps, false, `without-${n}`);
    withToken = { answers: withToken.answers + a.answers, stale: [...withToken.stale, ...a.stale] };
    without = { answers: without.answers + b.answers, stale: [...without.stale, ...b.stale] };
  }
  expect(withToken.answers).toBeGreaterThan(10);
  expect(withToken.stale, JSON.stringify(sequences)).toEqual([]);
  // The control: the same sequences without the token do read stale, so the first assertion can fail.
  expect(without.stale.length, JSON.stringify(sequences)).toBeGreaterThan(0);
}, 180_000);
