import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { AnyKysely } from './any-kysely.js';
import {
  decodeOutboxToken,
  encodeOutboxToken,
  tokenOutboxSpec,
  type OutboxTokenContents,
  type TokenOutbox,
} from './consistency-token.js';
import type { OutboxSpec } from './define-outbox.js';
import { OutboxConfigError, OutboxTokenError } from './errors.js';
import { integerInRange, MAX_TIMER_MS } from './integer-in-range.js';
import { countedMaxAttemptsSql } from './max-attempts.js';
import { coveringSuccessor, rowStates } from './protocol/row-states.js';
import { SQLSTATE, sqlState } from './protocol/sqlstate.js';
import { tableNames } from './table-names.js';

/** What became of one intent of a token. */
export type IntentOutcome = { readonly table: string; readonly id: string } & (
  | { readonly status: 'delivered'; readonly deliveredAt: Date }
  /** Poisoned, and a later delivered intent of its partition covers it: it will never be delivered. */
  | { readonly status: 'superseded' }
  /**
   * Out of transient attempts (`exhausted`) or refused by OpenFGA for good (`refused`, with its
   * `code`): it waits for the reconciler or a person. `lastError` is the sink's last message.
   */
  | {
      readonly status: 'poisoned';
      readonly cause: 'exhausted' | 'refused';
      readonly code: string | null;
      readonly lastError: string | null;
    }
  /** Deliverable, but behind a poisoned intent of its partition (`blockedBy`): nothing moves until that one does. */
  | { readonly status: 'blocked'; readonly blockedBy: string }
  /** Closed by a person (`outbox retire` / `discard`), with the reason they gave. */
  | { readonly status: 'retired'; readonly reason: string | null; readonly closedAs: 'retired' | 'discarded' | null }
  /** Still on its way at the timeout. */
  | { readonly status: 'pending' }
);

/** What {@link awaitDelivered} found. */
export interface AwaitDeliveredResult {
  /** Every intent reached an outcome the drainer alone will not change (nothing is `pending`). */
  readonly settled: boolean;
  /** Every intent is delivered. */
  readonly delivered: boolean;
  /** One per intent of the token, in the token's order. */
  readonly intents: readonly IntentOutcome[];
  /**
   * Milliseconds since the newest of the deliveries, by the database's clock (no skew between
   * hosts); undefined when none is delivered. A reader compares it with OpenFGA's check-cache TTL.
   */
  readonly newestDeliveryAgeMs: number | undefined;
}

/** Options of {@link awaitDelivered}. */
export interface AwaitDeliveredOptions {
  /** How long to wait for pending intents. 0: look once. Required: a wait is always bounded. */
  readonly timeoutMs: number;
  /**
   * Specs of the token's outboxes, where one has a coverage rule (`supersededCoverageSql`, the
   * tuple outbox's): without it a poisoned intent with any later delivery counts as superseded.
   */
  readonly outboxes?: readonly OutboxSpec[];
  /** Stops the wait early (the request was aborted); the answer then says what was seen. */
  readonly signal?: AbortSignal;
}

interface Identity {
  readonly database: string;
  readonly oids: readonly (number | null)[];
}

/** The database's identity as a token names it: the cluster's system identifier and the database's name. */
const DATABASE_IDENTITY = sql.raw<string>(
  "(select system_identifier from pg_catalog.pg_control_system())::text || '/' || current_database()",
);

/** The database's identity and the oids of `specs`' tables: one round trip, in `db`'s transaction if it is one. */
async function identity(db: AnyKysely, specs: readonly OutboxSpec[]): Promise<Identity> {
  const quoted = specs.map((spec) => tableNames(spec).table);
  const result = await sql<{ database: string; oids: (string | null)[] }>`
    select ${DATABASE_IDENTITY} as database,
           array(select to_regclass(name)::oid from unnest(${quoted}::text[]) with ordinality as u(name, n) order by n)::text[] as oids`.execute(
    db,
  );
  const row = result.rows[0] as { database: string; oids: (string | null)[] };
  return { database: row.database, oids: row.oids.map((oid) => (oid === null ? null : Number(oid))) };
}

