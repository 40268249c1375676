import { sql, type Transaction } from 'kysely';
import { OutboxConfigError, type AnyKysely, type OutboxActionTrace, type OutboxSpec } from '@outbox/outbox';
import {
  assertRecordedMaxAttempts,
  compareIds,
  lockPartitions,
  maxAttemptsChangedError,
  resetHeads,
  SQLSTATE,
  sqlState,
  type PoisonCause,
  type RepeatedLines,
} from '@outbox/outbox/protocol';
import { checkedRecord } from './action-record.js';
import type { Logger } from './console-logger.js';
import {
  decideCandidates,
  lockPendingRows,
  requestRefusedRevivals,
  reviveRows,
  selectPoisoned,
  tryLockPartitions,
  tryLockReconciler,
  type PoisonedRow,
  type RevivalSpacing,
} from './redrive-statements.js';
import { successorCheck, type SuccessorCheck } from './successor.js';

/** One poisoned intent a pass (or `retire`, or `discardPoisoned`) looked at. */
export interface RedrivenIntent {
  /** The outbox row id (a bigint, as a string). */
  readonly id: string;
  readonly partitionKey: string;
  /** `last_error` as found (a revived row's is cleared). */
  readonly lastError: string | null;
  /** Why it was poisoned; absent on rows from before causes were recorded (read as `exhausted`). */
  readonly poisonCause?: PoisonCause;
  /** The sink's code of a refusal, e.g. OpenFGA's `validation_error`. */
  readonly poisonCode?: string;
}

/** A refused intent a pass left poisoned. */
export interface WaitingIntent extends RedrivenIntent {
  /** A model change or an operator asked to retry it: it is revived once `reviveAfter` has passed. */
  readonly requested: boolean;
  /** Not revived before this (the growing spacing between revivals of one row); null: as soon as asked. */
  readonly reviveAfter: Date | null;
}

/**
 * What one pass did (a dry run: would do).
 *
 * @example
 * const { revived, superseded, waiting = [] } = await reconciler.redrivePoisoned();
 */
export interface RedriveResult {
  /** Reset to claimable; each is its partition's head if it is the earliest deliverable row. */
  readonly revived: readonly RedrivenIntent[];
  /** Left poisoned: a later row of the partition was delivered (and covers it). Retire these. */
  readonly superseded: readonly RedrivenIntent[];
  /** Left for the next pass: a drainer held a pending row of the partition. */
  readonly deferred: readonly RedrivenIntent[];
  /** Another pass (any process) held the table's reconciler lock: nothing done. */
  readonly skipped: boolean;
  /** The candidates filled the batch: more revivable rows may wait for the next pass. */
  readonly more: boolean;
  /** The superseded list filled its batch (apart from `more`, which a loop must not spin on). */
  readonly moreSuperseded: boolean;
  /** Refused rows left poisoned; present when there are any. */
  readonly waiting?: readonly WaitingIntent[];
  /** With `waiting`: the list filled its batch. */
  readonly moreWaiting?: boolean;
  /** Present on a dry run: `revived` is what the pass would revive; nothing changed. */
  readonly dryRun?: true;
}

/** What one pass is asked, e.g. `{ refused: true, reason: 'model-change' }` or `{ dryRun: true }`. */
export interface RedriveOptions {
  /** Also retry rows refused for good, each once its spacing passed. Default false: nothing changed since the refusal. */
  readonly refused?: boolean;
  /** Why refused rows are retried (`model-change`, `operator`, …), for the log. Required with `refused`. */
  readonly reason?: string;
  /** Report from one snapshot, changing and locking nothing. Default false. */
  readonly dryRun?: boolean;
  /**
   * A `traceOutboxAction` of `redrive`: a pass that revives rows or asks refused ones to retry
   * records it in the actions log, in its own transaction (the passes of one trace make one row).
   * Default none; ignored by a dry run.
   */
  readonly record?: OutboxActionTrace;
}

/** What a pass needs besides its options. */
export interface PassContext {
  readonly db: AnyKysely;
  readonly spec: OutboxSpec;
  readonly batchSize: number;
  readonly lockTimeoutMs: number;
  readonly spacing: RevivalSpacing;
  readonly logger: Logger;
  /** What this reconciler's passes last reported, so a standing state is not logged every pass. */
  readonly repeats: RepeatedLines;
}

const SKIPPED: RedriveResult = Object.freeze({
  revived: [],
  superseded: [],
  deferred: [],
  skipped: true,
  more: false,
  moreSuperseded: false,
});
const distinct = (rows: readonly { partition_key: string }[]) => [...new Set(rows.map((r) => r.partition_key))];

