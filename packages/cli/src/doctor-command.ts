import type { Command } from 'commander';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import {
  channelCheck,
  longTransactionsCheck,
  migrationsCheck,
  partitionColumnCheck,
  tableCheck,
} from './doctor-checks.js';
import { CliError } from './cli-error.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { checkOpenFga, openFgaConnection } from './openfga-connection.js';
import type { DoctorCheck, DoctorOutput } from './output-schemas.js';

interface DoctorOptions extends TargetOptions {
  readonly json?: boolean;
  readonly longTransactionMinutes: number;
}

const MARK: Record<DoctorCheck['status'], string> = { pass: 'ok  ', fail: 'FAIL', warn: 'warn', skip: 'skip' };

/** The SQL under a check, indented past the arrow: SQL reads the same indented, so it runs as printed. */
const SQL_INDENT = ' '.repeat(8);

function checkLine(c: DoctorCheck): string {
  const sql = c.sql ? `\n${c.sql.replace(/^/gm, SQL_INDENT)}` : '';
  return `${MARK[c.status]}  ${c.outbox ? `${c.outbox}: ` : ''}${c.check}: ${c.detail}${c.fix ? `\n      → ${c.fix}` : ''}${sql}`;
}

/** OpenFGA's store and model, as the drain and audit will use them; unreachable is remembered for exit 3. */
async function openFgaCheck(
  ctx: CommandContext,
  options: DoctorOptions,
  config: Parameters<typeof openFgaConnection>[0],
): Promise<{ check: Omit<DoctorCheck, 'outbox' | 'check'>; unreachable: boolean }> {
  if (!config.openfga)
    return {
      check: {
        status: 'skip',
        detail: `${config.source} has no openfga section: drain, audit and repair are unavailable`,
        fix: null,
        sql: null,
      },
      unreachable: false,
    };
  try {
    const connection = openFgaConnection(config, ctx.io.env, 'doctor');
    const modelId = await checkOpenFga(connection);
    return {
      check: {
        status: 'pass',
        detail: `store ${connection.storeId} at ${connection.apiUrl}, model ${modelId}`,
        fix: null,
        sql: null,
      },
      unreachable: false,
    };
  } catch (error) {
    if (!(error instanceof CliError)) throw error;
    return {
      check: {
        status: 'fail',
        detail: error.message,
        fix: error.hint ?? 'check the openfga section of the config',
        sql: null,
      },
      unreachable: error.exitCode === EXIT.unreachable,
    };
  }
}

/** `outbox doctor`: is everything in place for the outboxes to drain? */
export function defineDoctor(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary('check tables, migrations, OpenFGA, long transactions, LISTEN')
    .description(
      'Checks, one pass/fail line each with what to do: each outbox table against the contract, its partition column, who LISTENs ' +
        'on its channel; per database the migrations (when the config names them) and long transactions holding back vacuum; ' +
        'the OpenFGA store and model. Exit 1 on any failure, 3 when OpenFGA or Postgres does not answer.',
    )
    .option(
      '--long-transaction-minutes <n>',
      'a transaction open longer than this holds back vacuum (0: any)',
      integerArgument(0, 100_000),
      5,
    )
    .action(
      exitWith(ctx.box, async (options: DoctorOptions): Promise<ExitCode> => {
        return onTargets(options, ctx, async (targets, config) => {
          const checks: DoctorCheck[] = [];
          const add = (outbox: string | null, check: string, result: Omit<DoctorCheck, 'outbox' | 'check'>) => {
            const full = { outbox, check, ...result };
            checks.push(full);
            if (!options.json) ctx.io.stdout.write(`${checkLine(full)}\n`);
          };
          for (const target of targets) {
            add(target.name, 'table', await tableCheck(target));
            add(target.name, 'partition column', await partitionColumnCheck(target));
            add(target.name, 'listen channel', await channelCheck(target));
          }
          const databases = [...new Map(targets.map((t) => [t.databaseUrl, t])).values()];
          for (const target of databases) {
            add(null, `migrations (${target.database})`, await migrationsCheck(target, config));
            add(
              null,
              `long transactions (${target.database})`,
              await longTransactionsCheck(target, options.longTransactionMinutes),
            );
          }
          const openfga = await openFgaCheck(ctx, options, config);
          add(null, 'openfga', openfga.check);
          const ok = checks.every((c) => c.status !== 'fail');
          if (options.json) printJson(ctx.io, { ok, checks } satisfies DoctorOutput);
          if (openfga.unreachable) return EXIT.unreachable;
          return ok ? EXIT.ok : EXIT.problem;
        });
      }),
    );
  return command;
}
