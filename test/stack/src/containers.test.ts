import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { containersReadiness } from './containers.js';
import { startStack } from './stack.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';

// Runs only where a Docker engine answers and the local images are built (docs/containers.md):
// CI builds no images, so there every test here skips, saying why.
const readiness = await containersReadiness();
const skipReason = readiness.ready ? '' : `containers mode unavailable: ${readiness.reason}`;

/** The engine's view of the containers publishing `hostPort`: their ids and every address that port is bound on. */
async function publishing(hostPort: number): Promise<Array<{ id: string; addresses: string[] }>> {
  const { getContainerRuntimeClient } = await import('testcontainers');
  const client = await getContainerRuntimeClient();
  return (await client.container.list())
    .filter((container) => container.Ports.some((port) => port.PublicPort === hostPort))
    .map((container) => ({
      id: container.Id,
      addresses: container.Ports.filter((port) => port.PublicPort === hostPort).map((port) => port.IP ?? ''),
    }));
}

/** Whether a TCP connection to `host:port` is accepted. */
async function accepts(host: string, port: number): Promise<boolean> {
  const socket = connect({ host, port, timeout: 2_000 });
  try {
    await Promise.race([
      once(socket, 'connect'),
      once(socket, 'timeout').then(() => Promise.reject(new Error('timeout'))),
    ]);
    return true;
  } catch {
    return false;
  } finally {
    socket.destroy();
  }
}

const portOf = (url: string) => Number(new URL(url).port);

describe('the containers mode', () => {
  // Servers named by the environment (a matrix run sets DATABASE_URL) would take precedence.
  beforeEach(() => {
    vi.stubEnv('DATABASE_URL', undefined);
    vi.stubEnv('OPENFGA_API_URL', undefined);
  });
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  test('serves PostgreSQL 18 and OpenFGA on loopback-only ports, and stop() removes both containers', async (ctx) => {
    ctx.skip(!readiness.ready, skipReason);
    const stack = await startStack({ mode: 'containers' });
    let ports: number[] = [];
    try {
      expect(stack.sources).toEqual({ postgres: 'testcontainers', openfga: 'testcontainers' });
      expect(stack.openfga.datastore).toBe('memory');
      const client = new pg.Client({ connectionString: stack.postgresUrl });
      await client.connect();
      try {
        const { rows } = await client.query<{ version: string }>(
          `select current_setting('server_version_num') as version`,
        );
        expect(Number(rows[0]?.version)).toBeGreaterThanOrEqual(180_000);
      } finally {
        await client.end();
      }
      const health = await fetch(new URL('/healthz', stack.openfga.apiUrl));
      expect(await health.json()).toEqual({ status: 'SERVING' });

      ports = [portOf(stack.postgresUrl), portOf(stack.openfga.apiUrl)];
      for (const port of ports) {
        const containers = await publishing(port);
        expect(containers, `the container publishing port ${port}`).toHaveLength(1);
        expect(containers[0]?.addresses).toEqual(['127.0.0.1']);
      }
      // …and the kernel agrees: this machine's other addresses refuse those ports.
      const outward = Object.values(networkInterfaces()).flatMap((addresses) =>
        (addresses ?? []).filter((a) => !a.internal && a.family === 'IPv4').map((a) => a.address),
      );
      for (const address of outward)
        for (const port of ports) expect(await accepts(address, port), `${address}:${port}`).toBe(false);
      for (const port of ports) expect(await accepts('127.0.0.1', port)).toBe(true);
    } finally {
      await stack.stop();
    }
    for (const port of ports) expect(await publishing(port)).toEqual([]);
  }, 120_000);

  test('asked for with an image that is not present, it fails saying how to build it; auto goes native', async (ctx) => {
    ctx.skip(!(readiness.ready || readiness.engineAnswers), skipReason);
    vi.stubEnv('OUTBOX_POSTGRES_IMAGE', 'outbox/postgres:never-built');
    const forced = startStack({ mode: 'containers' });
    await expect(forced).rejects.toThrow(StackError);
    await expect(forced).rejects.toThrow(/outbox\/postgres:never-built.*scripts\/build-images\.sh/);
    const auto = await startStack({ mode: 'auto' });
    try {
      expect(auto.sources).toEqual({ postgres: 'native', openfga: 'native' });
    } finally {
      await auto.stop();
    }
  }, 120_000);

  test('the containers of a run killed with SIGKILL (no exit handler runs) are removed', async (ctx) => {
    ctx.skip(!readiness.ready, skipReason);
    const stack = fileURLToPath(new URL('./stack.ts', import.meta.url));
    const script = `import { startStack } from ${JSON.stringify(stack)};
      const s = await startStack({ mode: 'containers' });
      console.log(JSON.stringify({ ports: [s.postgresUrl, s.openfga.apiUrl].map((u) => Number(new URL(u).port)) }));
      setInterval(() => undefined, 1 << 30);`;
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DATABASE_URL;
    delete env.OPENFGA_API_URL;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', script], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    let ids: string[] = [];
    try {
      await waitFor(
        'the child to start its containers',
        async () => output.includes('{"ports"') || child.exitCode !== null,
        { timeoutMs: 90_000 },
      );
      const line = output.split('\n').find((l) => l.startsWith('{"ports"'));
      if (!line) throw new Error(`the child exited without starting its containers:\n${output}`);
      const { ports } = JSON.parse(line) as { ports: number[] };
      ids = (await Promise.all(ports.map(publishing))).flat().map((container) => container.id);
      expect(ids).toHaveLength(2);
      child.kill('SIGKILL');
      await once(child, 'exit');
      const running = async () => {
        const { getContainerRuntimeClient } = await import('testcontainers');
        const listed = await (await getContainerRuntimeClient()).container.list();
        return listed.filter((container) => ids.includes(container.Id));
      };
      await waitFor('the watchdogs to remove the containers', async () => (await running()).length === 0, {
        timeoutMs: 20_000,
      });
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      // Whatever the outcome, leave nothing behind for the next run.
      const { getContainerRuntimeClient } = await import('testcontainers');
      const client = await getContainerRuntimeClient();
      for (const id of ids)
        await client.container
          .getById(id)
          .remove({ force: true })
          .catch(() => undefined);
    }
  }, 120_000);
});
