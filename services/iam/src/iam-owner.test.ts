import { iamOutbox } from '@outbox/migrations';
import { createOpenFgaTupleReader } from '@outbox/openfga';
import { outboxStats } from '@outbox/outbox';
import { auditOutbox, repairOutbox } from '@outbox/reconciler';
import { serviceClient, startService, type RunningService, type ServiceClient } from '@outbox/service-kit';
import { serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { iamOwner, iamService } from './index.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const target = () => ({
  db: t.db,
  spec: iamOutbox,
  owner: iamOwner,
  reader: createOpenFgaTupleReader({ client: fga.client }),
});

let service: RunningService;
let alice: ServiceClient;
let organization: string;
let project: string;
let doomed: string;

beforeAll(async () => {
  service = await startService(iamService, serviceOptionsFor(t, fga));
  alice = serviceClient(service.url, 'alice');
});
afterAll(async () => {
  await service.stop();
});

/** Every tuple stored on `object`, as `user relation object[ ?condition]` lines. */
async function storedOn(object: string): Promise<string[]> {
  const { tuples } = await fga.client.read({ object });
  return tuples
    .map((x) => `${x.key.user} ${x.key.relation} ${x.key.object}${x.key.condition ? ` ?${x.key.condition.name}` : ''}`)
    .sort();
}

describe('iamOwner', () => {
  test('expects what the create paths and grant PUTs write: organizations, projects and grants made through the API audit clean', async () => {
    organization = (await alice.post<{ id: string }>('/organizations', { name: 'acme' })).body.id;
    project = (await alice.post<{ id: string }>('/projects', { organization_id: organization, name: 'web' })).body.id;
    doomed = (await alice.post<{ id: string }>('/projects', { organization_id: organization, name: 'old' })).body.id;
    for (const [user, relations, on] of [
      ['bob', ['viewer'], project],
      ['carol', ['editor', 'viewer'], project],
      ['dave', ['owner'], doomed],
      ['erin', [], project],
    ] as const) {
      expect((await alice.put(`/projects/${on}/grants/${user}`, { relations })).status).toBe(200);
    }
    const report = await auditOutbox(target());
    // 1 organization owner, 2 project organizations, 3 grants (erin's empty set holds nothing).
    expect(report).toMatchObject({
      objectTypes: ['organization', 'project'],
      partitionsCompared: 6,
      liveTuplesRead: 7,
      drifted: 0,
    });
  });

  test('out-of-band edits are found, each in its kind, and repaired through the outbox; then the audit is clean', async () => {
    const P = `project:${project}`;
    await fga.client.write({
      writes: [
        { user: 'user:mallory', relation: 'viewer', object: P }, // a grant nobody made
        { user: 'user:mallory', relation: 'member', object: `organization:${organization}` },
      ],
      deletes: [
        { user: 'user:bob', relation: 'viewer', object: P }, // a grant lost
        { user: 'user:carol', relation: 'editor', object: P },
      ],
    });
    // carol's editor comes back with a condition iam never writes: unexpected as stored, missing as granted.
    await fga.client.write({
      writes: [
        {
          user: 'user:carol',
          relation: 'editor',
          object: P,
          condition: { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } },
        },
      ],
    });
    await sql`delete from iam.projects where id = ${doomed}`.execute(t.db); // by hand (its grants cascade): its tuples stay

    const report = await auditOutbox(target());
    expect(report).toMatchObject({
      drifted: 6,
      missing: { partitions: 2, tuples: 2 },
      unexpected: { partitions: 3, tuples: 3 },
      orphans: { objects: 1, partitions: 2, tuples: 2 },
    });
    expect(report.missing.sample.map((s) => s.partitionKey).sort()).toEqual([`user:bob|${P}`, `user:carol|${P}`]);
    expect(report.unexpected.sample.map((s) => s.partitionKey).sort()).toEqual([
      `user:carol|${P}`,
      `user:mallory|organization:${organization}`,
      `user:mallory|${P}`,
    ]);
    expect(report.orphans.sample).toEqual([
      expect.objectContaining({
        object: `project:${doomed}`,
        partitionKeys: [`organization:${organization}|project:${doomed}`, `user:dave|project:${doomed}`].sort(),
        tupleCount: 2,
      }),
    ]);

    const repaired = await repairOutbox({ ...target(), dryRun: false });
    // carol's key is deleted, then written again without the condition: two intents of her grant.
    expect(repaired).toMatchObject({ partitions: 6, intents: 7, writes: 2, deletes: 5 });
    await waitFor('the corrections to be delivered', async () => (await outboxStats(t.db, iamOutbox)).pending === 0);
    expect(await storedOn(P)).toEqual([
      `organization:${organization} organization ${P}`,
      `user:bob viewer ${P}`,
      `user:carol editor ${P}`,
      `user:carol viewer ${P}`,
    ]);
    expect(await storedOn(`organization:${organization}`)).toEqual([`user:alice owner organization:${organization}`]);
    expect(await storedOn(`project:${doomed}`)).toEqual([]);
    expect((await auditOutbox(target())).drifted).toBe(0);
    expect(await repairOutbox({ ...target(), dryRun: false })).toMatchObject({ intents: 0 });
  });

  test('partitionFilter splits a grant key back into its subject and object', () => {
    expect(iamOwner.partitionFilter('user:bob|project:p1')).toEqual({ user: 'user:bob', object: 'project:p1' });
    expect(iamOwner.partitionFilter('organization:o1|project:p1')).toEqual({
      user: 'organization:o1',
      object: 'project:p1',
    });
    expect(iamOwner.partitionFilter('user:a|b|organization:o1')).toEqual({
      user: 'user:a|b',
      object: 'organization:o1',
    });
    expect(() => iamOwner.partitionFilter('vpc:v1')).toThrow(/not a grant key/);
  });
});
