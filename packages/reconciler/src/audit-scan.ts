import type { TupleKey } from '@outbox/outbox';
import { checkOwned, inSnapshot, objectType, type AuditContext } from './audit-context.js';
import { pendingPartitions } from './audit-pending.js';
import { tupleDigest, tupleId } from './audit-tuples.js';
import { hash64, hash64Text, PartitionDigests } from './partition-digests.js';

/** What the full audit's first look found. */
export interface ScanResult {
  /** Partitions compared: every partition the owner expects tuples in, and every one OpenFGA holds tuples in. */
  readonly compared: number;
  /** Live tuples read on the owner's object types (by the first scan). */
  readonly liveTuples: number;
  /** Partitions that differed and had no pending intent in the snapshot: to confirm. */
  readonly candidates: string[];
  /** Partitions that differed with an intent pending in the snapshot: not drift (yet). */
  readonly pending: string[];
}

/** Every live tuple on the owner's object types, page by page, with its partition key. */
async function scanLive(ctx: AuditContext, each: (partitionKey: string, tuple: TupleKey) => void): Promise<void> {
  const types = new Set(ctx.owner.objectTypes);
  let token: string | undefined;
  do {
    const page = await ctx.reader.readObjectTypes(ctx.owner.objectTypes, token);
    ctx.reads.tuplePages += 1;
    for (const tuple of page.tuples) {
      if (types.has(objectType(tuple.object))) each(ctx.owner.partitionOf(tuple), tuple);
    }
    token = page.continuationToken;
  } while (token);
}

/**
 * The full audit's first look: OpenFGA's live tuples first, held as one digest per partition key's
 * hash (memory grows with the partitions, outside the heap), then one short snapshot of the owner
 * and the outbox, opened after the slow scan (a long one holds back vacuum). A partition whose
 * digest differs is confirmed on its tuples afterwards. Partitions held in OpenFGA where the owner
 * expects nothing are known by hash only: a second scan, made only when there are some, names them.
 */
export async function scanPartitions(ctx: AuditContext): Promise<ScanResult> {
  const live = new PartitionDigests();
  let liveTuples = 0;
  await scanLive(ctx, (key, tuple) => {
    liveTuples += 1;
    live.add(hash64(key), hash64(tupleId(tuple)));
  });

  const expected = await inSnapshot(ctx.db, async (trx) => {
    const differing = new Set<string>();
    let compared = 0;
    let after: string | undefined;
    do {
      const page = await ctx.owner.expectedPage(trx, after, ctx.pageSize);
      for (const partition of page.partitions) {
        checkOwned(ctx, partition);
        compared += 1;
        if (tupleDigest(partition.tuples) !== live.take(hash64(partition.partitionKey)))
          differing.add(partition.partitionKey);
      }
      after = page.next;
    } while (after !== undefined);
    return { compared, differing, pending: await pendingPartitions(trx, ctx.spec, differing) };
  });

  // Held in OpenFGA where the owner expects nothing: unexpected, or an orphan's. A partition gone
  // by the second scan has nothing left to report; its pending intents are read in a snapshot of
  // their own, and every candidate is confirmed in fresh ones anyway.
  const untaken = live.untaken();
  live.release();
  const unexpected = new Set<string>();
  if (untaken.size > 0) {
    await scanLive(ctx, (key) => {
      if (untaken.has(hash64Text(hash64(key)))) unexpected.add(key);
    });
  }
  const pendingUnexpected =
    unexpected.size > 0 ? await inSnapshot(ctx.db, (trx) => pendingPartitions(trx, ctx.spec, unexpected)) : new Set();
  const keys = [...expected.differing, ...unexpected];
  const pending = (key: string) => expected.pending.has(key) || pendingUnexpected.has(key);
  return {
    compared: expected.compared + untaken.size,
    liveTuples,
    candidates: keys.filter((key) => !pending(key)),
    pending: keys.filter(pending),
  };
}
