import type { SinkContext } from '@outbox/drainer';
import type { TupleKey } from '@outbox/outbox';
import { createOpenFgaTupleReader, type OpenFgaReadClient } from './tuple-reader.js';
import type { OpenFgaWriteClient } from './write-request.js';

/** Whether the sink's client can also read (an `OpenFgaClient` can; a write-only wrapper cannot). */
export function canReadBack(client: OpenFgaWriteClient): client is OpenFgaWriteClient & OpenFgaReadClient {
  const c = client as Partial<OpenFgaReadClient>;
  return typeof c.read === 'function' && typeof c.readChanges === 'function';
}

/**
 * The sink's `readTuples` (the drainer's late-write check): which of `keys` the store holds, read
 * with higher consistency on the sink's own client. One Read per `(user, object)` pair among the
 * keys, at most `concurrency` at once, each bounded by `timeoutMs`; a failure rejects with an
 * `OpenFgaReadError`.
 */
export function readBack(client: OpenFgaReadClient, timeoutMs: number, concurrency: number) {
  const reader = createOpenFgaTupleReader({ client, timeoutMs });
  return async function readTuples(keys: readonly TupleKey[], context: SinkContext): Promise<TupleKey[]> {
    const pairs = new Map<string, { user: string; object: string; relations: Set<string> }>();
    for (const key of keys) {
      const id = `${key.user}\n${key.object}`;
      const pair = pairs.get(id) ?? { user: key.user, object: key.object, relations: new Set<string>() };
      pair.relations.add(key.relation);
      pairs.set(id, pair);
    }
    const queue = [...pairs.values()];
    const found: TupleKey[] = [];
    const worker = async () => {
      for (let pair = queue.shift(); pair !== undefined; pair = queue.shift()) {
        let token: string | undefined;
        do {
          context.signal.throwIfAborted();
          const page = await reader.readTuples({ object: pair.object, user: pair.user }, token);
          found.push(...page.tuples.filter((t) => pair.relations.has(t.relation)));
          token = page.continuationToken;
        } while (token);
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, worker));
    return found;
  };
}
