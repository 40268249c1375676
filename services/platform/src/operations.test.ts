import { fileURLToPath } from 'node:url';
import { OpenFgaClient } from '@openfga/sdk';
import {
  runDrainOnceMain,
  serviceClient,
  serviceOptionsFromEnv,
  startService,
  type RegisterServiceDefinition,
} from '@outbox/service-kit';
import { serviceEnv, serviceOptionsFor, startServiceProcess, waitFor } from '@outbox/service-kit/testing';
import { openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import pg from 'pg';
import { beforeAll, describe, expect, test } from 'vitest';
import { iamService, registerServices, vpcService } from './index.js';

// What operators hit: starting against a database or an OpenFGA URL that is not quite right, and
// stopping a service while requests are in flight. Real Postgres, real OpenFGA.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let client: OpenFgaClient;

beforeAll(async () => {
  client = new OpenFgaClient(openFgaClientConfig(fga.storeId, fga.authorizationModelId));
  await client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:ops' }] });
});

describe('a database missing a table the routes use', () => {
  // Tables are renamed in this file's own database, and renamed back after each test.
  const options = () => serviceOptionsFor(t, fga);

  test.each(registerServices.map((d) => [d.name, d] as const))(
    '%s: its resource table dropped (the outbox still there): the start fails naming the table, instead of a ready service answering 500',
    async (_name, definition: RegisterServiceDefinition) => {
      const table = definition.resourceTable.qualifiedName;
      await sql`alter table ${sql.raw(table)} rename to gone`.execute(t.db);
      try {
        const outcome = await startService(definition, options()).then(
          async (running) => {
            const api = serviceClient(running.url, 'alice');
            const answers = [(await api.get('/readyz')).status, (await api.get(`${definition.resourcePath}/x`)).status];
            await running.stop();
            return `started; /readyz ${answers[0]}, GET ${answers[1]}`;
          },
          (error: Error) => error,
        );
        expect(outcome).toMatchObject({
          name: 'ServiceConfigError',
          message: expect.stringContaining(`the table ${table} does not exist`),
        });
      } finally {
        await sql`alter table ${sql.raw(`${definition.resourceTable.schema}.gone`)} rename to ${sql.raw(definition.resourceTable.table)}`.execute(
          t.db,
        );
      }
    },
  );

  test('a resource table with a column missing: the start fails naming the column', async () => {
    await sql`alter table vpc.vpcs rename column cidr_block to cidr`.execute(t.db);
    try {
      await expect(startService(vpcService, options())).rejects.toMatchObject({
        name: 'ServiceConfigError',
        message: expect.stringContaining('vpc.vpcs has no column cidr_block text'),
      });
    } finally {
      await sql`alter table vpc.vpcs rename column cidr to cidr_block`.execute(t.db);
    }
    const running = await startService(vpcService, options()); // and back in order, it starts
    await running.stop();
  });

  test('iam: iam.project_grants dropped: the start fails naming it, instead of 500 on every grant', async () => {
    await sql`alter table iam.project_grants rename to gone`.execute(t.db);
    try {
      await expect(startService(iamService, options())).rejects.toMatchObject({
        name: 'ServiceConfigError',
        message: expect.stringContaining('the table iam.project_grants does not exist'),
      });
    } finally {
      await sql`alter table iam.gone rename to project_grants`.execute(t.db);
    }
    const running = await startService(iamService, options());
    await running.stop();
  });
});

describe('OPENFGA_API_URL with a trailing slash', () => {
  test('is the same OpenFGA: the service starts and writes (it stopped with "has no store", naming OPENFGA_STORE_ID)', async () => {
    // The cause: OpenFGA answers 404 to a path starting with `//`.
    expect((await fetch(`${fga.apiUrl}//stores/${fga.storeId}`, { headers: openFgaHeaders() })).status).toBe(404);
    const options = serviceOptionsFor(t, fga);
    const running = await startService(vpcService, {
      ...options,
      openfga: { ...options.openfga, apiUrl: `${fga.apiUrl}/` },
    });
    try {
      const created = await serviceClient(running.url, 'alice').post<{ id: string }>('/vpcs', {
        project_id: 'ops',
        name: 'slash',
        cidr_block: '10.0.0.0/16',
      });
      expect(created.status).toBe(201);
      expect(
        (await client.read({ user: 'user:alice', relation: 'owner', object: `vpc:${created.body.id}` })).tuples,
      ).toHaveLength(1);
    } finally {
      await running.stop();
    }
    // The same URL from the environment (services and fga:drain read it there).
    const env = { ...serviceEnv(t, fga), OPENFGA_API_URL: `${fga.apiUrl}//` };
    expect(serviceOptionsFromEnv(3001, env).openfga.apiUrl).toBe(fga.apiUrl);
    await expect(runDrainOnceMain(vpcService, env)).resolves.toBeUndefined();
  });
});

function openFgaHeaders(): Record<string, string> {
  const { credentials } = openFgaClientConfig();
  const token = (credentials as { config?: { token?: string } } | undefined)?.config?.token;
  return token ? { authorization: `Bearer ${token}` } : {};
}

describe('graceful stop with requests in flight', () => {
  test('SIGTERM while a create waits on Postgres: new connections are refused, the create still answers 201 and is delivered, exit 0', async () => {
    const packageDir = fileURLToPath(new URL('../../vpc', import.meta.url));
    const child = await startServiceProcess(packageDir, 'src/main.ts', {
      ...serviceEnv(t, fga),
      PORT: '0',
      DRAIN_INTERVAL_MS: '200',
      SHUTDOWN_TIMEOUT_MS: '20000',
    });
    // Hold the create inside its transaction: a lock that blocks inserts into the resource table.
    const blocker = new pg.Client({ connectionString: t.url });
    await blocker.connect();
    try {
      await blocker.query('begin');
      await blocker.query('lock table vpc.vpcs in share mode');
      const api = serviceClient(child.url, 'alice');
      const creating = api.post<{ id: string }>('/vpcs', {
        project_id: 'ops',
        name: 'in-flight',
        cidr_block: '10.3.0.0/16',
      });
      await waitFor('the create to wait on the lock', async () => {
        const waiting = await sql<{
          n: string;
        }>`select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' and query like 'insert into%'`.execute(
          t.db,
        );
        return Number(waiting.rows[0]?.n) > 0;
      });
      const exited = child.terminate(30_000);
      await waitFor(
        'the service to stop listening',
        async () =>
          await fetch(`${child.url}/healthz`).then(
            () => false,
            () => true,
          ),
      );
      await blocker.query('commit');
      const created = await creating;
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(await exited).toBe(0);
      expect(
        (await client.read({ user: 'user:alice', relation: 'owner', object: `vpc:${created.body.id}` })).tuples,
      ).toHaveLength(1);
    } finally {
      await blocker.end();
      await child.terminate();
    }
  });
});
