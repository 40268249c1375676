import type { IntentPayload, TupleKey } from '@outbox/outbox';

/** The relations a grant can give a user directly on a project (the model's `[user]` relations). */
export const GRANTABLE_RELATIONS = Object.freeze(['owner', 'editor', 'viewer'] as const);
export type GrantableRelation = (typeof GRANTABLE_RELATIONS)[number];

/** The intent of one grant change: a diff, or a full re-assertion when nothing changed. */
export interface GrantIntent {
  readonly payload: IntentPayload & { readonly relations: readonly GrantableRelation[] };
  /** The relations written (granted now, not before; or all of the set, for a re-assertion). */
  readonly written: readonly GrantableRelation[];
  /** The relations deleted (removed; or every grantable relation outside the set, for a re-assertion). */
  readonly deleted: readonly GrantableRelation[];
  /** False when `next` equals `previous`: the payload then re-asserts the whole set. */
  readonly changed: boolean;
}

const ordered = (set: ReadonlySet<string>) => GRANTABLE_RELATIONS.filter((r) => set.has(r));

/**
 * The intent that moves `user`'s direct relations on `object` from `previous` to `next`:
 * `writes` = added, `deletes` = removed, `relations` = the new set (a summary for operators; the
 * coverage rule reads `writes` and `deletes`, see IAM_SUPERSEDED_COVERAGE_SQL).
 *
 * When the set does not change, the intent re-asserts it instead of being empty: writes the whole
 * set and deletes every other grantable relation. That is the repair for a grant whose earlier
 * intent was parked as superseded, and it re-determines every grantable relation, so it supersedes
 * any poisoned row of the grant. OpenFGA's idempotent writes make it harmless otherwise.
 *
 * @example
 * grantIntent('user:bob', 'project:p1', ['viewer'], ['editor']).payload
 * // { writes: [editor], deletes: [viewer], relations: ['editor'] } (as tuple keys)
 */
export function grantIntent(user: string, object: string, previous: readonly string[], next: readonly GrantableRelation[]): GrantIntent {
  const before = new Set(previous);
  const after = new Set<string>(next);
  const changed = before.size !== after.size || [...after].some((r) => !before.has(r));
  const written = changed ? ordered(new Set([...after].filter((r) => !before.has(r)))) : ordered(after);
  const deleted = changed
    ? ordered(new Set([...before].filter((r) => !after.has(r))))
    : GRANTABLE_RELATIONS.filter((r) => !after.has(r));
  const tuple = (relation: string): TupleKey => ({ user, relation, object });
  return {
    payload: { writes: written.map(tuple), deletes: deleted.map(tuple), relations: ordered(after) },
    written,
    deleted,
    changed,
  };
}

/** Checks a PUT body's `relations`: an array of distinct grantable relations. Returns the problem, or undefined. */
export function relationsProblem(value: unknown): string | undefined {
  if (!Array.isArray(value)) return `relations: expected an array of ${GRANTABLE_RELATIONS.join(', ')} (possibly empty), got ${JSON.stringify(value)}`;
  const unknown = value.filter((r) => !(GRANTABLE_RELATIONS as readonly unknown[]).includes(r));
  if (unknown.length > 0) return `relations: ${unknown.map((r) => JSON.stringify(r)).join(', ')} cannot be granted (grantable: ${GRANTABLE_RELATIONS.join(', ')})`;
  if (new Set(value).size !== value.length) return 'relations: a relation is listed twice';
  return undefined;
}
