import { sql } from 'kysely';
import { ACTIONS_WITH_REASON, OUTBOX_ACTIONS, type OutboxAction } from './schema/actions-log-ddl.js';
import type { AnyKysely } from './any-kysely.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError } from './errors.js';
import { integerInRange } from './integer-in-range.js';
import { tableNames } from './table-names.js';

/** What one operator action changed, for {@link recordOutboxAction}. */
export interface OutboxActionInput {
  /** Who acted: a person's or a tool's name (the CLI: the OS user, or `--actor`). Not empty, no control characters, at most 200 characters. */
  readonly actor: string;
  readonly action: OutboxAction;
  /** The outbox rows it changed: retired, discarded, revived or enqueued. Default none. */
  readonly ids?: readonly (string | number | bigint)[];
  /** How many of each it changed, e.g. `{ revived: 3 }` or `{ deleted: 120, delivered: 100, closed: 20 }`. Default none. */
  readonly counts?: Readonly<Record<string, number>>;
  /** Why. Required by `retire` and `discard` (the reason they keep on the rows); optional for the others. */
  readonly reason?: string;
}

/** One row of an outbox's actions log. */
export interface OutboxActionEntry {
  /** The log row's id (a bigint, as a string): newer rows have larger ids. */
  readonly id: string;
  /** The start of the transaction that recorded it (`now()`). */
  readonly at: Date;
  /** The outbox table it changed (`spec.table`); the log is that table's own (`<table>_actions`). */
  readonly table: string;
  readonly actor: string;
  readonly action: OutboxAction;
  readonly ids: readonly string[];
  readonly counts: Readonly<Record<string, number>>;
  readonly reason: string | null;
}

const MAX_ACTOR = 200;
// Control characters (C0, DEL, C1): a name with one could forge a line of a log or a terminal.
const CONTROL = /\p{Cc}/u;
const ID = /^[1-9][0-9]{0,18}$/;
const COUNT_NAME = /^[a-z][A-Za-z0-9_]{0,62}$/;

function checkedIds(ids: unknown): string[] {
  if (ids === undefined) return [];
  if (!Array.isArray(ids)) throw new OutboxConfigError('ids', `expected an array of outbox ids, got ${typeof ids}`);
  return ids.map((id, i) => {
    const text = typeof id === 'string' || typeof id === 'number' || typeof id === 'bigint' ? String(id) : '';
    if (!ID.test(text) || BigInt(text) > 2n ** 63n - 1n)
      throw new OutboxConfigError(
        `ids[${i}]`,
        `expected an outbox id (a positive bigint), got ${JSON.stringify(String(id))}`,
      );
    return text;
  });
}

function checkedCounts(counts: unknown): Record<string, number> {
  if (counts === undefined) return {};
  if (counts === null || typeof counts !== 'object' || Array.isArray(counts))
    throw new OutboxConfigError('counts', 'expected an object of counts, e.g. { revived: 3 }');
  return Object.fromEntries(
    Object.entries(counts).map(([name, value]) => {
      if (!COUNT_NAME.test(name))
        throw new OutboxConfigError(
          'counts',
          `expected names like "revived" ([a-z][A-Za-z0-9_]*), got ${JSON.stringify(name)}`,
        );
      return [name, integerInRange(`counts.${name}`, value, { min: 0 })];
    }),
  );
}

/** An {@link OutboxActionInput} as it is recorded: actor and reason trimmed, ids as strings. */
export interface ValidOutboxAction {
  readonly actor: string;
  readonly action: OutboxAction;
  readonly ids: readonly string[];
  readonly counts: Readonly<Record<string, number>>;
  readonly reason: string | undefined;
}

