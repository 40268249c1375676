import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import { OutboxConfigError, tableNames, verifyOutboxTable, type OutboxSpec } from '@outbox/outbox';
import { backoffDelayMs, type BackoffOptions } from './backoff.js';
import { claimBatch } from './claim.js';
import { applyOrdering, deliverBatch } from './deliver.js';
import { DrainerStoppedError, FlushPoisonedError, FlushTimeoutError } from './errors.js';
import type { DrainerEvent, Logger } from './events.js';
import { NotificationListener } from './listener.js';
import { recordOutcomes } from './record-outcomes.js';
import { isSinkHalt, type Sink } from './sink.js';

/** What `createDrainer` takes. */
export interface DrainerConfig {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly db: Kysely<any>;
  /** The outbox spec shared with the writer and reconciler. */
  readonly spec: OutboxSpec;
  readonly sink: Sink;
  /**
   * Most intents claimed and delivered per transaction. Default 100, at most 1000: OpenFGA's
   * per-request limit is 100 tuples, a batch holds its row locks for one delivery round trip, and
   * its settle takes one advisory lock per partition in the batch from the Postgres lock table
   * (~6.4k slots at stock settings, shared with every enqueue).
   */
  readonly batchSize?: number;
  /**
   * Milliseconds between scheduled passes (`start()`). Default 1000, at most 2147483647 (Node's
   * timer limit): the schedule is what guarantees progress when notifications are lost; LISTEN cuts
   * latency below it.
   */
  readonly interval?: number;
  /**
   * Retry spacing for transient failures. Defaults: base 1 s, cap 5 min, full jitter. Both are
   * integers from 0 to 2147483647 ms, with `baseMs <= maxMs`. With maxAttempts 10 the default
   * poisons an intent that keeps failing transiently (OpenFGA unreachable, 5xx) after its 10th
   * attempt: the 9 delays before it have ceilings of 1, 2, 4, … 256 s, at most ~8.5 min in all
   * (~4.3 min on average). Raise `baseMs` (or the spec's `maxAttempts`) to ride out longer outages.
   */
  readonly backoff?: BackoffOptions;
  /**
   * LISTEN on the spec's channel through a dedicated connection (Kysely's pool cannot hold one).
   * Default off: pass `{ connectionString }` to wake on commits within milliseconds.
   */
  readonly listen?: false | { readonly connectionString: string };
  /**
   * Deadline for one sink call, in ms. Default 30000, at most 2147483647 (Node's timer limit):
   * longer than any sane OpenFGA write, shorter than the time a stuck batch may hold its row locks.
   * Past it the batch is transient.
   */
  readonly deliveryTimeoutMs?: number;
  /**
   * Whether the drainer's own transactions wait for their commit to reach disk. Default false: each
   * sets `synchronous_commit = off` for itself (never for the session or anyone else's
   * transactions). Losing the last few hundred milliseconds of the drainer's bookkeeping in a
   * Postgres crash only means those intents are delivered again, in order, which at-least-once
   * delivery already allows; a later durable commit that saw them (an enqueue, say) flushes them
   * anyway. It saves every batch a WAL flush. Set true to keep the connection's setting, e.g. to
   * avoid even crash-time redeliveries to a sink that is costly to repeat.
   */
  readonly synchronousCommit?: boolean;
  /** Where the drainer logs. Default: console (warn and error only). */
  readonly logger?: Logger;
  /** Called for every batch and outcome, with timings (metrics hook). Exceptions are ignored. */
  readonly onEvent?: (event: DrainerEvent) => void;
}

/** Counts of one `drainOnce()` pass. */
export interface DrainResult {
  readonly batches: number;
  readonly claimed: number;
  readonly delivered: number;
  readonly retried: number;
  readonly poisoned: number;
  readonly released: number;
  /** True when the pass stopped early because the sink halted (e.g. credentials refused). */
  readonly halted: boolean;
}

