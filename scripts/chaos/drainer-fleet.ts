import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { resolve } from 'node:path';
import {
  startDelayingProxy,
  type DelayingProxy,
  type DelayingProxyEvent,
  type ProxyUpstream,
} from '@outbox/test-stack';
import type pg from 'pg';
import type { DrainerProcessConfig, DrainerProcessMessage } from './drainer-process.js';

const DRAINER_SCRIPT = resolve(import.meta.dirname, 'drainer-process.ts');
const REPO_ROOT = resolve(import.meta.dirname, '../..');
/** A drainer that is not ready by then is counted as a failed start and tried again. */
const READY_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 10_000;

/** One drainer process and the proxy through which it reaches OpenFGA. */
export interface DrainerSlot {
  readonly index: number;
  /** Its `application_name` in Postgres. */
  readonly name: string;
  readonly proxy: DelayingProxy;
  /** The proxy's events (`held`, `released`, `answered`), re-emitted. */
  readonly proxyEvents: EventEmitter<{ [K in DelayingProxyEvent['type']]: [Extract<DelayingProxyEvent, { type: K }>] }>;
}

/** What `startDrainerFleet` takes. */
export interface DrainerFleetConfig {
  readonly count: number;
  /** The workload database (the fleet adds each drainer's `application_name`). */
  readonly databaseUrl: string;
  readonly upstream: ProxyUpstream;
  readonly storeId: string;
  readonly authorizationModelId: string;
  /** Runs `pg_stat_activity` look-ups and `pg_terminate_backend`. */
  readonly admin: pg.Pool;
  /** Milliseconds before a drainer that died is started again (called per restart). */
  readonly restartDelayMs: () => number;
}

/** Counts over the fleet's life. */
export interface FleetFigures {
  readonly starts: number;
  /** Exits nobody asked for (a crash): should stay 0. */
  readonly unexpectedExits: number;
  /** Reported by the drainers (lost with a SIGKILLed drainer's last second). */
  readonly delivered: number;
  readonly retried: number;
  readonly poisoned: number;
  readonly failedPasses: number;
  /** Sink calls a drainer began on a partition another of its own calls had in flight (the fence makes it 0). */
  readonly overlappingRequests: number;
}

/** The drainer processes of a run; dead ones come back after `restartDelayMs` until `stop()`. */
export interface DrainerFleet {
  readonly slots: readonly DrainerSlot[];
  alive(index: number): boolean;
  /** SIGKILL: the process dies mid-whatever, its connections drop, its row locks are released. */
  kill(index: number): Promise<void>;
  /** Terminates `count` (default all) of the drainer's Postgres backends; returns how many. */
  terminateBackends(index: number, count?: number): Promise<number>;
  /** Points every proxy at a restarted OpenFGA. */
  retarget(upstream: ProxyUpstream): void;
  /** Undoes every proxy fault (holds, delays, pause). */
  calm(): void;
  /** Resolves when every drainer is running (restarts in flight included). */
  allRunning(): Promise<void>;
  figures(): FleetFigures;
  /** SIGTERM (graceful: the drainer finishes its batch), SIGKILL past a grace; closes the proxies. Safe twice. */
  stop(): Promise<void>;
}

interface Running {
  child: ChildProcess;
  expectedExit: boolean;
  exited: Promise<void>;
  stderr: string;
}

/**
 * Starts `count` drainer processes, each behind its own delaying proxy (a sidecar, as it were): the
 * run knows whose Write a proxy holds, so it can kill exactly that drainer.
 *
 * @example
 * const fleet = await startDrainerFleet({ count: 3, databaseUrl, upstream, storeId, authorizationModelId, admin, restartDelayMs: () => 500 });
 * await fleet.kill(0); // back after 500 ms
 * await fleet.stop();
 */
