import { connect, createServer, type Socket } from 'node:net';

/** Where a {@link DelayingProxy} forwards to. */
export interface ProxyUpstream {
  readonly host: string;
  readonly port: number;
}

/** What `startDelayingProxy` takes. */
export interface DelayingProxyOptions {
  /** Where connections go; change it later with `setUpstream` (a server restarted on a new port). */
  readonly upstream: ProxyUpstream;
  /**
   * How long the proxy keeps the upstream connection of a client that has gone, once everything it
   * held for that client is forwarded, waiting for the upstream's answer. Default 30000 ms: far
   * longer than a request takes, so a held request is processed to its end (an upstream that sees
   * its connection close may abandon the request), yet a silent upstream cannot pin a socket forever.
   */
  readonly orphanTimeoutMs?: number;
  /** Told when a request is held, forwarded and answered. Exceptions are ignored. */
  readonly onEvent?: (event: DelayingProxyEvent) => void;
}

/** One request the proxy held back, as it stands. */
export interface HeldRequest {
  readonly id: number;
  /** The connection it came on (numbered from 1 in accept order). */
  readonly connectionId: number;
  /** `Date.now()` when its first byte arrived. */
  readonly heldAt: number;
  /** When it is due upstream (a `pause()` can make it later). */
  readonly releaseAt: number;
  /** Every byte of the request received so far. */
  readonly bytes: Buffer;
  /** `Date.now()` when it was forwarded upstream, once it was. */
  readonly releasedAt?: number;
  /** Whether its client had closed or been destroyed by then: a late write in the making. */
  readonly clientGone?: boolean;
  /** The first line of the upstream's answer (e.g. `HTTP/1.1 200 OK`), once it came. */
  readonly response?: string;
}

/** What the proxy reports to `onEvent`. */
export type DelayingProxyEvent =
  | { readonly type: 'held'; readonly request: HeldRequest }
  | { readonly type: 'released'; readonly request: HeldRequest }
  | { readonly type: 'answered'; readonly request: HeldRequest };

/** Counts since the proxy started. */
export interface DelayingProxyStats {
  readonly connections: number;
  readonly openConnections: number;
  /** Requests seen: bursts of client bytes that open a connection or follow upstream bytes. */
  readonly requests: number;
  readonly held: number;
  /** Held requests forwarded after their client had gone. */
  readonly releasedAfterClientGone: number;
  /** …of which the upstream answered (it received and processed them). */
  readonly answeredAfterClientGone: number;
}

/** A running proxy; see {@link startDelayingProxy}. */
export interface DelayingProxy {
  /** Always `127.0.0.1`. */
  readonly host: string;
  readonly port: number;
  readonly upstream: ProxyUpstream;
  /** New connections go to `upstream`; open ones keep theirs. */
  setUpstream(upstream: ProxyUpstream): void;
  /** Holds each of the next `count` requests (on any connection) for `ms` from its first byte; `count` 0 cancels what is left. */
  holdRequests(count: number, ms?: number): void;
  /** Holds the client bytes of every connection accepted from now on until `ms` after it opened; 0 stops. */
  holdNewConnections(ms: number): void;
  /** Delays every upstream→client chunk by `ms` from its arrival; 0 stops. */
  delayResponses(ms: number): void;
  /** Stops forwarding in both directions (bytes queue up) until `resume()`. */
  pause(): void;
  resume(): void;
  stats(): DelayingProxyStats;
  /** Every request held so far, oldest first. */
  heldRequests(): readonly HeldRequest[];
  /** Stops listening and destroys every socket, held bytes included. Safe to call twice. */
  close(): Promise<void>;
}

interface Chunk {
  readonly bytes: Buffer;
  due: number;
  /** Set on the first chunk of a held request: forwarding it releases the request. */
  readonly held?: HeldState;
}

interface HeldState {
  readonly id: number;
  readonly connectionId: number;
  readonly heldAt: number;
  releaseAt: number;
  bytes: Buffer[];
  releasedAt?: number;
  clientGone?: boolean;
  response?: string;
}

interface Connection {
  readonly id: number;
  readonly client: Socket;
  readonly upstream: Socket;
  readonly toUpstream: Chunk[];
  readonly toClient: Chunk[];
  /** Bytes of the connection's first `holdUntil - open` ms wait until then. */
  readonly holdUntil: number;
  /** Upstream bytes came since the last client bytes: the next client bytes start a new request. */
  upstreamSpoke: boolean;
  /** The held request the client is still sending. */
  sending?: HeldState;
  /** The held request forwarded last, until the upstream answers. */
  awaitingAnswer?: HeldState;
  /** Bytes went upstream after the client had gone: keep the upstream until it answers. */
  orphanAnswerPending: boolean;
  clientGone: boolean;
  upstreamGone: boolean;
  timer?: NodeJS.Timeout;
  orphanTimer?: NodeJS.Timeout;
}

const DEFAULT_ORPHAN_TIMEOUT_MS = 30_000;

