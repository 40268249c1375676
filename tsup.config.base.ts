import type { Options } from 'tsup';

/**
 * The one build config every publishable package reuses: ESM only, Node 22,
 * declarations beside the bundle. A package's own tsup.config.ts is
 * `export default defineConfig(packageBuild)`.
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
  splitting: false,
};
