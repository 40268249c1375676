import { sql } from 'kysely';
import { ACTIONS_LOG_COLUMNS, ACTIONS_LOG_STEP, actionsLogMarker } from './actions-log-ddl.js';
import type { AnyKysely } from '../any-kysely.js';
import { OUTBOX_COLUMN_NAMES, OUTBOX_COLUMNS } from '../columns.js';
import type { OutboxSpec } from '../define-outbox.js';
import { drainFunctionMarker } from './drain-functions.js';
import { enqueueFunctionMarker } from './enqueue-function.js';
import { OutboxConfigError, OutboxTableError } from '../errors.js';
import { recordedMaxAttempts } from '../max-attempts.js';

/** Column → the type `format_type` reports for it: the table's own columns, the partition column after `id`. */
function expectedColumns(spec: OutboxSpec): Record<string, string> {
  const own = Object.fromEntries(OUTBOX_COLUMN_NAMES.map((name) => [name, OUTBOX_COLUMNS[name].type]));
  return { id: OUTBOX_COLUMNS.id.type, [spec.partitionColumn]: 'text', ...own };
}

interface IndexRow {
  columns: (string | null)[];
  predicate: string | null;
}

interface ColumnRow {
  name: string;
  type: string;
  not_null: boolean;
  identity: boolean;
  default: string | null;
}

/** What enqueue and the claim rely on beyond a column's type (docs/outbox-sql.md), or undefined. */
function constraintGap(spec: OutboxSpec, name: string, column: ColumnRow): string | undefined {
  const byDefault = column.identity || column.default !== null;
  switch (name) {
    case 'id':
      return column.not_null && byDefault ? undefined : 'not null and generated (identity), as enqueue gives no id';
    case spec.partitionColumn:
    case 'payload':
      return column.not_null ? undefined : 'not null';
    case 'created_at':
    case 'next_attempt_at':
      return column.not_null && column.default !== null
        ? undefined
        : 'not null default now(), as enqueue leaves it to the default';
    case 'attempt_count':
      return column.not_null && column.default === '0'
        ? undefined
        : 'not null default 0, as enqueue leaves it to the default';
    case 'is_head':
      return column.not_null && column.default === 'false' ? undefined : 'not null default false';
    case 'revival_count':
      return column.not_null && column.default === '0'
        ? undefined
        : 'not null default 0, as enqueue leaves it to the default';
    case 'revive_requested':
      return column.not_null && column.default === 'false'
        ? undefined
        : 'not null default false, as enqueue leaves it to the default';
    case 'verify_after':
      return column.not_null || column.default !== null
        ? 'nullable without a default: NULL until a delivery is to be checked'
        : undefined;
    case 'sent_at':
    case 'retired_at':
      return column.not_null || column.default !== null
        ? 'nullable without a default: NULL until the row is delivered or retired'
        : undefined;
    default:
      return undefined;
  }
}

const normalise = (text: string | null) =>
  (text ?? '')
    .replace(/[()\s]+/g, ' ')
    .trim()
    .toLowerCase();

/** What the actions log of `spec` lacks: the table, a column of its type, or this spec's marker in its comment. */
async function actionsLogGaps(db: AnyKysely, spec: OutboxSpec): Promise<string[]> {
  const name = `${spec.table}_actions`;
  const log = await sql<{ oid: number | null; comment: string | null }>`
    select c.oid, obj_description(c.oid, 'pg_class') as comment
    from (select to_regclass(${`"${spec.schema}"."${spec.tableName}_actions"`})::oid as oid) r join pg_class c on c.oid = r.oid`.execute(
    db,
  );
  const table = log.rows[0];
  if (!table)
    return [
      `table ${name} (the actions log; created by createOutboxTable or the outboxMigrations step ${ACTIONS_LOG_STEP})`,
    ];
  const columns = await sql<{ name: string; type: string }>`
    select a.attname as name, format_type(a.atttypid, a.atttypmod) as type from pg_attribute a
    where a.attrelid = ${table.oid} and a.attnum > 0 and not a.attisdropped`.execute(db);
  const types = new Map(columns.rows.map((c) => [c.name, c.type]));
  const gaps = Object.entries(ACTIONS_LOG_COLUMNS).flatMap(([column, type]) => {
    const actual = types.get(column);
    if (actual === undefined) return [`column ${column} ${type} of ${name} (the actions log)`];
    return actual === type ? [] : [`column ${column} of ${name} should be ${type}, is ${actual}`];
  });
  if (gaps.length === 0 && !(table.comment ?? '').includes(actionsLogMarker(spec)))
    gaps.push(
      `table ${name} is not the actions log this release creates for this spec (expected "${actionsLogMarker(spec)}" in its comment)`,
    );
  return gaps;
}