/** A running (or runnable) drainer for one outbox table. */
export interface Drainer {
  /**
   * Verifies the table, starts the timer and (if configured) LISTEN, and kicks a first pass. Called
   * again while started, it returns the same promise (one timer, one LISTEN connection); a `stop()`
   * during the start wins (nothing is left running). It can start again after `stop()`.
   */
  start(): Promise<void>;
  /** Stops the timer and listener and waits for the in-flight batch. Waiting flushes (even one still on its first query) reject. */
  stop(): Promise<void>;
  /** One pass: batches until nothing is claimable (waits for an in-flight pass first). */
  drainOnce(): Promise<DrainResult>;
  /** Asks for a pass soon; coalesces with a running one (at most one more pass is scheduled). */
  kick(): void;
  /**
   * Resolves when every intent of `partitionKey` committed before the call (and deliverable then)
   * is delivered; rejects with {@link FlushPoisonedError} or {@link FlushTimeoutError}.
   * `partitionKey` must be a string (`''` included: rows with an empty key group under it); `timeoutMs`
   * (default 10000) an integer from 1 to 2147483647. Anything else rejects with an
   * `OutboxConfigError` naming `flush.partitionKey` or `flush.timeoutMs`.
   */
  flush(options: { partitionKey: string; timeoutMs?: number }): Promise<void>;
}

const consoleLogger: Logger = {
  info: () => undefined,
  warn: (message, fields) => console.warn(`[outbox-drainer] ${message}`, fields ?? ''),
  error: (message, fields) => console.error(`[outbox-drainer] ${message}`, fields ?? ''),
};

const BEGIN = 'begin isolation level read committed';
/** How long a pass keeps one pooled connection before handing it back between two batches. */
const SEGMENT_MS = 200;

/** Node's timers take at most 2^31 - 1 ms: a longer delay is silently replaced by 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;
/** A batch's settle takes one advisory lock per partition in it (DESIGN §5: bound keys per batch). */
const MAX_BATCH_SIZE = 1_000;

