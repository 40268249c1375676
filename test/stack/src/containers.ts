import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { OpenFgaServer, OpenFgaServerOptions } from './native-openfga.js';
import type { PostgresServer } from './native-postgres.js';
import { OPENFGA_VERSION } from './openfga-binary.js';

const POSTGRES_IMAGE = 'postgres:18';
const OPENFGA_IMAGE = `openfga/openfga:${OPENFGA_VERSION}`;

/**
 * Whether a Docker engine answers. Cheap when there is plainly none (no socket, no DOCKER_HOST,
 * no testcontainers config): testcontainers is not even loaded then.
 */
export async function dockerAnswers(): Promise<boolean> {
  const hinted =
    process.env.DOCKER_HOST !== undefined ||
    existsSync('/var/run/docker.sock') ||
    existsSync(join(homedir(), '.testcontainers.properties'));
  if (!hinted) return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

/** Postgres 18 in a container, waited on until it accepts connections. */
export async function startPostgresContainer(): Promise<PostgresServer> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const container = await new GenericContainer(POSTGRES_IMAGE)
    .withEnvironment({ POSTGRES_PASSWORD: 'outbox' })
    .withCommand(['postgres', '-c', 'fsync=off', '-c', 'max_connections=300', '-c', 'max_locks_per_transaction=256'])
    .withExposedPorts(5432)
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .start();
  const url = `postgres://postgres:outbox@${container.getHost()}:${container.getMappedPort(5432)}/postgres`;
  return {
    url,
    pid: undefined,
    stop: async () => {
      await container.stop();
    },
  };
}

/** OpenFGA in a container, waited on until /healthz answers. */
export async function startOpenFgaContainer(options: OpenFgaServerOptions = {}): Promise<OpenFgaServer> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const command = ['run', '--metrics-enabled=false', '--playground-enabled=false', '--log-level=warn'];
  if (options.presharedKey) command.push('--authn-method=preshared', `--authn-preshared-keys=${options.presharedKey}`);
  if (options.datastore === 'postgres') {
    throw new Error('the postgres datastore is only wired for the native OpenFGA; use the memory datastore in containers');
  }
  const container = await new GenericContainer(OPENFGA_IMAGE)
    .withCommand(command)
    .withExposedPorts(8080)
    .withWaitStrategy(Wait.forListeningPorts())
    .start();
  const httpPort = container.getMappedPort(8080);
  return {
    apiUrl: `http://${container.getHost()}:${httpPort}`,
    httpPort,
    presharedKey: options.presharedKey,
    pid: undefined,
    stop: async () => {
      await container.stop();
    },
  };
}
