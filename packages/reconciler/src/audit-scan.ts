import { checkOwned, inSnapshot, objectType, type AuditContext } from './audit-context.js';
import { pendingPartitions } from './audit-pending.js';
import { addToDigest, tupleDigest } from './audit-tuples.js';

/** What the full audit's first look found. */
export interface ScanResult {
  /** Partitions compared: every partition the owner expects tuples in, and every one OpenFGA holds tuples in. */
  readonly compared: number;
  /** Live tuples read on the owner's object types. */
  readonly liveTuples: number;
  /** Partitions that differed and had no pending intent in the snapshot: to confirm. */
  readonly candidates: string[];
  /** Partitions that differed with an intent pending in the snapshot: not drift (yet). */
  readonly pending: string[];
}

/**
 * The full audit's first look: OpenFGA's live tuples first, held as one digest per partition (the
 * heap grows with the partitions, not their tuples), then one short snapshot of the owner and the
 * outbox, opened after the slow scan (a long one holds back vacuum). A partition whose digest
 * differs is confirmed on its tuples afterwards.
 */
export async function scanPartitions(ctx: AuditContext): Promise<ScanResult> {
  const types = new Set(ctx.owner.objectTypes);
  const live = new Map<string, bigint>();
  let liveTuples = 0;
  let token: string | undefined;
  do {
    const page = await ctx.reader.readObjectTypes(ctx.owner.objectTypes, token);
    ctx.reads.tuplePages += 1;
    for (const tuple of page.tuples) {
      if (!types.has(objectType(tuple.object))) continue;
      liveTuples += 1;
      const key = ctx.owner.partitionOf(tuple);
      live.set(key, addToDigest(live.get(key) ?? 0n, tuple));
    }
    token = page.continuationToken;
  } while (token);

  return inSnapshot(ctx.db, async (trx) => {
    const differing = new Set<string>();
    let compared = 0;
    let after: string | undefined;
    do {
      const page = await ctx.owner.expectedPage(trx, after, ctx.pageSize);
      for (const partition of page.partitions) {
        checkOwned(ctx, partition);
        compared += 1;
        if (tupleDigest(partition.tuples) !== (live.get(partition.partitionKey) ?? 0n))
          differing.add(partition.partitionKey);
        live.delete(partition.partitionKey);
      }
      after = page.next;
    } while (after !== undefined);
    // What is left is held in OpenFGA where the owner expects nothing: unexpected, or an orphan's.
    for (const key of live.keys()) differing.add(key);
    compared += live.size;
    const pending = await pendingPartitions(trx, ctx.spec, differing);
    const keys = [...differing];
    return {
      compared,
      liveTuples,
      candidates: keys.filter((key) => !pending.has(key)),
      pending: keys.filter((key) => pending.has(key)),
    };
  });
}
