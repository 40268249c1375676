import {
  enqueueMany,
  MAX_INTENTS_PER_ENQUEUE,
  OutboxConfigError,
  type EnqueueInput,
  type OutboxActionTrace,
  type TupleKey,
} from '@outbox/outbox';
import { lockPartitions } from '@outbox/outbox/protocol';
import { checkedRecord } from './action-record.js';
import {
  auditContext,
  integerOption,
  ownedState,
  readPartitions,
  type AuditContext,
  type AuditReads,
  type AuditTarget,
} from './audit-context.js';
import { findDrift } from './audit.js';
import type { Findings } from './audit-report.js';
import { pendingPartitions } from './audit-pending.js';
import { diffTuples } from './audit-tuples.js';
import type { Logger } from './console-logger.js';
import { RepairBudgetError } from './repair-errors.js';
import { correctionIntents } from './repair-intents.js';

/** What {@link repairOutbox} takes. */
export interface RepairOptions extends AuditTarget {
  /** Repair only these partitions (e.g. an audit's sample). Default: audit the whole outbox first and repair every drifted partition. */
  readonly partitionKeys?: readonly string[];
  /** Default true: plan and report, enqueue nothing. */
  readonly dryRun?: boolean;
  /** Most tuples one run may delete. Default 100: mass "unexpected" drift is more often a mistake (wrong store, old backup) than real grants. */
  readonly maxDeletes?: number;
  /** Partitions corrected per transaction. Default 50: each holds its partition's lock while OpenFGA is re-read. */
  readonly batchSize?: number;
  /** Corrections listed in the result's sample. Default 20. */
  readonly sampleSize?: number;
  /** Told what was enqueued (INFO). Default: silent. */
  readonly logger?: Logger;
  /**
   * A `traceOutboxAction` of `repair`: each batch that enqueues corrections records them (ids and
   * counts) in the actions log in its own transaction, all of the run's in one row. Default none;
   * ignored by a dry run.
   */
  readonly record?: OutboxActionTrace;
}

/** The correction of one partition: `writes` = expected − live, `deletes` = live − expected. */
export interface PartitionCorrection {
  readonly partitionKey: string;
  readonly writes: readonly TupleKey[];
  readonly deletes: readonly TupleKey[];
}

/** What {@link repairOutbox} did, or on a dry run would do. */
export interface RepairResult {
  readonly outbox: string;
  readonly dryRun: boolean;
  /** Partitions corrected (on a dry run: that would be, as planned). */
  readonly partitions: number;
  /** Intents enqueued (would be). */
  readonly intents: number;
  readonly writes: number;
  readonly deletes: number;
  /** Drifted partitions left alone: an intent was pending when the audit or repair (under the lock) looked. */
  readonly skippedPending: number;
  /** Partitions the audit found drifted that agreed with the owner when re-read under the lock (0 on a dry run). */
  readonly agreed: number;
  /** Whether the deletes are within `maxDeletes` (a dry run reports it; a real run past it throws {@link RepairBudgetError}). */
  readonly withinBudget: boolean;
  readonly maxDeletes: number;
  /** Ids of the intents enqueued, in partition order (empty on a dry run). */
  readonly enqueued: readonly string[];
  /** At most `sampleSize` corrections, in partition-key order. */
  readonly sample: readonly PartitionCorrection[];
  /** OpenFGA requests made (the audit's and the re-reads under the locks). */
  readonly reads: AuditReads;
}

interface Totals {
  partitions: number;
  intents: number;
  writes: number;
  deletes: number;
}

function corrections(list: readonly PartitionCorrection[]): { intents: EnqueueInput[]; totals: Totals } {
  const intents = list.flatMap((c) => correctionIntents(c.partitionKey, c.writes, c.deletes));
  return {
    intents,
    totals: {
      partitions: list.length,
      intents: intents.length,
      writes: list.reduce((n, c) => n + c.writes.length, 0),
      deletes: list.reduce((n, c) => n + c.deletes.length, 0),
    },
  };
}

/** One batch: lock, skip pending, read the owner and OpenFGA under the lock, enqueue the difference. */
async function repairBatch(
  ctx: AuditContext,
  keys: readonly string[],
  budget: { readonly maxDeletes: number; deletes: number; partitions: number; readonly enqueued: string[] },
  record: OutboxActionTrace | undefined,
): Promise<{ corrected: PartitionCorrection[]; pending: number; agreed: number; totals: Totals }> {
  return ctx.db
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (trx) => {
      // Enqueue's lock: what is read below is the state the corrections are ordered after (docs/agreement.md).
      await lockPartitions(ctx.spec, keys).execute(trx);
      const pending = await pendingPartitions(trx, ctx.spec, keys);
      const free = keys.filter((key) => !pending.has(key));
      const owned = await ownedState(ctx, trx, free);
      const live = await readPartitions(ctx, free);
      const corrected: PartitionCorrection[] = [];
      for (const key of free) {
        const diff = diffTuples(owned.get(key)?.tuples ?? [], live.get(key) ?? []);
        if (diff.missing.length + diff.unexpected.length > 0)
          corrected.push({ partitionKey: key, writes: diff.missing, deletes: diff.unexpected });
      }
      const { intents, totals } = corrections(corrected);
      if (budget.deletes + totals.deletes > budget.maxDeletes) {
        throw new RepairBudgetError(ctx.spec.table, {
          deletes: budget.deletes + totals.deletes,
          maxDeletes: budget.maxDeletes,
          partitions: budget.partitions + corrected.filter((c) => c.deletes.length > 0).length,
          enqueued: [...budget.enqueued],
        });
      }
      // The locks are held already, so the calls below wait on none (no deadlock between them).
      const ids: string[] = [];
      for (let from = 0; from < intents.length; from += MAX_INTENTS_PER_ENQUEUE) {
        ids.push(...(await enqueueMany(trx, ctx.spec, intents.slice(from, from + MAX_INTENTS_PER_ENQUEUE))));
      }
      if (record && ids.length > 0) await record.record(trx, { ids, counts: { ...totals } });
      budget.deletes += totals.deletes;
      budget.partitions += corrected.filter((c) => c.deletes.length > 0).length;
      budget.enqueued.push(...ids);
      return { corrected, pending: pending.size, agreed: free.length - corrected.length, totals };
    });
}

