import type { TupleKey } from '@outbox/outbox';
import type { PartitionFilter } from './owner.js';

/** One page of live tuples. */
export interface TuplePage {
  readonly tuples: readonly TupleKey[];
  /** Pass it back for the next page; undefined after the last one. */
  readonly continuationToken: string | undefined;
}

/** One write or delete OpenFGA recorded in its changelog. */
export interface TupleChange {
  readonly tuple: TupleKey;
  readonly operation: 'write' | 'delete';
  readonly timestamp: Date;
}

/** One page of the changelog of one object type. */
export interface ChangePage {
  readonly changes: readonly TupleChange[];
  /** Where the next read starts: the same token when nothing changed, none when the type has no change after the start time. */
  readonly continuationToken: string | undefined;
}

/**
 * What the audit reads from OpenFGA, structurally: `createOpenFgaTupleReader` (@outbox/openfga)
 * implements it. Each call is one request (the audit counts them).
 *
 * @example
 * const counted: TupleReader = { ...reader, readTuples: (f, t) => (calls++, reader.readTuples(f, t)) };
 */
export interface TupleReader {
  /** One page of every live tuple on objects of `objectTypes` (the full audit's scan). */
  readObjectTypes(objectTypes: readonly string[], continuationToken: string | undefined): Promise<TuplePage>;
  /** One page of the live tuples of one partition (the confirmation's re-read). */
  readTuples(filter: PartitionFilter, continuationToken: string | undefined): Promise<TuplePage>;
  /** One page of the changes to objects of `objectType`, after `from.continuationToken`, else from `from.startTime`. */
  readChanges(
    objectType: string,
    from: { readonly continuationToken?: string; readonly startTime?: Date },
  ): Promise<ChangePage>;
}
