import { OutboxConfigError } from './errors.js';
import { integerInRange } from './integer-in-range.js';

/** The partition column of a register-outbox: one row per FGA object, keyed on its global id. */
export const REGISTER_OUTBOX_PARTITION = 'resource_id';
/** The partition column of the tuple outbox (iam): the grant `(user, object)`. */
export const TUPLE_OUTBOX_PARTITION = 'tuple_key';

/** What `defineOutbox` takes. */
export interface OutboxSpecInput {
  /** `<schema>.<table>`, both lower-case SQL identifiers. Required. */
  readonly table: string;
  /**
   * The ordering key: intents of one partition are delivered in id order. Required, no default:
   * an unset key would read as "no ordering" and silently restore the over-grant the ordering
   * prevents. Use {@link REGISTER_OUTBOX_PARTITION} or {@link TUPLE_OUTBOX_PARTITION}.
   */
  readonly partitionColumn: string;
  /**
   * LISTEN/NOTIFY channel the insert trigger notifies. Default `<schema>_<table>`: unique per table,
   * so drainers of other tables are not woken.
   */
  readonly channel?: string;
  /**
   * Attempts before an intent is poisoned (skipped, left for the reconciler). Default 10: with the
   * drainer's default backoff an intent that keeps failing is poisoned at most ~8.5 minutes (~4.3 on
   * average) after its first attempt, long enough to ride out an OpenFGA restart, and the reconciler
   * revives it on its timer. The table records
   * the value it was created with: to change it later, run `setMaxAttempts` in a migration
   * (`verifyOutboxTable` refuses a spec whose value differs from the table's).
   */
  readonly maxAttempts?: number;
  /**
   * For set-valued rows: SQL that is true when the delivered successor `s` re-determined everything
   * the poisoned row `t` named, e.g. `(s.payload->'relations') @> (t.payload->'relations')` (the
   * parentheses matter: `->` and `@>` bind equally, left to right). Coverage only, never direction
   * (the reconciler adds `s.id > t.id`). Unset: any delivered successor covers.
   */
  readonly supersededCoverageSql?: string;
}

/** A validated, frozen outbox spec: the one object writer, drainer, reconciler and CLI share. */
export interface OutboxSpec {
  readonly table: string;
  readonly schema: string;
  readonly tableName: string;
  readonly partitionColumn: string;
  readonly channel: string;
  readonly maxAttempts: number;
  readonly supersededCoverageSql: string | undefined;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]*$/;
/** Leaves room for the derived index, trigger and function names within Postgres' 63 bytes. */
const MAX_TABLE_NAME = 40;
const MAX_IDENTIFIER = 63;
/** The columns every outbox table has (DESIGN §4, plus the drainer's head flag): no partition column may take one's name. */
const CONTRACT_COLUMNS = ['id', 'payload', 'created_at', 'next_attempt_at', 'attempt_count', 'last_error', 'sent_at', 'retired_at', 'retired_reason', 'is_head'] as const;