/**
 * The token of intents `ids` (what `enqueue`/`enqueueMany` returned) of `spec`'s outbox: pass it to
 * the caller (the `Outbox-Token` header), who waits on it with {@link awaitDelivered} in any
 * process. Call it in the enqueueing transaction or after its commit; one round trip.
 * @example
 * const ids = await enqueueMany(trx, vpcOutbox, intents);
 * const token = await outboxToken(trx, vpcOutbox, ids);
 */
export async function outboxToken(db: AnyKysely, spec: OutboxSpec, ids: readonly string[]): Promise<string> {
  if (
    !Array.isArray(ids) ||
    ids.length === 0 ||
    ids.some((id) => typeof id !== 'string' || !/^[1-9][0-9]*$/.test(id))
  ) {
    throw new OutboxConfigError(
      'ids',
      `expected the ids enqueue returned (decimal strings), got ${JSON.stringify(ids)}`,
    );
  }
  const { database, oids } = await identity(db, [spec]);
  const tableOid = oids[0];
  if (tableOid === null || tableOid === undefined) {
    throw new OutboxConfigError('spec', `${spec.table} does not exist in this database: run its migration`);
  }
  return encodeOutboxToken({
    version: 1,
    database,
    outboxes: [{ table: spec.table, tableOid, partitionColumn: spec.partitionColumn, ids: [...new Set(ids)] }],
  });
}

interface OutcomeRow {
  id: string;
  sent_at: Date | null;
  retired_at: Date | null;
  retired_reason: string | null;
  closed_as: 'retired' | 'discarded' | null;
  poison_cause: 'exhausted' | 'refused' | null;
  poison_code: string | null;
  last_error: string | null;
  exhausted: boolean;
  superseded: boolean;
  blocked_by: string | null;
  age_ms: number | null;
}

/** One outbox's rows of a read, and what it found the database and the table to be (the token's identity check). */
interface OutboxRead {
  readonly database: string;
  readonly tableOid: number | null;
  readonly rows: readonly OutcomeRow[];
}

/**
 * Each of `ids`' rows as an outcome, with its delivery's age by the database's clock, and the
 * database's identity and the table's oid in the same statement: a first look that finds its rows
 * costs one round trip.
 */
async function readOutcomes(db: AnyKysely, spec: OutboxSpec, ids: readonly string[]): Promise<OutboxRead> {
  const names = tableNames(spec);
  const table = sql.raw(names.table);
  const key = sql.raw(names.partition);
  const t = rowStates('t');
  const p = rowStates('p');
  const max = countedMaxAttemptsSql(spec);
  // The poisoned test runs only on pending rows; the blocked probe walks the partition-head index.
  const result = await sql<OutcomeRow & { database: string; table_oid: string }>`
    select t.id::text as id, t.sent_at, t.retired_at, t.retired_reason, t.closed_as,
           t.poison_cause, t.poison_code, t.last_error,
           (${t.pending} and ${t.exhausted(max)}) as exhausted,
           (${t.pending} and ${t.exhausted(max)} and exists (select from ${table} s where ${coveringSuccessor(spec)})) as superseded,
           case when ${t.pending} and not ${t.exhausted(max)} then
             (select min(p.id)::text from ${table} p
               where p.${key} = t.${key} and p.id < t.id and ${p.pending} and ${p.exhausted(max)})
           end as blocked_by,
           (extract(epoch from (clock_timestamp() - t.sent_at)) * 1000)::float8 as age_ms,
           ${DATABASE_IDENTITY} as database, ${names.table}::regclass::oid::text as table_oid
    from ${table} t where t.id = any(${ids}::bigint[])`.execute(db);
  const first = result.rows[0];
  // No row found (compacted, or another database's ids): the identity on its own, to say which.
  const found = first ? { database: first.database, oids: [Number(first.table_oid)] } : await identity(db, [spec]);
  return { database: found.database, tableOid: found.oids[0] ?? null, rows: result.rows };
}

/** One outbox's reads: the next one (every caller's ids, gathered until it starts), and the last one begun. */
interface SharedRead {
  next: { ids: Set<string>; read: Promise<OutboxRead & { byId: Map<string, OutcomeRow> }> } | undefined;
  last: Promise<unknown> | undefined;
}

/** Per connection (or transaction) and outbox: the waits of a process read side by side as one query. */
const sharedReads = new WeakMap<AnyKysely, Map<string, SharedRead>>();

