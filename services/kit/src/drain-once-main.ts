import { createDrainer } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { outboxStats } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { ServiceConfigError } from './errors.js';
import { createServicePool } from './pool.js';
import { openFgaConnectionFromEnv } from './service-options.js';
import type { ServiceDefinition } from './service.js';

/**
 * `pnpm --filter @outbox/service-<name> fga:drain`: ONE drain pass over the service's outbox (no
 * timer, no LISTEN), printing each intent it delivered and what is left. For operators: deliver a
 * backlog by hand while the service is down, or see why it does not move. Reads DATABASE_URL and
 * the OPENFGA_* variables. Exits 1 when the pass failed or halted.
 */
export async function runDrainOnceMain(definition: ServiceDefinition, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const spec = definition.outbox;
  const databaseUrl = env.DATABASE_URL;
  if (!databaseUrl) throw new ServiceConfigError('DATABASE_URL', 'set it to the Postgres URL of the platform database');
  const openfga = openFgaConnectionFromEnv(env);
  const cliLogger = { info: () => undefined, warn: (message: string) => console.warn(message), error: (message: string) => console.error(message) };
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: createServicePool(databaseUrl, 2, cliLogger) }) });
  const delivered: string[] = [];
  let haltReason: string | undefined; // why the sink stopped the pass (credentials, a store without the model, …)
  const drainer = createDrainer({
    db,
    spec,
    sink: createOpenFgaSink({
      apiUrl: openfga.apiUrl,
      storeId: openfga.storeId,
      ...(openfga.authorizationModelId ? { authorizationModelId: openfga.authorizationModelId } : {}),
      ...(openfga.credentials ? { credentials: openfga.credentials } : {}),
    }),
    onEvent: (event) => {
      if (event.type === 'delivered') delivered.push(...event.ids);
      if (event.type === 'pass-failed' && event.halted) haltReason = event.error.message;
    },
  });
  try {
    const result = await drainer.drainOnce();
    const n = tableNames(spec);
    const rows = delivered.length === 0 ? [] : (await sql<{ id: string; key: string; payload: { writes?: unknown[]; deletes?: unknown[] } }>`
      select id, ${sql.raw(n.partition)} as key, payload from ${sql.raw(n.table)} where id = any(${delivered}::bigint[]) order by id`.execute(db)).rows;
    console.log(`${spec.table}: delivered ${result.delivered}, retried ${result.retried}, poisoned ${result.poisoned}${result.halted ? ` (HALTED, nothing counted: ${haltReason ?? 'the sink stopped the pass'})` : ''}`);
    for (const row of rows) {
      console.log(`  #${row.id} ${row.key}: ${row.payload.writes?.length ?? 0} write(s), ${row.payload.deletes?.length ?? 0} delete(s)`);
    }
    const stats = await outboxStats(db, spec);
    console.log(`left: ${stats.deliverable} deliverable, ${stats.poisoned} poisoned (${stats.superseded} superseded), ${stats.retired} retired`);
    if (result.halted) process.exitCode = 1;
  } finally {
    await drainer.stop();
    await db.destroy();
  }
}
