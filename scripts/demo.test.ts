import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { stackInfo } from '@outbox/test-stack';
import { expect, test } from 'vitest';

test('pnpm demo plays the whole scenario and exits 0', async () => {
  // The demo starts its own OpenFGA (it stops and restarts it); it borrows the suite's Postgres
  // server for its databases instead of starting a second one.
  const child = spawn(process.execPath, ['--import', 'tsx', resolve(import.meta.dirname, 'demo.ts')], {
    env: { ...process.env, DATABASE_URL: stackInfo().postgresUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  expect(output).toContain('redrive revives nothing and reports the register superseded');
  expect(output).toContain('demo finished: every step behaved as expected.');
  expect(output).not.toContain('✗');
  expect(code, output).toBe(0);
}, 180_000);
