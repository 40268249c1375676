import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CliError } from './cli-error.js';
import { checkConfig, type CheckedConfig } from './config.js';
import { EXIT } from './exit-codes.js';

/** The names looked for in each directory, from the cwd upward; the first found wins. */
export const CONFIG_FILE_NAMES = ['outbox.config.ts', 'outbox.config.mjs', 'outbox.config.json'] as const;

/** The nearest config file at or above `cwd`, or undefined. */
export function findConfigFile(cwd: string): string | undefined {
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    for (const name of CONFIG_FILE_NAMES) {
      const path = join(dir, name);
      if (existsSync(path)) return path;
    }
    if (dirname(dir) === dir) return undefined;
  }
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message.split('\n')[0] : String(error));

/**
 * Loads and checks a config file. JSON is parsed; `.ts` and `.mjs` are imported (Node ≥ 22.18
 * strips a `.ts` file's types itself; under tsx, tsx does) and their default export is the config.
 */
export async function loadConfigFile(path: string): Promise<CheckedConfig> {
  if (!existsSync(path))
    throw new CliError(
      `config file ${path} does not exist`,
      'pass --config with a path to outbox.config.ts, .mjs or .json',
      EXIT.usage,
    );
  if (path.endsWith('.json')) {
    let raw: unknown;
    try {
      raw = JSON.parse(await readFile(path, 'utf8'));
    } catch (error) {
      throw new CliError(`${path}: not valid JSON: ${messageOf(error)}`, undefined, EXIT.usage, { cause: error });
    }
    return checkConfig(raw, path, { codeConfig: false });
  }
  if (!path.endsWith('.ts') && !path.endsWith('.mjs') && !path.endsWith('.js')) {
    throw new CliError(`config file ${path}: expected a .ts, .mjs or .json file`, undefined, EXIT.usage);
  }
  let module: { default?: unknown };
  try {
    module = (await import(pathToFileURL(path).href)) as { default?: unknown };
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(
      `${path} failed to load: ${messageOf(error)}`,
      'run it with `node` to see the whole error',
      EXIT.usage,
      { cause: error },
    );
  }
  if (module.default === undefined)
    throw new CliError(`${path}: no default export`, 'export default defineConfig({ … })', EXIT.usage);
  return checkConfig(module.default, path, { codeConfig: true });
}
