import { OutboxConfigError, type OutboxAction, type OutboxActionTrace, type OutboxSpec } from '@outbox/outbox';

/**
 * `record` (a call's `record` option) when it is a trace of `action` on `spec`'s table — with
 * `reason`, the same reason the call keeps on its rows — else an OutboxConfigError naming
 * `record`, before anything is changed. Undefined stays undefined: nothing is recorded.
 */
export function checkedRecord(
  spec: OutboxSpec,
  record: OutboxActionTrace | undefined,
  action: OutboxAction,
  reason?: string,
): OutboxActionTrace | undefined {
  if (record === undefined) return undefined;
  if (record === null || typeof record !== 'object' || typeof record.record !== 'function')
    throw new OutboxConfigError('record', 'expected an OutboxActionTrace from traceOutboxAction()');
  const mismatch =
    record.spec?.table !== spec.table
      ? `it traces an action on ${String(record.spec?.table)}, not on ${spec.table}`
      : record.action !== action
        ? `it traces a ${record.action}, not a ${action}`
        : reason !== undefined && record.reason !== reason
          ? `its reason ${JSON.stringify(record.reason)} is not the ${action}'s ${JSON.stringify(reason)}`
          : undefined;
  if (mismatch) throw new OutboxConfigError('record', `${mismatch}: trace the action this call makes`);
  return record;
}
