// Runs the `outbox` bin as a child process through tsx, the way an operator runs it. Test-only.
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

/** What one run of the bin printed, and how it exited. */
export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** The outbox bin's source, run through tsx as `pnpm outbox` runs it. */
export const OUTBOX_BIN = fileURLToPath(new URL('../bin.ts', import.meta.url));
/** tsx's loader by absolute URL: `--import tsx` would resolve from the child's cwd, which may be any directory. */
const TSX_LOADER = import.meta.resolve('tsx');
/**
 * Node's arguments before the bin: the `@outbox/source` condition sends the workspace packages to
 * `src/` wherever the child runs (tsx reads tsconfig paths only from its cwd, and outside the
 * repository the packages would resolve to a `dist/` that exists only after a build).
 */
export const CLI_NODE_ARGS: readonly string[] = ['--conditions=@outbox/source', '--import', TSX_LOADER];

/**
 * Runs `entry` (default the outbox bin) with `args`, with only PATH and `env` in its environment
 * (nothing of the test runner's leaks in), in `cwd`; `input` is written to its stdin (not a terminal).
 */
export async function runCli(
  args: readonly string[],
  options: { env?: Record<string, string>; cwd?: string; entry?: string; input?: string } = {},
): Promise<CliRun> {
  const child = spawn(process.execPath, [...CLI_NODE_ARGS, options.entry ?? OUTBOX_BIN, ...args], {
    cwd: options.cwd ?? process.cwd(),
    env: { PATH: process.env.PATH ?? '', ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdin.end(options.input ?? '');
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

/** `--json`'s document, or a failure showing what was printed instead. */
export function jsonOf(run: CliRun): unknown {
  try {
    return JSON.parse(run.stdout);
  } catch {
    throw new Error(`not one JSON document on stdout (exit ${run.code}):\n${run.stdout}\nstderr:\n${run.stderr}`);
  }
}

/**
 * Runs the bin with `args` on a pseudo-terminal (util-linux `script`) and types `answer` to its
 * question; returns everything the terminal showed, then `exit=<code>`.
 */
export function runOnTerminal(args: readonly string[], answer: string): string {
  const command = [process.execPath, ...CLI_NODE_ARGS, OUTBOX_BIN, ...args].join(' ');
  return execFileSync('sh', ['-c', `printf '${answer}\\n' | script -qec "${command}" /dev/null; echo "exit=$?"`], {
    env: { PATH: process.env.PATH ?? '' },
    encoding: 'utf8',
  });
}
