import type { Intent, Outcome, Sink, SinkContext } from './sink.js';

/** A sink for tests: records what it was given and what it "delivered". */
export interface RecordingSink extends Sink {
  /** Every intent reported delivered, in delivery order (replays appear twice). */
  readonly delivered: Intent[];
  /** Every call's intents. */
  readonly calls: Intent[][];
}

export interface RecordingSinkOptions {
  /** Decides an intent's outcome; undefined means delivered. May be async (to simulate latency). */
  readonly outcome?: (intent: Intent, context: SinkContext) => Outcome | undefined | Promise<Outcome | undefined>;
}

/**
 * A sink that delivers nowhere, for tests of scheduling logic (never a stand-in for OpenFGA in
 * tests of delivery). It honours the ordering contract: after a partition's first failure in a
 * call, its later intents are reported `skipped`.
 *
 * @example
 * const sink = createRecordingSink({ outcome: (i) => (i.partitionKey === 'bad' ? { kind: 'permanent', error: 'no' } : undefined) });
 * const drainer = createDrainer({ db, spec, sink });
 */
export function createRecordingSink(options: RecordingSinkOptions = {}): RecordingSink {
  const delivered: Intent[] = [];
  const calls: Intent[][] = [];
  return {
    delivered,
    calls,
    async deliver(intents, context) {
      calls.push([...intents]);
      const failed = new Set<string>();
      const outcomes: Outcome[] = [];
      for (const intent of intents) {
        if (failed.has(intent.partitionKey)) {
          outcomes.push({ kind: 'skipped' });
          continue;
        }
        const outcome = (await options.outcome?.(intent, context)) ?? { kind: 'delivered' };
        if (outcome.kind === 'delivered') delivered.push(intent);
        else failed.add(intent.partitionKey);
        outcomes.push(outcome);
      }
      return outcomes;
    },
  };
}
