import {
  ClientWriteRequestOnDuplicateWrites,
  ClientWriteRequestOnMissingDeletes,
  type ClientRequestOptsWithAuthZModelId,
  type ClientWriteRequest,
  type ClientWriteRequestOpts,
} from '@openfga/sdk';
import { classifyWriteError, type AbortCause, type Classification } from './classify.js';
import { writeRequestBody, type PreparedIntent } from './pack.js';

/** Options the sink passes with every Write; `signal` reaches axios through the SDK. */
export type WriteOptions = ClientWriteRequestOpts &
  ClientRequestOptsWithAuthZModelId & { readonly signal?: AbortSignal };

/**
 * The one method the sink needs from an OpenFGA client: `OpenFgaClient` fits, or a wrapper that
 * traces requests before passing them on.
 *
 * @example
 * const traced: OpenFgaWriteClient = { write: (body, options) => tracer.span('fga.write', () => client.write(body, options)) };
 * createOpenFgaSink({ client: traced });
 */
export interface OpenFgaWriteClient {
  write(body: ClientWriteRequest, options?: WriteOptions): Promise<unknown>;
}

/**
 * What the sink reports after every Write request it sends (a metrics hook).
 *
 * @example
 * createOpenFgaSink({ client, onRequest: (e) => metrics.count('fga_write', { result: e.result, rule: e.rule }) });
 */
export interface OpenFgaWriteEvent {
  /** Intents in the request. */
  readonly intents: number;
  readonly writes: number;
  readonly deletes: number;
  readonly durationMs: number;
  /** `delivered`, or how the failure was classified. */
  readonly result: 'delivered' | 'transient' | 'permanent' | 'halt';
  /** The rule of the error table that matched a failure, e.g. `invalid-input`. */
  readonly rule?: string;
  /** The failure's message, as it goes to `last_error`. */
  readonly error?: string;
}

/** Result of one Write request. */
export type WriteResult = { readonly ok: true } | { readonly ok: false; readonly failure: Classification };

/** Everything one Write request needs besides its intents. */
export interface WriteContext {
  readonly client: OpenFgaWriteClient;
  readonly timeoutMs: number;
  /** The drainer's deadline. */
  readonly deadline: AbortSignal;
  /** Aborted when the sink halts: requests still in flight are abandoned. */
  readonly halt: AbortSignal;
  readonly onRequest: ((event: OpenFgaWriteEvent) => void) | undefined;
}

// A replay after a crash must not fail on what already landed (docs/openfga-sink.md §2).
const CONFLICT = {
  onDuplicateWrites: ClientWriteRequestOnDuplicateWrites.Ignore,
  onMissingDeletes: ClientWriteRequestOnMissingDeletes.Ignore,
} as const;
/** The drainer owns retries (backoff, attempt counts, deadline): the SDK must not retry unseen. */
export const NO_RETRY = { maxRetry: 0, minWaitInMs: 0 } as const;

/**
 * Sends the intents as ONE Write request (one OpenFGA transaction), conflicts ignored, no SDK
 * retries. Resolves with the classified failure instead of throwing, promptly on an abort.
 */
export async function sendWrite(items: readonly PreparedIntent[], context: WriteContext): Promise<WriteResult> {
  const body = writeRequestBody(items);
  const started = performance.now();
  const report = (result: OpenFgaWriteEvent['result'], failure?: Classification) => {
    if (!context.onRequest) return;
    try {
      context.onRequest({
        intents: items.length,
        writes: body.writes?.length ?? 0,
        deletes: body.deletes?.length ?? 0,
        durationMs: performance.now() - started,
        result,
        ...(failure ? { rule: failure.rule, error: failure.message } : {}),
      });
    } catch {
      // a metrics hook must not break delivery
    }
  };
  if (context.deadline.aborted || context.halt.aborted) {
    // Not sent, so not reported to the hook.
    return { ok: false, failure: classifyWriteError(undefined, 'deadline', context.timeoutMs) };
  }

  const controller = new AbortController();
  let abortCause: AbortCause | undefined;
  const abort = (cause: AbortCause) => {
    abortCause ??= cause;
    controller.abort();
  };
  const onDeadline = () => abort('deadline');
  const onHalt = () => abort('deadline');
  context.deadline.addEventListener('abort', onDeadline, { once: true });
  context.halt.addEventListener('abort', onHalt, { once: true });
  const timer = setTimeout(() => abort('timeout'), context.timeoutMs);
  // Returns on time even if the SDK stopped passing `signal` on.
  const aborted = new Promise<never>((_, reject) => {
    controller.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
  });
  try {
    const request = context.client.write(body, {
      conflict: CONFLICT,
      retryParams: NO_RETRY,
      signal: controller.signal,
    });
    request.catch(() => undefined);
    await Promise.race([request, aborted]);
    report('delivered');
    return { ok: true };
  } catch (error) {
    const failure = classifyWriteError(error, abortCause, context.timeoutMs);
    report(failure.verdict, failure);
    return { ok: false, failure };
  } finally {
    clearTimeout(timer);
    context.deadline.removeEventListener('abort', onDeadline);
    context.halt.removeEventListener('abort', onHalt);
    aborted.catch(() => undefined);
  }
}
