import { fileURLToPath } from 'node:url';
import { serviceClient, startService } from '@outbox/service-kit';
import { runScript, serviceEnv, serviceOptionsFor, smokeTestServiceProcess } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { beforeAll, expect, test } from 'vitest';
import { cidrProblem, vpcService } from './index.js';

// The behaviour of every register service is proved in services/platform (one suite over all five);
// this proves that this package's entry points run from the environment.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const packageDir = fileURLToPath(new URL('..', import.meta.url));

beforeAll(async () => {
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'editor', object: 'project:smoke' }] });
});

test('vpc runs as a process: create, read, delete over HTTP, then a graceful SIGTERM', async () => {
  await smokeTestServiceProcess({
    definition: vpcService,
    packageDir,
    env: serviceEnv(t, fga),
    projectId: 'smoke',
    user: 'alice',
    body: { cidr_block: '10.1.0.0/16' },
  });
});

test('fga:drain delivers what a stopped service left behind, in one pass, and says what it delivered', async () => {
  const stopped = await startService(
    vpcService,
    serviceOptionsFor(t, fga, { flushOnWrite: false, runDrainer: false, runReconciler: false }),
  );
  const created = await serviceClient(stopped.url, 'alice').post<{ id: string }>('/vpcs', {
    project_id: 'smoke',
    name: 'left-behind',
    cidr_block: '10.2.0.0/16',
  });
  await stopped.stop();
  expect(created.status).toBe(202);
  const object = `vpc:${created.body.id}`;
  expect((await fga.client.read({ user: 'user:alice', relation: 'owner', object })).tuples).toHaveLength(0);

  const first = await runScript(packageDir, 'src/fga-drain.ts', serviceEnv(t, fga));
  expect(first.code, first.output).toBe(0);
  expect(first.output).toContain('vpc.fga_register_outbox: delivered 1');
  expect(first.output).toContain(`${object}: 2 write(s), 0 delete(s)`);
  expect((await fga.client.read({ user: 'user:alice', relation: 'owner', object })).tuples).toHaveLength(1);

  const second = await runScript(packageDir, 'src/fga-drain.ts', serviceEnv(t, fga));
  expect(second.output).toContain('delivered 0');
});

test('a CIDR block is checked, not just pattern-matched', () => {
  expect(cidrProblem('10.0.0.0/16')).toBeUndefined();
  expect(cidrProblem('192.168.4.0/24')).toBeUndefined();
  expect(cidrProblem('10.0.0.1/16')).toMatch(/host bits/);
  expect(cidrProblem('10.0.0.0/8')).toMatch(/\/16 to \/28/);
  expect(cidrProblem('10.0.300.0/24')).toMatch(/above 255/);
  expect(cidrProblem('10.0.0.0')).toMatch(/IPv4 CIDR/);
});
