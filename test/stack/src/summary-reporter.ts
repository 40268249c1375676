import type { Reporter, SerializedError, TestModule } from 'vitest/node';

/**
 * Prints one plain closing line, `tests: N passed, N failed, N skipped` (and `, N unhandled
 * errors` when there were any: they fail the run too), after vitest's own summary, so tools that
 * read the last lines of a CI log find the counts in a stable form.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError> = []): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed += 1;
        else if (state === 'failed') failed += 1;
        else skipped += 1;
      }
      if (module.state() === 'failed' && [...module.children.allTests()].length === 0) failed += 1;
    }
    const errors = unhandledErrors.length > 0 ? `, ${unhandledErrors.length} unhandled error${unhandledErrors.length === 1 ? '' : 's'}` : '';
    process.stdout.write(`\ntests: ${passed} passed, ${failed} failed, ${skipped} skipped${errors}\n`);
  }
}
