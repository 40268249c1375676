import pg from 'pg';
import { backoffDelayMs } from './backoff.js';
import type { Logger } from './events.js';

export interface ListenerOptions {
  readonly connectionString: string;
  readonly channel: string;
  readonly onNotify: () => void;
  readonly logger: Logger;
}

/** How long one connection attempt may take: a host that never answers must not hold `start()` or `stop()`. */
export const LISTEN_CONNECT_TIMEOUT_MS = 5_000;

/** Holds one connection in `LISTEN channel`, calls `onNotify` on each notification, and reconnects with backoff. */
export class NotificationListener {
  private client: pg.Client | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private connecting: Promise<void> | undefined;
  /** The client of the connection attempt in flight, until it listens or fails. */
  private pending: pg.Client | undefined;

  constructor(private readonly options: ListenerOptions) {}

  /** Connects and listens; resolves after the first attempt (successful or not: it keeps retrying). */
  start(): Promise<void> {
    this.stopped = false;
    this.connecting = this.connect();
    return this.connecting;
  }

  get listening(): boolean {
    return this.client !== undefined;
  }

  private async connect(): Promise<void> {
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
      await client.query(`listen "${this.options.channel}"`);
      listening = true;
      this.client = client;
      this.failures = 0;
      // Whatever was committed while we were not listening: one pass picks it up.
      this.options.onNotify();
    } catch (error) {
      await client.end().catch(() => undefined);
      this.lost(client, error);
    } finally {
      if (this.pending === client) this.pending = undefined;
    }
  }

  private lost(client: pg.Client, error: unknown): void {
    if (this.client === client) this.client = undefined;
    if (this.stopped || this.retryTimer !== undefined) return;
    this.failures += 1;
    const delay = Math.max(50, backoffDelayMs(this.failures, { baseMs: 100, maxMs: 30_000 }));
    this.options.logger.warn(`LISTEN ${this.options.channel} lost; reconnecting in ${delay} ms`, {
      error: error instanceof Error ? error.message : String(error),
    });
    client.end().catch(() => undefined);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connecting = this.connect();
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
