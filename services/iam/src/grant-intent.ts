import type { IntentPayload, TupleKey } from '@outbox/outbox';

/** The relations a grant can give a user directly on a project (the model's `[user]` relations). */
export const GRANTABLE_RELATIONS = Object.freeze(['owner', 'editor', 'viewer'] as const);
export type GrantableRelation = (typeof GRANTABLE_RELATIONS)[number];

/** The intent of one grant change: the grant's whole new state. */
export interface GrantIntent {
  readonly payload: IntentPayload & { readonly relations: readonly GrantableRelation[] };
  /** The relations written: the whole new set. */
  readonly written: readonly GrantableRelation[];
  /** The relations deleted: every grantable relation outside the new set. */
  readonly deleted: readonly GrantableRelation[];
  /** Whether the set differs from `previous` (the intent is the same either way). */
  readonly changed: boolean;
}

const ordered = (set: ReadonlySet<string>) => GRANTABLE_RELATIONS.filter((r) => set.has(r));

/**
 * The intent that gives `user` exactly the direct relations `next` on `object`: it writes every
 * relation of the set and deletes every other grantable relation (`relations` = the new set, a
 * summary for operators). OpenFGA's idempotent writes and deletes (duplicates and missing tuples
 * ignored) make the ones already in place harmless.
 *
 * Never a diff against `previous`. A diff is computed against the grants table, which assumes the
 * grant's earlier intents were delivered; when one of them is poisoned and later parked as
 * superseded, a diff successor applies only its own change and whatever the parked row did to the
 * other relations is lost — if that was a delete, access the table no longer grants stays in
 * OpenFGA. A whole-state intent re-determines every grantable relation, so any delivered successor
 * makes every earlier row of the grant moot, and the reconciler's parking is exact (see
 * IAM_SUPERSEDED_COVERAGE_SQL). At most three operations per intent.
 *
 * @example
 * grantIntent('user:bob', 'project:p1', ['viewer'], ['editor']).payload
 * // { writes: [editor], deletes: [owner, viewer], relations: ['editor'] } (as tuple keys)
 */
export function grantIntent(
  user: string,
  object: string,
  previous: readonly string[],
  next: readonly GrantableRelation[],
): GrantIntent {
  const before = new Set(previous);
  const after = new Set<string>(next);
  const changed = before.size !== after.size || [...after].some((r) => !before.has(r));
  const written = ordered(after);
  const deleted = GRANTABLE_RELATIONS.filter((r) => !after.has(r));
  const tuple = (relation: string): TupleKey => ({ user, relation, object });
  return {
    payload: { writes: written.map(tuple), deletes: deleted.map(tuple), relations: written },
    written,
    deleted,
    changed,
  };
}
