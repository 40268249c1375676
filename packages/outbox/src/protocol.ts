// `@outbox/outbox/protocol`: the SQL the drainer, the reconciler and the CLI share with the table.
// Not for application code, nor under the user API's semver.
export { ACTIONS_LOG_STEP, actionsLogDdlV1 } from './schema/actions-log-ddl.js';
export {
  claimStatement,
  settleStatement,
  type ClaimedRow,
  type ClaimOptions,
  type LateWriteStamps,
  type SettleOptions,
} from './protocol/drain-function-calls.js';
export {
  drainFunctionMarker,
  drainFunctionsDdl,
  LATEST_DRAIN_FUNCTIONS,
  type DrainFunctionVersions,
} from './schema/drain-functions.js';
export {
  ENQUEUE_FUNCTION_SIGNATURES,
  enqueueFunctionDdl,
  type EnqueueFunctionVersion,
} from './schema/enqueue-function.js';
export { balancedSql } from './protocol/balanced-sql.js';
export { executeStatements } from './schema/execute-statements.js';
export { promoteHeads, resetHeads, type PromotedHead } from './protocol/heads.js';
export { compareIds } from './ids.js';
export { planByIndex } from './protocol/index-plans.js';
export { integerInRange, type ConfigErrorClass, type IntegerRange } from './integer-in-range.js';
export { lateWriteVerificationDdl } from './schema/late-write-ddl.js';
export {
  assertRecordedMaxAttempts,
  countedMaxAttemptsSql,
  maxAttemptsChangedError,
  recordedMaxAttempts,
  recordedMaxAttemptsSql,
} from './max-attempts.js';
export { OUTBOX_TABLE_ATTRIBUTE, outboxGaugesQuery, resolveMeter, startAtZero } from './outbox-metrics.js';
export { dropLedgerLifeDdlV1, ledgerLifeDdlV1, type ClosedAs, type PoisonCause } from './schema/ledger-life-ddl.js';
export { outboxTableDdlV1 } from './schema/outbox-table-ddl.js';
export { lockPartitions, partitionLockKey } from './protocol/partition-lock.js';
export { partitionRangeSql } from './protocol/partition-range.js';
export { RepeatedLines } from './protocol/repeated-lines.js';
export { coveringSuccessor, rowStates, supersededCoverageCondition } from './protocol/row-states.js';
export { SQLSTATE, sqlState } from './protocol/sqlstate.js';
export { sqlLiteral } from './protocol/sql-literal.js';
export { outboxStatsQuery } from './stats.js';
export { tableNames } from './table-names.js';
export type { OutboxRow } from './types.js';
export { XMIN_HOLDERS_SQL } from './protocol/xmin-holders.js';
