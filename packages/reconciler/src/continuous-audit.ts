import { OutboxConfigError } from '@outbox/outbox';
import { RepeatedLines, rowStates, tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';
import { auditContext, integerOption } from './audit-context.js';
import type { AuditReport } from './audit-report.js';
import { incrementalAudit, type IncrementalAuditOptions } from './audit.js';
import type { ReconcilerMetrics } from './reconciler-metrics.js';
import { RepairBudgetError } from './repair-errors.js';
import { repairFindings, repairSettings, type RepairResult } from './repair.js';

/** What {@link createContinuousAudit} takes. */
export interface ContinuousAuditOptions extends IncrementalAuditOptions {
  /**
   * Repair what each run finds, through the outbox (as `repairOutbox` does, not a dry run), when
   * the corrections delete at most `maxDeletes` tuples (default 100, `repairOutbox`'s: mass
   * "unexpected" drift is more often a mistake than real grants); past it nothing is enqueued, the
   * refusal is logged at ERROR and counted. Default on; false: detection only (drift at WARN).
   */
  readonly repair?: false | { readonly maxDeletes?: number; readonly batchSize?: number };
  /** Told of every report, repair and refusal (docs/metrics.md). Default none. */
  readonly metrics?: ReconcilerMetrics;
}

/** What one {@link ContinuousAudit.run} found and did. */
export interface ContinuousAuditRun {
  readonly report: AuditReport;
  /** What the repair enqueued, when it ran (drift found, repair on, within the budget). */
  readonly repair?: RepairResult;
  /** The refusal, when the repair would delete more than its budget: nothing was enqueued. */
  readonly refused?: RepairBudgetError;
  /** Partitions the next run confirms whatever OpenFGA's changelog says: skipped as pending, or drifted. */
  readonly carried: number;
}

/** An incremental audit that carries what it could not settle to its next run, and repairs what it found. */
export interface ContinuousAudit {
  /** One run: the incremental audit, then the repair of the drift it confirmed. Runs one at a time. */
  run(): Promise<ContinuousAuditRun>;
}

/** A refusal standing unchanged is logged again after this long (it is counted every run). */
const REFUSAL_REMINDER_MS = 3_600_000;
/** Repaired partitions a WARN line names. */
const NAMED_PARTITIONS = 20;

/**
 * The audit the services run on their timer (docs/agreement.md, "The bound T"): each run is an
 * incremental audit of the changed partitions **and** of those the previous run skipped as pending
 * or found drifted (a partition whose pending intent settles without a change in OpenFGA would
 * otherwise not be looked at again), then `repairOutbox`'s corrections of what it confirmed, within
 * the delete budget. The carried partitions live in this object: the first run of a process adds
 * every partition pending in the ledger (a full audit when there are more than `scanAbove`).
 *
 * @example
 * const audit = createContinuousAudit({ db, spec: vpcOutbox, owner, reader, logger });
 * setInterval(() => void audit.run(), 300_000);
 */
export function createContinuousAudit(options: ContinuousAuditOptions): ContinuousAudit {
  const { spec, db } = auditContext(options); // checked once here too: a mistake fails the start, not every run
  const { logger, metrics } = options;
  const scanAbove = integerOption('scanAbove', options.scanAbove, 2_000, 0, 100_000_000);
  if (options.repair !== undefined && options.repair !== false && typeof options.repair !== 'object')
    throw new OutboxConfigError('repair', `expected false or { maxDeletes }, got ${JSON.stringify(options.repair)}`);
  const settings =
    options.repair === false
      ? undefined
      : repairSettings({ ...options.repair, dryRun: false, sampleSize: NAMED_PARTITIONS });
  if (settings) metrics?.startRepairs(spec.table);
  const repeats = new RepeatedLines(REFUSAL_REMINDER_MS);
  let carried: Set<string> | undefined;
  let queue: Promise<unknown> = Promise.resolve();

  /** Every partition pending in the ledger now, up to `scanAbove` + 1: what an earlier process may have skipped. */
  const pendingNow = async (): Promise<string[]> => {
    const names = tableNames(spec);
    const rows = await sql<{ key: string }>`
      select distinct ${sql.raw(names.partition)} as key from ${sql.raw(names.table)} where ${rowStates().pending}
      limit ${scanAbove + 1}`.execute(db);
    return rows.rows.map((row) => row.key);
  };

  const runOnce = async (): Promise<ContinuousAuditRun> => {
    const seed = carried ?? new Set(await pendingNow());
    const { report, findings, ctx } = await incrementalAudit(options, {
      recheck: seed,
      full: carried === undefined && seed.size > scanAbove,
    });
    metrics?.recordAudit(report);
    // Set before repairing: a repair that fails leaves its partitions to the next run.
    carried = new Set([...findings.pending, ...findings.drifted.map((p) => p.partitionKey)]);
    const base = { report, carried: carried.size };
    if (!settings || findings.drifted.length === 0) {
      repeats.clear('refused');
      return base;
    }
    try {
      const repair = await repairFindings(ctx, findings, settings, undefined);
      metrics?.recordRepair(repair);
      repeats.clear('refused');
      if (repair.partitions > 0) {
        const named = repair.sample.map((c) => c.partitionKey);
        const more = repair.partitions > named.length ? ` and ${repair.partitions - named.length} more` : '';
        logger?.warn(
          `repair of ${spec.table}: enqueued corrections of the drift in ${repair.partitions} partition(s): ${named.join(', ')}${more}`,
          {
            outbox: spec.table,
            partitions: repair.partitions,
            intents: repair.intents,
            writes: repair.writes,
            deletes: repair.deletes,
            skippedPending: repair.skippedPending,
            enqueued: repair.enqueued,
          },
        );
      }
      return { ...base, repair };
    } catch (error) {
      if (!(error instanceof RepairBudgetError)) throw error;
      metrics?.recordRepairRefused(error);
      if (repeats.due('refused', `${error.deletes} ${error.partitions}`)) {
        logger?.error(
          `automatic ${error.message} Until it is repaired, every audit finds it and refuses again (outbox.repair.refused).`,
          {
            outbox: spec.table,
            deletes: error.deletes,
            maxDeletes: error.maxDeletes,
            partitions: error.partitions,
            enqueued: error.enqueued.length,
          },
        );
      }
      return { ...base, refused: error };
    }
  };

  return {
    run() {
      const next = queue.then(runOnce);
      queue = next.catch(() => undefined);
      return next;
    },
  };
}
