import { readFileSync } from 'node:fs';
import type { OutboxSpec } from '../define-outbox.js';
import { recordedMaxAttemptsText } from '../max-attempts.js';
import { expandSqlTemplate } from '../sql-template.js';
import { tableNames } from '../table-names.js';

// The build inlines each of these reads (tsup.config.base.ts): the bundle carries the SQL.
const TEMPLATES = {
  v1: readFileSync(new URL('./sql/enqueue.v1.sql', import.meta.url), 'utf8'),
} as const;

/** A released text of the enqueue function; a released file never changes (docs/migrations.md). */
export type EnqueueFunctionVersion = keyof typeof TEMPLATES;

/** The version this release creates, calls and `verifyOutboxTable` expects. */
export const LATEST_ENQUEUE_FUNCTION: EnqueueFunctionVersion = 'v1';

/** The step of `outboxMigrations` that creates it. */
export const ENQUEUE_FUNCTION_STEP = '0006_enqueue_function_v1';

/** Every signature the enqueue function has had, for `dropOutboxTable`. */
export const ENQUEUE_FUNCTION_SIGNATURES = ['(text[], jsonb[], integer)'] as const;

/** The marker in the function's body, by which `verifyOutboxTable` tells another release's or another spec's function. */
export function enqueueFunctionMarker(
  spec: OutboxSpec,
  version: EnqueueFunctionVersion = LATEST_ENQUEUE_FUNCTION,
): string {
  return `@outbox/outbox enqueue ${version} ${spec.table} ${spec.partitionColumn}`;
}

/** The `create or replace function` statement of `spec`'s enqueue function at `version`. */
export function enqueueFunctionDdl(
  spec: OutboxSpec,
  version: EnqueueFunctionVersion = LATEST_ENQUEUE_FUNCTION,
): string[] {
  const names = tableNames(spec);
  return [
    expandSqlTemplate(TEMPLATES[version], {
      enqueue_function: names.enqueueFunction,
      table: names.table,
      partition: names.partition,
      table_literal: `'${spec.table}'`,
      recorded_max_attempts: recordedMaxAttemptsText(spec),
      marker: enqueueFunctionMarker(spec, version),
    }),
  ];
}
