import { isSinkHalt, type Intent, type Outcome, type Sink } from './sink.js';
import { sanitizeLastError } from './last-error.js';
import type { PartitionFence } from './partition-fence.js';

/** What became of a batch, per row, after the per-partition ordering rule is applied. */
export interface BatchOutcomes {
  readonly delivered: readonly Intent[];
  readonly transient: ReadonlyArray<{ intent: Intent; error: string }>;
  readonly permanent: ReadonlyArray<{ intent: Intent; error: string; code: string | null }>;
  /** Not attempted, or after a failure in their partition: released untouched. */
  readonly released: readonly Intent[];
}

/** A sink's refusal code as `poison_code` stores it: a short identifier, else none (it is a label, not a message). */
function refusalCode(code: unknown): string | null {
  return typeof code === 'string' && /^[A-Za-z0-9_.:-]{1,100}$/.test(code) ? code : null;
}

/** How long a sink whose signal was aborted at the deadline may still take to answer. */
export function abortGraceMs(deadlineMs: number): number {
  return Math.min(1_000, deadlineMs);
}

/**
 * Calls the sink with a deadline (then {@link abortGraceMs} after its signal is aborted) and turns
 * whatever it does into outcomes: a throw, a wrong answer or no answer fails the whole batch as
 * transient. A {@link SinkHaltError} is rethrown: the caller releases the batch, counting nothing.
 */
export async function deliverBatch(
  sink: Sink,
  intents: readonly Intent[],
  deadlineMs: number,
  fence: PartitionFence,
): Promise<readonly Outcome[]> {
  // Before the deadline starts: the wait is for another batch's call, itself bounded by its deadline.
  const leave = await fence.enter(intents.map((i) => i.partitionKey));
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort(new Error(`sink deadline of ${deadlineMs} ms passed`));
      const grace = abortGraceMs(deadlineMs);
      timer = setTimeout(
        () =>
          reject(
            new Error(`sink did not answer within ${deadlineMs} ms (nor ${grace} ms after its signal was aborted)`),
          ),
        grace,
      );
    }, deadlineMs);
  });
  try {
    const call = Promise.resolve().then(() => sink.deliver(intents, { signal: controller.signal }));
    // Held until the call itself ends, or until the drainer gave it up (deadline and grace): a sink
    // that ignores its signal can still overlap, and the late-write check stands behind that.
    void Promise.race([call, deadline]).then(leave, leave);
    const outcomes = await Promise.race([call, deadline]);
    if (!Array.isArray(outcomes) || outcomes.length !== intents.length) {
      throw new Error(
        `sink returned ${Array.isArray(outcomes) ? outcomes.length : typeof outcomes} outcomes for ${intents.length} intents`,
      );
    }
    for (const outcome of outcomes as Outcome[]) {
      if (!outcome || !['delivered', 'transient', 'permanent', 'skipped'].includes(outcome.kind)) {
        throw new Error(`sink returned an invalid outcome: ${JSON.stringify(outcome)}`);
      }
    }
    return outcomes;
  } catch (error) {
    if (isSinkHalt(error)) throw error;
    const message = `sink failed: ${sanitizeLastError(error)}`;
    return intents.map(() => ({ kind: 'transient', error: message }) as const);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Applies the run rule: within each partition, in id order, intents count as delivered up to the
 * first one that is not; that one takes its outcome; the rest are released untouched.
 */
export function applyOrdering(intents: readonly Intent[], outcomes: readonly Outcome[]): BatchOutcomes {
  const delivered: Intent[] = [];
  const transient: Array<{ intent: Intent; error: string }> = [];
  const permanent: Array<{ intent: Intent; error: string; code: string | null }> = [];
  const released: Intent[] = [];
  const stopped = new Set<string>();
  intents.forEach((intent, index) => {
    const outcome = outcomes[index] as Outcome;
    if (stopped.has(intent.partitionKey)) {
      released.push(intent);
      return;
    }
    if (outcome.kind === 'delivered') {
      delivered.push(intent);
      return;
    }
    stopped.add(intent.partitionKey);
    if (outcome.kind === 'transient') transient.push({ intent, error: sanitizeLastError(outcome.error) });
    else if (outcome.kind === 'permanent')
      permanent.push({ intent, error: sanitizeLastError(outcome.error), code: refusalCode(outcome.code) });
    else released.push(intent);
  });
  return { delivered, transient, permanent, released };
}
