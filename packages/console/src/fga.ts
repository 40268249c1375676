import { ConsistencyPreference, OpenFgaClient, type Node, type UserClientConfigurationParams } from '@openfga/sdk';
import type { TupleKey } from '@outbox/outbox';

/** Where the console reads OpenFGA: the store (and model) the outboxes deliver to. */
export interface ConsoleOpenFga {
  readonly apiUrl: string;
  readonly storeId: string;
  /** Default: the store's latest model. */
  readonly authorizationModelId?: string;
  /** E.g. `{ method: CredentialsMethod.ApiToken, config: { token } }`. */
  readonly credentials?: UserClientConfigurationParams['credentials'];
}

// What the console shows is "now": a replica's cache must not hide a tuple an action just changed.
const NOW = { consistency: ConsistencyPreference.HigherConsistency, retryParams: { maxRetry: 1 } };

/** The SDK client of `connection`. */
export function openFgaClient(connection: ConsoleOpenFga): OpenFgaClient {
  return new OpenFgaClient({
    apiUrl: connection.apiUrl.replace(/\/+$/, ''),
    storeId: connection.storeId,
    ...(connection.authorizationModelId ? { authorizationModelId: connection.authorizationModelId } : {}),
    ...(connection.credentials ? { credentials: connection.credentials } : {}),
  });
}

export async function check(client: OpenFgaClient, user: string, relation: string, object: string): Promise<boolean> {
  const answer = await client.check({ user, relation, object }, NOW);
  return answer.allowed === true;
}

/** Every tuple OpenFGA holds on `object` now (at most `limit`). */
export async function tuplesOn(client: OpenFgaClient, object: string, limit = 500): Promise<TupleKey[]> {
  const tuples: TupleKey[] = [];
  let continuationToken: string | undefined;
  do {
    const page = await client.read(
      { object },
      { ...NOW, pageSize: 100, ...(continuationToken ? { continuationToken } : {}) },
    );
    for (const t of page.tuples) tuples.push({ user: t.key.user, relation: t.key.relation, object: t.key.object });
    continuationToken = page.continuation_token || undefined;
  } while (continuationToken && tuples.length < limit);
  return tuples;
}

/** One stored tuple behind an answer, and the userset it was found under (`vpc:1#viewer`). */
export interface TupleBehind {
  readonly tuple: TupleKey;
  readonly under: string;
}

const split = (userset: string): { object: string; relation: string } => {
  const at = userset.lastIndexOf('#');
  return { object: userset.slice(0, at), relation: userset.slice(at + 1) };
};

/**
 * The stored tuples an Expand of `relation` on `object` rests on, followed through usersets,
 * computed relations and tuple-to-userset rewrites (at most `maxExpands` Expand requests): what
 * "why" is made of. Each is a tuple OpenFGA holds; which of them lead to the user is the caller's.
 */
export async function tuplesBehind(
  client: OpenFgaClient,
  relation: string,
  object: string,
  maxExpands = 25,
): Promise<{ tuples: TupleBehind[]; complete: boolean }> {
  const seen = new Set<string>();
  const found = new Map<string, TupleBehind>();
  const queue: string[] = [`${object}#${relation}`];
  let expands = 0;
  const add = (tuple: TupleKey, under: string) => {
    const key = `${tuple.user} ${tuple.relation} ${tuple.object}`;
    if (!found.has(key)) found.set(key, { tuple, under });
  };
  const walk = (node: Node | undefined) => {
    if (!node) return;
    const at = split(node.name);
    for (const user of node.leaf?.users?.users ?? []) {
      add({ user, relation: at.relation, object: at.object }, node.name);
      if (user.includes('#')) queue.push(user);
    }
    if (node.leaf?.computed) queue.push(node.leaf.computed.userset);
    const ttu = node.leaf?.tupleToUserset;
    if (ttu) {
      const set = split(ttu.tupleset);
      for (const computed of ttu.computed) {
        const target = split(computed.userset);
        add({ user: target.object, relation: set.relation, object: set.object }, node.name);
        queue.push(computed.userset);
      }
    }
    for (const child of [...(node.union?.nodes ?? []), ...(node.intersection?.nodes ?? [])]) walk(child);
    walk(node.difference?.base);
    walk(node.difference?.subtract);
  };
  while (queue.length > 0 && expands < maxExpands) {
    const userset = queue.shift() as string;
    if (seen.has(userset)) continue;
    seen.add(userset);
    expands += 1;
    const { object: o, relation: r } = split(userset);
    const answer = await client.expand({ relation: r, object: o }, NOW);
    walk(answer.tree?.root);
  }
  return { tuples: [...found.values()], complete: queue.every((u) => seen.has(u)) };
}