/** `part` names which piece of the field is at fault (the schema or table name of `table`). */
function identifier(field: string, value: unknown, max = MAX_IDENTIFIER, part = ''): string {
  const what = part ? `${part}: ` : '';
  if (typeof value !== 'string' || value.length === 0) {
    throw new OutboxConfigError(field, `${what}expected a non-empty SQL identifier, got ${JSON.stringify(value)}`);
  }
  if (!IDENTIFIER.test(value) || value.length > max) {
    throw new OutboxConfigError(
      field,
      `${what}expected a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most ${max} characters), got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/**
 * True when every ')' outside quotes closes an earlier '(' and none stays open, and every quote
 * ('…' or "…") closes: a parenthesis inside a string literal (`'('`) counts as text, as SQL reads
 * it. Counting it would let `'(' is not null) or (true or ')' is null` pass — balanced as text,
 * yet its bare `)` closes the group it is spliced into and the rest widens the condition. The same
 * rule as the reconciler's start check.
 */
function balanced(text: string): boolean {
  let depth = 0;
  let quote: string | undefined;
  for (const c of text) {
    if (quote) {
      if (c === quote) quote = undefined; // a doubled quote reopens on the next character
    } else if (c === "'" || c === '"') quote = c;
    else if (c === '(') depth += 1;
    else if (c === ')' && --depth < 0) return false;
  }
  return depth === 0 && quote === undefined;
}

/**
 * Builds the spec of one outbox table. Everything is validated here, once, so a wrong table,
 * partition column or channel fails at start with an {@link OutboxConfigError} naming the field.
 *
 * @example
 * const vpcOutbox = defineOutbox({
 *   table: 'vpc.fga_register_outbox',
 *   partitionColumn: REGISTER_OUTBOX_PARTITION,
 *   channel: 'vpc_fga_register_outbox',
 * });
 */
export function defineOutbox(input: OutboxSpecInput): OutboxSpec {
  if (input === null || typeof input !== 'object') {
    throw new OutboxConfigError('spec', 'expected an object with table and partitionColumn');
  }
  if (typeof input.table !== 'string' || input.table.split('.').length !== 2) {
    throw new OutboxConfigError('table', `expected "<schema>.<table>", got ${JSON.stringify(input.table)}`);
  }
  const [schemaPart, tablePart] = input.table.split('.') as [string, string];
  const schema = identifier('table', schemaPart, MAX_IDENTIFIER, 'the schema');
  if (schema.startsWith('pg_')) {
    // Postgres refuses to create such a schema ("the prefix pg_ is reserved for system schemas"),
    // and those that exist are its own (pg_catalog, pg_toast, pg_temp…).
    throw new OutboxConfigError('table', `the schema: "${schema}" starts with pg_, which Postgres reserves for system schemas`);
  }
  const tableName = identifier('table', tablePart, MAX_TABLE_NAME, 'the table name');
  if (input.partitionColumn === undefined || input.partitionColumn === null || input.partitionColumn === '') {
    throw new OutboxConfigError(
      'partitionColumn',
      `is required and has no default: name the column intents are ordered by (` +
        `'${REGISTER_OUTBOX_PARTITION}' for a register-outbox, '${TUPLE_OUTBOX_PARTITION}' for the tuple outbox)`,
    );
  }
  const partitionColumn = identifier('partitionColumn', input.partitionColumn);
  if ((CONTRACT_COLUMNS as readonly string[]).includes(partitionColumn)) {
    throw new OutboxConfigError('partitionColumn', `"${partitionColumn}" is one of the outbox table's own columns (${CONTRACT_COLUMNS.join(', ')}): name the partition column something else`);
  }
  const channel = identifier('channel', input.channel ?? `${schema}_${tableName}`);
  const maxAttempts = integerInRange('maxAttempts', input.maxAttempts ?? 10, 1, 1_000);
  const coverage = input.supersededCoverageSql;
  if (coverage !== undefined) {
    if (typeof coverage !== 'string' || coverage.trim() === '') {
      throw new OutboxConfigError('supersededCoverageSql', 'expected a non-empty SQL boolean expression over s and t, or leave it unset');
    }
    if (coverage.includes(';') || coverage.includes('--') || coverage.includes('/*')) {
      throw new OutboxConfigError('supersededCoverageSql', 'must be one expression: no ";" and no comments');
    }
    // It is spliced in as `and (<coverage>)`: an unbalanced ')' would close that group and let the
    // rest (`true) or (true`) widen the reconciler's condition.
    if (!balanced(coverage)) {
      throw new OutboxConfigError('supersededCoverageSql', 'must be one expression: its parentheses or quotes do not balance');
    }
  }
  return Object.freeze({
    table: `${schema}.${tableName}`,
    schema,
    tableName,
    partitionColumn,
    channel,
    maxAttempts,
    supersededCoverageSql: coverage?.trim(),
  });
}
