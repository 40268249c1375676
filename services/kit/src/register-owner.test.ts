import { vpcOutbox, vpcTable } from '@outbox/migrations';
import { createOpenFgaTupleReader } from '@outbox/openfga';
import { outboxStats } from '@outbox/outbox';
import { auditOutbox, repairOutbox } from '@outbox/reconciler';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { Type } from 'typebox';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  createRegisterService,
  registerServiceOwner,
  registrationTuples,
  serviceClient,
  startService,
  type RunningService,
  type ServiceClient,
} from './index.js';
import { serviceOptionsFor, waitFor } from './testing/index.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();

const vpcs = createRegisterService({
  name: 'vpc',
  defaultPort: 0,
  resourceTable: vpcTable,
  fgaType: 'vpc',
  outboxSpec: vpcOutbox,
  path: 'vpcs',
  fields: { cidr_block: Type.String({ description: 'a CIDR block' }) },
});
const target = () => ({
  db: t.db,
  spec: vpcOutbox,
  owner: registerServiceOwner(vpcs),
  reader: createOpenFgaTupleReader({ client: fga.client }),
});

let service: RunningService;
let alice: ServiceClient;
const ids: string[] = [];

beforeAll(async () => {
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:p1' }] });
  service = await startService(vpcs, serviceOptionsFor(t, fga));
  alice = serviceClient(service.url, 'alice');
});
afterAll(async () => {
  await service.stop();
});

async function storedOn(object: string): Promise<string[]> {
  const { tuples } = await fga.client.read({ object });
  return tuples.map((x) => `${x.key.user} ${x.key.relation} ${x.key.object}`).sort();
}

describe('registerServiceOwner', () => {
  test('expects what the create path writes: resources created and deleted through the API audit clean', async () => {
    for (const name of ['one', 'two', 'three', 'four']) {
      const reply = await alice.post<{ id: string }>('/vpcs', { project_id: 'p1', name, cidr_block: '10.0.0.0/16' });
      expect(reply.status).toBe(201);
      ids.push(reply.body.id);
    }
    expect((await alice.delete(`/vpcs/${ids.pop()}`)).status).toBe(204);
    const report = await auditOutbox(target());
    expect(report).toMatchObject({
      objectTypes: ['vpc'],
      partitionsCompared: 3,
      liveTuplesRead: 6,
      drifted: 0,
      skippedPending: 0,
    });
  });

  test('out-of-band edits are found, each in its kind, and repaired through the outbox; then the audit is clean', async () => {
    const [added, deleted, orphaned] = ids.map((id) => `vpc:${id}`) as [string, string, string];
    await fga.client.write({
      writes: [{ user: 'user:mallory', relation: 'viewer', object: added }],
      deletes: [{ user: 'user:alice', relation: 'owner', object: deleted }],
    });
    await sql`delete from vpc.vpcs where id = ${ids[2]}`.execute(t.db); // by hand: no intent, its tuples stay

    const report = await auditOutbox(target());
    expect(report).toMatchObject({
      drifted: 3,
      missing: { partitions: 1, tuples: 1 },
      unexpected: { partitions: 1, tuples: 1 },
      orphans: { objects: 1, tuples: 2 },
    });
    expect(report.missing.sample[0]).toMatchObject({
      partitionKey: deleted,
      tuples: [{ user: 'user:alice', relation: 'owner', object: deleted }],
    });
    expect(report.unexpected.sample[0]).toMatchObject({
      partitionKey: added,
      tuples: [{ user: 'user:mallory', relation: 'viewer', object: added }],
    });
    expect(report.orphans.sample[0]?.object).toBe(orphaned);
    expect(report.orphans.sample[0]?.tuples).toEqual(
      expect.arrayContaining(registrationTuples(orphaned, 'p1', 'alice')),
    );

    const repaired = await repairOutbox({ ...target(), dryRun: false });
    expect(repaired).toMatchObject({ partitions: 3, writes: 1, deletes: 3 });
    // The service's own drainer delivers the corrections like any intent.
    await waitFor('the corrections to be delivered', async () => (await outboxStats(t.db, vpcOutbox)).pending === 0);
    expect(await storedOn(added)).toEqual([`project:p1 project ${added}`, `user:alice owner ${added}`]);
    expect(await storedOn(deleted)).toEqual([`project:p1 project ${deleted}`, `user:alice owner ${deleted}`]);
    expect(await storedOn(orphaned)).toEqual([]);
    expect((await auditOutbox(target())).drifted).toBe(0);
    expect(await repairOutbox({ ...target(), dryRun: false })).toMatchObject({ intents: 0 });
  });
});
