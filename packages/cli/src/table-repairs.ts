import { outboxTableDdl, type OutboxSpec } from '@outbox/outbox';
import { ACTIONS_LOG_STEP, tableNames } from '@outbox/outbox/protocol';

/**
 * What recreates one gap `verifyOutboxTable` reported: statements of `outboxTableDdl` (the DDL the
 * migrations and `createOutboxTable` run), or, when no statement can, what to do by hand.
 */
export interface GapRepair {
  /** The gap as `verifyOutboxTable` words it (`OutboxTableError.missing`). */
  readonly gap: string;
  /** Statements that recreate what is missing, in order; empty when it takes a human. */
  readonly sql: readonly string[];
  /** When `sql` is empty: what to do. */
  readonly byHand?: string;
}

/** A create-index statement of the DDL, by the key columns and predicate `verifyOutboxTable` names the index with. */
interface DdlIndex {
  readonly name: string;
  /** `resource_id, id`: unquoted, as the gap names them. */
  readonly columns: string;
  readonly predicate: string;
  readonly statement: string;
}

const unquote = (identifier: string) => identifier.replace(/"/g, '');
const escape = (text: string) => text.replace(/[.$]/g, '\\$&');
const NAME = '"?[a-z_][a-z0-9_]*"?';

/** The DDL of `spec`, taken apart into what each statement creates. */
function ddlElements(spec: OutboxSpec) {
  const names = tableNames(spec);
  // The NOTIFY function is replaced, not created: it outlives a dropped table or trigger.
  const notify = `create function ${names.notifyFunction}()`;
  // The actions log is a table of its own: a dropped outbox table may have left it, kept as evidence.
  const actionsLog = `create table ${names.actionsTable} (`;
  const all = outboxTableDdl(spec)
    .map((statement) => statement.trim().replace(/;\s*$/, ''))
    .map((statement) =>
      statement.startsWith(notify)
        ? statement.replace('create function', 'create or replace function')
        : statement.startsWith(actionsLog)
          ? statement.replace('create table', 'create table if not exists')
          : statement,
    );
  const actionsLogDdl = all.filter(
    (statement) =>
      statement.startsWith(`create table if not exists ${names.actionsTable} (`) ||
      statement.startsWith(`comment on table ${names.actionsTable} is `),
  );
  const indexes: DdlIndex[] = [];
  const functions = new Map<string, string>();
  /** Column → its definition (`payload jsonb not null`, quoted as the DDL quotes it). */
  const definitions = new Map<string, string>();
  /** Column → the `add constraint … check (column …)` clauses of the DDL. */
  const checks = new Map<string, string[]>();
  const comments = new Map<string, string>();
  const trigger: string[] = [];
  for (const statement of all) {
    const index = /^create index (?:if not exists )?"([^"]+)" on \S+ \((.+?)\) where (.+)$/s.exec(statement);
    const fn = /create or replace function ("[^"]+"\."[^"]+")\(/.exec(statement);
    const comment = new RegExp(`^comment on column ${escape(names.table)}\\.(${NAME}) is `).exec(statement);
    if (index) {
      const [, name, columns, predicate] = index as unknown as [string, string, string, string];
      indexes.push({ name, columns: unquote(columns), predicate: predicate.trim(), statement });
    } else if (statement.startsWith(`create or replace function ${names.notifyFunction}()`)) trigger.push(statement);
    else if (fn) functions.set(unquote(fn[1] as string), statement);
    else if (comment) comments.set(unquote(comment[1] as string), statement);
    else if (statement.startsWith('create trigger ')) {
      trigger.push(`drop trigger if exists "${names.notifyTrigger}" on ${names.table}`, statement);
    } else if (statement.startsWith(`create table ${names.table} (`)) {
      const body = statement.slice(statement.indexOf('(') + 1, statement.search(/\n\s*\) with \(/));
      for (const line of body.split('\n')) {
        const column = new RegExp(`^\\s*(${NAME})\\s+(.+?),?\\s*$`).exec(line);
        if (column) definitions.set(unquote(column[1] as string), `${column[1]} ${column[2]}`);
      }
    } else if (statement.startsWith(`alter table ${names.table}`)) {
      for (const line of statement.split('\n')) {
        const column = new RegExp(`add column\\s+(${NAME})\\s+([^,]+?)\\s*(?:,|$)`).exec(line);
        if (column)
          definitions.set(unquote(column[1] as string), `${column[1]} ${(column[2] as string).replace(/\s+/g, ' ')}`);
        const check = /(add constraint "[^"]+" check \(([a-z_]+) .*?)\s*,?\s*$/.exec(line.trim());
        if (check) checks.set(check[2] as string, [...(checks.get(check[2] as string) ?? []), check[1] as string]);
      }
    }
  }
  return { names, all, indexes, functions, definitions, checks, comments, trigger, actionsLogDdl };
}

/**
 * For each gap `verifyOutboxTable` found in `spec`'s table, the statements of the migrations' own
 * DDL that recreate it — an index (dropped first if an invalid one holds its name), the NOTIFY
 * trigger, a drainer or enqueue function, a column with its checks and comment, or the whole table —
 * or what to do by hand (a column of the wrong type, a partitioned table). A gap this does not know
 * gets "run the migrations".
 *
 * @example
 * catch (error) { if (error instanceof OutboxTableError) for (const r of gapRepairs(spec, error.missing)) … }
 */
export function gapRepairs(spec: OutboxSpec, gaps: readonly string[]): GapRepair[] {
  const ddl = ddlElements(spec);
  const { names } = ddl;
  return gaps.map((gap): GapRepair => {
    const sql = (statements: readonly string[]) => ({ gap, sql: statements });
    const byHand = (what: string) => ({ gap, sql: [], byHand: what });
    if (gap.endsWith('itself (it does not exist)')) return sql(ddl.all);
    if (gap.startsWith('the table itself'))
      return byHand(`recreate ${spec.table} as a plain table (createOutboxTable) and move its rows into it`);
    const column = /^column ([a-z_][a-z0-9_]*) (should be )?/.exec(gap);
    const definition = column && ddl.definitions.get(column[1] as string);
    if (column && definition) {
      const name = column[1] as string;
      if (column[2]) return byHand(`alter column ${name} of ${spec.table} to the contract's \`${definition}\``);
      const comment = ddl.comments.get(name);
      return sql([
        `alter table ${names.table} add column ${definition}`,
        ...(ddl.checks.get(name) ?? []).map((check) => `alter table ${names.table} ${check}`),
        ...(comment ? [comment] : []),
      ]);
    }
    const index = ddl.indexes.find((i) => gap.startsWith(`partial index (${i.columns}) where ${i.predicate} (`));
    if (index) return sql([`drop index if exists "${spec.schema}"."${index.name}"`, index.statement]);
    if (gap.includes('AFTER INSERT trigger')) return sql(ddl.trigger);
    if (
      gap ===
      `table ${spec.table}_actions (the actions log; created by createOutboxTable or the outboxMigrations step ${ACTIONS_LOG_STEP})`
    )
      return sql(ddl.actionsLogDdl);
    const fn = /^function (\S+) /.exec(gap);
    const statement = fn && ddl.functions.get(fn[1] as string);
    if (statement) return sql([statement]);
    return byHand('run the outbox migrations for this spec (outboxMigrations)');
  });
}

/** Statements as one script to run as printed (psql, or any client that takes several statements). */
export function sqlScript(statements: readonly string[]): string {
  return statements.map((statement) => `${statement};`).join('\n');
}
