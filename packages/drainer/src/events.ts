import type { Logger } from '@outbox/outbox';
import type { ListenState } from './listener.js';

export type { Logger };

/** What the drainer reports through `onEvent`, with timings, for logs and metrics. */
export type DrainerEvent =
  | {
      readonly type: 'batch-claimed';
      readonly table: string;
      readonly count: number;
      readonly heads: number;
      readonly claimMs: number;
    }
  /**
   * Intents OpenFGA accepted, once their batch committed. `lagMs[i]`: from `ids[i]`'s `created_at` (its
   * enqueueing transaction's start, not its commit) to that commit; `deliverMs`: the sink's call.
   */
  | {
      readonly type: 'delivered';
      readonly table: string;
      readonly ids: readonly string[];
      readonly lagMs: readonly number[];
      readonly deliverMs: number;
    }
  | {
      readonly type: 'retried';
      readonly table: string;
      readonly ids: readonly string[];
      readonly errors: readonly string[];
    }
  | {
      readonly type: 'poisoned';
      readonly table: string;
      readonly ids: readonly string[];
      readonly partitionKeys: readonly string[];
      readonly errors: readonly string[];
    }
  | { readonly type: 'pass-failed'; readonly table: string; readonly error: Error; readonly halted: boolean }
  /** The LISTEN connection was lost (`reconnecting`: the timer alone delivers), is back, or closed by `stop()`. */
  | { readonly type: 'listen-changed'; readonly table: string; readonly state: ListenState }
  /** A late-write check (docs/agreement.md): partitions cleared, read from the sink, put off, and corrections enqueued. */
  | {
      readonly type: 'late-writes-checked';
      readonly table: string;
      readonly checked: number;
      readonly read: number;
      readonly postponed: number;
      readonly corrected: readonly { readonly partitionKey: string; readonly ids: readonly string[] }[];
      readonly checkMs: number;
    };
