import { awaitDelivered, OutboxTokenError, type AnyKysely, type OutboxSpec } from '@outbox/outbox';
import type { FastifyRequest } from 'fastify';
import type { Authorizer, ReadConsistency } from './authorizer.js';
import { HttpError } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The reads this request authorizes with: at HIGHER_CONSISTENCY while the writes named by its
     * `Outbox-Consistency` token are younger than the check cache's TTL, else MINIMIZE_LATENCY.
     */
    authorizer: Authorizer;
  }
}

/** The header every write answers with: the token of the intents it committed. */
export const TOKEN_HEADER = 'outbox-token';
/** The header a request names the writes it must see with: `at-least-as-fresh <token>`. */
export const CONSISTENCY_HEADER = 'outbox-consistency';

const AT_LEAST_AS_FRESH = /^\s*at-least-as-fresh\s+(\S+)\s*$/i;

/** What a request's `Outbox-Consistency` header asks for, with how long the wait took. */
export interface RequestConsistency {
  readonly consistency: ReadConsistency;
  /** Milliseconds waited for the token's intents; 0 without a token. */
  readonly waitedMs: number;
}

/** What {@link requestConsistency} needs of the service. */
export interface ConsistencyOptions {
  readonly db: AnyKysely;
  /** The service's own outbox (its coverage rule, when it has one). */
  readonly outbox: OutboxSpec;
  readonly timeoutMs: number;
  readonly checkCacheTtlMs: number;
  /** Tokens seen wholly delivered (see {@link DeliveredTokens}); default none. */
  readonly delivered?: DeliveredTokens;
}

/**
 * Tokens whose intents were all delivered, with when (on this process's clock): delivery is final,
 * so a token read again — a client passes its last write's token on every request — needs no query.
 * Bounded: the oldest entry goes first.
 */
export class DeliveredTokens {
  readonly #entries = new Map<string, number>();
  readonly #capacity: number;
  constructor(capacity = 10_000) {
    this.#capacity = capacity;
  }
  /** Milliseconds since the newest delivery of `token`, if it was seen wholly delivered. */
  ageMs(token: string): number | undefined {
    const at = this.#entries.get(token);
    return at === undefined ? undefined : performance.now() - at;
  }
  remember(token: string, ageMs: number): void {
    if (this.#entries.size >= this.#capacity) this.#entries.delete(this.#entries.keys().next().value as string);
    this.#entries.set(token, performance.now() - ageMs);
  }
}

function invalidToken(message: string, cause?: unknown): HttpError {
  return new HttpError(400, 'invalid_consistency_token', message, cause === undefined ? undefined : { cause });
}

/**
 * The consistency `header` (the `Outbox-Consistency` value, if any) needs: none → `minimize`;
 * `at-least-as-fresh <token>` → waits until the token's intents are settled, then `higher` while
 * the newest delivery is younger than the check cache's TTL, `minimize` after. A token still
 * pending at the timeout is a 503 `token_pending` (retry); a bad one a 400.
 */
export async function requestConsistency(
  header: string | string[] | undefined,
  options: ConsistencyOptions,
  signal?: AbortSignal,
): Promise<RequestConsistency> {
  if (header === undefined || header === '') return { consistency: 'minimize', waitedMs: 0 };
  const value = Array.isArray(header) ? header.join(',') : header;
  const token = AT_LEAST_AS_FRESH.exec(value)?.[1];
  if (!token) {
    throw invalidToken(
      `${CONSISTENCY_HEADER} must be "at-least-as-fresh <token>" (the ${TOKEN_HEADER} a write answered with), got ${JSON.stringify(value.slice(0, 80))}`,
    );
  }
  const freshFor = (ageMs: number): ReadConsistency => (ageMs < options.checkCacheTtlMs ? 'higher' : 'minimize');
  const known = options.delivered?.ageMs(token);
  if (known !== undefined) return { consistency: freshFor(known), waitedMs: 0 };
  const started = Date.now();
  let result;
  try {
    result = await awaitDelivered(options.db, token, {
      timeoutMs: options.timeoutMs,
      outboxes: [options.outbox],
      ...(signal ? { signal } : {}),
    });
  } catch (error) {
    if (!(error instanceof OutboxTokenError)) throw error;
    // Compacted: delivered longer ago than the retention, so far older than any cache entry.
    if (error.kind === 'compacted') return { consistency: 'minimize', waitedMs: Date.now() - started };
    throw invalidToken(`${CONSISTENCY_HEADER}: ${error.message}`, error);
  }
  const waitedMs = Date.now() - started;
  if (!result.settled) {
    const pending = result.intents.filter((i) => i.status === 'pending').map((i) => `${i.table}#${i.id}`);
    throw new HttpError(
      503,
      'token_pending',
      `the writes this request must see are not delivered to OpenFGA after ${options.timeoutMs} ms (${pending.join(', ')}): retry shortly`,
      { headers: { 'retry-after': '1' } },
    );
  }
  if (result.newestDeliveryAgeMs === undefined) return { consistency: 'minimize', waitedMs };
  if (result.delivered) options.delivered?.remember(token, result.newestDeliveryAgeMs);
  return { consistency: freshFor(result.newestDeliveryAgeMs), waitedMs };
}

/**
 * A preHandler that sets `request.authorizer` from the request's `Outbox-Consistency` header
 * (see {@link requestConsistency}); registered by the kit on every route of a service.
 */
export function consistencyHook(base: Authorizer, options: ConsistencyOptions) {
  const withMemory = { delivered: new DeliveredTokens(), ...options };
  return async (request: FastifyRequest): Promise<void> => {
    const { consistency } = await requestConsistency(request.headers[CONSISTENCY_HEADER], withMemory);
    request.authorizer = base.at(consistency);
  };
}
