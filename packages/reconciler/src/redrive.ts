import { sql, type RawBuilder, type Transaction } from 'kysely';
import type { OutboxSpec, AnyKysely } from '@outbox/outbox';
import { assertRecordedMaxAttempts, compareIds, coveringSuccessor, lockPartitions, partitionLockKey, resetHeads, rowStates, SQLSTATE, sqlState, tableNames } from '@outbox/outbox/protocol';
import type { Logger } from './logger.js';
import { partitionIndexPresent } from './partition-index.js';

/**
 * One poisoned intent a pass (or `retire`) looked at.
 *
 * @example
 * for (const { id, partitionKey, lastError } of result.superseded) console.warn(id, partitionKey, lastError);
 */
export interface RedrivenIntent {
  /** The outbox row id (a bigint, as a string). */
  readonly id: string;
  readonly partitionKey: string;
  /** `last_error` as the pass found it (a revived row's is cleared in the table). */
  readonly lastError: string | null;
}

/**
 * What one `redrivePoisoned()` pass did.
 *
 * @example
 * const { revived, superseded, deferred, skipped } = await reconciler.redrivePoisoned();
 * if (!skipped && superseded.length > 0) alertOps(superseded); // a human decides, then retire()
 */
export interface RedriveResult {
  /** Reset to claimable (`attempt_count = 0`); each is its partition's head if it is the earliest deliverable row. */
  readonly revived: readonly RedrivenIntent[];
  /** Left poisoned: a later row of the partition was delivered (and covers it). Retire these. */
  readonly superseded: readonly RedrivenIntent[];
  /**
   * Left poisoned for now: a pending row of the partition was locked by a drainer while the pass
   * decided, so the pass could not know whether it is being delivered. The next pass retries.
   */
  readonly deferred: readonly RedrivenIntent[];
  /** Another pass (any process) held the reconciler lock of this table; this one did nothing. */
  readonly skipped: boolean;
  /** The candidates filled the batch: more revivable rows may wait for the next pass. */
  readonly more: boolean;
  /**
   * The superseded list filled its batch: more superseded rows may be unreported. Apart from `more`
   * because retiring them is a human's step: a caller that loops while `more` would otherwise spin
   * on superseded rows nobody has retired yet.
   */
  readonly moreSuperseded: boolean;
}

type Db = AnyKysely;

interface PoisonedRow {
  id: string;
  key: string;
  last_error: string | null;
  superseded: boolean;
}

interface Decision extends PoisonedRow {
  poisoned: boolean;
  contended: boolean;
}

const SKIPPED: RedriveResult = Object.freeze({ revived: [], superseded: [], deferred: [], skipped: true, more: false, moreSuperseded: false });
const toIntent = (row: PoisonedRow): RedrivenIntent => ({ id: String(row.id), partitionKey: row.key, lastError: row.last_error });
const distinct = (rows: readonly { key: string }[]) => [...new Set(rows.map((r) => r.key))];

/*
 * The statements of a pass, in the order it runs them. `t` is always the poisoned row and `s` its
 * delivered successor, the aliases the spec's coverage fragment is written against.
 */

/** Advisory-lock key of "the reconciler of this table": one pass at a time across processes. */
export function reconcilerLockKey(spec: OutboxSpec): RawBuilder<bigint> {
  return sql<bigint>`hashtextextended(${`outbox-reconciler:${spec.table}`}, 0)`;
}

/** Step 1: the table's reconciler lock, without waiting (a running pass makes this one redundant). */
export function tryLockReconciler(spec: OutboxSpec) {
  return sql<{ granted: boolean }>`select pg_try_advisory_xact_lock(${reconcilerLockKey(spec)}) as granted`;
}

/** How the delivered-successor check is written: it depends on the indexes the table has. */
export interface SuccessorCheck {
  /** The table has the optional plain `(partition, id)` btree (`partitionIndexPresent`). */
  readonly partitionIndex: boolean;
  /** The partitions the checked rows belong to, when known. */
  readonly keys?: readonly string[];
}

