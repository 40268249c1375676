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
   * At it the sink's signal is aborted and the sink gets a grace (1 s, or this deadline if shorter)
   * to return what it did; a sink that has not answered by then fails the whole batch as transient.
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
  /** Called for every batch and outcome, with timings (metrics hook). Exceptions (and rejections of an async hook) are ignored. */
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
  /**
   * One pass: batches until nothing is claimable, or until a batch in which nothing was delivered
   * or poisoned (the target is likely down or throttling; the next pass goes on). Waits for an
   * in-flight pass first. Rejects with {@link DrainerStoppedError} after `stop()`.
   */
  drainOnce(): Promise<DrainResult>;
  /** Asks for a pass soon; coalesces with a running one (at most one more pass is scheduled). */
  kick(): void;
  /**
   * Resolves when every intent of `partitionKey` committed before the call (and deliverable then)
   * is delivered. While it waits, the drainer's batches claim that partition first, so it does not
   * wait behind a backlog of other partitions (only behind the batch in flight). Rejects with
   * {@link FlushPoisonedError}, {@link FlushTimeoutError}, or {@link DrainerStoppedError} when the
   * drainer is stopped.
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

/** Swallows the rejection of a promise a handler typed `void` returned anyway (an async handler). */
function ignoreRejection(value: unknown): void {
  if (typeof (value as PromiseLike<unknown> | undefined)?.then === 'function') {
    Promise.resolve(value).catch(() => undefined);
  }
}

