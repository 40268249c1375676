import { columnsAddedBy } from '../columns.js';
import type { OutboxSpec } from '../define-outbox.js';
import { tableNames } from '../table-names.js';

/** `poison_cause` values: out of transient attempts, or refused for good by the sink. */
export type PoisonCause = 'exhausted' | 'refused';
/** `closed_as` values: `retire` closes a superseded row, `discard` a poisoned one that is not. */
export type ClosedAs = 'retired' | 'discarded';

/**
 * The ledger's life, version 1 (docs/ledger.md): its columns (why a row is poisoned, how often it
 * was revived, how it was closed: the step `0003_ledger_life` of columns.ts) and the delivered-rows index
 * compaction reads. Frozen. Metadata-only on a large table except the index: build that one
 * `concurrently` beforehand (`if not exists` keeps it); the checks are NOT VALID (every existing
 * row is NULL there) so that they scan nothing.
 */
export function ledgerLifeDdlV1(spec: OutboxSpec): string[] {
  const names = tableNames(spec);
  return [
    `alter table ${names.table}
      add column poison_cause  text,
      add column poison_code   text,
      add column revival_count integer not null default 0,
      add column revive_after  timestamptz,
      add column revive_requested boolean not null default false,
      add column closed_as     text,
      add constraint "${spec.tableName}_poison_cause_check" check (poison_cause in ('exhausted', 'refused')) not valid,
      add constraint "${spec.tableName}_closed_as_check" check (closed_as in ('retired', 'discarded')) not valid`,
    `comment on column ${names.table}.poison_cause is 'why the row is poisoned: exhausted (transient failures) or refused (permanently, code in poison_code); NULL on rows poisoned before it existed, read as exhausted'`,
    `comment on column ${names.table}.revive_requested is 'a refused row a model change or an operator asked to retry: revived once revive_after (the growing spacing between its revivals) has passed'`,
    `comment on column ${names.table}.closed_as is 'how retired_at was set: retired (superseded) or discarded (not superseded, its tuples never written); NULL read as retired'`,
    `create index if not exists "${names.deliveredIndex}" on ${names.table} (${names.partition}, id) where sent_at is not null`,
  ];
}

/** Undoes {@link ledgerLifeDdlV1}: the index, then the columns (their checks go with them). Frozen. */
export function dropLedgerLifeDdlV1(spec: OutboxSpec): string[] {
  const names = tableNames(spec);
  const columns = columnsAddedBy('0003_ledger_life');
  return [
    `drop index if exists "${spec.schema}"."${names.deliveredIndex}"`,
    `alter table ${names.table} ${columns.map((column) => `drop column if exists ${column}`).join(', ')}`,
  ];
}
