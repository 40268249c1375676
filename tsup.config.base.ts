import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Options } from 'tsup';
import { BUILD_INPUTS_FILE, buildInputs } from './scripts/release-build-inputs.js';

/** The exports condition that points the repo at a package's TypeScript source (docs/releasing.md). */
export const SOURCE_CONDITION = '@outbox/source';

/**
 * The source file of every entry in the package's exports map, so adding an entry point is one more
 * exports entry, not also a build change.
 */
function exportEntries(manifest: { exports: Record<string, Record<string, string>> }): string[] {
  return Object.entries(manifest.exports).map(([subpath, conditions]) => {
    const source = conditions[SOURCE_CONDITION];
    if (!source) throw new Error(`package.json exports["${subpath}"] has no "${SOURCE_CONDITION}" condition to build from`);
    return source;
  });
}

/**
 * The one build config every publishable package reuses (tsup runs it in the package's folder): ESM
 * only, Node 22, declarations beside the bundle, and a record of the sources it was built from for
 * the prepack check. A package's own tsup.config.ts is `export default defineConfig(packageBuild)`.
 */
export function packageBuild(): Options {
  // Read before building: the record must describe what the bundle was made from.
  const inputs = buildInputs('.');
  return {
    entry: exportEntries(JSON.parse(readFileSync('package.json', 'utf8'))),
    format: ['esm'],
    target: 'node22',
    platform: 'node',
    dts: true,
    sourcemap: true,
    clean: true,
    treeshake: true,
    // With two entries, what both import goes to one shared chunk: one module instance, so a class
    // exported by both entry points is the same class (instanceof holds across them).
    splitting: true,
    onSuccess: async () => {
      mkdirSync(dirname(BUILD_INPUTS_FILE), { recursive: true });
      writeFileSync(BUILD_INPUTS_FILE, `${JSON.stringify(inputs, null, 2)}\n`);
    },
  };
}
