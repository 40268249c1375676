import { sql } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { drainFunctionMarker } from './drain-functions.js';
import { OutboxConfigError, OutboxTableError } from './errors.js';
import { recordedMaxAttempts } from './max-attempts.js';

/** Column → the type `format_type` reports for it. */
function expectedColumns(spec: OutboxSpec): Record<string, string> {
  return {
    id: 'bigint',
    [spec.partitionColumn]: 'text',
    payload: 'jsonb',
    created_at: 'timestamp with time zone',
    next_attempt_at: 'timestamp with time zone',
    attempt_count: 'integer',
    last_error: 'text',
    sent_at: 'timestamp with time zone',
    retired_at: 'timestamp with time zone',
    retired_reason: 'text',
    is_head: 'boolean',
  };
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

/**
 * What enqueue and the drainer rely on beyond a column's type: enqueue writes only the partition
 * key, the payload and is_head, so a missing default leaves a new row NULL where the claim compares
 * (`next_attempt_at <= now()`, `attempt_count < max`): never claimed, never reported. A default on
 * sent_at or retired_at would mark every new row delivered or retired. Returns what is wrong, or
 * undefined.
 */
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
      return column.not_null && column.default !== null ? undefined : 'not null default now(), as enqueue leaves it to the default';
    case 'attempt_count':
      return column.not_null && column.default === '0' ? undefined : 'not null default 0, as enqueue leaves it to the default';
    case 'is_head':
      return column.not_null && column.default === 'false' ? undefined : 'not null default false';
    case 'sent_at':
    case 'retired_at':
      return column.not_null || column.default !== null ? 'nullable without a default: NULL until the row is delivered or retired' : undefined;
    default:
      return undefined;
  }
}

const normalise = (text: string | null) => (text ?? '').replace(/[()\s]+/g, ' ').trim().toLowerCase();