/**
 * Checks that the live table behind `spec` is what the drainer and the reconciler rely on: a plain
 * table with the contract's columns and defaults, the partial indexes, the NOTIFY trigger on the
 * spec's channel, this release's drainer and enqueue functions, and the actions log beside it
 * (docs/outbox-sql.md lists each check). Throws
 * one {@link OutboxTableError} listing every gap; then an {@link OutboxConfigError} (`maxAttempts`)
 * when the table records another `maxAttempts` than the spec. Drainer and reconciler call it at start.
 * @example
 * await verifyOutboxTable(db, vpcOutbox);
 */
export async function verifyOutboxTable(db: AnyKysely, spec: OutboxSpec): Promise<void> {
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  const exists = await sql<{ oid: number | null }>`select to_regclass(${relation})::oid as oid`.execute(db);
  const oid = exists.rows[0]?.oid;
  if (oid === null || oid === undefined) {
    throw new OutboxTableError(spec.table, [`the table ${spec.table} itself (it does not exist)`]);
  }
  const missing: string[] = [];

  // The claim locks runs by ctid, which rows of two partitions (or a parent and a child) can share.
  const kind = await sql<{ kind: string; children: boolean }>`
    select c.relkind as kind, exists (select 1 from pg_inherits i where i.inhparent = c.oid) as children
    from pg_class c where c.oid = ${oid}`.execute(db);
  const { kind: relkind, children } = kind.rows[0] ?? { kind: 'r', children: false };
  if (relkind === 'p' || children) {
    missing.push(
      'the table itself: it is partitioned (or has inheritance children), and rows of two partitions can share a ctid, by which the drainer locks its runs',
    );
  } else if (relkind !== 'r') {
    missing.push(`the table itself: ${spec.table} is not a plain table (relkind ${relkind})`);
  }

  const columns = await sql<ColumnRow>`
    select a.attname as name, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as not_null,
           a.attidentity <> '' as identity, pg_get_expr(d.adbin, d.adrelid) as "default"
    from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
    where a.attrelid = ${oid} and a.attnum > 0 and not a.attisdropped`.execute(db);
  const actual = new Map(columns.rows.map((c) => [c.name, c]));
  for (const [name, type] of Object.entries(expectedColumns(spec))) {
    const column = actual.get(name);
    if (!column)
      missing.push(`column ${name} ${type}${name === spec.partitionColumn ? " (the spec's partitionColumn)" : ''}`);
    else if (column.type !== type) missing.push(`column ${name} should be ${type}, is ${column.type}`);
    else {
      const gap = constraintGap(spec, name, column);
      if (gap) missing.push(`column ${name} should be ${gap}`);
    }
  }

  // Valid btrees by their key columns (not INCLUDE ones; an expression reads as null).
  const indexes = await sql<IndexRow>`
    select array(select a.attname from unnest(i.indkey[0:i.indnkeyatts - 1]) with ordinality k(attnum, ord)
                 left join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum order by k.ord)::text[] as columns,
           pg_get_expr(i.indpred, i.indrelid) as predicate
    from pg_index i join pg_class c on c.oid = i.indexrelid join pg_am am on am.oid = c.relam
    where i.indrelid = ${oid} and i.indisvalid and i.indisready and i.indislive and am.amname = 'btree'`.execute(db);
  const hasIndex = (cols: string[], predicate: (p: string) => boolean) =>
    indexes.rows.some((i) => i.columns.join(',') === cols.join(',') && predicate(normalise(i.predicate)));
  const isPending = (p: string) =>
    p === 'sent_at is null and retired_at is null' || p === 'retired_at is null and sent_at is null';
  if (!hasIndex([spec.partitionColumn, 'id'], isPending)) {
    missing.push(
      `partial index (${spec.partitionColumn}, id) where sent_at is null and retired_at is null (partition head)`,
    );
  }
  if (!hasIndex(['id'], isPending))
    missing.push('partial index (id) where sent_at is null and retired_at is null (pending)');
  if (!hasIndex(['next_attempt_at', 'id'], (p) => p === 'is_head')) {
    missing.push("partial index (next_attempt_at, id) where is_head (the drainer's claim)");
  }
  if (!hasIndex(['verify_after'], (p) => p === 'verify_after is not null')) {
    missing.push('partial index (verify_after) where verify_after is not null (late-write verification)');
  }
  if (!hasIndex([spec.partitionColumn, 'id'], (p) => p === 'sent_at is not null')) {
    missing.push(
      `partial index (${spec.partitionColumn}, id) where sent_at is not null (delivered rows: compaction, the reconciler's successor look-up)`,
    );
  }

  // tgtype bits: 1 = row-level, 2 = before, 4 = insert. Statement-level, after, insert; enabled
  // for ordinary sessions ('O' or 'A', not 'D' nor replica-only 'R').
  const triggers = await sql<{ ok: boolean }>`
    select (t.tgtype & 1) = 0 and (t.tgtype & 2) = 0 and (t.tgtype & 4) = 4
           and strpos(p.prosrc, ${`pg_notify('${spec.channel}'`}) > 0 as ok
    from pg_trigger t join pg_proc p on p.oid = t.tgfoid
    where t.tgrelid = ${oid} and not t.tgisinternal and t.tgenabled in ('O', 'A')`.execute(db);
  if (!triggers.rows.some((t) => t.ok)) {
    missing.push(`statement-level AFTER INSERT trigger calling pg_notify('${spec.channel}', '')`);
  }

  const functions = await sql<{ name: string; source: string }>`
    select p.proname as name, p.prosrc as source from pg_proc p join pg_namespace ns on ns.oid = p.pronamespace
    where ns.nspname = ${spec.schema} and p.proname = any(${[`${spec.tableName}_claim`, `${spec.tableName}_settle`, `${spec.tableName}_enqueue`]}::text[])`.execute(
    db,
  );
  const expected = [
    { fn: 'claim', what: "the drainer's claim", marker: drainFunctionMarker(spec, 'claim') },
    { fn: 'settle', what: "the drainer's settle", marker: drainFunctionMarker(spec, 'settle') },
    { fn: 'enqueue', what: 'enqueue', marker: enqueueFunctionMarker(spec) },
  ] as const;
  for (const { fn, what, marker } of expected) {
    const name = `${spec.schema}.${spec.tableName}_${fn}`;
    const found = functions.rows.filter((f) => f.name === `${spec.tableName}_${fn}`);
    if (found.length === 0)
      missing.push(`function ${name} (${what}; created by createOutboxTable or createDrainFunctions)`);
    else if (!found.some((f) => f.source.includes(marker))) {
      missing.push(
        `function ${name} is not the one this release creates for this spec (expected "${marker}" in its body; createDrainFunctions replaces it)`,
      );
    }
  }
  missing.push(...(await actionsLogGaps(db, spec)));
  if (missing.length > 0) throw new OutboxTableError(spec.table, missing);

  const recorded = await recordedMaxAttempts(db, spec);
  if (recorded !== undefined && recorded !== spec.maxAttempts) {
    throw new OutboxConfigError(
      'maxAttempts',
      `the spec says ${spec.maxAttempts}, but ${spec.table} records ${recorded}: its rows were counted against ${recorded}. ` +
        `To change it, run setMaxAttempts(db, spec) with this spec in a migration (after stopping the drainers and reconcilers ` +
        `that run with ${recorded}); otherwise deploy the spec with maxAttempts ${recorded}.`,
    );
  }
}
