import type { LateWriteStamps } from '@outbox/outbox/protocol';
import type { Intent } from './sink.js';

/**
 * Which of a batch's delivered rows the settle stamps for the late-write check (docs/agreement.md,
 * "Late writes"): per partition its last delivered row, at once when the batch delivered another
 * row of that partition before it, else only if the partition's previous delivery is recent (the
 * settle probes for it). `delivered` is in id order, as the drainer records it.
 */
export function lateWriteStamps(delivered: readonly Intent[], verifyDelayMs: number): LateWriteStamps {
  const last = new Map<string, { id: string; count: number }>();
  for (const intent of delivered) {
    const seen = last.get(intent.partitionKey);
    last.set(intent.partitionKey, { id: intent.id, count: (seen?.count ?? 0) + 1 });
  }
  const stamp: string[] = [];
  const probe: string[] = [];
  for (const { id, count } of last.values()) (count > 1 ? stamp : probe).push(id);
  return { verifyDelayMs, stamp, probe };
}
