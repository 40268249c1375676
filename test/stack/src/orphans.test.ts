import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { ensureOpenFgaBinary } from './openfga-binary.js';
import { processStat } from './proc.js';
import { waitFor } from './wait-for.js';

const fixture = fileURLToPath(new URL('./fixtures/orphans/start.ts', import.meta.url));

/** The environment of a child that must start its own native servers. */
function nativeEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, OUTBOX_STACK: 'native', ...extra };
  delete env.DATABASE_URL;
  delete env.OPENFGA_API_URL;
  return env;
}

const alive = (pid: number) => {
  const stat = processStat(pid);
  return stat !== undefined && stat.state !== 'Z';
};

function startFixture(args: string[], env: NodeJS.ProcessEnv, shellPrefix = '') {
  const node = [process.execPath, '--import', 'tsx', fixture, ...args].map((a) => `'${a}'`).join(' ');
  const child = spawn('sh', ['-c', `${shellPrefix}exec ${node}`], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const pids = async (): Promise<number[]> => {
    await waitFor('the fixture to print its PIDs', async () => output.includes('{"pids"') || child.exitCode !== null, { timeoutMs: 120_000 });
    const line = output.split('\n').find((l) => l.startsWith('{"pids"'));
    if (!line) throw new Error(`the fixture exited without starting its servers:\n${output}`);
    return (JSON.parse(line) as { pids: number[] }).pids;
  };
  return { child, pids, output: () => output };
}

test('servers of a run killed with SIGKILL (no exit handler runs) do not outlive it', async () => {
  const run = startFixture([], nativeEnv());
  const pids = await run.pids();
  expect(pids).toHaveLength(2);
  const cmdline = await readFile(`/proc/${pids[0]}/cmdline`, 'utf8').catch(() => '');
  const dataDir = cmdline.split('\0')[cmdline.split('\0').indexOf('-D') + 1];
  run.child.kill('SIGKILL');
  await once(run.child, 'exit');
  try {
    await waitFor('the orphaned servers to be stopped', async () => pids.every((pid) => !alive(pid)), { timeoutMs: 20_000 });
    if (dataDir) await waitFor('the cluster directory to be removed', async () => !existsSync(dataDir), { timeoutMs: 5_000 });
  } finally {
    // Whatever the outcome, leave nothing behind for the next run.
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
    if (dataDir) await rm(dirname(dataDir), { recursive: true, force: true });
  }
}, 180_000);

test.runIf(process.getuid?.() === 0)('as root, a hardened umask and a private TMPDIR do not stop the embedded Postgres', async () => {
  const parent = await mkdtemp(join(tmpdir(), 'outbox-private-'));
  await chmod(parent, 0o700);
  try {
    const run = startFixture(['--only-postgres', '--stop'], nativeEnv({ TMPDIR: parent }), 'umask 077; ');
    const [code] = (await once(run.child, 'exit')) as [number | null];
    expect(run.output()).toContain('stopped');
    expect(code, run.output()).toBe(0);
  } finally {
    await rm(parent, { recursive: true, force: true });
  }
}, 180_000);

test('an openfga that reports v1.18.10 is not taken for v1.18.1', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'outbox-fake-openfga-'));
  const fake = join(dir, 'openfga');
  await writeFile(fake, '#!/bin/sh\necho "OpenFGA version `v1.18.10` build from `abc` on `2026-01-01`"\n', { mode: 0o755 });
  const saved = process.env.OPENFGA_BIN;
  process.env.OPENFGA_BIN = fake;
  try {
    const found = await ensureOpenFgaBinary({ install: false }).catch((error: unknown) => error);
    expect(found).not.toBe(fake);
  } finally {
    if (saved === undefined) delete process.env.OPENFGA_BIN;
    else process.env.OPENFGA_BIN = saved;
    await rm(dir, { recursive: true, force: true });
  }
});
