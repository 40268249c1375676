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
  /** Pending with attempts left: the drainer will still deliver it. */
  | 'deliverable'
  /** Poisoned but with no delivered successor that covers it: redrive it, do not retire it. */
  | 'revivable';

/**
 * One id `retire` refused, and why.
 *
 * @example
 * const line = (r: RefusedRetirement) => `${r.id}: ${r.refusal}`;
 */
export interface RefusedRetirement {
  readonly id: string;
  readonly refusal: RetireRefusal;
}

/**
 * `retire` changed nothing: at least one id was not a superseded intent (DESIGN §2). `refused`
 * lists each such id with its reason; retire only the ids a redrive reported as superseded.
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
        `retire on ${table} changed nothing: only superseded intents can be retired, and these are not:\n` +
          refused.map((r) => `  - ${r.id}: ${r.refusal}`).join('\n'),
      options,
    );
    this.table = table;
    this.refused = refused;
  }
}
