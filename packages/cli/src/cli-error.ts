import type { ExitCode } from './exit-codes.js';

/**
 * An expected failure of a command: printed as one line, `outbox: <message> (<hint>)`, never with a
 * stack, and the process exits with `exitCode`.
 *
 * @example
 * throw new CliError('no outbox named "vcp" in outbox.config.ts', 'have: iam, vpc', EXIT.usage);
 */
export class CliError extends Error {
  override readonly name = 'CliError';
  readonly hint: string | undefined;
  readonly exitCode: ExitCode;
  constructor(message: string, hint: string | undefined, exitCode: ExitCode, options?: { cause?: unknown }) {
    super(message, options);
    this.hint = hint;
    this.exitCode = exitCode;
  }

  /** The line printed on stderr. */
  line(programName: string): string {
    return `${programName}: ${this.message}${this.hint ? ` (${this.hint})` : ''}`;
  }
}