function snapshot(state: HeldState): HeldRequest {
  return Object.freeze({ ...state, bytes: Buffer.concat(state.bytes) });
}

function firstLine(bytes: Buffer): string {
  const text = bytes.subarray(0, 200).toString('latin1');
  const end = text.indexOf('\r\n');
  return end === -1 ? text : text.slice(0, end);
}

function nonNegative(what: string, value: number): number {
  if (!Number.isInteger(value) || value < 0) throw new RangeError(`${what}: expected an integer >= 0, got ${value}`);
  return value;
}

/**
 * Starts a TCP proxy on a free loopback port that can hold, delay and pause traffic, to provoke
 * what a proxy or load balancer in front of a server does to its clients: the bytes of a held
 * request still reach the upstream after their client was killed or destroyed (a late write), and
 * the proxy then waits for the upstream's answer instead of closing at once. A "request" is a burst
 * of client bytes that opens a connection or follows upstream bytes (HTTP/1.1 without pipelining),
 * so keep-alive connections are counted right without parsing HTTP.
 *
 * @example
 * const proxy = await startDelayingProxy({ upstream: { host: '127.0.0.1', port: openfgaPort } });
 * const sink = createOpenFgaSink({ apiUrl: `http://${proxy.host}:${proxy.port}`, storeId });
 * proxy.holdRequests(1, 3_000); // the next Write reaches OpenFGA 3 s late, whatever its client does
 * proxy.setUpstream({ host: '127.0.0.1', port: restartedPort });
 * await proxy.close();
 */