/** A row as a {@link RedrivenIntent}: the cause and code only when recorded. */
export function toIntent(
  row: Pick<PoisonedRow, 'id' | 'partition_key' | 'last_error' | 'poison_cause' | 'poison_code'>,
): RedrivenIntent {
  return {
    id: String(row.id),
    partitionKey: row.partition_key,
    lastError: row.last_error,
    ...(row.poison_cause ? { poisonCause: row.poison_cause } : {}),
    ...(row.poison_code ? { poisonCode: row.poison_code } : {}),
  };
}

/** Step 2's lists, with `waiting` and `moreWaiting` only when some refused row waits. */
function classify(rows: readonly PoisonedRow[], batchSize: number) {
  const of = (c: PoisonedRow['class']) => rows.filter((r) => r.class === c);
  const waiting = of('waiting').map((r) => ({
    ...toIntent(r),
    requested: r.revive_requested,
    reviveAfter: r.revive_after,
  }));
  return {
    candidates: of('candidate'),
    superseded: of('superseded').map(toIntent),
    more: of('candidate').length >= batchSize,
    moreSuperseded: of('superseded').length >= batchSize,
    waitingFields: waiting.length > 0 ? { waiting, moreWaiting: waiting.length >= batchSize } : {},
  };
}

/** Steps 3–4 under `lockTimeoutMs` (docs/design.md §6); past it, rolled back, then each partition try-locked. Returns the partitions not locked. */
async function lockCandidatePartitions(
  trx: Transaction<unknown>,
  ctx: PassContext,
  keys: readonly string[],
): Promise<Set<string> | undefined> {
  await sql`select set_config('lock_timeout', ${`${ctx.lockTimeoutMs}ms`}, true)`.execute(trx);
  await sql`savepoint outbox_redrive_wait`.execute(trx);
  let waitedOut = false;
  try {
    await lockPendingRows(ctx.spec, keys).execute(trx);
    await lockPartitions(ctx.spec, keys).execute(trx);
    await sql`release savepoint outbox_redrive_wait`.execute(trx);
  } catch (error) {
    if (sqlState(error) !== SQLSTATE.LOCK_NOT_AVAILABLE) throw error;
    await sql`rollback to savepoint outbox_redrive_wait`.execute(trx);
    waitedOut = true;
  }
  await sql`select set_config('lock_timeout', '0', true)`.execute(trx);
  if (!waitedOut) return undefined;
  ctx.logger.info(
    `redrive: a partition stayed locked longer than ${ctx.lockTimeoutMs} ms (a drainer still delivering, or an open transaction); its candidates are deferred, the others go on`,
    {
      table: ctx.spec.table,
    },
  );
  // Without waiting, so in any order: a try-lock cannot deadlock.
  const rows = (await tryLockPartitions(ctx.spec, keys).execute(trx)).rows;
  return new Set(rows.filter((r) => !r.granted).map((r) => r.partition_key));
}

/** `changes.requested`: the refused rows the pass asked to retry (a change the result does not list). */
async function pass(
  trx: Transaction<unknown>,
  ctx: PassContext,
  options: RedriveOptions,
  changes: { requested: number },
): Promise<RedriveResult> {
  const { spec } = ctx;
  const start = (await tryLockReconciler(spec).execute(trx)).rows[0];
  if (!start?.granted) return SKIPPED;
  // Checked again once the row locks are granted.
  if (start.recorded !== null && Number(start.recorded) !== spec.maxAttempts)
    throw maxAttemptsChangedError(spec, Number(start.recorded), 'reconciler');
  if (options.refused) changes.requested = (await requestRefusedRevivals(spec).execute(trx)).rows.length;
  const check: SuccessorCheck = { partitionIndex: start.successor_index };
  const step2 = classify((await selectPoisoned(spec, ctx.batchSize, check).execute(trx)).rows, ctx.batchSize);
  const { candidates, superseded, moreSuperseded, waitingFields } = step2;
  let more = step2.more;
  if (candidates.length === 0)
    return { revived: [], superseded, deferred: [], skipped: false, more, moreSuperseded, ...waitingFields };

  const keys = distinct(candidates);
  const unlocked = await lockCandidatePartitions(trx, ctx, keys);
  const locked = (await lockPendingRows(spec, keys, { skipLocked: true }).execute(trx)).rows.map((r) => String(r.id));
  // A setMaxAttempts committed while this pass waited changed what is poisoned; a later one waits for these row locks.
  await assertRecordedMaxAttempts(trx, spec, 'reconciler');
  const decisions = new Map(
    (await decideCandidates(spec, candidates, locked, check).execute(trx)).rows.map((d) => [String(d.id), d]),
  );

  const revive: PoisonedRow[] = [];
  const deferred: RedrivenIntent[] = [];
  for (const row of candidates) {
    const decision = decisions.get(String(row.id));
    if (!decision?.poisoned) continue; // changed by hand since step 2: not ours to touch
    if (decision.superseded) superseded.push(toIntent(row));
    else if (decision.contended || unlocked?.has(row.partition_key)) deferred.push(toIntent(row));
    else revive.push(row);
  }
  if (revive.length > 0) {
    await reviveRows(
      spec,
      revive.map((r) => String(r.id)),
      ctx.spacing,
    ).execute(trx);
    // We hold every pending row and the advisory lock of these partitions: no one else can move their heads.
    await resetHeads(trx, spec, distinct(revive));
  }
  superseded.sort((a, b) => compareIds(a.id, b.id));
  if (unlocked !== undefined && deferred.length > 0) more = true; // they wait for a partition someone holds
  return {
    revived: revive.map(toIntent),
    superseded,
    deferred,
    skipped: false,
    more,
    moreSuperseded,
    ...waitingFields,
  };
}