/** The service's logger, each call shielded: a logger that throws or rejects is ignored, never fatal. */
function guardedLogger(target: Logger): Logger {
  // The method is looked up at each call, not once here: a logger whose methods are replaced later
  // (pino on a level change, a test's vi.spyOn) must be called as it is now.
  const guard =
    (level: 'debug' | 'info' | 'warn' | 'error') =>
    (message: string, fields?: Record<string, unknown>) => {
      try {
        ignoreRejection(target[level]?.call(target, message, fields));
      } catch {
        // a broken log transport must not break delivery
      }
    };
  return { debug: guard('debug'), info: guard('info'), warn: guard('warn'), error: guard('error') };
}

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
  // The service's logger and metrics hook must never break delivery: neither by throwing (which
  // would end a pass after its commit, or a LISTEN reconnect inside a pg event handler) nor by
  // returning a promise that rejects (an unhandled rejection ends a Node process).
  const logger = guardedLogger(config.logger ?? consoleLogger);
  const emit = (event: DrainerEvent) => {
    try {
      ignoreRejection(config.onEvent?.(event));
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
    const batch = await claimBatch(conn, spec, batchSize, headLimit, runs, synchronousCommit, flushedPartitions());
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
          // A batch where nothing moved forward (all retried or released) ends the pass. It would
          // spin otherwise (a `skipped` head, a 0 ms backoff), and a batch that failed as a whole
          // usually means the target is down or throttling: the next tick or kick tries again.
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
      // Inside the try: a table that fails its check is reported like any failed pass (a drainer
      // only kicked, never started, would otherwise fail silently).
      await verify();
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
  /** Told when a pass ends, and whether it delivered or poisoned anything. */
  const passListeners = new Set<(progressed: boolean) => void>();
  function runPass(): Promise<DrainResult> {
    if (running) {
      again = true;
      return running;
    }
    let progressed = false;
    const current = pass().then((result) => {
      progressed = result.delivered + result.poisoned > 0;
      return result;
    }).finally(() => {
      running = undefined;
      for (const listener of passListeners) listener(progressed);
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

  /**
   * One waiting `flush`: the ids it still waits for, and how to end it. Every waiting flush of this
   * drainer is checked by one poller with one query per round, whatever their number: hundreds of
   * concurrent flushes, each polling on its own, would take the pool from the pass they wait for.
   */
  interface FlushWaiter {
    readonly partitionKey: string;
    /** Ids still pending, in id order. */
    waiting: readonly string[];
    readonly finish: (error?: Error) => void;
  }
  const flushes = new Set<FlushWaiter>();
  /**
   * The partitions waiting flushes are for, oldest flush first, at most a batch of them: each
   * batch claims their heads before the rest (see `claimBatch`), so a read-your-writes flush waits
   * for the batch in flight and its own, not for the whole backlog ahead of its partition.
   */
  function flushedPartitions(): string[] {
    const keys = new Set<string>();
    for (const waiter of flushes) {
      if (keys.size >= batchSize) break;
      if (waiter.waiting.length > 0) keys.add(waiter.partitionKey);
    }
    return [...keys];
  }
  let poller: Promise<void> | undefined;
  let pollRound = 0;
  /** A waiter was added since the poller's last status query: the next pass end is worth a look. */
  let freshWaiter = false;

  /**
   * Resolves after `ms`, or earlier when a pass ends that delivered or poisoned something (or any pass
   * ends while a new waiter has not been looked at yet). A pass that moved nothing does not end the
   * wait: while the awaited rows back off (or another process holds them) every kicked pass finds
   * nothing and ends in a millisecond, and waking on each would poll the pool without pause.
   */
  function passEndOr(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (progressed = true) => {
        if (!progressed && !freshWaiter) return;
        clearTimeout(wait);
        passListeners.delete(done);
        resolve();
      };
      const wait = setTimeout(done, ms);
      passListeners.add(done);
    });
  }

  function ensurePoller(): void {
    poller ??= pollFlushes()
      .catch(() => undefined)
      .finally(() => {
        poller = undefined;
        if (flushes.size > 0 && !stopping) ensurePoller();
      });
  }

  async function pollFlushes(): Promise<void> {
    const n = tableNames(spec);
    while (flushes.size > 0 && !stopping) {
      kick();
      await passEndOr(Math.min(25 * 2 ** Math.min(pollRound, 3), 200));
      pollRound += 1;
      const current = [...flushes];
      if (current.length === 0) return;
      freshWaiter = false; // the waiters added from here on are not in this round's query
      const ids = [...new Set(current.flatMap((w) => w.waiting))];
      let state;
      try {
        state = await sql<{ id: string; sent: boolean; poisoned: boolean; last_error: string | null }>`
          select id, sent_at is not null as sent, attempt_count >= ${spec.maxAttempts} or retired_at is not null as poisoned, last_error
          from ${sql.raw(n.table)} where id = any(${ids}::bigint[]) order by id`.execute(db);
      } catch (error) {
        // One failed query (a connection reset, a restart) must not reject every waiting flush at
        // once: each goes on waiting, and its own timeoutMs ends it if the database stays away.
        logger.warn(`flush status query on ${spec.table} failed; retrying`, { error: error instanceof Error ? error.message : String(error) });
        continue;
      }
      const byId = new Map(state.rows.map((r) => [String(r.id), r]));
      for (const waiter of current) {
        const mine = waiter.waiting.flatMap((id) => byId.get(id) ?? []);
        const poisoned = mine.find((r) => !r.sent && r.poisoned);
        if (poisoned) {
          waiter.finish(new FlushPoisonedError(waiter.partitionKey, String(poisoned.id), poisoned.last_error));
          continue;
        }
        // A row gone from the table (deleted once delivered, say) is no longer waited for.
        waiter.waiting = mine.filter((r) => !r.sent).map((r) => String(r.id));
        if (waiter.waiting.length === 0) waiter.finish();
      }
    }
  }

  async function flush(options: { partitionKey: string; timeoutMs?: number }): Promise<void> {
    if (!options || typeof options !== 'object') throw new OutboxConfigError('flush', 'expected { partitionKey, timeoutMs? }');
    // '' is a key like any other (rows written with an empty key group under it); undefined or a number is not.
    if (typeof options.partitionKey !== 'string') {
      throw new OutboxConfigError('flush.partitionKey', `expected a string, got ${String(options.partitionKey)}`);
    }
    const partitionKey = options.partitionKey;
    const timeoutMs = integerInRange('flush.timeoutMs', options.timeoutMs, 10_000, 1, MAX_TIMER_MS);
    if (stopping) throw new DrainerStoppedError();
    const n = tableNames(spec);
    await new Promise<void>((resolve, reject) => {
      let waiter: FlushWaiter | undefined;
      let done = false;
      const finish = (error?: Error) => {
        if (done) return;
        done = true;
        clearTimeout(deadline);
        flushWaiters.delete(finish);
        if (waiter) flushes.delete(waiter);
        if (error) reject(error);
        else resolve();
      };
      // The deadline is wall-clock: it holds even while the pool is too busy to answer the queries
      // (a pass delivering on a pool of one, the service's own queries).
      const deadline = setTimeout(() => finish(new FlushTimeoutError(partitionKey, timeoutMs, waiter?.waiting)), timeoutMs);
      // Registered before the first query: a stop() from here on rejects this flush at once.
      flushWaiters.add(finish);
      // The intents this call waits for: committed now, and deliverable now (already-poisoned rows
      // are the reconciler's, and do not block their successors either).
      sql<{ id: string }>`
        select id from ${sql.raw(n.table)}
        where ${sql.raw(n.partition)} = ${partitionKey}
          and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}
        order by id`
        .execute(db)
        .then((target) => {
          if (done) return;
          if (target.rows.length === 0) return finish();
          waiter = { partitionKey, waiting: target.rows.map((r) => String(r.id)), finish };
          flushes.add(waiter);
          pollRound = 0; // a new waiter: poll soon again
          freshWaiter = true; // and look once the pass kicked for it ends
          kick();
          ensurePoller();
        }, (error: unknown) => finish(error instanceof Error ? error : new Error(String(error))));
    });
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
      // Taken before awaiting: a start() during this stop() sets up a listener of its own, which
      // this stop() must neither close nor forget (the next stop() closes it).
      const closing = listener;
      listener = undefined;
      await closing?.stop();
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