export async function startDelayingProxy(options: DelayingProxyOptions): Promise<DelayingProxy> {
  let upstream: ProxyUpstream = { ...options.upstream };
  const orphanTimeoutMs = nonNegative('orphanTimeoutMs', options.orphanTimeoutMs ?? DEFAULT_ORPHAN_TIMEOUT_MS);
  const connections = new Set<Connection>();
  const held: HeldState[] = [];
  const counts = { connections: 0, requests: 0, releasedAfterClientGone: 0, answeredAfterClientGone: 0 };
  let holdCount = 0;
  let holdMs = 0;
  let holdConnectionsMs = 0;
  let responseDelayMs = 0;
  let paused = false;
  let closed = false;

  const emit = (type: DelayingProxyEvent['type'], state: HeldState) => {
    try {
      options.onEvent?.({ type, request: snapshot(state) });
    } catch {
      // an observer must not break the traffic it observes
    }
  };

  const dropUpstream = (conn: Connection) => {
    clearTimeout(conn.orphanTimer);
    conn.upstream.destroy();
  };

  /** Forwards what is due, in order, and sets a timer for the rest. */
  const flush = (conn: Connection) => {
    clearTimeout(conn.timer);
    conn.timer = undefined;
    if (paused || closed) return;
    const now = Date.now();
    while (conn.toUpstream[0] !== undefined && conn.toUpstream[0].due <= now && !conn.upstreamGone) {
      const chunk = conn.toUpstream.shift() as Chunk;
      conn.upstream.write(chunk.bytes);
      if (conn.clientGone) conn.orphanAnswerPending = true;
      if (chunk.held) {
        chunk.held.releasedAt = now;
        chunk.held.clientGone = conn.clientGone;
        if (conn.clientGone) counts.releasedAfterClientGone += 1;
        conn.awaitingAnswer = chunk.held;
        emit('released', chunk.held);
      }
    }
    while (conn.toClient[0] !== undefined && conn.toClient[0].due <= now && !conn.clientGone) {
      conn.client.write((conn.toClient.shift() as Chunk).bytes);
    }
    if (conn.upstreamGone && conn.toClient.length === 0) conn.client.end();
    // A gone client's last bytes are out: wait for the answer (or the timeout), then let go.
    if (
      conn.clientGone &&
      conn.toUpstream.length === 0 &&
      !conn.orphanAnswerPending &&
      conn.awaitingAnswer === undefined
    )
      dropUpstream(conn);
    const next = Math.min(conn.toUpstream[0]?.due ?? Infinity, conn.toClient[0]?.due ?? Infinity);
    if (next !== Infinity) conn.timer = setTimeout(() => flush(conn), Math.max(0, next - now));
  };

  const onClientData = (conn: Connection, bytes: Buffer) => {
    const now = Date.now();
    const last = conn.toUpstream.at(-1);
    if (conn.upstreamSpoke) {
      conn.upstreamSpoke = false;
      counts.requests += 1;
      conn.sending = undefined;
      let releaseAt = Math.max(now, conn.holdUntil);
      if (holdCount > 0) {
        holdCount -= 1;
        releaseAt = Math.max(releaseAt, now + holdMs);
      }
      if (releaseAt > now) {
        const state: HeldState = { id: held.length + 1, connectionId: conn.id, heldAt: now, releaseAt, bytes: [bytes] };
        held.push(state);
        conn.sending = state;
        conn.toUpstream.push({ bytes, due: Math.max(releaseAt, last?.due ?? 0), held: state });
        emit('held', state);
      } else {
        conn.toUpstream.push({ bytes, due: Math.max(now, last?.due ?? 0) });
      }
    } else {
      // The rest of the current request: it goes with (or right after) its first bytes.
      conn.sending?.bytes.push(bytes);
      conn.toUpstream.push({ bytes, due: Math.max(now, last?.due ?? 0) });
    }
    flush(conn);
  };

  const onUpstreamData = (conn: Connection, bytes: Buffer) => {
    conn.upstreamSpoke = true;
    conn.orphanAnswerPending = false;
    const answered = conn.awaitingAnswer;
    if (answered !== undefined) {
      conn.awaitingAnswer = undefined;
      answered.response = firstLine(bytes);
      if (answered.clientGone) counts.answeredAfterClientGone += 1;
      emit('answered', answered);
    }
    if (conn.clientGone) {
      if (conn.toUpstream.length === 0) dropUpstream(conn);
      return;
    }
    const last = conn.toClient.at(-1);
    conn.toClient.push({ bytes, due: Math.max(Date.now() + responseDelayMs, last?.due ?? 0) });
    flush(conn);
  };

  const onClientGone = (conn: Connection) => {
    if (conn.clientGone) return;
    conn.clientGone = true;
    conn.toClient.length = 0;
    if (conn.toUpstream.length === 0 && conn.awaitingAnswer === undefined) {
      dropUpstream(conn);
      return;
    }
    // Held bytes still go upstream; the upstream connection stays until it answers them.
    if (orphanTimeoutMs > 0)
      conn.orphanTimer = setTimeout(
        () => dropUpstream(conn),
        orphanTimeoutMs + Math.max(0, (conn.toUpstream.at(-1)?.due ?? 0) - Date.now()),
      );
    flush(conn);
  };

  const accept = (client: Socket) => {
    if (closed) {
      client.destroy();
      return;
    }
    counts.connections += 1;
    const now = Date.now();
    const conn: Connection = {
      id: counts.connections,
      client,
      upstream: connect({ host: upstream.host, port: upstream.port }),
      toUpstream: [],
      toClient: [],
      holdUntil: holdConnectionsMs > 0 ? now + holdConnectionsMs : 0,
      upstreamSpoke: true,
      orphanAnswerPending: false,
      clientGone: false,
      upstreamGone: false,
    };
    connections.add(conn);
    client.setNoDelay(true);
    conn.upstream.setNoDelay(true);
    client.on('data', (bytes: Buffer) => onClientData(conn, bytes));
    client.on('end', () => onClientGone(conn));
    client.on('close', () => onClientGone(conn));
    client.on('error', () => onClientGone(conn));
    conn.upstream.on('data', (bytes: Buffer) => onUpstreamData(conn, bytes));
    const finish = () => {
      clearTimeout(conn.timer);
      clearTimeout(conn.orphanTimer);
      connections.delete(conn);
    };
    const upstreamGone = () => {
      if (conn.upstreamGone) return;
      conn.upstreamGone = true;
      conn.toUpstream.length = 0;
      clearTimeout(conn.orphanTimer);
      if (conn.clientGone) finish();
      else flush(conn); // what the upstream sent goes out (delayed as asked), then the client is ended
    };
    conn.upstream.on('end', upstreamGone);
    conn.upstream.on('close', () => {
      upstreamGone();
      if (conn.clientGone) finish();
    });
    conn.upstream.on('error', () => {
      // Refused (the server is down) or reset: the client sees its connection end, as without a proxy.
      if (!conn.clientGone) client.destroy();
    });
    client.once('close', () => {
      if (conn.upstreamGone) finish();
    });
  };

  const server = createServer(accept);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as { port: number }).port;

  return {
    host: '127.0.0.1',
    port,
    get upstream() {
      return upstream;
    },
    setUpstream(next) {
      upstream = { host: next.host, port: next.port };
    },
    holdRequests(count, ms = 0) {
      holdCount = nonNegative('holdRequests count', count);
      holdMs = nonNegative('holdRequests ms', ms);
    },
    holdNewConnections(ms) {
      holdConnectionsMs = nonNegative('holdNewConnections ms', ms);
    },
    delayResponses(ms) {
      responseDelayMs = nonNegative('delayResponses ms', ms);
    },
    pause() {
      paused = true;
      for (const conn of connections) flush(conn);
    },
    resume() {
      paused = false;
      for (const conn of connections) flush(conn);
    },
    stats() {
      return { ...counts, openConnections: connections.size, held: held.length };
    },
    heldRequests() {
      return held.map(snapshot);
    },
    async close() {
      if (closed) return;
      closed = true;
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const conn of connections) {
        clearTimeout(conn.timer);
        clearTimeout(conn.orphanTimer);
        conn.client.destroy();
        conn.upstream.destroy();
      }
      connections.clear();
      await stopped;
    },
  };
}
