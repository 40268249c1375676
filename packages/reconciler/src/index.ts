export { createReconciler, type Reconciler, type ReconcilerConfig } from './create-reconciler.js';
export type { RedriveResult, RedrivenIntent } from './redrive.js';
export { MAX_RETIRE_IDS } from './retire.js';
export { RetireRefusedError, type RefusedRetirement, type RetireRefusal } from './errors.js';
export type { Logger } from './logger.js';
