import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { expect, test } from 'vitest';
import { launchNativeStack, nativeEnv } from './fixtures/native-stack/launch.js';
import { processStat } from './proc.js';
import { waitFor } from './wait-for.js';

const alive = (pid: number) => {
  const stat = processStat(pid);
  return stat !== undefined && stat.state !== 'Z';
};

test('servers of a run killed with SIGKILL (no exit handler runs) do not outlive it', async () => {
  const run = launchNativeStack([], nativeEnv());
  const pids = await run.pids();
  expect(pids).toHaveLength(2);
  const cmdline = await readFile(`/proc/${pids[0]}/cmdline`, 'utf8').catch(() => '');
  const dataDir = cmdline.split('\0')[cmdline.split('\0').indexOf('-D') + 1];
  run.child.kill('SIGKILL');
  await once(run.child, 'exit');
  try {
    await waitFor('the orphaned servers to be stopped', async () => pids.every((pid) => !alive(pid)), {
      timeoutMs: 20_000,
    });
    if (dataDir)
      await waitFor('the cluster directory to be removed', async () => !existsSync(dataDir), { timeoutMs: 5_000 });
  } finally {
    // Whatever the outcome, leave nothing behind for the next run.
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
    if (dataDir) await rm(dirname(dataDir), { recursive: true, force: true });
  }
}, 180_000);
