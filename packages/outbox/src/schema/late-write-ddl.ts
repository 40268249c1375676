import type { OutboxSpec } from '../define-outbox.js';
import { tableNames } from '../table-names.js';

/**
 * What late-write verification adds to a version-1 table (docs/agreement.md, "Late writes"), one
 * statement per element: the `verify_after` column the settle stamps, and its partial index (the
 * verifier's due rows). The settle's probe of a partition's previous delivery reads the ledger's
 * delivered-rows index (`ledgerLifeDdlV1`, migrated before this). Frozen: a migration that ran it keeps its meaning.
 */
export function lateWriteVerificationDdl(spec: OutboxSpec): string[] {
  const names = tableNames(spec);
  return [
    `alter table ${names.table} add column verify_after timestamptz`,
    `comment on column ${names.table}.verify_after is 'drainer: when to check that no late write undid this delivery; null: nothing to check'`,
    `create index "${names.verifyIndex}" on ${names.table} (verify_after) where verify_after is not null`,
  ];
}
