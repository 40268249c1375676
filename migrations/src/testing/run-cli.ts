// Runs `pnpm migrate` (src/cli.ts) as a child process, the way an operator does. Test-only.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

/**
 * Runs the migrate CLI with this process's environment overlaid by `env` (an undefined value unsets
 * the variable) and `args`; resolves with its exit code and everything it printed.
 */
export async function runMigrateCli(
  env: Record<string, string | undefined>,
  args: string[] = [],
): Promise<{ code: number | null; output: string }> {
  const merged: Record<string, string | undefined> = { ...process.env, ...env };
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('../cli.ts', import.meta.url)), ...args],
    {
      env: Object.fromEntries(
        Object.entries(merged).filter((entry): entry is [string, string] => entry[1] !== undefined),
      ),
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, output };
}
