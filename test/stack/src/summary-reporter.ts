import type { Reporter, SerializedError, TestModule } from 'vitest/node';

/**
 * Prints one plain closing line, `tests: N passed, N failed, N skipped` (and `, N unhandled
 * errors` when there were any: they fail the run too), after vitest's own summary, so tools that
 * read the last lines of a CI log find the counts in a stable form. A test file that failed
 * without a failed test of its own (it did not import, or a beforeAll/afterAll hook threw — the
 * leak guard is an afterAll) counts as one failed. A run that fails outside every file (the global
 * setup: the stack did not start) ends with the line again, saying so, after vitest's error.
 */
export default class SummaryReporter implements Reporter {
  private line: string | undefined;
  private failedOutsideTests = false;

  onInit(): void {
    process.once('exit', (code) => {
      if (this.line === undefined || (code === 0 && !process.exitCode) || this.failedOutsideTests) return;
      process.stdout.write(`\n${this.line}, the run failed outside the tests (see the error above)\n`);
    });
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError> = []): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const module of testModules) {
      let failedTests = 0;
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed += 1;
        else if (state === 'failed') failedTests += 1;
        else skipped += 1;
      }
      // The file failed, but none of its tests did: an import error or a failing hook.
      if (module.state() === 'failed' && failedTests === 0) failedTests = 1;
      failed += failedTests;
    }
    const errors =
      unhandledErrors.length > 0
        ? `, ${unhandledErrors.length} unhandled error${unhandledErrors.length === 1 ? '' : 's'}`
        : '';
    this.line = `tests: ${passed} passed, ${failed} failed, ${skipped} skipped${errors}`;
    this.failedOutsideTests = failed > 0 || unhandledErrors.length > 0;
    process.stdout.write(`\n${this.line}\n`);
  }
}
