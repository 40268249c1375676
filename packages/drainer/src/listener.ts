import type { Logger } from '@outbox/outbox';
import pg from 'pg';
import { SQLSTATE } from '@outbox/outbox/protocol';
import { backoffDelayMs } from './backoff.js';
import { ListenConnectionError } from './errors.js';

/** Whether the drainer holds its LISTEN connection: `off` when it has none configured (or is stopped). */
export type ListenState = 'off' | 'listening' | 'reconnecting';

export interface ListenerOptions {
  readonly connectionString: string;
  readonly channel: string;
  readonly onNotify: () => void;
  readonly logger: Logger;
  /** Told each time the connection is lost or back (the drainer's events, hence its metrics). */
  readonly onStateChange?: (state: Exclude<ListenState, 'off'>) => void;
}

/** How long one connection attempt may take: a host that never answers must not hold `start()` or `stop()`. */
export const LISTEN_CONNECT_TIMEOUT_MS = 5_000;
/** While LISTEN stays down, one reminder this often at most (a reconnect per try would flood the log). */
export const LISTEN_DOWN_REMINDER_MS = 5 * 60_000;

// Failures of a first connection that no retry mends: refused credentials, no such database or host.
// (A name that does not resolve at start is taken as a wrong host, even when the resolver says "try again".)
const MISCONFIGURED: ReadonlySet<unknown> = new Set([
  SQLSTATE.INVALID_PASSWORD,
  SQLSTATE.INVALID_AUTHORIZATION_SPECIFICATION,
  SQLSTATE.INVALID_CATALOG_NAME,
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_NONAME',
]);

/** pg's errors carry a SQLSTATE in `code`, Node's socket errors an errno name. */
const misconfigured = (error: unknown) => MISCONFIGURED.has((error as { code?: unknown } | null)?.code);

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Thrown when the LISTEN connection goes through a pooler: its notifications would stop. */
class ListenThroughPoolerError extends Error {
  override readonly name = 'ListenThroughPoolerError';
}

/**
 * A connection straight to Postgres gets its backend's pid as its cancel key; a pooler (PgBouncer)
 * hands out keys of its own. Through a transaction pooler the LISTEN's session is lent to others
 * after the statement and notifications stop coming, silently: refuse it instead.
 */
async function refusePooler(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
  const given = (client as unknown as { processID: number | null }).processID;
  if (given !== null && rows[0]?.pid !== given) {
    throw new ListenThroughPoolerError(
      `the connection reaches Postgres through a pooler (the key it was given names backend ${given}, the backend is ${rows[0]?.pid}): LISTEN needs a session on Postgres itself, so point listen.connectionString there (docs/pgbouncer.md)`,
    );
  }
}

/** Holds one connection in `LISTEN channel`, calls `onNotify` on each notification, and reconnects with backoff. */
export class NotificationListener {
  private client: pg.Client | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private downSince = 0;
  private remindedAt = 0;
  private connecting: Promise<void> | undefined;
  /** The client of the connection attempt in flight, until it listens or fails. */
  private pending: pg.Client | undefined;

  constructor(private readonly options: ListenerOptions) {}

  /**
   * Connects and listens. Rejects with {@link ListenConnectionError} when the first attempt fails
   * for a cause no retry mends (credentials, database, host); any other failure resolves and keeps
   * retrying in the background (the timer delivers meanwhile).
   */
  start(): Promise<void> {
    this.stopped = false;
    this.connecting = this.connect(true);
    return this.connecting;
  }

  get state(): ListenState {
    if (this.stopped) return 'off';
    return this.client === undefined ? 'reconnecting' : 'listening';
  }

  private async connect(first: boolean): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({
      connectionString: this.options.connectionString,
      connectionTimeoutMillis: LISTEN_CONNECT_TIMEOUT_MS,
    });
    this.pending = client;
    // Until LISTEN is in place, the catch reports a failure with its real cause; after, the connection's events do.
    let listening = false;
    client.on('notification', () => this.options.onNotify());
    client.on('error', (error) => {
      if (listening) this.lost(client, error);
    });
    client.on('end', () => {
      if (listening) this.lost(client, new Error('connection ended'));
    });
    try {
      await client.connect();
      if (this.stopped) {
        await client.end().catch(() => undefined);
        return;
      }
      await refusePooler(client);
      await client.query(`listen "${this.options.channel}"`);
      listening = true;
      this.client = client;
      this.restored();
      // Whatever was committed while we were not listening: one pass picks it up.
      this.options.onNotify();
    } catch (error) {
      await client.end().catch(() => undefined);
      if (first && (misconfigured(error) || error instanceof ListenThroughPoolerError)) {
        this.stopped = true;
        throw new ListenConnectionError(this.options.channel, error);
      }
      this.lost(client, error);
    } finally {
      if (this.pending === client) this.pending = undefined;
    }
  }

  private restored(): void {
    if (this.failures > 0) {
      const seconds = Math.round((performance.now() - this.downSince) / 1_000);
      this.options.logger.info(
        `LISTEN ${this.options.channel} restored after ${this.failures} failed attempt(s), ${seconds} s without it`,
      );
    }
    this.failures = 0;
    this.options.onStateChange?.('listening');
  }

  private lost(client: pg.Client, error: unknown): void {
    if (this.client === client) this.client = undefined;
    if (this.stopped || this.retryTimer !== undefined) return;
    this.failures += 1;
    const delay = Math.max(50, backoffDelayMs(this.failures, { baseMs: 100, maxMs: 30_000 }));
    const now = performance.now();
    if (this.failures === 1) {
      this.downSince = this.remindedAt = now;
      this.options.logger.warn(
        `LISTEN ${this.options.channel} lost: the timer delivers meanwhile; reconnecting with backoff (logged again when restored)`,
        { error: message(error) },
      );
      this.options.onStateChange?.('reconnecting');
    } else if (now - this.remindedAt >= LISTEN_DOWN_REMINDER_MS) {
      this.remindedAt = now;
      this.options.logger.warn(
        `LISTEN ${this.options.channel} still down after ${this.failures} attempts over ${Math.round((now - this.downSince) / 1_000)} s; the timer delivers meanwhile`,
        { error: message(error) },
      );
    }
    client.end().catch(() => undefined);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connecting = this.connect(false);
    }, delay);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    // Cut, not awaited (as pg does at connectionTimeoutMillis): a host that does not answer would hold this stop().
    this.pending?.connection.stream.destroy(new Error('LISTEN connection closed: the drainer stopped'));
    await this.connecting?.catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
