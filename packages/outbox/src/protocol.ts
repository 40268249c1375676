// `@outbox/outbox/protocol`: the SQL the drainer, the reconciler and the CLI share with the table.
// Not for application code, nor under the user API's semver; the frozen DDL builders are here for
// migration tools other than Kysely's (docs/migrations.md).
export { ACTIONS_LOG_STEP, actionsLogDdlV1 } from './schema/actions-log-ddl.js';
export {
  claimStatement,
  settleStatement,
  type ClaimedRow,
  type ClaimOptions,
  type LateWriteStamps,
} from './protocol/drain-function-calls.js';
export { drainFunctionsDdl, type DrainFunctionVersions } from './schema/drain-functions.js';
export {
  ENQUEUE_FUNCTION_SIGNATURES,
  enqueueFunctionDdl,
  type EnqueueFunctionVersion,
} from './schema/enqueue-function.js';
export { balancedSql } from './protocol/balanced-sql.js';
export { executeStatements } from './schema/execute-statements.js';
export { promoteHeads, resetHeads } from './protocol/heads.js';
export { compareIds } from './ids.js';
export { planByIndex } from './protocol/index-plans.js';
export { integerInRange, MAX_TIMER_MS, resolveIntervalMs } from './integer-in-range.js';
export { lateWriteVerificationDdl } from './schema/late-write-ddl.js';
export {
  assertRecordedMaxAttempts,
  countedMaxAttemptsSql,
  maxAttemptsChangedError,
  recordedMaxAttempts,
  recordedMaxAttemptsSql,
} from './max-attempts.js';
export { OUTBOX_TABLE_ATTRIBUTE, resolveMeter, startAtZero } from './outbox-metrics.js';
export { dropLedgerLifeDdlV1, ledgerLifeDdlV1, type ClosedAs, type PoisonCause } from './schema/ledger-life-ddl.js';
export { outboxTableDdlV1 } from './schema/outbox-table-ddl.js';
export { lockPartitions, partitionLockKey } from './protocol/partition-lock.js';
export { partitionRangeSql } from './protocol/partition-range.js';
export { RepeatedLines } from './protocol/repeated-lines.js';
export { coveringSuccessor, rowStates } from './protocol/row-states.js';
export { sqlLiteral } from './protocol/sql-literal.js';
export { SQLSTATE, sqlState } from './protocol/sqlstate.js';
export { outboxStatsQuery } from './stats.js';
export { tableNames } from './table-names.js';
export { XMIN_HOLDERS_SQL } from './protocol/xmin-holders.js';
