import { OPENFGA_ENV_CONFIG, processIo, runOutboxCli } from '@outbox/cli';
import type { ServiceDefinition } from './service.js';

/**
 * `pnpm --filter @outbox/service-<name> fga:drain [--until-empty] [--json]`: `outbox drain` on the
 * service's own outbox (docs/cli.md), configured from the variables the service reads
 * (DATABASE_URL, OPENFGA_API_URL, OPENFGA_STORE_ID, OPENFGA_MODEL_ID, OPENFGA_API_TOKEN). For
 * operators: deliver a backlog by hand while the service is down, or see why it does not move.
 * `--help` says the rest; a bad flag or a missing variable is one line and exit 2; the exit code is
 * 1 when an intent was poisoned or the sink halted, 3 when Postgres or OpenFGA does not answer.
 *
 * @example
 * // services/vpc/src/fga-drain.ts
 * await runDrainOnceMain(vpcService, process.env, process.argv.slice(2));
 */
export async function runDrainOnceMain(
  definition: ServiceDefinition,
  env: NodeJS.ProcessEnv = process.env,
  argv: readonly string[] = [],
): Promise<void> {
  const code = await runOutboxCli(argv, {
    name: 'fga:drain',
    command: 'drain',
    configSource: `the ${definition.name} service`,
    io: { ...processIo(), env },
    config: {
      databaseUrl: '$DATABASE_URL',
      openfga: OPENFGA_ENV_CONFIG,
      outboxes: { [definition.name]: { spec: definition.outbox } },
    },
  });
  if (code !== 0) process.exitCode = code;
}
