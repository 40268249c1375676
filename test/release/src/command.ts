import { execFile } from 'node:child_process';

/** What a finished command printed, and how it ended. */
export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Where and how a command runs. */
export interface CommandOptions {
  readonly cwd: string;
  /** The whole environment of the command (not merged with this process's). */
  readonly env: NodeJS.ProcessEnv;
  /** Killed after this long. Default 120 s: an install or a build that takes longer is stuck. */
  readonly timeoutMs?: number;
}

/** Runs `command` to its end and resolves with its output, whatever its exit code. */
export function runCommand(command: string, args: readonly string[], options: CommandOptions): Promise<CommandResult> {
  const timeout = options.timeoutMs ?? 120_000;
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { cwd: options.cwd, env: options.env, timeout, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (!error) return resolve({ code: 0, stdout, stderr });
        // A number is the exit code; anything else (ENOENT, a timeout's kill) never got one.
        if (typeof error.code === 'number') return resolve({ code: error.code, stdout, stderr });
        resolve({
          code: -1,
          stdout,
          stderr: `${stderr}\n${error.killed ? `killed after ${timeout} ms` : error.message}`,
        });
      },
    );
  });
}

/** Runs `command` and resolves with its stdout; rejects with everything it printed when it fails. */
export async function mustRun(command: string, args: readonly string[], options: CommandOptions): Promise<string> {
  const result = await runCommand(command, args, options);
  if (result.code !== 0) {
    throw new Error(
      `\`${[command, ...args].join(' ')}\` in ${options.cwd} exited with ${result.code}:\n${result.stdout}\n${result.stderr}`,
    );
  }
  return result.stdout;
}
