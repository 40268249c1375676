import { createDrainer } from '@outbox/drainer';
import { vpcOutbox } from '@outbox/migrations';
import { awaitDelivered, enqueue, outboxStats } from '@outbox/outbox';
import { compactOutbox } from '@outbox/reconciler';
import { serviceClient, startService, startServices, type RunningServices } from '@outbox/service-kit';
import { serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { startPgBouncer, useOpenFgaStore, useTestDatabase, type PgBouncer } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { iamService, vpcService } from './index.js';

// The services and the libraries with their pool behind PgBouncer in transaction mode
// (docs/pgbouncer.md): two server connections for eight clients, so that every transaction may
// land on a connection another client's statement used a moment before. LISTEN goes to Postgres
// itself, as it must.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let bouncer: PgBouncer;
let pooledUrl: string;
let pooled: Kysely<unknown>;
let platform: RunningServices<'iam' | 'vpc'>;

beforeAll(async () => {
  bouncer = await startPgBouncer({ postgresUrl: t.url, poolMode: 'transaction', poolSize: 2 });
  pooledUrl = bouncer.through(t.url);
  pooled = new Kysely({
    dialect: new PostgresDialect({
      pool: new pg.Pool({ connectionString: pooledUrl, max: 4 }).on('error', () => undefined),
    }),
  });
  platform = await startServices([iamService, vpcService], {
    ...serviceOptionsFor(t, fga, { databaseUrl: pooledUrl, listenDatabaseUrl: t.url, poolSize: 8 }),
  });
}, 60_000);
afterAll(async () => {
  await platform?.stop();
  await pooled?.destroy();
  await bouncer?.stop();
});

const owners = async (object: string) =>
  (await fga.client.read({ object })).tuples.map((x) => `${x.key.user} ${x.key.relation}`).sort();

describe('through PgBouncer in transaction mode', () => {
  test('writes in parallel (enqueue, write-through, flush), reads with their tokens, deletes: each answered as directly, nothing lost', async () => {
    const iam = serviceClient(platform.urls.iam, 'alice');
    const org = await iam.post<{ id: string }>('/organizations', { name: 'acme' });
    const project = await iam.post<{ id: string }>('/projects', { organization_id: org.body.id, name: 'web' });
    expect([org.status, project.status]).toEqual([201, 201]);

    const vpc = serviceClient(platform.urls.vpc, 'alice');
    const created = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        vpc.post<{ id: string }>('/vpcs', { project_id: project.body.id, name: `net-${i}`, cidr_block: '10.0.0.0/16' }),
      ),
    );
    expect(created.map((r) => r.status)).toEqual(created.map(() => 201));
    // A token from a write waited on in the other service, through the pooler.
    for (const reply of created.slice(0, 4)) {
      const read = await serviceClient(platform.urls.vpc, 'alice').after(reply.token).get(`/vpcs/${reply.body.id}`);
      expect(read.status).toBe(200);
    }
    const deleted = await Promise.all(created.slice(0, 8).map((r) => vpc.delete(`/vpcs/${r.body.id}`)));
    expect(deleted.map((r) => r.status)).toEqual(deleted.map(() => 204));

    await waitFor('the last settles', async () => (await platform.stats()).vpc.pending === 0);
    // It was the pooler that carried them.
    const database = new URL(t.url).pathname.slice(1);
    expect((await bouncer.stats()).get(database)?.transactions).toBeGreaterThan(100);
    for (const reply of created.slice(0, 8)) expect(await owners(`vpc:${reply.body.id}`)).toEqual([]);
    for (const reply of created.slice(8))
      expect(await owners(`vpc:${reply.body.id}`)).toEqual([`project:${project.body.id} project`, 'user:alice owner']);
  });

  test('awaitDelivered, the redrive, the audit with its repair, and compaction: each through the pooler', async () => {
    const vpc = platform.services.vpc.outbox;
    // An intent OpenFGA refuses (a relation the model lacks): poisoned, then revived by the redrive.
    const refused = await pooled.transaction().execute((trx) =>
      enqueue(trx, vpcOutbox, {
        partitionKey: 'vpc:refused',
        payload: { writes: [{ user: 'user:alice', relation: 'no_such_relation', object: 'vpc:refused' }] },
      }),
    );
    await vpc.drainOnce();
    expect(await outboxStats(pooled, vpcOutbox)).toMatchObject({ poisoned: 1 });
    expect((await vpc.redrive()).revived.map((r) => r.id)).toEqual([refused]);

    // Drift made around the outbox: the audit finds it and repairs it through the outbox.
    const made = await serviceClient(platform.urls.vpc, 'alice').post<{ id: string }>('/vpcs', {
      project_id: (await sql<{ id: string }>`select id from iam.projects limit 1`.execute(pooled)).rows[0]?.id,
      name: 'drifted',
      cidr_block: '10.1.0.0/16',
    });
    expect(made.status).toBe(201);
    const object = `vpc:${made.body.id}`;
    await fga.client.write({ deletes: [{ user: 'user:alice', relation: 'owner', object }] });
    expect((await vpc.audit())?.missing.tuples).toBe(1);
    await waitFor('the repair to be delivered', async () => (await owners(object)).includes('user:alice owner'));

    // The write's token, waited on with the library directly.
    const waited = await awaitDelivered(pooled, made.token as string, { timeoutMs: 5_000 });
    expect(waited).toMatchObject({ settled: true, delivered: true });

    const compacted = await compactOutbox({ db: pooled, spec: vpcOutbox, retentionMs: 0 });
    expect(compacted.deleted).toBeGreaterThan(0);
    expect(await outboxStats(pooled, vpcOutbox)).toMatchObject({ pending: 1, poisoned: 1 }); // the refused one stays
  });

  test('PgBouncer restarted under writes: a write in the gap is a 503 with nothing committed, every 201 before and after is delivered', async () => {
    const iam = serviceClient(platform.urls.iam, 'alice');
    const write = (i: number) => iam.post<{ id: string }>('/organizations', { name: `org-${i}` });
    const before = await Promise.all([0, 1, 2].map(write));
    expect(before.map((r) => r.status)).toEqual([201, 201, 201]);
    await bouncer.stop();
    const during = await write(3);
    expect(during.status).toBe(503);
    bouncer = await startPgBouncer({ postgresUrl: t.url, poolMode: 'transaction', poolSize: 2, port: bouncer.port });
    let after: Awaited<ReturnType<typeof write>> | undefined;
    await waitFor('a write through the restarted pooler', async () => (after = await write(4)).status === 201);
    const names = (
      await sql<{ name: string }>`select name from iam.organizations where name like 'org-%'`.execute(t.db)
    ).rows
      .map((r) => r.name)
      .sort();
    expect(names).toEqual(['org-0', 'org-1', 'org-2', 'org-4']);
    await waitFor('the last settles', async () => (await platform.stats()).iam.pending === 0);
    for (const reply of [...before, after])
      expect(await owners(`organization:${reply?.body.id}`)).toEqual(['user:alice owner']);
  });

  test('LISTEN pointed at the pooler is refused at start, naming it: the drainer, and a service without LISTEN_DATABASE_URL', async () => {
    const drainer = createDrainer({
      db: pooled,
      spec: vpcOutbox,
      sink: { deliver: async (intents) => intents.map(() => ({ kind: 'delivered' as const })) },
      listen: { connectionString: pooledUrl },
    });
    await expect(drainer.start()).rejects.toThrow(/through a pooler.*LISTEN needs a session on Postgres itself/);
    await drainer.stop();
    await expect(startService(vpcService, serviceOptionsFor(t, fga, { databaseUrl: pooledUrl }))).rejects.toThrow(
      /through a pooler/,
    );
  });
});
