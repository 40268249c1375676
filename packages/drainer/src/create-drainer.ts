import { verifyOutboxTable } from '@outbox/outbox';
import { createDrainPass, type DrainResult, type WriteThroughResult } from './drain-pass.js';
import type { DrainerConfig } from './drainer-config.js';
import { DrainerStoppedError } from './errors.js';
import { FlushWaiters, intentIds } from './flush-waiters.js';
import { NotificationListener, type ListenState } from './listener.js';
import { resolveDrainerConfig } from './resolve-drainer-config.js';

/** A running (or runnable) drainer for one outbox table. */
export interface Drainer {
  /**
   * Verifies the table, starts the timer and (if configured) LISTEN, and kicks a first pass. Called
   * again while started, it returns the same promise (one timer, one LISTEN connection); a `stop()`
   * during the start wins (nothing is left running). It can start again after `stop()`. Rejects,
   * leaving nothing running, when the table does not verify or when the first LISTEN connection
   * fails for a cause no retry mends ({@link ListenConnectionError}: credentials, database, host);
   * a LISTEN server that is merely down is retried in the background while the timer delivers.
   */
  start(): Promise<void>;
  /** Whether LISTEN is up: `off` without `listen` (or when stopped), `reconnecting` while the timer alone delivers. */
  listenState(): ListenState;
  /** Stops the timer and listener and waits for every open batch. Waiting flushes (even one still on its first query) reject. */
  stop(): Promise<void>;
  /**
   * One pass, after the one in flight: batches, up to `concurrentBatches` open at once, until nothing
   * is claimable, or until each lane of batches ran one in which nothing was delivered or poisoned
   * (the target is likely down); the counts are the sums over its batches. Rejects with
   * {@link DrainerStoppedError} after `stop()`.
   */
  drainOnce(): Promise<DrainResult>;
  /** Asks for a pass soon; coalesces with a running one (which opens another batch if it has room; at most one more pass is scheduled). */
  kick(): void;
  /**
   * Resolves when every intent of `partitionKey` committed and deliverable at the call is delivered;
   * meanwhile every batch claims that partition first, so it waits for the batch in flight, not a
   * backlog. Rejects with {@link FlushPoisonedError}, {@link FlushTimeoutError}, or
   * {@link DrainerStoppedError}. `partitionKey` is a string (`''` included: rows with an empty key
   * group under it), `timeoutMs` (default 10000) an integer from 1 to 2147483647; anything else
   * rejects with an `OutboxConfigError` naming `flush.partitionKey` or `flush.timeoutMs`. With
   * `ids` (what `enqueue` returned for this partition) it waits for those intents only, and spares
   * the look-up of the partition's pending ones.
   */
  flush(options: { partitionKey: string; ids?: readonly string[]; timeoutMs?: number }): Promise<void>;
  /**
   * The write-through: right after the commit that enqueued `ids` (what `enqueue` returned), delivers
   * those that are their partitions' heads, here and now, in a batch of their own — claimed by id
   * under the claim rule, then outcomes, late-write stamps and settle as any batch — and leaves the
   * rest (behind a pending predecessor, backing off, held by another drainer) to the passes (it
   * kicks a started drainer). While a pass of this drainer runs, it defers everything to it (the
   * pass batches the writes of many callers). Resolves once the sink has answered, with what it
   * delivered, and `settled` for the commit that records it (a waiting `flush` of these intents,
   * and `awaitDelivered` anywhere, resolve on that commit); a failed delivery is recorded as any
   * batch's. Runs whether or not the drainer is started; rejects with
   * {@link DrainerStoppedError} after `stop()`,
   * and with the error of a database or sink that failed the batch (nothing is lost: the passes
   * take the intents).
   */
  writeThrough(ids: readonly string[]): Promise<WriteThroughResult>;
}

