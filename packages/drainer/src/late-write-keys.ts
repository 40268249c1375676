import { MAX_TUPLES_PER_INTENT, type EnqueueInput, type IntentPayload, type TupleKey } from '@outbox/outbox';

/** Marks a correction of a late write in the ledger (extra payload fields are kept; the sink ignores them). */
export const LATE_WRITE_SOURCE = 'late-write';

/** A key one partition's close deliveries both wrote and deleted, and what the latest of them says of it. */
export interface KeyAtRisk {
  /** The latest write's tuple (condition included), or the deleted key. */
  readonly tuple: TupleKey;
  readonly present: boolean;
}

/** OpenFGA's identity of a tuple: `(user, relation, object)`. */
export function tupleKeyOf(tuple: TupleKey): string {
  return `${tuple.user}\n${tuple.relation}\n${tuple.object}`;
}

/**
 * The keys a late write could have undone, from one partition's deliveries in the window, newest
 * first: those that some of them write and others delete (a late write only matters when it
 * reverses a later operation on its key), each with the latest operation on it. An intent's deletes
 * apply before its writes (one OpenFGA transaction), so its writes are the later.
 */
export function keysAtRisk(newestFirst: readonly IntentPayload[]): KeyAtRisk[] {
  const latest = new Map<string, KeyAtRisk>();
  const written = new Set<string>();
  const deleted = new Set<string>();
  for (const payload of newestFirst) {
    for (const [tuples, present, seen] of [
      [payload.writes ?? [], true, written],
      [payload.deletes ?? [], false, deleted],
    ] as const) {
      for (const tuple of tuples) {
        const key = tupleKeyOf(tuple);
        seen.add(key);
        if (!latest.has(key)) latest.set(key, { tuple, present });
      }
    }
  }
  return [...latest].filter(([key]) => written.has(key) && deleted.has(key)).map(([, risk]) => risk);
}

/**
 * The intents that bring `atRisk` back to what the ledger says, given the keys the target holds
 * (`live`, by {@link tupleKeyOf}): a write of each key it lacks, a delete of each it should not hold,
 * at most {@link MAX_TUPLES_PER_INTENT} operations an intent. Empty when they agree.
 */
export function lateWriteCorrections(
  partitionKey: string,
  atRisk: readonly KeyAtRisk[],
  live: ReadonlySet<string>,
): EnqueueInput[] {
  const wrong = atRisk.filter((risk) => risk.present !== live.has(tupleKeyOf(risk.tuple)));
  const intents: EnqueueInput[] = [];
  for (let i = 0; i < wrong.length; i += MAX_TUPLES_PER_INTENT) {
    const chunk = wrong.slice(i, i + MAX_TUPLES_PER_INTENT);
    const writes = chunk.filter((risk) => risk.present).map((risk) => risk.tuple);
    const deletes = chunk
      .filter((risk) => !risk.present)
      .map(({ tuple }) => ({ user: tuple.user, relation: tuple.relation, object: tuple.object }));
    const payload: IntentPayload = {
      ...(writes.length > 0 ? { writes } : {}),
      ...(deletes.length > 0 ? { deletes } : {}),
      source: LATE_WRITE_SOURCE,
    };
    intents.push({ partitionKey, payload });
  }
  return intents;
}
