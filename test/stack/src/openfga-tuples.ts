import type { OpenFgaClient } from '@openfga/sdk';

/** A tuple key without its condition: what `read` matches on. */
export interface TupleKeyText {
  readonly user: string;
  readonly relation: string;
  readonly object: string;
}

/**
 * `'user relation object'` → a tuple key, the form {@link storedOn} returns.
 *
 * @example
 * tupleKey('user:ann owner vpc:1'); // { user: 'user:ann', relation: 'owner', object: 'vpc:1' }
 */
export function tupleKey(text: string): TupleKeyText {
  const [user, relation, object] = text.split(' ') as [string, string, string];
  return { user, relation, object };
}

/**
 * Whether the exact tuple is stored: a `read` of its key, since a `check` can be true through the
 * model's inheritance.
 *
 * @example
 * expect(await stored(fga.client, tupleKey('user:ann owner vpc:1'))).toBe(true);
 */
export async function stored(client: OpenFgaClient, tuple: TupleKeyText): Promise<boolean> {
  const { tuples } = await client.read({ user: tuple.user, relation: tuple.relation, object: tuple.object });
  return tuples.length === 1;
}

/**
 * Every tuple stored on `object`, as sorted `'user relation object'` lines, read page by page.
 *
 * @example
 * expect(await storedOn(fga.client, 'vpc:1')).toEqual(['project:p project vpc:1', 'user:ann owner vpc:1']);
 */
export async function storedOn(client: OpenFgaClient, object: string): Promise<string[]> {
  const lines: string[] = [];
  let continuationToken: string | undefined;
  do {
    const page = await client.read({ object }, { pageSize: 100, ...(continuationToken ? { continuationToken } : {}) });
    for (const t of page.tuples) lines.push(`${t.key.user} ${t.key.relation} ${t.key.object}`);
    continuationToken = page.continuation_token || undefined;
  } while (continuationToken);
  return lines.sort();
}
