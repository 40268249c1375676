import { once } from 'node:events';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OpenFgaClient } from '@openfga/sdk';
import { expect, test } from 'vitest';
import { launchNativeStack, nativeEnv } from './fixtures/native-stack/launch.js';
import { startStack } from './stack.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test('a native stack starts healthy and stop() leaves no process behind', async () => {
  // Servers named by the environment (a matrix run sets DATABASE_URL) would take precedence.
  const saved = { DATABASE_URL: process.env.DATABASE_URL, OPENFGA_API_URL: process.env.OPENFGA_API_URL };
  delete process.env.DATABASE_URL;
  delete process.env.OPENFGA_API_URL;
  const stack = await startStack({ mode: 'native' }).finally(() =>
    Object.assign(process.env, JSON.parse(JSON.stringify(saved))),
  );
  try {
    expect(stack.sources).toEqual({ postgres: 'native', openfga: 'native' });
    expect(stack.pids).toHaveLength(2);
    for (const pid of stack.pids) expect(alive(pid)).toBe(true);
    const health = await fetch(new URL('/healthz', stack.openfga.apiUrl));
    expect(await health.json()).toEqual({ status: 'SERVING' });
    const stores = await new OpenFgaClient({ apiUrl: stack.openfga.apiUrl }).listStores();
    expect(stores.stores).toEqual([]);
  } finally {
    await stack.stop();
  }
  for (const pid of stack.pids) expect(alive(pid)).toBe(false);
  // postgres backends and auxiliary processes go with the postmaster
  const { execFileSync } = await import('node:child_process');
  const leftovers = execFileSync('ps', ['-eo', 'ppid='], { encoding: 'utf8' })
    .split('\n')
    .map((line) => Number(line.trim()))
    .filter((ppid) => stack.pids.includes(ppid));
  expect(leftovers).toEqual([]);
}, 120_000);

test.runIf(process.getuid?.() === 0)(
  'as root, a hardened umask and a private TMPDIR do not stop the embedded Postgres',
  async () => {
    const parent = await mkdtemp(join(tmpdir(), 'outbox-private-'));
    await chmod(parent, 0o700);
    try {
      const run = launchNativeStack(['--only-postgres', '--stop'], nativeEnv({ TMPDIR: parent }), 'umask 077; ');
      const [code] = (await once(run.child, 'exit')) as [number | null];
      expect(run.output()).toContain('stopped');
      expect(code, run.output()).toBe(0);
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  },
  180_000,
);
