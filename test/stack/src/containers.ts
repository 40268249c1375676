import { existsSync } from 'node:fs';
import { homedir, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import type { GenericContainer, StartedTestContainer, WaitStrategy } from 'testcontainers';
import { openFgaServing, postgresAnswers } from './health.js';
import type { OpenFgaServer, OpenFgaServerOptions } from './native-openfga.js';
import type { PostgresServer } from './native-postgres.js';
import { OPENFGA_VERSION } from './openfga-binary.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';
import { startWatchdog, type Watchdog } from './watchdog.js';

/** The one address every published port is bound on: nothing the stack starts listens beyond this machine. */
const LOOPBACK = '127.0.0.1';

/** What builds the default images (docs/containers.md says how and why). */
const BUILD_HINT = 'build them with `bash scripts/build-images.sh` (nothing is ever pulled from a registry)';

/** The images the containers mode runs. */
export interface ContainerImages {
  readonly postgres: string;
  readonly openfga: string;
}

/**
 * `OUTBOX_POSTGRES_IMAGE` and `OUTBOX_OPENFGA_IMAGE`, else the names `scripts/build-images.sh`
 * gives its local builds. The stack never pulls: an image must already be in the engine.
 */
export function containerImages(): ContainerImages {
  return {
    postgres: process.env.OUTBOX_POSTGRES_IMAGE || 'outbox/postgres:18-local',
    openfga: process.env.OUTBOX_OPENFGA_IMAGE || `outbox/openfga:${OPENFGA_VERSION}-local`,
  };
}

/** Whether the containers mode can run here and, when it cannot, why. */
export type ContainersReadiness =
  | { readonly ready: true }
  | {
      readonly ready: false;
      /** What is missing and what to do about it, in one sentence. */
      readonly reason: string;
      /** A Docker engine on this machine answered: what is missing is an image. */
      readonly engineAnswers: boolean;
    };

/**
 * Whether a local Docker engine answers and both {@link containerImages} are present in it.
 * Cheap when there is plainly no engine (no socket, no DOCKER_HOST, no testcontainers config):
 * testcontainers is not even loaded then.
 *
 * @example
 * const readiness = await containersReadiness();
 * if (!readiness.ready) console.log(`native mode: ${readiness.reason}`);
 */
export async function containersReadiness(): Promise<ContainersReadiness> {
  const hinted =
    process.env.DOCKER_HOST !== undefined ||
    existsSync('/var/run/docker.sock') ||
    existsSync(join(homedir(), '.testcontainers.properties'));
  if (!hinted) {
    return { ready: false, engineAnswers: false, reason: 'no Docker engine (no DOCKER_HOST, no /var/run/docker.sock)' };
  }
  const endpoint = process.env.DOCKER_HOST;
  if (endpoint && !onThisMachine(endpoint)) {
    return {
      ready: false,
      engineAnswers: false,
      reason: `DOCKER_HOST (${endpoint}) is another machine, and the stack publishes ports on ${LOOPBACK} only`,
    };
  }
  const { getContainerRuntimeClient, ImageName } = await import('testcontainers');
  let client: Awaited<ReturnType<typeof getContainerRuntimeClient>>;
  try {
    client = await getContainerRuntimeClient();
  } catch (error) {
    return { ready: false, engineAnswers: false, reason: `no Docker engine answers (${firstLine(error)})` };
  }
  const images = containerImages();
  const missing: string[] = [];
  for (const image of [images.postgres, images.openfga]) {
    if (!(await client.image.exists(ImageName.fromString(image)))) missing.push(image);
  }
  if (missing.length > 0) {
    return {
      ready: false,
      engineAnswers: true,
      reason: `the image(s) ${missing.join(', ')} are not present locally: ${BUILD_HINT}`,
    };
  }
  return { ready: true };
}

/** Postgres in a container (the command the official image takes), waited on until it answers a query. */
export async function startPostgresContainer(): Promise<PostgresServer> {
  const started = await startLoopbackContainer(containerImages().postgres, 5432, (container) =>
    container
      .withEnvironment({ POSTGRES_PASSWORD: 'outbox' })
      .withCommand(['postgres', '-c', 'fsync=off', '-c', 'max_connections=300', '-c', 'max_locks_per_transaction=256']),
  );
  const url = `postgres://postgres:outbox@${LOOPBACK}:${started.container.getMappedPort(5432)}/postgres`;
  try {
    await waitFor(`Postgres in container ${started.container.getId().slice(0, 12)}`, () => postgresAnswers(url), {
      timeoutMs: 30_000,
    });
  } catch (error) {
    await started.stop();
    throw error;
  }
  return { url, pid: undefined, stop: started.stop };
}

/** OpenFGA in a container (memory datastore), waited on until /healthz reports SERVING. */
export async function startOpenFgaContainer(options: OpenFgaServerOptions = {}): Promise<OpenFgaServer> {
  if (options.datastore === 'postgres') {
    throw new StackError(
      'the postgres datastore is only wired for the native OpenFGA; use the memory datastore in containers',
    );
  }
  const command = ['run', '--metrics-enabled=false', '--playground-enabled=false', '--log-level=warn'];
  if (options.presharedKey) command.push('--authn-method=preshared', `--authn-preshared-keys=${options.presharedKey}`);
  const started = await startLoopbackContainer(containerImages().openfga, 8080, (container) =>
    container.withCommand(command),
  );
  const httpPort = started.container.getMappedPort(8080);
  const apiUrl = `http://${LOOPBACK}:${httpPort}`;
  try {
    await waitFor(
      `OpenFGA in container ${started.container.getId().slice(0, 12)}`,
      () => openFgaServing(apiUrl, options.presharedKey),
      {
        timeoutMs: 30_000,
      },
    );
  } catch (error) {
    await started.stop();
    throw error;
  }
  return { apiUrl, httpPort, presharedKey: options.presharedKey, pid: undefined, stop: started.stop };
}

/**
 * Removes container `$1` once this process is gone, however it goes (see startWatchdog). It takes
 * the place of testcontainers' reaper, whose own image would have to come from a registry.
 */
const CONTAINER_WATCHDOG = `docker rm --force "$1" >/dev/null 2>&1`;

interface StartedLoopbackContainer {
  readonly container: StartedTestContainer;
  /** Stops and removes the container. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * testcontainers' own waits probe the host it resolves, which is not always where the port is
 * published (see onThisMachine): the callers probe 127.0.0.1 with the native mode's health checks.
 */
const RUNNING_IS_ENOUGH: WaitStrategy = {
  waitUntilReady: async () => undefined,
  withStartupTimeout() {
    return this;
  },
  isStartupTimeoutSet: () => false,
  getStartupTimeout: () => 0,
};

/**
 * Starts `image` with `port` published on 127.0.0.1 only, never pulling it, without the reaper
 * container, and with a watchdog that removes the container if this process dies first. Returns
 * once the container runs: what runs in it is the caller's to wait for.
 */
async function startLoopbackContainer(
  image: string,
  port: number,
  configure: (container: GenericContainer) => GenericContainer,
): Promise<StartedLoopbackContainer> {
  const { GenericContainer, PullPolicy, getContainerRuntimeClient } = await import('testcontainers');
  let watchdog: Watchdog | undefined;
  let containerId: string | undefined;
  // testcontainers publishes on every interface and has no option for the host address: set it
  // in the create request, the one moment it can still change.
  class LoopbackContainer extends GenericContainer {
    protected override async beforeContainerCreated(): Promise<void> {
      for (const bindings of Object.values(this.hostConfig.PortBindings ?? {}) as Array<Array<{ HostIp?: string }>>) {
        for (const binding of bindings) binding.HostIp = LOOPBACK;
      }
    }
    protected override async containerCreated(id: string): Promise<void> {
      containerId = id;
      watchdog = startWatchdog(CONTAINER_WATCHDOG, [id]);
    }
  }
  const container = configure(new LoopbackContainer(image))
    .withPullPolicy(PullPolicy.neverPull())
    .withAutoCleanup(false)
    .withExposedPorts(port)
    .withWaitStrategy(RUNNING_IS_ENOUGH);
  let started: StartedTestContainer;
  try {
    started = await container.start();
  } catch (error) {
    // testcontainers removes a container that never got ready, not one whose start failed earlier.
    if (containerId !== undefined) {
      const client = await getContainerRuntimeClient();
      await client.container
        .getById(containerId)
        .remove({ force: true, v: true })
        .catch(() => undefined);
    }
    await watchdog?.disarm();
    throw new StackError(`the container of ${image} did not start: ${firstLine(error)}`, { cause: error });
  }
  let stopped: Promise<void> | undefined;
  return {
    container: started,
    stop: () =>
      (stopped ??= (async () => {
        await started.stop();
        await watchdog?.disarm();
      })()),
  };
}

/**
 * Whether the engine at `endpoint` (a DOCKER_HOST) is on this machine: a socket, or TCP to a
 * loopback or own address. (testcontainers' resolved host does not tell: wherever a /.dockerenv
 * exists it names the bridge gateway, also on a machine that is the engine's own host.)
 */
function onThisMachine(endpoint: string): boolean {
  if (/^(unix|npipe):/.test(endpoint)) return true;
  let host: string;
  try {
    host = new URL(endpoint).hostname.replace(/^\[(.*)\]$/, '$1');
  } catch {
    return false;
  }
  if (host === 'localhost' || host === '::1' || /^127\./.test(host)) return true;
  return Object.values(networkInterfaces()).some((addresses) => addresses?.some((a) => a.address === host));
}

function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split('\n')[0] ?? '';
}
