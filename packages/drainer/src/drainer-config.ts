import type { OutboxSpec, AnyKysely, MeterOptions } from '@outbox/outbox';
import type { BackoffOptions } from './backoff.js';
import type { DrainerEvent, Logger } from './events.js';
import type { Sink } from './sink.js';

/** What `createDrainer` takes; `meter` or `meterProvider` for its metrics (docs/metrics.md). */
export interface DrainerConfig extends MeterOptions {
  readonly db: AnyKysely;
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
   * Batches one drainer keeps open at once, each in its own transaction on its own pooled
   * connection: the next batch is claimed and delivered while the Writes of the current one are in
   * flight, so OpenFGA does not idle between batches (docs/design.md §5, "Open batches"; partitions
   * stay in order). Default 3, from 1 to 16: end to end into OpenFGA, one open batch reached about
   * 0.7× of the direct SDK's pipelined writes, three about 0.9×, four no more (docs/BENCHMARKS.md).
   * The pool needs one connection per open batch, plus one for `flush`'s status queries and the
   * late-write check; on a smaller pool fewer batches open (lanes wait their turn for a connection,
   * one at a time, and never deadlock) and the service's own queries wait longer. 1 is the drainer
   * of one batch at a time.
   */
  readonly concurrentBatches?: number;
  /**
   * Milliseconds between scheduled passes (`start()`). Default 1000, at most 2147483647 (Node's
   * timer limit): the schedule is what guarantees progress when notifications are lost; LISTEN cuts
   * latency below it.
   */
  readonly intervalMs?: number;
  /** @deprecated The old name of `intervalMs`, still accepted; giving both is a config error. */
  readonly interval?: number;
  /**
   * Retry spacing for transient failures (defaults: {@link BackoffOptions}). With them and maxAttempts
   * 10, an intent that keeps failing (OpenFGA unreachable, 5xx) is poisoned at its 10th attempt, after
   * 9 delays with ceilings of 1, 2, 4, … 256 s: at most ~8.5 min (511 s), ~4.3 min on average. Raise
   * `baseMs` (each doubling doubles that window) or the spec's `maxAttempts` to ride out longer outages.
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
   * sets `synchronous_commit = off` for itself only, saving every batch a WAL flush. A Postgres crash
   * then loses at most the last few hundred milliseconds of the drainer's bookkeeping: those intents
   * are delivered again, in order, as at-least-once allows. Set true to keep the connection's
   * setting, e.g. for a sink that is costly to repeat.
   */
  readonly synchronousCommit?: boolean;
  /**
   * Checks each delivery that closely followed another of its partition against a late write of the
   * earlier one, and corrects the target through the outbox when one undid it (docs/agreement.md,
   * "Late writes"). Default on when the sink declares `writeLifetimeMs` and can `readTuples` (the
   * OpenFGA sink does); `false` turns it off, as it is for a sink that cannot read.
   */
  readonly lateWrites?: false | LateWritesOptions;
  /** Where the drainer logs. Default: console (warn and error only). */
  readonly logger?: Logger;
  /** Called for every batch and outcome, with timings (metrics hook). Exceptions (and rejections of an async hook) are ignored. */
  readonly onEvent?: (event: DrainerEvent) => void;
}

/**
 * How the drainer checks deliveries at risk of a late write.
 *
 * @example
 * createDrainer({ db, spec, sink, lateWrites: { verifyDelayMs: 20_000 } });
 */
export interface LateWritesOptions {
  /**
   * Milliseconds between a delivery at risk and its check, and how close after another delivery of
   * its partition a delivery is at risk. Default: the sink's `writeLifetimeMs` + 1000 (14000 with
   * the OpenFGA sink's defaults): by then a late write has landed or never will. At least
   * `writeLifetimeMs` (required without it), at most 600000.
   */
  readonly verifyDelayMs?: number;
}
