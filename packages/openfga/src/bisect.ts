import { SinkHaltError, type Outcome } from '@outbox/drainer';
import type { Classification } from './classify.js';
import { withoutSupersededWrites, type PreparedIntent } from './pack.js';
import type { WriteResult } from './write-request.js';

/** Outcomes of one `deliver` call, filled in as requests finish. */
export interface DeliveryState {
  readonly outcomes: Array<Outcome | undefined>;
  /** Partitions with an intent not delivered in this call: their later intents are skipped. */
  readonly stopped: Set<string>;
  /** `keysDeletedLater` of the batch. */
  readonly deletedLater: ReadonlyMap<number, ReadonlySet<string>>;
}

/** Records a failure for every intent in `items`; a permanent one carries its refusal `code`. */
export function fail(
  state: DeliveryState,
  items: readonly PreparedIntent[],
  kind: 'transient' | 'permanent',
  error: string,
  code?: string,
): void {
  for (const item of items) {
    state.outcomes[item.index] = kind === 'permanent' && code !== undefined ? { kind, error, code } : { kind, error };
    state.stopped.add(item.partitionKey);
  }
}

/** What a refusal is recorded as (`poison_code`): OpenFGA's own code, else the HTTP status, else the rule. */
export function refusalCode(failure: Classification): string {
  const { code, status } = failure.error;
  return code ?? (status !== undefined ? `http_${status}` : failure.rule);
}

/** What `deliver` throws on a halt, saying what to fix. */
export function haltError(failure: Classification): SinkHaltError {
  const what =
    failure.rule === 'credentials'
      ? "OpenFGA refused the sink's credentials; fix them (apiUrl, token or client credentials). The batch is released, no attempt counted"
      : failure.rule === 'token-exchange'
        ? "The token issuer refused the sink's client credentials; fix them (clientId, clientSecret, apiTokenIssuer, apiAudience). The batch is released, no attempt counted"
        : 'OpenFGA cannot take writes as configured; no intent is at fault, the batch is released, no attempt counted';
  return new SinkHaltError(`${what}: ${failure.message}`, { cause: failure.error });
}

/**
 * Delivers `items` in one Write request; when some intent in it is at fault, delivers each half,
 * first half first, until the bad intents stand alone. An intent whose partition stopped in an
 * earlier half is skipped. Throws {@link SinkHaltError} on a halt. See docs/openfga-sink.md §1, §4.
 */
export async function deliverBisecting(
  items: readonly PreparedIntent[],
  send: (items: readonly PreparedIntent[]) => Promise<WriteResult>,
  state: DeliveryState,
): Promise<void> {
  const live = items.filter((item) => {
    if (!state.stopped.has(item.partitionKey)) return true;
    state.outcomes[item.index] = { kind: 'skipped' };
    return false;
  });
  if (live.length === 0) return;
  const result = await send(live);
  if (result.ok) {
    for (const item of live) state.outcomes[item.index] = { kind: 'delivered' };
    return;
  }
  const { failure } = result;
  if (failure.verdict === 'halt') throw haltError(failure);
  if (live.length === 1 && failure.rule === 'different-condition') {
    // A replayed run (docs/openfga-sink.md §4): writes of keys a later intent deletes are
    // superseded; send the intent without them.
    const item = live[0] as PreparedIntent;
    const superseded = state.deletedLater.get(item.index);
    const reduced = superseded === undefined ? undefined : withoutSupersededWrites(item, superseded);
    if (reduced !== undefined) {
      if (reduced.writes.length + reduced.deletes.length === 0) state.outcomes[item.index] = { kind: 'delivered' };
      else await deliverBisecting([reduced], send, state);
      return;
    }
  }
  if (failure.verdict === 'transient' || failure.scope === 'request' || live.length === 1) {
    fail(
      state,
      live,
      failure.verdict === 'transient' ? 'transient' : 'permanent',
      failure.message,
      refusalCode(failure),
    );
    return;
  }
  const middle = Math.ceil(live.length / 2);
  await deliverBisecting(live.slice(0, middle), send, state);
  await deliverBisecting(live.slice(middle), send, state);
}
