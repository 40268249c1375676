import { OutboxConfigError, type OutboxSpec, type TupleKey, type AnyKysely } from '@outbox/outbox';
import type { TupleReader } from './tuple-reader-interface.js';
import type { OutboxOwner, OwnedPartition } from './owner.js';

/** OpenFGA requests an audit or repair made, by kind: what it cost. */
export interface AuditReads {
  /** Pages of the full scan (`readObjectTypes`): one request each, up to 100 tuples. */
  readonly tuplePages: number;
  /** Pages of per-partition re-reads (`readTuples`): the confirmation, and repair under its locks. */
  readonly partitionReads: number;
  /** Pages of the changelog (`readChanges`): the incremental audit. */
  readonly changePages: number;
}

/** What the audit's and repair's steps share: where to read, and the request counts so far. */
export interface AuditContext {
  readonly db: AnyKysely;
  readonly spec: OutboxSpec;
  readonly owner: OutboxOwner;
  readonly reader: TupleReader;
  readonly pageSize: number;
  readonly concurrency: number;
  readonly reads: { tuplePages: number; partitionReads: number; changePages: number };
}

/** The options every audit and repair entry point takes. */
export interface AuditTarget {
  /** The database of the owner's rows and of the outbox (one database: the outbox is written in the owner's transactions). */
  readonly db: AnyKysely;
  /** The outbox whose partitions are audited: the one the owner's create path enqueues into. */
  readonly spec: OutboxSpec;
  readonly owner: OutboxOwner;
  readonly reader: TupleReader;
  /** Owner partitions per statement of the full audit. Default 500: short queries in a short snapshot. */
  readonly pageSize?: number;
  /** Partition re-reads in flight. Default 4: hides round trips without crowding OpenFGA's datastore. */
  readonly concurrency?: number;
}

export function integerOption(field: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new OutboxConfigError(field, `expected an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function auditContext(target: AuditTarget): AuditContext {
  if (target === null || typeof target !== 'object')
    throw new OutboxConfigError('options', 'expected { db, spec, owner, reader }');
  for (const field of ['db', 'spec', 'owner', 'reader'] as const) {
    if (target[field] === undefined || target[field] === null) throw new OutboxConfigError(field, 'is required');
  }
  if (!Array.isArray(target.owner.objectTypes) || target.owner.objectTypes.length === 0) {
    throw new OutboxConfigError('owner', 'objectTypes must name at least one OpenFGA type');
  }
  return {
    db: target.db,
    spec: target.spec,
    owner: target.owner,
    reader: target.reader,
    pageSize: integerOption('pageSize', target.pageSize, 500, 1, 10_000),
    concurrency: integerOption('concurrency', target.concurrency, 4, 1, 64),
    reads: { tuplePages: 0, partitionReads: 0, changePages: 0 },
  };
}

/** The type of an object `type:id`. */
export function objectType(object: string): string {
  const colon = object.indexOf(':');
  return colon < 0 ? object : object.slice(0, colon);
}

/** Every expected tuple must map back to its partition (else repair would enqueue it out of another key's order). */
export function checkOwned(ctx: AuditContext, partition: OwnedPartition): OwnedPartition {
  if (!partition.objectKnown && partition.tuples.length > 0) {
    throw new OutboxConfigError(
      'owner',
      `expects tuples in partition ${JSON.stringify(partition.partitionKey)} but says its object has no owner row`,
    );
  }
  for (const tuple of partition.tuples) {
    const key = ctx.owner.partitionOf(tuple);
    if (key !== partition.partitionKey) {
      throw new OutboxConfigError(
        'owner',
        `expects (${tuple.user}, ${tuple.relation}, ${tuple.object}) in partition ${JSON.stringify(partition.partitionKey)}, but partitionOf maps it to ${JSON.stringify(key)}`,
      );
    }
  }
  return partition;
}

/** The owner's state of `keys`, one entry per key (an owner that leaves one out is refused: its tuples would read as orphans and be deleted). */
export async function ownedState(
  ctx: AuditContext,
  trx: AnyKysely,
  keys: readonly string[],
): Promise<Map<string, OwnedPartition>> {
  const owned = new Map<string, OwnedPartition>();
  if (keys.length === 0) return owned;
  for (const partition of await ctx.owner.partitions(trx, keys))
    owned.set(partition.partitionKey, checkOwned(ctx, partition));
  const absent = keys.filter((key) => !owned.has(key));
  if (absent.length > 0) {
    throw new OutboxConfigError(
      'owner',
      `partitions() returned no entry for ${absent.length} of the keys asked, e.g. ${JSON.stringify(absent[0])}: return one per key`,
    );
  }
  return owned;
}

/** Every live tuple of one partition (all pages), counted. */
export async function readPartition(ctx: AuditContext, key: string): Promise<TupleKey[]> {
  const filter = ctx.owner.partitionFilter(key);
  const tuples: TupleKey[] = [];
  let token: string | undefined;
  do {
    const page = await ctx.reader.readTuples(filter, token);
    ctx.reads.partitionReads += 1;
    tuples.push(...page.tuples);
    token = page.continuationToken;
  } while (token);
  return tuples;
}

/** Reads every partition of `keys` with at most `ctx.concurrency` requests in flight. */
export async function readPartitions(ctx: AuditContext, keys: readonly string[]): Promise<Map<string, TupleKey[]>> {
  const live = new Map<string, TupleKey[]>();
  let next = 0;
  const worker = async () => {
    while (next < keys.length) {
      const key = keys[next++] as string;
      live.set(key, await readPartition(ctx, key));
    }
  };
  await Promise.all(Array.from({ length: Math.min(ctx.concurrency, keys.length) }, worker));
  return live;
}

/** `work` in a read-only REPEATABLE READ transaction: one snapshot of the owner and the outbox, no lock a drainer waits on. */
export function inSnapshot<T>(db: AnyKysely, work: (trx: AnyKysely) => Promise<T>): Promise<T> {
  return db.transaction().setIsolationLevel('repeatable read').setAccessMode('read only').execute(work);
}
