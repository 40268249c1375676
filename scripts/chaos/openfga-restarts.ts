import { setTimeout as sleep } from 'node:timers/promises';
import {
  processStat,
  startNativeOpenFga,
  type OpenFgaServer,
  type ProxyUpstream,
  type Stack,
} from '@outbox/test-stack';

/** The run's OpenFGA, which it stops and starts again (same datastore, same store). */
export interface RestartableOpenFga {
  /** Where it listens now. */
  readonly upstream: ProxyUpstream;
  readonly apiUrl: string;
  /** Stops it, waits `outageMs`, starts it on the same port or a new one; resolves with where it is. */
  restart(options: { readonly newPort: boolean; readonly outageMs: number }): Promise<ProxyUpstream>;
  /** Stops the server this module started (the stack's own one is the stack's to stop). Safe twice. */
  stop(): Promise<void>;
}

const STOP_GRACE_MS = 10_000;

function upstreamOf(apiUrl: string): ProxyUpstream {
  const url = new URL(apiUrl);
  return { host: url.hostname, port: Number(url.port) };
}

/** SIGTERM (OpenFGA drains its requests), SIGKILL past the grace; resolves once the process is gone. */
async function stopByPid(pid: number): Promise<void> {
  const gone = () => processStat(pid) === undefined;
  process.kill(pid, 'SIGTERM');
  for (let waited = 0; !gone() && waited < STOP_GRACE_MS; waited += 50) await sleep(50);
  if (gone()) return;
  process.kill(pid, 'SIGKILL');
  for (let waited = 0; !gone() && waited < STOP_GRACE_MS; waited += 50) await sleep(50);
  if (!gone())
    throw new Error(`chaos: openfga (pid ${pid}) is still there ${2 * STOP_GRACE_MS} ms after SIGTERM and SIGKILL`);
}

/**
 * Takes over the stack's OpenFGA. The stack has no stop for one of its servers alone, so the first
 * restart stops the stack's OpenFGA by its pid (SIGTERM, as its own stop would; the stack's stop then
 * finds it gone); later ones stop the server started here.
 *
 * @example
 * const openfga = takeOverOpenFga(stack, withDatabase(stack.postgresUrl, 'openfga'));
 * fleet.retarget(await openfga.restart({ newPort: true, outageMs: 500 }));
 */
export function takeOverOpenFga(stack: Stack, datastoreUri: string): RestartableOpenFga {
  const stackPid = stack.pids.find((pid) => processStat(pid)?.name === 'openfga');
  if (stackPid === undefined) throw new Error('chaos: the stack started no native openfga process it could restart');
  let apiUrl = stack.openfga.apiUrl;
  let ours: OpenFgaServer | undefined;
  let stackServerUp = true;

  const stopCurrent = async () => {
    if (ours) {
      await ours.stop();
      ours = undefined;
    } else if (stackServerUp) {
      stackServerUp = false;
      await stopByPid(stackPid);
    }
  };

  return {
    get upstream() {
      return upstreamOf(apiUrl);
    },
    get apiUrl() {
      return apiUrl;
    },
    async restart({ newPort, outageMs }) {
      const oldPort = upstreamOf(apiUrl).port;
      await stopCurrent();
      await sleep(outageMs);
      try {
        ours = await startNativeOpenFga({
          datastore: 'postgres',
          datastoreUri,
          ...(newPort ? {} : { httpPort: oldPort }),
        });
      } catch (error) {
        if (newPort) throw error;
        // The old port was taken meanwhile (a client's ephemeral port): a new one, then.
        ours = await startNativeOpenFga({ datastore: 'postgres', datastoreUri });
      }
      apiUrl = ours.apiUrl;
      return upstreamOf(apiUrl);
    },
    async stop() {
      await ours?.stop();
      ours = undefined;
    },
  };
}
