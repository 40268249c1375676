import { OutboxTableError, verifyOutboxTable } from '@outbox/outbox';
import { XMIN_HOLDERS_SQL } from '@outbox/outbox/protocol';
import { sql } from 'kysely';
import type { CheckedConfig } from './config.js';
import type { DoctorCheck } from './output-schemas.js';
import { gapRepairs, sqlScript } from './table-repairs.js';
import type { Target } from './targets.js';

/*
 * One function per doctor check: each reads, never writes, and answers one DoctorCheck with what
 * to do when it fails. docs/cli.md lists them.
 */

type Check = Omit<DoctorCheck, 'outbox' | 'check'>;
const pass = (detail: string): Check => ({ status: 'pass', detail, fix: null, sql: null });
const fail = (detail: string, fix: string, sql: string | null = null): Check => ({ status: 'fail', detail, fix, sql });
const warn = (detail: string, fix: string): Check => ({ status: 'warn', detail, fix, sql: null });
const skip = (detail: string): Check => ({ status: 'skip', detail, fix: null, sql: null });
const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** The table is there and verifyOutboxTable passes: columns, indexes, trigger, functions, the recorded maxAttempts. */
export async function tableCheck(target: Target): Promise<Check> {
  try {
    await verifyOutboxTable(target.db, target.spec);
    return pass(
      `${target.spec.table} matches the contract (columns, indexes, trigger, drain and enqueue functions, actions log, maxAttempts ${target.spec.maxAttempts})`,
    );
  } catch (error) {
    if (error instanceof OutboxTableError) {
      const detail = `${target.spec.table}: missing or wrong: ${error.missing.join('; ')}`;
      // No partition column: more likely a spec naming the wrong column than a table that lost it.
      if (error.missing.some((gap) => gap.endsWith("(the spec's partitionColumn)")))
        return fail(
          detail,
          `the table has no ${target.spec.partitionColumn} column, the spec's partitionColumn: fix the spec (the partition column check names the table's), or point it at the right table`,
        );
      const repairs = gapRepairs(target.spec, error.missing);
      const statements = [...new Set(repairs.flatMap((r) => r.sql))];
      const byHand = repairs.flatMap((r) => (r.byHand ? [r.byHand] : []));
      const fix = [
        statements.length === 0
          ? ''
          : `run the SQL below, the migrations' own DDL for what is missing${
              // A plain create index blocks writes while it builds.
              statements.some((s) => s.startsWith('create index'))
                ? ' (on a large table, add `concurrently` to each create index and run it alone)'
                : ''
            }`,
        byHand.length > 0 ? `by hand: ${byHand.join('; ')}` : '',
        'or point the spec at the right table',
      ].filter(Boolean);
      return fail(detail, fix.join('; '), statements.length > 0 ? sqlScript(statements) : null);
    }
    return fail(
      `${target.spec.table} could not be verified: ${messageOf(error)}`,
      "check the config's spec and database URL",
    );
  }
}

/** The column the table's partition-head index orders by is the spec's partition column. */
export async function partitionColumnCheck(target: Target): Promise<Check> {
  const { schema, tableName, partitionColumn } = target.spec;
  const result = await sql<{ column: string | null; has_column: boolean }>`
    select
      (select a.attname::text from pg_catalog.pg_index i
         join pg_catalog.pg_class c on c.oid = i.indexrelid
         join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]
       where c.relname = ${`${tableName}_partition_head_idx`} and c.relnamespace = ${schema}::regnamespace) as column,
      exists (select 1 from information_schema.columns where table_schema = ${schema} and table_name = ${tableName} and column_name = ${partitionColumn}) as has_column`
    .execute(target.db)
    .catch(() => ({ rows: [{ column: null, has_column: false }] }));
  const row = result.rows[0];
  if (row?.column === partitionColumn)
    return pass(`the table orders partitions by ${partitionColumn}, as the spec says`);
  if (row?.column)
    return fail(
      `the spec says ${partitionColumn}, the table's partition-head index is on ${row.column}`,
      `set partitionColumn: '${row.column}' in the config, or point it at the right table`,
    );
  return fail(
    `the table has ${row?.has_column ? `a ${partitionColumn} column but no partition-head index` : `no ${partitionColumn} column`}`,
    "recreate it: the table check prints the migrations' DDL for it",
  );
}

