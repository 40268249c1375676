import { MAX_INTENTS_PER_ENQUEUE, OutboxConfigError } from '@outbox/outbox';
import { compareIds, integerInRange, MAX_TIMER_MS } from '@outbox/outbox/protocol';
import type { CommittedOutcomes } from './drain-batch.js';
import { DrainerStoppedError, FlushPoisonedError, FlushTimeoutError } from './errors.js';
import { intentStatuses, pendingIntentIds } from './flush-status.js';
import type { ResolvedDrainerConfig } from './resolve-drainer-config.js';

/** `ids` (the option `field`), checked: the decimal ids `enqueue` returned, distinct, in id order. */
export function intentIds(ids: unknown, field = 'flush.ids'): string[] {
  if (
    !Array.isArray(ids) ||
    ids.length === 0 ||
    ids.length > MAX_INTENTS_PER_ENQUEUE ||
    !ids.every((id) => typeof id === 'string' && /^[1-9]\d{0,18}$/.test(id))
  ) {
    throw new OutboxConfigError(
      field,
      `expected the 1 to ${MAX_INTENTS_PER_ENQUEUE} ids enqueue returned (decimal strings), got ${JSON.stringify(ids)?.slice(0, 100)}`,
    );
  }
  return [...new Set(ids as string[])].sort(compareIds);
}

/** One waiting `flush`. */
interface FlushWaiter {
  readonly partitionKey: string;
  /** Ids still pending, in id order; undefined while the flush's first query runs. */
  waiting: readonly string[] | undefined;
  readonly finish: (error?: Error) => void;
}

type PolledWaiter = FlushWaiter & { waiting: readonly string[] };

export interface FlushWaitersOptions {
  readonly config: ResolvedDrainerConfig;
  readonly kick: () => void;
  readonly stopping: () => boolean;
}

/** Every waiting `flush` of one drainer, and the one poller that checks them all (docs/drainer.md, "Flush"). */
export class FlushWaiters {
  readonly #options: FlushWaitersOptions;
  readonly #waiters = new Set<FlushWaiter>();
  #poller: Promise<void> | undefined;
  #pollRound = 0;
  /** A waiter was added since the last status query. */
  #freshWaiter = false;
  #wake: ((progressed?: boolean) => void) | undefined;

  constructor(options: FlushWaitersOptions) {
    this.#options = options;
  }

  /** `Drainer.flush`. */
  async flush(options: { partitionKey: string; ids?: readonly string[]; timeoutMs?: number }): Promise<void> {
    if (!options || typeof options !== 'object')
      throw new OutboxConfigError('flush', 'expected { partitionKey, ids?, timeoutMs? }');
    // '' is a key like any other (rows written with an empty key group under it); undefined or a number is not.
    if (typeof options.partitionKey !== 'string') {
      throw new OutboxConfigError('flush.partitionKey', `expected a string, got ${String(options.partitionKey)}`);
    }
    const partitionKey = options.partitionKey;
    const ids = options.ids === undefined ? undefined : intentIds(options.ids);
    const timeoutMs = integerInRange('flush.timeoutMs', options.timeoutMs, {
      fallback: 10_000,
      min: 1,
      max: MAX_TIMER_MS,
    });
    if (this.#options.stopping()) throw new DrainerStoppedError();
    return this.#wait(partitionKey, ids, timeoutMs);
  }

  #wait(partitionKey: string, given: readonly string[] | undefined, timeoutMs: number): Promise<void> {
    const { config, kick } = this.#options;
    return new Promise<void>((resolve, reject) => {
      let done = false;
      const waiter: FlushWaiter = {
        partitionKey,
        waiting: undefined,
        finish: (error) => {
          if (done) return;
          done = true;
          clearTimeout(deadline);
          this.#waiters.delete(waiter);
          if (error) reject(error);
          else resolve();
        },
      };
      // Wall-clock: it holds even while the pool is too busy to answer the queries.
      const deadline = setTimeout(
        () => waiter.finish(new FlushTimeoutError(partitionKey, timeoutMs, waiter.waiting)),
        timeoutMs,
      );
      // Registered before the first query: a stop() from here on rejects this flush at once.
      this.#waiters.add(waiter);
      // The ids enqueue returned spare the look-up of the partition (a transaction of four statements).
      (given ? Promise.resolve(given) : pendingIntentIds(config.db, config.spec, partitionKey)).then(
        (ids) => {
          if (done) return;
          if (ids.length === 0) return waiter.finish();
          waiter.waiting = ids;
          // Last: waiters are polled and claimed for in the order their ids were read.
          this.#waiters.delete(waiter);
          this.#waiters.add(waiter);
          this.#pollRound = 0;
          this.#freshWaiter = true;
          kick();
          this.#ensurePoller();
        },
        (error: unknown) => waiter.finish(error instanceof Error ? error : new Error(String(error))),
      );
    });
  }