/**
 * Checks that the live table behind `spec` is a plain table (not partitioned, no inheritance
 * children: the drainer locks runs by ctid), with the contract's columns (their types, NOT NULLs
 * and the defaults enqueue relies on), the partial partition-head, pending and claim indexes (valid
 * btrees on exactly those key columns), the statement-level NOTIFY trigger on the spec's channel
 * (enabled for ordinary sessions), and the drainer's claim and settle functions of this release (by
 * the version marker in their bodies). Throws one {@link OutboxTableError}
 * listing everything missing. Drainer and reconciler call it at start, so a spec pointed at the
 * wrong table or column fails fast.
 *
 * Then it compares `spec.maxAttempts` with the value the table records (see `setMaxAttempts`)
 * and throws an {@link OutboxConfigError} on field `maxAttempts` when they differ: the rows were
 * counted against the recorded value, and a drainer or reconciler counting with another one would
 * strand or reorder partitions. A table that records no value (created by an earlier release) is
 * accepted with any value.
 *
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

  // A plain table without inheritance children: the drainer locks a run's rows by ctid, and rows of
  // two partitions (or of a parent and its child) can share one. The claim hands out only the ids
  // it read (claim v3 and earlier handed out such a row, even an old, delivered one, with a run),
  // but it would still lock rows of other partitions that it never read.
  const kind = await sql<{ kind: string; children: boolean }>`
    select c.relkind as kind, exists (select 1 from pg_inherits i where i.inhparent = c.oid) as children
    from pg_class c where c.oid = ${oid}`.execute(db);
  const { kind: relkind, children } = kind.rows[0] ?? { kind: 'r', children: false };
  if (relkind === 'p' || children) {
    missing.push('the table itself: it is partitioned (or has inheritance children), and rows of two partitions can share a ctid, by which the drainer locks its runs');
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
    if (!column) missing.push(`column ${name} ${type}${name === spec.partitionColumn ? ' (the spec\'s partitionColumn)' : ''}`);
    else if (column.type !== type) missing.push(`column ${name} should be ${type}, is ${column.type}`);
    else {
      const gap = constraintGap(spec, name, column);
      if (gap) missing.push(`column ${name} should be ${gap}`);
    }
  }

  // Key columns only (INCLUDE columns do not order the index); an expression reads as null, so an
  // index on (lower(key), id) is not taken for one on (id). Only a valid btree counts: a failed
  // CREATE INDEX CONCURRENTLY leaves an invalid index the planner never uses.
  const indexes = await sql<IndexRow>`
    select array(select a.attname from unnest(i.indkey[0:i.indnkeyatts - 1]) with ordinality k(attnum, ord)
                 left join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum order by k.ord)::text[] as columns,
           pg_get_expr(i.indpred, i.indrelid) as predicate
    from pg_index i join pg_class c on c.oid = i.indexrelid join pg_am am on am.oid = c.relam
    where i.indrelid = ${oid} and i.indisvalid and i.indisready and i.indislive and am.amname = 'btree'`.execute(db);
  const hasIndex = (cols: string[], predicate: (p: string) => boolean) =>
    indexes.rows.some((i) => i.columns.join(',') === cols.join(',') && predicate(normalise(i.predicate)));
  // Exactly the pending predicate: a narrower (or an OR-ed) index does not serve every pending row.
  const isPending = (p: string) =>
    p === 'sent_at is null and retired_at is null' || p === 'retired_at is null and sent_at is null';
  if (!hasIndex([spec.partitionColumn, 'id'], isPending)) {
    missing.push(`partial index (${spec.partitionColumn}, id) where sent_at is null and retired_at is null (partition head)`);
  }
  if (!hasIndex(['id'], isPending)) missing.push('partial index (id) where sent_at is null and retired_at is null (pending)');
  if (!hasIndex(['next_attempt_at', 'id'], (p) => p === 'is_head')) {
    missing.push('partial index (next_attempt_at, id) where is_head (the drainer\'s claim)');
  }

  // tgtype bits: 1 = row-level, 2 = before, 4 = insert. We want: statement-level, after, insert.
  const triggers = await sql<{ ok: boolean }>`
    select (t.tgtype & 1) = 0 and (t.tgtype & 2) = 0 and (t.tgtype & 4) = 4
           and strpos(p.prosrc, ${`pg_notify('${spec.channel}'`}) > 0 as ok
    from pg_trigger t join pg_proc p on p.oid = t.tgfoid
    -- Enabled for ordinary sessions: 'O' (origin, the default) or 'A' (always); not 'D' (disabled)
    -- nor 'R' (fires only when session_replication_role is replica).
    where t.tgrelid = ${oid} and not t.tgisinternal and t.tgenabled in ('O', 'A')`.execute(db);
  if (!triggers.rows.some((t) => t.ok)) {
    missing.push(`statement-level AFTER INSERT trigger calling pg_notify('${spec.channel}', '')`);
  }

  // The drainer's functions, by name and by the marker of this release and spec in their body.
  const functions = await sql<{ name: string; source: string }>`
    select p.proname as name, p.prosrc as source from pg_proc p join pg_namespace ns on ns.oid = p.pronamespace
    where ns.nspname = ${spec.schema} and p.proname = any(${[`${spec.tableName}_claim`, `${spec.tableName}_settle`]}::text[])`.execute(db);
  for (const fn of ['claim', 'settle'] as const) {
    const name = `${spec.schema}.${spec.tableName}_${fn}`;
    const found = functions.rows.filter((f) => f.name === `${spec.tableName}_${fn}`);
    if (found.length === 0) missing.push(`function ${name} (the drainer's ${fn}; created by createOutboxTable or createDrainFunctions)`);
    else if (!found.some((f) => f.source.includes(drainFunctionMarker(spec, fn)))) {
      missing.push(
        `function ${name} is not the one this release creates for this spec (expected "${drainFunctionMarker(spec, fn)}" in its body; createDrainFunctions replaces it)`,
      );
    }
  }
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
