import { defineOutbox, REGISTER_OUTBOX_PARTITION, TUPLE_OUTBOX_PARTITION, type OutboxSpec } from '@outbox/outbox';

// The platform's six outbox specs (docs/design.md §3), beside the migrations that create their
// tables: migration, writer, drainer and reconciler import the one object.

/** `<schema>.fga_register_outbox`: one row per FGA object, keyed on `resource_id`. */
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
 * A delivered iam row `s` supersedes a poisoned earlier `t` of the same grant when it wrote or
 * deleted ANY relation `t` did: overlap, not containment (docs/outbox-sql.md, "iam's coverage").
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
