import type { OutboxSpec } from '../define-outbox.js';
import { tableNames } from '../table-names.js';

/**
 * What an operator can do to the ledger, as the actions log names it: a redrive pass that revived
 * or asked refused rows to retry, a retire, a discard, a repair that enqueued corrections, a
 * compaction that deleted rows (docs/ledger.md, "The actions log").
 */
export const OUTBOX_ACTIONS = ['redrive', 'retire', 'discard', 'repair', 'compact'] as const;

/** One of {@link OUTBOX_ACTIONS}. */
export type OutboxAction = (typeof OUTBOX_ACTIONS)[number];

/** The actions that take a reason, kept as evidence beside what they closed. */
export const ACTIONS_WITH_REASON: readonly OutboxAction[] = ['retire', 'discard'];

/** The step of `outboxMigrations` that creates the log. */
export const ACTIONS_LOG_STEP = '0007_actions_log_v1';

/** The marker in the log table's comment, by which `verifyOutboxTable` tells the log of this spec (the parentheses end the table's name). */
export function actionsLogMarker(spec: OutboxSpec): string {
  return `(@outbox/outbox actions log v1 ${spec.table})`;
}

/** Column → the type `format_type` reports for it: what `verifyOutboxTable` checks. */
export const ACTIONS_LOG_COLUMNS: Readonly<Record<string, string>> = Object.freeze({
  id: 'bigint',
  at: 'timestamp with time zone',
  actor: 'text',
  action: 'text',
  ids: 'jsonb',
  counts: 'jsonb',
  reason: 'text',
});

/**
 * The actions log of `spec`'s table, version 1: one row per operator action that changed the
 * ledger (who, what, which ids, how many, why). A table of its own beside the outbox
 * (`<table>_actions`): created, migrated, verified and dropped with it. The checks repeat
 * `recordOutboxAction`'s, for a writer that is not this library; the actions are spelled out, not
 * taken from {@link OUTBOX_ACTIONS}: a later action is a later step. Frozen.
 */
export function actionsLogDdlV1(spec: OutboxSpec): string[] {
  const names = tableNames(spec);
  const t = spec.tableName;
  return [
    `create table ${names.actionsTable} (
      id     bigint generated always as identity primary key,
      at     timestamptz not null default now(),
      actor  text not null,
      action text not null,
      ids    jsonb not null default '[]',
      counts jsonb not null default '{}',
      reason text,
      constraint "${t}_actions_actor_check" check (btrim(actor) <> '' and actor !~ '[[:cntrl:]]'),
      constraint "${t}_actions_action_check" check (action in ('redrive', 'retire', 'discard', 'repair', 'compact')),
      constraint "${t}_actions_reason_check" check (action not in ('retire', 'discard') or coalesce(btrim(reason), '') <> ''),
      constraint "${t}_actions_ids_check" check (jsonb_typeof(ids) = 'array'),
      constraint "${t}_actions_counts_check" check (jsonb_typeof(counts) = 'object')
    )`,
    `comment on table ${names.actionsTable} is 'operator actions that changed ${spec.table}: who, what, which ids, how many, why ${actionsLogMarker(spec)}'`,
  ];
}
