/**
 * `pnpm demo`: the whole system in one command, narrated.
 *
 * Starts a Postgres (embedded, or DATABASE_URL's server) and an OpenFGA (the pinned binary, postgres
 * datastore so it can be stopped and started again without losing its store), migrates, loads the
 * model, starts the six services, and plays a scenario against their HTTP APIs. Exits 0 when every
 * step behaved as expected, stopping everything it started. `--keep` leaves the services up.
 */
import { OpenFgaClient } from '@openfga/sdk';
import { migrateToLatest, writeAuthorizationModel } from '@outbox/migrations';
import { maskUrl, outboxStatus, statusTable } from '@outbox/cli';
import { platformServices, startAllServices, type RunningPlatform } from '@outbox/platform';
import { serviceClient, type ServiceReply } from '@outbox/service-kit';
import {
  createDatabase,
  dropDatabase,
  startEmbeddedPostgres,
  startNativeOpenFga,
  type OpenFgaServer,
  type PostgresServer,
} from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { AnyKysely } from '@outbox/outbox';

const keep = process.argv.includes('--keep');
const started = performance.now();
const stamp = () => `${((performance.now() - started) / 1000).toFixed(1).padStart(5)}s`;
const say = (line: string) => console.log(`${stamp()}  ${line}`);
const scene = (title: string) => console.log(`\n${stamp()}  ── ${title}`);
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

class DemoFailure extends Error {
  override readonly name = 'DemoFailure';
}

/** Checks a step's answer; a wrong one fails the demo (exit 1) with what was expected. */
function expectStatus<T>(what: string, reply: ServiceReply<T>, ...statuses: number[]): ServiceReply<T> {
  const ok = statuses.includes(reply.status);
  say(`${ok ? '✓' : '✗'} ${what} → ${reply.status}`);
  if (!ok)
    throw new DemoFailure(
      `${what}: expected ${statuses.join(' or ')}, got ${reply.status} ${JSON.stringify(reply.body)}`,
    );
  return reply;
}

function expectThat(what: string, condition: boolean, detail = ''): void {
  say(`${condition ? '✓' : '✗'} ${what}${detail ? ` (${detail})` : ''}`);
  if (!condition) throw new DemoFailure(what);
}

