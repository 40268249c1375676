import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { verifyOutboxTable } from '@outbox/outbox';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, expect, inject, test } from 'vitest';
import { migrateToLatest, migrations } from './migrate.js';
import { runMigrateCli } from './testing/run-cli.js';
import { computeOutbox, iamOutbox, nlbOutbox, registryOutbox, storageOutbox, vpcOutbox } from './specs.js';

/*
 * Findings of an adversarial review of the migrations and the `pnpm migrate` CLI, reproduced
 * against the stack's real Postgres (and, for the store race, a stand-in OpenFGA whose store
 * listing answers slowly, as a remote one may).
 */

const server = () => inject('outboxStack').postgresUrl;
const urlOf = (database: string, user?: { name: string; password: string }) => {
  const url = Object.assign(new URL(server()), { pathname: `/${database}` });
  if (user) Object.assign(url, { username: user.name, password: user.password });
  return url.toString();
};
const databases: string[] = [];
const kyselys: Kysely<unknown>[] = [];
const roles: string[] = [];

async function admin(statement: string, database = 'postgres'): Promise<void> {
  const client = new pg.Client({ connectionString: urlOf(database) });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}
async function emptyDatabase(): Promise<string> {
  const name = `m_${randomBytes(6).toString('hex')}`;
  await admin(`create database "${name}"`);
  databases.push(name);
  return name;
}
function open(url: string): Kysely<unknown> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => undefined);
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
  kyselys.push(db);
  return db;
}

afterAll(async () => {
  for (const db of kyselys) await db.destroy();
  for (const name of databases) await admin(`drop database if exists "${name}" with (force)`);
  for (const role of roles) await admin(`drop role if exists ${role}`);
});

/** Whether anything was ever migrated in `database` (Kysely's migration table exists). */
async function migrated(database: string): Promise<boolean> {
  const tables = await sql<{ n: number }>`select count(*)::int as n from pg_tables where tablename = 'kysely_migration'`.execute(open(urlOf(database)));
  return tables.rows[0]?.n !== 0;
}

const runCli = (env: Record<string, string | undefined>, args: string[] = []) =>
  runMigrateCli({ OPENFGA_API_TOKEN: undefined, OPENFGA_STORE_ID: undefined, ...env }, args);

test('the migrations run as a role that owns its (pre-created) schemas but may not create schemas in the database (PostgreSQL 15+ default)', async () => {
  const database = await emptyDatabase();
  const role = { name: `m_owner_${randomBytes(4).toString('hex')}`, password: 'pw' };
  await admin(`create role ${role.name} login password '${role.password}'`);
  roles.push(role.name);
  // A DBA's setup: one schema per service, owned by the migration role; the migrations' own table in public.
  for (const schema of ['iam', 'vpc', 'compute', 'nlb', 'storage', 'registry']) {
    await admin(`create schema ${schema} authorization ${role.name}`, database);
  }
  await admin(`grant create on schema public to ${role.name}`, database);
  const db = open(urlOf(database, role));
  const privileges = await sql<{ create: boolean }>`select has_database_privilege(current_user, current_database(), 'CREATE') as create`.execute(db);
  expect(privileges.rows).toEqual([{ create: false }]);
  expect(await migrateToLatest(db)).toEqual(Object.keys(migrations));
  for (const spec of [iamOutbox, vpcOutbox, computeOutbox, nlbOutbox, storageOutbox, registryOutbox]) await verifyOutboxTable(db, spec);
});

test('pnpm migrate with an OPENFGA_API_URL that is no URL fails naming the variable, before it migrates anything', async () => {
  const database = await emptyDatabase();
  const { code, output } = await runCli({ DATABASE_URL: urlOf(database), OPENFGA_API_URL: 'openfga:8080' });
  expect(code, output).toBe(1);
  expect(output).toContain('OPENFGA_API_URL is not an http(s) URL');
  expect(await migrated(database)).toBe(false);
});

test('pnpm migrate with an OPENFGA_STORE_ID that is not a store id fails naming the variable, before it migrates anything', async () => {
  const database = await emptyDatabase();
  const { code, output } = await runCli({ DATABASE_URL: urlOf(database), OPENFGA_API_URL: 'http://127.0.0.1:1', OPENFGA_STORE_ID: 'outbox' });
  expect(code, output).toBe(1);
  expect(output).toContain('OPENFGA_STORE_ID is not an OpenFGA store id');
  expect(await migrated(database)).toBe(false);
});

