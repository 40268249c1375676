/**
 * Why `retire` refused one id.
 *
 * @example
 * const revivable = error.refused.filter((r) => r.refusal === 'revivable').map((r) => r.id);
 */
export type RetireRefusal =
  /** No row has this id (or it is not an outbox id at all). */
  | 'unknown'
  /** Already delivered: it is evidence, not something to close. */
  | 'delivered'
  /** Already retired. */
  | 'retired'
  /** Already discarded. */
  | 'discarded'
  /** Pending with attempts left: the drainer will still deliver it. */
  | 'deliverable'
  /** Poisoned but with no delivered successor that covers it: redrive it (or discard it), do not retire it. */
  | 'revivable';

/**
 * Why `discardPoisoned` refused one id.
 *
 * @example
 * const toRetire = error.refused.filter((r) => r.refusal === 'superseded').map((r) => r.id);
 */
export type DiscardRefusal =
  | 'unknown'
  | 'delivered'
  | 'retired'
  | 'discarded'
  /** A drainer holds a pending row of its partition right now: try again in a moment. */
  | 'in-flight'
  | 'deliverable'
  /** A delivered successor covers it: `retire` it instead (nothing is left unwritten). */
  | 'superseded';

/** One id `retire` refused, and why. */
export interface RefusedRetirement {
  readonly id: string;
  readonly refusal: RetireRefusal;
}

/** One id `discardPoisoned` refused, and why. */
export interface RefusedDiscard {
  readonly id: string;
  readonly refusal: DiscardRefusal;
}

const lines = (refused: readonly { id: string; refusal: string }[]) =>
  refused.map((r) => `  - ${r.id}: ${r.refusal}`).join('\n');

/**
 * `retire` changed nothing: at least one id was not a superseded intent (docs/design.md §2).
 * `refused` lists each such id with its reason; retire only the ids a redrive reported as superseded.
 *
 * @example
 * try {
 *   await reconciler.retire(ids, 'resource deleted during the outage');
 * } catch (error) {
 *   if (error instanceof RetireRefusedError) console.error(error.refused);
 *   else throw error;
 * }
 */
export class RetireRefusedError extends Error {
  override readonly name = 'RetireRefusedError';
  readonly table: string;
  readonly refused: readonly RefusedRetirement[];
  constructor(table: string, refused: readonly RefusedRetirement[], message?: string, options?: { cause?: unknown }) {
    super(
      message ??
        `retire on ${table} changed nothing: only superseded intents can be retired, and these are not:\n${lines(refused)}`,
      options,
    );
    this.table = table;
    this.refused = refused;
  }
}

/**
 * `discardPoisoned` changed nothing: at least one id was not a poisoned intent without a covering
 * delivered successor, or a drainer held its partition. `refused` lists each with its reason.
 *
 * @example
 * try {
 *   await reconciler.discardPoisoned({ ids, reason: 'tenant deleted; grant intentionally dropped' });
 * } catch (error) {
 *   if (error instanceof DiscardRefusedError) console.error(error.refused);
 *   else throw error;
 * }
 */
export class DiscardRefusedError extends Error {
  override readonly name = 'DiscardRefusedError';
  readonly table: string;
  readonly refused: readonly RefusedDiscard[];
  constructor(table: string, refused: readonly RefusedDiscard[], message?: string, options?: { cause?: unknown }) {
    super(
      message ??
        `discard on ${table} changed nothing: only poisoned intents no delivered successor supersedes can be discarded, and these are not:\n${lines(refused)}`,
      options,
    );
    this.table = table;
    this.refused = refused;
  }
}