/** The actor, action and reason of `input`, checked and trimmed; what to fix is an {@link OutboxConfigError}. */
function checkedHeader(input: Pick<OutboxActionInput, 'actor' | 'action' | 'reason'>) {
  if (!input || typeof input !== 'object') throw new OutboxConfigError('action', 'expected { actor, action }');
  const { actor, action, reason } = input;
  if (typeof actor !== 'string' || actor.trim() === '' || actor.length > MAX_ACTOR || CONTROL.test(actor)) {
    throw new OutboxConfigError(
      'actor',
      `expected who acted: a name of 1 to ${MAX_ACTOR} characters without control characters, got ${JSON.stringify(actor)}`,
    );
  }
  if (!(OUTBOX_ACTIONS as readonly unknown[]).includes(action))
    throw new OutboxConfigError(
      'action',
      `expected one of ${OUTBOX_ACTIONS.join(', ')}, got ${JSON.stringify(action)}`,
    );
  const needsReason = ACTIONS_WITH_REASON.includes(action);
  if (reason === undefined && !needsReason) return { actor: actor.trim(), action, reason: undefined };
  if (typeof reason !== 'string' || reason.trim() === '') {
    throw new OutboxConfigError(
      'reason',
      needsReason
        ? `${action}: give a reason (a non-empty string): it is kept as evidence`
        : `${action}: a reason, when given, is a non-empty string`,
    );
  }
  return { actor: actor.trim(), action, reason: reason.trim() };
}

/**
 * Checks an action before anything is done, as {@link recordOutboxAction} will: an empty actor or
 * one with control characters, an unknown action, a missing reason where the action takes one
 * (retire, discard), malformed ids or counts are an {@link OutboxConfigError} naming the field.
 * Returns the input as it would be recorded (actor and reason trimmed, ids as strings).
 * @example
 * validateOutboxAction({ actor: operator, action: 'discard', reason }); // before closing anything
 */
export function validateOutboxAction(input: OutboxActionInput): ValidOutboxAction {
  return { ...checkedHeader(input), ids: checkedIds(input.ids), counts: checkedCounts(input.counts) };
}

interface EntryRow {
  id: string;
  at: Date;
  actor: string;
  action: OutboxAction;
  ids: string[];
  counts: Record<string, number | string>;
  reason: string | null;
}

const entryOf = (spec: OutboxSpec, row: EntryRow): OutboxActionEntry => ({
  id: String(row.id),
  at: row.at,
  table: spec.table,
  actor: row.actor,
  action: row.action,
  ids: row.ids.map(String),
  counts: Object.fromEntries(Object.entries(row.counts).map(([name, n]) => [name, Number(n)])),
  reason: row.reason,
});

const RETURNING = sql.raw('id::text, at, actor, action, ids, counts, reason');

/**
 * Records one operator action in the actions log of `spec`'s table (docs/ledger.md, "The actions
 * log"), in `db` — pass the transaction that made the change, so that neither commits without the
 * other. Checked first ({@link validateOutboxAction}): a bad actor, action, reason, id or count is
 * an {@link OutboxConfigError} and nothing is written. The CLI records each change it makes; a
 * console that changes the ledger should too.
 * @example
 * await db.transaction().execute(async (trx) => {
 *   const ids = await closeByHand(trx); // the change
 *   await recordOutboxAction(trx, vpcOutbox, { actor: 'alice', action: 'discard', ids, counts: { discarded: ids.length }, reason: 'project deleted' });
 * });
 */
export async function recordOutboxAction(
  db: AnyKysely,
  spec: OutboxSpec,
  input: OutboxActionInput,
): Promise<OutboxActionEntry> {
  const action = validateOutboxAction(input);
  const result = await sql<EntryRow>`
    insert into ${sql.raw(tableNames(spec).actionsTable)} (actor, action, ids, counts, reason)
    values (${action.actor}, ${action.action}, ${JSON.stringify(action.ids)}::jsonb, ${JSON.stringify(action.counts)}::jsonb, ${action.reason ?? null})
    returning ${RETURNING}`.execute(db);
  return entryOf(spec, result.rows[0] as EntryRow);
}

/** What one transaction of an action changed, for {@link OutboxActionTrace.record}. */
export interface OutboxActionChange {
  readonly ids?: readonly (string | number | bigint)[];
  readonly counts?: Readonly<Record<string, number>>;
}