test('pnpm migrate with a trailing slash in OPENFGA_API_URL reaches the same OpenFGA (the SDK would ask for //stores)', async () => {
  const database = await emptyDatabase();
  const stack = inject('outboxStack');
  const credentials = stack.openfgaPresharedKey ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } } : {};
  const { id: storeId } = await new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, ...credentials }).createStore({ name: `slash-${randomBytes(4).toString('hex')}` });
  const { code, output } = await runCli({
    DATABASE_URL: urlOf(database),
    OPENFGA_API_URL: `${stack.openfgaApiUrl}/`,
    OPENFGA_API_TOKEN: stack.openfgaPresharedKey,
    OPENFGA_STORE_ID: storeId,
  });
  expect(code, output).toBe(0);
  expect(output).toContain(`export OPENFGA_STORE_ID=${storeId}`);
});

/** A stand-in OpenFGA (stores and models only) whose store listing takes `listDelayMs`. */
async function fakeOpenFga(listDelayMs: number) {
  const stores: { id: string; name: string; created_at: string; updated_at: string }[] = [];
  const models = new Map<string, { id: string }[]>();
  const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
  let sequence = 0;
  const ulid = () => {
    sequence += 1;
    return `01${String(sequence).padStart(4, '0')}${Array.from({ length: 20 }, () => alphabet[Math.floor(Math.random() * 32)]).join('')}`;
  };
  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const body = async (req: IncomingMessage) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    return text ? JSON.parse(text) : {};
  };
  const http = createServer(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const now = new Date().toISOString();
    if (req.method === 'GET' && path === '/stores') {
      const snapshot = [...stores];
      await sleep(listDelayMs);
      return send(res, 200, { stores: snapshot, continuation_token: '' });
    }
    if (req.method === 'POST' && path === '/stores') {
      const { name } = (await body(req)) as { name: string };
      const store = { id: ulid(), name, created_at: now, updated_at: now };
      stores.push(store);
      return send(res, 201, store);
    }
    const store = /^\/stores\/([^/]+)(\/authorization-models)?$/.exec(path);
    const found = store && stores.find((s) => s.id === store[1]);
    if (!store || !found) return send(res, 404, { code: 'store_id_not_found', message: 'not found' });
    if (!store[2] && req.method === 'GET') return send(res, 200, found);
    if (store[2] && req.method === 'GET') return send(res, 200, { authorization_models: [...(models.get(found.id) ?? [])].reverse(), continuation_token: '' });
    if (store[2] && req.method === 'POST') {
      const model = { ...((await body(req)) as object), id: ulid() };
      models.set(found.id, [...(models.get(found.id) ?? []), model]);
      return send(res, 201, { authorization_model_id: model.id });
    }
    return send(res, 404, { code: 'undefined_endpoint', message: 'no' });
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  return { url: `http://127.0.0.1:${(http.address() as { port: number }).port}`, stores, close: () => new Promise((r) => http.close(r)) };
}

test('two pnpm migrate at once without OPENFGA_STORE_ID end with one store named outbox, and print the same ids', async () => {
  const database = await emptyDatabase();
  const fga = await fakeOpenFga(500);
  try {
    const env = { DATABASE_URL: urlOf(database), OPENFGA_API_URL: fga.url };
    expect((await runCli(env, ['--sql-only'])).code).toBe(0);
    const [a, b] = await Promise.all([runCli(env), runCli(env)]);
    expect(a.code, a.output).toBe(0);
    expect(b.code, b.output).toBe(0);
    expect(fga.stores.map((s) => s.name)).toEqual(['outbox']);
    const ids = (output: string) => [/export OPENFGA_STORE_ID=(\S+)/.exec(output)?.[1], /export OPENFGA_MODEL_ID=(\S+)/.exec(output)?.[1]];
    expect(ids(a.output)).toEqual(ids(b.output));
    // And a later run still works (it refused to guess between two stores of that name).
    const c = await runCli(env);
    expect(c.code, c.output).toBe(0);
    expect(c.output).toContain('authorization model unchanged');
  } finally {
    await fga.close();
  }
});
