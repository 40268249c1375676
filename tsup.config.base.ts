import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Options } from 'tsup';
import { BUILD_INPUTS_FILE, buildInputs } from './scripts/release-build-inputs.js';

/** The exports condition that points the repo at a package's TypeScript source (docs/releasing.md). */
export const SOURCE_CONDITION = '@outbox/source';

type EsbuildPlugin = NonNullable<Options['esbuildPlugins']>[number];

const SQL_FILE_READ = /readFileSync\(new URL\('(\.{1,2}\/[^']+\.sql)', import\.meta\.url\), 'utf8'\)/g;

/**
 * Replaces each `readFileSync(new URL('./x.sql', import.meta.url), 'utf8')` of a package's source
 * with the file's text: vitest, tsx and tsc read the file, the bundle carries it (a service
 * bundled again still has its SQL). Any other read of a `.sql` file fails the build.
 */
const inlineSqlFiles: EsbuildPlugin = {
  name: 'inline-sql-files',
  setup(build) {
    build.onLoad({ filter: /\.ts$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      if (!source.includes('.sql')) return undefined;
      const watchFiles: string[] = [];
      const contents = source.replace(SQL_FILE_READ, (_, path: string) => {
        const file = new URL(path, `file://${args.path}`);
        watchFiles.push(file.pathname);
        return JSON.stringify(readFileSync(file, 'utf8'));
      });
      if (/readFileSync\([^)]*\.sql/.test(contents))
        throw new Error(
          `${args.path}: read a .sql file as readFileSync(new URL('./x.sql', import.meta.url), 'utf8') so the build can inline it`,
        );
      return { contents, loader: 'ts', watchFiles };
    });
  },
};

/**
 * The source file of every entry in the package's exports map, so adding an entry point is one more
 * exports entry, not also a build change.
 */
function exportEntries(manifest: { exports: Record<string, Record<string, string>> }): string[] {
  return Object.entries(manifest.exports).map(([subpath, conditions]) => {
    const source = conditions[SOURCE_CONDITION];
    if (!source)
      throw new Error(`package.json exports["${subpath}"] has no "${SOURCE_CONDITION}" condition to build from`);
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
    esbuildPlugins: [inlineSqlFiles],
    onSuccess: async () => {
      mkdirSync(dirname(BUILD_INPUTS_FILE), { recursive: true });
      writeFileSync(BUILD_INPUTS_FILE, `${JSON.stringify(inputs, null, 2)}\n`);
    },
  };
}
