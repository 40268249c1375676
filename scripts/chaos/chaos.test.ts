import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { beforeAll, expect, test } from 'vitest';
import type { ChaosResult } from './chaos-run.js';

// `pnpm chaos --short` as a child process, as CI runs it: its own Postgres and OpenFGA (it restarts
// OpenFGA and terminates backends, which the suite's shared servers must not suffer).
let result: ChaosResult | undefined;
let output = '';
let code: number | null = null;

beforeAll(async () => {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.OPENFGA_API_URL;
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', resolve(import.meta.dirname, 'index.ts'), '--short', '--json'],
    {
      env,
      cwd: resolve(import.meta.dirname, '../..'),
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  [code] = (await once(child, 'exit')) as [number | null];
  output += stdout;
  const last = stdout.trim().split('\n').at(-1) ?? '';
  result = last.startsWith('{') ? (JSON.parse(last) as ChaosResult) : undefined;
}, 170_000);

/** The run's result; a run that did not get to its checks fails every test with its output. */
function run(): ChaosResult {
  expect(result, output).toBeDefined();
  return result as ChaosResult;
}

test('the short run injects every fault and provokes late writes, and its exit code says whether the checks held', () => {
  const r = run();
  expect(r.faults.kills + r.faults.terminations, output).toBeGreaterThan(0);
  expect(r.faults.openfgaRestarts).toBeGreaterThanOrEqual(1);
  expect(r.faults.lateWrites, output).toBeGreaterThan(0);
  expect(r.drainers.unexpectedExits, output).toBe(0);
  expect(r.workload.failedTransactions).toBe(0);
  expect(code).toBe(r.passed ? 0 : 1);
});

test('no intent is lost: every good intent is delivered, every bad one poisoned', () => {
  const { intents } = run().checks;
  expect(intents.lost, output).toBe(0);
  expect(intents.delivered + intents.badPoisoned).toBe(intents.enqueued);
  expect(intents.badPoisoned).toBe(run().workload.bad);
});

test('no drainer sends a request for a partition while one of its own is still in flight (the fence between open batches)', () => {
  expect(run().drainers.overlappingRequests, output).toBe(0);
});

test('no partition is delivered out of order, during the faults or after', () => {
  const { order } = run().checks;
  expect(order.samples).toBeGreaterThan(5);
  expect(order.sentAtBackwards, output).toEqual([]);
  expect(order.deliveredPastDeliverable, output).toEqual([]);
});

test('every drifted object is one a provoked late write named: no drift the provocation does not explain', () => {
  expect(run().checks.drift.objectsDriftedUnexplained, output).toEqual([]);
});

// The late-write check (docs/agreement.md, "Late writes") re-asserts every partition a late write
// touched within H; the short run's settle period is longer than its verify delay.
test('after the settle period OpenFGA equals the owner table (no drift)', () => {
  const { drift } = run().checks;
  expect(drift.objectsDrifted, JSON.stringify(drift.samples, null, 2)).toBe(0);
});
