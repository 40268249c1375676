import { verifyOutboxTable } from '@outbox/outbox';
import { sql } from 'kysely';
import { expect, test } from 'vitest';
import { migrateToLatest, migrations } from './migrate.js';
import { useScratchDatabases } from './testing/scratch-databases.js';
import { computeOutbox, iamOutbox, nlbOutbox, registryOutbox, storageOutbox, vpcOutbox } from './specs.js';

const scratch = useScratchDatabases();

test('the migrations run as a role that owns its (pre-created) schemas but may not create schemas in the database (PostgreSQL 15+ default)', async () => {
  const database = await scratch.create();
  const role = await scratch.role();
  // A DBA's setup: one schema per service, owned by the migration role; the migrations' own table in public.
  for (const schema of ['iam', 'vpc', 'compute', 'nlb', 'storage', 'registry']) {
    await scratch.admin(`create schema ${schema} authorization ${role.name}`, database);
  }
  await scratch.admin(`grant create on schema public to ${role.name}`, database);
  const db = scratch.open(database, { role });
  const privileges = await sql<{
    create: boolean;
  }>`select has_database_privilege(current_user, current_database(), 'CREATE') as create`.execute(db);
  expect(privileges.rows).toEqual([{ create: false }]);
  expect(await migrateToLatest(db)).toEqual(Object.keys(migrations));
  for (const spec of [iamOutbox, vpcOutbox, computeOutbox, nlbOutbox, storageOutbox, registryOutbox])
    await verifyOutboxTable(db, spec);
});
