import { readFileSync } from 'node:fs';
import type { Options } from 'tsup';

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
      if (/readFileSync\([^)]*\.sql/.test(contents)) throw new Error(`${args.path}: read a .sql file as readFileSync(new URL('./x.sql', import.meta.url), 'utf8') so the build can inline it`);
      return { contents, loader: 'ts', watchFiles };
    });
  },
};

/**
 * The one build config every publishable package reuses: ESM only, Node 22,
 * declarations beside the bundle. A package's own tsup.config.ts is
 * `export default defineConfig(packageBuild)`. `splitting`: code shared by
 * two entries is one module, so an error class is one class for `instanceof`.
 */
export const packageBuild: Options = {
  entry: ['src/index.ts'],
  format: ['esm'],
  target: 'node22',
  platform: 'node',
  dts: true,
  sourcemap: true,
  clean: true,
  treeshake: true,
  splitting: true,
  esbuildPlugins: [inlineSqlFiles],
};
