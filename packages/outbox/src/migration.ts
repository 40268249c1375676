import { sql, type Kysely } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { DRAIN_FUNCTION_SIGNATURES, drainFunctionsDdl } from './drain-functions.js';
import { maxAttemptsCommentDdl } from './max-attempts.js';
import { tableNames } from './table-names.js';

/** Options of the outbox migration. */
export interface OutboxTableOptions {
  /**
   * Also create the plain btree `(partition, id)`. Default false: it costs every insert an index
   * update, and only pays off for outboxes that both grow large and poison routinely, where it
   * turns the reconciler's "delivered successor?" anti-join into a lookup.
   */
  readonly partitionIndex?: boolean;
}

/** The DDL of an outbox table (DESIGN §4), one statement per element, in order. */
export function outboxTableDdl(spec: OutboxSpec, options: OutboxTableOptions = {}): string[] {
  const n = tableNames(spec);
  const pending = 'sent_at is null and retired_at is null';
  const statements = [
    // Only when it is missing: CREATE SCHEMA checks the database's CREATE privilege before IF NOT
    // EXISTS, so a role that may create in its (existing) schema but not in the database — the
    // default for a non-owner since PostgreSQL 15 — would fail on a schema that is already there.
    `do $schema$ begin
      if not exists (select from pg_catalog.pg_namespace where nspname = '${spec.schema}') then
        create schema if not exists "${spec.schema}";
      end if;
    end $schema$`,
    `create table ${n.table} (
      id              bigint generated always as identity primary key,
      ${n.partition}  text not null,
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
      -- vacuum early and without throttling (DESIGN §5). A long transaction anywhere holds this back.
      autovacuum_vacuum_scale_factor = 0,
      autovacuum_vacuum_threshold = 2000,
      autovacuum_vacuum_insert_scale_factor = 0,
      autovacuum_vacuum_insert_threshold = 10000,
      autovacuum_vacuum_cost_delay = 0,
      autovacuum_analyze_scale_factor = 0.02
    )`,
    `comment on column ${n.table}.is_head is 'drainer: true on the earliest deliverable row of each partition, maintained by enqueue, outcome updates and redrive'`,
    // Records spec.maxAttempts: verifyOutboxTable compares, enqueue counts with it, setMaxAttempts changes it.
    maxAttemptsCommentDdl(spec, spec.maxAttempts),
    `create index "${n.partitionHeadIndex}" on ${n.table} (${n.partition}, id) where ${pending}`,
    `create index "${n.pendingIndex}" on ${n.table} (id) where ${pending}`,
    `create index "${n.claimIndex}" on ${n.table} (next_attempt_at, id) where is_head`,
    `create index "${n.retiredIndex}" on ${n.table} (id) where retired_at is not null`,
  ];
  if (options.partitionIndex) statements.push(`create index "${n.partitionIndex}" on ${n.table} (${n.partition}, id)`);
  statements.push(
    ...drainFunctionsDdl(spec),
    `create function ${n.notifyFunction}() returns trigger language plpgsql as $$
    begin
      perform pg_notify('${spec.channel}', '');
      return null;
    end
    $$`,
    // Statement-level: one notification per insert statement, sent at commit (NOTIFY is transactional).
    `create trigger "${n.notifyTrigger}" after insert on ${n.table} for each statement execute function ${n.notifyFunction}()`,
  );
  return statements;
}

/**
 * Creates the outbox table of `spec` with its indexes, NOTIFY trigger and the drainer's claim and
 * settle functions, and records `spec.maxAttempts` on it. The schema is created only when it is
 * missing (so a role that may create in its own schema but not in the database can run it). Run it
 * inside a migration (it does not open a transaction of its own).
 *
 * @example
 * export const up = (db: Kysely<any>) => createOutboxTable(db, vpcOutbox);
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function createOutboxTable(db: Kysely<any>, spec: OutboxSpec, options: OutboxTableOptions = {}): Promise<void> {
  for (const statement of outboxTableDdl(spec, options)) await sql.raw(statement).execute(db);
}

/** Drops the outbox table of `spec`, its trigger function and the drainer's functions (the schema stays). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function dropOutboxTable(db: Kysely<any>, spec: OutboxSpec): Promise<void> {
  const n = tableNames(spec);
  await sql.raw(`drop table if exists ${n.table}`).execute(db);
  await sql.raw(`drop function if exists ${n.notifyFunction}()`).execute(db);
  for (const signature of DRAIN_FUNCTION_SIGNATURES.claim) await sql.raw(`drop function if exists ${n.claimFunction}${signature}`).execute(db);
  for (const signature of DRAIN_FUNCTION_SIGNATURES.settle) await sql.raw(`drop function if exists ${n.settleFunction}${signature}`).execute(db);
}

/**
 * The shape of a Kysely migration (`Migration` of `kysely/migration` in 0.29, of `kysely` in 0.28),
 * spelled out so the types work with every kysely the peer range allows.
 */
export interface OutboxMigration {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  up(db: Kysely<any>): Promise<void>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  down(db: Kysely<any>): Promise<void>;
}

/**
 * A Kysely migration that creates the outbox table on `up` and drops it on `down`.
 *
 * @example
 * const migrations = { '0001_vpc_outbox': outboxMigration(vpcOutbox) };
 */
export function outboxMigration(spec: OutboxSpec, options: OutboxTableOptions = {}): OutboxMigration {
  return {
    up: (db) => createOutboxTable(db, spec, options),
    down: (db) => dropOutboxTable(db, spec),
  };
}
