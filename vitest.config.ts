import { defineConfig } from 'vitest/config';

// The public packages' exports send "@outbox/source" to src/ (tsconfig.base.json sets the same for
// TypeScript), so tests need no build. Vite replaces its default conditions when given any: these are
// vitest's defaults for node (Vite's server conditions without 'module') with ours in front.
const conditions = ['@outbox/source', 'node', 'development|production'];

/**
 * One vitest config for the whole monorepo. The global setup starts one real
 * Postgres and one real OpenFGA for the run; each test file clones its own
 * database from a migrated template and creates its own OpenFGA store.
 */
export default defineConfig({
  // Test files run in the `ssr` environment (and their workers get these as node --conditions); the
  // global setup runs in vitest's own `__vitest__` environment, which inherits no conditions.
  ssr: { resolve: { conditions } },
  environments: { __vitest__: { resolve: { conditions } } },
  test: {
    include: [
      'packages/*/src/**/*.test.ts',
      'services/*/src/**/*.test.ts',
      'test/*/src/**/*.test.ts',
      'migrations/src/**/*.test.ts',
      'scripts/**/*.test.ts',
      'bench/*.test.ts',
    ],
    // The PostgreSQL 15 column of the matrix runs with --tagsFilter '!once' (scripts/test-postgres15.sh).
    tags: [
      {
        name: 'once',
        description: 'long, and what it adds does not depend on the Postgres version: run in one column of the matrix',
      },
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
