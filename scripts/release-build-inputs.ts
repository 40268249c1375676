// What a package's dist/ was built from, recorded by the build (tsup.config.base.ts) and checked by
// the prepack (release-prepack.ts): by content, so a dist restored from turbo's cache, older than a
// source file that was touched but not changed, still counts as fresh, and a changed one never does.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Where the build records its inputs, relative to the package (kept out of the tarball by `files`). */
export const BUILD_INPUTS_FILE = 'dist/build-inputs.json';

/** The sha256 of every file under `src/` except tests, by path relative to `packageDir`. */
export function buildInputs(packageDir: string): Record<string, string> {
  const inputs: Record<string, string> = {};
  const files = readdirSync(join(packageDir, 'src'), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && !entry.name.endsWith('.test.ts'))
    .map((entry) => join(entry.parentPath, entry.name))
    .sort();
  for (const file of files)
    inputs[relative(packageDir, file)] = createHash('sha256').update(readFileSync(file)).digest('hex');
  return inputs;
}

/** The files whose content differs between two input records (changed, added or removed). */
export function changedInputs(recorded: Record<string, string>, current: Record<string, string>): string[] {
  const paths = new Set([...Object.keys(recorded), ...Object.keys(current)]);
  return [...paths].filter((path) => recorded[path] !== current[path]).sort();
}