/**
 * `ids`' rows, read together with the other waits of this process on the same outbox: one read in
 * flight per outbox, the ids asked meanwhile read by the next one. Many waits polling side by side
 * would otherwise each send their own query every few milliseconds.
 */
async function readOutcomesShared(db: AnyKysely, spec: OutboxSpec, ids: readonly string[]): Promise<OutboxRead> {
  let perDb = sharedReads.get(db);
  if (!perDb) sharedReads.set(db, (perDb = new Map()));
  const key = [spec.table, spec.partitionColumn, spec.maxAttempts, spec.supersededCoverageSql ?? ''].join('\0');
  let state = perDb.get(key);
  if (!state) perDb.set(key, (state = { next: undefined, last: undefined }));
  let next = state.next;
  if (!next) {
    const shared = state;
    const wanted = new Set<string>();
    const read = (shared.last ?? Promise.resolve())
      .catch(() => undefined)
      .then(async () => {
        shared.next = undefined; // ids asked from here on go to the read after this one
        const found = await readOutcomes(db, spec, [...wanted]);
        return { ...found, byId: new Map(found.rows.map((row) => [row.id, row])) };
      });
    next = shared.next = { ids: wanted, read };
    shared.last = read;
  }
  for (const id of ids) next.ids.add(id);
  const { database, tableOid, byId } = await next.read;
  const rows = ids.flatMap((id) => {
    const row = byId.get(id);
    return row ? [row] : [];
  });
  return { database, tableOid, rows };
}

function outcomeOf(table: string, row: OutcomeRow): IntentOutcome {
  const { id } = row;
  if (row.sent_at) return { table, id, status: 'delivered', deliveredAt: row.sent_at };
  if (row.retired_at) return { table, id, status: 'retired', reason: row.retired_reason, closedAs: row.closed_as };
  if (row.superseded) return { table, id, status: 'superseded' };
  if (row.exhausted) {
    // NULL on rows poisoned before the ledger's step added the column: read as exhausted (docs/ledger.md).
    const cause = row.poison_cause ?? 'exhausted';
    return { table, id, status: 'poisoned', cause, code: row.poison_code, lastError: row.last_error };
  }
  if (row.blocked_by) return { table, id, status: 'blocked', blockedBy: row.blocked_by };
  return { table, id, status: 'pending' };
}

/** The spec `outbox` is read with: the caller's, checked against the token, else one from the token. */
function specFor(outbox: TokenOutbox, given: readonly OutboxSpec[]): OutboxSpec {
  const spec = given.find((s) => s.table === outbox.table);
  if (!spec) return tokenOutboxSpec(outbox);
  if (spec.partitionColumn !== outbox.partitionColumn) {
    throw new OutboxTokenError(
      'other-outbox',
      `the token's ${outbox.table} is partitioned by ${outbox.partitionColumn}, the spec given for it by ${spec.partitionColumn}`,
    );
  }
  return spec;
}

/** Why `contents` cannot be read in the database `found` describes, if it cannot: another database, or a table it no longer has as it was. */
function identityError(contents: OutboxTokenContents, found: Identity): OutboxTokenError | undefined {
  if (found.database !== contents.database) {
    return new OutboxTokenError(
      'other-database',
      `the token was minted in database ${contents.database}, this is ${found.database}: ask the service that wrote it, or point at its database`,
    );
  }
  for (const [i, outbox] of contents.outboxes.entries()) {
    const oid = found.oids[i];
    if (oid === null) {
      return new OutboxTokenError('other-outbox', `the token names ${outbox.table}, which this database does not have`);
    }
    if (oid !== outbox.tableOid) {
      return new OutboxTokenError(
        'other-outbox',
        `the token names ${outbox.table} as table ${outbox.tableOid}; it is now table ${oid} (dropped and created again since)`,
      );
    }
  }
  return undefined;
}

/**
 * The pauses between re-reads: close together over the first tens of milliseconds, where a
 * delivery lands (a write-through's, or a LISTEN-woken drainer's), then every 25 ms.
 */
const POLL_MS = [1, 2, 2, 3, 3, 5, 5, 8, 8, 13, 13, 20, 25];