/**
 * One action that commits in several transactions (a redrive's passes, a repair's batches, a
 * compaction's batches) as one row of the actions log: each transaction records its own change
 * in itself, the first inserting the row, the later ones appending their ids and adding their
 * counts. Made by {@link traceOutboxAction}; one caller at a time.
 */
export interface OutboxActionTrace {
  readonly spec: OutboxSpec;
  readonly actor: string;
  readonly action: OutboxAction;
  readonly reason: string | undefined;
  /** The log row's id once a change was recorded; undefined before. */
  readonly entryId: string | undefined;
  /** Adds `change` to the action's row, in `db` (the transaction that made the change); returns the row as it now is. */
  record(db: AnyKysely, change: OutboxActionChange): Promise<OutboxActionEntry>;
}

/**
 * An action of `actor` on `spec`'s table, checked now — before anything is changed — and recorded
 * by the transactions that change something (see {@link OutboxActionTrace}). The reconciler's
 * `redrivePoisoned`, `retire`, `discardPoisoned`, `compact` and `repairOutbox` take one as `record`.
 * @example
 * const record = traceOutboxAction(vpcOutbox, { actor: 'alice', action: 'redrive' });
 * await reconciler.redrivePoisoned({ record });
 * await reconciler.redrivePoisoned({ record }); // the same row: ids appended, counts added
 */
export function traceOutboxAction(
  spec: OutboxSpec,
  input: Pick<OutboxActionInput, 'actor' | 'action' | 'reason'>,
): OutboxActionTrace {
  if (!spec || typeof spec.partitionColumn !== 'string')
    throw new OutboxConfigError('spec', 'expected the OutboxSpec from defineOutbox()');
  const header = checkedHeader(input);
  let entryId: string | undefined;
  return {
    spec,
    ...header,
    get entryId() {
      return entryId;
    },
    async record(db, change) {
      const ids = checkedIds(change?.ids);
      const counts = checkedCounts(change?.counts);
      if (entryId !== undefined) {
        const log = sql.raw(tableNames(spec).actionsTable);
        const c = sql`${JSON.stringify(counts)}::jsonb`;
        // Absent when the transaction that inserted it rolled back: its change went with it, and this one starts a new row.
        const amended = await sql<EntryRow>`
          update ${log} a set ids = a.ids || ${JSON.stringify(ids)}::jsonb,
            counts = (select coalesce(jsonb_object_agg(k.name, coalesce((a.counts ->> k.name)::bigint, 0) + coalesce((${c} ->> k.name)::bigint, 0)), '{}')
                      from (select jsonb_object_keys(a.counts) union select jsonb_object_keys(${c})) k(name))
          where a.id = ${entryId} and a.action = ${header.action}
          returning ${RETURNING}`.execute(db);
        if (amended.rows[0]) return entryOf(spec, amended.rows[0]);
      }
      const entry = await recordOutboxAction(db, spec, { ...header, ids, counts });
      entryId = entry.id;
      return entry;
    },
  };
}

/** What {@link readOutboxActions} takes. */
export interface ReadOutboxActionsOptions {
  /** Most rows returned. Default 50, at most 10000. */
  readonly limit?: number;
}

/**
 * The actions log of `spec`'s table, newest first.
 * @example
 * for (const a of await readOutboxActions(db, vpcOutbox, { limit: 10 })) console.log(a.at, a.actor, a.action, a.counts);
 */
export async function readOutboxActions(
  db: AnyKysely,
  spec: OutboxSpec,
  options: ReadOutboxActionsOptions = {},
): Promise<OutboxActionEntry[]> {
  const limit = integerInRange('limit', options.limit, { fallback: 50, min: 1, max: 10_000 });
  const result = await sql<EntryRow>`
    select ${RETURNING} from ${sql.raw(tableNames(spec).actionsTable)} order by id desc limit ${limit}`.execute(db);
  return result.rows.map((row) => entryOf(spec, row));
}