export async function startDrainerFleet(config: DrainerFleetConfig): Promise<DrainerFleet> {
  const figures = {
    starts: 0,
    unexpectedExits: 0,
    delivered: 0,
    retried: 0,
    poisoned: 0,
    failedPasses: 0,
    overlappingRequests: 0,
  };
  const slots: DrainerSlot[] = [];
  const running = new Map<number, Running>();
  const starting = new Map<number, Promise<void>>();
  let stopping = false;

  const urlFor = (name: string) => {
    const url = new URL(config.databaseUrl);
    url.searchParams.set('application_name', name);
    return url.toString();
  };

  const spawnOnce = async (slot: DrainerSlot): Promise<void> => {
    const processConfig: DrainerProcessConfig = {
      databaseUrl: urlFor(slot.name),
      openfgaUrl: `http://${slot.proxy.host}:${slot.proxy.port}`,
      storeId: config.storeId,
      authorizationModelId: config.authorizationModelId,
    };
    // node itself with tsx's loader: one process, so a SIGKILL hits the one holding the connections.
    const child = spawn(process.execPath, ['--import', 'tsx', DRAINER_SCRIPT, JSON.stringify(processConfig)], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    figures.starts += 1;
    const entry: Running = {
      child,
      expectedExit: false,
      exited: once(child, 'exit').then(() => undefined),
      stderr: '',
    };
    child.stderr?.on('data', (chunk: Buffer) => (entry.stderr = (entry.stderr + chunk.toString()).slice(-4_000)));
    child.on('message', (message: DrainerProcessMessage) => {
      if (message.type !== 'counts') return;
      figures.delivered += message.delivered;
      figures.retried += message.retried;
      figures.poisoned += message.poisoned;
      figures.failedPasses += message.failedPasses;
      figures.overlappingRequests += message.overlappingRequests;
    });
    running.set(slot.index, entry);
    const ready = new Promise<void>((resolveReady, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${slot.name} was not ready after ${READY_TIMEOUT_MS} ms`)),
        READY_TIMEOUT_MS,
      );
      child.on('message', (message: DrainerProcessMessage) => {
        if (message.type === 'ready') {
          clearTimeout(timer);
          resolveReady();
        }
      });
      void entry.exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`${slot.name} exited before it was ready: ${entry.stderr.slice(-500)}`));
      });
    });
    void entry.exited.then(() => {
      if (running.get(slot.index) === entry) running.delete(slot.index);
      if (!entry.expectedExit && !stopping) {
        figures.unexpectedExits += 1;
        console.error(
          `[chaos] ${slot.name} exited unexpectedly (${entry.child.exitCode ?? entry.child.signalCode}): ${entry.stderr.slice(-500)}`,
        );
      }
      if (!stopping) scheduleStart(slot, config.restartDelayMs());
    });
    try {
      await ready;
    } catch (error) {
      if (entry.child.exitCode === null && entry.child.signalCode === null) {
        entry.child.kill('SIGKILL'); // its exit schedules the next try
      }
      throw error;
    }
  };

  function scheduleStart(slot: DrainerSlot, delayMs: number): Promise<void> {
    const existing = starting.get(slot.index);
    if (existing) return existing;
    const started = (async () => {
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
      if (stopping) return;
      await spawnOnce(slot);
    })()
      .catch((error: unknown) => {
        if (!stopping) console.error(`[chaos] ${slot.name}: ${error instanceof Error ? error.message : String(error)}`);
      })
      .finally(() => starting.delete(slot.index));
    starting.set(slot.index, started);
    return started;
  }

  const stop = async () => {
    if (stopping && running.size === 0) return;
    stopping = true;
    await Promise.all([...starting.values()]);
    await Promise.all(
      [...running.values()].map(async (entry) => {
        entry.expectedExit = true;
        entry.child.kill('SIGTERM');
        const timer = setTimeout(() => entry.child.kill('SIGKILL'), STOP_GRACE_MS);
        await entry.exited;
        clearTimeout(timer);
      }),
    );
    running.clear();
    await Promise.all(slots.map((slot) => slot.proxy.close()));
  };

  try {
    for (let index = 0; index < config.count; index += 1) {
      const proxyEvents = new EventEmitter() as DrainerSlot['proxyEvents'];
      const proxy = await startDelayingProxy({
        upstream: config.upstream,
        onEvent: (event) =>
          (proxyEvents.emit as (type: string, event: DelayingProxyEvent) => boolean)(event.type, event),
      });
      slots.push({ index, name: `chaos-drainer-${index}`, proxy, proxyEvents });
    }
    await Promise.all(slots.map((slot) => spawnOnce(slot)));
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    slots,
    alive: (index) => running.has(index) && !starting.has(index),
    async kill(index) {
      const entry = running.get(index);
      if (!entry) return;
      entry.expectedExit = true;
      entry.child.kill('SIGKILL');
      await entry.exited;
    },
    async terminateBackends(index, count) {
      const slot = slots[index] as DrainerSlot;
      const { rows } = await config.admin.query<{ pid: number }>(
        'select pid from pg_stat_activity where application_name = $1 order by random() limit $2',
        [slot.name, count ?? 100],
      );
      if (rows.length === 0) return 0;
      const terminated = await config.admin.query<{ ok: boolean }>(
        'select pg_terminate_backend(pid) as ok from unnest($1::int[]) as pid',
        [rows.map((r) => r.pid)],
      );
      return terminated.rows.filter((r) => r.ok).length;
    },
    retarget(upstream) {
      for (const slot of slots) slot.proxy.setUpstream(upstream);
    },
    calm() {
      for (const slot of slots) {
        slot.proxy.holdRequests(0);
        slot.proxy.holdNewConnections(0);
        slot.proxy.delayResponses(0);
        slot.proxy.resume();
      }
    },
    async allRunning() {
      for (let round = 0; round < 3; round += 1) {
        await Promise.all([...starting.values()]);
        const missing = slots.filter((slot) => !running.has(slot.index));
        if (missing.length === 0) return;
        await Promise.all(missing.map((slot) => scheduleStart(slot, 0)));
      }
      if (slots.some((slot) => !running.has(slot.index)))
        throw new Error('a drainer would not start again (see the lines above)');
    },
    figures: () => ({ ...figures }),
    stop,
  };
}
