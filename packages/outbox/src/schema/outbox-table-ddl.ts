import type { OutboxSpec } from '../define-outbox.js';
import { maxAttemptsCommentDdl } from '../max-attempts.js';
import { tableNames } from '../table-names.js';

/** Options of the outbox table's DDL. */
export interface OutboxTableOptions {
  /**
   * Also create the plain btree `(partition, id)` in version 1 of the table. Default false: the
   * ledger's delivered-rows index (`0009`) serves the redrive and the late-write probe without it.
   */
  readonly partitionIndex?: boolean;
}

/**
 * The outbox table as released in version 1 (docs/outbox-sql.md, "The table"), one statement per
 * element, without the drainer's functions. Frozen: a migration that ran it keeps its meaning.
 */
export function outboxTableDdlV1(spec: OutboxSpec, options: OutboxTableOptions = {}): string[] {
  const names = tableNames(spec);
  const pending = 'sent_at is null and retired_at is null';
  const statements = [
    `do $schema$ begin
      if not exists (select from pg_catalog.pg_namespace where nspname = '${spec.schema}') then
        create schema if not exists "${spec.schema}";
      end if;
    end $schema$`,
    `create table ${names.table} (
      id              bigint generated always as identity primary key,
      ${names.partition}  text not null,
      payload         jsonb not null,
      created_at      timestamptz not null default now(),
      next_attempt_at timestamptz not null default now(),
      attempt_count   integer not null default 0,
      last_error      text,
      sent_at         timestamptz,
      retired_at      timestamptz,
      retired_reason  text,
      is_head         boolean not null default false
    ) with (
      -- Delivered rows leave dead index entries at the left edge of the claim index until vacuum:
      -- vacuum early and without throttling (docs/design.md §5). A long transaction anywhere holds this back.
      autovacuum_vacuum_scale_factor = 0,
      autovacuum_vacuum_threshold = 2000,
      autovacuum_vacuum_insert_scale_factor = 0,
      autovacuum_vacuum_insert_threshold = 10000,
      autovacuum_vacuum_cost_delay = 0,
      autovacuum_analyze_scale_factor = 0.02
    )`,
    `comment on column ${names.table}.is_head is 'drainer: true on the earliest deliverable row of each partition, maintained by enqueue, outcome updates and redrive'`,
    maxAttemptsCommentDdl(spec, spec.maxAttempts),
    `create index "${names.partitionHeadIndex}" on ${names.table} (${names.partition}, id) where ${pending}`,
    `create index "${names.pendingIndex}" on ${names.table} (id) where ${pending}`,
    `create index "${names.claimIndex}" on ${names.table} (next_attempt_at, id) where is_head`,
    `create index "${names.retiredIndex}" on ${names.table} (id) where retired_at is not null`,
  ];
  if (options.partitionIndex)
    statements.push(`create index "${names.partitionIndex}" on ${names.table} (${names.partition}, id)`);
  statements.push(
    `create function ${names.notifyFunction}() returns trigger language plpgsql as $$
    begin
      perform pg_notify('${spec.channel}', '');
      return null;
    end
    $$`,
    // Statement-level: one notification per insert statement, sent at commit (NOTIFY is transactional).
    `create trigger "${names.notifyTrigger}" after insert on ${names.table} for each statement execute function ${names.notifyFunction}()`,
  );
  return statements;
}