/**
 * `exists` a delivered row after `t` in its partition that covers it (DESIGN §6). Use it only in a
 * WHERE clause (a semi-join): in a select list it becomes a subplan run once per row, a table scan
 * each without the btree.
 *
 * - With the btree: `s.key = t.key and s.id > t.id`, one index probe per row, starting at `t.id`.
 * - Without it, "after" is written `(s.key, s.id) > (t.key, t.id)`: written `s.id > t.id`, the
 *   planner may walk the primary key from `t.id` to the end of the table for every poisoned row (it
 *   expects few of them; with old poisoned rows in a 1M-row table that took minutes). The row
 *   comparison serves no index here, so the check is one hashed scan of the table. `keys` narrows
 *   what that scan keeps to the delivered rows of those partitions; it is written
 *   `(s.key || '') = any(keys)` so that it stays a filter and never becomes an index condition.
 */
export function deliveredSuccessor(spec: OutboxSpec, check: SuccessorCheck): RawBuilder<boolean> {
  const n = tableNames(spec);
  const key = sql.raw(n.partition);
  const after = check.partitionIndex
    ? sql`s.id > t.id`
    : sql`(s.${key}, s.id) > (t.${key}, t.id)${check.keys ? sql` and (s.${key} || '') = any(${[...check.keys]}::text[])` : sql``}`;
  return sql<boolean>`exists (
      select 1 from ${sql.raw(n.table)} s
      where ${coveringSuccessor(spec, after)})`;
}

/**
 * Step 2: the first `batchSize` poisoned rows with no delivered successor (the candidates), and
 * the first `batchSize` with one (reported, never revived) — first meaning the partitions least
 * recently attempted (the `next_attempt_at` of their earliest row), each partition's rows in id order, so
 * rows that fail again after a revival rotate to the back and a cut never takes a partition's later
 * row without its earlier ones. Two lists so that superseded rows nobody
 * has retired yet cannot fill the batch and starve revivable ones. Poisoned rows are found through
 * the partial pending index; the successor check runs once over them (a materialized semi-join),
 * then each list is cut to the batch. Rows are marked with `in (…)`, a hashed lookup: a join to
 * the CTE can be planned as a nested loop over it, quadratic in the poisoned rows.
 */
export function selectPoisoned(spec: OutboxSpec, batchSize: number, check: SuccessorCheck) {
  const n = tableNames(spec);
  const table = sql.raw(n.table);
  const poisoned = rowStates('t').poisoned(spec.maxAttempts);
  return sql<PoisonedRow>`
    with superseded as materialized (
      select t.id from ${table} t where ${poisoned} and ${deliveredSuccessor(spec, check)}
    ), marked as (
      select t.id, t.${sql.raw(n.partition)} as key, t.last_error, t.next_attempt_at, t.id in (select id from superseded) as superseded
      from ${table} t where ${poisoned}
    ), ranked as (
      -- Least recently attempted partition first, by its earliest row (the one a revival makes
      -- head): a revived row that fails for good again keeps the next_attempt_at of its revival,
      -- so its partition goes behind rows not yet retried instead of taking the same slot on every
      -- pass. Within a partition, id order: where the batch cuts a partition, it keeps its
      -- earliest rows. Cutting by the rows' own next_attempt_at could revive a later row and leave
      -- an earlier one poisoned; the later one is then delivered first and parks the earlier one
      -- as superseded, so it is never delivered at all.
      select *, row_number() over (partition by superseded order by since, key, id) as rank
      from (select *, first_value(next_attempt_at) over (partition by superseded, key order by id) as since from marked) m
    )
    select id, key, last_error, superseded from ranked where rank <= ${batchSize} order by id`;
}

/**
 * Step 3: row-lock every pending row of the candidates' partitions, in id order, WAITING. A drainer
 * delivers only rows it holds locked, so once this returns, every delivery that was in flight has
 * committed (and the next statement sees it), and no drainer can claim these rows until we commit.
 *
 * All pending rows, not only the successors: the revival moves the partition's head, and a
 * deliverable predecessor held by a drainer must finish first, or that drainer would promote a
 * successor over the row we revive. Id order keeps this deadlock-free against drainers: we only
 * ever hold rows below the one we wait on, and a drainer's next head is above its own claimed rows.
 */
export function lockPendingRows(spec: OutboxSpec, keys: readonly string[], options: { skipLocked?: boolean } = {}) {
  const n = tableNames(spec);
  return sql<{ id: string }>`
    select id from ${sql.raw(n.table)}
    where ${sql.raw(n.partition)} = any(${[...keys]}::text[]) and ${rowStates().pending}
    order by id
    for update${sql.raw(options.skipLocked ? ' skip locked' : '')}`;
}

/*
 * Step 4 is `lockPartitions(spec, keys)` from @outbox/outbox: the partitions' advisory locks,
 * sorted by hash, waiting for in-flight enqueues. Always after the row locks (the project's lock
 * order): a drainer holds row locks and may then wait for these, so we must not hold these and
 * then wait for a row.
 */

