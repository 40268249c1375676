import { defineOutbox, REGISTER_OUTBOX_PARTITION, TUPLE_OUTBOX_PARTITION, type OutboxSpec } from '@outbox/outbox';

/*
 * The six outbox specs of the platform (DESIGN §3). They live here, beside the migrations that
 * create their tables, so that the migration, the service's writer, its drainer and its reconciler
 * all import the one object: a service package depends on @outbox/migrations, never the reverse.
 */

/**
 * The register-outbox of a service schema: `<schema>.fga_register_outbox`, one row per FGA object,
 * keyed on `resource_id`, notifying `<schema>_fga_register_outbox`.
 */
function registerOutbox(schema: string): OutboxSpec {
  return defineOutbox({
    table: `${schema}.fga_register_outbox`,
    partitionColumn: REGISTER_OUTBOX_PARTITION,
    channel: `${schema}_fga_register_outbox`,
  });
}

/** `vpc.fga_register_outbox`: one row per `vpc:<id>` object. */
export const vpcOutbox: OutboxSpec = registerOutbox('vpc');
/** `compute.fga_register_outbox`: one row per `instance:<id>` object. */
export const computeOutbox: OutboxSpec = registerOutbox('compute');
/** `nlb.fga_register_outbox`: one row per `load_balancer:<id>` object. */
export const nlbOutbox: OutboxSpec = registerOutbox('nlb');
/** `storage.fga_register_outbox`: one row per `bucket:<id>` object. */
export const storageOutbox: OutboxSpec = registerOutbox('storage');
/** `registry.fga_register_outbox`: one row per `repository:<id>` object. */
export const registryOutbox: OutboxSpec = registerOutbox('registry');

/** The relation names a row wrote or deleted, as a jsonb array of strings (`x` is `s` or `t`). */
const named = (x: 's' | 't') =>
  `(jsonb_path_query_array(${x}.payload, '$.writes[*].relation') || jsonb_path_query_array(${x}.payload, '$.deletes[*].relation'))`;

/**
 * When a delivered iam row `s` supersedes a poisoned earlier row `t` of the same grant: when `s`
 * wrote or deleted ANY relation that `t` wrote or deleted.
 *
 * iam rows are diffs of one grant's relation set (writes = added, deletes = removed; `relations`
 * is only a summary of the new set), computed against the grants table, which already holds `t`'s
 * change. For each relation the latest delivered row naming it carries the truth, so:
 * - a relation `t` named and no delivered successor re-named is safe to replay: diffs on disjoint
 *   relations commute;
 * - a relation a delivered successor re-named must NOT be replayed from `t`: that is a stale
 *   decision. Example: `t` = {} → {editor, viewer} (writes both) is poisoned; `s` = {editor,
 *   viewer} → {viewer} (deletes editor) is delivered. Containment (`s` names all `t` named) is
 *   false, so a containment rule would revive `t` and re-grant editor, which was revoked.
 *   `s.payload->'relations' @> t.payload->'relations'` is also wrong: `relations` lists the new
 *   set, not what the row re-determined ({viewer} ⊇ {editor, viewer} is false: same resurrection;
 *   and a successor whose set merely contains `t`'s may never have written those tuples).
 * So overlap parks the row. When the overlap is partial (here: viewer was never written), parking
 * under-grants, the safe direction: the row is reported as superseded, a human retires it and
 * re-asserts the grant (iam's PUT of an unchanged set re-writes the whole set, which names every
 * grantable relation and so re-determines all of them).
 */
export const IAM_SUPERSEDED_COVERAGE_SQL = `${named('s')} ?| array(select jsonb_array_elements_text(${named('t')}))`;

/**
 * `iam.fga_outbox`: the tuple outbox, keyed on `tuple_key` = the grant `(user, object)` rendered
 * `user:bob|project:p1` (see {@link grantTupleKey}); one row carries a subject's relation-set change
 * on one object.
 */
export const iamOutbox: OutboxSpec = defineOutbox({
  table: 'iam.fga_outbox',
  partitionColumn: TUPLE_OUTBOX_PARTITION,
  channel: 'iam_fga_outbox',
  supersededCoverageSql: IAM_SUPERSEDED_COVERAGE_SQL,
});

/** The `tuple_key` of iam's outbox: the grant `(user, object)`, e.g. `user:bob|project:p1`. */
export function grantTupleKey(user: string, object: string): string {
  return `${user}|${object}`;
}
