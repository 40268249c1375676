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
 * iam's PUT enqueues the grant's whole new state (see `grantIntent` in services/iam): it writes the
 * set and deletes every other grantable relation, so every row names every grantable relation and
 * any delivered successor re-determined everything an earlier row named. For those rows this clause
 * is always true and parking is exact: the poisoned row's decisions are all moot, nothing is lost.
 *
 * The clause is overlap rather than containment for rows iam did not write that way (a row from an
 * earlier build, which enqueued diffs, or one written by hand): for each relation the latest
 * delivered row naming it holds the truth, and overlap never revives a row over a successor that
 * re-decided any of its relations — reviving it would replay a stale decision, the resurrection
 * §6 forbids (`t` = {} → {editor, viewer} poisoned, `s` = {editor, viewer} → {viewer} delivered:
 * containment is false and would re-grant the revoked editor). What a parked partial row did to
 * the relations its successor did not name is then missing (a write or a delete); the reconciler
 * reports it at WARN, and a human retires it and re-PUTs the grant, which re-asserts the whole set.
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