/** How long after a notification a pass starts while this process writes through. */
const NOTIFY_GRACE_MS = 2;
/** A write-through this recent means the process writes through. */
const WRITE_THROUGH_RECENT_MS = 10_000;

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
export function createDrainer(options: DrainerConfig): Drainer {
  const config = resolveDrainerConfig(options);
  let stopping = false;
  let verified: Promise<void> | undefined;
  const verify = () =>
    (verified ??= verifyOutboxTable(config.db, config.spec).catch((error: unknown) => {
      verified = undefined;
      throw error;
    }));
  const flushes = new FlushWaiters({ config, kick: () => kick(), stopping: () => stopping });
  const pass = createDrainPass({
    config,
    verify,
    flushedPartitions: () => flushes.partitions(),
    committed: (recorded) => flushes.committed(recorded),
    stopping: () => stopping,
  });

  /** Write-throughs in flight, to their settle's commit: `stop()` waits for them as for the pass. */
  const throughs = new Set<Promise<unknown>>();
  // Single flight: one pass at a time in this process; a kick during a pass schedules one more.
  let running: Promise<DrainResult> | undefined;
  let again = false;
  function runPass(): Promise<DrainResult> {
    if (running) {
      again = true;
      return running;
    }
    let progressed = false;
    const current = pass
      .run()
      .then((result) => {
        progressed = result.delivered + result.poisoned > 0;
        return result;
      })
      .finally(() => {
        running = undefined;
        flushes.passEnded(progressed);
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
    pass.moreClaimable(); // new commits, or a flush: another lane may claim them while the open batches deliver
    // Under a steady load a pass can last as long as the load: a handler per kick on it would pile up.
    if (running) again = true;
    else runPass().catch(() => undefined); // failures are logged and emitted inside the pass
  }

  /**
   * One try of a write-through; its settle is tracked for `stop()` and for the write-throughs
   * after it. What it defers is left to a started drainer's passes unless `retryFollows`.
   */
  async function throughOnce(ids: readonly string[], retryFollows: boolean): Promise<WriteThroughResult> {
    const through = pass.writeThrough(ids);
    const settled = through.then((result) => result.settled);
    throughs.add(settled);
    void settled.finally(() => throughs.delete(settled)).catch(() => undefined);
    try {
      const result = await through;
      if (result.deferred.length > 0 && !retryFollows && starting) kick();
      return result;
    } catch (error) {
      if (starting) kick();
      throw error;
    }
  }

  let lastThroughAt = -Infinity;
  let notifyTimer: NodeJS.Timeout | undefined;
  /**
   * A notification kicks a pass; while this process writes through, a moment later: the commit it
   * notifies is most likely a writer's here, whose write-through then claims its heads before the
   * pass instead of deferring to it (docs/drainer.md, "Write-through").
   */
  function notified(): void {
    if (performance.now() - lastThroughAt > WRITE_THROUGH_RECENT_MS) return kick();
    notifyTimer ??= setTimeout(() => {
      notifyTimer = undefined;
      kick();
    }, NOTIFY_GRACE_MS);
  }

  let timer: NodeJS.Timeout | undefined;
  function schedule(): void {
    timer = setTimeout(() => {
      kick();
      if (!stopping) schedule();
    }, config.intervalMs);
  }

  // A stop() while start() is still verifying or connecting wins: `generation` tells that start it was overtaken.
  let listener: NotificationListener | undefined;
  let starting: Promise<void> | undefined;
  let generation = 0;
  async function startOnce(current: number): Promise<void> {
    await verify();
    if (current !== generation) return;
    if (config.listen) {
      const started = new NotificationListener({
        connectionString: config.listen.connectionString,
        channel: config.spec.channel,
        onNotify: notified,
        logger: config.logger,
        onStateChange: (state) => config.emit({ type: 'listen-changed', table: config.spec.table, state }),
      });
      listener = started; // visible to a stop() from now on, which stops it
      try {
        await started.start();
      } catch (error) {
        if (listener === started) listener = undefined;
        throw error;
      }
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
      clearTimeout(notifyTimer);
      notifyTimer = undefined;
      flushes.stopAll();
      // Taken before awaiting: a start() during this stop() sets up its own listener, for the next stop() to close.
      const closing = listener;
      listener = undefined;
      await closing?.stop();
      if (closing) config.emit({ type: 'listen-changed', table: config.spec.table, state: 'off' });
      await running?.catch(() => undefined);
      await Promise.all([...throughs].map((through) => through.catch(() => undefined)));
    },
    listenState: () => listener?.state ?? 'off',
    async drainOnce() {
      if (stopping) throw new DrainerStoppedError();
      // A pass already running may have started before the caller's commit: let it finish, then run one that starts now.
      await running?.catch(() => undefined);
      // One a kick queued behind it has started since, after this call: it is that pass (marking
      // another due would leave a pass running after this one returns).
      return running ?? runPass();
    },
    kick,
    flush: (request) => flushes.flush(request),
    async writeThrough(ids) {
      const checked = intentIds(ids, 'writeThrough.ids');
      if (stopping) throw new DrainerStoppedError();
      // A pass in flight batches the writes of many callers, which beats a batch per write: the
      // kick asks it to claim these too (benchmarked: docs/BENCHMARKS.md, "Write path").
      if (running) {
        kick();
        return { delivered: [], deferred: checked, settled: Promise.resolve(true) };
      }
      lastThroughAt = performance.now();
      // Write-throughs run side by side. One in flight may hold a predecessor of these: its
      // settle's commit makes them heads, so what this try defers is tried once more after it.
      const before = [...throughs];
      const first = await throughOnce(checked, before.length > 0);
      if (first.deferred.length === 0 || before.length === 0) return first;
      await Promise.all(before.map((through) => through.catch(() => undefined)));
      if (stopping || running) {
        if (starting) kick();
        return first;
      }
      const second = await throughOnce(first.deferred, false);
      const delivered = new Set([...first.delivered, ...second.delivered]);
      return {
        delivered: checked.filter((id) => delivered.has(id)),
        deferred: second.deferred,
        settled: Promise.all([first.settled, second.settled]).then((all) => all.every(Boolean)),
      };
    },
  };
}
