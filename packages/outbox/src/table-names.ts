import type { OutboxSpec } from './define-outbox.js';

const quote = (identifier: string) => `"${identifier}"`;

/**
 * Every name the outbox's DDL creates for `spec`, quoted and safe to splice into SQL text
 * (defineOutbox admits only `[a-z_][a-z0-9_]*` identifiers). docs/outbox-sql.md says what each index is for.
 */
export function tableNames(spec: OutboxSpec) {
  const t = spec.tableName;
  return {
    table: `${quote(spec.schema)}.${quote(t)}`,
    partition: quote(spec.partitionColumn),
    partitionHeadIndex: `${t}_partition_head_idx`,
    pendingIndex: `${t}_pending_idx`,
    claimIndex: `${t}_claim_idx`,
    retiredIndex: `${t}_retired_idx`,
    partitionIndex: `${t}_partition_idx`,
    deliveredIndex: `${t}_delivered_idx`,
    verifyIndex: `${t}_verify_idx`,
    claimFunction: `${quote(spec.schema)}.${quote(`${t}_claim`)}`,
    settleFunction: `${quote(spec.schema)}.${quote(`${t}_settle`)}`,
    enqueueFunction: `${quote(spec.schema)}.${quote(`${t}_enqueue`)}`,
    notifyFunction: `${quote(spec.schema)}.${quote(`${t}_notify`)}`,
    notifyTrigger: `${t}_notify`,
    actionsTable: `${quote(spec.schema)}.${quote(`${t}_actions`)}`,
  };
}
