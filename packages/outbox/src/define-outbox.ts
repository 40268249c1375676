import { OUTBOX_COLUMN_NAMES } from './columns.js';
import { OutboxConfigError } from './errors.js';
import { integerInRange } from './integer-in-range.js';
import { balancedSql } from './protocol/balanced-sql.js';

/** The partition column of a register-outbox: one row per FGA object, keyed on its global id. */
export const REGISTER_OUTBOX_PARTITION = 'resource_id';
/** The partition column of the tuple outbox (iam): the grant `(user, object)`. */
export const TUPLE_OUTBOX_PARTITION = 'tuple_key';

/** What {@link defineOutbox} takes. */
export interface OutboxSpecInput {
  /** `<schema>.<table>`, both lower-case SQL identifiers. Required. */
  readonly table: string;
  /**
   * The column intents are ordered by, e.g. {@link REGISTER_OUTBOX_PARTITION}. Required, no default:
   * an unset key would read as "no ordering" and silently restore the over-grant ordering prevents.
   */
  readonly partitionColumn: string;
  /** LISTEN/NOTIFY channel the insert trigger notifies. Default `<schema>_<table>`: unique per table, so drainers of other tables are not woken. */
  readonly channel?: string;
  /**
   * Attempts before an intent is poisoned (left for the reconciler). Default 10: with the drainer's
   * default backoff, at most ~8.5 minutes (~4.3 on average) after the first attempt, which rides out
   * an OpenFGA restart. The table records it: change it with `setMaxAttempts`.
   */
  readonly maxAttempts?: number;
  /**
   * For set-valued rows: SQL true when the delivered successor `s` re-determined all the poisoned row
   * `t` named, e.g. `(s.payload->'relations') @> (t.payload->'relations')`. Default unset: any
   * delivered successor covers, which is sound while one row means one thing.
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
// Leaves room for the derived index, trigger and function names within Postgres' 63 bytes.
const MAX_TABLE_NAME = 40;
const MAX_IDENTIFIER = 63;

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
 * Builds the spec of one outbox table, validated once: a wrong field fails at start with an
 * {@link OutboxConfigError} naming it.
 * @example
 * const vpcOutbox = defineOutbox({ table: 'vpc.fga_register_outbox', partitionColumn: REGISTER_OUTBOX_PARTITION });
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
    // Postgres reserves the prefix for its own schemas: the migration would fail.
    throw new OutboxConfigError(
      'table',
      `the schema: "${schema}" starts with pg_, which Postgres reserves for system schemas`,
    );
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
  if ((OUTBOX_COLUMN_NAMES as readonly string[]).includes(partitionColumn)) {
    throw new OutboxConfigError(
      'partitionColumn',
      `"${partitionColumn}" is one of the outbox table's own columns (${OUTBOX_COLUMN_NAMES.join(', ')}): name the partition column something else`,
    );
  }
  const channel = identifier('channel', input.channel ?? `${schema}_${tableName}`);
  const maxAttempts = integerInRange('maxAttempts', input.maxAttempts, { fallback: 10, min: 1, max: 1_000 });
  const coverage = input.supersededCoverageSql;
  if (coverage !== undefined) {
    if (typeof coverage !== 'string' || coverage.trim() === '') {
      throw new OutboxConfigError(
        'supersededCoverageSql',
        'expected a non-empty SQL boolean expression over s and t, or leave it unset',
      );
    }
    if (coverage.includes(';') || coverage.includes('--') || coverage.includes('/*')) {
      throw new OutboxConfigError('supersededCoverageSql', 'must be one expression: no ";" and no comments');
    }
    if (!balancedSql(coverage)) {
      throw new OutboxConfigError(
        'supersededCoverageSql',
        'must be one expression: its parentheses or quotes do not balance',
      );
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