  /** The partitions waiting flushes are for, oldest first, at most a batch of them. */
  partitions(): string[] {
    const keys = new Set<string>();
    for (const waiter of this.#polled()) {
      if (keys.size >= this.#options.config.batchSize) break;
      if (waiter.waiting.length > 0) keys.add(waiter.partitionKey);
    }
    return [...keys];
  }

  /**
   * Told what a batch of this drainer delivered and poisoned, once it committed: the waiters it
   * settles finish at once, without waiting for the pass to end and a status query to see it.
   */
  committed(recorded: CommittedOutcomes): void {
    if (this.#waiters.size === 0) return;
    const delivered = new Set(recorded.delivered);
    const poisoned = new Map(recorded.poisoned.map((p) => [p.id, p.error]));
    for (const waiter of this.#polled()) {
      const id = waiter.waiting.find((w) => poisoned.has(w));
      if (id !== undefined) {
        waiter.finish(new FlushPoisonedError(waiter.partitionKey, id, poisoned.get(id) ?? null));
        continue;
      }
      waiter.waiting = waiter.waiting.filter((w) => !delivered.has(w));
      if (waiter.waiting.length === 0) waiter.finish();
    }
  }

  /** Told when a pass ends, and whether it delivered or poisoned anything. */
  passEnded(progressed: boolean): void {
    this.#wake?.(progressed);
  }

  /** Rejects every waiting flush, even one still on its first query. */
  stopAll(): void {
    for (const waiter of [...this.#waiters]) waiter.finish(new DrainerStoppedError());
  }

  #polled(): PolledWaiter[] {
    return [...this.#waiters].filter((w): w is PolledWaiter => w.waiting !== undefined);
  }

  #ensurePoller(): void {
    if (this.#poller) return;
    this.#poller = this.#poll()
      .catch(() => undefined)
      .finally(() => {
        this.#poller = undefined;
        if (this.#polled().length > 0 && !this.#options.stopping()) this.#ensurePoller();
      });
  }

  async #poll(): Promise<void> {
    const { config, kick, stopping } = this.#options;
    while (this.#polled().length > 0 && !stopping()) {
      kick();
      await this.#passEndOr(Math.min(25 * 2 ** Math.min(this.#pollRound, 3), 200));
      this.#pollRound += 1;
      const current = this.#polled();
      if (current.length === 0) return;
      this.#freshWaiter = false; // the waiters added from here on are not in this round's query
      let statuses;
      try {
        statuses = await intentStatuses(config.db, config.spec, [...new Set(current.flatMap((w) => w.waiting))]);
      } catch (error) {
        // A connection reset must not reject every waiting flush: each waits on until its own timeoutMs.
        config.logger.warn(`flush status query on ${config.spec.table} failed; retrying`, {
          error: error instanceof Error ? error.message : String(error),
        });
        continue;
      }
      for (const waiter of current) {
        const mine = waiter.waiting.flatMap((id) => statuses.get(id) ?? []);
        const poisoned = mine.find((r) => r.poisoned);
        if (poisoned) {
          waiter.finish(new FlushPoisonedError(waiter.partitionKey, poisoned.id, poisoned.lastError));
          continue;
        }
        // A row gone from the table (deleted once delivered, say) is no longer waited for.
        waiter.waiting = mine.filter((r) => !r.sent).map((r) => r.id);
        if (waiter.waiting.length === 0) waiter.finish();
      }
    }
  }

  /** Resolves after `ms`, or at the end of a pass that moved something (of any pass while a new waiter is unseen). */
  #passEndOr(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = (progressed = true) => {
        if (!progressed && !this.#freshWaiter) return;
        clearTimeout(timer);
        if (this.#wake === wake) this.#wake = undefined;
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#wake = wake;
    });
  }
}
