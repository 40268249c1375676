import { resolve } from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { CliError } from './cli-error.js';
import type { CliIo } from './cli-io.js';
import type { ExitBox } from './command-line.js';
import { integerArgument } from './command-line.js';
import { findConfigFile, loadConfigFile, CONFIG_FILE_NAMES } from './config-file.js';
import { checkConfig, type CheckedConfig, type OpenFgaConfig } from './config.js';
import { docsUrl } from './docs-url.js';
import { EXIT } from './exit-codes.js';
import { withTargets, type Target } from './targets.js';

/**
 * The OpenFGA connection from the variables the example services read (OPENFGA_API_URL,
 * OPENFGA_STORE_ID, OPENFGA_MODEL_ID, OPENFGA_API_TOKEN): what `--table` mode and `fga:drain` use.
 */
export const OPENFGA_ENV_CONFIG: OpenFgaConfig = Object.freeze({
  apiUrl: '$OPENFGA_API_URL',
  storeId: '$OPENFGA_STORE_ID',
  authorizationModelId: '${OPENFGA_MODEL_ID:-}',
  apiToken: '${OPENFGA_API_TOKEN:-}',
});

/** What every command's action is given besides its options. */
export interface CommandContext {
  readonly io: CliIo;
  /** The program's name, for messages (`outbox`, `fga:drain`). */
  readonly name: string;
  readonly box: ExitBox;
  /** A config fixed by the caller (`fga:drain`): the command then has no --config/--outbox/--table options. */
  readonly fixedConfig: CheckedConfig | undefined;
}

/** The options {@link addTargetOptions} adds. */
export interface TargetOptions {
  readonly config?: string;
  readonly outbox?: string[];
  readonly databaseUrl?: string;
  readonly table?: string;
  readonly partitionColumn?: string;
  readonly maxAttempts?: number;
}

/** For a repeatable option: each value appended, in order. */
export const collect = (value: string, previous: string[] | undefined) => [...(previous ?? []), value];

/** For a command that works on one outbox: `--outbox` once, kept as a list of one; a second one is a usage error. */
const onlyOne = (value: string, previous: string[] | undefined) => {
  if (previous !== undefined)
    throw new InvalidArgumentError(
      `this command works on one outbox: give --outbox once (got ${previous[0]} and ${value})`,
    );
  return [value];
};

/** What {@link addTargetOptions} offers besides the target. */
export interface TargetOptionsShape {
  /** Offer `--json`. Default true. */
  readonly json?: boolean;
  /** `many`: `--outbox` repeatable, all outboxes by default; `one`: once, for a command on one outbox (show, retire). Default `many`. */
  readonly outboxes?: 'many' | 'one';
}

/** Adds the options that choose what a command works on (unless the config is fixed). */
export function addTargetOptions(command: Command, ctx: CommandContext, shape: TargetOptionsShape = {}): Command {
  if (shape.json ?? true)
    command.option('--json', `print one JSON document on stdout (schema in ${docsUrl('cli.md#json-output')})`);
  if (ctx.fixedConfig) return command;
  const outbox =
    shape.outboxes === 'one'
      ? new Option('--outbox <name>', 'the outbox of the config to work on (default: the only one)').argParser(onlyOne)
      : new Option('--outbox <name>', 'an outbox of the config; repeat for several (default: all)').argParser(collect);
  return command
    .option(
      '--config <path>',
      `config file (default: the nearest ${CONFIG_FILE_NAMES.join(', ')} from the working directory up)`,
    )
    .addOption(outbox)
    .option('--database-url <url>', 'without a config file: the Postgres URL of one outbox (with --table)')
    .option(
      '--table <schema.table>',
      'without a config file: the outbox table (with --database-url and --partition-column)',
    )
    .option('--partition-column <column>', 'with --table: the partition column (resource_id, tuple_key, …)')
    .addOption(
      new Option(
        '--max-attempts <n>',
        "with --table: the spec's maxAttempts (default: the one the table records)",
      ).argParser(integerArgument(1, 1_000)),
    );
}

/**
 * The config a command works with: the caller's fixed one, the `--table` flags, `--config`, or the
 * nearest config file. Each fault is a usage error (exit 2) naming what to fix.
 */
export async function loadTargetConfig(options: TargetOptions, ctx: CommandContext): Promise<CheckedConfig> {
  if (ctx.fixedConfig) return ctx.fixedConfig;
  const flags =
    options.databaseUrl !== undefined || options.table !== undefined || options.partitionColumn !== undefined;
  if (flags) {
    if (options.config !== undefined || options.outbox !== undefined) {
      throw new CliError(
        '--table and --database-url describe one outbox without a config file: leave out --config and --outbox',
        undefined,
        EXIT.usage,
      );
    }
    const missing = [
      options.databaseUrl ? undefined : '--database-url',
      options.table ? undefined : '--table',
      options.partitionColumn ? undefined : '--partition-column',
    ].filter(Boolean);
    if (missing.length > 0)
      throw new CliError(
        `without a config file, ${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} needed too`,
        'or pass --config',
        EXIT.usage,
      );
    const table = options.table as string;
    const checked = checkConfig(
      {
        databaseUrl: options.databaseUrl,
        openfga: OPENFGA_ENV_CONFIG,
        outboxes: {
          [table]: {
            table,
            partitionColumn: options.partitionColumn,
            ...(options.maxAttempts ? { maxAttempts: options.maxAttempts } : {}),
          },
        },
      },
      '--table',
      { codeConfig: false },
    );
    return options.maxAttempts
      ? checked
      : { ...checked, outboxes: checked.outboxes.map((o) => ({ ...o, maxAttemptsFromTable: true })) };
  }
  const path = options.config !== undefined ? resolve(ctx.io.cwd, options.config) : findConfigFile(ctx.io.cwd);
  if (path === undefined) {
    throw new CliError(
      `no config file found (looked for ${CONFIG_FILE_NAMES.join(', ')} from ${ctx.io.cwd} up)`,
      'pass --config, or --database-url with --table and --partition-column',
      EXIT.usage,
    );
  }
  return loadConfigFile(path);
}

/**
 * Loads the config, opens the outboxes the options select (`pick` narrows them, e.g. to the one
 * outbox `show` needs), runs `work`, and closes the databases.
 */
export async function onTargets<T>(
  options: TargetOptions,
  ctx: CommandContext,
  work: (targets: readonly Target[], config: CheckedConfig) => Promise<T>,
  pick: (config: CheckedConfig) => readonly string[] | undefined = () => options.outbox,
): Promise<T> {
  const config = await loadTargetConfig(options, ctx);
  return withTargets(config, pick(config), ctx.io.env, (targets) => work(targets, config));
}

/** Prints the command's one JSON document. */
export function printJson(io: CliIo, document: unknown): void {
  io.stdout.write(`${JSON.stringify(document, null, 2)}\n`);
}