async function until(what: string, probe: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new DemoFailure(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

interface Running {
  postgres?: PostgresServer;
  /** Databases the demo created on the server (dropped at the end). */
  databases: string[];
  serverUrl?: string;
  openfga?: OpenFgaServer;
  platform?: RunningPlatform;
  db?: AnyKysely;
}

async function main(): Promise<void> {
  const running: Running = { databases: [] };
  const stopAll = async () => {
    await running.platform?.stop();
    await running.db?.destroy();
    await running.openfga?.stop();
    // On a server the demo did not start (DATABASE_URL), leave nothing behind.
    if (running.serverUrl && !running.postgres) {
      for (const name of running.databases) await dropDatabase(running.serverUrl, name);
    }
    await running.postgres?.stop();
  };
  try {
    await play(running);
    if (keep) {
      const platform = running.platform as RunningPlatform;
      console.log('\n--keep: the services stay up (the caller is the x-user-id header). Ctrl-C stops everything.');
      for (const [name, url] of Object.entries(platform.urls)) console.log(`  ${name.padEnd(9)} ${url}`);
      console.log(`  openfga   ${running.openfga?.apiUrl}`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
    }
  } finally {
    await stopAll();
  }
}

async function play(running: Running): Promise<void> {
  scene('Starting Postgres and OpenFGA');
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    running.postgres = await startEmbeddedPostgres();
    serverUrl = running.postgres.url;
  }
  running.serverUrl = serverUrl;
  const suffix = Math.random().toString(36).slice(2, 8);
  running.databases.push(`outbox_demo_${suffix}`, `outbox_demo_openfga_${suffix}`);
  const databaseUrl = await createDatabase(serverUrl, `outbox_demo_${suffix}`);
  const openfgaStoreUrl = await createDatabase(serverUrl, `outbox_demo_openfga_${suffix}`);
  const where = new URL(databaseUrl);
  say(
    `postgres  ${where.host}${where.pathname}${running.postgres ? ' (embedded PostgreSQL 18)' : ' (the server of DATABASE_URL)'}`,
  );
  const openfgaOptions = { datastore: 'postgres' as const, datastoreUri: openfgaStoreUrl };
  running.openfga = await startNativeOpenFga(openfgaOptions);
  say(`openfga   ${running.openfga.apiUrl} (v1.18.1, postgres datastore)`);

  scene('Migrating and loading the authorization model');
  running.db = new Kysely({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: databaseUrl, max: 2 }) }),
  });
  const applied = await migrateToLatest(running.db);
  say(`applied ${Array.isArray(applied) ? applied.length : 'all'} migrations`);
  const { id: storeId } = await new OpenFgaClient({ apiUrl: running.openfga.apiUrl }).createStore({
    name: 'outbox-demo',
  });
  const authorizationModelId = await writeAuthorizationModel(
    new OpenFgaClient({ apiUrl: running.openfga.apiUrl, storeId }),
  );
  say(`store ${storeId}, model ${authorizationModelId}`);
  const fga = () =>
    new OpenFgaClient({ apiUrl: (running.openfga as OpenFgaServer).apiUrl, storeId, authorizationModelId });

  scene('Starting the six services');
  const platform = await startAllServices({
    databaseUrl,
    openfga: { apiUrl: running.openfga.apiUrl, storeId, authorizationModelId },
    drainIntervalMs: 200,
    redriveIntervalMs: 3_600_000, // the demo runs redrive itself, to show what it says
    flushTimeoutMs: 3_000,
    retryBackoff: { baseMs: 50, maxMs: 400 }, // poison within seconds, for the story
    logger: quiet,
  });
  running.platform = platform;
  for (const [name, url] of Object.entries(platform.urls)) say(`${name.padEnd(9)} ${url}`);

  const alice = (service: keyof RunningPlatform['urls']) => serviceClient(platform.urls[service]).as('alice');
  const bob = (service: keyof RunningPlatform['urls']) => serviceClient(platform.urls[service]).as('bob');

  scene('alice sets up an organization and a project (iam, tuple outbox)');
  const org = expectStatus(
    'alice creates organization "acme"',
    await alice('iam').post<{ id: string }>('/organizations', { name: 'acme' }),
    201,
  ).body;
  const project = expectStatus(
    'alice creates project "web" in it',
    await alice('iam').post<{ id: string }>('/projects', { organization_id: org.id, name: 'web' }),
    201,
  ).body;

  scene('alice creates one resource in each register service (row + intent in one transaction, flushed before 201)');
  const created: Record<string, string> = {};
  const resources = [
    ['vpc', '/vpcs', { name: 'main', cidr_block: '10.0.0.0/16' }],
    ['compute', '/instances', { name: 'web-1', image: 'debian-12' }],
    ['nlb', '/load-balancers', { name: 'front', port: 443 }],
    ['storage', '/buckets', { name: 'assets' }],
    ['registry', '/repositories', { name: 'web-app' }],
  ] as const;
  for (const [service, path, body] of resources) {
    const reply = expectStatus(
      `alice creates ${service} "${body.name}"`,
      await alice(service).post<{ id: string }>(path, { project_id: project.id, ...body }),
      201,
    );
    created[service] = reply.body.id;
    expectStatus(
      `alice reads it back at once (read-your-writes)`,
      await alice(service).get(`${path}/${reply.body.id}`),
      200,
    );
  }

  scene('bob is refused, then granted viewer on the project, then allowed');
  expectStatus('bob reads the vpc', await bob('vpc').get(`/vpcs/${created.vpc}`), 403);
  expectStatus(
    'alice grants bob {viewer} on the project',
    await alice('iam').put(`/projects/${project.id}/grants/bob`, { relations: ['viewer'] }),
    200,
    201,
  );
  expectStatus('bob reads the vpc', await bob('vpc').get(`/vpcs/${created.vpc}`), 200);
  expectStatus('bob reads the bucket', await bob('storage').get(`/buckets/${created.storage}`), 200);

  scene('OpenFGA goes away while a bucket is being registered');
  const storage = platform.services.storage;
  await storage.outbox.drainer.stop();
  say("storage's drainer is paused for a moment, so the next intent waits in the outbox");
  const doomed = expectStatus(
    'alice creates bucket "tmp" (committed; delivery pending)',
    await alice('storage').post<{ id: string }>('/buckets', { project_id: project.id, name: 'tmp' }),
    202,
  ).body;
  const openfgaPort = running.openfga.httpPort;
  await running.openfga.stop();
  say('OpenFGA stopped');
  await storage.outbox.drainer.start();
  say('the drainer resumes: every attempt is refused at the network, retried with backoff…');
  await until('the register intent to be poisoned', async () => (await storage.outbox.stats()).poisoned === 1);
  const poisoned = await sql<{ id: string; last_error: string }>`
    select id::text, last_error from storage.fga_register_outbox where resource_id = ${`bucket:${doomed.id}`}`.execute(
    running.db,
  );
  say(
    `register intent ${poisoned.rows[0]?.id} poisoned after 10 attempts: ${poisoned.rows[0]?.last_error?.slice(0, 80)}`,
  );

  running.openfga = await startNativeOpenFga({ ...openfgaOptions, httpPort: openfgaPort });
  say('OpenFGA is back (same port, same store)');
  expectStatus(
    'alice deletes bucket "tmp"; the deregister intent is delivered',
    await alice('storage').delete(`/buckets/${doomed.id}`),
    204,
  );

  scene('redrive: the poisoned register must NOT be revived past its delivered deregister');
  const redrive = await storage.outbox.redrive();
  expectThat(
    'redrive revives nothing and reports the register superseded',
    redrive.revived.length === 0 && redrive.superseded.some((r) => r.partitionKey === `bucket:${doomed.id}`),
    `superseded: ${redrive.superseded.map((r) => `${r.partitionKey}#${r.id}`).join(', ')}`,
  );
  const tuples = await fga().read({ object: `bucket:${doomed.id}` });
  expectThat('OpenFGA holds no tuple for the deleted bucket', tuples.tuples.length === 0);
  await storage.outbox.drainOnce();
  const stillPoisoned = await sql<{ n: number }>`
    select count(*)::int as n from storage.fga_register_outbox where resource_id = ${`bucket:${doomed.id}`} and sent_at is null`.execute(
    running.db,
  );
  expectThat(
    'a drain pass afterwards delivers nothing for it',
    stillPoisoned.rows[0]?.n === 1,
    'the register stays poisoned, for a human to retire',
  );
  const retired = await storage.outbox.reconciler.retire(
    redrive.superseded.map((r) => r.id),
    'superseded by the delivered deregister (demo)',
  );
  say(
    `retired ${Array.isArray(retired) ? retired.length : JSON.stringify(retired)} superseded intent(s) with a reason`,
  );

  scene('alice deletes the vpc and loses access');
  expectStatus('alice deletes the vpc', await alice('vpc').delete(`/vpcs/${created.vpc}`), 204);
  const check = await fga().check({ user: 'user:alice', relation: 'can_view', object: `vpc:${created.vpc}` });
  expectThat(
    'OpenFGA: alice can_view the vpc',
    check.allowed === false,
    'false: the owner and project tuples were deleted',
  );
  expectStatus('alice reads the vpc', await alice('vpc').get(`/vpcs/${created.vpc}`), 404);

  scene('Outbox status (what `pnpm outbox status` prints)');
  // One outbox after the other: the demo's pool keeps the one connection it had.
  const statuses = [];
  for (const service of platformServices)
    statuses.push(
      await outboxStatus({ name: service.name, spec: service.outbox, db: running.db, database: maskUrl(databaseUrl) }),
    );
  console.log(statusTable(statuses, new Date()).trimEnd().replace(/^/gm, '  '));
  const stuck = statuses.filter((s) => s.deliverable > 0 || s.poisoned > 0);
  expectThat('nothing left to deliver, nothing poisoned', stuck.length === 0);
  if (keep) {
    // The embedded server's password is the demo's own (printed whole, to paste); a DATABASE_URL's is the operator's (masked).
    const shownUrl = running.postgres
      ? databaseUrl
      : `${maskUrl(databaseUrl)}   # *** = the password of your DATABASE_URL`;
    console.log('\n  pnpm outbox <command> reads these (see docs/cli.md):');
    console.log(
      `  export DATABASE_URL=${shownUrl}\n  export OPENFGA_API_URL=${running.openfga?.apiUrl}\n  export OPENFGA_STORE_ID=${storeId}\n  export OPENFGA_MODEL_ID=${authorizationModelId}`,
    );
  }
  console.log(`\n${stamp()}  demo finished: every step behaved as expected.`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(`\ndemo failed: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
    if (error instanceof Error && !(error instanceof DemoFailure)) console.error(error.stack);
    process.exit(1);
  },
);
