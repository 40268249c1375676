import type { IntentPayload } from '@outbox/outbox';

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
 * What became of one intent:
 * - `delivered`: the target accepted it (or already had it: replays must be harmless);
 * - `transient`: may succeed later (network, 5xx, throttling, a conflict race); retried with backoff;
 * - `permanent`: will never succeed as written (validation, model mismatch); poisoned at once;
 * - `skipped`: not attempted, because an earlier intent of its partition in this batch was not
 *   delivered. The drainer releases it untouched (no attempt counted).
 *
 * `error` is stored (truncated, credentials scrubbed) in `last_error`.
 */
export type Outcome =
  | { readonly kind: 'delivered' }
  | { readonly kind: 'transient'; readonly error: string }
  | { readonly kind: 'permanent'; readonly error: string }
  | { readonly kind: 'skipped' };

/** What the drainer passes to every delivery. */
export interface SinkContext {
  /**
   * Aborted when the delivery deadline (`deliveryTimeoutMs`) passes: stop, and return the outcomes
   * (what was delivered before the abort as `delivered`, the rest `transient` or `skipped`) within
   * the grace that follows (1 s, or `deliveryTimeoutMs` if shorter), or throw. A sink still running
   * after the grace fails its whole batch as transient, and its delivered intents are sent again.
   */
  readonly signal: AbortSignal;
}

/**
 * Where intents go. The drainer calls `deliver` with a batch sorted by id (so each partition's
 * intents are in order) while it holds their row locks, and expects one outcome per intent, in the
 * same order.
 *
 * Ordering contract: within one partition, the sink must not apply an intent after an earlier one
 * of the same partition failed in this call; it reports those later intents as `skipped`. (It may
 * apply several intents of one partition in one atomic request when their tuple keys are disjoint.)
 *
 * A sink that throws, returns the wrong number of outcomes, or is still running after the deadline
 * and its grace (see {@link SinkContext.signal}) fails the whole batch as transient: the drainer
 * never dies from a sink. To stop a pass without
 * consuming attempts (e.g. credentials refused), throw a {@link SinkHaltError}.
 */
export interface Sink {
  deliver(intents: readonly Intent[], context: SinkContext): Promise<readonly Outcome[]>;
}

/** A registry-wide symbol: the same in two copies of @outbox/drainer (e.g. one nested under a sink package). */
const SINK_HALT: unique symbol = Symbol.for('@outbox/drainer.SinkHaltError');

/**
 * Thrown by a sink when delivering is pointless right now and no intent is at fault (e.g. the
 * target refuses our credentials). The drainer releases the whole batch without counting an
 * attempt, stops the pass, and reports a `pass-failed` event with this error.
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
 * Whether `error` is a {@link SinkHaltError}, from this copy of @outbox/drainer or another one: a
 * sink package may bring its own copy (version skew), and `instanceof` would then say no, turning a
 * halt into a counted transient failure of every intent.
 */
export function isSinkHalt(error: unknown): error is SinkHaltError {
  return error instanceof SinkHaltError || (typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[SINK_HALT] === true);
}
