// The user API. What only the drainer, the reconciler and the CLI use: ./protocol.ts.
export { OUTBOX_ACTIONS, type OutboxAction } from './schema/actions-log-ddl.js';
export {
  readOutboxActions,
  recordOutboxAction,
  traceOutboxAction,
  validateOutboxAction,
  type OutboxActionChange,
  type OutboxActionEntry,
  type OutboxActionInput,
  type OutboxActionTrace,
  type ReadOutboxActionsOptions,
  type ValidOutboxAction,
} from './actions-log.js';
export type { AnyKysely } from './any-kysely.js';
export {
  defineOutbox,
  REGISTER_OUTBOX_PARTITION,
  TUPLE_OUTBOX_PARTITION,
  type OutboxSpec,
  type OutboxSpecInput,
} from './define-outbox.js';
export {
  awaitDelivered,
  outboxToken,
  type AwaitDeliveredOptions,
  type AwaitDeliveredResult,
  type IntentOutcome,
} from './await-delivered.js';
export {
  compareOutboxTokens,
  decodeOutboxToken,
  mergeOutboxTokens,
  type OutboxTokenContents,
  type TokenOutbox,
} from './consistency-token.js';
export {
  OutboxConfigError,
  OutboxTableError,
  OutboxTokenError,
  PayloadError,
  type OutboxTokenErrorKind,
} from './errors.js';
export { enqueue, enqueueMany, MAX_INTENTS_PER_ENQUEUE, type EnqueueInput } from './enqueue.js';
export { createDrainFunctions } from './schema/drain-functions.js';
export {
  createOutboxTable,
  dropOutboxTable,
  outboxMigration,
  outboxMigrations,
  outboxTableDdl,
  type OutboxMigration,
  type OutboxMigrationsOptions,
} from './schema/migration.js';
export type { OutboxTableOptions } from './schema/outbox-table-ddl.js';
export { setMaxAttempts, type SetMaxAttemptsOptions, type SetMaxAttemptsResult } from './max-attempts.js';
export {
  MAX_TUPLES_PER_INTENT,
  validatePartitionKey,
  validatePayload,
  type IntentPayload,
  type TupleKey,
} from './payload.js';
export type { Logger } from './logger.js';
export { observeOutbox, type MeterOptions, type ObserveOutboxOptions, type OutboxObserver } from './outbox-metrics.js';
export { outboxStats, type OutboxStats } from './stats.js';
export type { RegisterOutboxTable, TupleOutboxTable } from './types.js';
export { verifyOutboxTable } from './schema/verify.js';
