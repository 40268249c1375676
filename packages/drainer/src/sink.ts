import type { IntentPayload, TupleKey } from '@outbox/outbox';

/** One claimed intent, as handed to a {@link Sink}. */
export interface Intent {
  /** The outbox row id (a bigint, as a string). */
  readonly id: string;
  readonly partitionKey: string;
  readonly payload: IntentPayload;
  /** Attempts already made before this one. */
  readonly attemptCount: number;
}

/**
 * What became of one intent: `delivered` (or already there: replays must be harmless); `transient`,
 * may succeed later (network, 5xx, throttling, a conflict race), retried with backoff; `permanent`,
 * never as written (validation, model mismatch), poisoned at once; `skipped`, not attempted after an
 * earlier intent of its partition failed, released untouched. `error` goes to `last_error`
 * (truncated, credentials scrubbed); a permanent outcome's `code` (the target's own, e.g. OpenFGA's
 * `validation_error`) goes to `poison_code`, and the row's `poison_cause` is `refused`.
 */
export type Outcome =
  | { readonly kind: 'delivered' }
  | { readonly kind: 'transient'; readonly error: string }
  | { readonly kind: 'permanent'; readonly error: string; readonly code?: string }
  | { readonly kind: 'skipped' };

/** What the drainer passes to every delivery. */
export interface SinkContext {
  /**
   * Aborted at the delivery deadline (`DrainerConfig.deliveryTimeoutMs`): stop, and within the grace
   * that follows return the outcomes (what was delivered before the abort as `delivered`), or throw.
   * A sink still running after the grace fails its whole batch as transient: all of it is sent again.
   */
  readonly signal: AbortSignal;
}

/**
 * Where intents go. The drainer calls `deliver` with a batch sorted by id (so each partition's
 * intents are in order) while it holds their row locks, and expects one outcome per intent, in the
 * same order. Within one partition, the sink must not apply an intent after an earlier one failed in
 * this call: it reports the later ones `skipped` (several intents of one partition may go in one
 * atomic request when their tuple keys are disjoint).
 *
 * A sink that throws or returns the wrong number of outcomes fails the whole batch as transient: the
 * drainer never dies from a sink. To stop a pass without consuming attempts (e.g. credentials
 * refused), throw a {@link SinkHaltError}.
 */
export interface Sink {
  deliver(intents: readonly Intent[], context: SinkContext): Promise<readonly Outcome[]>;
  /**
   * The longest a request this sink sent may still be applied after it was sent, in ms: its own
   * timeout plus the target's (OpenFGA's `--request-timeout`). Optional; with {@link readTuples} it
   * turns the drainer's late-write check on (docs/agreement.md, "Late writes").
   */
  readonly writeLifetimeMs?: number;
  /**
   * Which of `keys` the target holds now (as stored, condition included), read past any cache.
   * Optional: the late-write check reads the keys a close pair of deliveries both named with it.
   */
  readTuples?(keys: readonly TupleKey[], context: SinkContext): Promise<readonly TupleKey[]>;
}

/** A registry-wide symbol: the same in two copies of @outbox/drainer (e.g. one nested under a sink package). */
const SINK_HALT: unique symbol = Symbol.for('@outbox/drainer.SinkHaltError');

/**
 * Thrown by a sink when delivering is pointless now and no intent is at fault (e.g. credentials
 * refused): the drainer releases the batch, counting nothing, stops the pass and emits `pass-failed`.
 */
export class SinkHaltError extends Error {
  override readonly name = 'SinkHaltError';
  /** The brand {@link isSinkHalt} recognises, shared by every copy of this package in a process. */
  readonly [SINK_HALT] = true;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Whether `error` is a {@link SinkHaltError} from any copy of @outbox/drainer: a sink package may
 * bring its own, and `instanceof` would then turn a halt into a counted failure of every intent.
 */
export function isSinkHalt(error: unknown): error is SinkHaltError {
  return (
    error instanceof SinkHaltError ||
    (typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[SINK_HALT] === true)
  );
}