function compacted(table: string, open: readonly string[], rows: readonly OutcomeRow[]): OutboxTokenError {
  const found = new Set(rows.map((r) => r.id));
  const gone = open.filter((id) => !found.has(id)).map((id) => `${table}#${id}`);
  const one = gone.length === 1;
  return new OutboxTokenError(
    'compacted',
    `${gone.join(', ')} ${one ? 'is' : 'are'} not in the table: compaction deleted ${one ? 'it' : 'them'} ` +
      '(delivered longer ago than the retention: treat as delivered), or the transaction that wrote the token rolled back',
    gone,
  );
}

/**
 * Waits, at most `timeoutMs`, until every intent of `token` has an outcome the drainer alone will
 * not change, and says what each one is (delivered with when, superseded, poisoned with its cause,
 * blocked behind a poisoned one, retired, or still pending at the timeout). Runs in any process
 * with a connection to the outbox's database: no drainer is needed there. Reads by primary key
 * every few milliseconds, in one query with the other waits of this process on the same outbox;
 * the first read checks the token's database and tables in the same statement.
 * An {@link OutboxTokenError} says why a token cannot be waited on.
 * @example
 * const { delivered } = await awaitDelivered(db, request.headers['outbox-token'], { timeoutMs: 2_000 });
 */
export async function awaitDelivered(
  db: AnyKysely,
  token: string,
  options: AwaitDeliveredOptions,
): Promise<AwaitDeliveredResult> {
  const timeoutMs = integerInRange('timeoutMs', options?.timeoutMs, { min: 0, max: MAX_TIMER_MS });
  const contents = decodeOutboxToken(token);
  const specs = contents.outboxes.map((outbox) => specFor(outbox, options.outboxes ?? []));
  const deadline = Date.now() + timeoutMs;
  const outcomes = new Map<string, IntentOutcome>();
  const ages: number[] = [];
  /** Reads every outbox's intents not yet delivered, the outboxes side by side; the first read checks the token's identity too. */
  const readOpen = async (first: boolean) => {
    const reads = await Promise.allSettled(
      contents.outboxes.map(async (outbox, i) => {
        const open = outbox.ids.filter((id) => outcomes.get(`${outbox.table}#${id}`)?.status !== 'delivered');
        return open.length === 0
          ? undefined
          : { outbox, open, ...(await readOutcomesShared(db, specs[i] as OutboxSpec, open)) };
      }),
    );
    if (first) {
      // A table the token names and this database lacks fails its read: the identity's own query says
      // which error it is. Identity errors win over the others, as they say why nothing else applies.
      if (reads.some((read) => read.status === 'rejected' && sqlState(read.reason) === SQLSTATE.UNDEFINED_TABLE)) {
        const error = identityError(contents, await identity(db, specs));
        if (error) throw error;
      }
      const fulfilled = reads.flatMap((read) => (read.status === 'fulfilled' && read.value ? [read.value] : []));
      if (fulfilled.length === reads.length) {
        const found = { database: fulfilled[0]?.database ?? '', oids: fulfilled.map((read) => read.tableOid) };
        const error = identityError(contents, found);
        if (error) throw error;
      }
    }
    for (const read of reads) {
      if (read.status === 'rejected') throw read.reason;
      if (!read.value) continue;
      const { outbox, open, rows } = read.value;
      if (first && rows.length < open.length) throw compacted(outbox.table, open, rows);
      for (const row of rows) {
        outcomes.set(`${outbox.table}#${row.id}`, outcomeOf(outbox.table, row));
        if (row.sent_at && row.age_ms !== null) ages.push(row.age_ms);
      }
    }
  };
  await readOpen(true);
  for (let poll = 0; ; poll += 1) {
    if (poll > 0) await readOpen(false);
    const all = contents.outboxes.flatMap((o) => o.ids.map((id) => outcomes.get(`${o.table}#${id}`) as IntentOutcome));
    const settled = all.every((o) => o.status !== 'pending');
    const remaining = deadline - Date.now();
    if (settled || remaining <= 0 || options.signal?.aborted) {
      return {
        settled,
        delivered: all.every((o) => o.status === 'delivered'),
        intents: all,
        // Ages were read at different polls: the newest delivery is the smallest age, as last read.
        newestDeliveryAgeMs: ages.length === 0 ? undefined : Math.min(...ages),
      };
    }
    const pause = POLL_MS[Math.min(poll, POLL_MS.length - 1)] as number;
    await sleep(Math.min(pause, remaining), undefined, { signal: options.signal }).catch(() => undefined);
  }
}