/*
 * Step 5a is `lockPendingRows(spec, keys, { skipLocked: true })`: lock again, WITHOUT waiting, every
 * pending row of those partitions now visible — rows we already hold come back; rows inserted since
 * step 3 are locked if nobody holds them. A visible pending row missing from the result is held by
 * a drainer that may be delivering it right now.
 */

/**
 * Step 5b, in a new statement (a snapshot taken after every lock was granted): per candidate, is it
 * still poisoned, has a covering successor been delivered meanwhile, and does its partition hold a
 * pending row we could not lock (`contended`: defer rather than wait while holding advisory locks).
 */
export function decideCandidates(
  spec: OutboxSpec,
  candidates: readonly { id: string; key: string }[],
  lockedIds: readonly string[],
  partitionIndex: boolean,
) {
  const n = tableNames(spec);
  const table = sql.raw(n.table);
  const key = sql.raw(n.partition);
  const ids = sql`${candidates.map((c) => String(c.id))}::bigint[]`;
  return sql<Decision>`
    with superseded as materialized (
      select t.id from ${table} t where t.id = any(${ids}) and ${deliveredSuccessor(spec, { partitionIndex, keys: distinct(candidates) })}
    )
    select t.id, t.${key} as key, t.last_error,
      (${rowStates('t').poisoned(spec.maxAttempts)}) as poisoned,
      t.id in (select id from superseded) as superseded,
      exists (
        select 1 from ${table} o
        where o.${key} = t.${key} and ${rowStates('o').pending}
          and o.id <> all(${[...lockedIds]}::bigint[])) as contended
    from ${table} t
    where t.id = any(${ids})
    order by t.id`;
}

/** Step 6: make the rows claimable again. Their heads are then reset with `resetHeads`. */
export function reviveRows(spec: OutboxSpec, ids: readonly string[]) {
  const n = tableNames(spec);
  return sql<{ id: string }>`
    update ${sql.raw(n.table)}
    set attempt_count = 0, last_error = null, next_attempt_at = now()
    where id = any(${[...ids]}::bigint[])
      and ${rowStates().poisoned(spec.maxAttempts)}
    returning id`;
}


/**
 * Step 4b, only after steps 3–4 waited longer than the pass allows (and were rolled back to their
 * savepoint): each partition's advisory lock, without waiting. A partition whose lock is held (an
 * enqueue in flight, a transaction left open after one) is deferred; the others go on.
 */
function tryLockPartitions(spec: OutboxSpec, keys: readonly string[]) {
  return sql<{ key: string; granted: boolean }>`
    select k as key, pg_try_advisory_xact_lock(${partitionLockKey(spec, sql`k`)}) as granted
    from unnest(${[...keys]}::text[]) as k`;
}

