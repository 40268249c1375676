import { MAX_TUPLES_PER_INTENT, type EnqueueInput, type IntentPayload, type TupleKey } from '@outbox/outbox';
import { tupleKeyId } from './audit-tuples.js';

/** Marks a correction in the ledger (extra payload fields are kept as evidence; the sink ignores them). */
export const REPAIR_SOURCE = 'repair';

/**
 * The intents that take a partition from `live` to `expected`, deletes first, at most
 * {@link MAX_TUPLES_PER_INTENT} operations each; a key stored with another condition is deleted,
 * then written in a later intent (OpenFGA refuses one key twice in a request).
 */
export function correctionIntents(
  partitionKey: string,
  writes: readonly TupleKey[],
  deletes: readonly TupleKey[],
): EnqueueInput[] {
  const intents: EnqueueInput[] = [];
  let current: { writes: TupleKey[]; deletes: TupleKey[]; keys: Set<string> } = {
    writes: [],
    deletes: [],
    keys: new Set(),
  };
  const flush = () => {
    if (current.writes.length + current.deletes.length === 0) return;
    const payload: IntentPayload = {
      ...(current.writes.length > 0 ? { writes: current.writes } : {}),
      ...(current.deletes.length > 0 ? { deletes: current.deletes } : {}),
      source: REPAIR_SOURCE,
    };
    intents.push({ partitionKey, payload });
    current = { writes: [], deletes: [], keys: new Set() };
  };
  const add = (kind: 'writes' | 'deletes', tuple: TupleKey) => {
    const key = tupleKeyId(tuple);
    if (current.keys.has(key) || current.writes.length + current.deletes.length >= MAX_TUPLES_PER_INTENT) flush();
    current.keys.add(key);
    current[kind].push(
      kind === 'deletes' ? { user: tuple.user, relation: tuple.relation, object: tuple.object } : tuple,
    );
  };
  for (const tuple of deletes) add('deletes', tuple);
  for (const tuple of writes) add('writes', tuple);
  flush();
  return intents;
}
