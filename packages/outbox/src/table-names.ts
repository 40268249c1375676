import type { OutboxSpec } from './define-outbox.js';

const quote = (identifier: string) => `"${identifier}"`;

/**
 * Every name the outbox migration creates for one spec, quoted and ready for SQL text. Safe to
 * interpolate: defineOutbox admits only `[a-z_][a-z0-9_]*` identifiers.
 */
export function tableNames(spec: OutboxSpec) {
  const t = spec.tableName;
  return {
    table: `${quote(spec.schema)}.${quote(t)}`,
    partition: quote(spec.partitionColumn),
    /** `(partition, id) WHERE pending`: a partition's pending rows in order (DESIGN §4). */
    partitionHeadIndex: `${t}_partition_head_idx`,
    /** `(id) WHERE pending`: counts and scans of what is still to deliver. */
    pendingIndex: `${t}_pending_idx`,
    /** `(next_attempt_at, id) WHERE is_head`: the drainer's claim reads only heads, due first. */
    claimIndex: `${t}_claim_idx`,
    /** `(id) WHERE retired_at IS NOT NULL`: keeps counting retired rows cheap. */
    retiredIndex: `${t}_retired_idx`,
    /** Optional plain `(partition, id)`: makes the redrive anti-join a lookup. */
    partitionIndex: `${t}_partition_idx`,
    /** The drainer's claim function (see drainFunctionsDdl). */
    claimFunction: `${quote(spec.schema)}.${quote(`${t}_claim`)}`,
    /** The drainer's settle function: marks delivered and promotes heads under the partitions' locks. */
    settleFunction: `${quote(spec.schema)}.${quote(`${t}_settle`)}`,
    notifyFunction: `${quote(spec.schema)}.${quote(`${t}_notify`)}`,
    notifyTrigger: `${t}_notify`,
  };
}
