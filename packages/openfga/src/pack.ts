import type { ClientWriteRequest } from '@openfga/sdk';
import type { Intent } from '@outbox/drainer';
import { validatePayload, type TupleKey } from '@outbox/outbox';

/** One intent of the batch, prepared for packing. */
export interface PreparedIntent {
  /** Position in the batch (and so in the outcome array). */
  readonly index: number;
  readonly partitionKey: string;
  readonly writes: readonly TupleKey[];
  readonly deletes: readonly TupleKey[];
  /** Tuple-key ids (user, relation, object) of every operation. */
  readonly keys: readonly string[];
  /** Set when the payload is not a valid intent: it fails permanently, unsent, when its turn comes. */
  readonly invalid?: string;
}

/** Consecutive intents of one partition on pairwise disjoint keys, which may share one atomic request. */
export interface Segment {
  readonly partitionKey: string;
  readonly items: readonly PreparedIntent[];
  readonly keys: ReadonlySet<string>;
  readonly operations: number;
}

/** The tuple key OpenFGA deduplicates on: a write and a delete of one key collide too. */
export function tupleKeyId(key: TupleKey): string {
  return `${key.user}\n${key.relation}\n${key.object}`;
}

/** Validates each intent's payload again: a row edited by hand must not reach OpenFGA malformed. */
export function prepareIntents(intents: readonly Intent[]): PreparedIntent[] {
  return intents.map((intent, index) => {
    try {
      const payload = validatePayload(intent.payload);
      const writes = payload.writes ?? [];
      const deletes = payload.deletes ?? [];
      return {
        index,
        partitionKey: intent.partitionKey,
        writes,
        deletes,
        keys: [...writes, ...deletes].map(tupleKeyId),
      };
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      return {
        index,
        partitionKey: intent.partitionKey,
        writes: [],
        deletes: [],
        keys: [],
        invalid: `invalid intent payload, not sent: ${reason}`,
      };
    }
  });
}

/**
 * Per intent index, the tuple keys a LATER intent of its partition in this batch deletes (intents
 * without any are left out): writes of those keys are superseded (docs/openfga-sink.md §4).
 */
export function keysDeletedLater(items: readonly PreparedIntent[]): Map<number, ReadonlySet<string>> {
  const result = new Map<number, ReadonlySet<string>>();
  const deletedAfter = new Map<string, Set<string>>();
  for (let i = items.length - 1; i >= 0; i -= 1) {
    const item = items[i] as PreparedIntent;
    const later = deletedAfter.get(item.partitionKey);
    if (later !== undefined && later.size > 0) result.set(item.index, new Set(later));
    const own = later ?? new Set<string>();
    for (const key of item.deletes) own.add(tupleKeyId(key));
    deletedAfter.set(item.partitionKey, own);
  }
  return result;
}

/** The intent without its writes of `superseded` keys (same index), or undefined when it has none. */
export function withoutSupersededWrites(
  item: PreparedIntent,
  superseded: ReadonlySet<string>,
): PreparedIntent | undefined {
  const writes = item.writes.filter((key) => !superseded.has(tupleKeyId(key)));
  if (writes.length === item.writes.length) return undefined;
  return { ...item, writes, keys: [...writes, ...item.deletes].map(tupleKeyId) };
}

/** Number of tuple operations an intent (or several) adds to a Write request. */
export function operationCount(items: readonly PreparedIntent[]): number {
  let count = 0;
  for (const item of items) count += item.writes.length + item.deletes.length;
  return count;
}

/**
 * Cuts each partition's intents into segments (an invalid intent is one of its own); partitions
 * in order of first appearance.
 */
export function segmentByPartition(items: readonly PreparedIntent[], maxOperations: number): Map<string, Segment[]> {
  const result = new Map<string, Segment[]>();
  const open = new Map<string, { items: PreparedIntent[]; keys: Set<string>; operations: number }>();
  const close = (partitionKey: string) => {
    const run = open.get(partitionKey);
    if (run === undefined) return;
    open.delete(partitionKey);
    result.get(partitionKey)?.push({ partitionKey, items: run.items, keys: run.keys, operations: run.operations });
  };
  for (const item of items) {
    if (!result.has(item.partitionKey)) result.set(item.partitionKey, []);
    const operations = item.writes.length + item.deletes.length;
    const run = open.get(item.partitionKey);
    const fits =
      run !== undefined &&
      item.invalid === undefined &&
      run.items[0]?.invalid === undefined &&
      run.operations + operations <= maxOperations &&
      item.keys.every((key) => !run.keys.has(key));
    if (run !== undefined && fits) {
      run.items.push(item);
      for (const key of item.keys) run.keys.add(key);
      run.operations += operations;
      continue;
    }
    close(item.partitionKey);
    open.set(item.partitionKey, { items: [item], keys: new Set(item.keys), operations });
    if (item.invalid !== undefined) close(item.partitionKey);
  }
  for (const partitionKey of [...open.keys()]) close(partitionKey);
  return result;
}

/** What one round sends: requests that may run concurrently, and the segments left for later. */
export interface Round {
  /** Each request's intents, in batch order. No two requests of a round share a tuple key. */
  readonly requests: ReadonlyArray<readonly PreparedIntent[]>;
  /** Invalid segments whose turn came: they fail without a request. */
  readonly refused: readonly Segment[];
  /** Segments taken into this round (the caller advances those partitions). */
  readonly taken: readonly Segment[];
}

/**
 * Packs one round from the next segment of each partition, first-fit-decreasing, never splitting
 * one; a head that meets a key already in the round waits (docs/openfga-sink.md §1).
 */
export function packRound(heads: readonly Segment[], maxOperations: number): Round {
  const roundKeys = new Set<string>();
  const taken: Segment[] = [];
  const refused: Segment[] = [];
  for (const segment of heads) {
    if (segment.items[0]?.invalid !== undefined) {
      refused.push(segment);
      taken.push(segment);
      continue;
    }
    let clash = false;
    for (const key of segment.keys) {
      if (roundKeys.has(key)) {
        clash = true;
        break;
      }
    }
    if (clash) continue;
    for (const key of segment.keys) roundKeys.add(key);
    taken.push(segment);
  }
  const bins: Array<{ segments: Segment[]; operations: number }> = [];
  const bySize = taken.filter((s) => !refused.includes(s)).sort((a, b) => b.operations - a.operations);
  for (const segment of bySize) {
    const bin = bins.find((b) => b.operations + segment.operations <= maxOperations);
    if (bin) {
      bin.segments.push(segment);
      bin.operations += segment.operations;
    } else {
      bins.push({ segments: [segment], operations: segment.operations });
    }
  }
  const requests = bins.map((bin) => bin.segments.flatMap((s) => s.items).sort((a, b) => a.index - b.index));
  return { requests, refused, taken };
}

/**
 * The SDK body of one Write request. Deletes carry no condition; a write's condition always has a
 * context, `{}` if none, or its replay is a 409 on the postgres datastore (docs/openfga-sink.md §2).
 */
export function writeRequestBody(items: readonly PreparedIntent[]): ClientWriteRequest {
  const writes = items.flatMap((item) =>
    item.writes.map((key) => ({
      user: key.user,
      relation: key.relation,
      object: key.object,
      ...(key.condition ? { condition: { name: key.condition.name, context: key.condition.context ?? {} } } : {}),
    })),
  );
  const deletes = items.flatMap((item) =>
    item.deletes.map((key) => ({ user: key.user, relation: key.relation, object: key.object })),
  );
  return { ...(writes.length > 0 ? { writes } : {}), ...(deletes.length > 0 ? { deletes } : {}) };
}
