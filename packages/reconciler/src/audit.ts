import { auditContext, integerOption, objectType, type AuditContext, type AuditTarget } from './audit-context.js';
import { confirmPartitions } from './audit-confirm.js';
import {
  AUDIT_CURSOR_TABLE,
  auditCursorTableName,
  readAuditCursors,
  writeAuditCursors,
  type AuditCursor,
} from './audit-cursor.js';
import { auditReport, type AuditReport, type Findings } from './audit-report.js';
import { scanPartitions } from './audit-scan.js';
import type { Logger } from './console-logger.js';

/** What {@link auditOutbox} takes. */
export interface AuditOptions extends AuditTarget {
  /** Partitions (and tuples each) in each kind's sample. Default 20: the pattern of a drift; counts are complete. */
  readonly sampleSize?: number;
  /** Told the outcome: drift at WARN (a human decides on repair), a clean audit at INFO. Default: silent. */
  readonly logger?: Logger;
}

/** What {@link auditOutboxIncremental} takes. */
export interface IncrementalAuditOptions extends AuditOptions {
  /** The stored changelog positions ({@link auditCursorTableDdl}). Default `public.outbox_audit_cursor`. */
  readonly cursorTable?: string;
  /**
   * Changed partitions above which the run scans the whole store instead of re-reading each one: a
   * re-read is one Read per partition, the scan one per 100 live tuples. Default 2,000 (the scan of
   * 100k two-tuple objects); 0 always scans after reading the changelog.
   */
  readonly scanAbove?: number;
}

/** A first incremental audit reads the changelog from a minute before it started: OpenFGA's clock may lag this host's. */
const START_TIME_MARGIN_MS = 60_000;

/** The drift of the whole outbox: scan, then confirm the candidates. */
async function fullFindings(ctx: AuditContext): Promise<{ findings: Findings }> {
  const scan = await scanPartitions(ctx);
  const confirmed = await confirmPartitions(ctx, scan.candidates);
  return {
    findings: {
      compared: scan.compared,
      liveTuples: scan.liveTuples,
      candidates: scan.candidates.length + scan.pending.length,
      pending: [...scan.pending, ...confirmed.pending],
      drifted: confirmed.drifted,
    },
  };
}

/** @internal what repair audits: every drifted partition, not only the report's sample. */
export async function findDrift(
  ctx: AuditContext,
  partitionKeys: readonly string[] | undefined,
): Promise<{ findings: Findings }> {
  if (partitionKeys === undefined) return fullFindings(ctx);
  const confirmed = await confirmPartitions(ctx, partitionKeys);
  const keys = new Set(partitionKeys);
  return {
    findings: {
      compared: keys.size,
      liveTuples: 0,
      candidates: keys.size,
      pending: confirmed.pending,
      drifted: confirmed.drifted,
    },
  };
}

function logOutcome(logger: Logger | undefined, report: AuditReport): void {
  if (!logger) return;
  const fields = {
    outbox: report.outbox,
    mode: report.mode,
    drifted: report.drifted,
    missing: report.missing.tuples,
    unexpected: report.unexpected.tuples,
    orphanObjects: report.orphans.objects,
    skippedPending: report.skippedPending,
    reads: report.reads,
    durationMs: report.durationMs,
  };
  if (report.drifted > 0)
    logger.warn(`audit of ${report.outbox}: OpenFGA differs from the owner in ${report.drifted} partition(s)`, fields);
  else logger.info(`audit of ${report.outbox}: OpenFGA agrees with the owner`, fields);
}

/**
 * Compares what the owner's rows expect in OpenFGA with what it holds, for every object of the
 * owner's types: tuples missing, unexpected, and on orphan objects. Read-only and lock-free; a
 * partition with an intent pending is not drift (`skippedPending`). Cost: docs/agreement.md.
 *
 * @example
 * const report = await auditOutbox({ db, spec: vpcOutbox, owner: registerServiceOwner(vpcService), reader });
 */
export async function auditOutbox(options: AuditOptions): Promise<AuditReport> {
  const startedAt = new Date();
  const ctx = auditContext(options);
  const sampleSize = integerOption('sampleSize', options.sampleSize, 20, 0, 1_000);
  const { findings } = await fullFindings(ctx);
  const report = auditReport(
    { outbox: ctx.spec.table, mode: 'full', objectTypes: ctx.owner.objectTypes, reads: ctx.reads, startedAt },
    findings,
    sampleSize,
  );
  logOutcome(options.logger, report);
  return report;
}

