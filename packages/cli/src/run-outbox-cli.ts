import { processIo, type CliIo } from './cli-io.js';
import type { CommandContext } from './command-context.js';
import { runCommandLine, type ExitBox } from './command-line.js';
import { checkConfig, type CheckedConfig, type OutboxCliConfig } from './config.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { explainError } from './explain-error.js';
import { outboxProgram, singleCommandProgram, type CommandName } from './program.js';

/** What {@link runOutboxCli} takes besides the arguments. */
export interface RunOutboxCliOptions {
  /** Where to read and write. Default: this process's streams, environment and working directory. */
  readonly io?: CliIo;
  /**
   * A config given in code. Default none: the `--config` file, the nearest config file, or the
   * `--table` flags. Given, the commands offer no --config, --outbox or --table.
   */
  readonly config?: OutboxCliConfig;
  /** What messages call a config given in code. Default: the program's name. */
  readonly configSource?: string;
  /** Run this one command as the program itself (e.g. `drain` for a service's `fga:drain`). Default: every command. */
  readonly command?: CommandName;
  /** The program's name in help and messages. Default `outbox`. */
  readonly name?: string;
}

/**
 * Runs the `outbox` command line on `argv` (the arguments after the program name) and resolves with
 * its exit code (0 ok, 1 problem found, 2 usage or configuration, 3 unreachable); it never exits the
 * process nor throws for an expected error.
 *
 * @example
 * // a service's fga:drain: `drain` on its own outbox, configured from the service's variables
 * process.exitCode = await runOutboxCli(process.argv.slice(2), {
 *   name: 'fga:drain',
 *   command: 'drain',
 *   config: { databaseUrl: '$DATABASE_URL', openfga: OPENFGA_ENV_CONFIG, outboxes: { vpc: { spec: vpcOutbox } } },
 * });
 */
export async function runOutboxCli(argv: readonly string[], options: RunOutboxCliOptions = {}): Promise<ExitCode> {
  const io = options.io ?? processIo();
  const name = options.name ?? 'outbox';
  let fixedConfig: CheckedConfig | undefined;
  try {
    fixedConfig = options.config
      ? checkConfig(options.config, options.configSource ?? name, { codeConfig: true })
      : undefined;
  } catch (error) {
    io.stderr.write(`${explainError(error).line(name)}\n`);
    return EXIT.usage;
  }
  const box: ExitBox = { code: EXIT.ok };
  const ctx: CommandContext = { io, name, box, fixedConfig };
  const program = options.command ? singleCommandProgram(ctx, options.command) : outboxProgram(ctx);
  return runCommandLine(program, argv, io, box);
}
