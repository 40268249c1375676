import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { expect, test } from 'vitest';

// `pnpm topology --short` with a fixed seed, as a child process: its own Postgres, PgBouncer, two
// OpenFGA replicas and HAProxy, three hosts as network namespaces (loopback addresses where the
// machine refuses them), each running every service; faults on the seed's schedule.
test('the short seed: three hosts under load and faults end with nothing lost, no order violation, no drift, no overlapping Write', async () => {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.OPENFGA_API_URL;
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', resolve(import.meta.dirname, 'index.ts'), '--short', '--seed', '7'],
    {
      env,
      cwd: resolve(import.meta.dirname, '../..'),
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  const output = `${stderr}\n${stdout}`;
  expect(stdout, output).toMatch(/^lost 0$/m);
  expect(stdout, output).toMatch(/^order violations 0$/m);
  expect(stdout, output).toMatch(/^drift 0$/m);
  expect(stdout, output).toMatch(/^overlapping requests 0 \(of [1-9]\d* Writes\)$/m);
  // The load ran and faults happened (the seed schedules several).
  expect(stderr, output).toMatch(/load over: \d+ × 201/);
  expect(stdout, output).toMatch(/faults [1-9]/);
  expect(code, output).toBe(0);
}, 300_000);