/**
 * The changed partitions of one object type since `cursor`, into `into` while it holds at most
 * `keep` (past that the run scans the store, so more are not held), and the cursor to store after.
 */
async function changedPartitions(
  ctx: AuditContext,
  type: string,
  cursor: AuditCursor,
  into: Set<string>,
  keep: number,
): Promise<AuditCursor> {
  let from: AuditCursor = cursor;
  for (;;) {
    const page = await ctx.reader.readChanges(type, from);
    ctx.reads.changePages += 1;
    for (const change of page.changes) {
      if (into.size <= keep && objectType(change.tuple.object) === type) into.add(ctx.owner.partitionOf(change.tuple));
    }
    const token = page.continuationToken;
    // No token: nothing changed after the start time yet; start from it again next time.
    if (!token) return from;
    const next = { continuationToken: token };
    if (page.changes.length === 0 || token === from.continuationToken) return next;
    from = next;
  }
}

/** What {@link incrementalAudit} takes besides the options: what a continuous audit carries between runs. */
export interface IncrementalAuditRun {
  /** Partitions to confirm whatever the changelog says: those an earlier run could not judge (pending) or found drifted. */
  readonly recheck?: Iterable<string>;
  /** Scan the whole store this time (a continuous audit's first run, when too much is pending to recheck). */
  readonly full?: boolean;
}

/** @internal the incremental audit, with every drifted and pending key (the report only samples them). */
export async function incrementalAudit(
  options: IncrementalAuditOptions,
  run: IncrementalAuditRun = {},
): Promise<{ report: AuditReport; findings: Findings; ctx: AuditContext }> {
  const startedAt = new Date();
  const ctx = auditContext(options);
  const sampleSize = integerOption('sampleSize', options.sampleSize, 20, 0, 1_000);
  const table = options.cursorTable ?? AUDIT_CURSOR_TABLE;
  auditCursorTableName(table);
  const stored = await readAuditCursors(ctx.db, table, ctx.spec.table);
  const startTime = new Date(startedAt.getTime() - START_TIME_MARGIN_MS);
  const first = run.full === true || ctx.owner.objectTypes.some((type) => !stored.has(type));
  const scanAbove = integerOption('scanAbove', options.scanAbove, 2_000, 0, 100_000_000);

  // The changelog first, to its end: a change after that is read by the next run, even one made during the scan.
  // One key past scanAbove decides the scan: the rest are not held (a busy changelog names ~100k a minute).
  const changed = new Set<string>(run.recheck ?? []);
  const keep = first ? -1 : scanAbove;
  const next = new Map<string, AuditCursor>();
  for (const type of ctx.owner.objectTypes) {
    next.set(type, await changedPartitions(ctx, type, stored.get(type) ?? { startTime }, changed, keep));
  }
  // A first run, or many changes (the scan then costs fewer Reads than re-reading each changed partition):
  // the scan sees every change read above.
  const { findings } = await findDrift(ctx, first || changed.size > scanAbove ? undefined : [...changed]);
  await writeAuditCursors(ctx.db, table, ctx.spec.table, next);
  const report = auditReport(
    { outbox: ctx.spec.table, mode: 'incremental', objectTypes: ctx.owner.objectTypes, reads: ctx.reads, startedAt },
    findings,
    sampleSize,
  );
  logOutcome(options.logger, report);
  return { report, findings, ctx };
}

/**
 * An audit of what changed in OpenFGA since the last one (the owner types' changelog from stored
 * tokens); the first run per type is a full audit. An owner row changed without an intent is
 * found only by a full audit: run one now and then (docs/agreement.md). A partition skipped as
 * pending is not looked at again unless it changes: `createContinuousAudit` carries it over.
 *
 * @example
 * const report = await auditOutboxIncremental({ db, spec: vpcOutbox, owner, reader });
 */
export async function auditOutboxIncremental(options: IncrementalAuditOptions): Promise<AuditReport> {
  return (await incrementalAudit(options)).report;
}
