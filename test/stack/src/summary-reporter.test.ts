import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

// A file whose tests all passed but whose afterAll failed (the leak guard's way) used to close the
// log with "0 failed" on a failed run; one whose beforeAll failed, with "0 failed, 2 skipped".
test('the closing line counts a file that failed outside its tests', async () => {
  const vitest = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
  const config = fileURLToPath(new URL('./fixtures/summary/vitest.config.ts', import.meta.url));
  const child = spawn(process.execPath, [vitest, 'run', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, CI: 'true' },
  });
  let stdout = '';
  let output = '';
  child.stdout.on('data', (chunk) => ((stdout += chunk), (output += chunk)));
  child.stderr.on('data', (chunk) => (output += chunk));
  const [code] = (await once(child, 'exit')) as [number | null];
  expect(stdout.trim().split('\n').at(-1), output).toBe('tests: 2 passed, 2 failed, 2 skipped');
  expect(code, output).toBe(1);
});
