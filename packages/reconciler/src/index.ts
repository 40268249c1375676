export {
  createReconciler,
  type CompactionSchedule,
  type Reconciler,
  type ReconcilerConfig,
  type RevivalBackoff,
} from './create-reconciler.js';
export type { RedriveOptions, RedriveResult, RedrivenIntent, WaitingIntent } from './redrive.js';
export { MAX_RETIRE_IDS } from './close-poisoned.js';
export { compactOutbox, type CompactionResult, type CompactOptions } from './compact.js';
export {
  DiscardRefusedError,
  RetireRefusedError,
  type DiscardRefusal,
  type RefusedDiscard,
  type RefusedRetirement,
  type RetireRefusal,
} from './errors.js';
export { createReconcilerMetrics, type ReconcilerMetrics } from './reconciler-metrics.js';
export type { Logger } from './console-logger.js';
export type { OutboxOwner, OwnedPage, OwnedPartition, PartitionFilter } from './owner.js';
export type { ChangePage, TupleChange, TupleReader, TuplePage } from './tuple-reader-interface.js';
export type { AuditReads, AuditTarget } from './audit-context.js';
export { auditOutbox, auditOutboxIncremental, type AuditOptions, type IncrementalAuditOptions } from './audit.js';
export type { AuditReport, DriftKind, OrphanSample, PartitionSample } from './audit-report.js';
export { AUDIT_CURSOR_TABLE, auditCursorTableDdl } from './audit-cursor.js';
export {
  createContinuousAudit,
  type ContinuousAudit,
  type ContinuousAuditOptions,
  type ContinuousAuditRun,
} from './continuous-audit.js';
export { repairOutbox, type PartitionCorrection, type RepairOptions, type RepairResult } from './repair.js';
export { RepairBudgetError } from './repair-errors.js';
export {
  STATE_FILTERS,
  rowStateSql,
  stateFilterSql,
  backingOffCountSql,
  type RowState,
  type StateFilter,
} from './row-states.js';
export { outboxStatus, type OutboxStatus, type StatusTarget } from './outbox-status.js';
export {
  listRows,
  partitionTimeline,
  rowsById,
  rowsTouchingTuple,
  showRow,
  type LedgerTarget,
  type ListedRow,
  type RowFilter,
  type TimelineRow,
} from './ledger-rows.js';
