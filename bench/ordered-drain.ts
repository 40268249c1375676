import { createDrainer, DRAINER_DEFAULTS, type DrainerEvent, type Sink } from '@outbox/drainer';
import type { OutboxSpec } from '@outbox/outbox';
import { kysely } from './bench-db.js';
import { checkOrder, type OrderCheck } from './order-check.js';
import { knob, sleep } from './statistics.js';

const noopSink: Sink = { deliver: async (intents) => intents.map(() => ({ kind: 'delivered' as const })) };

/** How the backlog is drained. */
export interface OrderedDrainOptions {
  readonly url: string;
  readonly spec: OutboxSpec;
  /** Rows in the backlog: the drain ends when as many were delivered. */
  readonly rows: number;
  /** Drainers side by side, each with its own pool (as processes would be). */
  readonly workers: number;
  readonly batchSize: number;
  /** Batches each drainer keeps open. Default: the drainer's. Each drainer's pool has one connection more. */
  readonly concurrentBatches?: number;
  readonly synchronousCommit?: boolean;
  /** Where to deliver. Default: a sink that reports every intent delivered at once. */
  readonly sink?: Sink;
  /** Record the per-partition order in which the sink reported intents delivered (a little work per intent). */
  readonly checkOrder?: boolean;
  /** The drainers' late-write check (docs/agreement.md); `false` turns it off. Default: the drainer's (on for a sink that reads back). */
  readonly lateWrites?: false;
  /** The drainers' `onEvent`. */
  readonly onEvent?: (event: DrainerEvent) => void;
  /** Give up (throw) after this long. Default 10 minutes. */
  readonly deadlineMs?: number;
}

/**
 * Drains a filled outbox with `workers` drainers in this process, each calling `drainOnce` in a
 * loop. Returns the wall time, and the per-partition order when asked.
 */
export async function orderedDrain(options: OrderedDrainOptions): Promise<{ ms: number; order?: OrderCheck }> {
  const delivered: Array<{ key: string; rank: number }> = [];
  const inner = options.sink ?? noopSink;
  const sink: Sink = options.checkOrder
    ? {
        deliver: async (intents, context) => {
          const outcomes = await inner.deliver(intents, context);
          for (const [i, intent] of intents.entries()) {
            if (outcomes[i]?.kind === 'delivered')
              delivered.push({ key: intent.partitionKey, rank: Number(intent.id) });
          }
          return outcomes;
        },
      }
    : inner;
  const deadline = performance.now() + (options.deadlineMs ?? 600_000);
  // BENCH_CONCURRENT_BATCHES: every section's drainers with another setting than the default (a comparison run).
  const concurrentBatches =
    options.concurrentBatches ?? knob('BENCH_CONCURRENT_BATCHES', DRAINER_DEFAULTS.concurrentBatches);
  // A connection per open batch and one for flush and the late-write check, as docs/design.md §5 sizes a pool.
  const dbs = Array.from({ length: options.workers }, () => kysely(options.url, concurrentBatches + 1));
  let done = 0;
  const started = performance.now();
  await Promise.all(
    dbs.map(async (db) => {
      const drainer = createDrainer({
        db,
        spec: options.spec,
        sink,
        batchSize: options.batchSize,
        concurrentBatches,
        synchronousCommit: options.synchronousCommit ?? false,
        ...(options.lateWrites === false ? { lateWrites: false } : {}),
        ...(options.onEvent ? { onEvent: options.onEvent } : {}),
      });
      // A worker that finds every head taken by the others keeps polling, as a timer would, until
      // the whole backlog is delivered (with few partitions, one worker may hold all heads).
      while (done < options.rows) {
        if (performance.now() > deadline)
          throw new Error(`orderedDrain: ${done} of ${options.rows} delivered by the deadline`);
        const result = await drainer.drainOnce();
        if (result.poisoned > 0) throw new Error(`orderedDrain: ${result.poisoned} intents poisoned`);
        done += result.delivered;
        if (result.claimed === 0) await sleep(1);
      }
    }),
  );
  const ms = performance.now() - started;
  await Promise.all(dbs.map((db) => db.destroy()));
  return options.checkOrder ? { ms, order: checkOrder(delivered) } : { ms };
}
