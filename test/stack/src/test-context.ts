import { randomBytes } from 'node:crypto';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { Kysely, PostgresDialect, type ControlledTransaction } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { createDatabase, dropDatabase } from './databases.js';
import type { ProvidedStack } from './provided.js';

function provided(): ProvidedStack {
  const stack = inject('outboxStack');
  if (!stack) throw new Error('the test stack is not running: run tests through the root vitest config (pnpm test)');
  return stack;
}

function late<T extends object>(what: string, value: () => T | undefined): T {
  return new Proxy({} as T, {
    get(_target, property) {
      const current = value();
      if (current === undefined) throw new Error(`${what} is ready only inside tests and hooks (after beforeAll)`);
      const field = (current as Record<string | symbol, unknown>)[property];
      return typeof field === 'function' ? (field as (...a: unknown[]) => unknown).bind(current) : field;
    },
  });
}

/** A database of the test file's own, cloned from the migrated template. */
export interface TestDatabase {
  /** Superuser URL to this file's database. */
  readonly url: string;
  readonly name: string;
  /** A Kysely instance on a shared pool, destroyed after the file. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly db: Kysely<any>;
  /** A new pg pool on this database (closed after the file if you forget). */
  pool(config?: pg.PoolConfig): pg.Pool;
  /** A new Kysely on its own pool (destroyed after the file if you forget). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  kysely(config?: pg.PoolConfig): Kysely<any>;
  /**
   * Runs `work` with `count` open transactions, each on its own connection, for interleaving tests;
   * afterwards rolls back, in order, those `work` did not end (an earlier one may hold a lock a later
   * one waits on) and closes the connections.
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  withTransactions(count: number, work: (trxs: ControlledTransaction<any>[]) => Promise<void>): Promise<void>;
}

/**
 * Gives the calling test file its own database (`CREATE DATABASE … TEMPLATE`), dropped after it.
 *
 * @example
 * const t = useTestDatabase();
 * test('…', async () => { await t.db.selectFrom('…') });
 */
export function useTestDatabase(): TestDatabase {
  let current: TestDatabase | undefined;
  const pools: pg.Pool[] = [];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const kyselys: Kysely<any>[] = [];
  beforeAll(async () => {
    const stack = provided();
    const name = `t_${randomBytes(6).toString('hex')}`;
    const url = await createDatabase(stack.postgresUrl, name, stack.templateDatabase);
    // An idle client whose connection is cut (the drop at the end) must not crash the worker.
    const newPool = (config?: pg.PoolConfig) =>
      new pg.Pool({ connectionString: url, ...config }).on('error', () => undefined);
    const pool = (config?: pg.PoolConfig) => {
      const p = newPool(config);
      pools.push(p);
      return p;
    };
    const kysely = (config?: pg.PoolConfig) => {
      const k = new Kysely({ dialect: new PostgresDialect({ pool: newPool(config) }) });
      kyselys.push(k);
      return k;
    };
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const withTransactions = async (count: number, work: (trxs: ControlledTransaction<any>[]) => Promise<void>) => {
      const dbs = Array.from({ length: count }, () => kysely({ max: 1 }));
      const trxs = await Promise.all(dbs.map((db) => db.startTransaction().execute()));
      try {
        await work(trxs);
      } finally {
        for (const trx of trxs) {
          if (!trx.isCommitted && !trx.isRolledBack)
            await trx
              .rollback()
              .execute()
              .catch(() => undefined);
        }
        await Promise.all(dbs.map((db) => db.destroy()));
      }
    };
    current = { url, name, db: kysely(), pool, kysely, withTransactions };
  });
  afterAll(async () => {
    for (const k of kyselys) await k.destroy();
    for (const p of pools) if (!p.ended) await p.end();
    if (current) {
      // pool.end() resolves before the server has seen every connection go: wait for that, so the
      // forced drop below does not cut a connection that is still closing.
      await waitForNoSessions(provided().postgresUrl, current.name);
      await dropDatabase(provided().postgresUrl, current.name);
    }
    current = undefined;
  });
  return late('useTestDatabase()', () => current);
}

async function waitForNoSessions(serverUrl: string, database: string, timeoutMs = 3_000): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const { rows } = await client.query<{ n: number }>(
        'select count(*)::int as n from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
        [database],
      );
      if (rows[0]?.n === 0) return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  } finally {
    await client.end();
  }
}

/** An OpenFGA store of the test file's own, with the project's authorization model loaded. */
export interface TestStore {
  readonly apiUrl: string;
  readonly storeId: string;
  readonly authorizationModelId: string;
  /** A client bound to the store and model. */
  readonly client: OpenFgaClient;
}

/** Client options for the stack's OpenFGA (with its bearer key when it has one). */
export function openFgaClientConfig(storeId?: string, authorizationModelId?: string) {
  const stack = provided();
  return {
    apiUrl: stack.openfgaApiUrl,
    ...(storeId ? { storeId } : {}),
    ...(authorizationModelId ? { authorizationModelId } : {}),
    ...(stack.openfgaPresharedKey
      ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } }
      : {}),
  };
}

/**
 * Gives the calling test file its own OpenFGA store with the project's model (from the global setup) loaded.
 *
 * @example
 * const fga = useOpenFgaStore();
 * test('…', async () => { await fga.client.check({ user: 'user:a', relation: 'viewer', object: 'vpc:1' }) });
 */
export function useOpenFgaStore(): TestStore {
  let current: TestStore | undefined;
  beforeAll(async () => {
    const admin = new OpenFgaClient(openFgaClientConfig());
    const { id: storeId } = await admin.createStore({ name: `test-${randomBytes(4).toString('hex')}` });
    const scoped = new OpenFgaClient(openFgaClientConfig(storeId));
    const { authorization_model_id: authorizationModelId } = await scoped.writeAuthorizationModel(
      provided().authorizationModel,
    );
    current = {
      apiUrl: provided().openfgaApiUrl,
      storeId,
      authorizationModelId,
      client: new OpenFgaClient(openFgaClientConfig(storeId, authorizationModelId)),
    };
  });
  afterAll(async () => {
    if (current) await current.client.deleteStore().catch(() => undefined);
    current = undefined;
  });
  return late('useOpenFgaStore()', () => current);
}

/** The running stack's addresses, for tests that start their own drainer or sink. */
export function stackInfo(): ProvidedStack {
  return provided();
}
