import { migrateToLatest } from '@outbox/migrations';
import { serviceClient, startService, type RegisterServiceDefinition } from '@outbox/service-kit';
import { serviceOptionsFor } from '@outbox/service-kit/testing';
import {
  createDatabase,
  processes,
  startEmbeddedPostgres,
  useOpenFgaStore,
  useTestDatabase,
  type NativePostgresServer,
} from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { registerServices } from './index.js';

// A Postgres of this file's own: the test kills and freezes it.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let server: NativePostgresServer;
let databaseUrl: string;
const vpc = registerServices.find((d) => d.name === 'vpc') as RegisterServiceDefinition;

beforeAll(async () => {
  server = await startEmbeddedPostgres();
  databaseUrl = await createDatabase(server.url, 'outage');
  const db = new Kysely({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: databaseUrl, max: 1 }) }),
  });
  await migrateToLatest(db);
  // The test server commits asynchronously (fast settings): make the schema durable before crashing it.
  await sql`checkpoint`.execute(db);
  await db.destroy();
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:outage' }] });
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

const options = (overrides = {}) => ({ ...serviceOptionsFor(t, fga), databaseUrl, runReconciler: false, ...overrides });

test('Postgres down: requests answer 503 database_unavailable, /readyz 503, /healthz 200; back up, all is well again', async () => {
  const service = await startService(vpc, options());
  try {
    const api = serviceClient(service.url, 'alice');
    const body = (name: string) => ({ project_id: 'outage', name, cidr_block: '10.0.0.0/16' });
    expect((await api.post('/vpcs', body('before'))).status).toBe(201);
    expect((await api.get('/readyz')).status).toBe(200);

    await server.crash();
    const refused = await api.post<{ error: { code: string } }>('/vpcs', body('during'));
    expect(refused).toMatchObject({ status: 503, body: { error: { code: 'database_unavailable' } } });
    const listed = await fetch(`${service.url}/vpcs`, { headers: { 'x-user-id': 'alice' } });
    expect([listed.status, listed.headers.get('retry-after')]).toEqual([503, '1']);
    expect(await api.get('/readyz')).toMatchObject({ status: 503, body: { error: { code: 'database_unavailable' } } });
    expect((await api.get('/healthz')).status).toBe(200); // alive: a restart would not help

    await server.restart();
    expect((await api.post('/vpcs', body('after'))).status).toBe(201);
    expect((await api.get('/readyz')).status).toBe(200);
  } finally {
    await service.stop();
  }
}, 60_000);

test('Postgres frozen: stop() still resolves within its deadlines (and says what it gave up on)', async () => {
  const logger = {
    entries: [] as string[],
    info: () => undefined,
    warn: () => undefined,
    error: (m: string) => void logger.entries.push(m),
  };
  const service = await startService(vpc, options({ shutdownTimeoutMs: 500, logger, drainIntervalMs: 50 }));
  const postmaster = server.pid as number;
  const cluster = [
    postmaster,
    ...processes()
      .filter((p) => p.parent === postmaster)
      .map((p) => p.pid),
  ];
  for (const pid of cluster) process.kill(pid, 'SIGSTOP');
  try {
    await new Promise((resolve) => setTimeout(resolve, 200)); // a drain pass is now stuck on the frozen server
    const started = Date.now();
    await service.stop();
    expect(Date.now() - started).toBeLessThan(5_000);
  } finally {
    for (const pid of cluster) process.kill(pid, 'SIGCONT');
  }
  expect(logger.entries.some((m) => m.includes('did not finish within 500 ms'))).toBe(true);
}, 60_000);