/** `value` (or `fallback` when undefined) if it is an integer from `min` to `max`; else an OutboxConfigError naming `field`. */
function integerInRange(field: string, value: unknown, fallback: number, min: number, max: number): number {
  const result = value ?? fallback;
  if (typeof result !== 'number' || !Number.isInteger(result) || result < min || result > max) {
    throw new OutboxConfigError(field, `expected an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return result;
}

/** The backoff options with their defaults, checked: a NaN or negative delay would break or skip the retry spacing. */
function resolveBackoff(options: BackoffOptions | undefined): Required<BackoffOptions> {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new OutboxConfigError('backoff', `expected { baseMs?, maxMs? }, got ${String(options)}`);
  }
  const maxMs = integerInRange('backoff.maxMs', options?.maxMs, 300_000, 0, MAX_TIMER_MS);
  // A cap given alone below the default base lowers the base with it: `{ maxMs: 500 }` means "never wait longer".
  const baseMs = integerInRange('backoff.baseMs', options?.baseMs, Math.min(1_000, maxMs), 0, MAX_TIMER_MS);
  if (baseMs > maxMs) throw new OutboxConfigError('backoff.maxMs', `expected at least backoff.baseMs (${baseMs}), got ${maxMs}`);
  return { baseMs, maxMs };
}

/**
 * Creates a drainer: claims deliverable intents in per-partition order, delivers them through the
 * sink while holding their row locks, and records one outcome per intent. Run it on a timer
 * (`start()`), wake it with LISTEN, or `flush()` one partition for read-your-writes.
 *
 * @example
 * const drainer = createDrainer({ db, spec: vpcOutbox, sink, listen: { connectionString } });
 * await drainer.start();
 * // in an API handler, after the transaction that enqueued:
 * await drainer.flush({ partitionKey: `vpc:${id}`, timeoutMs: 5_000 });
 * // on shutdown:
 * await drainer.stop();
 */
export function createDrainer(config: DrainerConfig): Drainer {
  if (!config || typeof config !== 'object') throw new OutboxConfigError('config', 'expected { db, spec, sink }');
  if (!config.db) throw new OutboxConfigError('db', 'a Kysely instance is required');
  if (!config.spec || typeof config.spec.partitionColumn !== 'string') {
    throw new OutboxConfigError('spec', 'expected the OutboxSpec from defineOutbox()');
  }
  if (!config.sink || typeof config.sink.deliver !== 'function') throw new OutboxConfigError('sink', 'expected an object with deliver(intents, context)');
  const { db, spec, sink } = config;
  const batchSize = integerInRange('batchSize', config.batchSize, 100, 1, MAX_BATCH_SIZE);
  const interval = integerInRange('interval', config.interval, 1_000, 1, MAX_TIMER_MS);
  const deliveryTimeoutMs = integerInRange('deliveryTimeoutMs', config.deliveryTimeoutMs, 30_000, 1, MAX_TIMER_MS);
  const backoff = resolveBackoff(config.backoff);
  if (config.synchronousCommit !== undefined && typeof config.synchronousCommit !== 'boolean') {
    throw new OutboxConfigError('synchronousCommit', `expected a boolean, got ${String(config.synchronousCommit)}`);
  }
  const synchronousCommit = config.synchronousCommit ?? false;
  const logger = config.logger ?? consoleLogger;
  const emit = (event: DrainerEvent) => {
    try {
      config.onEvent?.(event);
    } catch {
      // a metrics hook must not break delivery
    }
  };
  if (config.listen && !config.listen.connectionString) {
    throw new OutboxConfigError('listen', 'expected { connectionString } for the LISTEN connection, or false');
  }

  let verified: Promise<void> | undefined;
  const verify = () => (verified ??= verifyOutboxTable(db, spec).catch((error: unknown) => {
    verified = undefined;
    throw error;
  }));

  // How many partitions a claim takes (the oldest one's run fills the room, the others share what
  // it leaves). It follows the backlog: while most settled partitions still have rows after their
  // run, fewer heads with longer runs fill the batch with fewer head promotions and leave other
  // partitions to other drainers (10 hot keys: two drainers share them instead of one taking all);
  // while most partitions run dry, more heads (halving from the heads last claimed, doubling up to
  // batchSize). When a batch of mostly heads found no settled partition with a next head (every key
  // held one row, e.g. one intent per new resource), the claim skips looking for runs until one does.
  let headLimit = batchSize;
  let runs = true;
  const adaptHeadLimit = (heads: number, settled: { partitions: number; withNextHead: number }) => {
    if (settled.partitions === 0) return;
    headLimit =
      settled.withNextHead * 2 >= settled.partitions ? Math.max(1, Math.min(headLimit, heads) >> 1) : Math.min(batchSize, headLimit * 2);
    runs = settled.withNextHead > 0 || heads * 2 < batchSize;
  };

  interface BatchResult {
    readonly claimed: number;
    readonly delivered: number;
    readonly retried: number;
    readonly poisoned: number;
    readonly released: number;
    /** Emits the outcome events; called once the batch committed. */
    readonly announce: () => void;
    /** The batch committed, and the next one's transaction began, with its settle call. */
    readonly chained: boolean;
  }

  /**
   * Claims, delivers and records one batch in the transaction open on `conn`. The caller commits,
   * except when the batch was one partition's full run and everything was delivered while
   * `mayChain()` still says the caller would go on: then the settle call, the COMMIT and the next
   * BEGIN go in one message (`chained`), and the settle's answer, which only tunes the head limit,
   * is taken as what a full run nearly always leaves: a next head. Returns undefined when nothing
   * was claimable.
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  async function runBatch(conn: Kysely<any>, mayChain: () => boolean): Promise<BatchResult | undefined> {
    const claimStarted = performance.now();
    const batch = await claimBatch(conn, spec, batchSize, headLimit, runs, synchronousCommit);
    if (batch.intents.length === 0) return undefined;
    emit({ type: 'batch-claimed', table: spec.table, count: batch.intents.length, heads: batch.heads, claimMs: performance.now() - claimStarted });
    const deliverStarted = performance.now();
    const outcomes = await deliverBatch(sink, batch.intents, deliveryTimeoutMs);
    const deliverMs = performance.now() - deliverStarted;
    const fullRun = batch.heads === 1 && batch.intents.length === batchSize && mayChain();
    const recorded = await recordOutcomes(
      conn,
      spec,
      applyOrdering(batch.intents, outcomes),
      (intent) => backoffDelayMs(intent.attemptCount, backoff),
      fullRun ? { sendWith: `commit; ${BEGIN}` } : {},
    );
    const chained = recorded.settled === undefined;
    adaptHeadLimit(batch.heads, recorded.settled ?? { partitions: 1, withNextHead: 1 });
    return {
      chained,
      claimed: batch.intents.length,
      delivered: recorded.delivered.length,
      retried: recorded.retried.length,
      poisoned: recorded.poisoned.length,
      released: recorded.released.length,
      announce: () => {
        if (recorded.delivered.length > 0) emit({ type: 'delivered', table: spec.table, ids: recorded.delivered.map((i) => i.id), deliverMs });
        if (recorded.retried.length > 0) {
          emit({ type: 'retried', table: spec.table, ids: recorded.retried.map((r) => r.intent.id), errors: recorded.retried.map((r) => r.error) });
        }
        if (recorded.poisoned.length > 0) {
          const keys = recorded.poisoned.map((r) => r.intent.partitionKey);
          logger.warn(`poisoned ${recorded.poisoned.length} intent(s) of ${spec.table}`, { ids: recorded.poisoned.map((r) => r.intent.id), partitionKeys: keys });
          emit({ type: 'poisoned', table: spec.table, ids: recorded.poisoned.map((r) => r.intent.id), partitionKeys: keys, errors: recorded.poisoned.map((r) => r.error) });
        }
      },
    };
  }

  let stopping = false;
  /**
   * One pass: batches until nothing is claimable. Each batch is its own READ COMMITTED transaction
   * (the claim, settle and reconciler rely on it, whatever the pool's default isolation). The
   * batches run on one connection of the pool for up to SEGMENT_MS at a time, and on it a batch's
   * COMMIT and the next batch's BEGIN go in one message: one round trip per batch fewer than
   * separate statements (see docs/drainer-throughput.md). Between segments the connection goes back
   * to the pool, so the service's own queries (and `flush`'s polling) on a small pool wait for at
   * most a segment, not for a whole backlog.
   */
  async function pass(): Promise<DrainResult> {
    await verify();
    const totals = { batches: 0, claimed: 0, delivered: 0, retried: 0, poisoned: 0, released: 0, halted: false };
    /** One segment on one connection; true when the pass should go on with another. */
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const segment = async (conn: Kysely<any>): Promise<boolean> => {
      const until = performance.now() + SEGMENT_MS;
      const goOn = () => !stopping && performance.now() < until;
      let open = false;
      try {
        for (;;) {
          if (!open) {
            await sql.raw(BEGIN).execute(conn);
            open = true;
          }
          const batch = await runBatch(conn, goOn);
          if (batch === undefined) return false;
          // A batch where nothing moved forward (all retried/released) would spin: leave it to the timer.
          const progressed = batch.delivered + batch.poisoned > 0;
          const stay = batch.chained || (progressed && goOn());
          if (!batch.chained) {
            open = false; // a failed COMMIT ends the transaction too
            await sql.raw(stay ? `commit; ${BEGIN}` : 'commit').execute(conn);
            open = stay;
          }
          totals.batches += 1;
          totals.claimed += batch.claimed;
          totals.delivered += batch.delivered;
          totals.retried += batch.retried;
          totals.poisoned += batch.poisoned;
          totals.released += batch.released;
          batch.announce();
          if (!stay) return progressed && !stopping;
        }
      } finally {
        // The transaction of a failed batch, or the empty one that found nothing to claim.
        if (open) await sql.raw('rollback').execute(conn).catch(() => undefined);
      }
    };
    try {
      let more = true;
      while (more && !stopping) more = await db.connection().execute(segment);
    } catch (error) {
      const halted = isSinkHalt(error);
      const err = error instanceof Error ? error : new Error(String(error));
      logger.error(halted ? `delivery halted, nothing counted against the intents: ${err.message}` : `drain pass failed: ${err.message}`, { table: spec.table });
      emit({ type: 'pass-failed', table: spec.table, error: err, halted });
      if (halted) return { ...totals, halted: true };
      throw err;
    }
    return totals;
  }

  // Single flight: one pass at a time in this process; a kick during a pass schedules one more.
  let running: Promise<DrainResult> | undefined;
  let again = false;
  const passListeners = new Set<() => void>();
  function runPass(): Promise<DrainResult> {
    if (running) {
      again = true;
      return running;
    }
    const current = pass().finally(() => {
      running = undefined;
      for (const listener of passListeners) listener();
      if (again && !stopping) {
        again = false;
        runPass().catch(() => undefined);
      }
    });
    running = current;
    return current;
  }

  function kick(): void {
    if (stopping) return;
    runPass().catch(() => undefined); // failures are logged and emitted inside the pass
  }

  let timer: NodeJS.Timeout | undefined;
  let listener: NotificationListener | undefined;
  const flushWaiters = new Set<(error: Error) => void>();

  function schedule(): void {
    timer = setTimeout(() => {
      kick();
      if (!stopping) schedule();
    }, interval);
  }

  async function flush(options: { partitionKey: string; timeoutMs?: number }): Promise<void> {
    if (!options || typeof options !== 'object') throw new OutboxConfigError('flush', 'expected { partitionKey, timeoutMs? }');
    // '' is a key like any other (rows written with an empty key group under it); undefined or a number is not.
    if (typeof options.partitionKey !== 'string') {
      throw new OutboxConfigError('flush.partitionKey', `expected a string, got ${String(options.partitionKey)}`);
    }
    const timeoutMs = integerInRange('flush.timeoutMs', options.timeoutMs, 10_000, 1, MAX_TIMER_MS);
    if (stopping) throw new DrainerStoppedError();
    const n = tableNames(spec);
    const deadline = Date.now() + timeoutMs;
    // Registered before the first query: a stop() from here on rejects this flush.
    let stoppedError: Error | undefined;
    const onStop = (error: Error) => (stoppedError = error);
    flushWaiters.add(onStop);
    try {
      // The intents this call waits for: committed now, and deliverable now (already-poisoned rows
      // are the reconciler's, and do not block their successors either).
      const target = await sql<{ id: string }>`
        select id from ${sql.raw(n.table)}
        where ${sql.raw(n.partition)} = ${options.partitionKey}
          and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}`.execute(db);
      let waiting = target.rows.map((r) => String(r.id));
      if (waiting.length === 0) return;
      if (stoppedError) throw stoppedError;
      for (let round = 0; ; round += 1) {
        kick();
        await Promise.race([
          new Promise<void>((resolve) => {
            const done = () => {
              passListeners.delete(done);
              resolve();
            };
            passListeners.add(done);
          }),
          sleep(Math.min(25 * 2 ** Math.min(round, 3), 200)),
        ]);
        if (stoppedError) throw stoppedError;
        const state = await sql<{ id: string; sent: boolean; poisoned: boolean; last_error: string | null }>`
          select id, sent_at is not null as sent, attempt_count >= ${spec.maxAttempts} or retired_at is not null as poisoned, last_error
          from ${sql.raw(n.table)} where id = any(${waiting}::bigint[]) order by id`.execute(db);
        const poisoned = state.rows.find((r) => !r.sent && r.poisoned);
        if (poisoned) throw new FlushPoisonedError(options.partitionKey, String(poisoned.id), poisoned.last_error);
        waiting = state.rows.filter((r) => !r.sent).map((r) => String(r.id));
        if (waiting.length === 0) return;
        if (Date.now() >= deadline) throw new FlushTimeoutError(options.partitionKey, timeoutMs, waiting);
      }
    } finally {
      flushWaiters.delete(onStop);
    }
  }

  // Lifecycle: one start at a time (a second start() while started returns the same promise: one
  // timer, one LISTEN connection), and a stop() while start() is still verifying or connecting wins:
  // the start then leaves nothing running. `generation` tells a start it was overtaken.
  let starting: Promise<void> | undefined;
  let generation = 0;
  async function startOnce(current: number): Promise<void> {
    await verify();
    if (current !== generation) return; // stopped meanwhile
    if (config.listen) {
      const started = new NotificationListener({ connectionString: config.listen.connectionString, channel: spec.channel, onNotify: kick, logger });
      listener = started; // visible to a stop() from now on, which stops it
      await started.start();
      if (current !== generation) return;
    }
    schedule();
    kick();
  }

  return {
    start() {
      if (starting) return starting;
      stopping = false;
      const current = ++generation;
      starting = startOnce(current).catch((error: unknown) => {
        if (current === generation) starting = undefined; // a failed start can be retried
        throw error;
      });
      return starting;
    },
    async stop() {
      generation += 1;
      starting = undefined;
      stopping = true;
      clearTimeout(timer);
      timer = undefined;
      for (const reject of flushWaiters) reject(new DrainerStoppedError());
      await listener?.stop();
      listener = undefined;
      await running?.catch(() => undefined);
    },
    async drainOnce() {
      if (stopping) throw new DrainerStoppedError();
      // A pass already running may have started before the caller's commit: let it finish, then
      // run one that starts now.
      await running?.catch(() => undefined);
      return runPass();
    },
    kick,
    flush,
  };
}
