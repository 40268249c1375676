import { defineConfig } from 'vitest/config';

/**
 * One vitest config for the whole monorepo. The global setup starts one real
 * Postgres and one real OpenFGA for the run; each test file clones its own
 * database from a migrated template and creates its own OpenFGA store.
 */
export default defineConfig({
  test: {
    include: [
      'packages/*/src/**/*.test.ts',
      'services/*/src/**/*.test.ts',
      'test/*/src/**/*.test.ts',
      'migrations/src/**/*.test.ts',
      'scripts/**/*.test.ts',
    ],
    globalSetup: ['./vitest.global-setup.ts'],
    setupFiles: ['test/stack/src/setup-file.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
    reporters: ['default', './test/stack/src/summary-reporter.ts'],
  },
});
