/** `flush` gave up: the partition's intents were not all delivered within `timeoutMs`. */
export class FlushTimeoutError extends Error {
  override readonly name = 'FlushTimeoutError';
  readonly partitionKey: string;
  /** Ids still pending when the time ran out; empty when they could not even be read in time (a busy pool). */
  readonly pendingIds: readonly string[];
  constructor(partitionKey: string, timeoutMs: number, pendingIds: readonly string[] | undefined) {
    super(
      pendingIds === undefined
        ? `flush(${JSON.stringify(partitionKey)}): the partition's pending intents could not even be read within ${timeoutMs} ms (is the pool busy?)`
        : `flush(${JSON.stringify(partitionKey)}): ${pendingIds.length} intent(s) not delivered within ${timeoutMs} ms (ids ${pendingIds.join(', ')})`,
    );
    this.partitionKey = partitionKey;
    this.pendingIds = pendingIds ?? [];
  }
}

/** `flush` failed: an intent of the partition was poisoned; `lastError` says why. */
export class FlushPoisonedError extends Error {
  override readonly name = 'FlushPoisonedError';
  readonly partitionKey: string;
  readonly id: string;
  readonly lastError: string | null;
  constructor(partitionKey: string, id: string, lastError: string | null) {
    super(`flush(${JSON.stringify(partitionKey)}): intent ${id} was poisoned: ${lastError ?? 'no error recorded'}`);
    this.partitionKey = partitionKey;
    this.id = id;
    this.lastError = lastError;
  }
}

/** The drainer was stopped while a `flush` was waiting. */
export class DrainerStoppedError extends Error {
  override readonly name = 'DrainerStoppedError';
  constructor(message = 'the drainer was stopped') {
    super(message);
  }
}

/**
 * `start()` could not open the LISTEN connection for a cause no retry mends: refused credentials, a
 * database or host that does not exist. `cause` is pg's or the socket's error. Fix `listen.connectionString`
 * (or pass `listen: false`: the timer alone still delivers everything).
 */
export class ListenConnectionError extends Error {
  override readonly name = 'ListenConnectionError';
  readonly channel: string;
  constructor(channel: string, cause: unknown) {
    super(
      `LISTEN ${channel}: the first connection failed: ${cause instanceof Error ? cause.message : String(cause)} (check listen.connectionString, or pass listen: false to rely on the timer)`,
      { cause },
    );
    this.channel = channel;
  }
}
