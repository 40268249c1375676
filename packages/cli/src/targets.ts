import { defineOutbox, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { recordedMaxAttempts } from '@outbox/outbox/protocol';
import type { OutboxOwner } from '@outbox/reconciler';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { CliError } from './cli-error.js';
import type { CheckedConfig } from './config.js';
import { expandEnv } from './env-refs.js';
import { EXIT } from './exit-codes.js';
import { explainError, isUnreachable, networkReason } from './explain-error.js';
import { maskUrl } from './mask-url.js';

/** One outbox a command works on, with an open database. */
export interface Target {
  readonly name: string;
  readonly spec: OutboxSpec;
  readonly owner: OutboxOwner | undefined;
  /** The database URL, password masked: what may be printed. */
  readonly database: string;
  /** The full URL (the drainer's LISTEN connection needs it). Never printed. */
  readonly databaseUrl: string;
  readonly db: AnyKysely;
}

/** The outboxes `--outbox` names (repeatable), in config order; all of them when none is named. */
export function selectOutboxes(config: CheckedConfig, names: readonly string[] | undefined) {
  if (!names || names.length === 0) return config.outboxes;
  const have = config.outboxes.map((o) => o.name);
  const unknown = names.find((name) => !have.includes(name));
  if (unknown !== undefined)
    throw new CliError(`no outbox named "${unknown}" in ${config.source}`, `have: ${have.join(', ')}`, EXIT.usage);
  return config.outboxes.filter((o) => names.includes(o.name));
}

/** How long a first connection may take before the server counts as unreachable (exit 3). */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Opens the selected outboxes' databases (one small pool per distinct URL), checks each answers,
 * runs `work`, and closes them all, whatever happened. A database that does not answer is exit 3,
 * one that refuses the login exit 2, each naming the masked URL.
 */
export async function withTargets<T>(
  config: CheckedConfig,
  names: readonly string[] | undefined,
  env: NodeJS.ProcessEnv,
  work: (targets: readonly Target[]) => Promise<T>,
): Promise<T> {
  const selected = selectOutboxes(config, names);
  const pools = new Map<string, AnyKysely>();
  try {
    const targets: Target[] = [];
    for (const outbox of selected) {
      const field = outbox.databaseUrlField;
      const url = expandEnv(field, outbox.databaseUrl as string, env, config.source);
      if (url === undefined) throw new CliError(`${config.source}: ${field} is empty`, undefined, EXIT.usage);
      if (!/^postgres(ql)?:\/\//.test(url))
        throw new CliError(
          `${config.source}: ${field} is not a postgres:// URL: ${maskUrl(url)}`,
          undefined,
          EXIT.usage,
        );
      let db = pools.get(url);
      if (!db) {
        const pool = new pg.Pool({ connectionString: url, max: 3, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
        pool.on('error', () => undefined); // a connection lost while idle: the next query reports it
        db = new Kysely({ dialect: new PostgresDialect({ pool }) });
        pools.set(url, db);
        await sql`select 1`.execute(db).catch((error: unknown) => {
          if (isUnreachable(error))
            throw new CliError(
              `Postgres at ${maskUrl(url)} did not answer: ${networkReason(error)}`,
              'is it running, and is the URL right?',
              EXIT.unreachable,
              { cause: error },
            );
          const explained = explainError(error);
          throw new CliError(`Postgres at ${maskUrl(url)}: ${explained.message}`, explained.hint, explained.exitCode, {
            cause: error,
          });
        });
      }
      const recorded = outbox.maxAttemptsFromTable ? await recordedMaxAttempts(db, outbox.spec) : undefined;
      const spec =
        recorded === undefined || recorded === outbox.spec.maxAttempts
          ? outbox.spec
          : defineOutbox({ ...outbox.spec, maxAttempts: recorded });
      targets.push({ name: outbox.name, spec, owner: outbox.owner, database: maskUrl(url), databaseUrl: url, db });
    }
    return await work(targets);
  } finally {
    for (const db of pools.values()) await db.destroy().catch(() => undefined);
  }
}

/** The one outbox a command about ids needs (`show`, `retire`): ids are per table. */
export function onlyOutbox(config: CheckedConfig, names: readonly string[] | undefined, command: string): string[] {
  const selected = selectOutboxes(config, names);
  if (selected.length !== 1) {
    throw new CliError(
      `${command} works on one outbox, and ${selected.length} are selected`,
      `pass --outbox with one of: ${selected.map((o) => o.name).join(', ')}`,
      EXIT.usage,
    );
  }
  return [selected[0]?.name as string];
}