/** Who listens on the spec's channel: the drainers' LISTEN sessions (their last statement is the LISTEN). */
export async function channelCheck(target: Target): Promise<Check> {
  const channel = target.spec.channel;
  const result = await sql<{ n: number }>`
    select count(*)::int as n from pg_catalog.pg_stat_activity
    where datname = current_database() and query ~* ${`^\\s*listen\\s+"?${channel}"?\\s*;?\\s*$`}`.execute(target.db);
  const n = result.rows[0]?.n ?? 0;
  return n > 0
    ? pass(`${n} session(s) LISTEN on ${channel}: drainers wake on each commit`)
    : warn(
        `no session LISTENs on ${channel}: drainers (if any run) deliver on their timer only`,
        `start the drainer with listen: { connectionString } on channel ${channel}, or ignore this if none should run here`,
      );
}

/** The applied Kysely migrations against the ones the code ships (when the config names them). */
export async function migrationsCheck(target: Target, config: CheckedConfig): Promise<Check> {
  const expected = config.migrations;
  if (!expected) return skip('the config names no migrations (migrations.names): not compared');
  const [schema, table] = expected.table.split('.') as [string, string];
  let applied: string[];
  try {
    applied = (
      await sql<{ name: string }>`select name from ${sql.id(schema, table)} order by name`.execute(target.db)
    ).rows.map((r) => r.name);
  } catch (error) {
    return fail(
      `${expected.table} cannot be read: ${messageOf(error)}`,
      'run the migrations (pnpm migrate in this repository)',
    );
  }
  const pending = expected.names.filter((name) => !applied.includes(name));
  const unknown = applied.filter((name) => !expected.names.includes(name));
  if (pending.length > 0)
    return fail(
      `${pending.length} migration(s) not applied: ${pending.join(', ')}`,
      'run the migrations (pnpm migrate in this repository)',
    );
  if (unknown.length > 0)
    return warn(
      `applied migrations this code does not ship: ${unknown.join(', ')}`,
      'a newer release migrated this database: upgrade before running this one',
    );
  return pass(`all ${expected.names.length} migrations applied`);
}

/** `seconds` as `2 h 5 min`, `12 min 3 s` or `40 s`. */
function age(seconds: number): string {
  const [h, m, s] = [Math.floor(seconds / 3600), Math.floor((seconds % 3600) / 60), seconds % 60];
  return h > 0 ? `${h} h ${m} min` : m > 0 ? `${m} min ${s} s` : `${s} s`;
}

/**
 * The oldest transaction open longer than `minutes` that holds back vacuum (XMIN_HOLDERS_SQL: a
 * snapshot in this database, a transaction id anywhere, a prepared transaction), named so that it can
 * be ended: until it ends vacuum removes no delivered row's dead entry and claims slow down (docs/design.md §4).
 */
export async function longTransactionsCheck(target: Target, minutes: number): Promise<Check> {
  const result = await sql<{
    pid: number | null;
    application_name: string | null;
    state: string | null;
    database: string | null;
    gid: string | null;
    age_seconds: number;
    others: number;
  }>`
    select pid, application_name, state, database, gid, extract(epoch from now() - since)::int as age_seconds,
      (count(*) over () - 1)::int as others
    from (${sql.raw(XMIN_HOLDERS_SQL)}) h
    where since < now() - make_interval(mins => ${minutes})
    order by since limit 1`.execute(target.db);
  const oldest = result.rows[0];
  if (!oldest) return pass(`no transaction older than ${minutes} min holds back vacuum`);
  const others = oldest.others > 0 ? `; ${oldest.others} more open longer than ${minutes} min` : '';
  const since = `open ${age(Math.max(0, oldest.age_seconds))}`;
  if (oldest.pid === null)
    return fail(
      `the oldest transaction holding back vacuum is prepared: gid ${oldest.gid} in database ${oldest.database}, ${since}${others}`,
      `connected to ${oldest.database}, ROLLBACK PREPARED (or COMMIT PREPARED, if its coordinator says so) the SQL below: until then delivered rows' dead entries pile up in the claim index`,
      `rollback prepared '${(oldest.gid ?? '').replaceAll("'", "''")}';`,
    );
  return fail(
    `the oldest transaction holding back vacuum: pid ${oldest.pid}, application_name ${oldest.application_name ? JSON.stringify(oldest.application_name) : '(none)'}, ${oldest.state ?? 'state unknown'}, in ${oldest.database}, ${since}${others}`,
    `end it with the SQL below (its session is closed and its work rolled back), then find why it stayed open (idle_in_transaction_session_timeout ends such sessions): until then delivered rows' dead entries pile up in the claim index`,
    `select pg_terminate_backend(${oldest.pid});`,
  );
}
