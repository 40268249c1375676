import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { basename } from 'node:path';
import { ensureOpenFgaBinary } from './openfga-binary.js';
import { freePort } from './free-port.js';
import { openFgaServing } from './health.js';
import { waitFor } from './wait-for.js';
import { PROCESS_WATCHDOG, startWatchdog } from './watchdog.js';

/** How to start an OpenFGA server for tests or the demo. */
export interface OpenFgaServerOptions {
  /**
   * `memory` (default: nothing to migrate, gone at stop) or `postgres` (needs `datastoreUri`;
   * the stack migrates it with `openfga migrate` first).
   */
  readonly datastore?: 'memory' | 'postgres';
  /** Connection URI for the postgres datastore. */
  readonly datastoreUri?: string;
  /** When set, the server requires `Authorization: Bearer <key>` (authn method `preshared`). */
  readonly presharedKey?: string;
  /** HTTP port; a free loopback port by default. Pass the old port to restart "the same" server. */
  readonly httpPort?: number;
  /**
   * Turn on OpenFGA's check-query cache and its iterator caches with this TTL, as production runs:
   * a MINIMIZE_LATENCY read may then answer from a cached, stale result. Default: caches off.
   */
  readonly checkCacheTtlMs?: number;
}

/** A running OpenFGA server. */
export interface OpenFgaServer {
  readonly apiUrl: string;
  readonly httpPort: number;
  readonly presharedKey: string | undefined;
  /** PID of the server process (undefined for a container or an external server). */
  readonly pid: number | undefined;
  /** Stops the server and waits for its process to exit. Safe to call twice. */
  stop(): Promise<void>;
}

async function runToCompletion(bin: string, args: string[]): Promise<void> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0) throw new Error(`openfga ${args[0]} failed (exit ${code}): ${output.slice(-2_000)}`);
}

/** Sends SIGTERM, then SIGKILL after `graceMs`, and resolves once the process has exited. */
export async function terminate(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts the pinned `openfga` binary on free loopback ports (HTTP; gRPC on another free port,
 * metrics and playground off) and waits until `/healthz` reports SERVING.
 */
export async function startNativeOpenFga(options: OpenFgaServerOptions = {}): Promise<OpenFgaServer> {
  const bin = await ensureOpenFgaBinary({ log: (line) => console.error(`[stack] ${line}`) });
  const datastore = options.datastore ?? 'memory';
  if (datastore === 'postgres') {
    if (!options.datastoreUri) throw new Error('startNativeOpenFga: the postgres datastore needs datastoreUri');
    await runToCompletion(bin, ['migrate', '--datastore-engine', 'postgres', '--datastore-uri', options.datastoreUri]);
  }
  // The ports were free when chosen; another process (a second test run, a client's ephemeral
  // port) may have taken one since: then choose others (not when the caller named the HTTP port).
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startOnce(bin, datastore, options);
    } catch (error) {
      if (options.httpPort !== undefined || attempt >= 3 || !/address already in use/i.test(String(error))) throw error;
    }
  }
}

async function startOnce(
  bin: string,
  datastore: 'memory' | 'postgres',
  options: OpenFgaServerOptions,
): Promise<OpenFgaServer> {
  const httpPort = options.httpPort ?? (await freePort());
  const grpcPort = await freePort();
  const args = [
    'run',
    `--http-addr=127.0.0.1:${httpPort}`,
    `--grpc-addr=127.0.0.1:${grpcPort}`,
    '--metrics-enabled=false',
    '--datastore-metrics-enabled=false',
    '--playground-enabled=false',
    '--profiler-enabled=false',
    '--log-level=warn',
    `--datastore-engine=${datastore}`,
  ];
  if (options.datastoreUri) args.push(`--datastore-uri=${options.datastoreUri}`);
  if (options.presharedKey) args.push('--authn-method=preshared', `--authn-preshared-keys=${options.presharedKey}`);
  if (options.checkCacheTtlMs !== undefined) {
    const ttl = `${options.checkCacheTtlMs}ms`;
    args.push(
      '--check-query-cache-enabled=true',
      `--check-query-cache-ttl=${ttl}`,
      '--check-iterator-cache-enabled=true',
      `--check-iterator-cache-ttl=${ttl}`,
      '--list-objects-iterator-cache-enabled=true',
      `--list-objects-iterator-cache-ttl=${ttl}`,
    );
  }

  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-8_000);
  });
  // If this process exits without stop() (a crash, or an exit hook that beats us), take the server down too.
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  child.once('exit', () => process.removeListener('exit', killOnExit));
  // …and if it dies without even its exit handlers (SIGKILL), a watchdog does.
  const watchdog = startWatchdog(PROCESS_WATCHDOG, [String(child.pid), basename(bin).slice(0, 15)]);
  const stop = async () => {
    await terminate(child);
    await watchdog.disarm();
  };
  const apiUrl = `http://127.0.0.1:${httpPort}`;
  try {
    await waitFor(`OpenFGA at ${apiUrl}`, () => openFgaServing(apiUrl, options.presharedKey), {
      timeoutMs: 30_000,
      abortIf: () =>
        child.exitCode !== null || child.signalCode !== null
          ? `the openfga process exited (${child.exitCode ?? child.signalCode}): ${stderr}`
          : undefined,
    });
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    apiUrl,
    httpPort,
    presharedKey: options.presharedKey,
    pid: child.pid,
    stop,
  };
}
