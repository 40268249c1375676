import { readFileSync } from 'node:fs';
import type { AnyKysely } from '../any-kysely.js';
import type { OutboxSpec } from '../define-outbox.js';
import { enqueueFunctionDdl } from './enqueue-function.js';
import { executeStatements } from './execute-statements.js';
import { expandSqlTemplate } from '../sql-template.js';
import { tableNames } from '../table-names.js';

// The build inlines each of these reads (tsup.config.base.ts): the bundle carries the SQL.
const TEMPLATES = {
  claim: {
    v3: readFileSync(new URL('./sql/claim.v3.sql', import.meta.url), 'utf8'),
    v4: readFileSync(new URL('./sql/claim.v4.sql', import.meta.url), 'utf8'),
    v5: readFileSync(new URL('./sql/claim.v5.sql', import.meta.url), 'utf8'),
  },
  settle: {
    v2: readFileSync(new URL('./sql/settle.v2.sql', import.meta.url), 'utf8'),
    v3: readFileSync(new URL('./sql/settle.v3.sql', import.meta.url), 'utf8'),
    v4: readFileSync(new URL('./sql/settle.v4.sql', import.meta.url), 'utf8'),
  },
} as const;

/** Which released text of each drainer function to create; a released file never changes (docs/migrations.md). */
export interface DrainFunctionVersions {
  readonly claim: keyof typeof TEMPLATES.claim;
  readonly settle: keyof typeof TEMPLATES.settle;
}

/** The versions this release creates and `verifyOutboxTable` expects. */
export const LATEST_DRAIN_FUNCTIONS: DrainFunctionVersions = Object.freeze({ claim: 'v5', settle: 'v4' });

/** Every signature the claim and settle functions have had, for `dropOutboxTable`. */
export const DRAIN_FUNCTION_SIGNATURES = {
  claim: [
    '(integer, integer, integer, boolean, boolean, text[], boolean)',
    '(integer, integer, integer, boolean, boolean, text[])',
    '(integer, integer, integer, boolean, boolean)',
    '(integer, integer, integer, boolean)',
  ],
  settle: [
    '(bigint[], text[], bigint[], integer, integer, bigint[], bigint[])',
    '(bigint[], text[], bigint[], integer)',
  ],
} as const;

/** The marker in a function's body, by which `verifyOutboxTable` tells another release's or another spec's function. */
export function drainFunctionMarker(
  spec: OutboxSpec,
  fn: 'claim' | 'settle',
  version: string = LATEST_DRAIN_FUNCTIONS[fn],
): string {
  return `@outbox/outbox ${fn} ${version} ${spec.table} ${spec.partitionColumn}`;
}

/** The `create or replace function` statements of the drainer's claim and settle for `spec`, at `versions` (default: this release's). */
export function drainFunctionsDdl(
  spec: OutboxSpec,
  versions: DrainFunctionVersions = LATEST_DRAIN_FUNCTIONS,
): string[] {
  const names = tableNames(spec);
  const placeholders = {
    table: names.table,
    partition: names.partition,
    table_literal: `'${spec.table}'`,
    claim_function: names.claimFunction,
    settle_function: names.settleFunction,
  };
  return [
    expandSqlTemplate(TEMPLATES.claim[versions.claim], {
      ...placeholders,
      marker: drainFunctionMarker(spec, 'claim', versions.claim),
    }),
    expandSqlTemplate(TEMPLATES.settle[versions.settle], {
      ...placeholders,
      marker: drainFunctionMarker(spec, 'settle', versions.settle),
    }),
  ];
}

/**
 * Replaces a table's functions — the drainer's claim and settle, and enqueue's — with this
 * release's (earlier overloads stay, for a rolling upgrade). Idempotent. A migration you keep uses
 * `outboxMigrations`' steps.
 * @example
 * export const up = (db: AnyKysely) => createDrainFunctions(db, vpcOutbox);
 */
export async function createDrainFunctions(db: AnyKysely, spec: OutboxSpec): Promise<void> {
  await executeStatements(db, [...drainFunctionsDdl(spec), ...enqueueFunctionDdl(spec)]);
}
