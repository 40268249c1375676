import type { TupleKey } from '@outbox/outbox';
import { inSnapshot, ownedState, readPartitions, type AuditContext } from './audit-context.js';
import { pendingPartitions } from './audit-pending.js';
import { diffTuples, sameTuples } from './audit-tuples.js';
import type { OwnedPartition } from './owner.js';

/** One partition found drifted: the owner's state and OpenFGA's, confirmed. */
export interface DriftedPartition {
  readonly partitionKey: string;
  readonly object: string;
  readonly objectKnown: boolean;
  readonly missing: readonly TupleKey[];
  readonly unexpected: readonly TupleKey[];
}

/** What confirming a set of candidate partitions found. */
export interface Confirmation {
  readonly drifted: DriftedPartition[];
  /** Keys with an intent pending (or committed while they were confirmed): not drift, yet. */
  readonly pending: string[];
}

/** Candidates confirmed per round: two snapshots and one re-read each. */
const KEYS_PER_ROUND = 100;

function sameOwned(a: OwnedPartition | undefined, b: OwnedPartition | undefined): boolean {
  return a !== undefined && b !== undefined && a.objectKnown === b.objectKnown && sameTuples(a.tuples, b.tuples);
}

/**
 * Confirms candidates so only what is still drifted is reported: per round, a snapshot, a re-read,
 * a second snapshot; drifted only with no intent pending in either and the owner unchanged between
 * them (an intent commits with its owner change). Takes no lock (docs/agreement.md).
 */
export async function confirmPartitions(ctx: AuditContext, keys: Iterable<string>): Promise<Confirmation> {
  const all = [...new Set(keys)];
  const drifted: DriftedPartition[] = [];
  const pending: string[] = [];
  for (let from = 0; from < all.length; from += KEYS_PER_ROUND) {
    const round = all.slice(from, from + KEYS_PER_ROUND);
    const before = await inSnapshot(ctx.db, async (trx) => ({
      owned: await ownedState(ctx, trx, round),
      pending: await pendingPartitions(trx, ctx.spec, round),
    }));
    const settled = round.filter((key) => !before.pending.has(key));
    pending.push(...round.filter((key) => before.pending.has(key)));
    const live = await readPartitions(ctx, settled);
    const after = await inSnapshot(ctx.db, async (trx) => ({
      owned: await ownedState(ctx, trx, settled),
      pending: await pendingPartitions(trx, ctx.spec, settled),
    }));
    for (const key of settled) {
      const owned = after.owned.get(key);
      if (after.pending.has(key) || !sameOwned(before.owned.get(key), owned) || owned === undefined) {
        pending.push(key);
        continue;
      }
      const diff = diffTuples(owned.tuples, live.get(key) ?? []);
      if (diff.missing.length === 0 && diff.unexpected.length === 0) continue;
      drifted.push({
        partitionKey: key,
        object: ctx.owner.partitionFilter(key).object,
        objectKnown: owned.objectKnown,
        ...diff,
      });
    }
  }
  return { drifted, pending };
}
