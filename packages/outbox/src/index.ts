export {
  defineOutbox,
  REGISTER_OUTBOX_PARTITION,
  TUPLE_OUTBOX_PARTITION,
  type OutboxSpec,
  type OutboxSpecInput,
} from './define-outbox.js';
export { OutboxConfigError, OutboxTableError, PayloadError } from './errors.js';
export { supersededCoverageCondition } from './coverage.js';
export { compareIds } from './ids.js';
export { enqueue, enqueueMany, MAX_INTENTS_PER_ENQUEUE, type EnqueueInput } from './enqueue.js';
export { createDrainFunctions } from './drain-functions.js';
export { createOutboxTable, dropOutboxTable, outboxMigration, outboxTableDdl, type OutboxMigration, type OutboxTableOptions } from './migration.js';
export {
  assertRecordedMaxAttempts,
  maxAttemptsChangedError,
  recordedMaxAttempts,
  recordedMaxAttemptsSql,
  setMaxAttempts,
  type SetMaxAttemptsOptions,
  type SetMaxAttemptsResult,
} from './max-attempts.js';
export { MAX_TUPLES_PER_INTENT, validatePartitionKey, validatePayload, type IntentPayload, type TupleKey } from './payload.js';
export type { Logger } from './logger.js';
export { lockPartitions, partitionLockKey } from './partition-lock.js';
export { promoteHeads, resetHeads, settleStatement, type PromotedHead, type SettleOptions } from './heads.js';
export { outboxStats, outboxStatsQuery, type OutboxStats } from './stats.js';
export { SQLSTATE, sqlState } from './sqlstate.js';
export { sqlLiteral } from './sql-literal.js';
export { tableNames } from './table-names.js';
export type { OutboxRow, RegisterOutboxTable, TupleOutboxTable } from './types.js';
export { verifyOutboxTable } from './verify.js';