async function pass(trx: Transaction<unknown>, spec: OutboxSpec, batchSize: number, lockTimeoutMs: number, logger: Logger): Promise<RedriveResult> {
  const lock = await tryLockReconciler(spec).execute(trx);
  if (!lock.rows[0]?.granted) return SKIPPED;

  // Which rows are poisoned depends on maxAttempts: a reconciler left running across a
  // setMaxAttempts refuses (and is checked again below, once its row locks are granted).
  await assertRecordedMaxAttempts(trx, spec, 'reconciler');
  const partitionIndex = (await partitionIndexPresent(spec).execute(trx)).rows[0]?.present === true;
  const poisoned = (await selectPoisoned(spec, batchSize, { partitionIndex }).execute(trx)).rows;
  const candidates = poisoned.filter((r) => !r.superseded);
  const superseded = poisoned.filter((r) => r.superseded).map(toIntent);
  let more = candidates.length >= batchSize;
  const moreSuperseded = superseded.length >= batchSize;
  if (candidates.length === 0) return { revived: [], superseded, deferred: [], skipped: false, more, moreSuperseded };

  const keys = distinct(candidates);
  // Waiting for in-flight claims is the point of steps 3 and 4, but a stuck drainer (a hung sink,
  // up to its delivery deadline) or a transaction left open after an enqueue must not hold this
  // pass — and, through the rows it already locked, other partitions' heads — for as long: past
  // lockTimeoutMs the waits are rolled back (to a savepoint, releasing what they locked) and the
  // pass goes on without waiting: it locks what it can (step 4b, then 5a's SKIP LOCKED) and defers
  // only the partitions it could not lock, so one held partition does not stop every revival.
  await sql`select set_config('lock_timeout', ${`${lockTimeoutMs}ms`}, true)`.execute(trx);
  await sql`savepoint outbox_redrive_wait`.execute(trx);
  let waitedOut = false;
  try {
    await lockPendingRows(spec, keys).execute(trx);
    await lockPartitions(spec, keys).execute(trx);
    await sql`release savepoint outbox_redrive_wait`.execute(trx);
  } catch (error) {
    if (sqlState(error) !== SQLSTATE.LOCK_NOT_AVAILABLE) throw error;
    await sql`rollback to savepoint outbox_redrive_wait`.execute(trx);
    waitedOut = true;
  }
  await sql`select set_config('lock_timeout', '0', true)`.execute(trx);
  // Step 4b: without waiting, so in any order (a try-lock cannot deadlock).
  const unlocked = new Set<string>();
  if (waitedOut) {
    for (const row of (await tryLockPartitions(spec, keys).execute(trx)).rows) if (!row.granted) unlocked.add(row.key);
    logger.info(`redrive: a partition stayed locked longer than ${lockTimeoutMs} ms (a drainer still delivering, or an open transaction); its candidates are deferred, the others go on`, {
      table: spec.table,
    });
  }
  const locked = (await lockPendingRows(spec, keys, { skipLocked: true }).execute(trx)).rows.map((r) => String(r.id));
  // A setMaxAttempts that committed while this pass waited for its row locks changed which rows are
  // poisoned; one that comes later waits for this transaction (its EXCLUSIVE lock conflicts with the
  // row locks just taken — also after a wait that timed out, whose own locks were rolled back).
  await assertRecordedMaxAttempts(trx, spec, 'reconciler');
  const decisions = (await decideCandidates(spec, candidates, locked, partitionIndex).execute(trx)).rows;

  const revive: Decision[] = [];
  const deferred: RedrivenIntent[] = [];
  for (const row of decisions) {
    if (!row.poisoned) continue; // changed by hand since step 2: not ours to touch
    if (row.superseded) superseded.push(toIntent(row));
    else if (row.contended || unlocked.has(row.key)) deferred.push(toIntent(row));
    else revive.push(row);
  }
  if (revive.length > 0) {
    await reviveRows(spec, revive.map((r) => String(r.id))).execute(trx);
    // The revived row may now be its partition's earliest deliverable row: it must be the head, and
    // the successor that was head must not be claimed before it. We hold every pending row of these
    // keys and their advisory locks, so this touches no row anyone else can hold.
    await resetHeads(trx, spec, distinct(revive));
  }
  superseded.sort((a, b) => compareIds(a.id, b.id));
  if (waitedOut && deferred.length > 0) more = true; // they wait for a partition someone holds
  return { revived: revive.map(toIntent), superseded, deferred, skipped: false, more, moreSuperseded };
}

/**
 * Runs one redrive pass (DESIGN §6) in one READ COMMITTED transaction and logs what it did.
 * See the package README for the locking protocol and its cost.
 */
export async function redrivePoisoned(db: Db, spec: OutboxSpec, batchSize: number, logger: Logger, lockTimeoutMs = 5_000): Promise<RedriveResult> {
  const result = await db
    .transaction()
    .setIsolationLevel('read committed')
    .execute((trx) => pass(trx, spec, batchSize, lockTimeoutMs, logger));
  const fields = (rows: readonly RedrivenIntent[]) => ({
    table: spec.table,
    ids: rows.map((r) => r.id),
    partitionKeys: [...new Set(rows.map((r) => r.partitionKey))],
  });
  if (result.skipped) {
    logger.info('redrive skipped: another pass holds the reconciler lock of this table', { table: spec.table });
    return result;
  }
  if (result.superseded.length > 0) {
    logger.warn(
      `${result.superseded.length} poisoned intent(s) have a delivered successor and were NOT revived (replaying them ` +
        'would undo the later delivery): review and retire them',
      { ...fields(result.superseded), lastErrors: result.superseded.map((r) => r.lastError) },
    );
  }
  if (result.revived.length > 0) logger.info(`revived ${result.revived.length} poisoned intent(s)`, fields(result.revived));
  if (result.deferred.length > 0) {
    logger.info(`deferred ${result.deferred.length} poisoned intent(s): a drainer held their partition`, fields(result.deferred));
  }
  return result;
}