/**
 * Repairs drift through the outbox, never writing to OpenFGA itself: per drifted partition, the
 * intents `{ writes: expected − live, deletes: live − expected }`, decided under the partitions'
 * enqueue locks from what is read then (docs/agreement.md). Dry run by default; a run deleting
 * more than `maxDeletes` is refused with a {@link RepairBudgetError} before enqueuing anything.
 * With `record`, what it enqueued is in the actions log, committed with it.
 *
 * @example
 * const plan = await repairOutbox({ db, spec: vpcOutbox, owner, reader }); // dry run
 * const done = await repairOutbox({ db, spec: vpcOutbox, owner, reader, dryRun: false });
 */
export async function repairOutbox(options: RepairOptions): Promise<RepairResult> {
  const ctx = auditContext(options);
  const settings = repairSettings(options);
  const record = settings.dryRun ? undefined : checkedRecord(ctx.spec, options.record, 'repair');
  const { findings } = await findDrift(ctx, options.partitionKeys);
  return repairFindings(ctx, findings, settings, options.logger, record);
}

/** {@link RepairOptions}' settings, validated, with their defaults. */
export interface RepairSettings {
  readonly dryRun: boolean;
  readonly maxDeletes: number;
  readonly batchSize: number;
  readonly sampleSize: number;
}

/** @internal validates and defaults what repair takes besides its target. */
export function repairSettings(
  options: Pick<RepairOptions, 'dryRun' | 'maxDeletes' | 'batchSize' | 'sampleSize'>,
): RepairSettings {
  const dryRun = options.dryRun ?? true;
  if (typeof dryRun !== 'boolean')
    throw new OutboxConfigError('dryRun', `expected a boolean, got ${JSON.stringify(dryRun)}`);
  return {
    dryRun,
    maxDeletes: integerOption('maxDeletes', options.maxDeletes, 100, 0, Number.MAX_SAFE_INTEGER),
    batchSize: integerOption('batchSize', options.batchSize, 50, 1, 1_000),
    sampleSize: integerOption('sampleSize', options.sampleSize, 20, 0, 1_000),
  };
}

/**
 * @internal repairs what an audit just confirmed (`findings`), without confirming it again: the
 * batches re-read every partition under its lock anyway. Throws {@link RepairBudgetError} past the
 * budget, before enqueuing anything.
 */
export async function repairFindings(
  ctx: AuditContext,
  findings: Findings,
  { dryRun, maxDeletes, batchSize, sampleSize }: RepairSettings,
  logger: Logger | undefined,
  /** The actions log's trace of an operator's repair; none for the services' own (not an operator action). */
  record?: OutboxActionTrace,
): Promise<RepairResult> {
  const planned = findings.drifted
    .map((p): PartitionCorrection => ({ partitionKey: p.partitionKey, writes: p.missing, deletes: p.unexpected }))
    .sort((a, b) => (a.partitionKey < b.partitionKey ? -1 : a.partitionKey > b.partitionKey ? 1 : 0));
  const plan = corrections(planned).totals;
  const withinBudget = plan.deletes <= maxDeletes;
  const base = { outbox: ctx.spec.table, maxDeletes, reads: ctx.reads };
  if (dryRun) {
    return {
      ...base,
      dryRun,
      ...plan,
      skippedPending: findings.pending.length,
      agreed: 0,
      withinBudget,
      enqueued: [],
      sample: planned.slice(0, sampleSize),
      reads: { ...ctx.reads },
    };
  }
  if (!withinBudget) {
    throw new RepairBudgetError(ctx.spec.table, {
      deletes: plan.deletes,
      maxDeletes,
      partitions: planned.filter((c) => c.deletes.length > 0).length,
      enqueued: [],
    });
  }

  const budget = { maxDeletes, deletes: 0, partitions: 0, enqueued: [] as string[] };
  const done: PartitionCorrection[] = [];
  const totals: Totals = { partitions: 0, intents: 0, writes: 0, deletes: 0 };
  let pending = findings.pending.length;
  let agreed = 0;
  const keys = planned.map((c) => c.partitionKey);
  for (let from = 0; from < keys.length; from += batchSize) {
    const batch = await repairBatch(ctx, keys.slice(from, from + batchSize), budget, record);
    done.push(...batch.corrected);
    for (const field of ['partitions', 'intents', 'writes', 'deletes'] as const) totals[field] += batch.totals[field];
    pending += batch.pending;
    agreed += batch.agreed;
  }
  const result: RepairResult = {
    ...base,
    dryRun,
    ...totals,
    skippedPending: pending,
    agreed,
    withinBudget: true,
    enqueued: budget.enqueued,
    sample: done.slice(0, sampleSize),
    reads: { ...ctx.reads },
  };
  logger?.info(
    `repair of ${ctx.spec.table}: enqueued ${result.intents} intent(s) in ${result.partitions} partition(s)`,
    {
      outbox: result.outbox,
      writes: result.writes,
      deletes: result.deletes,
      skippedPending: result.skippedPending,
      agreed: result.agreed,
    },
  );
  return result;
}
