import { ValueType, type Attributes, type Meter } from '@opentelemetry/api';
import type { MeterOptions } from '@outbox/outbox';
import { OUTBOX_TABLE_ATTRIBUTE, resolveMeter, startAtZero } from '@outbox/outbox/protocol';
import manifest from '../package.json' with { type: 'json' };
import type { AuditReport } from './audit-report.js';
import type { RedriveResult, RedrivenIntent } from './redrive.js';
import type { RepairResult } from './repair.js';
import type { RepairBudgetError } from './repair-errors.js';

const meterOf = (options: MeterOptions): Meter =>
  resolveMeter(options, { name: manifest.name, version: manifest.version });
const counter = (meter: Meter, name: string, unit: string, description: string) =>
  meter.createCounter(name, { unit, description, valueType: ValueType.INT });

/** What the reconciler counts of its own work: redrive passes and discards. */
export interface ReconcilerWorkMetrics {
  /** Runs `pass` (one redrive pass of `table`) and counts what it did, or that it failed; returns or rethrows what it did. */
  pass(table: string, pass: () => Promise<RedriveResult>): Promise<RedriveResult>;
  /** Runs `discard` (one `discardPoisoned` call on `table`, all or nothing) and counts the intents it closed; a refused call counts none. */
  discard(table: string, discard: () => Promise<readonly RedrivenIntent[]>): Promise<readonly RedrivenIntent[]>;
}

/** The instruments of the passes and discards of the reconciler of `table` (docs/metrics.md), for `createReconciler`. */
export function reconcilerWorkMetrics(options: MeterOptions, table: string): ReconcilerWorkMetrics {
  const meter = meterOf(options);
  const passes = counter(
    meter,
    'outbox.reconciler.passes',
    '{pass}',
    'Redrive passes, by outbox.pass.result: completed, skipped (another process held the pass) or failed.',
  );
  const revived = counter(
    meter,
    'outbox.reconciler.revived',
    '{intent}',
    'Poisoned intents a redrive pass reset to deliverable.',
  );
  const superseded = counter(
    meter,
    'outbox.reconciler.superseded_found',
    '{intent}',
    'Superseded intents a redrive pass reported (each pass again, until a human retires them).',
  );
  const discarded = counter(
    meter,
    'outbox.reconciler.discarded',
    '{intent}',
    'Poisoned intents an operator discarded (discardPoisoned): closed, their tuples never written.',
  );
  startAtZero(() => {
    const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: table };
    for (const result of ['completed', 'skipped', 'failed'])
      passes.add(0, { ...attributes, 'outbox.pass.result': result });
    for (const intents of [revived, superseded, discarded]) intents.add(0, attributes);
  });
  return {
    async pass(table, pass) {
      const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: table };
      let result: RedriveResult;
      try {
        result = await pass();
      } catch (error) {
        passes.add(1, { ...attributes, 'outbox.pass.result': 'failed' });
        throw error;
      }
      passes.add(1, { ...attributes, 'outbox.pass.result': result.skipped ? 'skipped' : 'completed' });
      if (!result.skipped) {
        revived.add(result.revived.length, attributes);
        superseded.add(result.superseded.length, attributes);
      }
      return result;
    },
    async discard(table, discard) {
      const closed = await discard();
      discarded.add(closed.length, { [OUTBOX_TABLE_ATTRIBUTE]: table });
      return closed;
    },
  };
}

/** What audits found and repairs did, as metrics; see {@link createReconcilerMetrics}. */
export interface ReconcilerMetrics {
  /** Counts the drifted tuples an audit found, by kind, and keeps its drifted partitions as the gauge of its table and mode. */
  recordAudit(report: AuditReport): void;
  /** Counts the tuples a repair enqueued to write and to delete, and the partitions it corrected; a dry run enqueued nothing and counts nothing. */
  recordRepair(result: RepairResult): void;
  /** Counts a repair refused for its delete budget ({@link RepairBudgetError}): nothing enqueued, a human decides. */
  recordRepairRefused(error: RepairBudgetError): void;
  /**
   * Starts the repair counters of `table` at 0, for a process that repairs on a timer (the
   * services): `increase()` then sees its first repair or refusal. Recording one starts them too.
   */
  startRepairs(table: string): void;
}

/**
 * Records what audits and repairs found and did (docs/metrics.md); the reconciler counts its own
 * redrive passes. On `options`' meter (default: the global provider's); create one per process and
 * meter, and hand it every report.
 *
 * @example
 * const reconcilerMetrics = createReconcilerMetrics(); // the global meter provider
 * reconcilerMetrics.recordAudit(await auditOutbox({ db, spec: vpcOutbox, owner, reader }));
 * reconcilerMetrics.recordRepair(await repairOutbox({ db, spec: vpcOutbox, owner, reader, dryRun: false }));
 */
export function createReconcilerMetrics(options: MeterOptions = {}): ReconcilerMetrics {
  const meter = meterOf(options);
  const driftFound = counter(
    meter,
    'outbox.audit.drift_found',
    '{tuple}',
    'Drifted tuples audits found, by outbox.drift.kind: missing, unexpected, orphan.',
  );
  const repaired = counter(
    meter,
    'outbox.repair.drift_repaired',
    '{tuple}',
    'Tuples repairs enqueued corrections for, by outbox.repair.operation: write or delete.',
  );
  const partitionsRepaired = counter(
    meter,
    'outbox.repair.partitions_repaired',
    '{partition}',
    'Drifted partitions repairs enqueued corrections for.',
  );
  const refused = counter(
    meter,
    'outbox.repair.refused',
    '{repair}',
    'Repairs refused because they would delete more tuples than their budget (maxDeletes): nothing enqueued.',
  );
  const started = new Set<string>();
  const startRepairs = (table: string) => {
    if (started.has(table)) return;
    started.add(table);
    const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: table };
    for (const operation of ['write', 'delete'])
      repaired.add(0, { ...attributes, 'outbox.repair.operation': operation });
    partitionsRepaired.add(0, attributes);
    refused.add(0, attributes);
  };
  const drifted = meter.createObservableGauge('outbox.audit.drifted', {
    unit: '{partition}',
    description:
      'Partitions the last audit of this table and mode found drifted (in this process): 0 once an audit finds it clean.',
    valueType: ValueType.INT,
  });
  const lastAudits = new Map<string, { readonly attributes: Attributes; readonly drifted: number }>();
  drifted.addCallback((result) => {
    for (const audit of lastAudits.values()) result.observe(audit.drifted, audit.attributes);
  });
  return {
    recordAudit(report) {
      const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: report.outbox, 'outbox.audit.mode': report.mode };
      driftFound.add(report.missing.tuples, { ...attributes, 'outbox.drift.kind': 'missing' });
      driftFound.add(report.unexpected.tuples, { ...attributes, 'outbox.drift.kind': 'unexpected' });
      driftFound.add(report.orphans.tuples, { ...attributes, 'outbox.drift.kind': 'orphan' });
      lastAudits.set(`${report.outbox} ${report.mode}`, { attributes, drifted: report.drifted });
    },
    recordRepair(result) {
      if (result.dryRun) return;
      startRepairs(result.outbox);
      const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: result.outbox };
      repaired.add(result.writes, { ...attributes, 'outbox.repair.operation': 'write' });
      repaired.add(result.deletes, { ...attributes, 'outbox.repair.operation': 'delete' });
      partitionsRepaired.add(result.partitions, attributes);
    },
    recordRepairRefused(error) {
      startRepairs(error.table);
      refused.add(1, { [OUTBOX_TABLE_ATTRIBUTE]: error.table });
    },
    startRepairs,
  };
}
