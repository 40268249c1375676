import type { TupleKey, AnyKysely } from '@outbox/outbox';

/**
 * A Read filter that returns exactly one partition's live tuples: every tuple on `object`
 * (a register-outbox, keyed on the object), or only those of `user` on it (the tuple outbox,
 * keyed on the grant `(user, object)`).
 */
export interface PartitionFilter {
  readonly object: string;
  readonly user?: string;
}

/** What the owner's rows say about one partition, read in the caller's transaction. */
export interface OwnedPartition {
  readonly partitionKey: string;
  /**
   * Whether the partition's object has an owner row. False: every live tuple of the partition is
   * an orphan's (its object was deleted, or never existed, on the owner's side).
   */
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
 * The owner's side of one outbox: which OpenFGA objects its tuples live on and which tuples the
 * owner's rows (a service's resource table; iam's organizations, projects and grants) expect there.
 * The audit compares this with OpenFGA, and repair enqueues the difference, so it must build the
 * tuples with the very function the service's create path uses: a copy would drift from it.
 *
 * Every read runs in the transaction it is given (the audit's REPEATABLE READ snapshot, or
 * repair's READ COMMITTED transaction under the partitions' locks); it must not open its own.
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
  /**
   * One page of every partition the owner's rows expect tuples in, each partition once across all
   * pages, from `after` (undefined: the first page), at most `limit` partitions a page.
   */
  expectedPage(trx: AnyKysely, after: string | undefined, limit: number): Promise<OwnedPage>;
  /** The owner's state of exactly these partitions: one entry per key, in any order (`tuples` empty when nothing is expected). */
  partitions(trx: AnyKysely, partitionKeys: readonly string[]): Promise<readonly OwnedPartition[]>;
}
