import type { ListenState } from '@outbox/drainer';
import { type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';
import { openFgaClient, type OpenFgaConnection } from './authorizer.js';

/** How long each readiness check may take: a load balancer polls every few seconds and gives up after its own timeout. */
export const READY_CHECK_TIMEOUT_MS = 2_000;

/** One check of `/readyz`. */
export interface ReadinessCheck {
  readonly ok: boolean;
  /** How long it took (or the timeout). */
  readonly ms: number;
  /** What failed, when it did. */
  readonly error?: string;
}

/** The outbox check, with the age it measured. */
export interface OutboxReadinessCheck extends ReadinessCheck {
  /** Milliseconds since the oldest deliverable intent was committed; null when none is. */
  readonly oldestDeliverableAgeMs: number | null;
  readonly maxDeliverableAgeMs: number;
  /** The drainer's LISTEN connection (`reconnecting`: the timer alone delivers, slower; not a failure). */
  readonly listen: ListenState;
}

/** What `/readyz` answers: 200 when every check is ok, else 503 with `error` naming the first that failed. */
export interface ReadinessReport {
  readonly ready: boolean;
  readonly checks: {
    readonly database: ReadinessCheck;
    readonly openfga: ReadinessCheck;
    readonly outbox: OutboxReadinessCheck;
  };
  /** The first failed check as the API's error: `database_unavailable`, `authorization_unavailable` or `outbox_stalled`. */
  readonly error?: { readonly code: string; readonly message: string };
}

/** What {@link createReadiness} takes. */
export interface ReadinessConfig {
  readonly db: AnyKysely;
  readonly openfga: OpenFgaConnection;
  readonly spec: OutboxSpec;
  /** Not ready when the oldest deliverable intent is older than this; 0 turns the check off. */
  readonly maxDeliverableAgeMs: number;
  /** The drainer's LISTEN state, reported in the outbox check's detail; default `off`. */
  readonly listenState?: () => ListenState;
  readonly timeoutMs?: number;
}

async function timed(timeoutMs: number, work: () => Promise<void>): Promise<ReadinessCheck> {
  const started = performance.now();
  const ms = () => Math.round(performance.now() - started);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([work(), late]);
    return { ok: true, ms: ms() };
  } catch (error) {
    return { ok: false, ms: ms(), error: error instanceof Error ? error.message : String(error) };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The readiness of a service, as `/readyz` reports it. Three checks, run together, each bounded by
 * `timeoutMs`:
 *
 * - **database**: `select 1` answers;
 * - **openfga**: its store answers (`GetStore`, no retries): reachable, the credentials taken, the store there;
 * - **outbox**: no deliverable intent (pending, attempts left) was committed more than
 *   `maxDeliverableAgeMs` ago. A healthy drainer delivers within a second or two (its timer, LISTEN,
 *   the write's own flush); an intent that old means delivery is stuck (OpenFGA refusing, the
 *   drainer halted, a partition blocked) and access is lagging what the API answered. Poisoned
 *   intents do not count: they wait for the reconciler, not for this instance.
 *
 * @example
 * const readiness = createReadiness({ db, openfga, spec: vpcOutbox, maxDeliverableAgeMs: 60_000 });
 * const { ready, checks } = await readiness.check();
 */
export function createReadiness(config: ReadinessConfig): { check(): Promise<ReadinessReport> } {
  const timeoutMs = config.timeoutMs ?? READY_CHECK_TIMEOUT_MS;
  const client = openFgaClient(config.openfga);
  const names = tableNames(config.spec);
  const oldestDeliverable = sql<{ age_ms: number }>`
    select (extract(epoch from now() - created_at) * 1000)::float8 as age_ms from ${sql.raw(names.table)}
    where sent_at is null and retired_at is null and attempt_count < ${config.spec.maxAttempts}
    order by id limit 1`;

  const max = config.maxDeliverableAgeMs;
  const listenState = config.listenState ?? (() => 'off' as const);
  const checkOutbox = async (): Promise<OutboxReadinessCheck> => {
    const listen = listenState();
    let age: number | null = null;
    const read =
      max === 0
        ? { ok: true, ms: 0 }
        : await timed(
            timeoutMs,
            async () => void (age = (await oldestDeliverable.execute(config.db)).rows[0]?.age_ms ?? null),
          );
    const oldestDeliverableAgeMs = age === null ? null : Math.round(age);
    if (!read.ok || oldestDeliverableAgeMs === null || max === 0 || oldestDeliverableAgeMs <= max)
      return { ...read, oldestDeliverableAgeMs, maxDeliverableAgeMs: max, listen };
    const error = `the oldest deliverable intent of ${config.spec.table} was committed ${Math.round(oldestDeliverableAgeMs / 1000)} s ago (more than ${max} ms)`;
    return { ...read, ok: false, error, oldestDeliverableAgeMs, maxDeliverableAgeMs: max, listen };
  };

  return {
    async check() {
      const [database, openfga, outbox] = await Promise.all([
        timed(timeoutMs, async () => void (await sql`select 1`.execute(config.db))),
        timed(timeoutMs, async () => void (await client.getStore({ retryParams: { maxRetry: 0 } }))),
        checkOutbox(),
      ]);
      const error = !database.ok
        ? { code: 'database_unavailable', message: `the database did not answer: ${database.error}` }
        : !openfga.ok
          ? { code: 'authorization_unavailable', message: `OpenFGA did not answer: ${openfga.error}` }
          : !outbox.ok
            ? { code: 'outbox_stalled', message: `delivery to OpenFGA is stalled: ${outbox.error}` }
            : undefined;
      return { ready: error === undefined, checks: { database, openfga, outbox }, ...(error ? { error } : {}) };
    },
  };
}