/** A dry run: step 2 alone, on one snapshot, without locks; `deferred` is always empty. */
async function dryRun(ctx: PassContext, options: RedriveOptions): Promise<RedriveResult> {
  const check = await successorCheck(ctx.db, ctx.spec);
  const rows = (await selectPoisoned(ctx.spec, ctx.batchSize, check, options.refused === true).execute(ctx.db)).rows;
  const { candidates, superseded, more, moreSuperseded, waitingFields } = classify(rows, ctx.batchSize);
  return {
    revived: candidates.map(toIntent),
    superseded,
    deferred: [],
    skipped: false,
    more,
    moreSuperseded,
    ...waitingFields,
    dryRun: true,
  };
}

function logPass(ctx: PassContext, options: RedriveOptions, result: RedriveResult): void {
  const { logger, spec, repeats } = ctx;
  const fields = (rows: readonly RedrivenIntent[]) => ({
    table: spec.table,
    ids: rows.map((r) => r.id),
    partitionKeys: [...new Set(rows.map((r) => r.partitionKey))],
  });
  // A standing state (rows superseded, refused rows waiting, another replica's pass) is logged when it changes.
  const changed = (kind: string, rows: readonly RedrivenIntent[] | undefined) => {
    if (rows === undefined || rows.length === 0) {
      repeats.clear(kind);
      return false;
    }
    return repeats.due(kind, rows.map((r) => r.id).join(','));
  };
  if (result.skipped) {
    if (repeats.due('skipped', ''))
      logger.info('redrive skipped: another pass holds the reconciler lock of this table', { table: spec.table });
    return;
  }
  repeats.clear('skipped');
  if (options.refused)
    logger.info(`redrive: refused intents asked to retry (${options.reason})`, { table: spec.table });
  if (changed('superseded', result.superseded)) {
    logger.warn(
      `${result.superseded.length} poisoned intent(s) have a delivered successor and were NOT revived (replaying them ` +
        'would undo the later delivery): review and retire them',
      { ...fields(result.superseded), lastErrors: result.superseded.map((r) => r.lastError) },
    );
  }
  if (result.revived.length > 0)
    logger.info(`revived ${result.revived.length} poisoned intent(s)`, fields(result.revived));
  if (result.deferred.length > 0)
    logger.info(
      `deferred ${result.deferred.length} poisoned intent(s): a drainer held their partition`,
      fields(result.deferred),
    );
  if (changed('waiting', result.waiting)) {
    logger.info(
      `${result.waiting!.length} intent(s) refused by the target wait for a model change or an operator (or for their spacing)`,
      {
        ...fields(result.waiting!),
        codes: result.waiting!.map((r) => r.poisonCode ?? null),
      },
    );
  }
}

/** Runs one redrive pass (docs/design.md §6) in one READ COMMITTED transaction, or a dry run, and logs what it did (and records it, with `record`). */
export async function redrivePoisoned(ctx: PassContext, options: RedriveOptions = {}): Promise<RedriveResult> {
  if (options.refused && !options.dryRun && (typeof options.reason !== 'string' || options.reason.trim() === '')) {
    throw new OutboxConfigError(
      'reason',
      `redrive on ${ctx.spec.table}: say why refused intents are retried (e.g. 'model-change'): it is logged`,
    );
  }
  if (options.dryRun) return dryRun(ctx, options);
  const record = checkedRecord(ctx.spec, options.record, 'redrive');
  const result = await ctx.db
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (trx) => {
      const changes = { requested: 0 };
      const done = await pass(trx, ctx, options, changes);
      // A pass that changed nothing leaves no trace: the log is of changes.
      if (record && (done.revived.length > 0 || changes.requested > 0)) {
        await record.record(trx, {
          ids: done.revived.map((r) => r.id),
          counts: { revived: done.revived.length, requested: changes.requested },
        });
      }
      return done;
    });
  logPass(ctx, options, result);
  return result;
}
