import { sql, type Kysely } from 'kysely';
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
  columns: string[];
  predicate: string | null;
}

const normalise = (text: string | null) => (text ?? '').replace(/[()\s]+/g, ' ').trim().toLowerCase();

/**
 * Checks that the live table behind `spec` has the contract's columns (and types), the partial
 * partition-head, pending and claim indexes, the statement-level NOTIFY trigger on the spec's
 * channel, and the drainer's claim and settle functions. Throws one {@link OutboxTableError}
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
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function verifyOutboxTable(db: Kysely<any>, spec: OutboxSpec): Promise<void> {
  const relation = `"${spec.schema}"."${spec.tableName}"`;
  const exists = await sql<{ oid: number | null }>`select to_regclass(${relation})::oid as oid`.execute(db);
  const oid = exists.rows[0]?.oid;
  if (oid === null || oid === undefined) {
    throw new OutboxTableError(spec.table, [`the table ${spec.table} itself (it does not exist)`]);
  }
  const missing: string[] = [];

  const columns = await sql<{ name: string; type: string; not_null: boolean }>`
    select attname as name, format_type(atttypid, atttypmod) as type, attnotnull as not_null
    from pg_attribute where attrelid = ${oid} and attnum > 0 and not attisdropped`.execute(db);
  const actual = new Map(columns.rows.map((c) => [c.name, c]));
  for (const [name, type] of Object.entries(expectedColumns(spec))) {
    const column = actual.get(name);
    if (!column) missing.push(`column ${name} ${type}${name === spec.partitionColumn ? ' (the spec\'s partitionColumn)' : ''}`);
    else if (column.type !== type) missing.push(`column ${name} should be ${type}, is ${column.type}`);
  }

  const indexes = await sql<IndexRow>`
    select array(select a.attname from unnest(i.indkey) with ordinality k(attnum, ord)
                 join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum order by k.ord)::text[] as columns,
           pg_get_expr(i.indpred, i.indrelid) as predicate
    from pg_index i where i.indrelid = ${oid}`.execute(db);
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
           and p.prosrc like ${`%pg_notify('${spec.channel}'%`} as ok
    from pg_trigger t join pg_proc p on p.oid = t.tgfoid
    where t.tgrelid = ${oid} and not t.tgisinternal and t.tgenabled <> 'D'`.execute(db);
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
