// Empty databases for the migrations' tests. Test-only.
import { randomBytes } from 'node:crypto';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, inject } from 'vitest';

/** A role to connect as instead of the server's superuser. */
export interface ScratchRole {
  readonly name: string;
  readonly password: string;
}

/**
 * Empty databases (and roles) on the stack's Postgres for one test file, dropped after it with the
 * pools opened on them. This package cannot use @outbox/test-stack's per-file clones: their
 * template is migrated already, and these tests are about migrating.
 */
export function useScratchDatabases() {
  const databases: string[] = [];
  const roles: string[] = [];
  const kyselys: Kysely<unknown>[] = [];
  const urlOf = (database: string, role?: ScratchRole) => {
    const url = Object.assign(new URL(inject('outboxStack').postgresUrl), { pathname: `/${database}` });
    if (role) Object.assign(url, { username: role.name, password: role.password });
    return url.toString();
  };
  const admin = async (statement: string, database = 'postgres') => {
    const client = new pg.Client({ connectionString: urlOf(database) });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  afterAll(async () => {
    for (const db of kyselys) await db.destroy();
    for (const name of databases) await admin(`drop database if exists "${name}" with (force)`);
    for (const role of roles) await admin(`drop role if exists ${role}`);
  });
  return {
    urlOf,
    /** Runs one statement as the superuser, in `database` (default `postgres`). */
    admin,
    /** A new empty database; returns its name. */
    async create(): Promise<string> {
      const name = `m_${randomBytes(6).toString('hex')}`;
      await admin(`create database "${name}"`);
      databases.push(name);
      return name;
    },
    /** A new login role, dropped after the file. */
    async role(): Promise<ScratchRole> {
      const role = { name: `m_owner_${randomBytes(4).toString('hex')}`, password: 'pw' };
      await admin(`create role ${role.name} login password '${role.password}'`);
      roles.push(role.name);
      return role;
    },
    /** A Kysely on `database`, closed after the file. */
    open(database: string, options: { max?: number; role?: ScratchRole } = {}): Kysely<unknown> {
      const pool = new pg.Pool({ connectionString: urlOf(database, options.role), max: options.max ?? 1 });
      // Databases are dropped WITH (FORCE): a client still closing then gets the server's 57P01,
      // which must not surface as an uncaught error of the run.
      pool.on('error', () => undefined);
      pool.on('connect', (client) => client.on('error', () => undefined));
      const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
      kyselys.push(db);
      return db;
    },
  };
}
