import { Command, CommanderError, InvalidArgumentError } from 'commander';
import type { CliIo } from './cli-io.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { explainError } from './explain-error.js';

/**
 * A commander program with the discipline every command line of this repository keeps (`outbox`,
 * each service's `fga:drain`, `pnpm migrate`): `--help` on every command, an unknown flag or a
 * stray argument refused with one line and exit 2, errors as `<name>: <what> (<hint>)`, never a
 * stack. Build commands with `program.command(…)` so they inherit it, then run it with
 * {@link runCommandLine}.
 *
 * @example
 * const program = createCommandLine('migrate', 'Applies the migrations.', processIo());
 * program.option('--sql-only', 'skip OpenFGA').action(() => { … });
 * process.exitCode = await runCommandLine(program, process.argv.slice(2), processIo());
 */
export function createCommandLine(name: string, description: string, io: CliIo): Command {
  return new Command(name)
    .description(description)
    .exitOverride()
    .allowExcessArguments(false)
    .showSuggestionAfterError(true)
    .configureOutput({
      writeOut: (text) => void io.stdout.write(text),
      writeErr: (text) => void io.stderr.write(text),
      // runCommandLine prints the one line itself, with the hint.
      outputError: () => undefined,
    });
}

/** commander's message as one line: `unknown option '--sql-onyl' (Did you mean --sql-only?)` → one sentence. */
function usageMessage(error: CommanderError): string {
  return error.message
    .replace(/^error: /, '')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .join(' ')
    .replace(/ \(Did you mean (.*)\?\)/, '; did you mean $1?');
}

/** The code an action asks the process to exit with: actions return it through this box. */
export interface ExitBox {
  code: ExitCode;
}

/**
 * Wraps an action so that its result becomes the exit code (commander ignores return values).
 *
 * @example
 * program.command('status').action(exitWith(box, async (options) => (await status(options)) ? EXIT.ok : EXIT.problem));
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function exitWith<A extends any[]>(
  box: ExitBox,
  action: (...args: A) => Promise<ExitCode>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    box.code = await action(...args);
  };
}

/**
 * Parses `argv` (the arguments after the program name) and runs the action; resolves with the exit
 * code. Usage errors print one line with a pointer to `--help` (exit 2); errors an action throws go
 * through `explainError` (one line; the stack only with OUTBOX_DEBUG=1).
 */
export async function runCommandLine(
  program: Command,
  argv: readonly string[],
  io: CliIo,
  box: ExitBox = { code: EXIT.ok },
): Promise<ExitCode> {
  let command = program.name();
  program.hook('preSubcommand', (_parent, sub) => {
    command = `${program.name()} ${sub.name()}`;
  });
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return box.code;
  } catch (error) {
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version') return EXIT.ok;
      // No command given: commander printed the help on stderr.
      if (error.code === 'commander.help') return EXIT.usage;
      io.stderr.write(`${program.name()}: ${usageMessage(error)} (see ${command} --help)\n`);
      return EXIT.usage;
    }
    const explained = explainError(error);
    io.stderr.write(`${explained.line(program.name())}\n`);
    if (io.env.OUTBOX_DEBUG === '1') io.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    return explained.exitCode;
  }
}

/**
 * An option parser for whole numbers from `min` to `max`, refusing anything else with commander's
 * one-line usage error (`--limit abc` is not 0).
 *
 * @example
 * program.option('--limit <n>', 'rows per outbox', integerArgument(1, 10_000), 50);
 */
export function integerArgument(min: number, max: number): (value: string) => number {
  return (value) => {
    if (!/^[0-9]{1,15}$/.test(value) || Number(value) < min || Number(value) > max) {
      throw new InvalidArgumentError(`expected a whole number from ${min} to ${max}.`);
    }
    return Number(value);
  };
}
