import type { TupleKey, AnyKysely } from '@outbox/outbox';

/** A Read filter for exactly one partition's live tuples: on `object` (register-outbox), and of `user` (tuple outbox). */
export interface PartitionFilter {
  readonly object: string;
  readonly user?: string;
}

/** What the owner's rows say about one partition, read in the caller's transaction. */
export interface OwnedPartition {
  readonly partitionKey: string;
  /** Whether the partition's object has an owner row; false: its live tuples are an orphan's. */
  readonly objectKnown: boolean;
  /** The tuples OpenFGA should hold in this partition: what the create path writes for the row(s). */
  readonly tuples: readonly TupleKey[];
}

/** One page of {@link OutboxOwner.expectedPage}. */
export interface OwnedPage {
  readonly partitions: readonly OwnedPartition[];
  /** Where the next page starts (opaque to the caller), or undefined after the last page. */
  readonly next: string | undefined;
}

/**
 * The owner's side of one outbox: which objects its tuples live on and which tuples its rows
 * expect — built with the very function the create path uses (a copy would drift). Every read
 * runs in the transaction it is given, never its own.
 *
 * @example
 * const owner: OutboxOwner = registerServiceOwner(vpcService); // @outbox/service-kit
 * const report = await auditOutbox({ db, spec: vpcOutbox, owner, reader });
 */
export interface OutboxOwner {
  /** The OpenFGA types whose objects' tuples belong to this outbox, e.g. `['vpc']`. Every live tuple on them is compared. */
  readonly objectTypes: readonly string[];
  /** The partition key of a live tuple on one of {@link objectTypes}: the key its intents are enqueued under. */
  partitionOf(tuple: TupleKey): string;
  /** The Read filter of one partition's live tuples (its object, and its user when the key names one). */
  partitionFilter(partitionKey: string): PartitionFilter;
  /** One page (from `after`; undefined: the first) of every partition the owner expects tuples in, each once, at most `limit`. */
  expectedPage(trx: AnyKysely, after: string | undefined, limit: number): Promise<OwnedPage>;
  /** The owner's state of exactly these partitions: one entry per key, in any order (`tuples` empty when nothing is expected). */
  partitions(trx: AnyKysely, partitionKeys: readonly string[]): Promise<readonly OwnedPartition[]>;
}
