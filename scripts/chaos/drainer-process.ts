// One drainer of the chaos run, in its own process so that SIGKILL takes it down mid-batch (run
// with `node --import tsx`, never through a wrapper that would take the signal instead).
import { createDrainer, type DrainerEvent, type Sink } from '@outbox/drainer';
import { vpcOutbox } from '@outbox/migrations';
import { createOpenFgaSink } from '@outbox/openfga';
import { createServicePool } from '@outbox/service-kit';
import { Kysely, PostgresDialect } from 'kysely';

/** What the parent passes (as one JSON argument). */
export interface DrainerProcessConfig {
  /** Carries `application_name`, so the run can find and terminate this drainer's backends. */
  readonly databaseUrl: string;
  /** This drainer's delaying proxy in front of OpenFGA. */
  readonly openfgaUrl: string;
  readonly storeId: string;
  readonly authorizationModelId: string;
}

/** What the process reports to its parent, every second and at a graceful stop. */
export interface DrainerProcessCounts {
  readonly delivered: number;
  readonly retried: number;
  readonly poisoned: number;
  readonly failedPasses: number;
  /** Sink calls that began while another call of this process was in flight for one of their partitions. */
  readonly overlappingRequests: number;
}

/** `ready` once started, then counts (deltas since the last report). */
export type DrainerProcessMessage = { readonly type: 'ready' } | ({ readonly type: 'counts' } & DrainerProcessCounts);

const config = JSON.parse(process.argv[2] ?? '{}') as DrainerProcessConfig;
// Faults make every drainer log; the parent counts what matters through the events.
const logger = { info: () => undefined, warn: () => undefined, error: () => undefined };
// The services' pool: a terminated backend fails the query in flight, never the process.
const db = new Kysely({ dialect: new PostgresDialect({ pool: createServicePool(config.databaseUrl, 2, logger) }) });
const counts = { delivered: 0, retried: 0, poisoned: 0, failedPasses: 0, overlappingRequests: 0 };
const onEvent = (event: DrainerEvent) => {
  if (event.type === 'delivered') counts.delivered += event.ids.length;
  else if (event.type === 'retried') counts.retried += event.ids.length;
  else if (event.type === 'poisoned') counts.poisoned += event.ids.length;
  else if (event.type === 'pass-failed') counts.failedPasses += 1;
};
const send = (message: DrainerProcessMessage) =>
  new Promise<void>((resolve) => {
    if (!process.connected || !process.send) return resolve();
    process.send(message, undefined, {}, () => resolve());
  });
const report = () => {
  const sent = send({ type: 'counts', ...counts });
  counts.delivered = counts.retried = counts.poisoned = counts.failedPasses = counts.overlappingRequests = 0;
  return sent;
};

/**
 * Watches the sink from outside the drainer: a call for a partition that another call of this
 * process still has in flight is an overlapping request (reported at once: a SIGKILL may follow).
 */
function overlapCounting(inner: Sink): Sink {
  const inFlight = new Map<string, number>();
  return {
    // The rest of the sink as it is: without them the drainer's late-write check would be off.
    ...(inner.writeLifetimeMs === undefined ? {} : { writeLifetimeMs: inner.writeLifetimeMs }),
    ...(inner.readTuples ? { readTuples: inner.readTuples.bind(inner) } : {}),
    async deliver(intents, context) {
      const keys = [...new Set(intents.map((i) => i.partitionKey))];
      if (keys.some((key) => (inFlight.get(key) ?? 0) > 0)) {
        counts.overlappingRequests += 1;
        void report();
      }
      for (const key of keys) inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
      try {
        return await inner.deliver(intents, context);
      } finally {
        for (const key of keys) {
          const left = (inFlight.get(key) ?? 1) - 1;
          if (left === 0) inFlight.delete(key);
          else inFlight.set(key, left);
        }
      }
    },
  };
}

const drainer = createDrainer({
  db,
  spec: vpcOutbox,
  sink: overlapCounting(
    createOpenFgaSink({
      apiUrl: config.openfgaUrl,
      storeId: config.storeId,
      authorizationModelId: config.authorizationModelId,
    }),
  ),
  listen: { connectionString: config.databaseUrl },
  intervalMs: 200,
  // Rides out an OpenFGA restart (a few seconds) without exhausting intents: 10 attempts span ~15 s on average.
  backoff: { baseMs: 300, maxMs: 4_000 },
  logger,
  onEvent,
});

const reporter = setInterval(() => void report(), 1_000);
let stopping = false;
const stop = async (code: number) => {
  if (stopping) return;
  stopping = true;
  clearInterval(reporter);
  await drainer.stop().catch(() => undefined);
  await report();
  await db.destroy().catch(() => undefined);
  process.exit(code);
};
process.on('SIGTERM', () => void stop(0));
// A Ctrl-C reaches the whole process group; the run stops its drainers itself, with SIGTERM.
process.on('SIGINT', () => undefined);
// The parent is gone (its IPC channel closed): nothing is left to run this drainer for.
process.on('disconnect', () => void stop(1));

await drainer.start();
await send({ type: 'ready' });
